#!/usr/bin/env bash
# Installs the Debian 12 packages refit needs to build and test, and nothing else. Quiet when
# everything is there. As root it runs apt-get; otherwise it prints the command to run.
# REFIT_SKIP_DEPS=1 skips the check (for machines that provide the libraries another way).
set -euo pipefail

# python3-numpy: the Python binding's test (tests/api). slurm-wlm and munge: the slurm test
# starts its own munged, slurmctld and slurmd.
# clang, clang-format and libclang-rt-14-dev (libFuzzer and clang's sanitizer runtimes, only a
# recommendation of clang): `make fuzz` and `make format-check`.
packages=(libopenmpi-dev openmpi-bin libhdf5-dev hdf5-tools libhwloc-dev libjansson-dev
  libxxhash-dev pkg-config cmake python3-h5py python3-numpy gcc make slurm-wlm munge clang
  clang-format libclang-rt-14-dev)
# Optional: tried once, and the install carries on without them. chromium renders the HTML
# report in the browser test, which skips when it is absent.
optional=(chromium)

if [ "${REFIT_SKIP_DEPS:-0}" = 1 ]; then
  exit 0
fi
if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "install-deps: no dpkg here (not Debian); install the equivalents of:" \
    "${packages[*]}" >&2
  exit 0
fi

installed() {
  [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]
}
missing=()
for p in "${packages[@]}"; do
  installed "$p" || missing+=("$p")
done
missing_optional=()
for p in "${optional[@]}"; do
  installed "$p" || missing_optional+=("$p")
done
# An optional package that failed to install is not retried on its own at every `make test`
# (which should stay quiet): the marker remembers the failure, and the next install of a
# required package tries the optional ones again.
tried=/var/lib/refit-optional-tried
if [ ${#missing_optional[@]} -gt 0 ] && [ -f "$tried" ] && [ ${#missing[@]} -eq 0 ]; then
  missing_optional=()
fi
if [ ${#missing[@]} -eq 0 ] && [ ${#missing_optional[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  if [ ${#missing[@]} -eq 0 ]; then
    exit 0 # only optional packages are missing: nothing to insist on
  fi
  echo "install-deps: missing packages: ${missing[*]}" >&2
  echo "install-deps: run: sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi

# Installing munge and slurm-wlm on a systemd machine would start munge.service, slurmctld and
# slurmd with the system's configuration. Nothing here needs them (the slurm test runs its own
# daemons on its own socket and ports), so service starts are refused for the length of the
# install through policy-rc.d, unless the machine already has one (containers usually do).
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# Written by refit install-deps for the length of an install.\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  trap 'rm -f "$policy"' EXIT
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
elif ! apt-get update; then
  # Only optional packages are missing; a failed update must not fail the install.
  missing_optional=()
  touch "$tried"
  echo "install-deps: apt-get update failed; optional packages not installed" >&2
fi
if [ ${#missing_optional[@]} -gt 0 ]; then
  echo "install-deps: installing optional ${missing_optional[*]}" >&2
  if DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    "${missing_optional[@]}"; then
    rm -f "$tried"
  else
    echo "install-deps: optional packages not installed (${missing_optional[*]}); the tests" \
      "that need them will skip" >&2
    touch "$tried"
  fi
fi
