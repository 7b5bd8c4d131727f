// ipc_probe.h: what the two-process probes (ipcpieces.cu, ipctranspose.cu) share: error
// checks that stop the probe, passing a message with a file descriptor (a CUDA VMM
// allocation's) over a socket pair, mapping such an allocation, and a median of CUDA-event
// timings. Header-only, for nvcc builds of single files.
#ifndef RF_BENCH_IPC_PROBE_H
#define RF_BENCH_IPC_PROBE_H

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

// Sends `len` bytes of `msg` with file descriptor `fd` attached (SCM_RIGHTS).
static void send_with_fd(int sock, int fd, const void *msg, size_t len) {
  struct msghdr h = {};
  struct iovec io = {(void *)msg, len};
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
  if (sendmsg(sock, &h, 0) != (ssize_t)len) {
    perror("sendmsg");
    exit(1);
  }
}

// Receives what send_with_fd sent; returns the descriptor (-1 if none came).
static int recv_with_fd(int sock, void *msg, size_t len) {
  struct msghdr h = {};
  struct iovec io = {msg, len};
  char ctl[CMSG_SPACE(sizeof(int))] = {};
  h.msg_iov = &io;
  h.msg_iovlen = 1;
  h.msg_control = ctl;
  h.msg_controllen = sizeof ctl;
  if (recvmsg(sock, &h, MSG_WAITALL) != (ssize_t)len) {
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

// Parent: a cudaMalloc of `bytes`, filled with 7s, and its cudaIpc handle for the child.
static cudaIpcMemHandle_t ipc_export(size_t bytes) {
  void *p;
  cudaIpcMemHandle_t h;
  CK(cudaMalloc(&p, bytes));
  CK(cudaMemset(p, 7, bytes));
  CK(cudaIpcGetMemHandle(&h, p));
  return h;
}

// Parent: a VMM allocation of at least `bytes` (rounded to the granularity, *out_bytes),
// filled with 7s and exported as a file descriptor for the child.
static int vmm_export(size_t bytes, size_t *out_bytes) {
  CUmemAllocationProp p = vmm_prop();
  size_t g = 0;
  CU(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  *out_bytes = (bytes + g - 1) / g * g;
  CUmemGenericAllocationHandle h;
  CU(cuMemCreate(&h, *out_bytes, &p, 0));
  char *v = vmm_map(h, *out_bytes);
  CK(cudaMemset(v, 7, *out_bytes));
  CK(cudaDeviceSynchronize());
  int fd;
  CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  return fd;
}

// Child: maps the parent's VMM allocation here.
static char *vmm_import(int fd, size_t bytes) {
  CUmemGenericAllocationHandle h;
  CU(cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd,
                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  return vmm_map(h, bytes);
}

// Parent: keeps its allocations alive until the child says it is done, then returns the
// child's exit status.
static int parent_wait(int sock, pid_t child) {
  char done;
  if (read(sock, &done, 1) != 1)
    perror("read");
  int st;
  waitpid(child, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

// Child: lets the parent go.
static void child_done(int sock) {
  char done = 1;
  if (write(sock, &done, 1) != 1)
    perror("write");
}

// The median of 10 timings of fn() after 2 untimed runs, CUDA events around it on stream s.
static double median_ms(cudaStream_t s, const std::function<void()> &fn) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
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
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

#endif
