/* engine: executes a plan over a transport in one of three modes.
 *
 * It owns this rank's buffers (trainer shards, star coupling buffers, fused rollout tensors,
 * staging), the schedules of every stage, and one iteration of the transfer: star's reshape,
 * the transfer, then fanout's forward steps, each stage done before the next starts (a
 * replica forwards only what it has received), and in each stage:
 *   unfused  one message per chunk, a completion wait after each tensor;
 *   grouped  every chunk of a bucket posted in one group, then one wait;
 *   fused    per peer and bucket, the chunks packed into one staging buffer and sent as one
 *            message, unpacked at the destination; two staging buffers per peer direction so
 *            that packing bucket k+1 overlaps the flight of bucket k.
 * Chunks that are contiguous at both ends move in place; the others go through staging.
 *
 * Over a mapping transport (ipc) there are no messages to fuse: each destination copies its
 * pieces straight out of its sources' memory (engine_mapped.c) and the modes differ in how
 * often it launches and waits: unfused one copy launch and wait per tensor, grouped one per
 * bucket, fused one launch and one wait for the whole stage. */
#ifndef RF_ENGINE_H
#define RF_ENGINE_H

#include "plan/plan.h"
#include "result/result.h"
#include "transport/transport.h"
#include "verify/versions.h"

/* A checkpoint to read the trainer shards from (io.h); the engine only passes it on. */
typedef struct rf_checkpoint rf_checkpoint;

#define RF_MODE_LIST(X)                                                                            \
  X(RF_MODE_UNFUSED, "unfused")                                                                    \
  X(RF_MODE_GROUPED, "grouped")                                                                    \
  X(RF_MODE_FUSED, "fused")
typedef enum { RF_MODE_LIST(RF_ENUM_ID) RF_MODE_COUNT } rf_mode;
RF_ENUM_DECLARE(rf_mode);

/* --mode a,b: the modes one job runs in turn, over the same buffers. */
#define RF_MAX_MODES 8
typedef struct {
  int count;
  rf_mode items[RF_MAX_MODES];
} rf_mode_list;
/* "fused,grouped" into buf. */
const char *rf_mode_list_format(const rf_mode_list *modes, char *buf, size_t len);

/* --delta a,b: how a refit sends a new version (issue 33): every byte (off), or only the
 * changed elements, in the encoding that is smallest per piece (auto) or in one encoding
 * (sparse: offsets and values; bitmask: a bit per element and the values). A list runs each in
 * turn, like --mode. rf_engine_set_delta refuses, in one line, what does not run with deltas
 * yet. */
#define RF_DELTA_CHOICE_LIST(X)                                                                    \
  X(RF_DELTA_CHOICE_OFF, "off")                                                                    \
  X(RF_DELTA_CHOICE_AUTO, "auto")                                                                  \
  X(RF_DELTA_CHOICE_SPARSE, "sparse")                                                              \
  X(RF_DELTA_CHOICE_BITMASK, "bitmask")
typedef enum { RF_DELTA_CHOICE_LIST(RF_ENUM_ID) RF_DELTA_CHOICE_COUNT } rf_delta_choice;
RF_ENUM_DECLARE(rf_delta_choice);
typedef struct {
  int count;
  rf_delta_choice items[RF_MAX_MODES];
} rf_delta_choice_list;

/* Faults the tests inject to show that the checks and the timeouts work. */
#define RF_INJECT_LIST(X)                                                                          \
  X(RF_INJECT_NONE, "none")                                                                        \
  X(RF_INJECT_CORRUPT, "corrupt")                                                                  \
  X(RF_INJECT_STALL, "stall")                                                                      \
  X(RF_INJECT_SKIP_VERSION, "skip-version")
typedef enum { RF_INJECT_LIST(RF_ENUM_ID) RF_INJECT_COUNT } rf_inject;
RF_ENUM_DECLARE(rf_inject);

/* A rollout rank's version receipt (issue 33): the version its weights hold, k (-1: none,
 * before the first refit or once poisoned for one) and the version's name (rf_version_id),
 * which the trainers compare with the version they kept before they encode against it. */
typedef struct {
  int64_t k;
  uint64_t id;
} rf_receipt;

/* --mapped-rounds: whether fanout over a mapping transport (ipc, shm) runs its forward steps
 * in rounds beside the transfer (on) or after it, one exchange a step (off). Rounds overlap a
 * replica's forwarding with its receiving, which pays where the copies run on different GPUs;
 * where every process shares one GPU or the host's cores, the copies queue on the same engine
 * anyway and each round's notes and launches are a cost (results/h200/README.md, "Rollout
 * replicas"). auto: on for GPU memory when a forward step joins two GPUs, off otherwise. The
 * message transports always run rounds: their staging is what bounds a bucket. */
#define RF_MAPPED_ROUNDS_LIST(X)                                                                   \
  X(RF_MAPPED_ROUNDS_AUTO, "auto")                                                                 \
  X(RF_MAPPED_ROUNDS_ON, "on")                                                                     \
  X(RF_MAPPED_ROUNDS_OFF, "off")
typedef enum { RF_MAPPED_ROUNDS_LIST(RF_ENUM_ID) RF_MAPPED_ROUNDS_COUNT } rf_mapped_rounds;
RF_ENUM_DECLARE(rf_mapped_rounds);

/* This rank's data, allocated and generated once per job and shared by the runs of every
 * mode (buffers.c): trainer shards (filled with the generator or read from a checkpoint),
 * star coupling buffers and the fused rollout tensors. Each family lives in one arena;
 * `shards`, `coupling` and `rollout` point into them (NULL arrays where this rank has no
 * such role). */
typedef enum {
  RF_FAMILY_SHARDS = 0,
  RF_FAMILY_COUPLING,
  RF_FAMILY_ROLLOUT,
  RF_FAMILY_COUNT
} rf_buffer_family;

/* The fields of rf_engine's delta_kinds after the per-encoding counts (3 encodings). */
enum {
  RF_DELTA_KIND_ELEMENTS = 3,
  RF_DELTA_KIND_CHANGED,
  RF_DELTA_KIND_WIRE,
  RF_DELTA_KIND_FIELDS
};

/* A buffer offered to a mapping transport's peers (its `index` among the offers). */
typedef struct {
  void *ptr;
  size_t bytes;
  int index;
} rf_offered;

typedef struct {
  const rf_plan *plan;
  rf_mem_kind memory;
  int trainer_rank, rollout_rank;
  void *arena[RF_FAMILY_COUNT];
  size_t arena_bytes[RF_FAMILY_COUNT];
  void **ptr[RF_FAMILY_COUNT];
  void **shards, **coupling, **rollout; /* = ptr[family], indexed by tensor / rollout tensor */
  /* --rollout-dtype fp8: where destination-quantized pieces land in the trainer's dtype,
   * [tensor] row-major over this rank's held box (NULL where no such piece comes here). */
  void *landing_arena;
  size_t landing_bytes;
  void **landing;
  double fill_seconds; /* generating or reading the trainer's weights */
  /* The transport allocated the arenas (transport.h, alloc_arenas) and frees them at its
   * close; `register_seconds` of the allocation were its windows' creation. */
  int arenas_by_transport;
  double register_seconds;
  int exposed;         /* offered to a mapping transport (ipc) already */
  int from_checkpoint; /* the trainer shards were read, not generated */
  /* The version the trainer shards hold (versions.h): 0 after rf_buffers_init, under the
   * update rule the caller sets in version.update before the first rf_buffers_advance. */
  uint64_t seed;
  rf_weight_version version;
  /* Delta refits (engine_delta.c): what the trainer last sent, one more arena laid out as the
   * one its transfer reads (prev_family: the shards, or star's coupling buffers; NULL until a
   * run asks for deltas), and whether the rollout holds that version (set once an iteration
   * has moved it, dense or delta). */
  void *prev_arena;
  float *prev_global; /* nvfp4: the globals the kept version is quantized with, per tensor */
  size_t prev_bytes;
  int prev_family;
  int delta_base;
  /* The trainer's marks of what changed since the kept version (delta.h, rf_delta_marks): one
   * bit per element of each shard, tensor t's from word marks_at[t], numbered by the element's
   * offset from shards[t]. rf_buffers_advance sets them while marks_valid, which
   * rf_buffers_marks_reset turns on (marks cleared) each time the kept copy catches up with the
   * shards, where the job allows (marks_wanted: not --delta-compare; generated weights in host
   * memory, kept as shards), and off otherwise; a delta encode reads them instead of comparing
   * every element. */
  uint64_t *marks;
  int64_t *marks_at;
  size_t marks_bytes;
  int marks_valid, marks_wanted;
  /* The kept copy lags the shards where pieces were encoded from the marks (engine_delta.c):
   * only marks can tell the next delta what changed, and without them the next refit is dense
   * (rf_buffers_marks_reset and rf_buffers_load clear delta_base). */
  int prev_stale;
  /* Over a mapping transport (engine_delta.c): the trainer's encoded pieces and the pieces a
   * replica forwards, each exposed for its peers to copy out (grow-only across the job's runs,
   * in the shards' memory kind, with the index of its latest offer), and the buffers offered
   * so far (the arenas count RF_FAMILY_COUNT). */
  rf_offered delta_out, delta_fw;
  int exposed_count;
  /* The caller's own memory (librefit's refit_register) offered to a transport that maps it
   * (rf_engine_expose_caller): the index of the latest offer, valid when caller_exposed. */
  int caller_exposed, caller_index;
  /* Receipts: the version this rank's rollout holds (`held`, when `holds`): what the last
   * iteration that wrote it moved, dense or delta, and not one that --inject skip-version
   * dropped; and the version of the trainer's kept copy (`kept`, with delta_base), the same
   * on every rank. */
  rf_weight_version held, kept;
  int holds;
} rf_buffers;

/* The trainer shards are read from `checkpoint` when given, else generated from `seed`
 * (version 0). */
rf_status rf_buffers_init(rf_buffers *b, const rf_plan *plan, rf_mem_kind memory, uint64_t seed,
                          rf_checkpoint *checkpoint, int world_rank);
/* The same, with host arenas allocated by `tp` where it allocates them (collective over the
 * world then: every rank calls it, and frees the buffers before closing the transport). */
rf_status rf_buffers_init_on(rf_buffers *b, const rf_plan *plan, rf_mem_kind memory, uint64_t seed,
                             rf_checkpoint *checkpoint, int world_rank, rf_transport *tp);
void rf_buffers_free(rf_buffers *b);
/* Moves the generated trainer shards from their version k to k + 1 (rf_advance_region_on:
 * under sparse, host memory gets only the chunks that hold a change written back), on this
 * rank alone. Under `none` only the number moves. Refused for shards read from a checkpoint,
 * which hold one version only. */
rf_status rf_buffers_advance(rf_buffers *b);
/* The rollout now holds the version the shards hold: clears the marks and makes them valid
 * from here on where the job allows marks (see marks_valid), allocating them the first time;
 * else makes them invalid, and where the kept copy lags (prev_stale) drops the delta base so
 * that the next refit goes dense. */
rf_status rf_buffers_marks_reset(rf_buffers *b);
/* Reads the trainer shards of this rank from `checkpoint`, version k of a sequence of
 * checkpoints (refit run --checkpoint V0,V1,...), which becomes the version they hold. Each
 * rank reads only its own rows and columns, as rf_buffers_init does. */
rf_status rf_buffers_load(rf_buffers *b, rf_checkpoint *checkpoint, int64_t k);

/* Where each tensor sits in the arena of `family` on `rank` (a trainer rank for shards and
 * coupling, ignored for rollout): byte offsets, 256-byte aligned. Returns the arena size. */
int64_t rf_buffers_offsets(const rf_plan *plan, rf_buffer_family family, int rank,
                           int64_t *offsets);
/* Where rank's tensors of `family` start in its arena, ascending and without repeats (a tensor
 * the rank holds nothing of starts where the next does, or at the arena's end, and is left
 * out): the registration units of --register tensor. Fills starts[0 .. count) from `off`, room
 * for every tensor of the family, and returns count; *arena gets the arena's size. */
int rf_buffers_tensor_starts(const rf_plan *plan, rf_buffer_family family, int rank, int64_t *off,
                             int64_t *arena);

/* Every rollout rank's fp8 landing buffers in bytes, per_rank[rollout rank]: the rule of
 * rf_buffers_init, for refit simulate's memory. */
rf_status rf_buffers_landing_bytes(const rf_plan *plan, int64_t *per_rank);

/* A trainer rank's shard of `tensor` stored at `base`, in its storage order. */
rf_region rf_shard_region(const rf_plan *plan, int trainer_rank, int tensor, void *base);
/* A trainer shard of a quantized weight (a quantized checkpoint, rf_model_weights_quantized)
 * is followed in its slot by the scales of every block of the format the shard touches (fp32,
 * or a byte each), row-major over those blocks, in block coordinates (*blocks), and for a format
 * with a global scale by the file's global, one fp32 at rf_shard_global; `base` is the shard's
 * start. */
rf_region rf_shard_scale_region(const rf_plan *plan, int trainer_rank, int tensor, void *base,
                                rf_box *blocks);
void *rf_shard_global(const rf_plan *plan, int trainer_rank, int tensor, void *base);

/* How the wire takes a chunk that is not one contiguous run (the cost functions below). */
typedef enum {
  RF_WIRE_CONTIGUOUS = 0, /* contiguous runs travel in place, the rest through staging; fused
                             packs everything */
  RF_WIRE_STAGED,         /* the wire is another kind of memory than the weights (device
                             weights over a host transport): everything through staging */
  RF_WIRE_GATHERS,        /* the transport gathers and scatters rows (post_strided, MPI derived
                             datatypes): in fused, any box whose rows are contiguous travels in
                             place, and each peer's message names its chunks where they lie */
} rf_wire;

typedef struct {
  const rf_plan *plan;
  rf_buffers *data;
  rf_transport *transport;
  rf_mode mode;
  int64_t bucket_size;
  uint64_t seed;
  rf_inject inject;
  /* The version the last iteration moved (data->version when it started): what the rollout
   * holds after it, and what rf_engine_check compares with. Version 0 before any. */
  rf_weight_version moved;

  int world_rank, trainer_rank, rollout_rank; /* -1 where this rank has no such role */
  rf_mem_kind memory; /* where the weights live, and so where box copies run */
  rf_mem_kind wire;   /* where staging lives: pinned host memory when device weights travel
                         over a host transport (mpi on a GPU), else the weights' kind */
  rf_wire wire_rule;  /* which chunks travel in place (rf_engine_wire_rule) */
  /* Mapping transports (ipc): each destination copies out of its sources' arenas. */
  int mapped, push;  /* a mapping transport; the source copies (JAX order) */
  int mapped_rounds; /* fanout over it in rounds (rf_engine_set_mapped_rounds), else stages */
  int64_t *peer_offsets[RF_FAMILY_COUNT]; /* [family][rank * tensors + tensor]; rollout: rank 0 */
  char *notes;                            /* one byte per world rank and direction for the notes */
  /* REFIT_TIMELINE set (and not 0): each mapped stage prints a line of its steps' host times
   * and its copies' GPU time (engine_mapped.c); timeline_calls numbers the stages run. */
  int timeline;
  long timeline_calls;
  rf_mem_timer timeline_timer;

  rf_schedule reshape, transfer;
  rf_schedule *forward; /* [plan->forward_depth]: one per step of fanout's forward stage */
  /* The message path runs the reshape a bucket per round, and the transfer with the forward
   * steps in rounds that let forwarding overlap receiving (plan.h, rf_rounds). */
  rf_rounds reshape_rounds, rounds;
  char *group_break; /* grouped: [item of rounds] 1 where a round's group ends early, so
                      * that its staging fits (engine_staging.c) */
  int corrupt_round; /* the round after which --inject corrupt flips its byte */
  int corrupt_armed; /* rf_engine_corrupt: flip a byte in the next iteration */
  /* [send/recv][slot]: slots 0 and 1 double-buffer the stage's buckets (every bucket but
   * fused's forward ones); fused with forward steps double-buffers those in slots 2 and 3 */
  void *staging[2][4];
  size_t staging_bytes[2][2];            /* [send/recv][lane]: each lane's two slots' size */
  int64_t messages;                      /* messages this rank sent in the last iteration */
  rf_mem_timer pack_timer, unpack_timer; /* the pack and unpack phases' copies */
  /* fp8: the blocks this rank quantizes from its landing buffers, by the transfer round whose
   * end brings their last piece (engine_fp8.c), and the next one to quantize. */
  struct rf_fp8_block *fp8_blocks;
  int fp8_block_count, fp8_next;
  /* A format with a global scale (nvfp4): per logical tensor, the global its blocks are
   * quantized with, agreed at the start of each iteration (engine_fp8_global.c); NULL
   * elsewhere, where every global is 1. */
  float *fp8_global;
  /* --delta (engine_delta.c): the choice, its buffers, whether an iteration's pieces have all
   * arrived and passed their checks and wait for rf_engine_delta_apply, whether the last
   * iteration went dense for want of a base, and what this rank sent in it. */
  rf_delta_choice delta;
  struct engine_delta *delta_state;
  int delta_pending, delta_dense;
  int delta_posted; /* every message of this delta iteration completed here: a failure after it
                     * (a refused piece) leaves no peer waiting for this rank */
  int64_t delta_wire_bytes, delta_changed, delta_elements;
  int64_t delta_forward_bytes; /* encoded bytes this rank forwarded to other replicas */
  int64_t delta_pieces[3];     /* per encoding (delta.h's table): pieces this rank encoded */
  int64_t delta_marked_pieces; /* of them, those encoded from the trainer's marks */
  /* The same by tensor kind: [kind][encoding] pieces, then [kind][RF_DELTA_KIND_ELEMENTS]
   * elements, changed elements and wire bytes (pieces that crossed to another rank). */
  int64_t delta_kinds[RF_T_KIND_COUNT][RF_DELTA_KIND_FIELDS];
  /* Receipts (engine_receipts.c): every rollout rank's, [rollout rank], as the last
   * rf_engine_set_receipts gave them, and 1 where that rank does not hold the kept version
   * (stale: its pieces go dense); how many are stale, and the pieces this rank sent dense
   * because their destination was, over the run's iterations. --inject skip-version: armed
   * for the next iteration. */
  rf_receipt *receipts;
  char *stale;
  int delta_stale_ranks;
  int64_t delta_stale_pieces;
  int skip_armed;
  /* rf_engine_set_progress: called between tensors of the checks */
  void (*progress)(void *ctx);
  void *progress_ctx;
} rf_engine;

/* Builds the schedules of one mode over the job's buffers and allocates the staging. */
rf_status rf_engine_init(rf_engine *e, rf_buffers *data, rf_transport *tp, rf_mode mode,
                         int64_t bucket_size, uint64_t seed, rf_inject inject, int world_rank);
void rf_engine_free(rf_engine *e);
/* --mapped-rounds for this engine: `choice`, with auto decided by `forward_crosses_gpus`
 * (rf_job_forward_crosses_gpus in the driver). The same on every rank, since it changes which
 * notes the ranks exchange. */
void rf_engine_set_mapped_rounds(rf_engine *e, rf_mapped_rounds choice, int forward_crosses_gpus);

/* --delta for this engine's iterations (engine_delta.c). Refuses in one line (RF_ERR_USAGE)
 * what this build does not run with deltas: the star plan, fanout and hierarchical over a
 * mapping transport, quantized rollout formats, and GPU weights staged through host memory.
 * Allocates the trainer's previous version (once per job, in the shards' memory kind), an
 * encode buffer (over a mapping transport the job's, offered to the others), an inbox and,
 * where the plan forwards, a forward buffer. Off: nothing. */
rf_status rf_engine_set_delta(rf_engine *e, rf_delta_choice choice);
/* Whether the next iteration sends a delta: deltas are on and the rollout holds a base. The
 * first iteration of a job is dense, the rollout holding no version yet. */
int rf_engine_delta_next(const rf_engine *e);
/* After an iteration that every rank agreed succeeded: the rollout ranks apply the pieces that
 * all arrived and passed their checks (nothing before that, so that a refused piece anywhere
 * leaves every rollout rank at its version), timed as apply and added to the total; then the
 * trainer's previous version becomes the one it sent. A no-op for a dense iteration but for
 * the last step. Every rank calls it. */
rf_status rf_engine_delta_apply(rf_engine *e, double *times);
/* After an iteration that failed: under delta nothing was applied, so the rollout still holds
 * the version before (e->moved goes back to it, for the checks); the trainer keeps its base. */
void rf_engine_delta_refused(rf_engine *e);
/* The bytes of the trainer's previous version this rank keeps (0 when deltas are off). */
int64_t rf_engine_delta_kept_bytes(const rf_engine *e);

/* Version receipts. This rank's: the version its rollout holds ({-1, 0} where it holds none or
 * has no rollout role). Before each delta iteration every rank passes every rollout rank's,
 * receipts[rollout rank] (the driver gathers them on the control plane), and the trainer
 * encodes against its kept version only for a peer whose receipt names that version: a peer
 * that holds another (a replica that missed one) gets its pieces dense in the same iteration,
 * in the same wire format, so that the receiving side does not change. Sets
 * e->delta_stale_ranks, the same on every rank; rf_engine_stale says which they are. */
rf_receipt rf_engine_receipt(const rf_engine *e);
void rf_engine_set_receipts(rf_engine *e, const rf_receipt *receipts);
/* Whether rollout rank r is stale in this iteration, and its receipt (*held). */
int rf_engine_stale(const rf_engine *e, int r, rf_receipt *held);
/* The kept version's receipt: what a rollout rank must hold for a delta. */
rf_receipt rf_engine_kept_receipt(const rf_engine *e);

/* Arms --inject skip-version for the next iteration, a delta one: the skipping rank (the rank
 * --inject corrupt strikes, the last rollout rank where nothing forwards) receives and checks
 * its pieces as every rank does, then does not apply them, as a replica that missed the
 * version would: its weights and its receipt stay at the version before, and the next delta
 * iteration must refit it dense. */
void rf_engine_skip_version(rf_engine *e);

/* Overwrites every destination buffer with a pattern the generator never produces, so an
 * element the next iteration fails to write cannot pass verification. */
rf_status rf_engine_poison(rf_engine *e);

/* One transfer; phase seconds go to times[RF_PHASE_COUNT]. `stall` makes this rank skip its
 * part (the stall injection). */
rf_status rf_engine_iterate(rf_engine *e, double *times, int stall);
/* After an iteration that failed on some rank (every rank calls it once the ranks have agreed
 * on the failure): ends what the transport still has posted (transport.h, abandon). */
rf_status rf_engine_abandon(rf_engine *e);

/* After the last iteration: full check of every element this rank holds on the rollout side
 * against the version it moved (returns the count of wrong elements; logs the first few), and
 * the layout-invariant
 * checksums this rank contributes: trainer[tensor] and rollout[replica * tensors + tensor],
 * counting each element once per group (the lowest rank holding a replicated box). */
int64_t rf_engine_check(rf_engine *e, rf_checkpoint *checkpoint);
rf_status rf_engine_checksums(rf_engine *e, uint64_t *trainer, uint64_t *rollout);
/* The checks are local work whose length grows with the model; `fn(ctx)` is called between
 * tensors so that the caller can tell its peers that this rank is busy, not dead
 * (rf_control_busy). NULL turns it off. */
void rf_engine_set_progress(rf_engine *e, void (*fn)(void *ctx), void *ctx);

/* xxh3-64 of every shard this rank holds: trainer shards as stored, rollout parts in
 * row-major order. Sets *count; the caller frees *out. On failure (memory, reading device
 * data back) *out is NULL and *count 0. */
rf_status rf_engine_digests(rf_engine *e, rf_shard_digest **out, int *count);

/* Arms --inject corrupt for the next iteration: one received byte flips on the corrupting
 * rank, the last rollout rank, after the transfer; or, when the plan forwards, the last tp rank
 * of the replica the trainer sends the first tensor to, in the round that brings the byte and
 * before any round forwards it, so that the forward stage carries the flipped byte to every
 * replica downstream of it. */
void rf_engine_corrupt(rf_engine *e);

/* ---- what a chunk costs, from the plan alone -----------------------------------------------
 *
 * The rules by which the modes decide how a chunk travels, without buffers, so that refit
 * simulate counts the same copies and messages that refit run makes, under the wire rule the
 * engine chose (rf_wire). */

/* The rule for weights in `memory` over transport `ops`: staged when the transport moves
 * another kind of memory, gathers when it can post strided messages (REFIT_GATHER=0 turns
 * that off, to measure the packing path against it), else contiguous. */
rf_wire rf_engine_wire_rule(const rf_transport_ops *ops, rf_mem_kind memory);

/* How a chunk leaves its source buffer, or reaches its destination's: */
typedef enum {
  RF_CHUNK_DIRECT,   /* as one contiguous run, in place: no copy besides the transfer */
  RF_CHUNK_GATHERED, /* in place, row by row, gathered (scattered) by the transport, which
                        copies it through its fragments: a copy, but no staging */
  RF_CHUNK_STAGED,   /* packed into staging first (unpacked from it after) */
} rf_chunk_path;
/* Direct when that part of the source is one contiguous run (never in fused), gathered in
 * fused on a wire that gathers when its rows are contiguous, else staged. */
rf_chunk_path rf_engine_send_path(const rf_plan *plan, rf_mode mode, rf_wire wire,
                                  const rf_chunk *k);
/* The same rules for the destination's region, which must keep all of the chunk. */
rf_chunk_path rf_engine_recv_path(const rf_plan *plan, rf_mode mode, rf_wire wire,
                                  const rf_chunk *k);
/* Whether the engine gathers piece p's box copies into staging (pack) or out of it (unpack)
 * into one batch per bucket, one launch instead of one per chunk (engine_modes.c): fused's
 * packs and every mode's unpacks, but not fp8 chunks, quantized, carried or forwarded with
 * their scales (grouped and unfused send each chunk as soon as it is packed). refit simulate
 * charges one copy launch per batch by the same rule. */
int rf_engine_pack_batched(const rf_plan *plan, rf_mode mode, const rf_piece *p);
int rf_engine_unpack_batched(const rf_plan *plan, const rf_piece *p);
/* The staging rule (engine_staging.c), which refit simulate follows too: most[dir * world + r]
 * the staging slot world rank r needs for sending (dir 0) and receiving (1), the largest bucket
 * of any stage (reshape, transfer, every forward step), and for fused with forward steps, whose
 * forward buckets have slots of their own, of reshape and transfer alone, with
 * most[(2 + dir) * world + r] the forward slots' (0 otherwise); for grouped *breaks (NULL
 * otherwise, freed by the caller), per item of the rounds, 1 where a round's group of messages
 * ends early because that bucket would overflow some rank's staging. most holds 4 * world
 * values. */
rf_status rf_engine_staging_rule(const rf_plan *plan, rf_mode mode, rf_wire wire,
                                 const rf_schedule *reshape, const rf_schedule *transfer,
                                 const rf_schedule *forward, const rf_rounds *rounds, int64_t *most,
                                 char **breaks);
/* How many chunks from chunks[i] (before `end`, the bucket's end) move as one message in
 * unfused and grouped: whole pieces that continue each other in memory on both ends
 * (rf_piece_continues); 1 in fused and on a staged wire. */
int rf_engine_joined_chunks(const rf_plan *plan, rf_mode mode, rf_wire wire, const rf_chunk *chunks,
                            int i, int end);
/* How the schedule paces each rank pair over the buckets for `mode` (rf_pace): fused cuts
 * pieces at a pair's target, since it sends a pair's chunks of a bucket as one message anyway;
 * grouped and unfused post a message per chunk, so they keep pieces whole. refit simulate
 * cuts its schedules by the same rule. */
rf_pace rf_engine_pace(rf_mode mode);
/* Over a mapping transport, whether each piece's source copies it into the destination's
 * memory (push, 1) or the destination reads it out of the source's (pull, 0): a JAX-order
 * trainer pushes (engine_mapped.c says why). */
int rf_engine_pushes(const rf_plan *plan);
/* A one-sided transport (rma) lets the user choose the direction instead (--rma put|get);
 * every rank sets the same, after rf_engine_init. */
void rf_engine_set_push(rf_engine *e, int push);
/* Offers the arenas to a mapping transport's peers (its expose), once per job: the windows or
 * handles cost what registering memory costs, timed by the driver as a setup step of its own
 * (RF_SETUP_REGISTER); the engine's own first init does it otherwise. Agreed over the control
 * plane; nothing for a message transport. */
rf_status rf_engine_expose(rf_buffers *data, rf_transport *tp);
/* Offers the caller's own memory (librefit's refit_register) to a transport that maps it
 * (maps_caller_memory: ipc), so that peers copy from and into it rather than the arenas:
 * collective over the world, after rf_engine_init; shards[t] (model tensors) and rollout[i]
 * (rollout tensors) flag what this rank's caller registered, whose memory data->shards[t] and
 * data->rollout[i] now point at (either may be NULL: nothing). A later call replaces the
 * earlier offer (the earlier mappings stay open until the transport closes). Maps what this
 * rank copies from or into at once, and agrees the outcome over the control plane. */
rf_status rf_engine_expose_caller(rf_engine *e, const char *shards, const char *rollout);

#endif
