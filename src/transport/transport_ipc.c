/* The ipc transport: CUDA IPC between the processes of one node. Every rank exports its
 * device arenas once (cudaIpcGetMemHandle), the handles travel over MPI in one allgather, and
 * a rank that reads from a peer opens that peer's handle once (cudaIpcOpenMemHandle, kept
 * until the end of the job). The data then moves as the destination's own kernels reading
 * the source's memory: on one GPU that is a device-to-device copy between two processes, on
 * two GPUs of a node a peer-to-peer read over NVLink or PCIe.
 *
 * What still travels as messages are the notes of the engine's pull protocol (a source says
 * its weights are ready, a destination says it is done reading): a few bytes of host memory,
 * which this transport hands to an inner mpi transport, timeouts and cancellation included.
 * Two processes on one GPU are fine here, unlike NCCL, which refuses them. */
#include <cuda.h> /* the driver API's types only: address_range */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport.h"

/* What a rank offers of one buffer: the handle of the CUDA allocation holding it and where in
 * that allocation the buffer starts. The arenas start their allocations; a tensor the caller
 * registered (librefit) may lie anywhere in one of PyTorch's cached blocks. */
typedef struct {
  cudaIpcMemHandle_t handle;
  int64_t offset;
  int64_t offered; /* the rank has this buffer (not NULL) */
} ipc_offer;

typedef struct {
  rf_transport notes; /* the mpi transport, for the ready and done notes */
  int ranks, count;   /* world size, buffers per rank so far (expose appends) */
  ipc_offer *offer;   /* [index * ranks + rank] */
  void **mapped;      /* [index * ranks + rank]: its address in this process, or NULL */
  void **own;         /* [index]: this rank's buffers, as exposed */
  /* The allocations opened here, each once: buffers of one peer may share an allocation, and
   * CUDA maps a handle once per process. */
  struct ipc_open {
    cudaIpcMemHandle_t handle;
    void *base;
  } * open;
  int open_count, open_cap;
} ipc_state;

static rf_status ipc_init(rf_transport *tp) {
  if (tp->ctl->node_size != tp->ctl->world_size)
    return rf_fail(RF_ERR_USAGE,
                   "the ipc transport needs every rank on one node (this job spans %d ranks, "
                   "%d on this node); use --transport nccl across nodes",
                   tp->ctl->world_size, tp->ctl->node_size);
  ipc_state *s = rf_calloc(1, sizeof *s, "ipc transport");
  if (!s)
    return RF_ERR_NOMEM;
  tp->state = s;
  s->ranks = tp->ctl->world_size;
  return rf_transport_open(&rf_transport_mpi, tp->ctl, tp->plan, &s->notes);
}

static void ipc_finalize(rf_transport *tp) {
  ipc_state *s = tp->state;
  if (!s)
    return;
  for (int i = 0; i < s->open_count; i++)
    if (cudaIpcCloseMemHandle(s->open[i].base) != cudaSuccess)
      RF_WARN("cudaIpcCloseMemHandle failed: %s", cudaGetErrorString(cudaGetLastError()));
  rf_transport_close(&s->notes);
  free(s->offer);
  free(s->mapped);
  free(s->own);
  free(s->open);
  free(s);
  tp->state = NULL;
}

/* The driver's cuMemGetAddressRange, looked up in libcuda.so.1 (which the runtime has loaded
 * by now) rather than linked, so that refit built with the toolkit runs without a driver. */
typedef CUresult (*address_range_fn)(CUdeviceptr *base, size_t *size, CUdeviceptr ptr);
static rf_status address_range(void *ptr, CUdeviceptr *base, size_t *size) {
  static address_range_fn fn;
  if (!fn) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!lib)
      lib = dlopen("libcuda.so.1", RTLD_NOW);
    fn = lib ? (address_range_fn)(uintptr_t)dlsym(lib, "cuMemGetAddressRange_v2") : NULL;
    if (!fn)
      return rf_fail(RF_ERR_CUDA, "ipc: the CUDA driver's cuMemGetAddressRange_v2 is not "
                                  "available (libcuda.so.1); check the NVIDIA driver install");
  }
  CUresult got = fn(base, size, (CUdeviceptr)(uintptr_t)ptr);
  if (got != CUDA_SUCCESS)
    return rf_fail(RF_ERR_CUDA,
                   "ipc: the memory at %p is no CUDA allocation of this process "
                   "(cuMemGetAddressRange: CUresult %d); register GPU memory from cudaMalloc",
                   ptr, (int)got);
  return RF_OK;
}

/* The handle of the allocation holding `ptr`, and ptr's offset in it. */
static rf_status offer_one(void *ptr, ipc_offer *out) {
  CUdeviceptr base = 0;
  size_t size = 0;
  RF_TRY(address_range(ptr, &base, &size));
  cudaError_t rc = cudaIpcGetMemHandle(&out->handle, (void *)(uintptr_t)base);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();
    return rf_fail(RF_ERR_CUDA,
                   "ipc: the allocation holding %p cannot be shared with other processes "
                   "(cudaIpcGetMemHandle: %s); register memory from cudaMalloc (PyTorch: "
                   "without PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)",
                   ptr, cudaGetErrorString(rc));
  }
  out->offset = (int64_t)((uintptr_t)ptr - (uintptr_t)base);
  out->offered = 1;
  RF_DEBUG("ipc: offer %p: allocation %p of %zu bytes, offset %lld", ptr, (void *)(uintptr_t)base,
           size, (long long)out->offset);
  return RF_OK;
}

/* Each call appends `count` buffers after those of earlier calls; the tables are index-major
 * so that appending leaves the earlier entries (and their mappings) where they are. */
static rf_status ipc_expose(rf_transport *tp, void *const *buffers, int count) {
  ipc_state *s = tp->state;
  int base = s->count, total = base + count;
  size_t n = (size_t)s->ranks * (size_t)total, added = (size_t)s->ranks * (size_t)count;
  ipc_offer *offer = (ipc_offer *)realloc(s->offer, n * sizeof *offer + 1);
  if (offer)
    s->offer = offer;
  void **mapped = (void **)realloc(s->mapped, n * sizeof *mapped + 1);
  if (mapped)
    s->mapped = mapped;
  void **own = (void **)realloc(s->own, (size_t)total * sizeof *own + 1);
  if (own)
    s->own = own;
  ipc_offer *mine = rf_calloc((size_t)count + 1, sizeof *mine, "IPC handles");
  ipc_offer *got = rf_calloc(added + 1, sizeof *got, "IPC handles");
  rf_status st = offer && mapped && own && mine && got ? RF_OK : RF_ERR_NOMEM;
  for (int i = 0; i < count && st == RF_OK; i++)
    if (buffers[i])
      st = offer_one(buffers[i], &mine[i]);
  /* Every rank takes part even after a local failure, so that nobody waits alone; the
   * caller agrees on the outcome. */
  MPI_Request req;
  int bytes = (int)(sizeof *mine * (size_t)count);
  int rc = MPI_Iallgather(mine, bytes, MPI_BYTE, got, bytes, MPI_BYTE, tp->ctl->world, &req);
  rf_status waited = rc == MPI_SUCCESS ? rf_control_wait(tp->ctl, &req, "the IPC handles")
                                       : rf_mpi_failed(rc, "MPI_Iallgather", __FILE__, __LINE__);
  if (st == RF_OK)
    st = waited;
  if (st == RF_OK) {
    for (int i = 0; i < count; i++) {
      s->own[base + i] = buffers[i];
      for (int r = 0; r < s->ranks; r++) {
        size_t at = (size_t)(base + i) * (size_t)s->ranks + (size_t)r;
        s->offer[at] = got[r * count + i];
        s->mapped[at] = NULL;
      }
    }
    s->count = total;
  }
  free(mine);
  free(got);
  return st;
}

/* The base of `handle`'s allocation in this process, opened on first use. */
static rf_status open_allocation(ipc_state *s, int peer, const cudaIpcMemHandle_t *handle,
                                 void **out) {
  for (int i = 0; i < s->open_count; i++)
    if (memcmp(&s->open[i].handle, handle, sizeof *handle) == 0) {
      *out = s->open[i].base;
      return RF_OK;
    }
  RF_TRY(rf_grow((void **)&s->open, s->open_count, &s->open_cap, sizeof *s->open,
                 "mapped allocations"));
  void *base = NULL;
  cudaError_t rc = cudaIpcOpenMemHandle(&base, *handle, cudaIpcMemLazyEnablePeerAccess);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();
    return rf_fail(RF_ERR_CUDA,
                   "ipc: cannot map the memory of rank %d (%s); its GPU may not be reachable "
                   "from this one: use --transport nccl",
                   peer, cudaGetErrorString(rc));
  }
  s->open[s->open_count].handle = *handle;
  s->open[s->open_count++].base = base;
  RF_DEBUG("ipc: opened an allocation of rank %d at %p (%d open)", peer, base, s->open_count);
  *out = base;
  return RF_OK;
}

static rf_status ipc_peer_buffer(rf_transport *tp, int peer, int index, void **out) {
  ipc_state *s = tp->state;
  *out = NULL;
  if (index < 0 || index >= s->count || peer < 0 || peer >= s->ranks)
    return rf_fail(RF_ERR_INTERNAL, "ipc: rank %d has no buffer %d to map", peer, index);
  if (peer == tp->ctl->world_rank) {
    *out = s->own[index];
    return RF_OK;
  }
  size_t at = (size_t)index * (size_t)s->ranks + (size_t)peer;
  if (!s->offer[at].offered)
    return RF_OK;
  if (!s->mapped[at]) {
    void *base = NULL;
    RF_TRY(open_allocation(s, peer, &s->offer[at].handle, &base));
    s->mapped[at] = (char *)base + s->offer[at].offset;
  }
  *out = s->mapped[at];
  return RF_OK;
}

/* The notes are host memory and go through the inner mpi transport unchanged. */
static rf_status ipc_group(rf_transport *tp) { return RF_OK; }

static rf_status ipc_post(rf_transport *tp, int send, rf_channel ch, int peer, void *buf,
                          size_t bytes, long *ticket) {
  ipc_state *s = tp->state;
  return s->notes.ops->post(&s->notes, send, ch, peer, buf, bytes, ticket);
}

static rf_status ipc_wait(rf_transport *tp, long upto, const char *what) {
  ipc_state *s = tp->state;
  return s->notes.ops->wait(&s->notes, upto, what);
}

const rf_transport_ops rf_transport_ipc = {
    .name = "ipc",
    .description = "CUDA IPC within a node: each destination reads its sources' GPU memory "
                   "directly (works for processes sharing one GPU)",
    .memory = RF_MEM_DEVICE,
    .gpu_per_rank = 0, /* processes may share a GPU */
    .limit = RF_LIMIT_DEVICE_COPY,
    .mapping = 1,
    .maps_caller_memory = 1,
    .init = ipc_init,
    .finalize = ipc_finalize,
    .register_buffer = NULL,
    .group_start = ipc_group,
    .group_end = ipc_group,
    .post = ipc_post,
    .wait = ipc_wait,
    .expose = ipc_expose,
    .peer_buffer = ipc_peer_buffer,
};
