/* The shm transport: shared host memory between the processes of one node, the host's
 * counterpart of ipc. Every rank's arenas are anonymous memory files (RF_MEM_SHARED); once per
 * job each rank tells the others its pid and the descriptors of its arenas in one allgather,
 * and a rank that copies from (or into) a peer opens /proc/PID/fd/FD and maps the same pages
 * (kept until the end of the job). The engine's mapping path (engine_mapped.c) then moves every
 * piece with one copy, from the source's memory straight into the destination's, strided
 * boxes included: a message transport copies each byte at least twice for a box that is not
 * contiguous on both ends (pack, send, unpack), and shared-memory MPI once more in between.
 *
 * Opening another process's descriptor needs the same rights as reading its memory (the same
 * user, and ptrace not locked down); where that is refused the error says so and names the
 * mpi transport. The ready and done notes of the pull and push protocols travel as messages
 * over an inner mpi transport, with its timeouts. */
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "transport.h"

/* What a rank offers of one buffer: where the others find it. */
typedef struct {
  int64_t pid, fd, bytes; /* bytes 0: no buffer */
} shm_offer;

typedef struct {
  rf_transport notes; /* the mpi transport, for the ready and done notes */
  int ranks, count;   /* world size, buffers per rank so far (expose appends) */
  shm_offer *offer;   /* [index * ranks + rank] */
  void **mapped;      /* [index * ranks + rank]: mapped in this process, or NULL */
  void **own;         /* [index]: this rank's buffers, as exposed */
} shm_state;

static rf_status shm_init(rf_transport *tp) {
  if (tp->ctl->node_size != tp->ctl->world_size)
    return rf_fail(RF_ERR_USAGE,
                   "the shm transport needs every rank on one node (this job spans %d ranks, "
                   "%d on this node); use --transport mpi across nodes",
                   tp->ctl->world_size, tp->ctl->node_size);
  shm_state *s = rf_calloc(1, sizeof *s, "shm transport");
  if (!s)
    return RF_ERR_NOMEM;
  tp->state = s;
  s->ranks = tp->ctl->world_size;
  return rf_transport_open(&rf_transport_mpi, tp->ctl, tp->plan, &s->notes);
}

static void shm_finalize(rf_transport *tp) {
  shm_state *s = tp->state;
  if (!s)
    return;
  for (int i = 0; s->mapped && i < s->ranks * s->count; i++)
    if (s->mapped[i])
      munmap(s->mapped[i], (size_t)s->offer[i].bytes);
  rf_transport_close(&s->notes);
  free(s->offer);
  free(s->mapped);
  free(s->own);
  free(s);
  tp->state = NULL;
}

/* Each call appends `count` buffers after those of earlier calls; the tables are index-major
 * so that appending leaves the earlier entries (and their mappings) where they are. */
static rf_status shm_expose(rf_transport *tp, void *const *buffers, int count) {
  shm_state *s = tp->state;
  int base = s->count, total = base + count;
  size_t n = (size_t)s->ranks * (size_t)total;
  shm_offer *offer = realloc(s->offer, n * sizeof *offer);
  if (offer)
    s->offer = offer;
  void **mapped = realloc(s->mapped, n * sizeof *mapped);
  if (mapped)
    s->mapped = mapped;
  void **own = realloc(s->own, (size_t)total * sizeof *own + 1);
  if (own)
    s->own = own;
  shm_offer *mine = rf_calloc((size_t)count, sizeof *mine, "shm offers");
  shm_offer *got = rf_calloc((size_t)s->ranks * (size_t)count, sizeof *got, "shm offers");
  rf_status st = offer && mapped && own && mine && got ? RF_OK : RF_ERR_NOMEM;
  for (int i = 0; i < count && st == RF_OK; i++) {
    if (!buffers[i])
      continue;
    int fd;
    size_t bytes;
    st = rf_mem_shared_fd(buffers[i], &fd, &bytes);
    mine[i] = (shm_offer){(int64_t)getpid(), fd, (int64_t)bytes};
  }
  /* Every rank takes part even after a local failure, so that nobody waits alone; the
   * caller agrees on the outcome. */
  MPI_Request req;
  int bytes = (int)(sizeof *mine * (size_t)count);
  int rc = MPI_Iallgather(mine, bytes, MPI_BYTE, got, bytes, MPI_BYTE, tp->ctl->world, &req);
  rf_status waited = rc == MPI_SUCCESS ? rf_control_wait(tp->ctl, &req, "the shm offers")
                                       : rf_mpi_failed(rc, "MPI_Iallgather", __FILE__, __LINE__);
  if (st == RF_OK)
    st = waited;
  if (st == RF_OK) {
    for (int i = 0; i < count; i++) {
      s->own[base + i] = buffers[i];
      for (int r = 0; r < s->ranks; r++) {
        s->offer[(size_t)(base + i) * (size_t)s->ranks + (size_t)r] = got[r * count + i];
        s->mapped[(size_t)(base + i) * (size_t)s->ranks + (size_t)r] = NULL;
      }
    }
    s->count = total;
  }
  free(mine);
  free(got);
  return st;
}

static rf_status shm_peer_buffer(rf_transport *tp, int peer, int index, void **out) {
  shm_state *s = tp->state;
  *out = NULL;
  if (peer == tp->ctl->world_rank) {
    *out = s->own[index];
    return RF_OK;
  }
  if (index < 0 || index >= s->count)
    return rf_fail(RF_ERR_INTERNAL, "shm: rank %d has no buffer %d to map", peer, index);
  size_t at = (size_t)index * (size_t)s->ranks + (size_t)peer;
  const shm_offer *o = &s->offer[at];
  if (o->bytes == 0)
    return rf_fail(RF_ERR_INTERNAL, "shm: rank %d has no buffer %d to map", peer, index);
  if (!s->mapped[at]) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%lld/fd/%lld", (long long)o->pid, (long long)o->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    struct stat sb;
    void *p = MAP_FAILED;
    int err = 0;
    if (fd < 0)
      err = errno;
    else if (fstat(fd, &sb) != 0 || sb.st_size < o->bytes)
      err = fstat(fd, &sb) != 0 ? errno : EINVAL;
    else if ((p = mmap(NULL, (size_t)o->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
             MAP_FAILED)
      err = errno;
    if (fd >= 0)
      close(fd);
    if (err)
      return rf_fail(RF_ERR_IO,
                     "shm: cannot map the memory of rank %d (%s: %s); ranks must run as one "
                     "user where ptrace is allowed: use --transport mpi",
                     peer, path, strerror(err));
    s->mapped[at] = p;
  }
  *out = s->mapped[at];
  return RF_OK;
}

/* The notes go through the inner mpi transport unchanged. */
static rf_status shm_group(rf_transport *tp) { return RF_OK; }

static rf_status shm_post(rf_transport *tp, int send, rf_channel ch, int peer, void *buf,
                          size_t bytes, long *ticket) {
  shm_state *s = tp->state;
  return s->notes.ops->post(&s->notes, send, ch, peer, buf, bytes, ticket);
}

static rf_status shm_wait(rf_transport *tp, long upto, const char *what) {
  shm_state *s = tp->state;
  return s->notes.ops->wait(&s->notes, upto, what);
}

const rf_transport_ops rf_transport_shm = {
    .name = "shm",
    .description = "shared host memory within a node: each destination copies straight out of "
                   "its sources' memory, one copy per byte",
    .memory = RF_MEM_SHARED,
    .gpu_per_rank = 0,
    .limit = RF_LIMIT_MEMCPY,
    .mapping = 1,
    .init = shm_init,
    .finalize = shm_finalize,
    .register_buffer = NULL,
    .group_start = shm_group,
    .group_end = shm_group,
    .post = shm_post,
    .wait = shm_wait,
    .expose = shm_expose,
    .peer_buffer = shm_peer_buffer,
};
