/* plan: the resharding plan, a pure function of model, layouts and plan kind, computed
 * identically on every rank without communication.
 *
 * A plan is an ordered list of pieces. Each piece moves one box of one logical tensor from a
 * source rank to a destination rank. The destination writes box ∩ (the box it holds), so a
 * star plan that sends embeddings whole to every rollout rank says so with a box larger than
 * what the destination keeps. */
#ifndef RF_PLAN_H
#define RF_PLAN_H

#include <stdint.h>

#include "layout/layout.h"

#define RF_PLAN_KIND_LIST(X)                                                                       \
  X(RF_PLAN_P2P, "p2p")                                                                            \
  X(RF_PLAN_STAR, "star")                                                                          \
  X(RF_PLAN_FANOUT, "fanout")                                                                      \
  X(RF_PLAN_HIERARCHICAL, "hierarchical")
typedef enum { RF_PLAN_KIND_LIST(RF_ENUM_ID) RF_PLAN_KIND_COUNT } rf_plan_kind;
RF_ENUM_DECLARE(rf_plan_kind); /* --plan */

typedef enum {
  RF_STAGE_RESHAPE = 0,  /* star only: trainer rank -> trainer rank, into the coupling layout */
  RF_STAGE_TRANSFER = 1, /* trainer rank -> rollout rank */
  RF_STAGE_FORWARD = 2   /* fanout, hierarchical: rollout rank -> the same tp rank of another
                          * replica */
} rf_stage;

/* Plain integers only, with no padding, so that a plan's digest is the hash of its bytes. */
typedef struct {
  int32_t tensor;
  int32_t stage; /* rf_stage */
  int32_t src;   /* trainer rank, or rollout rank (forward) */
  int32_t dst;   /* trainer rank (reshape) or rollout rank (transfer, forward) */
  rf_box box;    /* the region sent, in the tensor's logical coordinates */
  int64_t bytes; /* bytes of box */
} rf_piece;

/* Distance between a source trainer rank and a destination rank, for choosing among sources
 * that hold the same elements: smaller is nearer. NULL means "same process is nearest, all
 * other pairs are equal" (the topology module supplies a better one). */
typedef int (*rf_distance_fn)(void *ctx, int src_world_rank, int dst_world_rank);

typedef struct {
  rf_distance_fn distance;
  void *distance_ctx;
  /* Optional, with `distance`: [world rank] -> node id. It promises that every pair of ranks
   * on different nodes is at one and the same distance, farther than any pair on one node,
   * which lets the planner look only at a destination's own node (plan_sources.c). */
  const int *node_of;
  /* Optional: [world rank] -> domain id, the domains of the hierarchical plan (plan_hier.c),
   * for a job that wants them other than its nodes (refit run --domain-ranks). NULL: node_of;
   * neither: one domain. */
  const int *domain_of;
  /* The totals and digest only (refit plan): each piece is counted and hashed as it is made,
   * then dropped, so that a plan of a hundred million pieces needs megabytes, not gigabytes.
   * The plan then has no pieces (pieces NULL, piece_count still their number) and no star
   * coupling, and serves no schedule. Fanout, whose forward stage reads its transfer pieces back,
   * keeps them all. */
  int summary;
} rf_plan_options;

/* How a transfer piece's box lies: one contiguous run of bytes in the trainer shard it is read
 * from (as stored: transposed under JAX order) and in the rollout tensor it lands in (at its
 * fused slot), or strided at one end or both. Not for star's transfer, whose source is a
 * coupling buffer. */
typedef enum {
  RF_RUNS_CONTIGUOUS = 0,      /* one run at both ends */
  RF_RUNS_STRIDED_SOURCE,      /* rows at a pitch in the trainer shard only */
  RF_RUNS_STRIDED_DESTINATION, /* rows at a pitch in the rollout tensor only */
  RF_RUNS_STRIDED_BOTH,
  RF_RUNS_COUNT
} rf_runs;

typedef struct {
  rf_plan_kind kind;
  const rf_layout *layout;

  int piece_count;
  rf_piece *pieces;  /* reshape pieces first (star), then transfer pieces, each in the
                      * layout's storage order (rf_layout.order), then forward pieces (fanout)
                      * step by step */
  int reshape_count; /* pieces[0 .. reshape_count) are the reshape stage */
  int local_count;   /* pieces that stay inside one process (rf_piece_is_local) */

  /* Star topology (kind == RF_PLAN_STAR). */
  int fan_in;       /* 1: T >= R, rollout ranks are the centres; 0: trainer ranks are */
  int star_arms;    /* k */
  int star_count;   /* min(T, R) */
  rf_box *coupling; /* [tensor * trainer_ranks + trainer_rank]: box held after reshape */

  /* Fan-out (kind == RF_PLAN_FANOUT, plan_fanout.c): the trainer sends every element once, to
   * the tensor's root replica, and the forward stage copies it to the other replicas along a
   * binomial tree, a step trailing the one before (rf_rounds). Every kind has forward_first
   * (depth 0: {count}). */
  int *root;          /* [tensor]: the replica the trainer sends it to; -1 where it is not
                       * replicated (experts under rollout ep: sent straight to their rank) */
  int forward_depth;  /* steps of the forward stage: ceil(log2 P), 0 without replicas */
  int *forward_first; /* [forward_depth + 1]: pieces[forward_first[s] .. [s + 1]) are step s */

  /* Hierarchical (kind == RF_PLAN_HIERARCHICAL, plan_hier.c): fanout with a root per tensor in
   * every rollout domain, and trees only inside a domain. root[t] is domain 0's root. */
  int domains;         /* rollout domains; 0 for other kinds */
  int *replica_domain; /* [replica]: its domain, numbered in the order of their first replica */
  int *domain_root;    /* [tensor * domains + domain]: the replica the trainer sends it to in
                        * that domain; -1 where it is not replicated */

  /* Totals. Local pieces (same process, colocated or reshape-to-self) are copies. */
  int64_t *send_bytes;         /* [trainer rank] transfer-stage bytes sent */
  int64_t *recv_bytes;         /* [rollout rank] transfer-stage bytes received */
  int64_t *reshape_send_bytes; /* [trainer rank] reshape bytes sent to other ranks */
  int64_t *forward_send_bytes; /* [rollout rank] forward-stage bytes sent */
  int64_t *forward_recv_bytes; /* [rollout rank] forward-stage bytes received */
  int64_t transfer_bytes;      /* all transfer-stage bytes: what leaves the trainer */
  int64_t forward_bytes;       /* all forward-stage bytes, between rollout ranks */
  int64_t reshape_bytes;       /* reshape bytes between different ranks */
  int64_t local_bytes;         /* bytes moved by local copies (either stage) */
  int64_t extra_bytes;         /* transferred but not kept (star's whole embeddings/norms) */
  int block_count;             /* transfer pieces once runs that continue are joined */
  /* Transfer bytes by how they lie in memory (rf_piece_runs), indexed by rf_runs: what a
   * message transport moves in place, and what it copies once more (a pack where they are
   * strided in the trainer shard, an unpack where they are strided in the rollout tensor).
   * All zero under star, whose transfer reads coupling buffers the summary does not keep. */
  int64_t runs_bytes[RF_RUNS_COUNT];

  /* What crosses the wire (plan_fp8.c): the bytes above, except that pieces an fp8 rollout's
   * source quantizes, and its forward pieces, carry fp8 and scales. Without fp8 each equals
   * its counterpart above. */
  int64_t *wire_send_bytes; /* [trainer rank] transfer stage */
  int64_t *wire_recv_bytes; /* [rollout rank] transfer stage */
  int64_t wire_transfer_bytes;
  int64_t wire_forward_bytes;
  int *source_quantized;      /* [trainer rank]: fp8 tensors it quantizes pieces of */
  int *destination_quantized; /* [rollout rank]: fp8 tensors it quantizes pieces of on arrival */
  int source_tensors;         /* fp8 tensors whose every piece its source quantizes */
  int destination_tensors;    /* fp8 tensors with a piece its destination quantizes */

  uint64_t digest; /* xxh3-64 of kind, layouts and pieces */
} rf_plan;

/* Builds the plan. Star rejects trainer or rollout sizes that are not powers of two, and
 * boxes that do not split evenly over a star's arms, with one line and RF_ERR_LAYOUT. */
rf_status rf_plan_build(rf_plan *plan, const rf_layout *lay, rf_plan_kind kind,
                        const rf_plan_options *options);
void rf_plan_free(rf_plan *plan);

/* Whether transfer piece `cur` continues `prev` in memory on both ends, so that the two can
 * move as one block: the same ranks, each a whole untransposed trainer shard stored right
 * after the other (rf_layout.order) with no alignment gap, and each exactly what the rollout
 * rank keeps, at consecutive rows of one rollout tensor. Whole experts of an ep trainer rank
 * going to the rollout rank that owns the same experts do (plan.c). */
int rf_piece_continues(const rf_plan *plan, const rf_piece *prev, const rf_piece *cur);
rf_runs rf_piece_runs(const rf_plan *plan, const rf_piece *piece);
/* Where every trainer shard (and every other buffer in an arena) starts: a multiple of this. */
#define RF_BUFFER_ALIGN 256

/* ---- FP8 rollouts (plan_fp8.c) ------------------------------------------------------------ */
typedef enum {
  RF_QUANT_NONE = 0,    /* not an fp8 tensor, or star's reshape: the trainer's dtype */
  RF_QUANT_SOURCE,      /* whole blocks: the source quantizes, fp8 and scales on the wire */
  RF_QUANT_DESTINATION, /* the trainer's dtype on the wire; the rollout rank quantizes */
  RF_QUANT_FORWARDED,   /* fanout's forward step: already fp8, with its scales */
  RF_QUANT_CARRIED      /* the trainer holds fp8 and scales (a block-FP8 checkpoint) */
} rf_quant;
rf_quant rf_piece_quant(const rf_plan *plan, const rf_piece *piece);
/* Whether a piece travels as fp8 bytes and scales (quantized by its source, forwarded by a
 * replica that holds them, or carried from a block-FP8 checkpoint): its chunks go through
 * staging and are cut at block edges relative to the piece. */
int rf_piece_carries_fp8(const rf_plan *plan, const rf_piece *piece);
/* The bytes that part `box` of a piece puts on the wire: per element one fp8 byte and per
 * block of the format it touches one scale (4 bytes for fp8's 128x128 blocks, 1 for mxfp8's
 * 1x32) where the piece carries fp8 (whole blocks, except a carried piece whose trainer shard
 * cuts one), else its elements in the tensor's dtype. */
int64_t rf_piece_wire_bytes(const rf_plan *plan, const rf_piece *piece, const rf_box *box);
/* The smallest bucket of an fp8 job, other than 0: one block and its scale, so that the
 * schedule never needs to cut a block (128 * 128 fp8 bytes and 4 bytes of scale). */
#define RF_FP8_MIN_BUCKET (RF_FP8_BLOCK_EDGE * RF_FP8_BLOCK_EDGE + 4)
/* The same for any format: one block's e4m3 bytes and its scale (33 bytes for mxfp8). */
int64_t rf_format_min_bucket(const rf_format *f);

/* Whether a piece stays inside one process (a copy rather than a message). */
int rf_piece_is_local(const rf_plan *plan, const rf_piece *piece);
/* The world ranks of a piece's ends. */
int rf_piece_src_world(const rf_plan *plan, const rf_piece *piece);
int rf_piece_dst_world(const rf_plan *plan, const rf_piece *piece);
/* Whether the plan has a forward stage between replicas (fanout, hierarchical). */
int rf_plan_forwards(const rf_plan *plan);
/* The same for a kind, before there is a plan. */
int rf_plan_kind_forwards(rf_plan_kind kind);
/* The rollout rank that forwarded tensor `tensor` to `rollout_rank` (fanout, hierarchical), or
 * -1 where the trainer sent it straight there. */
int rf_plan_forwarded_from(const rf_plan *plan, int tensor, int rollout_rank);

/* ---- schedule ----------------------------------------------------------------------------
 *
 * The schedule: how one stage of a plan is cut into buckets, a pure function of the plan, the
 * stage, the bucket size and the pace, identical on every rank.
 *
 * A bucket bounds the bytes that any one rank sends, and any one rank receives, before the
 * next bucket starts: that is what bounds staging memory. A piece larger than what is left of
 * a bucket is split along its rows (or, for a single row, its columns) into chunks. */

typedef struct {
  int32_t piece; /* index into plan->pieces */
  int32_t bucket;
  rf_box box; /* the part of the piece's box this chunk moves */
  int64_t bytes;
} rf_chunk;

typedef struct {
  int first, count; /* chunks[first .. first+count) */
} rf_bucket;

/* How the schedule paces each rank pair over the buckets of a stage (schedule.c). A pair's
 * quota is 1/B of its remote bytes in the stage, B the buckets that the busiest rank's remote
 * bytes need (its bytes sent or received, over bucket_size), and by the end of bucket k the
 * pair may have placed k + 1 quotas, its target. Every bucket then carries a slice of every
 * pair and loads the stage's bottleneck links alike, instead of the first buckets filling some
 * ranks' links and the last ones others'. The paces differ in what a cut costs the mode. */
typedef enum {
  /* A pair starts no new piece in a bucket once it has reached its target, but pieces stay
   * whole (cut only where a bucket is full, as without pacing): grouped and unfused post one
   * message per chunk, so cutting pieces at the target would add messages. */
  RF_PACE_PIECES,
  /* A pair stops at its target, cutting a piece by rows there: fused sends a pair's chunks of
   * a bucket as one message, so the cut costs nothing. */
  RF_PACE_ROWS
} rf_pace;

typedef struct {
  rf_stage stage;
  int64_t bucket_size; /* 0 = one bucket for the whole stage */
  int chunk_count;
  rf_chunk *chunks; /* in plan order */
  int bucket_count;
  rf_bucket *buckets;
  int first_bucket; /* the stage's number of buckets[0]: 0, except in a cursor's windows */
  rf_pace pace;     /* last: tests build schedules with positional initializers */
} rf_schedule;

/* `pace` is the engine's for its mode (rf_engine_pace); bucket_size 0 is one bucket, unpaced. */
rf_status rf_schedule_build(const rf_plan *plan, rf_stage stage, int64_t bucket_size, rf_pace pace,
                            rf_schedule *out);
/* One step of the forward stage (0 <= step < plan->forward_depth): step s forwards what step
 * s - 1 (or the transfer) delivered, a bucket as soon as its rows are there (rf_rounds). */
rf_status rf_schedule_build_forward(const rf_plan *plan, int step, int64_t bucket_size,
                                    rf_pace pace, rf_schedule *out);
void rf_schedule_free(rf_schedule *s);

/* The same schedule a window of whole buckets at a time, for callers that read a stage once
 * and need not hold all of its chunks (refit simulate of a trillion-parameter model, whose
 * schedule alone would take gigabytes). Each call fills *out with the next buckets, at least
 * one and about max_chunks chunks; chunk.bucket counts from the stage's first bucket, as in
 * rf_schedule_build, whose result is this run to the end in one window. A window without
 * buckets means the stage is done. The caller frees each window with rf_schedule_free. */
typedef struct rf_schedule_cursor rf_schedule_cursor;
rf_status rf_schedule_cursor_open(const rf_plan *plan, rf_stage stage, int64_t bucket_size,
                                  rf_pace pace, rf_schedule_cursor **out);
/* The same over fanout's forward step `step` (0 .. forward_depth - 1), as
 * rf_schedule_build_forward cuts it. */
rf_status rf_schedule_cursor_open_forward(const rf_plan *plan, int step, int64_t bucket_size,
                                          rf_pace pace, rf_schedule_cursor **out);
rf_status rf_schedule_cursor_next(rf_schedule_cursor *c, int max_chunks, rf_schedule *out);
void rf_schedule_cursor_close(rf_schedule_cursor *c);

/* ---- rounds ------------------------------------------------------------------------------
 *
 * How a stage and fanout's forward steps run together, so that forwarding overlaps receiving
 * (rounds.c): round k posts the stage's bucket k and every forward bucket whose rows had all
 * arrived at its sender (from the stage or an earlier step) by the end of round k - 1, then
 * completes them. A pure function of the plan and the schedules, so every rank derives the
 * same rounds and posts the same messages in the same order. Without forward steps, each of
 * the stage's buckets is a round of its own. */

typedef struct {
  int32_t step;   /* -1: the stage's own schedule; s >= 0: forward step s */
  int32_t bucket; /* in that schedule */
} rf_round_item;

typedef struct {
  int round_count;
  int *first;           /* [round_count + 1]: items[first[k] .. first[k + 1]) post in round k */
  rf_round_item *items; /* in a round: the stage's bucket, then forward buckets by step, bucket */
  int steps;
  int *step_first;    /* [steps + 1] */
  int *forward_round; /* [step_first[s] + bucket]: the round a forward step's bucket posts in */
} rf_rounds;

/* `stage` is the transfer's schedule (or any one stage's, with steps = 0), `forward` the
 * schedules of forward steps 0 .. steps - 1. */
rf_status rf_rounds_build(const rf_plan *plan, const rf_schedule *stage, const rf_schedule *forward,
                          int steps, rf_rounds *out);
void rf_rounds_free(rf_rounds *r);

#endif
