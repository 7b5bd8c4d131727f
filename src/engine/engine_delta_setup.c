/* Delta refits, what a run sets up (docs/architecture.md, "Delta refits"): what is refused, the
 * kept version, the stages of the wire and the buffers, reserved at each piece's capacity; and
 * their release. engine_delta.c runs the iterations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_delta_state.h"

static rf_status refuse(rf_delta_choice c, const char *what, const char *instead) {
  return rf_fail(RF_ERR_USAGE, "--delta %s: %s is not supported with delta refits yet; use %s",
                 rf_delta_choice_name(c), what, instead);
}

static rf_status check_supported(const rf_engine *e, rf_delta_choice c) {
  char what[192], instead[192];
  if (engine_delta_quant_refusal(e, what, sizeof what, instead, sizeof instead))
    return refuse(c, what, instead);
  if (e->transport->ops->copy_boxes) /* its windows cover the arenas, not an offered buffer */
    return refuse(c, "--transport rma", "--transport mpi or shm, or --delta off");
  if (e->wire_rule == RF_WIRE_STAGED)
    return refuse(c, "GPU weights staged through host memory for mpi",
                  "--transport nccl, --memory host or --delta off");
  return RF_OK;
}

rf_delta_encoding engine_delta_asked(const rf_engine *e) {
  return e->delta == RF_DELTA_CHOICE_SPARSE    ? RF_DELTA_SPARSE
         : e->delta == RF_DELTA_CHOICE_BITMASK ? RF_DELTA_BITMASK
                                               : RF_DELTA_AUTO;
}

int64_t engine_delta_capacity(const rf_engine *e, const rf_chunk *k) {
  int esize;
  rf_box box = engine_delta_box(e, k, &esize);
  return rf_delta_capacity(engine_delta_asked(e), rf_box_numel(&box), esize);
}

int64_t engine_delta_place_received(rf_engine *e, engine_delta_stage *s, int64_t off,
                                    int capacity) {
  struct engine_delta *d = e->delta_state;
  for (int j = 0; j < s->count; j++) {
    engine_delta_entry *en = &s->entries[j];
    if (en->send)
      continue;
    en->at = d->in[en->chunk] = off;
    off += align8(capacity ? engine_delta_capacity(e, &e->transfer.chunks[en->chunk])
                           : d->size[en->chunk]);
  }
  return off;
}

/* The bytes of the pieces a stage sends, at their capacities, 8-byte aligned. */
static int64_t send_capacity(const rf_engine *e, const engine_delta_stage *s) {
  int64_t bytes = 0;
  for (int j = 0; j < s->count; j++)
    if (s->entries[j].send)
      bytes += align8(engine_delta_capacity(e, &e->transfer.chunks[s->entries[j].chunk]));
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
      d->at[i] = d->in[i] = off, off += align8(engine_delta_capacity(e, &s->chunks[i]));
  d->local_end = off;
  for (int k = 0; k <= steps; k++) {
    off = engine_delta_place_received(e, &d->stages[k], off, 1);
    /* Pulling, each entry goes with where its piece lies in its sender's buffer. */
    d->table_cap = RF_MAX(d->table_cap, (int64_t)d->stages[k].count * (d->pull ? 2 : 1));
    if (k > 0 && d->pull)
      d->fw_at[k] = fw, fw += send_capacity(e, &d->stages[k]);
    else if (k > 0)
      fw = RF_MAX(fw, send_capacity(e, &d->stages[k]));
  }
  for (int i = 0; i < s->chunk_count; i++) { /* the wire of a quantized chunk it sends or holds */
    const rf_chunk *k = &s->chunks[i];
    int esize;
    rf_box wire = engine_delta_box(e, k, &esize);
    if (engine_delta_quantized(e, k) && (sends(e, k) || holds(e, k)))
      d->quant_bytes = RF_MAX(d->quant_bytes, (size_t)align8(rf_box_numel(&wire)));
  }
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
    b->delta_base = b->marks_valid = b->prev_stale = 0;
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
  d->marked = rf_calloc((size_t)s->chunk_count + 1, 1, "delta encodes from marks");
  d->table_at = rf_calloc((size_t)ranks * 2 + 1, sizeof *d->table_at, "delta size tables");
  if (!d->size || !d->at || !d->in || !d->src_at || !d->info || !d->sent || !d->marked ||
      !d->table_at)
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
  free(d->marked);
  free(d->table);
  free(d->table_at);
  free(d);
  e->delta_state = NULL;
  engine_receipts_free(e);
}
