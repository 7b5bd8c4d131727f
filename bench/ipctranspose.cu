// Issue 16: is a JAX-order transpose slower through another process's mapping than in one
// process, apart from refit, and does the tile shape or the kind of mapping change that?
// refit's two-process JAX-order refit of Llama-3.1-8B runs its transpose kernel (copy_pairs,
// region_cuda.cu) in 9.1-9.2 ms of GPU time against 7.9 ms in one process, while its HF-order
// copy kernel loses nothing through the same mapping. This probe transposes Llama-3.1-8B's MLP
// shapes (bf16, [i][o] -> [o][i]) between this process's memory and a parent's, mapped with
// cudaIpc (allocations rounded to 2 MiB, as refit's are) or as a CUDA VMM allocation passed as
// a file descriptor, pulling and pushing, with refit's tile and four others. Median of 10
// after 2, CUDA events on the copying stream, against a memcpy of the same bytes.
//   nvcc -O3 -arch=sm_90 -std=c++17 -o ipctranspose bench/ipctranspose.cu -lcuda && ./ipctranspose
#include "ipc_probe.h"

// The parent's two cudaIpc exports, and (SCM_RIGHTS) the VMM allocation's file descriptor.
struct Msg {
  cudaIpcMemHandle_t src, dst;
  size_t vmm_bytes;
};

// A JAX-order piece's transpose: the source holds the weight as [n_i rows][n_o columns]
// (dense along o), the destination as HF's [n_o rows][n_i columns]. A block moves one tile of
// TI x TO elements through shared memory with 4-byte words on both sides, as refit's
// copy_pairs does (TI 64, TO 128 there): a warp reads TO elements of a source row and writes
// TI elements of a destination row. Blocks walk i first.
// Stages source rows i0 .. i0 + TI - 1, elements o0 .. o0 + TO - 1, in shared memory as
// tile[i][o]: each lane reads 4-byte words (two elements of a row) and all loads are issued
// before the stores.
template <int TI, int TO>
__device__ __forceinline__ void load_tile(const uint16_t *__restrict__ src, int64_t n_o, int64_t i0,
                                          int64_t o0, uint16_t (*tile)[TO + 1]) {
  constexpr int RW = TI / 8, HW = TO / 64;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t v[RW][HW];
#pragma unroll
  for (int k = 0; k < RW; k++)
#pragma unroll
    for (int h = 0; h < HW; h++)
      v[k][h] =
          __ldg((const unsigned int *)(src + (i0 + warp + 8 * k) * n_o + o0 + 64 * h + 2 * lane));
#pragma unroll
  for (int k = 0; k < RW; k++)
#pragma unroll
    for (int h = 0; h < HW; h++) {
      tile[warp + 8 * k][64 * h + 2 * lane] = (uint16_t)v[k][h];
      tile[warp + 8 * k][64 * h + 2 * lane + 1] = (uint16_t)(v[k][h] >> 16);
    }
  __syncthreads();
}

template <int TI, int TO>
__global__ void __launch_bounds__(256)
    tpairs(const uint16_t *__restrict__ src, uint16_t *__restrict__ dst, int64_t n_o, int64_t n_i,
           int64_t tiles_i) {
  __shared__ uint16_t tile[TI][TO + 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t i0 = (blockIdx.x % tiles_i) * TI, o0 = (blockIdx.x / tiles_i) * TO;
  constexpr int OW = TO / 8, IW = TI / 64;
  load_tile<TI, TO>(src, n_o, i0, o0, tile);
#pragma unroll
  for (int k = 0; k < OW; k++) {
    const int o = warp + 8 * k;
#pragma unroll
    for (int j = 0; j < IW; j++) {
      const int i = 2 * (lane + 32 * j);
      *(uint32_t *)(dst + (o0 + o) * n_i + i0 + i) = tile[i][o] | (uint32_t)tile[i + 1][o] << 16;
    }
  }
}

// The same tile with the destination written 8 bytes a lane (TI 128: a warp writes 256
// contiguous bytes of a row in one instruction).
template <int TO>
__global__ void __launch_bounds__(256)
    tquads(const uint16_t *__restrict__ src, uint16_t *__restrict__ dst, int64_t n_o, int64_t n_i,
           int64_t tiles_i) {
  constexpr int TI = 128;
  __shared__ uint16_t tile[TI][TO + 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t i0 = (blockIdx.x % tiles_i) * TI, o0 = (blockIdx.x / tiles_i) * TO;
  constexpr int OW = TO / 8;
  load_tile<TI, TO>(src, n_o, i0, o0, tile);
#pragma unroll
  for (int k = 0; k < OW; k++) {
    const int o = warp + 8 * k, i = 4 * lane;
    uint2 w;
    w.x = tile[i][o] | (uint32_t)tile[i + 1][o] << 16;
    w.y = tile[i + 2][o] | (uint32_t)tile[i + 3][o] << 16;
    *(uint2 *)(dst + (o0 + o) * n_i + i0 + i) = w;
  }
}

__global__ void copy16(const int4 *__restrict__ src, int4 *__restrict__ dst, size_t n16) {
  const size_t base = (size_t)blockIdx.x * 8192;
  for (int k = 0; k < 32; k++) {
    size_t at = base + (size_t)k * 256 + threadIdx.x;
    if (at < n16)
      dst[at] = src[at];
  }
}

__global__ void pattern(uint16_t *x, size_t n) {
  for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
       k += (size_t)gridDim.x * blockDim.x)
    x[k] = (uint16_t)(k * 0x9e3779b1u >> 7);
}

struct Mat {
  size_t off; // bytes from the arena's start, the same on both sides
  int64_t n_o, n_i;
};

int main() {
  // Llama-3.1-8B's MLP shapes, gate/up (o 14336, i 4096) and down (o 4096, i 14336), 12 of
  // each: 2.82 GB, far past the 60 MB L2.
  std::vector<Mat> mats;
  size_t total = 0;
  for (int k = 0; k < 24; k++) {
    Mat m = {total, k % 3 == 2 ? 4096 : 14336, k % 3 == 2 ? 14336 : 4096};
    mats.push_back(m);
    total += (size_t)m.n_o * m.n_i * 2;
  }
  const size_t mib2 = (size_t)2 << 20, rounded = (total + mib2 - 1) / mib2 * mib2;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
    perror("socketpair");
    return 1;
  }
  pid_t pid = fork();
  if (pid > 0) { // the owner of the peer arenas: two cudaMalloc (2 MiB multiples), one VMM pair
    CK(cudaSetDevice(0));
    CU(cuInit(0));
    Msg m = {};
    m.src = ipc_export(rounded);
    m.dst = ipc_export(rounded);
    int fd = vmm_export(2 * total + mib2, &m.vmm_bytes);
    send_with_fd(sv[0], fd, &m, sizeof m);
    return parent_wait(sv[0], pid);
  }
  CK(cudaSetDevice(0));
  CU(cuInit(0));
  Msg m;
  int fd = recv_with_fd(sv[1], &m, sizeof m);
  char *own_src, *own_dst, *peer_src, *peer_dst;
  CK(cudaMalloc(&own_src, rounded));
  CK(cudaMalloc(&own_dst, rounded));
  pattern<<<4096, 256, 0>>>((uint16_t *)own_src, total / 2);
  CK(cudaDeviceSynchronize());
  CK(cudaIpcOpenMemHandle((void **)&peer_src, m.src, cudaIpcMemLazyEnablePeerAccess));
  CK(cudaIpcOpenMemHandle((void **)&peer_dst, m.dst, cudaIpcMemLazyEnablePeerAccess));
  char *vmm = vmm_import(fd, m.vmm_bytes);
  char *vmm_src = vmm, *vmm_dst = vmm + (total + mib2 - 1) / mib2 * mib2;
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  double ref = 0;
  auto run = [&](const char *name, const std::function<void()> &fn) {
    double med = median_ms(s, fn);
    if (ref == 0)
      ref = med;
    printf("%-58s %8.3f ms %7.1f GB/s  %5.3f of own memcpy\n", name, med, total / med / 1e6,
           ref / med);
  };
  printf("# %zu bytes in %zu bf16 matrices (JAX order -> HF order), one GPU, two processes\n",
         total, mats.size());
  run("own -> own: one memcpy (the limit)",
      [&] { CK(cudaMemcpyAsync(own_dst, own_src, total, cudaMemcpyDeviceToDevice, s)); });
  run("own -> own: copy kernel", [&] {
    size_t n16 = total / 16;
    copy16<<<(unsigned)((n16 + 8191) / 8192), 256, 0, s>>>((const int4 *)own_src, (int4 *)own_dst,
                                                           n16);
  });
  run("peer cudaIpc -> own: copy kernel", [&] {
    size_t n16 = total / 16;
    copy16<<<(unsigned)((n16 + 8191) / 8192), 256, 0, s>>>((const int4 *)peer_src, (int4 *)own_dst,
                                                           n16);
  });
  struct Place {
    const char *name;
    char *src, *dst;
  } places[] = {{"own -> own", own_src, own_dst},
                {"peer cudaIpc -> own (pull)", peer_src, own_dst},
                {"own -> peer cudaIpc (push)", own_src, peer_dst},
                {"peer VMM -> own (pull)", vmm_src, own_dst},
                {"own -> peer VMM (push)", own_src, vmm_dst}};
  // The kernels: a name and a launch of one matrix.
  using Launch = std::function<void(const uint16_t *, uint16_t *, const Mat &)>;
  struct Variant {
    const char *name;
    Launch go;
  };
  auto grid = [](const Mat &mt, int ti, int to) {
    return (unsigned)((mt.n_i / ti) * (mt.n_o / to));
  };
  const Variant variants[] = {
      {"pairs 64x128 (refit's tile)",
       [&](const uint16_t *x, uint16_t *y, const Mat &mt) {
         tpairs<64, 128><<<grid(mt, 64, 128), 256, 0, s>>>(x, y, mt.n_o, mt.n_i, mt.n_i / 64);
       }},
      {"pairs 64x64",
       [&](const uint16_t *x, uint16_t *y, const Mat &mt) {
         tpairs<64, 64><<<grid(mt, 64, 64), 256, 0, s>>>(x, y, mt.n_o, mt.n_i, mt.n_i / 64);
       }},
      {"pairs 128x64",
       [&](const uint16_t *x, uint16_t *y, const Mat &mt) {
         tpairs<128, 64><<<grid(mt, 128, 64), 256, 0, s>>>(x, y, mt.n_o, mt.n_i, mt.n_i / 128);
       }},
      {"quads 128x64 (8-byte stores)",
       [&](const uint16_t *x, uint16_t *y, const Mat &mt) {
         tquads<64><<<grid(mt, 128, 64), 256, 0, s>>>(x, y, mt.n_o, mt.n_i, mt.n_i / 128);
       }},
      {"quads 128x128 (8-byte stores)",
       [&](const uint16_t *x, uint16_t *y, const Mat &mt) {
         tquads<128><<<grid(mt, 128, 128), 256, 0, s>>>(x, y, mt.n_o, mt.n_i, mt.n_i / 128);
       }},
  };
  auto all = [&](const Variant &v, const char *src, char *dst) {
    for (const Mat &mt : mats)
      v.go((const uint16_t *)(src + mt.off), (uint16_t *)(dst + mt.off), mt);
  };
  // Each kernel's own -> own result, sampled: y[o][i] == x[i][o] in every matrix.
  std::vector<uint16_t> hx(total / 2), hy(total / 2);
  CK(cudaMemcpy(hx.data(), own_src, total, cudaMemcpyDeviceToHost));
  for (const Variant &v : variants) {
    CK(cudaMemset(own_dst, 0, total));
    all(v, own_src, own_dst);
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    CK(cudaMemcpy(hy.data(), own_dst, total, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (const Mat &mt : mats) {
      const uint16_t *x = hx.data() + mt.off / 2, *y = hy.data() + mt.off / 2;
      for (int64_t o = 0; o < mt.n_o; o += 7)
        for (int64_t i = 0; i < mt.n_i; i += 5)
          bad += y[o * mt.n_i + i] != x[i * mt.n_o + o];
    }
    printf("# %s: %s\n", v.name, bad ? "WRONG" : "a correct transpose (sampled)");
  }
  for (const Place &pl : places)
    for (const Variant &v : variants) {
      char name[128];
      snprintf(name, sizeof name, "%s: %s", pl.name, v.name);
      run(name, [&] { all(v, pl.src, pl.dst); });
    }
  CK(cudaIpcCloseMemHandle(peer_src));
  CK(cudaIpcCloseMemHandle(peer_dst));
  child_done(sv[1]);
  return 0;
}
