/* The three transfer modes over one stage of the plan (docs/architecture.md, "Transfer modes").
 * Every rank walks the same schedule in the same order, so the messages between any two ranks are
 * posted in the same order on both sides and match without tags. */
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

typedef struct {
  rf_engine *e;
  const rf_schedule *s;
  rf_channel channel;
  int me;          /* my rank on the channel */
  int my_src_rank; /* the rank numbers pieces use for me: trainer rank (rollout: forward) */
  int my_dst_rank; /* trainer rank (reshape) or rollout rank (transfer, forward) */
  /* Local pieces (source and destination in this process) are collected and copied in one
   * batch: on a GPU that is one kernel launch instead of one per piece. */
  rf_box_copy *local;
  int local_count, local_cap;
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
  return rf_engine_send_in_place(c->e->plan, c->e->mode, c->e->wire != c->e->memory, k);
}

static int recv_in_place(const stage_ctx *c, const rf_chunk *k) {
  return rf_engine_recv_in_place(c->e->plan, c->e->mode, c->e->wire != c->e->memory, k);
}

/* Device weights over a host transport (mpi on a GPU): the pack kernels write pinned staging
 * asynchronously, and MPI reads it from the CPU, so the kernels must have finished first. */
static rf_status wire_ready(stage_ctx *c) {
  return c->e->memory != c->e->wire ? rf_mem_sync(c->e->memory) : RF_OK;
}

static void init_ctx(stage_ctx *c, rf_engine *e, const rf_schedule *s) {
  memset(c, 0, sizeof *c);
  c->e = e;
  c->s = s;
  c->channel = engine_channel(s->stage);
  c->my_src_rank = engine_src_rank(e, s->stage);
  c->my_dst_rank = engine_dst_rank(e, s->stage);
}

void engine_bucket_staging(const rf_engine *e, const rf_schedule *s, int bucket, int64_t *send,
                           int64_t *recv) {
  stage_ctx c;
  init_ctx(&c, (rf_engine *)e, s);
  *send = *recv = 0;
  const rf_bucket *b = &s->buckets[bucket];
  for (int i = b->first; i < b->first + b->count; i++) {
    const rf_chunk *k = &s->chunks[i];
    const rf_piece *p = piece_of(&c, k);
    if (is_local(&c, p))
      continue;
    if (sends(&c, p) && !send_in_place(&c, k))
      *send += k->bytes;
    if (receives(&c, p) && !recv_in_place(&c, k))
      *recv += k->bytes;
  }
}

/* Box copies go through the memory module, which runs them on the CPU or, for device
 * memory, as kernels on refit's stream (ordered before the transport's next operation). */
static rf_status copy_box(stage_ctx *c, const rf_region *dst, const rf_region *src,
                          const rf_box *box) {
  rf_box_copy copy = {*dst, *src, *box};
  return rf_box_is_empty(box) ? RF_OK : rf_copy_boxes(c->e->memory, &copy, 1);
}

static rf_status pack(stage_ctx *c, const rf_chunk *k, char *to) {
  rf_region src = engine_source(c->e, piece_of(c, k));
  rf_region staging = rf_region_row_major(to, &k->box, engine_esize(c->e, piece_of(c, k)->tensor));
  rf_mem_timer_begin(&c->e->pack_timer);
  rf_status st = copy_box(c, &staging, &src, &k->box);
  rf_mem_timer_end(&c->e->pack_timer);
  return st;
}

static rf_status unpack(stage_ctx *c, const rf_chunk *k, char *from) {
  rf_box kept;
  rf_region dst = engine_destination(c->e, piece_of(c, k), &k->box, &kept);
  rf_region staging =
      rf_region_row_major(from, &k->box, engine_esize(c->e, piece_of(c, k)->tensor));
  rf_mem_timer_begin(&c->e->unpack_timer);
  rf_status st = copy_box(c, &dst, &staging, &kept);
  rf_mem_timer_end(&c->e->unpack_timer);
  return st;
}

static rf_status copy_local(stage_ctx *c, const rf_chunk *k) {
  rf_box kept;
  rf_region dst = engine_destination(c->e, piece_of(c, k), &k->box, &kept);
  rf_region src = engine_source(c->e, piece_of(c, k));
  if (rf_box_is_empty(&kept))
    return RF_OK;
  RF_TRY(
      rf_grow((void **)&c->local, c->local_count, &c->local_cap, sizeof *c->local, "local copies"));
  c->local[c->local_count++] = (rf_box_copy){dst, src, kept};
  return RF_OK;
}

static rf_status flush_local(stage_ctx *c) {
  rf_status st = c->local_count ? rf_copy_boxes(c->e->memory, c->local, c->local_count) : RF_OK;
  c->local_count = 0;
  return st;
}

/* Receives that landed in staging, to unpack once their wait completes. */
typedef struct {
  int *chunk;
  char **at;
  int count;
} pending_unpacks;

static rf_status post_chunk(stage_ctx *c, const rf_chunk *k, int index, int64_t *send_off,
                            int64_t *recv_off, pending_unpacks *pu, long *ticket) {
  rf_transport *tp = c->e->transport;
  const rf_piece *p = piece_of(c, k);
  if (is_local(c, p))
    return copy_local(c, k);
  if (sends(c, p)) {
    char *buf;
    if (send_in_place(c, k)) {
      rf_region src = engine_source(c->e, p);
      buf = rf_region_at(&src, k->box.lo[0], k->box.lo[1]);
    } else {
      buf = (char *)c->e->staging[0][0] + *send_off;
      *send_off += k->bytes;
      RF_TRY(pack(c, k, buf));
      RF_TRY(wire_ready(c));
    }
    RF_TRY(rf_transport_send(tp, c->channel, peer_of(c, p, 1), buf, (size_t)k->bytes, ticket));
    c->e->messages++;
  }
  if (receives(c, p)) {
    char *buf;
    if (recv_in_place(c, k)) {
      rf_box kept;
      rf_region dst = engine_destination(c->e, p, &k->box, &kept);
      buf = rf_region_at(&dst, k->box.lo[0], k->box.lo[1]);
    } else {
      buf = (char *)c->e->staging[1][0] + *recv_off;
      *recv_off += k->bytes;
      pu->chunk[pu->count] = index;
      pu->at[pu->count++] = buf;
    }
    RF_TRY(rf_transport_recv(tp, c->channel, peer_of(c, p, 0), buf, (size_t)k->bytes, ticket));
  }
  return RF_OK;
}

static rf_status complete(stage_ctx *c, long ticket, pending_unpacks *pu, const char *what) {
  rf_transport *tp = c->e->transport;
  RF_TRY(flush_local(c));
  RF_TRY(tp->ops->wait(tp, ticket + 1, what));
  for (int i = 0; i < pu->count; i++)
    RF_TRY(unpack(c, &c->s->chunks[pu->chunk[i]], pu->at[i]));
  pu->count = 0;
  return wire_ready(c); /* the staging is received into again once the unpacks are done */
}

/* How many chunks from chunks[i] move as one block (rf_engine_joined_chunks). Both ends compute
 * it from the plan alone, so they agree on every message's size. */
static int joined_run(const stage_ctx *c, int i, int end) {
  const rf_engine *e = c->e;
  return rf_engine_joined_chunks(e->plan, e->mode, e->wire != e->memory, c->s->chunks, i, end);
}

/* One message for a run of joined chunks, from the first one's source and into the first
 * one's destination, in place on both ends. */
static rf_status post_block(stage_ctx *c, const rf_chunk *k, int run, long *ticket) {
  rf_transport *tp = c->e->transport;
  const rf_piece *p = piece_of(c, k);
  int64_t bytes = 0;
  for (int j = 0; j < run; j++)
    bytes += k[j].bytes;
  if (sends(c, p)) {
    rf_region src = engine_source(c->e, p);
    RF_TRY(rf_transport_send(tp, c->channel, peer_of(c, p, 1),
                             rf_region_at(&src, k->box.lo[0], k->box.lo[1]), (size_t)bytes,
                             ticket));
    c->e->messages++;
  }
  if (receives(c, p)) {
    rf_box kept;
    rf_region dst = engine_destination(c->e, p, &k->box, &kept);
    RF_TRY(rf_transport_recv(tp, c->channel, peer_of(c, p, 0),
                             rf_region_at(&dst, k->box.lo[0], k->box.lo[1]), (size_t)bytes,
                             ticket));
  }
  return RF_OK;
}

/* unfused and grouped: one message per chunk, or per run of joined chunks. unfused waits after
 * every tensor (or block), grouped after every bucket. */
static rf_status run_per_chunk(stage_ctx *c) {
  const rf_schedule *s = c->s;
  rf_transport *tp = c->e->transport;
  int grouped = c->e->mode == RF_MODE_GROUPED;
  pending_unpacks pu = {rf_malloc((size_t)s->chunk_count * sizeof(int) + 1, "unpack list"),
                        rf_malloc((size_t)s->chunk_count * sizeof(char *) + 1, "unpack list"), 0};
  rf_status st = pu.chunk && pu.at ? RF_OK : RF_ERR_NOMEM;
  long ticket = -1;
  for (int b = 0; b < s->bucket_count && st == RF_OK; b++) {
    const rf_bucket *bk = &s->buckets[b];
    int64_t send_off = 0, recv_off = 0;
    if (grouped)
      st = tp->ops->group_start(tp);
    for (int i = bk->first; i < bk->first + bk->count && st == RF_OK; i++) {
      int run = joined_run(c, i, bk->first + bk->count);
      if (run > 1)
        st = post_block(c, &s->chunks[i], run, &ticket);
      else
        st = post_chunk(c, &s->chunks[i], i, &send_off, &recv_off, &pu, &ticket);
      i += run - 1;
      const rf_chunk *k = &s->chunks[i];
      int last_of_tensor = i + 1 == bk->first + bk->count ||
                           piece_of(c, &s->chunks[i + 1])->tensor != piece_of(c, k)->tensor;
      if (st == RF_OK && !grouped && last_of_tensor)
        st = complete(c, ticket, &pu, "the pieces of a tensor");
    }
    if (grouped && st == RF_OK)
      st = tp->ops->group_end(tp);
    if (grouped && st == RF_OK)
      st = complete(c, ticket, &pu, "a bucket's group of messages");
  }
  free(pu.chunk);
  free(pu.at);
  return st;
}

/* fused: per bucket, one message per peer and direction, through double-buffered staging. */
typedef struct {
  int64_t *send_bytes, *recv_bytes, *send_at, *recv_at; /* per channel rank */
} peer_tables;

static void bucket_layout(stage_ctx *c, const rf_bucket *bk, peer_tables *pt, int ranks) {
  memset(pt->send_bytes, 0, (size_t)ranks * sizeof(int64_t));
  memset(pt->recv_bytes, 0, (size_t)ranks * sizeof(int64_t));
  for (int i = bk->first; i < bk->first + bk->count; i++) {
    const rf_piece *p = piece_of(c, &c->s->chunks[i]);
    if (is_local(c, p))
      continue;
    if (sends(c, p))
      pt->send_bytes[peer_of(c, p, 1)] += c->s->chunks[i].bytes;
    if (receives(c, p))
      pt->recv_bytes[peer_of(c, p, 0)] += c->s->chunks[i].bytes;
  }
  int64_t s = 0, r = 0;
  for (int q = 0; q < ranks; q++) {
    pt->send_at[q] = s, s += pt->send_bytes[q];
    pt->recv_at[q] = r, r += pt->recv_bytes[q];
  }
}

/* Unpacks bucket b from recv staging slot b % 2, in the order the sender packed it. */
static rf_status unpack_bucket(stage_ctx *c, int b, peer_tables *pt, int ranks) {
  const rf_bucket *bk = &c->s->buckets[b];
  bucket_layout(c, bk, pt, ranks);
  char *base = c->e->staging[1][b % 2];
  for (int i = bk->first; i < bk->first + bk->count; i++) {
    const rf_chunk *k = &c->s->chunks[i];
    const rf_piece *p = piece_of(c, k);
    if (is_local(c, p) || !receives(c, p))
      continue;
    int q = peer_of(c, p, 0);
    RF_TRY(unpack(c, k, base + pt->recv_at[q]));
    pt->recv_at[q] += k->bytes;
  }
  return RF_OK;
}

static rf_status post_bucket(stage_ctx *c, int b, peer_tables *pt, int ranks, long *ticket) {
  rf_transport *tp = c->e->transport;
  const rf_bucket *bk = &c->s->buckets[b];
  bucket_layout(c, bk, pt, ranks);
  char *send_base = c->e->staging[0][b % 2], *recv_base = c->e->staging[1][b % 2];
  for (int i = bk->first; i < bk->first + bk->count; i++) {
    const rf_chunk *k = &c->s->chunks[i];
    const rf_piece *p = piece_of(c, k);
    if (is_local(c, p)) {
      RF_TRY(copy_local(c, k));
    } else if (sends(c, p)) {
      int q = peer_of(c, p, 1);
      RF_TRY(pack(c, k, send_base + pt->send_at[q]));
      pt->send_at[q] += k->bytes;
    }
  }
  RF_TRY(flush_local(c));
  RF_TRY(wire_ready(c));
  RF_TRY(tp->ops->group_start(tp));
  for (int q = 0; q < ranks; q++) {
    if (pt->recv_bytes[q])
      RF_TRY(rf_transport_recv(tp, c->channel, q, recv_base + pt->recv_at[q],
                               (size_t)pt->recv_bytes[q], ticket));
    if (pt->send_bytes[q]) { /* send_at[q] has moved past the packed bytes */
      RF_TRY(rf_transport_send(tp, c->channel, q, send_base + pt->send_at[q] - pt->send_bytes[q],
                               (size_t)pt->send_bytes[q], ticket));
      c->e->messages++;
    }
  }
  return tp->ops->group_end(tp);
}

static rf_status run_fused(stage_ctx *c) {
  rf_transport *tp = c->e->transport;
  int ranks = c->channel == RF_CHANNEL_TRAINER ? c->e->plan->layout->trainer_ranks
                                               : c->e->plan->layout->world_size;
  peer_tables pt;
  int64_t *mem = rf_calloc((size_t)ranks * 4, sizeof(int64_t), "fused peer tables");
  long *done_at = rf_calloc((size_t)c->s->bucket_count + 1, sizeof(long), "fused tickets");
  if (!mem || !done_at) {
    free(mem), free(done_at);
    return RF_ERR_NOMEM;
  }
  pt.send_bytes = mem, pt.recv_bytes = mem + ranks;
  pt.send_at = mem + 2 * ranks, pt.recv_at = mem + 3 * ranks;
  rf_status st = RF_OK;
  long ticket = -1;
  /* Bucket b is packed and posted while bucket b-1 is still in flight; then b-1 completes
   * and is unpacked. Slot b % 2 is free again because bucket b-2 completed last round. */
  for (int b = 0; b < c->s->bucket_count && st == RF_OK; b++) {
    st = post_bucket(c, b, &pt, ranks, &ticket);
    done_at[b] = ticket + 1;
    if (st == RF_OK && b > 0) {
      st = tp->ops->wait(tp, done_at[b - 1], "a fused bucket");
      if (st == RF_OK)
        st = unpack_bucket(c, b - 1, &pt, ranks);
      if (st == RF_OK)
        st = wire_ready(c);
    }
  }
  int last = c->s->bucket_count - 1;
  if (st == RF_OK && last >= 0) {
    st = tp->ops->wait(tp, done_at[last], "the last fused bucket");
    if (st == RF_OK)
      st = unpack_bucket(c, last, &pt, ranks);
  }
  free(mem);
  free(done_at);
  return st;
}

rf_status engine_run_stage(rf_engine *e, const rf_schedule *s, double *times) {
  stage_ctx c;
  init_ctx(&c, e, s);
  double start = rf_now();
  rf_status st = e->mode == RF_MODE_FUSED ? run_fused(&c) : run_per_chunk(&c);
  if (st == RF_OK)
    st = flush_local(&c);
  if (st == RF_OK)
    st = rf_mem_sync(e->memory); /* the stage ends when its last copy has landed */
  free(c.local);
  /* On a GPU the copies' own time, read from events once the stage has synchronised; fused
   * packs overlap the flight of the previous bucket, so the transfer phase is what the wall
   * clock leaves over. */
  double wall = rf_now() - start;
  double packing = rf_mem_timer_take(&e->pack_timer);
  double unpacking = rf_mem_timer_take(&e->unpack_timer);
  times[RF_PHASE_PACK] += packing;
  times[RF_PHASE_UNPACK] += unpacking;
  times[RF_PHASE_TRANSFER] += RF_MAX(0.0, wall - packing - unpacking);
  return st;
}
