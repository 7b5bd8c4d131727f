// Issue 16: does a piece-wise copy through another process's cudaIpc mapping run slower than
// the same copy in one process, apart from refit? ../shared/probes/ipccopy.cu found one
// contiguous 16 GB copy through a mapping as fast as one in a process's own memory; refit's
// two-process refit of Llama-3.1-8B, made of 291 whole-tensor copies, is not. This probe
// copies Llama-3.1-8B's 291 tensors (destination order reversed, as ../shared/probes/
// piececopy.cu does) from a source in this process's memory and from the same bytes in a
// parent process's memory, mapped three ways: a cudaMalloc of exactly the bytes (as refit's
// arenas are), one rounded up to a multiple of 2 MiB (as ipccopy.cu's are), both opened with
// cudaIpcOpenMemHandle, and a CUDA VMM allocation (cuMemCreate, 2 MiB granularity) passed as
// a POSIX file descriptor. Each way: one contiguous copy, the 291 cudaMemcpyAsync on 4 streams
// (refit's copy engines) and on 1, and one kernel of 1 MiB chunks (one block each, 16-byte
// accesses, like refit's run class). Median of 10 after 2, CUDA events on the copying stream.
//   nvcc -O3 -arch=sm_90 -std=c++17 -o ipcpieces bench/ipcpieces.cu -lcuda && ./ipcpieces
#include "ipc_probe.h"

// The parent's three exports, and (SCM_RIGHTS) the VMM allocation's file descriptor.
struct Msg {
  cudaIpcMemHandle_t exact, rounded;
  size_t vmm_bytes;
};

struct Piece {
  const int4 *src;
  int4 *dst;
  size_t n16;
};

__global__ void copy_chunks(const Piece *p, const int *chunk_piece, const size_t *chunk_off,
                            size_t chunk16) {
  const Piece q = p[chunk_piece[blockIdx.x]];
  size_t off = chunk_off[blockIdx.x], end = off + chunk16 < q.n16 ? off + chunk16 : q.n16;
  for (size_t k = off + threadIdx.x; k < end; k += blockDim.x)
    q.dst[k] = q.src[k];
}

static std::vector<size_t> llama_8b_bytes() {
  const size_t D = 4096, F = 14336, L = 32, Q = 4096, KV = 1024, V = 128256;
  std::vector<size_t> t{V * D};
  for (size_t l = 0; l < L; l++)
    for (size_t n : {Q * D, KV * D, KV * D, D * Q, F * D, F * D, D * F, D, D})
      t.push_back(n);
  t.push_back(D);
  t.push_back(V * D);
  for (auto &n : t)
    n *= 2; // bf16
  return t;
}

int main() {
  std::vector<size_t> sizes = llama_8b_bytes();
  size_t total = 0;
  for (size_t b : sizes)
    total += b;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
    perror("socketpair");
    return 1;
  }
  pid_t pid = fork();
  const size_t mib2 = (size_t)2 << 20, rounded = (total + mib2 - 1) / mib2 * mib2;
  if (pid > 0) { // the owner: a trainer's arena, exported; waits (blocked) until the child is done
    CK(cudaSetDevice(0));
    CU(cuInit(0));
    Msg m = {};
    m.exact = ipc_export(total);
    m.rounded = ipc_export(rounded);
    int fd = vmm_export(total, &m.vmm_bytes);
    send_with_fd(sv[0], fd, &m, sizeof m);
    return parent_wait(sv[0], pid);
  }
  CK(cudaSetDevice(0));
  CU(cuInit(0));
  Msg m;
  int fd = recv_with_fd(sv[1], &m, sizeof m);
  char *own, *dst, *exact, *round;
  CK(cudaMalloc(&own, total));
  CK(cudaMalloc(&dst, total));
  CK(cudaMemset(own, 7, total));
  CK(cudaIpcOpenMemHandle((void **)&exact, m.exact, cudaIpcMemLazyEnablePeerAccess));
  CK(cudaIpcOpenMemHandle((void **)&round, m.rounded, cudaIpcMemLazyEnablePeerAccess));
  char *vmm = vmm_import(fd, m.vmm_bytes);
  cudaStream_t s, st[4];
  CK(cudaStreamCreate(&s));
  cudaEvent_t go, join[4];
  CK(cudaEventCreateWithFlags(&go, cudaEventDisableTiming));
  for (int i = 0; i < 4; i++) {
    CK(cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&join[i], cudaEventDisableTiming));
  }
  double ref = 0;
  auto run = [&](const char *name, const std::function<void()> &fn) {
    double med = median_ms(s, fn);
    if (ref == 0)
      ref = med;
    printf("%-52s %8.3f ms %8.1f GB/s  %5.3f of own contiguous\n", name, med, total / med / 1e6,
           ref / med);
  };
  printf("# %zu bytes in %zu pieces, one GPU, two processes (the parent owns the peer sources)\n",
         total, sizes.size());
  char *const sources[] = {own, exact, round, vmm};
  const char *const names[] = {"own", "peer cudaIpc exact", "peer cudaIpc 2MiB", "peer VMM fd"};
  for (int from = 0; from < 4; from++) {
    char *src = sources[from];
    const char *who = names[from];
    std::vector<Piece> pcs;
    size_t so = 0, doff = total;
    for (size_t bytes : sizes) { // destinations in reverse order
      doff -= bytes;
      pcs.push_back({(const int4 *)(src + so), (int4 *)(dst + doff), bytes / 16});
      so += bytes;
    }
    char name[96];
    snprintf(name, sizeof name, "%s -> own: one contiguous memcpy", who);
    run(name, [&] { CK(cudaMemcpyAsync(dst, src, total, cudaMemcpyDeviceToDevice, s)); });
    snprintf(name, sizeof name, "%s -> own: 291 memcpy on 4 streams", who);
    run(name, [&] {
      CK(cudaEventRecord(go, s));
      for (int i = 0; i < 4; i++)
        CK(cudaStreamWaitEvent(st[i], go, 0));
      for (size_t k = 0; k < pcs.size(); k++)
        CK(cudaMemcpyAsync(pcs[k].dst, pcs[k].src, pcs[k].n16 * 16, cudaMemcpyDeviceToDevice,
                           st[k % 4]));
      for (int i = 0; i < 4; i++) {
        CK(cudaEventRecord(join[i], st[i]));
        CK(cudaStreamWaitEvent(s, join[i], 0));
      }
    });
    snprintf(name, sizeof name, "%s -> own: 291 memcpy on 1 stream", who);
    run(name, [&] {
      for (auto &p : pcs)
        CK(cudaMemcpyAsync(p.dst, p.src, p.n16 * 16, cudaMemcpyDeviceToDevice, s));
    });
    const size_t c16 = (1u << 20) / 16;
    std::vector<int> cp;
    std::vector<size_t> co;
    for (size_t i = 0; i < pcs.size(); i++)
      for (size_t k = 0; k < pcs[i].n16; k += c16) {
        cp.push_back((int)i);
        co.push_back(k);
      }
    Piece *dp;
    int *dcp;
    size_t *dco;
    CK(cudaMalloc(&dp, pcs.size() * sizeof(Piece)));
    CK(cudaMalloc(&dcp, cp.size() * sizeof(int)));
    CK(cudaMalloc(&dco, co.size() * sizeof(size_t)));
    CK(cudaMemcpy(dp, pcs.data(), pcs.size() * sizeof(Piece), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dcp, cp.data(), cp.size() * sizeof(int), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dco, co.data(), co.size() * sizeof(size_t), cudaMemcpyHostToDevice));
    snprintf(name, sizeof name, "%s -> own: kernel, 1 MiB chunks", who);
    run(name, [&] { copy_chunks<<<(unsigned)cp.size(), 1024, 0, s>>>(dp, dcp, dco, c16); });
    CK(cudaGetLastError());
    CK(cudaFree(dp));
    CK(cudaFree(dcp));
    CK(cudaFree(dco));
  }
  CK(cudaIpcCloseMemHandle(exact));
  CK(cudaIpcCloseMemHandle(round));
  child_done(sv[1]);
  return 0;
}
