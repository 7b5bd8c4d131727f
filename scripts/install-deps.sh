#!/usr/bin/env bash
# Installs the Debian 12 packages refit needs to build and test, and nothing else. Quiet when
# everything is there. As root it runs apt-get; otherwise it prints the command to run.
# REFIT_SKIP_DEPS=1 skips the check (for machines that provide the libraries another way).
set -euo pipefail

packages=(libopenmpi-dev openmpi-bin libhdf5-dev hdf5-tools libhwloc-dev libjansson-dev
  libxxhash-dev pkg-config cmake python3-h5py gcc make)

if [ "${REFIT_SKIP_DEPS:-0}" = 1 ]; then
  exit 0
fi
if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "install-deps: no dpkg here (not Debian); install the equivalents of:" \
    "${packages[*]}" >&2
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  if [ "$status" != "install ok installed" ]; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]}" >&2
  echo "install-deps: run: sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
