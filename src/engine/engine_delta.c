/* Delta refits over the message transports (docs/architecture.md, "Delta refits"): each
 * trainer rank encodes what changed in its chunks since the version it last sent, the rollout
 * ranks receive every encoded piece of the iteration into an inbox, check them all, and apply
 * them only once every rank has agreed that the iteration arrived whole.
 *
 * The wire, the same in every mode: one message per peer per bucket of the transfer schedule,
 * its chunks' encoded pieces back to back at 8-byte boundaries (the GPU's kernels read and
 * write encoded pieces 8-byte aligned). The receiver cannot know the sizes from the plan, so
 * each sender first sends each of its peers one message of the exact sizes of the pieces it
 * encoded for it, in schedule order, over the same transport; the receiver then posts
 * exact-size receives. The modes only differ in how the schedule cuts pieces (fused paces a
 * pair's rows, the others keep pieces whole), which decides how many pieces there are.
 *
 * Where the plan forwards (fanout, hierarchical), each forward step follows the transfer the
 * same way: a replica packs the encoded pieces it forwards (engine_delta_forward.c), sends
 * their sizes, then the pieces, which land in the next replica's inbox; every rank then checks
 * every piece it holds, so that a piece damaged anywhere upstream is refused downstream too.
 *
 * Over a mapping transport (shm, ipc), whose messages are only small host notes, each trainer
 * offers its encoded buffer to the others (once per run, an append to the job's offers); the
 * transfer's size messages then also say where each piece lies in it, and each rollout rank
 * copies its pieces out, one copy per run of a peer's pieces in a bucket, instead of receiving
 * messages. A replica that forwards offers its forward buffer the same way, each step's pieces
 * after the step's before (its receivers may still be copying out when the next step packs).
 *
 * A rollout rank whose version receipt does not name the version the trainer kept (it missed
 * one) gets its pieces dense, in the same format (engine_receipts.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_delta_state.h"

/* Where chunk k is read on the trainer: the version it sends (cur) and the one it kept. */
static rf_region cur_region(const rf_engine *e, const rf_chunk *k) {
  return engine_source(e, piece_of(e, k));
}
static rf_region prev_region(const rf_engine *e, const rf_chunk *k) {
  return engine_source_in(e, piece_of(e, k), e->data->prev_arena);
}

/* A piece's name in errors: its tensor, rows and columns, and its two ends. */
static void name_piece(const rf_engine *e, const rf_chunk *k, char *buf, size_t len) {
  const rf_piece *p = piece_of(e, k);
  int esize; /* the part encoded (star: the destination's share), but for a quantized piece */
  rf_box b = engine_delta_quantized(e, k) ? k->box : engine_delta_box(e, k, &esize);
  snprintf(buf, len, "%s rows %lld..%lld cols %lld..%lld (trainer rank %d to rollout rank %d)",
           e->plan->layout->model->tensors[p->tensor].name, (long long)b.lo[0], (long long)b.hi[0],
           (long long)b.lo[1], (long long)b.hi[1], p->src, p->dst);
}

/* A piece this rank holds, named as above, and where it was forwarded to this rank, from whom. */
static void name_held(const rf_engine *e, const rf_chunk *k, char *buf, size_t len) {
  name_piece(e, k, buf, len);
  size_t n = strlen(buf);
  int from = e->delta_state->from[piece_of(e, k)->tensor];
  if (piece_of(e, k)->dst != e->rollout_rank && n > 0 && n < len)
    snprintf(buf + n - 1, len - n + 1, ", forwarded to rollout rank %d by rollout rank %d)",
             e->rollout_rank, from);
}

/* The encoding chunk k is encoded in: what --delta asks for where its destination holds the
 * version the trainer kept, dense where its receipt says it holds another (engine_receipts.c):
 * a delta against the kept version would not bring that rank to the new one. */
static rf_delta_encoding want_of(const rf_engine *e, const rf_chunk *k) {
  return engine_stale(e, piece_of(e, k)->dst) ? RF_DELTA_DENSE : engine_delta_asked(e);
}

/* The trainer's marks for chunk k's piece when encode may read them (rf_buffers.marks): valid,
 * and the piece read from the shard they number. */
static const uint64_t *marks_of(const rf_engine *e, const rf_chunk *k, const rf_region *cur) {
  const rf_buffers *b = e->data;
  int t = piece_of(e, k)->tensor;
  if (!b->marks_valid || cur->base != (char *)b->shards[t])
    return NULL;
  return b->marks + b->marks_at[t];
}

/* Encodes chunk i into `to` against the trainer's previous version, counting what it chose
 * (and the pieces that went dense because their destination was stale). */
static rf_status encode_chunk(rf_engine *e, int i, char *to, size_t capacity) {
  struct engine_delta *d = e->delta_state;
  const rf_chunk *k = &e->transfer.chunks[i];
  int t = piece_of(e, k)->tensor;
  rf_region prev = prev_region(e, k), cur = cur_region(e, k);
  int esize;
  rf_box box = engine_delta_box(e, k, &esize);
  char what[256];
  name_piece(e, k, what, sizeof what);
  rf_delta_info info;
  engine_delta_encode_args a = {want_of(e, k), to, capacity, what};
  int quantized = engine_delta_quantized(e, k);
  rf_delta_marks marks = {quantized ? NULL : marks_of(e, k, &cur)};
  RF_TRY(quantized
             ? engine_delta_quant_encode(e, k, &prev, &cur, d->quant, &a, &info)
             : rf_delta_encode_marked(e->memory, &prev, &cur, &box, marks.words ? &marks : NULL,
                                      a.want, to, capacity, what, &info));
  e->delta_marked_pieces += marks.words != NULL;
  d->marked[i] = marks.words != NULL;
  d->size[i] = info.bytes;
  d->sent[i] = info;
  e->delta_pieces[info.encoding]++;
  e->delta_stale_pieces += engine_stale(e, piece_of(e, k)->dst);
  e->delta_changed += info.changed;
  e->delta_elements += info.elements;
  int64_t *kind = e->delta_kinds[e->plan->layout->model->tensors[t].kind];
  kind[info.encoding]++;
  kind[RF_DELTA_KIND_ELEMENTS] += info.elements;
  kind[RF_DELTA_KIND_CHANGED] += info.changed;
  if (!is_local(e, k)) {
    e->delta_wire_bytes += info.bytes;
    kind[RF_DELTA_KIND_WIRE] += info.bytes;
  }
  return RF_OK;
}

/* Encodes every chunk this rank sends: the sent ones back to back in wire order, each
 * given the rest of the buffer (encode may use its capacity as scratch, and nothing after it is
 * written yet), the local ones at their places in the inbox. */
static rf_status encode_all(rf_engine *e) {
  struct engine_delta *d = e->delta_state;
  const rf_schedule *s = &e->transfer;
  engine_delta_stage *st = &d->stages[0];
  for (int i = 0; i < s->chunk_count; i++)
    if (is_local(e, &s->chunks[i]))
      RF_TRY(
          encode_chunk(e, i, d->inbox + d->at[i], (size_t)engine_delta_capacity(e, &s->chunks[i])));
  int64_t off = 0;
  for (int j = 0; j < st->count; j++) {
    engine_delta_entry *en = &st->entries[j];
    if (!en->send)
      continue;
    en->at = d->at[en->chunk] = off;
    RF_TRY(encode_chunk(e, en->chunk, d->out + off, d->out_bytes - (size_t)off));
    off += align8(d->size[en->chunk]);
  }
  return RF_OK;
}

/* A stage's exact sizes (engine_delta_exchange_sizes), then the pieces it brings placed back to
 * back from *fill, which moves past them. */
static rf_status exchange_sizes(rf_engine *e, engine_delta_stage *st, int64_t *fill, long *ticket) {
  struct engine_delta *d = e->delta_state;
  engine_delta_tables t = {d->table_kind, d->table, d->table_wire, d->table_at,
                           d->pull ? d->src_at : NULL};
  RF_TRY(engine_delta_exchange_sizes(e, st, &t, d->size, ticket));
  *fill = engine_delta_place_received(e, st, *fill, 0);
  return RF_OK;
}

/* --inject corrupt under delta: the corrupting rank flips the last byte of the first piece it
 * received from a trainer rank (its payload's, or for a piece without one its header's hash),
 * which its check must refuse, and where the plan forwards that piece, every check downstream. */
static rf_status corrupt_inbox(rf_engine *e) {
  struct engine_delta *d = e->delta_state;
  const rf_schedule *s = &e->transfer;
  for (int i = 0; i < s->chunk_count; i++) {
    const rf_chunk *k = &s->chunks[i];
    if (!receives(e, k) || is_local(e, k))
      continue;
    char *at = d->inbox + d->in[i] + d->size[i] - 1, byte;
    RF_TRY(rf_mem_transfer(&byte, RF_MEM_HOST, at, d->kind, 1));
    byte ^= 0x5a;
    RF_TRY(rf_mem_transfer(at, d->kind, &byte, RF_MEM_HOST, 1));
    char what[256];
    name_piece(e, k, what, sizeof what);
    RF_WARN("inject corrupt: flipped the last byte of the delta for %s", what);
    return RF_OK;
  }
  return RF_OK;
}

/* The transfer's sizes and pieces, then each forward step's: the pieces a replica forwards
 * packed back to back, their sizes, the pieces. --inject corrupt strikes between the transfer
 * and the first forward step, which carries the flipped byte on. */
static rf_status run_stages(rf_engine *e, long *ticket) {
  struct engine_delta *d = e->delta_state;
  int64_t fill = d->local_end, bytes = 0;
  RF_TRY(exchange_sizes(e, &d->stages[0], &fill, ticket));
  RF_TRY(d->pull ? engine_delta_pull(e, &d->stages[0], d->size, d->src_at, d->inbox,
                                     e->data->delta_out.index)
                 : engine_delta_post(e, &d->stages[0], d->size, d->out, d->inbox, ticket));
  if (e->corrupt_armed && e->rollout_rank >= 0 && e->rollout_rank == engine_corrupt_rank(e)) {
    e->corrupt_armed = 0;
    RF_TRY(corrupt_inbox(e));
  }
  for (int k = 1; k <= e->plan->forward_depth; k++) {
    engine_delta_stage *st = &d->stages[k];
    RF_TRY(engine_delta_pack(d->kind, st, d->inbox, d->in, d->size, d->fw + d->fw_at[k], &bytes));
    for (int j = 0; j < st->count; j++) /* the places, in fw */
      st->entries[j].at += st->entries[j].send ? d->fw_at[k] : 0;
    RF_TRY(rf_mem_sync(d->kind)); /* the packed pieces are there before the transport reads */
    e->delta_forward_bytes += bytes;
    RF_TRY(exchange_sizes(e, st, &fill, ticket));
    RF_TRY(d->pull ? engine_delta_pull(e, st, d->size, d->src_at, d->inbox, e->data->delta_fw.index)
                   : engine_delta_post(e, st, d->size, d->fw, d->inbox, ticket));
  }
  return RF_OK;
}

/* Every piece this rank holds for the iteration: checked, nothing written; or (apply) written,
 * once every piece of every rank was checked. */
static rf_status each_received(rf_engine *e, int apply) {
  struct engine_delta *d = e->delta_state;
  const rf_schedule *s = &e->transfer;
  for (int i = 0; i < s->chunk_count; i++) {
    const rf_chunk *k = &s->chunks[i];
    if (!holds(e, k))
      continue;
    rf_piece here = *piece_of(e, k); /* a forwarded piece lands as it landed at its origin */
    here.dst = e->rollout_rank;
    rf_box kept;
    rf_region dst = engine_destination(e, &here, &k->box, &kept);
    char what[256];
    name_held(e, k, what, sizeof what);
    int quantized = engine_delta_quantized(e, k), esize;
    rf_box box = engine_delta_box(e, k, &esize); /* what the trainer encoded */
    if (!rf_box_equal(&kept, quantized ? &k->box : &box))
      return rf_fail(RF_ERR_INTERNAL,
                     "delta for %s: the destination keeps another part of the "
                     "piece than the trainer encoded",
                     what);
    const char *encoded = d->inbox + d->in[i];
    if (quantized)
      RF_TRY(engine_delta_quant_held(e, &here, k, encoded, &d->info[i], apply ? -1 : d->size[i],
                                     d->quant[0], what));
    else
      RF_TRY(apply ? rf_delta_apply_checked(e->memory, encoded, &d->info[i], &dst, &box, what)
                   : rf_delta_check(e->memory, encoded, (size_t)d->size[i], &dst, &box, what,
                                    &d->info[i]));
  }
  return RF_OK;
}

rf_status engine_delta_iterate(rf_engine *e, double *times) {
  e->delta_wire_bytes = e->delta_changed = e->delta_elements = 0;
  e->delta_forward_bytes = e->delta_marked_pieces = 0;
  memset(e->delta_pieces, 0, sizeof e->delta_pieces);
  memset(e->delta_kinds, 0, sizeof e->delta_kinds);
  double t0 = rf_now();
  RF_TRY(engine_reshape(e, t0, times)); /* star: the coupling buffers, dense between trainers */
  t0 = rf_now();
  e->delta_state->globals_moved = e->fp8_global != NULL;
  RF_TRY(engine_delta_quant_globals(e));
  RF_TRY(encode_all(e));
  RF_TRY(rf_mem_sync(e->memory));
  double t1 = rf_now();
  times[RF_PHASE_ENCODE] = t1 - t0;
  long ticket = -1;
  RF_TRY(run_stages(e, &ticket));
  double t2 = rf_now();
  times[RF_PHASE_TRANSFER] = t2 - t1;
  e->delta_posted = 1;
  RF_TRY(each_received(e, 0));
  times[RF_PHASE_APPLY] = rf_now() - t2;
  e->delta_pending = 1;
  return RF_OK;
}

/* prev := cur for everything the trainer holds: what it sent is what the rollout now holds.
 * After a delta iteration the trainer applies its own encoded pieces to the kept copy, which
 * writes only what changed (the pieces cover every element it sends, so every element a
 * later encode compares); after a dense one it copies the arena whole. A piece encoded from
 * the trainer's marks leaves the kept copy behind (prev_stale): the next encode reads the
 * marks again, which from here on count from the version just sent, and should the marks
 * stop (rf_buffers_marks_reset), the next refit goes dense. */
static rf_status keep_sent(rf_engine *e, int encoded) {
  rf_buffers *b = e->data;
  struct engine_delta *d = e->delta_state;
  if (b->prev_arena && encoded) {
    const rf_schedule *s = &e->transfer;
    for (int i = 0; i < s->chunk_count; i++) {
      const rf_chunk *k = &s->chunks[i];
      if (!sends(e, k))
        continue;
      rf_region prev = prev_region(e, k);
      if (engine_delta_quantized(e, k)) {
        rf_region cur = cur_region(e, k);
        RF_TRY(engine_delta_quant_keep(e, &prev, &cur, &k->box));
        continue;
      }
      if (d->marked[i]) {
        b->prev_stale = 1;
        continue;
      }
      int esize;
      rf_box box = engine_delta_box(e, k, &esize);
      char what[256];
      name_piece(e, k, what, sizeof what);
      RF_TRY(rf_delta_apply_checked(e->memory, (is_local(e, k) ? d->inbox : d->out) + d->at[i],
                                    &d->sent[i], &prev, &box, what));
    }
  } else if (b->prev_arena) {
    RF_TRY(rf_mem_transfer(b->prev_arena, b->memory, b->arena[b->prev_family], b->memory,
                           b->prev_bytes));
    b->prev_stale = 0;
  }
  if (e->fp8_global && b->prev_global) /* nvfp4: the globals it was quantized with */
    memcpy(b->prev_global, e->fp8_global,
           (size_t)e->plan->layout->model->tensor_count * sizeof *b->prev_global);
  /* A rank without shards keeps nothing, but its rollout holds the version all the same; every
   * rank follows the kept version, so that each decides alike which receipts are stale. */
  if (b->prev_arena || e->delta_state)
    b->delta_base = 1;
  if (b->delta_base)
    b->kept = e->moved;
  if (b->prev_arena) /* what changes from here on is marked against the version just sent */
    RF_TRY(rf_buffers_marks_reset(b));
  return RF_OK;
}

rf_status rf_engine_delta_apply(rf_engine *e, double *times) {
  int dropped = engine_skip_now(e); /* --inject skip-version: checked, then not applied */
  if (!e->delta_pending) {
    engine_hold(e, 0);
    return keep_sent(e, 0);
  }
  e->delta_pending = 0;
  double t0 = rf_now();
  if (!dropped)
    RF_TRY(each_received(e, 1));
  if (!dropped && e->fp8_global && e->rollout_rank >= 0)
    RF_TRY(engine_fp8_write_globals(e)); /* the version's globals, with its pieces */
  e->delta_state->globals_moved = 0;
  engine_hold(e, dropped);
  RF_TRY(keep_sent(e, 1)); /* timed: a trainer that keeps what it sent pays for it each step */
  RF_TRY(rf_mem_sync(e->memory));
  double applied = rf_now() - t0;
  times[RF_PHASE_APPLY] += applied;
  times[RF_PHASE_TOTAL] += applied;
  return RF_OK;
}

void rf_engine_delta_refused(rf_engine *e) {
  if (!e->delta_pending)
    return;
  e->delta_pending = 0;
  e->moved.k--; /* nothing was applied: the rollout holds the version before */
  if (e->delta_state && e->delta_state->globals_moved)
    engine_delta_quant_globals_back(e);
  if (e->delta_state)
    e->delta_state->globals_moved = 0;
}
