# Sourced by the GPU bench scripts (bench/gpu.sh, bench/moe_gpu.sh) after they cd to the source
# tree and set OUT: the environment every GPU job needs, a log line helper, and the headers the
# lent machine lacks, from carry/deps (Debian's -dev packages unpacked with dpkg -x; their .so
# links are pointed at the system's libraries).
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
# Each line carries the seconds since the script began, so a call that meets the 600 s
# limit says which step took the time.
log() { echo "== [${SECONDS}s] $*" | tee -a "$OUT/summary.txt"; }
MPI=(mpirun --oversubscribe -x NCCL_NVLS_ENABLE=0)
# job NAME CMD...: one refit job, its output in $OUT/NAME.txt with its exit code, the last
# JOB_TAIL lines (default 12) without the per-rank log, placement and REFIT_TIMELINE lines in
# the summary; each job ends after JOB_TIMEOUT seconds (default 300).
job() {
  local name=$1
  shift
  log "$name: $*"
  timeout "${JOB_TIMEOUT:-300}" "$@" >"$OUT/$name.txt" 2>&1
  echo "exit $?" >>"$OUT/$name.txt"
  grep -v '^refit\[' "$OUT/$name.txt" | grep -v '^#  rank' | grep -v '^timeline rank' |
    tail -"${JOB_TAIL:-12}" |
    tee -a "$OUT/summary.txt"
}
# build_gpu: configures and builds build-gpu (Release) unless BUILT=1 says it is there.
build_gpu() {
  [ "${BUILT:-0}" = 1 ] && [ -x build-gpu/refit ] && return 0
  log "build"
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >"$OUT/build.txt" 2>&1 &&
    cmake --build build-gpu -j"$(nproc)" >>"$OUT/build.txt" 2>&1 || {
    tail -40 "$OUT/build.txt"
    return 1
  }
}
# build_refit_and_probes: unless build-gpu/refit is there, builds its refit target with
# bench/ipcpieces.cu beside it, and ../shared/probes/ipccopy.cu when carried as
# carry/probes/ipccopy.cu (bench/timeline_gpu.sh, bench/mapping_gpu.sh).
build_refit_and_probes() {
  [ -x build-gpu/refit ] && return 0
  log "build (REFIT_GIT_COMMIT=${REFIT_GIT_COMMIT:-from .git})"
  mkdir -p build-gpu
  (nvcc -O3 -arch=sm_90 -std=c++17 -o build-gpu/ipcpieces bench/ipcpieces.cu -lcuda \
    >"$OUT/probe-build.txt" 2>&1) &
  if [ -f carry/probes/ipccopy.cu ]; then
    (nvcc -O3 -arch=sm_90 -o build-gpu/ipccopy carry/probes/ipccopy.cu -lcuda \
      >>"$OUT/probe-build.txt" 2>&1) &
  fi
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >"$OUT/build.txt" 2>&1 &&
    cmake --build build-gpu -j"$(nproc)" --target refit >>"$OUT/build.txt" 2>&1 || {
    tail -40 "$OUT/build.txt"
    return 1
  }
  wait
  log "built in $SECONDS s"
}
if [ -d carry/deps/usr/include ]; then
  lib=carry/deps/usr/lib/x86_64-linux-gnu
  ln -sfn /usr/lib/x86_64-linux-gnu/libjansson.so.4 $lib/libjansson.so
  ln -sfn /usr/lib/x86_64-linux-gnu/libxxhash.so.0 $lib/libxxhash.so
  export PKG_CONFIG_SYSROOT_DIR=$PWD/carry/deps PKG_CONFIG_PATH=$PWD/$lib/pkgconfig
fi
# gpu_tests: builds build-gpu (build_gpu), names the GPU in OUT/gpu.txt and runs the GPU tests
# into OUT/ctest_gpu.txt, their verdicts into the summary; returns 1 if the build failed.
gpu_tests() {
  build_gpu || return 1
  log "built"
  nvidia-smi --query-gpu=name,memory.total --format=csv >"$OUT/gpu.txt" 2>&1
  export REFIT_MODEL_DIR=$PWD/configs/models
  (cd build-gpu && timeout 200 ctest -L gpu --output-on-failure) >"$OUT/ctest_gpu.txt" 2>&1
  log "ctest -L gpu: exit $?"
  grep -E "Test +#|tests passed|Failed" "$OUT/ctest_gpu.txt" | tee -a "$OUT/summary.txt"
}
