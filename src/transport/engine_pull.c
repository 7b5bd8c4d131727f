/* The pull protocol of mapping transports (ipc). A destination reads its pieces straight out
 * of its sources' arenas, mapped into its own address space, so nothing is packed, sent or
 * unpacked; a stage is
 *
 *   1. ready  every source waits for its own GPU work (the weights, or the coupling buffer
 *             the reshape just wrote) and sends each of its readers a one-byte note;
 *   2. copy   each destination copies its pieces, local and remote alike, as batches of box
 *             copies: one kernel launch and wait per tensor (unfused) or per bucket
 *             (grouped), or one launch for the whole stage (fused). Buckets exist to bound
 *             staging memory, and a pull needs none, so fused drops them: on a GPU shared
 *             by two processes every launch costs more than in one process (measured on the
 *             H200: results/h200/README.md);
 *   3. done   each destination tells its sources it has finished reading, so a source never
 *             overwrites memory that is still being read.
 *
 * The notes ride on the transport's post_send/post_recv (MPI inside ipc) and every wait is
 * bounded by --timeout, so a stalled source ends its readers' run with an error. Offsets
 * inside a peer's arena come from rf_buffers_offsets, a pure function of the plan. */
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

static rf_buffer_family source_family(const rf_engine *e, const rf_piece *p) {
  return p->stage == RF_STAGE_TRANSFER && e->plan->kind == RF_PLAN_STAR ? RF_FAMILY_COUPLING
                                                                        : RF_FAMILY_SHARDS;
}

/* Where piece p is read from: in this process for a local piece, else in the mapped arena
 * of the trainer rank that holds it. */
static rf_status pull_source(rf_engine *e, const rf_piece *p, rf_region *out) {
  const rf_plan *plan = e->plan;
  const rf_layout *lay = plan->layout;
  if (p->src == e->trainer_rank) {
    *out = engine_source(e, p);
    return RF_OK;
  }
  rf_buffer_family f = source_family(e, p);
  void *base;
  rf_transport *tp = e->transport;
  RF_TRY(tp->ops->peer_buffer(tp, rf_layout_trainer_world_rank(lay, p->src), (int)f, &base));
  char *at = (char *)base +
             e->source_offsets[f][(size_t)p->src * (size_t)lay->model->tensor_count + p->tensor];
  if (f == RF_FAMILY_SHARDS)
    *out = rf_shard_region(plan, p->src, p->tensor, at);
  else
    *out = rf_region_row_major(at, &plan->coupling[(size_t)p->tensor * lay->trainer_ranks + p->src],
                               e->esize);
  return RF_OK;
}

rf_status engine_pull_init(rf_engine *e) {
  const rf_plan *plan = e->plan;
  const rf_layout *lay = plan->layout;
  rf_transport *tp = e->transport;
  rf_buffers *data = e->data;
  e->pull = 1;
  if (!data->exposed) {
    RF_TRY(rf_control_agree(tp->ctl, tp->ops->expose(tp, data->arena, RF_FAMILY_ROLLOUT)));
    data->exposed = 1;
  }
  size_t nt = (size_t)lay->model->tensor_count, ranks = (size_t)lay->trainer_ranks;
  for (int f = 0; f < 2; f++) {
    e->source_offsets[f] = rf_calloc(ranks * nt + 1, sizeof(int64_t), "peer arena offsets");
    if (!e->source_offsets[f])
      return RF_ERR_NOMEM;
    for (size_t r = 0; r < ranks; r++)
      rf_buffers_offsets(plan, (rf_buffer_family)f, (int)r, e->source_offsets[f] + r * nt);
  }
  e->notes = rf_calloc((size_t)lay->world_size * 2 + 1, 1, "pull notes");
  if (!e->notes)
    return RF_ERR_NOMEM;
  /* Map every arena this rank reads from now, so that the setup phase pays for it. */
  const rf_schedule *stages[2] = {&e->reshape, &e->transfer};
  for (int s = 0; s < 2; s++)
    for (int i = 0; i < stages[s]->chunk_count; i++) {
      const rf_piece *p = &plan->pieces[stages[s]->chunks[i].piece];
      int dst = s == 0 ? e->trainer_rank : e->rollout_rank;
      rf_region r;
      if (p->dst == dst && dst >= 0)
        RF_TRY(pull_source(e, p, &r));
    }
  return RF_OK;
}

typedef struct {
  rf_engine *e;
  const rf_schedule *s;
  rf_channel channel;
  int src_rank, dst_rank; /* my ranks in the pieces' numbering for this stage */
  int ranks;              /* ranks of the channel */
  rf_box_copy *batch;
  int count, cap;
} pull_ctx;

static int peer_of(const pull_ctx *c, const rf_piece *p, int source) {
  if (c->channel == RF_CHANNEL_TRAINER)
    return source ? p->src : p->dst;
  return source ? rf_piece_src_world(c->e->plan, p) : rf_piece_dst_world(c->e->plan, p);
}

/* Sends a note to every rank flagged in `to` and receives one from every rank flagged in
 * `from`, then waits for all of them. */
static rf_status exchange_notes(pull_ctx *c, const char *to, const char *from, const char *what) {
  rf_transport *tp = c->e->transport;
  char *in = c->e->notes, *out = c->e->notes + c->ranks;
  long ticket = -1;
  for (int q = 0; q < c->ranks; q++) {
    if (from[q])
      RF_TRY(tp->ops->post_recv(tp, c->channel, q, &in[q], 1, &ticket));
    if (to[q]) {
      out[q] = 1;
      RF_TRY(tp->ops->post_send(tp, c->channel, q, &out[q], 1, &ticket));
    }
  }
  return ticket >= 0 ? tp->ops->wait(tp, ticket + 1, what) : RF_OK;
}

static rf_status flush(pull_ctx *c, int wait) {
  rf_status st = c->count ? rf_copy_boxes(c->e->memory, c->batch, c->count) : RF_OK;
  c->count = 0;
  if (st == RF_OK && wait)
    st = rf_mem_sync(c->e->memory);
  return st;
}

static rf_status add_copy(pull_ctx *c, const rf_chunk *k) {
  const rf_piece *p = &c->e->plan->pieces[k->piece];
  rf_box kept;
  rf_region dst = engine_destination(c->e, p, &k->box, &kept);
  if (rf_box_is_empty(&kept))
    return RF_OK;
  rf_region src;
  RF_TRY(pull_source(c->e, p, &src));
  RF_TRY(rf_grow((void **)&c->batch, c->count, &c->cap, sizeof *c->batch, "pull copies"));
  c->batch[c->count++] = (rf_box_copy){dst, src, kept};
  return RF_OK;
}

static rf_status copy_stage(pull_ctx *c) {
  const rf_schedule *s = c->s;
  rf_mode mode = c->e->mode;
  for (int b = 0; b < s->bucket_count; b++) {
    const rf_bucket *bk = &s->buckets[b];
    for (int i = bk->first; i < bk->first + bk->count; i++) {
      const rf_piece *p = &c->e->plan->pieces[s->chunks[i].piece];
      if (p->dst == c->dst_rank)
        RF_TRY(add_copy(c, &s->chunks[i]));
      int last_of_tensor = i + 1 == bk->first + bk->count ||
                           c->e->plan->pieces[s->chunks[i + 1].piece].tensor != p->tensor;
      if (mode == RF_MODE_UNFUSED && last_of_tensor)
        RF_TRY(flush(c, 1));
    }
    if (mode != RF_MODE_FUSED)
      RF_TRY(flush(c, 1));
  }
  return flush(c, 1);
}

rf_status engine_run_stage_pull(rf_engine *e, const rf_schedule *s, double *times) {
  pull_ctx c;
  memset(&c, 0, sizeof c);
  c.e = e;
  c.s = s;
  c.channel = s->stage == RF_STAGE_RESHAPE ? RF_CHANNEL_TRAINER : RF_CHANNEL_WORLD;
  c.src_rank = e->trainer_rank;
  c.dst_rank = s->stage == RF_STAGE_RESHAPE ? e->trainer_rank : e->rollout_rank;
  c.ranks = c.channel == RF_CHANNEL_TRAINER ? e->plan->layout->trainer_ranks
                                            : e->plan->layout->world_size;
  double start = rf_now();
  /* Who reads from me (read_by) and whom I read from (reads_from), on this channel. */
  char *flags = rf_calloc((size_t)c.ranks * 2 + 1, 1, "pull peers");
  if (!flags)
    return RF_ERR_NOMEM;
  char *read_by = flags, *reads_from = flags + c.ranks;
  for (int i = 0; i < s->chunk_count; i++) {
    const rf_piece *p = &e->plan->pieces[s->chunks[i].piece];
    int from_me = p->src == c.src_rank && c.src_rank >= 0;
    int to_me = p->dst == c.dst_rank && c.dst_rank >= 0;
    if (from_me && !to_me)
      read_by[peer_of(&c, p, 0)] = 1;
    if (to_me && !from_me)
      reads_from[peer_of(&c, p, 1)] = 1;
  }
  rf_status st = rf_mem_sync(e->memory); /* my sources are written before anyone reads them */
  if (st == RF_OK)
    st = exchange_notes(&c, read_by, reads_from, "the sources' ready notes");
  if (st == RF_OK)
    st = copy_stage(&c);
  if (st == RF_OK)
    st = exchange_notes(&c, reads_from, read_by, "the destinations' done notes");
  free(c.batch);
  free(flags);
  times[RF_PHASE_TRANSFER] += rf_now() - start;
  return st;
}
