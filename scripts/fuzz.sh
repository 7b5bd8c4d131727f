#!/usr/bin/env bash
# Runs every fuzz target of a -DREFIT_FUZZ=ON build for a bounded time: fuzz.sh BUILD_DIR
# SECONDS SEED [TARGET...]. Each starts from its seed corpus (tests/fuzz/corpus/TARGET) plus
# what earlier runs found (BUILD_DIR/fuzz-corpus/TARGET, which is where new inputs go: the
# committed corpus stays small). A crash, leak, timeout or out-of-memory leaves its input in
# BUILD_DIR/fuzz-crashes/ and makes the script exit 1 after the other targets ran; replay it
# with `BUILD_DIR/tests/fuzz/fuzz_TARGET FILE` and, once fixed, add it to
# tests/fuzz/regressions/TARGET/, which ctest replays in every build.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 3 ]; then
  echo "usage: scripts/fuzz.sh BUILD_DIR SECONDS SEED [TARGET...]" >&2
  exit 2
fi
build=$1 seconds=$2 seed=$3
shift 3
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(config hf_config safetensors safetensors_index checkpoint_hdf5 results
    checkpoint_fp8 cluster)
fi
mkdir -p "$build/fuzz-crashes"
# The targets write a file per input: memory is much faster than disk where there is room.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
  export TMPDIR=/dev/shm
fi
# A file that claims gigabytes of rows makes a reader ask for them: such a request fails
# (NULL, which the readers report as out of memory) rather than counting as a crash.
export ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1:max_allocation_size_mb=1024}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
failed=()
for t in "${targets[@]}"; do
  bin=$build/tests/fuzz/fuzz_$t
  if [ ! -x "$bin" ]; then
    echo "fuzz: $bin is not built; run 'make fuzz'" >&2
    exit 2
  fi
  mkdir -p "$build/fuzz-corpus/$t"
  echo "fuzz: $t for ${seconds}s, -seed=$seed"
  # -timeout: one input taking seconds is a hang; -rss_limit_mb: a file that makes a reader
  # allocate gigabytes is a bug too.
  if ! "$bin" -seed="$seed" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=8192 -print_final_stats=1 \
    -artifact_prefix="$build/fuzz-crashes/$t-" \
    "$build/fuzz-corpus/$t" "tests/fuzz/corpus/$t" >"$build/fuzz-$t.log" 2>&1; then
    failed+=("$t")
    echo "fuzz: $t FAILED; the report is $build/fuzz-$t.log:" >&2
    grep -E "ERROR|SUMMARY|Test unit written|^    #[0-9]+ " "$build/fuzz-$t.log" | head -40 >&2
  fi
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$build/fuzz-$t.log" |
    sed "s/^/fuzz: $t: /" || true
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]} (inputs in $build/fuzz-crashes/)" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, no failure"
