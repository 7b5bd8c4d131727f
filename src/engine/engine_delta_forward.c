/* The delta wire's stages (docs/architecture.md, "Delta refits"): which encoded pieces each
 * rank sends and receives in the transfer and in each forward step of fanout and hierarchical,
 * the messages of a stage (its sizes, then its pieces), the packing of the pieces a replica
 * forwards, and over a mapping transport the trainer's offered buffer and the rollout's copies
 * out of it. engine_delta.c encodes, places, checks and applies them.
 *
 * The encoded pieces are the transfer schedule's chunks, each encoded once by its trainer rank.
 * Where the plan forwards, the trainer sends a replicated tensor only to its root replica's
 * ranks (in hierarchical, to the root of each domain), and a forward piece's box is all that
 * its ranks hold of the tensor, the same in every replica. So a replica forwards exactly the
 * encoded pieces of the transfer chunks that went to its tree's root: every rollout rank holds,
 * of each tensor, the pieces of the chunks sent to its origin (engine_delta_origin), and in a
 * forward step sends every piece it holds of the forward piece's tensor, still encoded, to the
 * piece's destination, which checks them as the root checks what the trainer sent.
 *
 * A stage lists its entries bucket by bucket, peer by peer, receives before sends, then in the
 * stage's order: the schedule's for the transfer, and for a forward step the plan's forward
 * pieces in order, each with its tensor's chunks in schedule order. Both ends of a pair derive
 * the same list from the plan, which is what lets one message of sizes and one of pieces per
 * peer and bucket carry it. A forward step is one bucket: the delta's inbox holds every piece of
 * the iteration anyway, so there is no staging for buckets to bound. */
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

int engine_delta_origin(const rf_plan *plan, int tensor, int rollout_rank) {
  int R = plan->layout->rollout.tp, root = -1;
  if (plan->kind == RF_PLAN_FANOUT)
    root = plan->root[tensor];
  else if (plan->kind == RF_PLAN_HIERARCHICAL)
    root = plan->domain_root[(size_t)tensor * (size_t)plan->domains +
                             (size_t)plan->replica_domain[rollout_rank / R]];
  return root < 0 ? rollout_rank : root * R + rollout_rank % R;
}

void engine_delta_forwarders(const rf_plan *plan, int rollout_rank, int *from) {
  for (int t = 0; t < plan->layout->model->tensor_count; t++)
    from[t] = -1;
  for (int i = plan->forward_first[0]; i < plan->piece_count; i++)
    if (plan->pieces[i].dst == rollout_rank)
      from[plan->pieces[i].tensor] = plan->pieces[i].src;
}

static int by_bucket_peer_direction(const void *pa, const void *pb) {
  const engine_delta_entry *a = pa, *b = pb;
  if (a->bucket != b->bucket)
    return a->bucket < b->bucket ? -1 : 1;
  if (a->peer != b->peer)
    return a->peer < b->peer ? -1 : 1;
  if (a->send != b->send)
    return a->send < b->send ? -1 : 1;
  return (a->seq > b->seq) - (a->seq < b->seq);
}

static rf_status add(engine_delta_stage *s, int *cap, int chunk, int peer, int bucket, int send) {
  RF_TRY(rf_grow((void **)&s->entries, s->count, cap, sizeof *s->entries, "delta wire entries"));
  s->entries[s->count] = (engine_delta_entry){chunk, peer, bucket, send, s->count, 0};
  s->count++;
  return RF_OK;
}

/* The transfer: every chunk this rank sends to or receives from another rank. */
static rf_status transfer_entries(const rf_engine *e, engine_delta_stage *s, int *cap) {
  const rf_schedule *sc = &e->transfer;
  for (int i = 0; i < sc->chunk_count; i++) {
    const rf_chunk *k = &sc->chunks[i];
    const rf_piece *p = &e->plan->pieces[k->piece];
    int sends = p->src == e->trainer_rank, receives = p->dst == e->rollout_rank;
    if (sends && receives)
      continue; /* local: encoded straight into the inbox */
    if (sends)
      RF_TRY(add(s, cap, i, engine_peer(e, p, 1), k->bucket - sc->first_bucket, 1));
    if (receives)
      RF_TRY(add(s, cap, i, engine_peer(e, p, 0), k->bucket - sc->first_bucket, 0));
  }
  s->bucket_count = sc->bucket_count;
  return RF_OK;
}

/* Forward step `step`: for each forward piece from or to this rank, the chunks it holds of the
 * piece's tensor (held[first[t] .. first[t + 1]), in schedule order). */
static rf_status forward_entries(const rf_engine *e, int step, const int *held, const int *first,
                                 engine_delta_stage *s, int *cap) {
  const rf_plan *plan = e->plan;
  for (int f = plan->forward_first[step]; f < plan->forward_first[step + 1]; f++) {
    const rf_piece *p = &plan->pieces[f];
    int send = p->src == e->rollout_rank;
    if (!send && p->dst != e->rollout_rank)
      continue;
    for (int j = first[p->tensor]; j < first[p->tensor + 1]; j++)
      RF_TRY(add(s, cap, held[j], engine_peer(e, p, send), 0, send));
  }
  s->bucket_count = 1;
  return RF_OK;
}

rf_status engine_delta_stages_build(const rf_engine *e, const int *origin,
                                    engine_delta_stage *stages) {
  const rf_plan *plan = e->plan;
  const rf_schedule *sc = &e->transfer;
  int tensors = plan->layout->model->tensor_count;
  /* The chunks this rank holds, by tensor then schedule order (a counting sort). */
  int *first = rf_calloc((size_t)tensors + 2, sizeof *first, "delta held chunks");
  int *held = rf_malloc((size_t)sc->chunk_count * sizeof *held + 1, "delta held chunks");
  rf_status st = first && held ? RF_OK : RF_ERR_NOMEM;
  for (int pass = 0; pass < 2 && st == RF_OK; pass++) {
    for (int i = 0; i < sc->chunk_count; i++) {
      const rf_piece *p = &plan->pieces[sc->chunks[i].piece];
      if (e->rollout_rank < 0 || p->dst != origin[p->tensor])
        continue;
      if (pass == 0)
        first[p->tensor + 2]++;
      else
        held[first[p->tensor + 1]++] = i;
    }
    for (int t = 0; pass == 0 && t < tensors; t++)
      first[t + 2] += first[t + 1];
  }
  for (int s = 0; s <= plan->forward_depth && st == RF_OK; s++) {
    int cap = 0;
    st = s == 0 ? transfer_entries(e, &stages[0], &cap)
                : forward_entries(e, s - 1, held, first, &stages[s], &cap);
    if (st == RF_OK && stages[s].count > 1)
      qsort(stages[s].entries, (size_t)stages[s].count, sizeof *stages[s].entries,
            by_bucket_peer_direction);
  }
  free(first);
  free(held);
  return st;
}

rf_status engine_delta_pack(rf_mem_kind kind, engine_delta_stage *s, const char *inbox,
                            const int64_t *in, const int64_t *size, char *to, int64_t *bytes) {
  rf_box_copy *copies = rf_malloc((size_t)s->count * sizeof *copies + 1, "delta forward copies");
  if (!copies)
    return RF_ERR_NOMEM;
  int n = 0;
  int64_t off = 0;
  *bytes = 0;
  for (int j = 0; j < s->count; j++) {
    engine_delta_entry *en = &s->entries[j];
    if (!en->send)
      continue;
    int64_t b = size[en->chunk];
    rf_box run = {{0, 0}, {1, b}};
    copies[n++] = (rf_box_copy){rf_region_row_major(to + off, &run, 1),
                                rf_region_row_major((char *)inbox + in[en->chunk], &run, 1), run};
    en->at = off;
    off += (b + 7) / 8 * 8;
    *bytes += b;
  }
  rf_status st = n ? rf_copy_boxes(kind, copies, n) : RF_OK;
  free(copies);
  return st;
}

rf_status engine_delta_exchange_sizes(rf_engine *e, const engine_delta_stage *st,
                                      engine_delta_tables *t, int64_t *size, long *ticket) {
  rf_transport *tp = e->transport;
  int ranks = e->plan->layout->world_size;
  int64_t *at = t->at;         /* sent to peer q from at[q], received from at[ranks + q] */
  int per = t->src_at ? 2 : 1; /* entries a piece takes: its size, and where it lies */
  memset(at, 0, (size_t)(2 * ranks + 1) * sizeof *at);
  for (int j = 0; j < st->count; j++)
    at[(1 - st->entries[j].send) * ranks + st->entries[j].peer + 1] += per;
  for (int q = 1; q <= 2 * ranks; q++)
    at[q] += at[q - 1];
  for (int j = 0; j < st->count; j++) /* each peer's in order; at[q] ends where q + 1 starts */
    if (st->entries[j].send) {
      t->host[at[st->entries[j].peer]++] = size[st->entries[j].chunk];
      if (per == 2)
        t->host[at[st->entries[j].peer]++] = st->entries[j].at;
    }
  memmove(at + 1, at, (size_t)ranks * sizeof *at);
  at[0] = 0;
  size_t bytes = (size_t)st->count * (size_t)per * sizeof(int64_t);
  if (bytes)
    RF_TRY(rf_mem_transfer(t->wire, t->kind, t->host, RF_MEM_HOST, bytes));
  RF_TRY(tp->ops->group_start(tp));
  for (int q = 0; q < ranks; q++) {
    int64_t sent = at[q + 1] - at[q], got = at[ranks + q + 1] - at[ranks + q];
    if (got)
      RF_TRY(rf_transport_recv(tp, RF_CHANNEL_WORLD, q, t->wire + at[ranks + q],
                               (size_t)got * sizeof(int64_t), ticket));
    if (sent)
      RF_TRY(rf_transport_send(tp, RF_CHANNEL_WORLD, q, t->wire + at[q],
                               (size_t)sent * sizeof(int64_t), ticket));
  }
  RF_TRY(tp->ops->group_end(tp));
  RF_TRY(tp->ops->wait(tp, *ticket + 1, "the delta sizes"));
  if (bytes)
    RF_TRY(rf_mem_transfer(t->host, RF_MEM_HOST, t->wire, t->kind, bytes));
  for (int j = 0; j < st->count; j++)
    if (!st->entries[j].send) {
      size[st->entries[j].chunk] = t->host[at[ranks + st->entries[j].peer]++];
      if (per == 2)
        t->src_at[st->entries[j].chunk] = t->host[at[ranks + st->entries[j].peer]++];
    }
  return RF_OK;
}

rf_status engine_delta_pull(rf_engine *e, const engine_delta_stage *st, const int64_t *size,
                            const int64_t *src_at, char *inbox, int index) {
  rf_mem_kind kind = e->memory;
  for (int j = 0; j < st->count;) {
    const engine_delta_entry *en = &st->entries[j];
    int end = j + 1;
    while (end < st->count && st->entries[end].bucket == en->bucket &&
           st->entries[end].peer == en->peer && st->entries[end].send == en->send)
      end++;
    if (!en->send) {
      const engine_delta_entry *last = &st->entries[end - 1];
      int64_t bytes = last->at + (size[last->chunk] + 7) / 8 * 8 - en->at;
      void *peer_out;
      RF_TRY(e->transport->ops->peer_buffer(e->transport, en->peer, index, &peer_out));
      RF_TRY(rf_mem_transfer(inbox + en->at, kind, (char *)peer_out + src_at[en->chunk], kind,
                             (size_t)bytes));
    }
    j = end;
  }
  return rf_mem_sync(kind);
}

rf_status engine_delta_post(rf_engine *e, const engine_delta_stage *st, const int64_t *size,
                            char *from, char *inbox, long *ticket) {
  rf_transport *tp = e->transport;
  for (int j = 0; j < st->count;) {
    const engine_delta_entry *en = &st->entries[j];
    if (j == 0 || st->entries[j - 1].bucket != en->bucket)
      RF_TRY(tp->ops->group_start(tp));
    int end = j + 1;
    while (end < st->count && st->entries[end].bucket == en->bucket &&
           st->entries[end].peer == en->peer && st->entries[end].send == en->send)
      end++;
    const engine_delta_entry *last = &st->entries[end - 1];
    int64_t to = last->at + (size[last->chunk] + 7) / 8 * 8;
    RF_TRY(tp->ops->post(tp, en->send, RF_CHANNEL_WORLD, en->peer,
                         (en->send ? from : inbox) + en->at, (size_t)(to - en->at), ticket));
    e->messages += en->send;
    if (end == st->count || st->entries[end].bucket != en->bucket)
      RF_TRY(tp->ops->group_end(tp));
    j = end;
  }
  return tp->ops->wait(tp, *ticket + 1, "the delta pieces");
}

rf_status engine_delta_offer(rf_engine *e, rf_mem_kind kind, size_t bytes, rf_offered *o,
                             const char *what, char **out) {
  rf_buffers *b = e->data;
  rf_transport *tp = e->transport;
  if (!b->exposed)
    return rf_fail(RF_ERR_INTERNAL, "delta over %s: the arenas were never offered", tp->ops->name);
  rf_status st = RF_OK;
  if (bytes > o->bytes) {
    if (o->ptr)
      rf_mem_free(kind, o->ptr, o->bytes);
    o->ptr = NULL, o->bytes = 0;
    st = rf_mem_alloc(kind, bytes, what, &o->ptr);
    if (st == RF_OK)
      o->bytes = bytes;
  }
  /* Every rank takes part in the offer, a failed one offering nothing. */
  void *mine = st == RF_OK ? o->ptr : NULL;
  rf_status offered = tp->ops->expose(tp, &mine, 1);
  RF_TRY(tp->ctl ? rf_control_agree(tp->ctl, rf_status_worse(st, offered))
                 : rf_status_worse(st, offered));
  o->index = b->exposed_count++;
  *out = o->ptr;
  return RF_OK;
}
