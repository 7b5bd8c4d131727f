/* Mapping transports (ipc): every rank maps the arenas of the ranks it shares pieces with,
 * so one side of each piece copies it straight between the two processes' memory; nothing is
 * packed, sent or unpacked. The side that copies is the direction:
 *   pull  the destination reads its sources' memory (ready notes from the sources first,
 *         done notes back once it has read);
 *   push  the source writes into its destinations' memory (ready notes from the
 *         destinations first, written notes back once the copies have landed).
 * An exchange is: 1. the first notes (each side first waits for its own GPU work, so what it
 * offers is complete); 2. the copies, local and remote alike, as batches of box copies: one
 * kernel launch and wait per tensor (unfused) or per bucket (grouped), or a few launches and
 * one wait for the whole stage (fused: buckets bound staging memory, and a mapping transport
 * needs none, while on a GPU shared by two processes every launch costs more than in one, see
 * results/h200/README.md; the first launches come early, see MAPPED_EARLY_FIRST); 3. the second
 * notes, after which no one touches the other's memory.
 *
 * Fanout runs in rounds (plan.h, rf_rounds), each round such an exchange around its buckets:
 * the transfer's and the forward buckets whose rows earlier rounds delivered, so a replica
 * forwards while the trainer's later buckets arrive. A forwarding rank's rows have landed
 * before it gives its first note: it copied them itself (pull) or was told so (push).
 * Without forward steps the transfer is one exchange: a round per bucket would only add notes
 * and launches, since no staging needs bounding.
 *
 * The notes ride on the transport's messages (MPI inside ipc) and every wait is
 * bounded by --timeout, so a stalled peer ends the run with an error. Offsets inside a peer's
 * arenas come from rf_buffers_offsets, a pure function of the plan.
 *
 * REFIT_TIMELINE=1 in the environment (issue 16) makes every rank print one line per exchange
 * to stderr: its start on CLOCK_MONOTONIC (shared by the processes of a node, so the ranks'
 * lines line up) and the milliseconds of each step: the GPU sync before the first notes, the
 * first notes, the copies' launches (host), the waits for them (host) and their GPU time
 * (CUDA events around each launch, on refit's stream), the second notes. Off, it costs one
 * branch a step. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

static rf_buffer_family source_family(const rf_engine *e, const rf_piece *p) {
  if (p->stage == RF_STAGE_FORWARD)
    return RF_FAMILY_ROLLOUT;
  return p->stage == RF_STAGE_TRANSFER && e->plan->kind == RF_PLAN_STAR ? RF_FAMILY_COUPLING
                                                                        : RF_FAMILY_SHARDS;
}

/* The address in this process of `f`'s arena of trainer rank (shards, coupling) or rollout
 * rank (rollout) `rank`. */
static int world_of(const rf_engine *e, rf_buffer_family f, int rank) {
  const rf_layout *lay = e->plan->layout;
  return f == RF_FAMILY_ROLLOUT ? rf_layout_rollout_world_rank(lay, rank)
                                : rf_layout_trainer_world_rank(lay, rank);
}

static rf_status peer_arena(rf_engine *e, rf_buffer_family f, int rank, char **out) {
  void *base;
  RF_TRY(e->transport->ops->peer_buffer(e->transport, world_of(e, f, rank), (int)f, &base));
  if (!base)
    return rf_fail(RF_ERR_INTERNAL, "mapped copy: rank %d offered no arena %d",
                   world_of(e, f, rank), (int)f);
  *out = base;
  return RF_OK;
}

static int64_t peer_offset(const rf_engine *e, rf_buffer_family f, int rank, int tensor) {
  const rf_layout *lay = e->plan->layout;
  size_t n =
      f == RF_FAMILY_ROLLOUT ? (size_t)lay->rollout_tensor_count : (size_t)lay->model->tensor_count;
  size_t row = f == RF_FAMILY_ROLLOUT ? 0 : (size_t)rank;
  return e->peer_offsets[f][row * n + (size_t)tensor];
}

/* Where trainer rank (shards) or rollout rank (rollout) `rank` keeps its tensor `index` (model
 * tensor, rollout tensor), mapped here: in its caller's memory where the caller registered it
 * (rf_engine_expose_caller), else in its arena. */
static rf_status peer_tensor(rf_engine *e, rf_buffer_family f, int rank, int index, char **out) {
  const rf_buffers *data = e->data;
  if (data->caller_exposed) {
    int at = data->caller_index +
             (f == RF_FAMILY_ROLLOUT ? e->plan->layout->model->tensor_count + index : index);
    void *caller;
    RF_TRY(e->transport->ops->peer_buffer(e->transport, world_of(e, f, rank), at, &caller));
    if (caller) {
      *out = caller;
      return RF_OK;
    }
  }
  char *base;
  RF_TRY(peer_arena(e, f, rank, &base));
  *out = base + peer_offset(e, f, rank, index);
  return RF_OK;
}

/* Rollout rank `rank`'s part of tensor `tensor` in its fused rollout tensor, mapped here. */
static rf_status remote_rollout(rf_engine *e, int tensor, int rank, rf_region *out) {
  rf_box held;
  char *at;
  RF_TRY(peer_tensor(e, RF_FAMILY_ROLLOUT, rank, e->plan->layout->slots[tensor].local, &at));
  *out = engine_rollout_over(e->plan, tensor, rank, at, &held);
  return RF_OK;
}

/* Where another rank holds the source of piece p: a trainer shard, star's coupling, or
 * (forward) a rollout rank's part of a fused tensor. */
static rf_status remote_source(rf_engine *e, const rf_piece *p, rf_region *out) {
  const rf_plan *plan = e->plan;
  rf_buffer_family f = source_family(e, p);
  if (f == RF_FAMILY_ROLLOUT)
    return remote_rollout(e, p->tensor, p->src, out);
  char *at;
  if (f == RF_FAMILY_SHARDS) {
    RF_TRY(peer_tensor(e, f, p->src, p->tensor, &at));
    *out = rf_shard_region(plan, p->src, p->tensor, at);
    return RF_OK;
  }
  RF_TRY(peer_arena(e, f, p->src, &at));
  at += peer_offset(e, f, p->src, p->tensor);
  *out = rf_region_row_major(
      at, &plan->coupling[(size_t)p->tensor * plan->layout->trainer_ranks + p->src],
      engine_esize(e, p->tensor));
  return RF_OK;
}

/* fp8: the chunks that carry fp8 are not box copies. Over a mapping every fp8 job pulls
 * (rf_engine_pushes), so this rank is the destination: a source-quantized chunk is quantized
 * out of its source's memory into this rank's fp8 tensor and scales, a forward chunk's fp8
 * bytes and scales are copied out of the forwarding replica's. Host memory only (engine.c). */
static rf_status fp8_chunk(rf_engine *e, const rf_piece *p, rf_quant quant, const rf_box *box) {
  rf_region src;
  if (p->src == engine_src_rank(e, p->stage))
    src = engine_source(e, p);
  else
    RF_TRY(remote_source(e, p, &src));
  if (quant == RF_QUANT_SOURCE)
    return engine_fp8_local(e, p, &src, box);
  if (quant == RF_QUANT_CARRIED) /* the scales lie beside the source's shard */
    return engine_fp8_carried(e, p, &src, box, NULL);
  char *at;
  rf_box blocks;
  int scales = e->plan->layout->slots[p->tensor].local + 1; /* layout_fp8.c */
  RF_TRY(peer_tensor(e, RF_FAMILY_ROLLOUT, p->src, scales, &at));
  engine_scales scale = engine_fp8_scales(e->plan, at, p->tensor, p->src, &blocks);
  return engine_fp8_copy(e, p, &src, &scale, box);
}

/* Where another rank keeps piece p: its coupling buffer (star's reshape) or its part of the
 * fused rollout tensor; `kept` is the part of `box` that rank holds. */
static rf_status remote_destination(rf_engine *e, const rf_piece *p, const rf_box *box,
                                    rf_region *out, rf_box *kept) {
  const rf_plan *plan = e->plan;
  const rf_layout *lay = plan->layout;
  char *base;
  if (p->stage == RF_STAGE_RESHAPE) {
    RF_TRY(peer_arena(e, RF_FAMILY_COUPLING, p->dst, &base));
    *kept = *box;
    *out = rf_region_row_major(base + peer_offset(e, RF_FAMILY_COUPLING, p->dst, p->tensor),
                               &plan->coupling[(size_t)p->tensor * lay->trainer_ranks + p->dst],
                               engine_esize(e, p->tensor));
    return RF_OK;
  }
  rf_box held = rf_layout_rollout_box(lay, p->tensor, p->dst);
  rf_box_intersect(box, &held, kept);
  return remote_rollout(e, p->tensor, p->dst, out);
}

static int copies_here(const rf_engine *e, const rf_piece *p) {
  return e->push ? p->src == engine_src_rank(e, p->stage) && engine_src_rank(e, p->stage) >= 0
                 : p->dst == engine_dst_rank(e, p->stage) && engine_dst_rank(e, p->stage) >= 0;
}

static rf_status chunk_copy(rf_engine *e, const rf_piece *p, const rf_box *box, rf_box_copy *copy);

/* Maps every peer memory this rank copies from or into now, so that the setup phase pays for
 * it rather than the first transfer. */
static rf_status map_peers(rf_engine *e) {
  const rf_plan *plan = e->plan;
  for (int s = 0; s < 2 + plan->forward_depth; s++)
    for (int i = 0; i < engine_stage(e, s)->chunk_count; i++) {
      const rf_chunk *k = &engine_stage(e, s)->chunks[i];
      rf_box_copy copy;
      if (copies_here(e, &plan->pieces[k->piece]))
        RF_TRY(chunk_copy(e, &plan->pieces[k->piece], &k->box, &copy));
    }
  return RF_OK;
}

/* The copy of chunk box `box` of piece p, made by this rank: the end that is not here is
 * mapped from its rank. Sets copy->box to the elements that move (empty: nothing to do). */
static rf_status chunk_copy(rf_engine *e, const rf_piece *p, const rf_box *box, rf_box_copy *copy) {
  int src_here = p->src == engine_src_rank(e, p->stage);
  int dst_here = p->dst == engine_dst_rank(e, p->stage);
  if (dst_here)
    copy->dst = engine_destination(e, p, box, &copy->box);
  else
    RF_TRY(remote_destination(e, p, box, &copy->dst, &copy->box));
  if (src_here) {
    copy->src = engine_source(e, p);
    return RF_OK;
  }
  return remote_source(e, p, &copy->src);
}

int rf_engine_pushes(const rf_plan *plan) {
  /* An fp8 rollout pulls: its destination quantizes, or lands pieces in buffers no peer maps. */
  if (rf_layout_format(plan->layout))
    return 0;
  /* REFIT_MAPPED_PUSH=0|1 overrides the choice by order, for measuring both directions; every
   * rank must see the same value (mpirun passes the environment to all of them). */
  const char *force = getenv("REFIT_MAPPED_PUSH");
  if (force && (strcmp(force, "0") == 0 || strcmp(force, "1") == 0))
    return force[0] == '1';
  return plan->layout->trainer.order == RF_ORDER_JAX;
}

/* --register tensor: where this rank's tensors start in each of its arenas, ascending and
 * without repeats (a tensor of which this rank holds nothing starts where the next does). */
static rf_status tensor_cuts(const rf_buffers *data, rf_cuts *cuts, int64_t **owned) {
  const rf_layout *lay = data->plan->layout;
  for (int f = 0; f < RF_FAMILY_COUNT; f++) {
    cuts[f] = (rf_cuts){NULL, 0};
    int rank = f == RF_FAMILY_ROLLOUT ? data->rollout_rank : data->trainer_rank;
    if (rank < 0 || !data->arena_bytes[f])
      continue;
    int n = f == RF_FAMILY_ROLLOUT ? lay->rollout_tensor_count : lay->model->tensor_count;
    int64_t *off = rf_calloc((size_t)n + 1, sizeof *off, "the tensors' windows");
    if (!off)
      return RF_ERR_NOMEM;
    owned[f] = off;
    int64_t arena;
    cuts[f] = (rf_cuts){
        off, rf_buffers_tensor_starts(data->plan, (rf_buffer_family)f, rank, off, &arena)};
  }
  return RF_OK;
}

rf_status rf_engine_expose(rf_buffers *data, rf_transport *tp) {
  if (data->exposed || !tp->ops->peer_buffer)
    return RF_OK;
  /* Refused before any window is made over memory the transport cannot reach (every rank
   * alike: the caller holds the line and agrees). */
  if (tp->ops->check_memory)
    RF_TRY(tp->ops->check_memory(tp, data->memory));
  /* Every rank learns the worst outcome: over the control plane, or, for a transport that
   * has none (the in-process loopback of the tests), from its own collective expose. */
  size_t bytes[RF_FAMILY_COUNT];
  for (int f = 0; f < RF_FAMILY_COUNT; f++)
    bytes[f] = data->arena_bytes[f];
  rf_cuts cuts[RF_FAMILY_COUNT];
  int64_t *owned[RF_FAMILY_COUNT] = {NULL};
  int per_tensor = tp->register_unit == RF_REGISTER_TENSOR;
  rf_status cut = per_tensor ? tensor_cuts(data, cuts, owned) : RF_OK;
  /* A rank whose cuts failed still takes part, its arenas whole, and the failure is agreed. */
  rf_status exposed =
      tp->ops->expose_sized
          ? tp->ops->expose_sized(tp, data->arena, bytes, per_tensor && cut == RF_OK ? cuts : NULL,
                                  RF_FAMILY_COUNT)
          : tp->ops->expose(tp, data->arena, RF_FAMILY_COUNT);
  if (cut != RF_OK)
    exposed = cut;
  for (int f = 0; f < RF_FAMILY_COUNT; f++)
    free(owned[f]);
  RF_TRY(tp->ctl ? rf_control_agree(tp->ctl, exposed) : exposed);
  data->exposed = 1;
  data->exposed_count = RF_FAMILY_COUNT;
  return RF_OK;
}

void rf_engine_set_push(rf_engine *e, int push) {
  if (e->mapped)
    e->push = push;
}

rf_status engine_mapped_init(rf_engine *e) {
  const rf_plan *plan = e->plan;
  const rf_layout *lay = plan->layout;
  rf_transport *tp = e->transport;
  rf_buffers *data = e->data;
  e->mapped = 1;
  /* A JAX-order trainer pushes: it reads its transposed shards in its own memory and writes
   * into the rollout's. That won while arenas were allocated at their exact sizes (H200,
   * Llama-3.1-8B: 12.1 ms push against 14.2 ms pull); with arenas rounded to 2 MiB both
   * directions take 9.3 ms (results/h200/README.md), and push stays. */
  e->push = rf_engine_pushes(plan);
  const char *tl = getenv("REFIT_TIMELINE");
  e->timeline = tl && *tl && strcmp(tl, "0") != 0;
  e->timeline_timer.kind = e->memory;
  RF_TRY(rf_engine_expose(data, tp));
  /* Offsets in every peer's arenas; the rollout arena's do not depend on the rank. */
  for (int f = 0; f < RF_FAMILY_COUNT; f++) {
    size_t n = f == RF_FAMILY_ROLLOUT ? (size_t)lay->rollout_tensor_count
                                      : (size_t)lay->model->tensor_count;
    size_t ranks = f == RF_FAMILY_ROLLOUT ? 1 : (size_t)lay->trainer_ranks;
    e->peer_offsets[f] = rf_calloc(ranks * n + 1, sizeof(int64_t), "peer arena offsets");
    if (!e->peer_offsets[f])
      return RF_ERR_NOMEM;
    for (size_t r = 0; r < ranks; r++)
      rf_buffers_offsets(plan, (rf_buffer_family)f, (int)r, e->peer_offsets[f] + r * n);
  }
  e->notes = rf_calloc((size_t)lay->world_size * 2 + 1, 1, "copy notes");
  if (!e->notes)
    return RF_ERR_NOMEM;
  return map_peers(e);
}

rf_status rf_engine_expose_caller(rf_engine *e, const char *shards, const char *rollout) {
  rf_buffers *data = e->data;
  rf_transport *tp = e->transport;
  if (!e->mapped || !tp->ops->maps_caller_memory)
    return rf_fail(RF_ERR_INTERNAL, "the %s transport cannot map the caller's memory",
                   tp->ops->name);
  const rf_layout *lay = e->plan->layout;
  int nt = lay->model->tensor_count, nr = lay->rollout_tensor_count;
  void **mine = rf_calloc((size_t)(nt + nr) + 1, sizeof *mine, "the caller's tensors");
  /* Every rank exposes the same count, or none does: a rank short of memory says so first. */
  rf_status st = mine ? RF_OK : RF_ERR_NOMEM;
  st = tp->ctl ? rf_control_agree(tp->ctl, st) : st;
  if (st != RF_OK) {
    free(mine);
    return st;
  }
  for (int t = 0; t < nt; t++)
    mine[t] = shards && shards[t] && data->trainer_rank >= 0 ? data->shards[t] : NULL;
  for (int i = 0; i < nr; i++)
    mine[nt + i] = rollout && rollout[i] && data->rollout_rank >= 0 ? data->rollout[i] : NULL;
  st = tp->ops->expose(tp, mine, nt + nr);
  free(mine);
  RF_TRY(tp->ctl ? rf_control_agree(tp->ctl, st) : st);
  data->caller_index = data->exposed_count;
  data->exposed_count += nt + nr;
  data->caller_exposed = 1;
  return map_peers(e);
}

/* One bucket of an exchange: a bucket of the stage's schedule or of a forward step's. */
typedef struct {
  const rf_schedule *s;
  int bucket;
} mapped_item;

/* One exchange: the buckets copied between one pair of notes. */
typedef struct {
  rf_engine *e;
  const mapped_item *items;
  int item_count;
  rf_channel channel;
  int ranks; /* ranks of the channel */
  rf_box_copy *batch;
  int count, cap;
  double launch, wait; /* REFIT_TIMELINE: host seconds in the copies' launches and waits */
  int launches;
  int64_t queued, early; /* fused: bytes listed since the last launch, and the next launch's */
} mapped_ctx;

/* Sends a note to every rank flagged in `to` and receives one from every rank flagged in
 * `from`, then waits for all of them. */
static rf_status exchange_notes(mapped_ctx *c, const char *to, const char *from, const char *what) {
  rf_transport *tp = c->e->transport;
  char *in = c->e->notes, *out = c->e->notes + c->ranks;
  long ticket = -1;
  for (int q = 0; q < c->ranks; q++) {
    if (from[q])
      RF_TRY(rf_transport_recv(tp, c->channel, q, &in[q], 1, &ticket));
    if (to[q]) {
      out[q] = 1;
      RF_TRY(rf_transport_send(tp, c->channel, q, &out[q], 1, &ticket));
    }
  }
  return ticket >= 0 ? tp->ops->wait(tp, ticket + 1, what) : RF_OK;
}

static rf_status flush(mapped_ctx *c, int wait) {
  int timed = c->e->timeline && c->count;
  double t0 = timed ? rf_now() : 0;
  if (timed) {
    rf_mem_timer_begin(&c->e->timeline_timer);
    c->launches++;
  }
  /* A one-sided transport starts the copies itself, as puts or gets (transport.h). */
  rf_transport *tp = c->e->transport;
  rf_status st = !c->count             ? RF_OK
                 : tp->ops->copy_boxes ? tp->ops->copy_boxes(tp, c->batch, c->count)
                                       : rf_copy_boxes_mapped(c->e->memory, c->batch, c->count);
  if (timed)
    rf_mem_timer_end(&c->e->timeline_timer);
  c->count = 0;
  double t1 = c->e->timeline ? rf_now() : 0;
  if (st == RF_OK && wait)
    st = tp->ops->copy_wait ? tp->ops->copy_wait(tp, "the copies to complete")
                            : rf_mem_sync(c->e->memory);
  if (timed)
    c->launch += t1 - t0;
  if (c->e->timeline && wait)
    c->wait += rf_now() - t1;
  return st;
}

static int same_region(const rf_region *a, const rf_region *b) {
  return a->base == b->base && rf_box_equal(&a->box, &b->box) && a->stride[0] == b->stride[0] &&
         a->stride[1] == b->stride[1] && a->esize == b->esize;
}

/* Whether `next` continues `last` (the same two regions, the boxes side by side along a
 * dimension), and if so extends `last` over it. The schedule cuts pieces at bucket edges, but
 * within one launch a cut only costs: a cut at an odd row leaves both halves of a JAX-order
 * transpose off the aligned 4-byte path. On an H200 that put 4.7 of Llama-3.1-8B's 16 GB on
 * the generic tile kernel in a fused ipc refit (results/h200/README.md). */
static int extend_copy(rf_box_copy *last, const rf_box_copy *next) {
  if (!same_region(&last->dst, &next->dst) || !same_region(&last->src, &next->src))
    return 0;
  rf_box *a = &last->box;
  const rf_box *b = &next->box;
  for (int d = 0; d < 2; d++)
    if (a->hi[d] == b->lo[d] && a->lo[1 - d] == b->lo[1 - d] && a->hi[1 - d] == b->hi[1 - d]) {
      a->hi[d] = b->hi[d];
      return 1;
    }
  return 0;
}

static rf_status add_copy(mapped_ctx *c, const rf_chunk *k) {
  const rf_piece *p = &c->e->plan->pieces[k->piece];
  if (rf_piece_carries_fp8(c->e->plan, p))
    return fp8_chunk(c->e, p, rf_piece_quant(c->e->plan, p), &k->box);
  rf_box_copy copy;
  RF_TRY(chunk_copy(c->e, &c->e->plan->pieces[k->piece], &k->box, &copy));
  if (rf_box_is_empty(&copy.box) || (c->count && extend_copy(&c->batch[c->count - 1], &copy)))
    return RF_OK;
  RF_TRY(rf_grow((void **)&c->batch, c->count, &c->cap, sizeof *c->batch, "mapped copies"));
  c->batch[c->count++] = copy;
  c->queued += rf_box_numel(&copy.box) * copy.src.esize;
  return RF_OK;
}

/* Fused: the first bytes of a stage are launched as soon as MAPPED_EARLY_FIRST of them are
 * listed, then each launch takes four times more, so the GPU starts copying while the host
 * still lists the thousands of pieces of a mixture-of-experts model (DeepSeek-V2-Lite: 5,291),
 * and a few launches cover any model. REFIT_MAPPED_EARLY=N (bytes) sets the first launch's
 * share, 0 lists the whole stage first (as before), to measure the difference. */
#define MAPPED_EARLY_FIRST ((int64_t)64 << 20)

static int64_t early_first(void) {
  const char *env = getenv("REFIT_MAPPED_EARLY");
  if (!env || !*env)
    return MAPPED_EARLY_FIRST;
  long long n = strtoll(env, NULL, 10);
  return n > 0 ? (int64_t)n : INT64_MAX;
}

static rf_status copy_items(mapped_ctx *c) {
  rf_mode mode = c->e->mode;
  for (int it = 0; it < c->item_count; it++) {
    const rf_schedule *s = c->items[it].s;
    const rf_bucket *bk = &s->buckets[c->items[it].bucket];
    for (int i = bk->first; i < bk->first + bk->count; i++) {
      const rf_piece *p = &c->e->plan->pieces[s->chunks[i].piece];
      if (copies_here(c->e, p))
        RF_TRY(add_copy(c, &s->chunks[i]));
      if (mode == RF_MODE_FUSED && c->queued >= c->early) {
        RF_TRY(flush(c, 0));
        c->queued = 0;
        c->early = c->early > INT64_MAX / 4 ? INT64_MAX : c->early * 4;
      }
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

/* Copies the buckets `items` (all on channel `channel`) between the two notes. */
static rf_status run_exchange(rf_engine *e, rf_channel channel, const mapped_item *items,
                              int item_count, double *times) {
  mapped_ctx c;
  memset(&c, 0, sizeof c);
  c.e = e;
  c.items = items;
  c.item_count = item_count;
  c.channel = channel;
  c.early = early_first();
  c.ranks = c.channel == RF_CHANNEL_TRAINER ? e->plan->layout->trainer_ranks
                                            : e->plan->layout->world_size;
  double start = rf_now();
  /* My destinations (feeds) and my sources (fed_by) on this channel. */
  char *flags = rf_calloc((size_t)c.ranks * 2 + 1, 1, "mapped peers");
  if (!flags)
    return RF_ERR_NOMEM;
  char *feeds = flags, *fed_by = flags + c.ranks;
  for (int it = 0; it < item_count; it++) {
    const rf_schedule *s = items[it].s;
    const rf_bucket *bk = &s->buckets[items[it].bucket];
    int src_rank = engine_src_rank(e, s->stage), dst_rank = engine_dst_rank(e, s->stage);
    for (int i = bk->first; i < bk->first + bk->count; i++) {
      const rf_piece *p = &e->plan->pieces[s->chunks[i].piece];
      int from_me = p->src == src_rank && src_rank >= 0;
      int to_me = p->dst == dst_rank && dst_rank >= 0;
      if (from_me && !to_me)
        feeds[engine_peer(e, p, 1)] = 1;
      if (to_me && !from_me)
        fed_by[engine_peer(e, p, 0)] = 1;
    }
  }
  /* Pull: sources say ready, destinations copy and say done. Push: destinations say ready,
   * sources copy and say written. The side that copies waits for the other's first note. */
  char *first_to = e->push ? fed_by : feeds, *first_from = e->push ? feeds : fed_by;
  double at[5] = {start, start, start, start, start}; /* REFIT_TIMELINE: after each step */
  rf_status st = rf_mem_sync(e->memory); /* what I offer is complete before anyone copies */
  at[1] = rf_now();
  if (st == RF_OK)
    st = exchange_notes(&c, first_to, first_from,
                        e->push ? "the destinations' ready notes" : "the sources' ready notes");
  at[2] = rf_now();
  if (st == RF_OK)
    st = copy_items(&c);
  at[3] = rf_now();
  if (st == RF_OK)
    st = exchange_notes(&c, first_from, first_to,
                        e->push ? "the sources' written notes" : "the destinations' done notes");
  at[4] = rf_now();
  free(c.batch);
  free(flags);
  times[RF_PHASE_TRANSFER] += at[4] - start;
  if (e->timeline && st == RF_OK) {
    double gpu = rf_mem_timer_take(&e->timeline_timer);
    fprintf(stderr,
            "timeline rank %d %s stage %d call %ld: start %.6f s; sync %.3f notes1 %.3f "
            "copies %.3f (launch %.3f wait %.3f gpu %.3f, %d launches) notes2 %.3f "
            "total %.3f ms\n",
            e->world_rank, rf_mode_name(e->mode), item_count ? (int)items[0].s->stage : -1,
            e->timeline_calls++, start, 1e3 * (at[1] - at[0]), 1e3 * (at[2] - at[1]),
            1e3 * (at[3] - at[2]), 1e3 * c.launch, 1e3 * c.wait, 1e3 * gpu, c.launches,
            1e3 * (at[4] - at[3]), 1e3 * (at[4] - at[0]));
  }
  return st;
}

rf_status engine_run_stage_mapped(rf_engine *e, const rf_schedule *s, double *times) {
  mapped_item *items = rf_calloc((size_t)s->bucket_count + 1, sizeof *items, "mapped buckets");
  if (!items)
    return RF_ERR_NOMEM;
  for (int b = 0; b < s->bucket_count; b++)
    items[b] = (mapped_item){s, b};
  rf_status st = run_exchange(e, engine_channel(s->stage), items, s->bucket_count, times);
  free(items);
  return st;
}

rf_status engine_run_rounds_mapped(rf_engine *e, double *times) {
  const rf_rounds *rounds = &e->rounds;
  mapped_item *items =
      rf_calloc((size_t)rounds->first[rounds->round_count] + 1, sizeof *items, "mapped buckets");
  if (!items)
    return RF_ERR_NOMEM;
  for (int i = 0; i < rounds->first[rounds->round_count]; i++) {
    const rf_round_item *it = &rounds->items[i];
    items[i] = (mapped_item){it->step < 0 ? &e->transfer : &e->forward[it->step], it->bucket};
  }
  rf_status st = RF_OK;
  for (int k = 0; k < rounds->round_count && st == RF_OK; k++) {
    /* The transfer and the forward steps share the world channel. */
    st = run_exchange(e, engine_channel(e->transfer.stage), items + rounds->first[k],
                      rounds->first[k + 1] - rounds->first[k], times);
    if (st == RF_OK) /* fp8: before a later round forwards them */
      st = engine_fp8_round_done(e, k);
    if (st == RF_OK && e->corrupt_armed && k == engine_corrupt_round(e)) {
      e->corrupt_armed = 0;
      st = engine_apply_corrupt(e);
    }
  }
  free(items);
  return st;
}
