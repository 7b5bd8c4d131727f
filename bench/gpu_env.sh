# Sourced by the GPU bench scripts (bench/gpu.sh, bench/moe_gpu.sh) after they cd to the source
# tree and set OUT: the environment every GPU job needs, a log line helper, and the headers the
# lent machine lacks, from carry/deps (Debian's -dev packages unpacked with dpkg -x; their .so
# links are pointed at the system's libraries).
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
if [ -d carry/deps/usr/include ]; then
  lib=carry/deps/usr/lib/x86_64-linux-gnu
  ln -sfn /usr/lib/x86_64-linux-gnu/libjansson.so.4 $lib/libjansson.so
  ln -sfn /usr/lib/x86_64-linux-gnu/libxxhash.so.0 $lib/libxxhash.so
  export PKG_CONFIG_SYSROOT_DIR=$PWD/carry/deps PKG_CONFIG_PATH=$PWD/$lib/pkgconfig
fi
