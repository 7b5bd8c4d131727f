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
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "transport.h"

typedef struct {
  rf_transport notes;         /* the mpi transport, for the ready and done notes */
  int ranks, count;           /* world size, buffers per rank so far (expose appends) */
  cudaIpcMemHandle_t *handle; /* [index * ranks + rank] */
  char *offered;              /* [index * ranks + rank]: the rank has that buffer */
  void **mapped;              /* [index * ranks + rank]: opened in this process, or NULL */
  void **own;                 /* [index]: this rank's buffers, as exposed */
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
  for (int i = 0; s->mapped && i < s->ranks * s->count; i++)
    if (s->mapped[i] && cudaIpcCloseMemHandle(s->mapped[i]) != cudaSuccess)
      RF_WARN("cudaIpcCloseMemHandle failed: %s", cudaGetErrorString(cudaGetLastError()));
  rf_transport_close(&s->notes);
  free(s->handle);
  free(s->offered);
  free(s->mapped);
  free(s->own);
  free(s);
  tp->state = NULL;
}

/* Each call appends `count` buffers after those of earlier calls; the tables are index-major
 * so that appending leaves the earlier entries (and their mappings) where they are. */
static rf_status ipc_expose(rf_transport *tp, void *const *buffers, int count) {
  ipc_state *s = tp->state;
  int base = s->count, total = base + count;
  size_t n = (size_t)s->ranks * (size_t)total, added = (size_t)s->ranks * (size_t)count;
  cudaIpcMemHandle_t *handle = (cudaIpcMemHandle_t *)realloc(s->handle, n * sizeof *handle + 1);
  if (handle)
    s->handle = handle;
  char *offered = (char *)realloc(s->offered, n + 1);
  if (offered)
    s->offered = offered;
  void **mapped = (void **)realloc(s->mapped, n * sizeof *mapped + 1);
  if (mapped)
    s->mapped = mapped;
  void **own = (void **)realloc(s->own, (size_t)total * sizeof *own + 1);
  if (own)
    s->own = own;
  cudaIpcMemHandle_t *mine = rf_calloc((size_t)count + 1, sizeof *mine, "IPC handles");
  cudaIpcMemHandle_t *got = rf_calloc(added + 1, sizeof *got, "IPC handles");
  char *have = rf_calloc((size_t)count + 1, 1, "IPC handles");
  char *had = rf_calloc(added + 1, 1, "IPC handles");
  rf_status st =
      handle && offered && mapped && own && mine && got && have && had ? RF_OK : RF_ERR_NOMEM;
  for (int i = 0; i < count && st == RF_OK; i++) {
    if (!buffers[i])
      continue;
    cudaError_t rc = cudaIpcGetMemHandle(&mine[i], buffers[i]);
    if (rc != cudaSuccess)
      st = rf_cuda_failed((int)rc, cudaGetErrorString(rc), "cudaIpcGetMemHandle", __FILE__,
                          __LINE__);
    have[i] = 1;
  }
  /* Every rank takes part even after a local failure, so that nobody waits alone; the
   * caller agrees on the outcome. */
  MPI_Request req[2];
  int bytes = (int)(sizeof *mine * (size_t)count);
  int rc = MPI_Iallgather(mine, bytes, MPI_BYTE, got, bytes, MPI_BYTE, tp->ctl->world, &req[0]);
  if (rc == MPI_SUCCESS)
    rc = MPI_Iallgather(have, count, MPI_BYTE, had, count, MPI_BYTE, tp->ctl->world, &req[1]);
  rf_status waited = rc == MPI_SUCCESS ? rf_control_wait(tp->ctl, &req[0], "the IPC handles")
                                       : rf_mpi_failed(rc, "MPI_Iallgather", __FILE__, __LINE__);
  if (waited == RF_OK)
    waited = rf_control_wait(tp->ctl, &req[1], "the IPC handles");
  if (st == RF_OK)
    st = waited;
  if (st == RF_OK) {
    for (int i = 0; i < count; i++) {
      s->own[base + i] = buffers[i];
      for (int r = 0; r < s->ranks; r++) {
        size_t at = (size_t)(base + i) * (size_t)s->ranks + (size_t)r;
        s->handle[at] = got[r * count + i];
        s->offered[at] = had[r * count + i];
        s->mapped[at] = NULL;
      }
    }
    s->count = total;
  }
  free(mine);
  free(got);
  free(have);
  free(had);
  return st;
}

static rf_status ipc_peer_buffer(rf_transport *tp, int peer, int index, void **out) {
  ipc_state *s = tp->state;
  *out = NULL;
  if (peer == tp->ctl->world_rank) {
    *out = s->own[index];
    return RF_OK;
  }
  if (index < 0 || index >= s->count)
    return rf_fail(RF_ERR_INTERNAL, "ipc: rank %d has no buffer %d to map", peer, index);
  size_t at = (size_t)index * (size_t)s->ranks + (size_t)peer;
  if (!s->offered[at])
    return rf_fail(RF_ERR_INTERNAL, "ipc: rank %d has no buffer %d to map", peer, index);
  if (!s->mapped[at]) {
    cudaError_t rc =
        cudaIpcOpenMemHandle(&s->mapped[at], s->handle[at], cudaIpcMemLazyEnablePeerAccess);
    if (rc != cudaSuccess) {
      s->mapped[at] = NULL;
      (void)cudaGetLastError();
      return rf_fail(RF_ERR_CUDA,
                     "ipc: cannot map the memory of rank %d (%s); its GPU may not be reachable "
                     "from this one: use --transport nccl",
                     peer, cudaGetErrorString(rc));
    }
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
