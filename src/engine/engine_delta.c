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
 * Both buffers are laid out peer by peer, each peer's pieces in schedule order, so that a
 * bucket's pieces for one peer lie together, and so do all of them. Each size message starts
 * with where that peer's pieces begin in the sender's buffer: over a mapping transport (shm,
 * ipc), whose messages are only small host notes, the trainer offers its encoded buffer to the
 * others (once per run, an append to the job's offers) and each rollout rank copies every
 * peer's pieces out of it in one copy per peer instead of receiving messages.
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
  char *out, *inbox;      /* encoded pieces sent (the job's offered buffer when pulling), and
                             received (or local) */
  size_t out_bytes, inbox_bytes;
  int64_t *size;       /* [chunk of the transfer schedule] its encoded bytes */
  int64_t *at;         /* [chunk] where its piece lies in out (sent) or inbox */
  rf_delta_info *info; /* [chunk] what the check found, for the apply */
  rf_delta_info *sent; /* [chunk] what encode wrote, to bring the kept version up to date */
  int64_t *table;      /* host: every peer's sizes, sent [0, n) or received [n, 2n) */
  int64_t *table_wire; /* the same in the wire's memory */
  int64_t *table_at;   /* [dir * ranks + peer] where peer's message starts in table: where
                          peer's pieces start in the sender's buffer, then their sizes */
  int64_t table_count; /* n: the chunks this rank sends plus those it receives, and one more
                          per peer that has any */
  int64_t *from;       /* [peer] where its pieces start in its sent buffer (received) */
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
static int64_t align8(int64_t v) { return (v + 7) / 8 * 8; }
static int pulls(const rf_engine *e) { return e->delta_state->pull; }

static rf_status refuse(rf_delta_choice c, const char *what, const char *instead) {
  return rf_fail(RF_ERR_USAGE, "--delta %s: %s is not supported with delta refits yet; use %s",
                 rf_delta_choice_name(c), what, instead);
}

/* The trainer's previous version of tensor t: its shard region over the kept arena. */
static rf_region prev_region(const rf_engine *e, int t) {
  const rf_buffers *b = e->data;
  char *base = (char *)b->prev_arena + ((char *)b->shards[t] - (char *)b->arena[RF_FAMILY_SHARDS]);
  return rf_shard_region(e->plan, e->trainer_rank, t, base);
}

/* A piece's name in errors: its tensor, rows and columns, and its two ends. */
static void name_piece(const rf_engine *e, const rf_chunk *k, char *buf, size_t len) {
  const rf_piece *p = piece_of(e, k);
  snprintf(buf, len, "%s rows %lld..%lld cols %lld..%lld (trainer rank %d to rollout rank %d)",
           e->plan->layout->model->tensors[p->tensor].name, (long long)k->box.lo[0],
           (long long)k->box.hi[0], (long long)k->box.lo[1], (long long)k->box.hi[1], p->src,
           p->dst);
}

static rf_status check_supported(const rf_engine *e, rf_delta_choice c) {
  const rf_plan *plan = e->plan;
  if (plan->kind != RF_PLAN_P2P) {
    char what[64];
    snprintf(what, sizeof what, "--plan %s", rf_plan_kind_name(plan->kind));
    return refuse(c, what, "--plan p2p or --delta off");
  }
  if (rf_layout_format(plan->layout))
    return refuse(c, "a quantized --rollout-dtype", "--rollout-dtype model or --delta off");
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
  return rf_delta_capacity(asked_of(e), rf_box_numel(&k->box),
                           engine_esize(e, piece_of(e, k)->tensor));
}

/* Whether chunk i is one this rank sends (dir 1) or receives (dir 0) over the wire to or from
 * world rank q. */
static int on_wire(const rf_engine *e, int i, int dir, int q) {
  const rf_chunk *k = &e->transfer.chunks[i];
  return !is_local(e, k) && (dir ? sends(e, k) : receives(e, k)) &&
         engine_peer(e, piece_of(e, k), dir) == q;
}

/* Places every chunk this rank sends (dir 1) or receives (dir 0) in the order of the wire:
 * peer by peer, each peer's in schedule order (so bucket by bucket), at 8-byte boundaries; in
 * the inbox the local chunks come first, at their capacities, so that their places never move.
 * Chunks are placed at their capacities (`capacity`, for the sizes of the buffers) or at their
 * exact sizes once known. Returns the bytes. */
static int64_t place(rf_engine *e, int dir, int capacity) {
  struct engine_delta *d = e->delta_state;
  const rf_schedule *s = &e->transfer;
  int ranks = e->plan->layout->world_size;
  int64_t off = 0;
  for (int i = 0; dir == 0 && i < s->chunk_count; i++)
    if (is_local(e, &s->chunks[i]))
      d->at[i] = off, off += align8(capacity_of(e, &s->chunks[i]));
  for (int q = 0; q < ranks; q++)
    for (int i = 0; i < s->chunk_count; i++)
      if (on_wire(e, i, dir, q)) {
        d->at[i] = off;
        off += align8(capacity ? capacity_of(e, &s->chunks[i]) : d->size[i]);
      }
  return off;
}

/* Over a mapping transport the trainer's encoded buffer is the job's offered one: grown when
 * this run needs more, and offered again by every rank alike (an append to the job's offers),
 * so that its index is the same everywhere. */
static rf_status offer_out(rf_engine *e) {
  struct engine_delta *d = e->delta_state;
  rf_buffers *b = e->data;
  rf_transport *tp = e->transport;
  if (!b->exposed)
    return rf_fail(RF_ERR_INTERNAL, "delta over %s: the arenas were never offered", tp->ops->name);
  rf_status st = RF_OK;
  if (d->out_bytes > b->delta_out_bytes) {
    if (b->delta_out)
      rf_mem_free(d->kind, b->delta_out, b->delta_out_bytes);
    b->delta_out = NULL, b->delta_out_bytes = 0;
    st = rf_mem_alloc(d->kind, d->out_bytes, "delta encode buffer", &b->delta_out);
    if (st == RF_OK)
      b->delta_out_bytes = d->out_bytes;
  }
  /* Every rank takes part in the offer, a failed one offering nothing. */
  void *mine = st == RF_OK ? b->delta_out : NULL;
  rf_status offered = tp->ops->expose(tp, &mine, 1);
  RF_TRY(tp->ctl ? rf_control_agree(tp->ctl, rf_status_worse(st, offered))
                 : rf_status_worse(st, offered));
  b->delta_out_index = b->exposed_count++;
  d->out = b->delta_out;
  return RF_OK;
}

rf_status rf_engine_set_delta(rf_engine *e, rf_delta_choice choice) {
  e->delta = choice;
  if (choice == RF_DELTA_CHOICE_OFF)
    return RF_OK;
  RF_TRY(check_supported(e, choice));
  rf_buffers *b = e->data;
  size_t shards = b->arena_bytes[RF_FAMILY_SHARDS];
  if (!b->prev_arena && shards)
    RF_TRY(rf_mem_alloc(b->memory, shards, "the trainer's previous version", &b->prev_arena));
  struct engine_delta *d = rf_calloc(1, sizeof *d, "delta state");
  if (!d)
    return RF_ERR_NOMEM;
  e->delta_state = d;
  d->kind = e->wire;
  d->pull = e->transport->ops->peer_buffer != NULL;
  d->table_kind = d->pull ? RF_MEM_HOST : d->kind;
  d->kept_bytes = shards;
  const rf_schedule *s = &e->transfer;
  int ranks = e->plan->layout->world_size;
  d->size = rf_calloc((size_t)s->chunk_count + 1, sizeof *d->size, "delta sizes");
  d->at = rf_calloc((size_t)s->chunk_count + 1, sizeof *d->at, "delta places");
  d->info = rf_calloc((size_t)s->chunk_count + 1, sizeof *d->info, "delta checks");
  d->sent = rf_calloc((size_t)s->chunk_count + 1, sizeof *d->sent, "delta encodes");
  d->table_at = rf_calloc((size_t)ranks * 2 + 1, sizeof *d->table_at, "delta size tables");
  d->from = rf_calloc((size_t)ranks + 1, sizeof *d->from, "delta size tables");
  if (!d->size || !d->at || !d->info || !d->sent || !d->table_at || !d->from)
    return RF_ERR_NOMEM;
  RF_TRY(engine_receipts_init(e));
  /* The size messages: per peer that has pieces, where they start in the sender's buffer, then
   * their sizes in schedule order; sent then received. */
  for (int dir = 1; dir >= 0; dir--)
    for (int q = 0; q < ranks; q++) {
      d->table_at[(1 - dir) * ranks + q] = d->table_count;
      int64_t n = 0;
      for (int i = 0; i < s->chunk_count; i++)
        n += on_wire(e, i, dir, q);
      d->table_count += n ? n + 1 : 0;
    }
  d->table = rf_calloc((size_t)d->table_count + 1, sizeof *d->table, "delta size tables");
  if (!d->table)
    return RF_ERR_NOMEM;
  RF_TRY(rf_mem_alloc(d->table_kind, (size_t)(d->table_count + 1) * sizeof(int64_t),
                      "delta size tables", (void **)&d->table_wire));
  d->out_bytes = (size_t)place(e, 1, 1) + 8;
  d->inbox_bytes = (size_t)place(e, 0, 1) + 8;
  RF_TRY(d->pull ? offer_out(e)
                 : rf_mem_alloc(d->kind, d->out_bytes, "delta encode buffer", (void **)&d->out));
  return rf_mem_alloc(d->kind, d->inbox_bytes, "delta inbox", (void **)&d->inbox);
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
  if (d->table_wire)
    rf_mem_free(d->table_kind, d->table_wire, (size_t)(d->table_count + 1) * sizeof(int64_t));
  free(d->size);
  free(d->at);
  free(d->info);
  free(d->sent);
  free(d->table);
  free(d->table_at);
  free(d->from);
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
  rf_region prev = prev_region(e, t), cur = engine_shard_region(e, t);
  char what[256];
  name_piece(e, k, what, sizeof what);
  rf_delta_info info;
  rf_delta_encoding want = want_of(e, k);
  RF_TRY(rf_delta_encode(e->memory, &prev, &cur, &k->box, want, to, capacity, what, &info));
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
 * written yet), the local ones at their places in the inbox; fills the sent size tables. */
static rf_status encode_all(rf_engine *e) {
  struct engine_delta *d = e->delta_state;
  const rf_schedule *s = &e->transfer;
  int ranks = e->plan->layout->world_size;
  place(e, 0, 1); /* the local chunks' places */
  int64_t off = 0;
  int64_t *next = rf_calloc((size_t)ranks + 1, sizeof *next, "delta size tables");
  if (!next)
    return RF_ERR_NOMEM;
  rf_status st = RF_OK;
  for (int i = 0; i < s->chunk_count && st == RF_OK; i++)
    if (is_local(e, &s->chunks[i]))
      st = encode_chunk(e, i, d->inbox + d->at[i], (size_t)capacity_of(e, &s->chunks[i]));
  for (int q = 0; q < ranks && st == RF_OK; q++)
    for (int i = 0; i < s->chunk_count && st == RF_OK; i++) {
      if (!on_wire(e, i, 1, q))
        continue;
      if (next[q] == 0)
        d->table[d->table_at[q]] = off, next[q] = 1; /* where q's pieces start */
      d->at[i] = off;
      st = encode_chunk(e, i, d->out + off, d->out_bytes - (size_t)off);
      d->table[d->table_at[q] + next[q]++] = d->size[i];
      off += align8(d->size[i]);
    }
  free(next);
  return st;
}

/* Each peer's exact sizes, one message per peer and direction, then the received ones placed. */
static rf_status exchange_sizes(rf_engine *e, long *ticket) {
  struct engine_delta *d = e->delta_state;
  rf_transport *tp = e->transport;
  const rf_schedule *s = &e->transfer;
  int ranks = e->plan->layout->world_size;
  size_t bytes = (size_t)d->table_count * sizeof(int64_t);
  if (bytes)
    RF_TRY(rf_mem_transfer(d->table_wire, d->table_kind, d->table, RF_MEM_HOST, bytes));
  RF_TRY(tp->ops->group_start(tp));
  for (int q = 0; q < ranks; q++) {
    int64_t sent = d->table_at[q + 1] - d->table_at[q];
    int64_t got =
        (q + 1 < ranks ? d->table_at[ranks + q + 1] : d->table_count) - d->table_at[ranks + q];
    if (got)
      RF_TRY(rf_transport_recv(tp, RF_CHANNEL_WORLD, q, d->table_wire + d->table_at[ranks + q],
                               (size_t)got * sizeof(int64_t), ticket));
    if (sent)
      RF_TRY(rf_transport_send(tp, RF_CHANNEL_WORLD, q, d->table_wire + d->table_at[q],
                               (size_t)sent * sizeof(int64_t), ticket));
  }
  RF_TRY(tp->ops->group_end(tp));
  RF_TRY(tp->ops->wait(tp, *ticket + 1, "the delta sizes"));
  if (bytes)
    RF_TRY(rf_mem_transfer(d->table, RF_MEM_HOST, d->table_wire, d->table_kind, bytes));
  for (int q = 0; q < ranks; q++) {
    int64_t next = d->table_at[ranks + q];
    for (int i = 0; i < s->chunk_count; i++)
      if (on_wire(e, i, 0, q)) {
        if (next == d->table_at[ranks + q])
          d->from[q] = d->table[next++]; /* the message's first entry */
        d->size[i] = d->table[next++];
      }
  }
  place(e, 0, 0);
  return RF_OK;
}

/* Over a mapping: every peer's pieces, copied out of its offered buffer in one copy each. */
static rf_status pull_pieces(rf_engine *e) {
  struct engine_delta *d = e->delta_state;
  const rf_schedule *s = &e->transfer;
  int ranks = e->plan->layout->world_size;
  for (int q = 0; q < ranks; q++) {
    int64_t lo = -1, hi = 0;
    for (int i = 0; i < s->chunk_count; i++)
      if (on_wire(e, i, 0, q)) {
        if (lo < 0)
          lo = d->at[i];
        hi = d->at[i] + align8(d->size[i]);
      }
    if (lo < 0)
      continue;
    void *peer_out;
    RF_TRY(e->transport->ops->peer_buffer(e->transport, q, e->data->delta_out_index, &peer_out));
    RF_TRY(rf_mem_transfer(d->inbox + lo, d->kind, (char *)peer_out + d->from[q], d->kind,
                           (size_t)(hi - lo)));
  }
  return rf_mem_sync(e->memory);
}

/* One message per peer and direction per bucket: the peer's pieces lie back to back. */
static rf_status post_buckets(rf_engine *e, long *ticket) {
  struct engine_delta *d = e->delta_state;
  rf_transport *tp = e->transport;
  const rf_schedule *s = &e->transfer;
  int ranks = e->plan->layout->world_size;
  for (int b = 0; b < s->bucket_count; b++) {
    RF_TRY(tp->ops->group_start(tp));
    for (int q = 0; q < ranks; q++)
      for (int dir = 0; dir < 2; dir++) {
        int64_t from = -1, to = 0;
        for (int i = s->buckets[b].first; i < s->buckets[b].first + s->buckets[b].count; i++) {
          const rf_chunk *k = &s->chunks[i];
          if (is_local(e, k) || !(dir ? sends(e, k) : receives(e, k)) ||
              engine_peer(e, piece_of(e, k), dir) != q)
            continue;
          if (from < 0)
            from = d->at[i];
          to = d->at[i] + align8(d->size[i]);
        }
        if (from < 0)
          continue;
        char *base = dir ? d->out : d->inbox;
        RF_TRY(
            tp->ops->post(tp, dir, RF_CHANNEL_WORLD, q, base + from, (size_t)(to - from), ticket));
        e->messages += dir;
      }
    RF_TRY(tp->ops->group_end(tp));
  }
  return tp->ops->wait(tp, *ticket + 1, "the delta pieces");
}

/* --inject corrupt under delta: the corrupting rank flips the last byte of the first piece it
 * received (its payload's, or for a piece without one its header's hash), which its check must
 * refuse. */
static rf_status corrupt_inbox(rf_engine *e) {
  struct engine_delta *d = e->delta_state;
  const rf_schedule *s = &e->transfer;
  for (int i = 0; i < s->chunk_count; i++) {
    const rf_chunk *k = &s->chunks[i];
    if (!receives(e, k) || is_local(e, k))
      continue;
    char *at = d->inbox + d->at[i] + d->size[i] - 1, byte;
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

/* Every piece this rank holds for the iteration: checked, nothing written; or (apply) written,
 * once every piece of every rank was checked. */
static rf_status each_received(rf_engine *e, int apply) {
  struct engine_delta *d = e->delta_state;
  const rf_schedule *s = &e->transfer;
  for (int i = 0; i < s->chunk_count; i++) {
    const rf_chunk *k = &s->chunks[i];
    if (!receives(e, k))
      continue;
    rf_box kept;
    rf_region dst = engine_destination(e, piece_of(e, k), &k->box, &kept);
    char what[256];
    name_piece(e, k, what, sizeof what);
    if (!rf_box_equal(&kept, &k->box))
      return rf_fail(RF_ERR_UNSUPPORTED,
                     "delta for %s: the destination keeps only part of the piece; delta refits "
                     "need whole pieces (--plan p2p)",
                     what);
    RF_TRY(apply ? rf_delta_apply_checked(e->memory, d->inbox + d->at[i], &d->info[i], &dst,
                                          &k->box, what)
                 : rf_delta_check(e->memory, d->inbox + d->at[i], (size_t)d->size[i], &dst, &k->box,
                                  what, &d->info[i]));
  }
  return RF_OK;
}

rf_status engine_delta_iterate(rf_engine *e, double *times) {
  e->delta_wire_bytes = e->delta_changed = e->delta_elements = 0;
  memset(e->delta_pieces, 0, sizeof e->delta_pieces);
  memset(e->delta_kinds, 0, sizeof e->delta_kinds);
  double t0 = rf_now();
  RF_TRY(encode_all(e));
  RF_TRY(rf_mem_sync(e->memory));
  double t1 = rf_now();
  times[RF_PHASE_ENCODE] = t1 - t0;
  long ticket = -1;
  RF_TRY(exchange_sizes(e, &ticket));
  RF_TRY(pulls(e) ? pull_pieces(e) : post_buckets(e, &ticket));
  double t2 = rf_now();
  times[RF_PHASE_TRANSFER] = t2 - t1;
  if (e->corrupt_armed && e->rollout_rank >= 0 && e->rollout_rank == engine_corrupt_rank(e)) {
    e->corrupt_armed = 0;
    RF_TRY(corrupt_inbox(e));
  }
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
      rf_region prev = prev_region(e, piece_of(e, k)->tensor);
      char what[256];
      name_piece(e, k, what, sizeof what);
      RF_TRY(rf_delta_apply_checked(e->memory, (is_local(e, k) ? d->inbox : d->out) + d->at[i],
                                    &d->sent[i], &prev, &k->box, what));
    }
  } else if (b->prev_arena) {
    RF_TRY(rf_mem_transfer(b->prev_arena, b->memory, b->arena[RF_FAMILY_SHARDS], b->memory,
                           b->arena_bytes[RF_FAMILY_SHARDS]));
  }
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
}
