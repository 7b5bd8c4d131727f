/* The state of delta refits, shared by engine_delta.c (an iteration: encode, the wire, the
 * checks and the apply) and engine_delta_setup.c (what a run sets up: the stages, the buffers,
 * the refusals). */
#ifndef RF_ENGINE_DELTA_STATE_H
#define RF_ENGINE_DELTA_STATE_H

#include "engine_internal.h"

struct engine_delta {
  rf_mem_kind kind;       /* where the encoded pieces live: the wire's memory */
  rf_mem_kind table_kind; /* where the size messages do: host memory for a mapping's notes */
  int pull;               /* a mapping transport: the receivers copy the pieces out */
  char *out, *inbox, *fw; /* encoded pieces sent (the job's offered buffer when pulling), held
                             (received or local), and forwarded */
  size_t out_bytes, inbox_bytes, fw_bytes;
  int64_t *fw_at;      /* [forward step] where its pieces start in fw: 0 when pushing (a step's
                          messages complete before the next packs), each after the one before when
                          pulling (its receivers may still be copying out when the next packs) */
  int64_t *size;       /* [chunk of the transfer schedule] its encoded bytes */
  int64_t *at;         /* [chunk] where the piece this rank encoded lies in out (inbox: local) */
  int64_t *in;         /* [chunk] where the piece this rank holds lies in the inbox */
  int64_t *src_at;     /* [chunk] pulling: where a received piece lies in its sender's out */
  int64_t local_end;   /* the local pieces' end in the inbox: received ones follow */
  int *origin, *from;  /* [tensor] engine_delta_origin and engine_delta_forwarders of this rank */
  rf_delta_info *info; /* [chunk] what the check found, for the apply */
  rf_delta_info *sent; /* [chunk] what encode wrote, to bring the kept version up to date */
  char *marked;        /* [chunk] encoded from the trainer's marks: the kept copy is not needed */
  engine_delta_stage *stages; /* the transfer, then each forward step */
  int64_t *table;             /* host: a stage's sizes, per peer sent then received */
  int64_t *table_wire;        /* the same in the wire's memory */
  int64_t *table_at;          /* [dir * ranks + peer] where peer's sizes start in table */
  int64_t table_cap;          /* the most entries of any stage */
  char *quant[2];             /* a quantized rollout: the wire bytes of one chunk, twice */
  size_t quant_bytes;         /* (engine_delta_quant.c), each this big */
  int globals_moved;          /* this iteration agreed new global scales (nvfp4) */
  uint64_t kept_bytes;
};

static inline const rf_piece *piece_of(const rf_engine *e, const rf_chunk *k) {
  return &e->plan->pieces[k->piece];
}
static inline int sends(const rf_engine *e, const rf_chunk *k) {
  return piece_of(e, k)->src == e->trainer_rank;
}
static inline int receives(const rf_engine *e, const rf_chunk *k) {
  return piece_of(e, k)->dst == e->rollout_rank;
}
static inline int is_local(const rf_engine *e, const rf_chunk *k) {
  return sends(e, k) && receives(e, k);
}
/* Whether this rank holds the chunk's piece as a rollout rank: sent to it, or to the origin it
 * is forwarded from. */
static inline int holds(const rf_engine *e, const rf_chunk *k) {
  const rf_piece *p = piece_of(e, k);
  return e->rollout_rank >= 0 && p->dst == e->delta_state->origin[p->tensor];
}
static inline int64_t align8(int64_t v) { return (v + 7) / 8 * 8; }

/* The encoding --delta asks encode for: the smallest per piece under auto. */
rf_delta_encoding engine_delta_asked(const rf_engine *e);
/* What --delta's encoding of chunk k may take: no smaller than dense, which a stale peer gets
 * instead, so the buffers and the local chunks' places do not depend on the receipts. */
int64_t engine_delta_capacity(const rf_engine *e, const rf_chunk *k);
/* Places the pieces a stage brings this rank, in its order, from `off` in the inbox, at their
 * capacities (`capacity`, for the size of the inbox) or at their exact sizes once known.
 * Returns where they end. */
int64_t engine_delta_place_received(rf_engine *e, engine_delta_stage *s, int64_t off, int capacity);

#endif
