/* Shared between the engine's files: the regions a chunk reads and writes. */
#ifndef RF_ENGINE_INTERNAL_H
#define RF_ENGINE_INTERNAL_H

#include "delta/delta.h"
#include "engine.h"
#include "verify/fp8.h"

/* Bytes per element of a tensor: its own dtype's, which fused staging mixes freely (an fp32
 * chunk may follow a bf16 one at an offset that is 2 mod 4, so host code reaches staging only
 * through memcpy-based copies). */
int engine_esize(const rf_engine *e, int tensor);

/* This rank's trainer shard of a tensor, and its part of a tensor in the fused rollout
 * tensor (held is set to the box it holds). */
rf_region engine_shard_region(const rf_engine *e, int tensor);
rf_region engine_rollout_region(const rf_engine *e, int tensor, rf_box *held);
/* Rollout rank `rank`'s part of tensor `tensor` in its fused rollout tensor over `base`: held
 * is the element box, the region the bytes that hold it (its box rf_layout_rollout_bytes of
 * held: halved columns for 4-bit elements, packed two a byte). */
rf_region engine_rollout_over(const rf_plan *plan, int tensor, int rank, void *base, rf_box *held);

/* How a stage's pieces name this rank and its peers: the channel the stage travels on
 * (the trainer group for star's reshape, else the world), this rank's number as a piece's
 * source (trainer rank, or rollout rank for the forward stage) and destination (trainer rank
 * for the reshape, else rollout rank), and the channel rank of a piece's other end. */
rf_channel engine_channel(rf_stage stage);
int engine_src_rank(const rf_engine *e, rf_stage stage);
int engine_dst_rank(const rf_engine *e, rf_stage stage);
int engine_peer(const rf_engine *e, const rf_piece *p, int sending);

/* The region a piece is read from: a trainer shard, star's coupling buffer, or (forward) this
 * rank's part of the fused rollout tensor. */
rf_region engine_source(const rf_engine *e, const rf_piece *p);
/* The arena a transfer piece is read from: the coupling buffers under star (the reshape fills
 * them), else the trainer shards. */
rf_buffer_family engine_source_family(const rf_plan *plan);
/* The region engine_source gives, in `copy`, a copy of that arena (the trainer's kept version,
 * rf_buffers.prev_arena): the same place in it. */
rf_region engine_source_in(const rf_engine *e, const rf_piece *p, void *copy);
/* star: the reshape between the trainer ranks, timed from `start` as the reshape phase; nothing
 * for the other plans. */
rf_status engine_reshape(rf_engine *e, double start, double *times);
/* The region a piece lands in, and the part of `box` the destination keeps. */
rf_region engine_destination(const rf_engine *e, const rf_piece *p, const rf_box *box,
                             rf_box *kept);

/* The engine's schedules in the order they run: 0 reshape, 1 transfer, 2 + s forward step s. */
const rf_schedule *engine_stage(const rf_engine *e, int i);

/* ---- one bucket of a mode (engine_modes.c) ---- */

/* What the posts of one round share: the transport's last ticket, the staging that unfused
 * and grouped have used since their last wait, the local copies still to run as one batch, the
 * receives that landed in staging and are unpacked once the round's wait completes, the packs
 * or unpacks of a bucket gathered into one batch, and fused's peer tables and message parts. */
typedef struct {
  rf_engine *e;
  long ticket;
  int64_t send_off, recv_off;
  rf_box_copy *local;
  int local_count, local_cap;
  const rf_chunk **unpack_chunk;
  char **unpack_at;
  int unpack_count, unpack_cap;
  rf_box_copy *batch; /* plain box copies into or out of staging, run by flush_batch */
  int batch_count, batch_cap;
  int64_t *peers;
  rf_strided *parts; /* a gathered message's parts (fused on a wire that gathers) */
  int part_count, part_cap;
} engine_round;
void engine_round_free(engine_round *r);

/* unfused and grouped: posts bucket b of s, a message per chunk or per run of joined chunks;
 * unfused completes after every tensor (or block), grouped leaves the wait to the caller. */
rf_status engine_post_chunks(engine_round *r, const rf_schedule *s, int b);
/* Runs the pending local copies, waits for everything posted, unpacks what landed in staging;
 * staging is free again after it. */
rf_status engine_complete(engine_round *r, const char *what);
rf_status engine_flush_local(engine_round *r);
/* fused: packs bucket b of s into send_base and posts one message per peer and direction,
 * receiving into recv_base; after the wait, unpacks it from recv_base. */
rf_status engine_post_fused(engine_round *r, const rf_schedule *s, int b, char *send_base,
                            char *recv_base);
rf_status engine_unpack_fused(engine_round *r, const rf_schedule *s, int b, char *recv_base);
/* Device weights over a host transport: the staging copies must have finished before the
 * transport reads staging, or writes it again. */
rf_status engine_wire_ready(const rf_engine *e);

/* ---- rounds (engine_rounds.c) ---- */

/* Runs `rounds` over the engine's schedules, each item's step -1 being engine_stage(e, stage)
 * and step s forward step s; adds pack/transfer/unpack seconds into times. */
rf_status engine_run_rounds(rf_engine *e, const rf_rounds *rounds, int stage, double *times);

/* The same over a mapping transport: one end of each piece copies it straight between the
 * two processes' memory (engine_mapped.c). */
rf_status engine_run_stage_mapped(rf_engine *e, const rf_schedule *s, double *times);
/* fanout over a mapping transport: the transfer and the forward steps in rounds (plan.h,
 * rf_rounds), each round one exchange of notes around its buckets' copies, so that a replica
 * forwards the buckets of earlier rounds while the trainer's next ones arrive. */
rf_status engine_run_rounds_mapped(rf_engine *e, double *times);
/* Maps the arenas this rank copies from or into (ipc setup, once per mode). */
rf_status engine_mapped_init(rf_engine *e);

/* --inject corrupt, once armed: flips one byte on the corrupting rank (engine_check.c), at
 * the end of the round engine_corrupt_round names: the one in which that byte arrives there,
 * before any round forwards it (the last round where the plan does not forward). */
rf_status engine_apply_corrupt(rf_engine *e);
int engine_corrupt_round(const rf_engine *e);
/* The rollout rank that --inject corrupt strikes. */
int engine_corrupt_rank(const rf_engine *e);

/* ---- delta refits (engine_delta.c) ---- */

/* One delta iteration: encode (timed as encode), the size tables and the pieces (transfer),
 * and every received piece checked, nothing written (apply); rf_engine_delta_apply writes them
 * once every rank agreed. */
rf_status engine_delta_iterate(rf_engine *e, double *times);
void engine_delta_free(rf_engine *e);

/* ---- version receipts (engine_receipts.c) ---- */

/* The receipt arrays, [rollout rank], at rf_engine_set_delta; freed by engine_delta_free. */
rf_status engine_receipts_init(rf_engine *e);
void engine_receipts_free(rf_engine *e);
/* Whether rollout rank r is stale in this iteration: its pieces go dense. */
int engine_stale(const rf_engine *e, int r);
/* After an iteration every rank agreed on, before its pieces are applied: whether this rank
 * drops them (--inject skip-version armed, and this the skipping rank: it says so in one
 * line); disarms. */
int engine_skip_now(rf_engine *e);
/* After that: this rank's rollout holds the version moved, unless it dropped it. */
void engine_hold(rf_engine *e, int dropped);

/* ---- delta refits of a quantized rollout (engine_delta_quant.c) ---- */

/* Whether chunk k's piece travels quantized by its source: its delta is one of wire bytes. */
int engine_delta_quantized(const rf_engine *e, const rf_chunk *k);
/* What chunk k's delta is encoded over: the part of its box its destination keeps (all of it
 * but for star's whole embeddings and norms) and its tensor's element size, or for a quantized
 * piece its wire bytes as a 1 x bytes box of 1-byte elements. */
rf_box engine_delta_box(const rf_engine *e, const rf_chunk *k, int *esize);
/* 1, with what is refused and what to use instead, where the plan's quantized rollout cannot
 * take delta refits; 0 where it can (or has no format). Every rank decides alike. */
int engine_delta_quant_refusal(const rf_engine *e, char *what, size_t what_len, char *instead,
                               size_t instead_len);
/* What encode is asked for and where it writes (rf_delta_encode's arguments). */
typedef struct {
  rf_delta_encoding want;
  char *to;
  size_t capacity;
  const char *what;
} engine_delta_encode_args;
/* Encodes quantized chunk k: both versions (prev, cur: the trainer's shard regions) quantized
 * into scratch[0] and scratch[1], each of the chunk's wire bytes, then their difference. */
rf_status engine_delta_quant_encode(const rf_engine *e, const rf_chunk *k, const rf_region *prev,
                                    const rf_region *cur, char *const scratch[2],
                                    const engine_delta_encode_args *a, rf_delta_info *info);
/* A quantized piece this rank holds (`here`: the piece as it lands here): with bytes >= 0 the
 * encoded piece's checks alone (rf_delta_check, filling *info); with bytes < 0 its application
 * through scratch (the chunk's wire bytes): what this rank holds packed, the delta applied, the
 * result unpacked into its tensor and scales. */
rf_status engine_delta_quant_held(const rf_engine *e, const rf_piece *here, const rf_chunk *k,
                                  const void *encoded, rf_delta_info *info, int64_t bytes,
                                  char *scratch, const char *what);
/* A format with a global scale (nvfp4), before encode: this version's globals agreed over MPI
 * (collective), not yet written into the rollout (the kept version's stay in prev_global). */
rf_status engine_delta_quant_globals(rf_engine *e);
/* After a refused refit: the globals of the version the rollout still holds, back. */
void engine_delta_quant_globals_back(rf_engine *e);
/* The trainer's kept version follows a quantized chunk it sent: box copied from cur to prev. */
rf_status engine_delta_quant_keep(const rf_engine *e, const rf_region *prev, const rf_region *cur,
                                  const rf_box *box);

/* ---- the delta wire's stages (engine_delta_forward.c) ---- */

/* One encoded piece this rank sends or receives in a stage of the delta wire. */
typedef struct {
  int32_t chunk;  /* the transfer chunk whose encoded piece it is */
  int32_t peer;   /* the world rank at the other end */
  int32_t bucket; /* the stage's bucket it travels in */
  int32_t send;   /* 1: this rank sends it; 0: receives it */
  int32_t seq;    /* its place in the stage's order */
  int64_t at;     /* where it lies: in the buffer it is sent from, or in the inbox */
} engine_delta_entry;

/* A stage's entries by bucket, peer, direction (receives first), then the stage's order: one
 * message of sizes per peer and direction, then one of pieces per peer, direction and bucket. */
typedef struct {
  engine_delta_entry *entries;
  int count, bucket_count;
} engine_delta_stage;

/* The rollout rank the trainer sends rollout rank `rollout_rank`'s part of `tensor` to: its
 * tree's root where the plan forwards the tensor, else the rank itself. */
int engine_delta_origin(const rf_plan *plan, int tensor, int rollout_rank);
/* from[tensor]: the rollout rank that forwards it to `rollout_rank`, -1 where none does. */
void engine_delta_forwarders(const rf_plan *plan, int rollout_rank, int *from);
/* stages[0] the transfer's, stages[1 + s] forward step s's (plan->forward_depth of them), over
 * this rank's origin[tensor]; the caller frees each stage's entries. */
rf_status engine_delta_stages_build(const rf_engine *e, const int *origin,
                                    engine_delta_stage *stages);
/* Packs the pieces stage s sends, back to back at 8-byte boundaries, from where they lie in the
 * inbox (in[chunk]) to `to`, one batch of copies; sets each send entry's `at` and *bytes to
 * their exact bytes. */
rf_status engine_delta_pack(rf_mem_kind kind, engine_delta_stage *s, const char *inbox,
                            const int64_t *in, const int64_t *size, char *to, int64_t *bytes);
/* The buffers a stage's sizes travel through: host and wire memory of the most entries of any
 * stage, and at[2 * world + 1], where each peer's sizes start, sent then received. */
typedef struct {
  rf_mem_kind kind;
  int64_t *host, *wire, *at;
  int64_t *src_at; /* NULL, or [chunk]: each size goes with where the piece lies in its
                      sender's buffer (entry `at`), and the receiver's are set here */
} engine_delta_tables;
/* A stage's exact sizes, size[chunk] of what this rank sends, one message per peer and
 * direction, each peer's in the stage's order; size[chunk] of what it receives is set (and
 * with t->src_at, where each lies in its sender's buffer). */
rf_status engine_delta_exchange_sizes(rf_engine *e, const engine_delta_stage *st,
                                      engine_delta_tables *t, int64_t *size, long *ticket);
/* A stage's pieces, one message per peer and direction per bucket: each peer's lie back to back
 * at the entries' places, sent from `from` (the encoded or the packed forwarded pieces) and
 * received into `inbox`; waits for them all. */
rf_status engine_delta_post(rf_engine *e, const engine_delta_stage *st, const int64_t *size,
                            char *from, char *inbox, long *ticket);
/* Over a mapping transport: the pieces a stage brings this rank, copied out of each sender's
 * offered buffer (offer `index`, src_at[chunk]) to their places in the inbox, one copy per run
 * of a peer's pieces in a bucket (back to back at both ends); waits for them. */
rf_status engine_delta_pull(rf_engine *e, const engine_delta_stage *st, const int64_t *size,
                            const int64_t *src_at, char *inbox, int index);
/* Over a mapping transport the trainer's encoded buffer and a replica's forward buffer are the
 * job's (rf_buffers.delta_out, delta_fw: `o`): grown to `bytes` when this run needs more, in
 * `kind` memory (`what` names it in errors), and offered again by every rank alike (an append
 * to the job's offers, so that its index, o->index, is the same everywhere); *out is it.
 * Collective over the world. */
rf_status engine_delta_offer(rf_engine *e, rf_mem_kind kind, size_t bytes, rf_offered *o,
                             const char *what, char **out);

/* Allocates this rank's staging, the largest bucket of any stage per direction (twice for
 * fused), and for grouped the group breaks that keep every round inside it (engine_staging.c). */
rf_status engine_alloc_staging(rf_engine *e);

/* ---- fp8 rollouts (engine_fp8.c) ---- */

/* The blocks of the rollout's format (128x128 for fp8, 1x32 for mxfp8) that a box touches, in
 * block coordinates. */
rf_box engine_fp8_blocks_of(const rf_layout *lay, const rf_box *box);
/* Where the scales of a quantized tensor's blocks lie, in block coordinates: a row-major
 * region (a chunk's wire bytes, a shard's, a rollout scale tensor of a row-major format), or a
 * rollout scale tensor in 128x4 tiles (nvfp4), which engine_scale_at addresses block by block
 * through rf_format_scale_offset (tiles: the format; base: the tiles of the member's expert,
 * or of the 2-D tensor; row0, col0: where the region's first block lies in that grid). */
typedef struct {
  rf_region r; /* row-major: block (bi, bj) at rf_region_at(&r, bi, bj); tiles: its box only */
  const rf_format *tiles;
  char *base;
  int64_t row0, col0, grid_cols;
} engine_scales;
char *engine_scale_at(const engine_scales *s, int64_t bi, int64_t bj);
/* The scales of the blocks `blocks` (inside s's box) as the GPU's kernels take them
 * (fp8.h): row-major from the box's first block, or the tiles with that block's place in them. */
rf_scale_side engine_scale_side(const engine_scales *s, const rf_box *blocks);
/* Rollout rank `rollout_rank`'s scales of fp8 tensor `tensor` in block coordinates (*blocks:
 * the blocks of its held box), in the scale tensor that starts at `scales` (its weight's
 * rollout tensor's next one, layout_fp8.c; NULL: geometry only). */
engine_scales engine_fp8_scales(const rf_plan *plan, void *scales, int tensor, int rollout_rank,
                                rf_box *blocks);
/* A source-quantized chunk: packs `box` of src as fp8 bytes and scales at `to`; unpacks them
 * from `from` into this rank's fp8 tensor and scales; or quantizes `box` of src (this rank's or
 * a mapped peer's) straight into them. engine_fp8_copy copies fp8 bytes and scales another
 * replica holds (fanout over a mapping) into this rank's. */
rf_status engine_fp8_pack(const rf_engine *e, const rf_piece *p, const rf_region *src,
                          const rf_box *box, char *to);
rf_status engine_fp8_unpack(const rf_engine *e, const rf_piece *p, const rf_box *box, char *from);
/* engine_fp8_pack with the given globals (NULL: every global 1) instead of fp8_global: a delta
 * refit quantizes the kept version with the globals of the version before. */
rf_status engine_fp8_pack_with(const rf_engine *e, const float *globals, const rf_piece *p,
                               const rf_region *src, const rf_box *box, char *to);
rf_status engine_fp8_local(const rf_engine *e, const rf_piece *p, const rf_region *src,
                           const rf_box *box);
rf_status engine_fp8_copy(const rf_engine *e, const rf_piece *p, const rf_region *src_q,
                          const engine_scales *src_scale, const rf_box *box);
/* A block-FP8 checkpoint's piece (RF_QUANT_CARRIED): `box` of the trainer's fp8 shard src and
 * the scales beside it (rf_shard_scale_region), packed at `to`, or with `to` NULL copied
 * straight into this rank's fp8 tensor and scales (a local piece, or a mapped source). */
rf_status engine_fp8_carried(const rf_engine *e, const rf_piece *p, const rf_region *src,
                             const rf_box *box, char *to);
/* fanout: packs the fp8 bytes and scales of `box` that this rank holds, for forwarding. */
rf_status engine_fp8_pack_forward(const rf_engine *e, const rf_piece *p, const rf_box *box,
                                  char *to);
/* A block this rank quantizes from its landing buffer once `round` of the transfer is done. */
struct rf_fp8_block {
  int32_t tensor, round;
  int64_t bi, bj;
};
/* Lists them from the transfer's schedule (rf_engine_init); at the end of each transfer round,
 * quantizes those whose last piece that round brought (fp8_next must be 0 at the first). */
rf_status engine_fp8_blocks_init(rf_engine *e);
rf_status engine_fp8_round_done(rf_engine *e, int round);
/* This rank's fp8 part of tensor t (q, held) and its scales (scale, blocks, in block
 * coordinates). */
void engine_fp8_rollout(const rf_engine *e, int tensor, rf_region *q, rf_box *held,
                        engine_scales *scale, rf_box *blocks);
/* The one-line error for a block [r0, r1) x [c0, c1) of t that holds inf (nan 0) or NaN. */
rf_status engine_fp8_non_finite(const rf_tensor *t, int nan, int64_t r0, int64_t r1, int64_t c0,
                                int64_t c1);
/* Every fp8 byte and scale of this rank's part of fp8 tensor t against the reference from the
 * generator (or the checkpoint): the count of wrong ones (-1: the reference failed); logs the
 * first few while *reported is below 4. Device memory is checked on the GPU. */
int64_t engine_fp8_check(const rf_engine *e, rf_checkpoint *ckpt, int t, int *reported);
/* rf_fp8_checksum of this rank's part of fp8 tensor t. */
rf_status engine_fp8_checksum(const rf_engine *e, int t, uint64_t *sum);
/* The same terms for this trainer rank's shard of a block-FP8 checkpoint's tensor t: its fp8
 * bytes and the scales of the blocks whose first element it holds (each block's once). */
rf_status engine_fp8_trainer_checksum(const rf_engine *e, int t, uint64_t *sum);
/* ---- global scales (engine_fp8_global.c) ---- */

/* A format with a global scale (nvfp4): allocates fp8_global, every global 1 until agreed. */
rf_status engine_fp8_globals_init(rf_engine *e);
/* At the start of an iteration: every trainer rank's maxima per group, one bounded
 * MPI_Allreduce(MAX) over the world, each tensor's global, and (write) each rollout rank's
 * X.weight_scale_2; the time adds to times[RF_PHASE_PACK]. A no-op for other formats. */
rf_status engine_fp8_agree_globals(rf_engine *e, double *times, int write);
/* Writes this rollout rank's X.weight_scale_2 from fp8_global: a delta refit's apply does, once
 * every piece of the version has arrived. */
rf_status engine_fp8_write_globals(const rf_engine *e);
/* Where tensor t's global lies in its rollout tensor's X.weight_scale_2: its local expert for
 * a stacked tensor, else 0. */
int64_t engine_fp8_global_index(const rf_layout *lay, int t);
/* The reference global of tensor t for the checks: from the whole of every member of its group,
 * made by the generator (or read from the checkpoint), not from the agreed maxima. */
rf_status engine_fp8_reference_global(const rf_engine *e, rf_checkpoint *ckpt, int t, float *out);

/* GPU memory: waits for the quantization kernels queued so far and fails in one line, naming
 * the tensor and block, if one of them met inf or NaN. A no-op elsewhere. */
rf_status engine_fp8_device_done(const rf_engine *e);

#endif
