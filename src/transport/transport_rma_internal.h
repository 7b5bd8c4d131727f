/* The rma transport's state, shared by its two files: transport_rma.c (windows, notes, the
 * table) and transport_rma_copy.c (the puts and gets of the engine's box copies). */
#ifndef RF_TRANSPORT_RMA_INTERNAL_H
#define RF_TRANSPORT_RMA_INTERNAL_H

#include <mpi.h>
#include <stdint.h>

#include "transport.h"

/* MPI counts are ints: a contiguous run travels in slices of at most this many bytes. */
#define RMA_SLICE ((int64_t)1 << 30)

/* One rank's exposed buffer as this rank sees it: here the stand-in range (NULL for this
 * rank's own buffers and for empty ones), its size, its offset in its window (alignment, in
 * an arena allocated as a window) and, registered per tensor, where its units start. */
typedef struct {
  char *stand_in;
  int64_t bytes;
  int64_t origin;
  const int64_t *cuts; /* [cut_count], ascending from 0; NULL: the buffer is one unit */
  int cut_count;
} rma_view;

/* The most arenas alloc_arenas makes (the engine's three families). */
#define RMA_ARENAS_MAX 4

/* Scratch host memory: kept from one batch to the next, handed out again after copy_wait. */
typedef struct {
  char *base;
  int64_t size, used;
} rma_chunk;
#define RMA_SCRATCH_CHUNK ((int64_t)16 << 20)

/* A note posted and not yet completed: a receive waits for counter[peer] >= target. */
typedef struct {
  int peer; /* world rank */
  int recv;
  int64_t target;
  char *buf; /* receives: set to 1 once the note is in, as a message transport would */
} rma_note;

typedef struct {
  int ranks, me, count; /* world size, this rank, buffers exposed per rank so far */
  int *first_win;       /* [buffer]: its first window; a buffer cut in units has one each */
  rma_view *view;       /* [buffer * ranks + rank] */
  void **own;           /* [buffer]: this rank's buffers */
  MPI_Win *win;         /* [window]: every buffer's windows, in order */
  char *dirty;          /* [window]: operations started since the last flush */
  int win_count;
  int64_t **cut_blocks; /* every rank's cuts, one block per expose that had some */
  int cut_block_count, cut_block_cap;
  /* The arenas this transport allocated (alloc_arenas): windows of MPI_Win_allocate, which the
   * first expose takes as its first arena_count windows, and each buffer's offset in its
   * window (they are 64-byte aligned). */
  MPI_Win arena_win[RMA_ARENAS_MAX];
  char *arena_at[RMA_ARENAS_MAX];
  int64_t arena_origin[RMA_ARENAS_MAX];
  int arena_count;
  MPI_Win notes_win;
  int64_t *counters;      /* the notes window's memory: [world rank] notes received from it */
  int64_t *seen, *expect; /* [ranks]: counters as last read; notes counted on from each */
  int *trainer_world;     /* [trainer rank]: its world rank (the trainer channel's peers) */
  rma_note *notes;        /* posted, in ticket order */
  long first_ticket;      /* ticket of notes[0] */
  int note_count, note_cap;
  int sends_pending; /* an MPI_Accumulate not yet flushed */
  int64_t one;
  /* Transposed boxes put from this rank, in row-major order until copy_wait (box_op). */
  rma_chunk *scratch;
  int scratch_count, scratch_cap, scratch_at;
} rma_state;

/* transport_rma_windows.c: the table's alloc_arenas, expose, expose_sized and peer_buffer;
 * the window and byte offset behind a stand-in address (-1 where it is in none), with the
 * world rank in *rank; MPI_Win_sync of every window; the windows' release at finalize. */
rf_status rma_alloc_arenas(rf_transport *tp, const size_t *bytes, int count, void **out);
rf_status rma_expose(rf_transport *tp, void *const *buffers, int count);
rf_status rma_expose_sized(rf_transport *tp, void *const *buffers, const size_t *bytes,
                           const rf_cuts *cuts, int count);
rf_status rma_peer_buffer(rf_transport *tp, int peer, int index, void **out);
int rma_find_window(const rma_state *s, const char *at, int *rank, MPI_Aint *disp);
rf_status rma_sync_windows(rma_state *s);
void rma_windows_free(rma_state *s);

/* transport_rma_copy.c: the copy_boxes and copy_wait of the table (transport.h). */
rf_status rma_copy_boxes(rf_transport *tp, const rf_box_copy *copies, int count);
rf_status rma_copy_wait(rf_transport *tp, const char *what);

#endif
