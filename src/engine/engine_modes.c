/* The three transfer modes, one bucket at a time (docs/architecture.md, "Transfer modes"): how a
 * bucket's chunks are posted, packed and unpacked. Which buckets go together, and when they are
 * waited for, is the rounds' business (engine_rounds.c). Every rank posts the same buckets in
 * the same order, so the messages between any two ranks are posted in the same order on both
 * sides and match without tags. */
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

/* One bucket's view of the engine: its stage decides what this rank is called in its pieces. */
typedef struct {
  rf_engine *e;
  engine_round *r; /* what the round's posts share */
  const rf_schedule *s;
  rf_channel channel;
  int my_src_rank; /* the rank numbers pieces use for me: trainer rank (rollout: forward) */
  int my_dst_rank; /* trainer rank (reshape) or rollout rank (transfer, forward) */
} stage_ctx;

static const rf_piece *piece_of(const stage_ctx *c, const rf_chunk *k) {
  return &c->e->plan->pieces[k->piece];
}

static int sends(const stage_ctx *c, const rf_piece *p) { return p->src == c->my_src_rank; }
static int receives(const stage_ctx *c, const rf_piece *p) { return p->dst == c->my_dst_rank; }

/* The channel rank of a piece's other end. */
static int peer_of(const stage_ctx *c, const rf_piece *p, int sending) {
  return engine_peer(c->e, p, sending);
}

static int is_local(const stage_ctx *c, const rf_piece *p) { return sends(c, p) && receives(c, p); }

/* Whether a chunk can be sent from, or received into, its own buffer without staging: the
 * rules of engine.h's cost functions, which refit simulate reads too. */
static int send_in_place(const stage_ctx *c, const rf_chunk *k) {
  return rf_engine_send_path(c->e->plan, c->e->mode, c->e->wire_rule, k) != RF_CHUNK_STAGED;
}

static int recv_in_place(const stage_ctx *c, const rf_chunk *k) {
  return rf_engine_recv_path(c->e->plan, c->e->mode, c->e->wire_rule, k) != RF_CHUNK_STAGED;
}

/* `box` of region r as the transport names it: one run when it is contiguous, else its rows
 * (which the wire rule has found contiguous each). */
static rf_strided strided_of(const rf_region *r, const rf_box *box) {
  int64_t h = box->hi[0] - box->lo[0], w = box->hi[1] - box->lo[1], es = r->esize;
  rf_strided part = {rf_region_at(r, box->lo[0], box->lo[1]), h, w * es, r->stride[0] * es};
  if (rf_region_contiguous(r, box))
    part.rows = 1, part.row_bytes = part.pitch = h * w * es;
  return part;
}

/* Appends a part to a message's list, joining it to the last one when it continues it in
 * memory (shards that lie one after another, staging filled in order). */
static rf_status add_part(engine_round *r, const rf_strided *part) {
  rf_strided *last = r->part_count ? &r->parts[r->part_count - 1] : NULL;
  if (last && last->rows == 1 && part->rows == 1 && last->base + last->row_bytes == part->base) {
    last->row_bytes += part->row_bytes, last->pitch = last->row_bytes;
    return RF_OK;
  }
  RF_TRY(rf_grow((void **)&r->parts, r->part_count, &r->part_cap, sizeof *r->parts,
                 "strided message parts"));
  r->parts[r->part_count++] = *part;
  return RF_OK;
}

/* Posts `box` of region r, in place, to or from peer: a plain message when it is one run, else
 * a strided one. */
static rf_status post_in_place(stage_ctx *c, int send, int peer, const rf_region *r,
                               const rf_box *box) {
  rf_transport *tp = c->e->transport;
  rf_strided part = strided_of(r, box);
  if (part.rows == 1)
    return tp->ops->post(tp, send, c->channel, peer, part.base, (size_t)part.row_bytes,
                         &c->r->ticket);
  return tp->ops->post_strided(tp, send, c->channel, peer, &part, 1, &c->r->ticket);
}

/* Device weights over a host transport (mpi on a GPU): the pack kernels write pinned staging
 * asynchronously, and MPI reads it from the CPU, so the kernels must have finished first. */
rf_status engine_wire_ready(const rf_engine *e) {
  return e->memory != e->wire ? rf_mem_sync(e->memory) : RF_OK;
}

static void init_ctx(stage_ctx *c, rf_engine *e, engine_round *r, const rf_schedule *s) {
  memset(c, 0, sizeof *c);
  c->e = e;
  c->r = r;
  c->s = s;
  if (!s)
    return; /* copies only: no stage */
  c->channel = engine_channel(s->stage);
  c->my_src_rank = engine_src_rank(e, s->stage);
  c->my_dst_rank = engine_dst_rank(e, s->stage);
}

/* Box copies go through the memory module, which runs them on the CPU or, for device
 * memory, as kernels on refit's stream (ordered before the transport's next operation). A
 * round that gathers them (`batch`) runs them later as one batch (flush_batch): on a GPU one
 * launch and one timed span for a bucket's thousands of pieces instead of one each, which is
 * what packing a MoE layer's experts cost. */
static rf_status copy_box(stage_ctx *c, const rf_region *dst, const rf_region *src,
                          const rf_box *box, int batch) {
  rf_box_copy copy = {*dst, *src, *box};
  if (rf_box_is_empty(box))
    return RF_OK;
  if (!batch)
    return rf_copy_boxes(c->e->memory, &copy, 1);
  engine_round *r = c->r;
  RF_TRY(rf_grow((void **)&r->batch, r->batch_count, &r->batch_cap, sizeof *r->batch,
                 "a bucket's copies"));
  r->batch[r->batch_count++] = copy;
  return RF_OK;
}

/* Runs the gathered copies, timed as one span of `timer`. */
static rf_status flush_batch(engine_round *r, rf_mem_timer *timer) {
  if (!r->batch_count)
    return RF_OK;
  rf_mem_timer_begin(timer);
  rf_status st = rf_copy_boxes(r->e->memory, r->batch, r->batch_count);
  rf_mem_timer_end(timer);
  r->batch_count = 0;
  return st;
}

/* Packs chunk k into staging at `to`: into the round's batch where rf_engine_pack_batched
 * says so, else at once (fp8 chunks quantized or carried with their scales, and every chunk
 * of the modes that send it as soon as it is packed). */
static rf_status pack(stage_ctx *c, const rf_chunk *k, char *to) {
  rf_region src = engine_source(c->e, piece_of(c, k));
  rf_region staging = rf_region_row_major(to, &k->box, engine_esize(c->e, piece_of(c, k)->tensor));
  if (rf_engine_pack_batched(c->e->plan, c->e->mode, piece_of(c, k)))
    return copy_box(c, &staging, &src, &k->box, 1);
  rf_quant quant = rf_piece_quant(c->e->plan, piece_of(c, k));
  rf_mem_timer_begin(&c->e->pack_timer);
  rf_status st =
      quant == RF_QUANT_SOURCE      ? engine_fp8_pack(c->e, piece_of(c, k), &src, &k->box, to)
      : quant == RF_QUANT_CARRIED   ? engine_fp8_carried(c->e, piece_of(c, k), &src, &k->box, to)
      : quant == RF_QUANT_FORWARDED ? engine_fp8_pack_forward(c->e, piece_of(c, k), &k->box, to)
                                    : copy_box(c, &staging, &src, &k->box, 0);
  rf_mem_timer_end(&c->e->pack_timer);
  return st;
}

/* Unpacks chunk k from staging at `from`, into the round's batch unless it carries fp8. */
static rf_status unpack(stage_ctx *c, const rf_chunk *k, char *from) {
  rf_box kept;
  rf_region dst = engine_destination(c->e, piece_of(c, k), &k->box, &kept);
  rf_region staging =
      rf_region_row_major(from, &k->box, engine_esize(c->e, piece_of(c, k)->tensor));
  if (rf_engine_unpack_batched(c->e->plan, piece_of(c, k)))
    return copy_box(c, &dst, &staging, &kept, 1);
  rf_mem_timer_begin(&c->e->unpack_timer);
  rf_status st = engine_fp8_unpack(c->e, piece_of(c, k), &k->box, from);
  rf_mem_timer_end(&c->e->unpack_timer);
  return st;
}

/* Local pieces (source and destination in this process) are collected and copied in one
 * batch: on a GPU that is one kernel launch instead of one per piece. */
static rf_status copy_local(stage_ctx *c, const rf_chunk *k) {
  engine_round *r = c->r;
  rf_quant quant = rf_piece_quant(c->e->plan, piece_of(c, k));
  if (quant == RF_QUANT_SOURCE) { /* quantized on the way, at once: not a plain box copy */
    rf_region src = engine_source(c->e, piece_of(c, k));
    return engine_fp8_local(c->e, piece_of(c, k), &src, &k->box);
  }
  if (quant == RF_QUANT_CARRIED) { /* fp8 bytes and their scales, not one box copy */
    rf_region src = engine_source(c->e, piece_of(c, k));
    return engine_fp8_carried(c->e, piece_of(c, k), &src, &k->box, NULL);
  }
  if (quant == RF_QUANT_FORWARDED) /* replicas are different ranks: never local */
    return rf_fail(RF_ERR_INTERNAL, "fp8: a forward piece of %s is local to rank %d",
                   c->e->plan->layout->model->tensors[piece_of(c, k)->tensor].name,
                   c->e->world_rank);
  rf_box kept;
  rf_region dst = engine_destination(c->e, piece_of(c, k), &k->box, &kept);
  rf_region src = engine_source(c->e, piece_of(c, k));
  if (rf_box_is_empty(&kept))
    return RF_OK;
  RF_TRY(
      rf_grow((void **)&r->local, r->local_count, &r->local_cap, sizeof *r->local, "local copies"));
  r->local[r->local_count++] = (rf_box_copy){dst, src, kept};
  return RF_OK;
}

rf_status engine_flush_local(engine_round *r) {
  rf_status st = r->local_count ? rf_copy_boxes(r->e->memory, r->local, r->local_count) : RF_OK;
  r->local_count = 0;
  return st;
}

/* A receive that landed in staging, to unpack once its wait completes. */
static rf_status defer_unpack(engine_round *r, const rf_chunk *k, char *at) {
  if (r->unpack_count == r->unpack_cap) {
    int cap = r->unpack_cap;
    RF_TRY(rf_grow((void **)&r->unpack_chunk, r->unpack_count, &cap, sizeof *r->unpack_chunk,
                   "unpack list"));
    RF_TRY(rf_grow((void **)&r->unpack_at, r->unpack_count, &r->unpack_cap, sizeof *r->unpack_at,
                   "unpack list"));
  }
  r->unpack_chunk[r->unpack_count] = k;
  r->unpack_at[r->unpack_count++] = at;
  return RF_OK;
}

static rf_status post_chunk(stage_ctx *c, const rf_chunk *k) {
  rf_transport *tp = c->e->transport;
  engine_round *r = c->r;
  const rf_piece *p = piece_of(c, k);
  if (is_local(c, p))
    return copy_local(c, k);
  if (sends(c, p)) {
    c->e->messages++;
    if (send_in_place(c, k)) {
      rf_region src = engine_source(c->e, p);
      RF_TRY(post_in_place(c, 1, peer_of(c, p, 1), &src, &k->box));
    } else {
      char *buf = (char *)c->e->staging[0][0] + r->send_off;
      r->send_off += k->bytes;
      RF_TRY(pack(c, k, buf));
      RF_TRY(engine_wire_ready(c->e));
      RF_TRY(
          rf_transport_send(tp, c->channel, peer_of(c, p, 1), buf, (size_t)k->bytes, &r->ticket));
    }
  }
  if (receives(c, p)) {
    if (recv_in_place(c, k)) {
      rf_box kept;
      rf_region dst = engine_destination(c->e, p, &k->box, &kept);
      RF_TRY(post_in_place(c, 0, peer_of(c, p, 0), &dst, &k->box));
    } else {
      char *buf = (char *)c->e->staging[1][0] + r->recv_off;
      r->recv_off += k->bytes;
      RF_TRY(defer_unpack(r, k, buf));
      RF_TRY(
          rf_transport_recv(tp, c->channel, peer_of(c, p, 0), buf, (size_t)k->bytes, &r->ticket));
    }
  }
  return RF_OK;
}

rf_status engine_complete(engine_round *r, const char *what) {
  rf_transport *tp = r->e->transport;
  stage_ctx c; /* unpack reads only the engine */
  init_ctx(&c, r->e, r, NULL);
  RF_TRY(engine_flush_local(r));
  RF_TRY(tp->ops->wait(tp, r->ticket + 1, what));
  for (int i = 0; i < r->unpack_count; i++)
    RF_TRY(unpack(&c, r->unpack_chunk[i], r->unpack_at[i]));
  r->unpack_count = 0;
  RF_TRY(flush_batch(r, &r->e->unpack_timer));
  r->send_off = r->recv_off = 0; /* so unfused and grouped hold at most a bucket's staging */
  return engine_wire_ready(c.e); /* the staging is received into again once the unpacks are done */
}

/* How many chunks from chunks[i] move as one block (rf_engine_joined_chunks). Both ends compute
 * it from the plan alone, so they agree on every message's size. */
static int joined_run(const stage_ctx *c, int i, int end) {
  const rf_engine *e = c->e;
  return rf_engine_joined_chunks(e->plan, e->mode, e->wire_rule, c->s->chunks, i, end);
}

/* One message for a run of joined chunks, from the first one's source and into the first
 * one's destination, in place on both ends. */
static rf_status post_block(stage_ctx *c, const rf_chunk *k, int run) {
  rf_transport *tp = c->e->transport;
  const rf_piece *p = piece_of(c, k);
  int64_t bytes = 0;
  for (int j = 0; j < run; j++)
    bytes += k[j].bytes;
  if (sends(c, p)) {
    rf_region src = engine_source(c->e, p);
    RF_TRY(rf_transport_send(tp, c->channel, peer_of(c, p, 1),
                             rf_region_at(&src, k->box.lo[0], k->box.lo[1]), (size_t)bytes,
                             &c->r->ticket));
    c->e->messages++;
  }
  if (receives(c, p)) {
    rf_box kept;
    rf_region dst = engine_destination(c->e, p, &k->box, &kept);
    RF_TRY(rf_transport_recv(tp, c->channel, peer_of(c, p, 0),
                             rf_region_at(&dst, k->box.lo[0], k->box.lo[1]), (size_t)bytes,
                             &c->r->ticket));
  }
  return RF_OK;
}

rf_status engine_post_chunks(engine_round *r, const rf_schedule *s, int b) {
  stage_ctx c;
  init_ctx(&c, r->e, r, s);
  int unfused = r->e->mode == RF_MODE_UNFUSED;
  const rf_bucket *bk = &s->buckets[b];
  for (int i = bk->first; i < bk->first + bk->count; i++) {
    int run = joined_run(&c, i, bk->first + bk->count);
    RF_TRY(run > 1 ? post_block(&c, &s->chunks[i], run) : post_chunk(&c, &s->chunks[i]));
    i += run - 1;
    const rf_chunk *k = &s->chunks[i];
    int last_of_tensor = i + 1 == bk->first + bk->count ||
                         piece_of(&c, &s->chunks[i + 1])->tensor != piece_of(&c, k)->tensor;
    if (unfused && last_of_tensor)
      RF_TRY(engine_complete(r, "the pieces of a tensor"));
  }
  return RF_OK;
}

/* fused: per bucket, one message per peer and direction. Chunks that travel in place (a wire
 * that gathers) are named where they lie; the rest are packed into staging, each peer's at its
 * own place there, in the order of the bucket's chunks, which both ends walk alike. */
typedef struct {
  int64_t *send_bytes, *recv_bytes; /* per channel rank: the message, every chunk */
  int64_t *send_at, *recv_at;       /* where its staged chunks start in staging */
  int64_t *send_next;               /* where its next chunk is packed */
} peer_tables;

static int channel_ranks(const stage_ctx *c) {
  return c->channel == RF_CHANNEL_TRAINER ? c->e->plan->layout->trainer_ranks
                                          : c->e->plan->layout->world_size;
}

static rf_status peer_tables_of(stage_ctx *c, peer_tables *pt) {
  int world = c->e->plan->layout->world_size; /* the most ranks a channel has */
  if (!c->r->peers)
    c->r->peers = rf_calloc((size_t)world * 5, sizeof(int64_t), "fused peer tables");
  if (!c->r->peers)
    return RF_ERR_NOMEM;
  int64_t *mem = c->r->peers;
  pt->send_bytes = mem, pt->recv_bytes = mem + world;
  pt->send_at = mem + 2 * world, pt->recv_at = mem + 3 * world, pt->send_next = mem + 4 * world;
  return RF_OK;
}

/* Each peer's message size, and where its staged chunks sit in staging, sent and received. */
static void bucket_layout(stage_ctx *c, const rf_bucket *bk, peer_tables *pt, int ranks) {
  memset(pt->send_bytes, 0, (size_t)ranks * sizeof(int64_t));
  memset(pt->recv_bytes, 0, (size_t)ranks * sizeof(int64_t));
  memset(pt->send_at, 0, (size_t)ranks * sizeof(int64_t));
  memset(pt->recv_at, 0, (size_t)ranks * sizeof(int64_t));
  for (int i = bk->first; i < bk->first + bk->count; i++) {
    const rf_chunk *k = &c->s->chunks[i];
    const rf_piece *p = piece_of(c, k);
    if (is_local(c, p))
      continue;
    if (sends(c, p)) {
      pt->send_bytes[peer_of(c, p, 1)] += k->bytes;
      pt->send_at[peer_of(c, p, 1)] += send_in_place(c, k) ? 0 : k->bytes;
    }
    if (receives(c, p)) {
      pt->recv_bytes[peer_of(c, p, 0)] += k->bytes;
      pt->recv_at[peer_of(c, p, 0)] += recv_in_place(c, k) ? 0 : k->bytes;
    }
  }
  int64_t s = 0, r = 0; /* staged bytes per peer, into where each peer's start */
  for (int q = 0; q < ranks; q++) {
    int64_t sq = pt->send_at[q], rq = pt->recv_at[q];
    pt->send_at[q] = s, s += sq;
    pt->recv_at[q] = r, r += rq;
  }
}

rf_status engine_unpack_fused(engine_round *r, const rf_schedule *s, int b, char *recv_base) {
  stage_ctx c;
  peer_tables pt;
  init_ctx(&c, r->e, r, s);
  RF_TRY(peer_tables_of(&c, &pt));
  int ranks = channel_ranks(&c);
  const rf_bucket *bk = &s->buckets[b];
  bucket_layout(&c, bk, &pt, ranks);
  for (int i = bk->first; i < bk->first + bk->count; i++) {
    const rf_chunk *k = &s->chunks[i];
    const rf_piece *p = piece_of(&c, k);
    if (is_local(&c, p) || !receives(&c, p) || recv_in_place(&c, k))
      continue;
    int q = peer_of(&c, p, 0);
    RF_TRY(unpack(&c, k, recv_base + pt.recv_at[q])); /* in the order the sender packed it */
    pt.recv_at[q] += k->bytes;
  }
  return flush_batch(r, &r->e->unpack_timer);
}

/* Peer q's message of a bucket on a wire that gathers: its chunks in order, each in place or at
 * its place in staging (q's staged chunks start `at` bytes into `staging`, which is NULL when
 * this rank stages nothing, so the address is formed only for a staged chunk). */
static rf_status post_gathered(stage_ctx *c, const rf_bucket *bk, int send, int q, char *staging,
                               int64_t at) {
  engine_round *r = c->r;
  r->part_count = 0;
  for (int i = bk->first; i < bk->first + bk->count; i++) {
    const rf_chunk *k = &c->s->chunks[i];
    const rf_piece *p = piece_of(c, k);
    if (is_local(c, p) || !(send ? sends(c, p) : receives(c, p)) || peer_of(c, p, send) != q)
      continue;
    rf_strided part;
    if (send && send_in_place(c, k)) {
      rf_region src = engine_source(c->e, p);
      part = strided_of(&src, &k->box);
    } else if (!send && recv_in_place(c, k)) {
      rf_box kept;
      rf_region dst = engine_destination(c->e, p, &k->box, &kept);
      part = strided_of(&dst, &k->box);
    } else {
      part = (rf_strided){staging + at, 1, k->bytes, k->bytes};
      at += k->bytes;
    }
    RF_TRY(add_part(r, &part));
  }
  rf_transport *tp = c->e->transport;
  return tp->ops->post_strided(tp, send, c->channel, q, r->parts, r->part_count, &r->ticket);
}

rf_status engine_post_fused(engine_round *r, const rf_schedule *s, int b, char *send_base,
                            char *recv_base) {
  stage_ctx c;
  peer_tables pt;
  init_ctx(&c, r->e, r, s);
  RF_TRY(peer_tables_of(&c, &pt));
  int ranks = channel_ranks(&c);
  rf_transport *tp = r->e->transport;
  const rf_bucket *bk = &s->buckets[b];
  bucket_layout(&c, bk, &pt, ranks);
  memcpy(pt.send_next, pt.send_at, (size_t)ranks * sizeof(int64_t));
  for (int i = bk->first; i < bk->first + bk->count; i++) {
    const rf_chunk *k = &s->chunks[i];
    const rf_piece *p = piece_of(&c, k);
    if (is_local(&c, p)) {
      RF_TRY(copy_local(&c, k));
    } else if (sends(&c, p) && !send_in_place(&c, k)) {
      int q = peer_of(&c, p, 1);
      RF_TRY(pack(&c, k, send_base + pt.send_next[q]));
      pt.send_next[q] += k->bytes;
    }
  }
  RF_TRY(flush_batch(r, &r->e->pack_timer));
  RF_TRY(engine_flush_local(r));
  RF_TRY(engine_wire_ready(c.e));
  int gathers = r->e->wire_rule == RF_WIRE_GATHERS;
  RF_TRY(tp->ops->group_start(tp));
  for (int q = 0; q < ranks; q++) {
    if (pt.recv_bytes[q])
      RF_TRY(gathers ? post_gathered(&c, bk, 0, q, recv_base, pt.recv_at[q])
                     : rf_transport_recv(tp, c.channel, q, recv_base + pt.recv_at[q],
                                         (size_t)pt.recv_bytes[q], &r->ticket));
    if (pt.send_bytes[q]) {
      RF_TRY(gathers ? post_gathered(&c, bk, 1, q, send_base, pt.send_at[q])
                     : rf_transport_send(tp, c.channel, q, send_base + pt.send_at[q],
                                         (size_t)pt.send_bytes[q], &r->ticket));
      r->e->messages++;
    }
  }
  return tp->ops->group_end(tp);
}

void engine_round_free(engine_round *r) {
  free(r->local);
  free(r->unpack_chunk);
  free(r->unpack_at);
  free(r->batch);
  free(r->peers);
  free(r->parts);
  memset(r, 0, sizeof *r);
}
