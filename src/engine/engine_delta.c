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

#include "delta/delta.h"
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

static const rf_piece *piece_of(const rf_engine *e, const rf_chunk *k) {
  return &e->plan->pieces[k->piece];
}
static int sends(const rf_engine *e, const rf_chunk *k) {
  return piece_of(e, k)->src == e->trainer_rank;
}
static int receives(const rf_engine *e, const rf_chunk *k) {
  return piece_of(e, k)->dst == e->rollout_rank;
}
static int is_local(const rf_engine *e, const rf_chunk *k) { return sends(e, k) && receives(e, k); }
/* Whether this rank holds the chunk's piece as a rollout rank: sent to it, or to the origin it
 * is forwarded from. */
static int holds(const rf_engine *e, const rf_chunk *k) {
  const rf_piece *p = piece_of(e, k);
  return e->rollout_rank >= 0 && p->dst == e->delta_state->origin[p->tensor];
}
static int64_t align8(int64_t v) { return (v + 7) / 8 * 8; }

static rf_status refuse(rf_delta_choice c, const char *what, const char *instead) {
  return rf_fail(RF_ERR_USAGE, "--delta %s: %s is not supported with delta refits yet; use %s",
                 rf_delta_choice_name(c), what, instead);
}

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
  snprintf(buf, len, "%s rows %lld..%lld cols %lld..%lld (trainer rank %d to rollout rank %d)",
           e->plan->layout->model->tensors[p->tensor].name, (long long)k->box.lo[0],
           (long long)k->box.hi[0], (long long)k->box.lo[1], (long long)k->box.hi[1], p->src,
           p->dst);
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

static rf_status check_supported(const rf_engine *e, rf_delta_choice c) {
  char what[192], instead[192];
  if (engine_delta_quant_refusal(e, what, sizeof what, instead, sizeof instead))
    return refuse(c, what, instead);
  if (e->wire_rule == RF_WIRE_STAGED)
    return refuse(c, "GPU weights staged through host memory for mpi",
                  "--transport nccl, --memory host or --delta off");
  return RF_OK;
}

/* The encoding --delta asks encode for: the smallest per piece under auto. */
static rf_delta_encoding asked_of(const rf_engine *e) {
  return e->delta == RF_DELTA_CHOICE_SPARSE    ? RF_DELTA_SPARSE
         : e->delta == RF_DELTA_CHOICE_BITMASK ? RF_DELTA_BITMASK
                                               : RF_DELTA_AUTO;
}

/* The encoding chunk k is encoded in: what --delta asks for where its destination holds the
 * version the trainer kept, dense where its receipt says it holds another (engine_receipts.c):
 * a delta against the kept version would not bring that rank to the new one. */
static rf_delta_encoding want_of(const rf_engine *e, const rf_chunk *k) {
  return engine_stale(e, piece_of(e, k)->dst) ? RF_DELTA_DENSE : asked_of(e);
}

/* What --delta's encoding may take: no smaller than dense, which a stale peer gets instead, so
 * the buffers and the local chunks' places do not depend on the receipts. */
static int64_t capacity_of(const rf_engine *e, const rf_chunk *k) {
  int esize;
  rf_box box = engine_delta_box(e, k, &esize);
  return rf_delta_capacity(asked_of(e), rf_box_numel(&box), esize);
}

/* Places the pieces a stage brings this rank, in its order, from `off` in the inbox, at their
 * capacities (`capacity`, for the size of the inbox) or at their exact sizes once known.
 * Returns where they end. */
static int64_t place_received(rf_engine *e, engine_delta_stage *s, int64_t off, int capacity) {
  struct engine_delta *d = e->delta_state;
  for (int j = 0; j < s->count; j++) {
    engine_delta_entry *en = &s->entries[j];
    if (en->send)
      continue;
    en->at = d->in[en->chunk] = off;
    off += align8(capacity ? capacity_of(e, &e->transfer.chunks[en->chunk]) : d->size[en->chunk]);
  }
  return off;
}

/* The bytes of the pieces a stage sends, at their capacities, 8-byte aligned. */
static int64_t send_capacity(const rf_engine *e, const engine_delta_stage *s) {
  int64_t bytes = 0;
  for (int j = 0; j < s->count; j++)
    if (s->entries[j].send)
      bytes += align8(capacity_of(e, &e->transfer.chunks[s->entries[j].chunk]));
  return bytes;
}

/* The stages and the buffers: the local pieces first in the inbox, at their capacities, so that
 * their places never move, then every stage's received ones; out holds what this rank encodes
 * for others, fw what the forward steps send (the most of one, or pulling, all of them). */
static rf_status delta_buffers(rf_engine *e) {
  struct engine_delta *d = e->delta_state;
  const rf_plan *plan = e->plan;
  const rf_schedule *s = &e->transfer;
  int tensors = plan->layout->model->tensor_count, steps = plan->forward_depth;
  d->origin = rf_malloc((size_t)tensors * sizeof *d->origin + 1, "delta origins");
  d->from = rf_malloc((size_t)tensors * sizeof *d->from + 1, "delta forwarders");
  d->stages = rf_calloc((size_t)steps + 1, sizeof *d->stages, "delta stages");
  d->fw_at = rf_calloc((size_t)steps + 1, sizeof *d->fw_at, "delta forward places");
  if (!d->origin || !d->from || !d->stages || !d->fw_at)
    return RF_ERR_NOMEM;
  for (int t = 0; t < tensors; t++)
    d->origin[t] = e->rollout_rank < 0 ? -1 : engine_delta_origin(plan, t, e->rollout_rank);
  engine_delta_forwarders(plan, e->rollout_rank, d->from);
  RF_TRY(engine_delta_stages_build(e, d->origin, d->stages));
  int64_t off = 0, fw = 0;
  for (int i = 0; i < s->chunk_count; i++)
    if (is_local(e, &s->chunks[i]))
      d->at[i] = d->in[i] = off, off += align8(capacity_of(e, &s->chunks[i]));
  d->local_end = off;
  for (int k = 0; k <= steps; k++) {
    off = place_received(e, &d->stages[k], off, 1);
    /* Pulling, each entry goes with where its piece lies in its sender's buffer. */
    d->table_cap = RF_MAX(d->table_cap, (int64_t)d->stages[k].count * (d->pull ? 2 : 1));
    if (k > 0 && d->pull)
      d->fw_at[k] = fw, fw += send_capacity(e, &d->stages[k]);
    else if (k > 0)
      fw = RF_MAX(fw, send_capacity(e, &d->stages[k]));
  }
  for (int i = 0; i < s->chunk_count; i++) /* the wire of any quantized chunk it sends or holds */
    if (engine_delta_quantized(e, &s->chunks[i]) &&
        (sends(e, &s->chunks[i]) || holds(e, &s->chunks[i])))
      d->quant_bytes = RF_MAX(
          d->quant_bytes,
          (size_t)align8(rf_piece_wire_bytes(plan, piece_of(e, &s->chunks[i]), &s->chunks[i].box)));
  for (int j = 0; j < 2 && d->quant_bytes; j++)
    RF_TRY(
        rf_mem_alloc(e->memory, d->quant_bytes, "delta quantized scratch", (void **)&d->quant[j]));
  d->inbox_bytes = (size_t)off + 8;
  d->out_bytes = (size_t)send_capacity(e, &d->stages[0]) + 8;
  d->fw_bytes = (size_t)fw + 8;
  d->table = rf_calloc((size_t)d->table_cap + 1, sizeof *d->table, "delta size tables");
  if (!d->table)
    return RF_ERR_NOMEM;
  RF_TRY(rf_mem_alloc(d->table_kind, (size_t)(d->table_cap + 1) * sizeof(int64_t),
                      "delta size tables", (void **)&d->table_wire));
  rf_buffers *b = e->data;
  RF_TRY(d->pull ? engine_delta_offer(e, d->kind, d->out_bytes, &b->delta_out,
                                      "delta encode buffer", &d->out)
                 : rf_mem_alloc(d->kind, d->out_bytes, "delta encode buffer", (void **)&d->out));
  if (steps > 0)
    RF_TRY(d->pull ? engine_delta_offer(e, d->kind, d->fw_bytes, &b->delta_fw,
                                        "delta forward buffer", &d->fw)
                   : rf_mem_alloc(d->kind, d->fw_bytes, "delta forward buffer", (void **)&d->fw));
  return rf_mem_alloc(d->kind, d->inbox_bytes, "delta inbox", (void **)&d->inbox);
}

rf_status rf_engine_set_delta(rf_engine *e, rf_delta_choice choice) {
  e->delta = choice;
  if (choice == RF_DELTA_CHOICE_OFF)
    return RF_OK;
  RF_TRY(check_supported(e, choice));
  rf_buffers *b = e->data;
  /* The kept copy mirrors the arena the transfer reads; a run that reads another (star after
   * p2p) starts from a dense iteration. */
  int family = (int)engine_source_family(e->plan);
  size_t kept = b->arena_bytes[family];
  if (b->prev_arena && (b->prev_family != family || b->prev_bytes != kept)) {
    rf_mem_free(b->memory, b->prev_arena, b->prev_bytes);
    b->prev_arena = NULL;
    b->delta_base = 0;
  }
  if (!b->prev_arena && kept)
    RF_TRY(rf_mem_alloc(b->memory, kept, "the trainer's previous version", &b->prev_arena));
  int tensors = e->plan->layout->model->tensor_count;
  if (e->fp8_global && !b->prev_global &&
      !(b->prev_global = rf_calloc((size_t)tensors + 1, sizeof *b->prev_global, "kept globals")))
    return RF_ERR_NOMEM;
  b->prev_family = family;
  b->prev_bytes = kept;
  struct engine_delta *d = rf_calloc(1, sizeof *d, "delta state");
  if (!d)
    return RF_ERR_NOMEM;
  e->delta_state = d;
  d->kind = e->wire;
  d->pull = e->transport->ops->peer_buffer != NULL;
  d->table_kind = d->pull ? RF_MEM_HOST : d->kind;
  d->kept_bytes = kept;
  const rf_schedule *s = &e->transfer;
  int ranks = e->plan->layout->world_size;
  d->size = rf_calloc((size_t)s->chunk_count + 1, sizeof *d->size, "delta sizes");
  d->at = rf_calloc((size_t)s->chunk_count + 1, sizeof *d->at, "delta places");
  d->in = rf_calloc((size_t)s->chunk_count + 1, sizeof *d->in, "delta places");
  d->src_at = rf_calloc((size_t)s->chunk_count + 1, sizeof *d->src_at, "delta places");
  d->info = rf_calloc((size_t)s->chunk_count + 1, sizeof *d->info, "delta checks");
  d->sent = rf_calloc((size_t)s->chunk_count + 1, sizeof *d->sent, "delta encodes");
  d->table_at = rf_calloc((size_t)ranks * 2 + 1, sizeof *d->table_at, "delta size tables");
  if (!d->size || !d->at || !d->in || !d->src_at || !d->info || !d->sent || !d->table_at)
    return RF_ERR_NOMEM;
  RF_TRY(engine_receipts_init(e));
  return delta_buffers(e);
}

int64_t rf_engine_delta_kept_bytes(const rf_engine *e) {
  return e->delta_state ? (int64_t)e->delta_state->kept_bytes : 0;
}

int rf_engine_delta_next(const rf_engine *e) {
  return e->delta != RF_DELTA_CHOICE_OFF && e->data->delta_base;
}

void engine_delta_free(rf_engine *e) {
  struct engine_delta *d = e->delta_state;
  if (!d)
    return;
  if (d->out && !d->pull) /* a pulled one is the job's (rf_buffers) */
    rf_mem_free(d->kind, d->out, d->out_bytes);
  if (d->inbox)
    rf_mem_free(d->kind, d->inbox, d->inbox_bytes);
  if (d->fw && !d->pull)
    rf_mem_free(d->kind, d->fw, d->fw_bytes);
  for (int j = 0; j < 2; j++)
    if (d->quant[j])
      rf_mem_free(e->memory, d->quant[j], d->quant_bytes);
  if (d->table_wire)
    rf_mem_free(d->table_kind, d->table_wire, (size_t)(d->table_cap + 1) * sizeof(int64_t));
  for (int k = 0; d->stages && k <= e->plan->forward_depth; k++)
    free(d->stages[k].entries);
  free(d->stages);
  free(d->fw_at);
  free(d->origin);
  free(d->from);
  free(d->size);
  free(d->at);
  free(d->in);
  free(d->src_at);
  free(d->info);
  free(d->sent);
  free(d->table);
  free(d->table_at);
  free(d);
  e->delta_state = NULL;
  engine_receipts_free(e);
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
  RF_TRY(engine_delta_quantized(e, k)
             ? engine_delta_quant_encode(e, k, &prev, &cur, d->quant, &a, &info)
             : rf_delta_encode(e->memory, &prev, &cur, &box, a.want, to, capacity, what, &info));
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
      RF_TRY(encode_chunk(e, i, d->inbox + d->at[i], (size_t)capacity_of(e, &s->chunks[i])));
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
  *fill = place_received(e, st, *fill, 0);
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
  e->delta_forward_bytes = 0;
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
 * later encode compares); after a dense one it copies the arena whole. */
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
