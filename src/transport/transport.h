/* transport: the data plane's one interface, a table of function pointers, and the registry
 * of the transports this build has (`refit run --help` lists them).
 *
 * A transport moves contiguous byte ranges between ranks. Everything else (which bytes, when,
 * packed how) belongs to the engine (engine.h), which drives any transport the same way.
 * Requests are tickets: post_* returns one; wait completes every ticket below a bound, within
 * a timeout. */
#ifndef RF_TRANSPORT_H
#define RF_TRANSPORT_H

#include <stddef.h>

#include "control/control.h"
#include "memory/memory.h"
#include "plan/plan.h"
#include "result/result.h"

/* Which communicator a message travels on: the whole job, or the trainer group (star's
 * reshape). Peers are ranks of that communicator. */
typedef enum { RF_CHANNEL_WORLD = 0, RF_CHANNEL_TRAINER } rf_channel;

typedef struct rf_transport rf_transport;

/* --rma: which end of a one-sided transport copies each piece: the source puts it into the
 * destination's memory (push), or the destination gets it out of the source's (pull). */
#define RF_RMA_DIRECTION_LIST(X)                                                                   \
  X(RF_RMA_PUT, "put")                                                                             \
  X(RF_RMA_GET, "get")
typedef enum { RF_RMA_DIRECTION_LIST(RF_ENUM_ID) RF_RMA_DIRECTION_COUNT } rf_rma_direction;
RF_ENUM_DECLARE(rf_rma_direction);

/* --register: what a one-sided transport registers (makes an MPI window of) for its peers:
 * each arena once (the default), or each tensor of each arena apart, as frameworks that
 * register tensor by tensor do, for the setup step `register` to show what that costs. */
#define RF_REGISTER_UNIT_LIST(X)                                                                   \
  X(RF_REGISTER_ARENA, "arena")                                                                    \
  X(RF_REGISTER_TENSOR, "tensor")
typedef enum { RF_REGISTER_UNIT_LIST(RF_ENUM_ID) RF_REGISTER_UNIT_COUNT } rf_register_unit;
RF_ENUM_DECLARE(rf_register_unit);

/* Where the registration units of an exposed buffer start: `count` byte offsets, ascending,
 * the first 0 (count 0: the buffer is one unit). */
typedef struct {
  const int64_t *at;
  int count;
} rf_cuts;

/* A strided run of bytes, as a 2-D box of a row-major buffer is: `rows` rows of `row_bytes`,
 * each `pitch` bytes after the one before (pitch == row_bytes: one contiguous run). */
typedef struct {
  char *base;
  int64_t rows, row_bytes, pitch;
} rf_strided;

typedef struct {
  const char *name;
  const char *description;
  /* What the transport needs and stands for, so that callers ask it instead of comparing
   * its name. */
  rf_mem_kind memory;     /* where the buffers it moves must live */
  int gpu_per_rank;       /* each rank needs a GPU of its own (NCCL refuses two ranks on one) */
  rf_limit limit;         /* the calibrated limit (--calibrate) a run over it is compared with */
  int mapping;            /* it maps its peers' memory (expose and peer_buffer below, as ipc and shm
                             do): the engine copies each piece once, straight across, and refit
                             simulate times it so even for a transport this build leaves out */
  int one_sided;          /* the user picks which end copies (--rma put|get, rf_rma_direction) */
  int maps_caller_memory; /* its expose takes any memory of its kind the caller allocated, at any
                             offset into that allocation (CUDA IPC: cudaMalloc's), not only
                             the arenas it allocated: librefit registers the caller's tensors
                             over it (rf_engine_expose_caller) */
  int ordered;            /* its messages move in the order posted: a fused bucket's messages start
                             once the bucket before has landed (NCCL's operations queue on one CUDA
                             stream), where over MPI both buckets' messages are in flight at once;
                             refit simulate times fused's buckets by it */
  rf_status (*init)(rf_transport *tp);
  void (*finalize)(rf_transport *tp);
  /* Optional: tells the transport a buffer will be used repeatedly (NULL when unneeded). */
  rf_status (*register_buffer)(rf_transport *tp, void *ptr, size_t bytes);
  /* Brackets a batch of posts that the transport may issue as one group. */
  rf_status (*group_start)(rf_transport *tp);
  rf_status (*group_end)(rf_transport *tp);
  /* Posts one message of `bytes` at `buf` to (send != 0) or from `peer`; the buffer is only
   * read when sending. Callers use rf_transport_send / rf_transport_recv below. */
  rf_status (*post)(rf_transport *tp, int send, rf_channel ch, int peer, void *buf, size_t bytes,
                    long *ticket);
  /* Completes every request whose ticket is < upto; `what` names the wait in a timeout error. */
  rf_status (*wait)(rf_transport *tp, long upto, const char *what);
  /* Optional (NULL: wait(upto), which also completes what was posted before `from`): completes
   * the requests of tickets from .. upto - 1 alone, so that fused can wait for one bucket while
   * a bucket posted before it is still in flight. */
  rf_status (*wait_range)(rf_transport *tp, long from, long upto, const char *what);
  /* Optional (NULL: the engine packs strided boxes into staging and unpacks them from it):
   * posts one message whose bytes are those of parts[0..count), in order, read from them when
   * sending and written into them when receiving. A sender and a receiver may cut the same
   * bytes into different parts; only the sequence of bytes has to agree. */
  rf_status (*post_strided)(rf_transport *tp, int send, rf_channel ch, int peer,
                            const rf_strided *parts, int count, long *ticket);

  /* Transports that map other processes' memory (CUDA IPC) set these two; message transports
   * leave them NULL. The engine then lets each destination copy straight out of its sources'
   * buffers, and post carries only the small host-memory notes that say a
   * source is ready and a destination is done.
   *   expose  collective over the world: every rank offers its `count` buffers (NULL where it
   *           has none) before any peer_buffer of them; a later call appends more, numbered
   *           after those of the calls before (the arenas once per job, then a delta refit's
   *           encoded pieces);
   *   peer_buffer  the address in this process of buffer `index` of world rank `peer` (mapped
   *           on first use and kept until finalize; the caller's own buffers are its own);
   *           NULL, and RF_OK, where that rank offered NULL (ipc and the tests' loopback; the
   *           engine asks so which of a peer's tensors live in its caller's memory). */
  rf_status (*expose)(rf_transport *tp, void *const *buffers, int count);
  rf_status (*peer_buffer)(rf_transport *tp, int peer, int index, void **out);
  /* Optional (NULL: expose): the same, told each buffer's size, for a transport that cannot
   * learn it from the buffer (rma's windows), and where each buffer's registration units start
   * (`cuts`: NULL, or one per buffer; under --register tensor, the tensors' offsets); the
   * engine offers its arenas through it. */
  rf_status (*expose_sized)(rf_transport *tp, void *const *buffers, const size_t *bytes,
                            const rf_cuts *cuts, int count);
  /* Optional (NULL: the engine allocates its host arenas itself): allocates this rank's `count`
   * host arenas, collectively over the world (every rank calls it once, before any expose,
   * with the same count and 0 bytes for an arena it has none of), in memory the transport
   * reaches best, 64-byte aligned: rma's windows of MPI_Win_allocate, between which Open MPI's
   * osc rdma copies a strided box inside a node with one datatype copy, where over windows
   * of MPI_Win_create it makes one system call per dense run (results/host.md). The
   * transport keeps them until finalize (after the buffers are freed), counted in
   * rf_mem_stats; the first expose of these same buffers makes no windows of its own. */
  rf_status (*alloc_arenas)(rf_transport *tp, const size_t *bytes, int count, void **out);

  /* One-sided transports (rma) set these two besides the mapping ones above. Their peer_buffer
   * gives a stand-in: an address range reserved in this process, as large as the peer's
   * buffer, that nothing may read or write but copy_boxes, which turns each address in it into
   * that peer's buffer and the offset (NULL: the engine copies through the mapped addresses
   * itself).
   *   copy_boxes  starts `count` box copies in host memory, each with either end (not both) in
   *               a stand-in or both in this process's own memory (those it copies at once);
   *   copy_wait   completes every copy started, at both ends: a put has landed in the
   *               peer's memory, a get in this rank's. `what` names the wait in an error. */
  rf_status (*copy_boxes)(rf_transport *tp, const rf_box_copy *copies, int count);
  rf_status (*copy_wait)(rf_transport *tp, const char *what);
  /* Optional (NULL: any kind the driver chose): refuses, in one line that says what to do,
   * weights in `kind` memory that the transport cannot move (rma and GPU memory). */
  rf_status (*check_memory)(rf_transport *tp, rf_mem_kind kind);

  /* Optional (NULL: nothing can be left pending): after an iteration that failed, called by
   * every rank at the same point while the buffers still exist, ends whatever requests the
   * failure left posted (a rank that failed, or whose wait a peer's failure cut short), so
   * that freeing the buffers and finalising cannot hang or be written into. */
  rf_status (*abandon)(rf_transport *tp);
} rf_transport_ops;

struct rf_transport {
  const rf_transport_ops *ops;
  rf_control *ctl;     /* NULL for the tests' loopback transport (transport_loopback.h) */
  const rf_plan *plan; /* which ranks talk (NCCL builds one communicator per star) */
  void *state;         /* the implementation's own */
  rf_register_unit register_unit; /* --register, for transports that register (rma) */
};

/* One message each way, as tickets of tp's wait. */
static inline rf_status rf_transport_send(rf_transport *tp, rf_channel ch, int peer,
                                          const void *buf, size_t bytes, long *ticket) {
  return tp->ops->post(tp, 1, ch, peer, (void *)buf, bytes, ticket);
}
static inline rf_status rf_transport_recv(rf_transport *tp, rf_channel ch, int peer, void *buf,
                                          size_t bytes, long *ticket) {
  return tp->ops->post(tp, 0, ch, peer, buf, bytes, ticket);
}

/* The registry: every transport compiled into this build, in a fixed order. */
int rf_transport_count(void);
const rf_transport_ops *rf_transport_at(int index);
/* Finds a transport by name; an unknown name logs one line listing the available ones. */
rf_status rf_transport_find(const char *name, const rf_transport_ops **out);
/* Like rf_transport_find, but also finds the transports this build leaves out, to say what
 * they need (a GPU per rank, a mapping) when planning or simulating another machine; those
 * cannot be opened. An unknown name logs one line listing every transport refit has. */
rf_status rf_transport_describe(const char *name, const rf_transport_ops **out);
/* "mpi, shm, rma, nccl, ipc": the names, for --help. */
void rf_transport_names(char *buf, size_t len);

/* --register other than arena, for a transport that registers nothing: one line (exit 2). */
rf_status rf_transport_check_register(const rf_transport_ops *t, rf_register_unit unit);
rf_status rf_transport_open(const rf_transport_ops *ops, rf_control *ctl, const rf_plan *plan,
                            rf_transport *tp);
void rf_transport_close(rf_transport *tp);

/* The transports, each in its own file (nccl and ipc only in builds with CUDA and NCCL). */
extern const rf_transport_ops rf_transport_mpi;
extern const rf_transport_ops rf_transport_shm;
extern const rf_transport_ops rf_transport_nccl;
extern const rf_transport_ops rf_transport_ipc;
extern const rf_transport_ops rf_transport_rma;

#endif
