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
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <vector>

#define CK(x)                                                                                      \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));           \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

#define CU(x)                                                                                      \
  do {                                                                                             \
    CUresult r_ = (x);                                                                             \
    if (r_ != CUDA_SUCCESS) {                                                                      \
      const char *s_;                                                                              \
      cuGetErrorString(r_, &s_);                                                                   \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_);                               \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

// The parent's two cudaIpc exports, and (SCM_RIGHTS) the VMM allocation's file descriptor.
struct Msg {
  cudaIpcMemHandle_t src, dst;
  size_t vmm_bytes;
};

static void send_msg(int sock, int fd, const Msg &m) {
  struct msghdr h = {};
  struct iovec io = {(void *)&m, sizeof m};
  char ctl[CMSG_SPACE(sizeof(int))] = {};
  h.msg_iov = &io;
  h.msg_iovlen = 1;
  h.msg_control = ctl;
  h.msg_controllen = sizeof ctl;
  struct cmsghdr *c = CMSG_FIRSTHDR(&h);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(int));
  if (sendmsg(sock, &h, 0) != (ssize_t)sizeof m) {
    perror("sendmsg");
    exit(1);
  }
}

static int recv_msg(int sock, Msg *m) {
  struct msghdr h = {};
  struct iovec io = {m, sizeof *m};
  char ctl[CMSG_SPACE(sizeof(int))] = {};
  h.msg_iov = &io;
  h.msg_iovlen = 1;
  h.msg_control = ctl;
  h.msg_controllen = sizeof ctl;
  if (recvmsg(sock, &h, MSG_WAITALL) != (ssize_t)sizeof *m) {
    perror("recvmsg");
    exit(1);
  }
  struct cmsghdr *c = CMSG_FIRSTHDR(&h);
  int fd = -1;
  if (c && c->cmsg_type == SCM_RIGHTS)
    memcpy(&fd, CMSG_DATA(c), sizeof(int));
  return fd;
}

static CUmemAllocationProp vmm_prop() {
  CUmemAllocationProp p = {};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = 0;
  p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return p;
}

// Maps `h` (`bytes`, a multiple of the granularity) read-write for device 0.
static char *vmm_map(CUmemGenericAllocationHandle h, size_t bytes) {
  CUdeviceptr va;
  CU(cuMemAddressReserve(&va, bytes, 0, 0, 0));
  CU(cuMemMap(va, bytes, 0, h, 0));
  CUmemAccessDesc a = {};
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = 0;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU(cuMemSetAccess(va, bytes, &a, 1));
  return (char *)va;
}

// A JAX-order piece's transpose: the source holds the weight as [n_i rows][n_o columns]
// (dense along o), the destination as HF's [n_o rows][n_i columns]. A block moves one tile of
// TI x TO elements through shared memory with 4-byte words on both sides, as refit's
// copy_pairs does (TI 64, TO 128 there): a warp reads TO elements of a source row and writes
// TI elements of a destination row. Blocks walk i first.
template <int TI, int TO>
__global__ void __launch_bounds__(256)
    tpairs(const uint16_t *__restrict__ src, uint16_t *__restrict__ dst, int64_t n_o, int64_t n_i,
           int64_t tiles_i) {
  __shared__ uint16_t tile[TI][TO + 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t i0 = (blockIdx.x % tiles_i) * TI, o0 = (blockIdx.x / tiles_i) * TO;
  constexpr int RW = TI / 8, HW = TO / 64, OW = TO / 8, IW = TI / 64;
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
  constexpr int RW = TI / 8, HW = TO / 64, OW = TO / 8;
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
    void *a, *b;
    CK(cudaMalloc(&a, rounded));
    CK(cudaMalloc(&b, rounded));
    CK(cudaMemset(a, 7, rounded));
    CK(cudaMemset(b, 7, rounded));
    CK(cudaIpcGetMemHandle(&m.src, a));
    CK(cudaIpcGetMemHandle(&m.dst, b));
    CUmemAllocationProp p = vmm_prop();
    size_t g = 0;
    CU(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    m.vmm_bytes = (2 * total + g - 1) / g * g; // source and destination halves
    CUmemGenericAllocationHandle h;
    CU(cuMemCreate(&h, m.vmm_bytes, &p, 0));
    char *v = vmm_map(h, m.vmm_bytes);
    CK(cudaMemset(v, 7, m.vmm_bytes));
    CK(cudaDeviceSynchronize());
    int fd;
    CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    send_msg(sv[0], fd, m);
    char done;
    if (read(sv[0], &done, 1) != 1)
      perror("read");
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
  }
  CK(cudaSetDevice(0));
  CU(cuInit(0));
  Msg m;
  int fd = recv_msg(sv[1], &m);
  char *own_src, *own_dst, *peer_src, *peer_dst;
  CK(cudaMalloc(&own_src, rounded));
  CK(cudaMalloc(&own_dst, rounded));
  pattern<<<4096, 256, 0>>>((uint16_t *)own_src, total / 2);
  CK(cudaDeviceSynchronize());
  CK(cudaIpcOpenMemHandle((void **)&peer_src, m.src, cudaIpcMemLazyEnablePeerAccess));
  CK(cudaIpcOpenMemHandle((void **)&peer_dst, m.dst, cudaIpcMemLazyEnablePeerAccess));
  CUmemGenericAllocationHandle vh;
  CU(cuMemImportFromShareableHandle(&vh, (void *)(uintptr_t)fd,
                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  char *vmm = vmm_map(vh, m.vmm_bytes);
  char *vmm_src = vmm, *vmm_dst = vmm + (total + mib2 - 1) / mib2 * mib2;
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  double ref = 0;
  auto run = [&](const char *name, const std::function<void()> &fn) {
    std::vector<float> t;
    for (int r = 0; r < 12; r++) {
      CK(cudaEventRecord(a, s));
      fn();
      CK(cudaEventRecord(b, s));
      CK(cudaEventSynchronize(b));
      CK(cudaGetLastError());
      float ms;
      CK(cudaEventElapsedTime(&ms, a, b));
      if (r >= 2)
        t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    double med = t[t.size() / 2];
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
  char done = 1;
  if (write(sv[1], &done, 1) != 1)
    perror("write");
  return 0;
}
