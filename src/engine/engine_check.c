/* The checks that run after the last iteration: every element a rollout rank holds against
 * the generator or the checkpoint, the layout-invariant checksums, the per-shard digests, and
 * the fault that --inject corrupt plants (inside the last iteration, once the byte has arrived
 * and before it is forwarded). Element checks and checksums run where the data lives (CPU or
 * GPU); comparisons with a checkpoint and digests read device data back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "engine_internal.h"
#include "io/io.h"
#include "verify/verify.h"

/* A host-readable view of `bytes` at ptr: the pointer itself for host memory, else a copy
 * that the caller releases with release_view (on failure there is nothing to release). */
static rf_status host_view(const rf_engine *e, const void *ptr, size_t bytes, void **out) {
  if (e->memory != RF_MEM_DEVICE) {
    *out = (void *)ptr;
    return RF_OK;
  }
  *out = rf_malloc(bytes, "a host copy of device data");
  if (!*out)
    return RF_ERR_NOMEM;
  rf_status st = rf_mem_transfer(*out, RF_MEM_HOST, ptr, RF_MEM_DEVICE, bytes);
  if (st != RF_OK) {
    free(*out);
    *out = NULL;
  }
  return st;
}

static void release_view(const rf_engine *e, void *view) {
  if (e->memory == RF_MEM_DEVICE)
    free(view);
}

/* The rollout region of tensor t rebased onto a host view of the rows of its fused tensor that
 * it occupies: only those, since a stacked expert tensor has hundreds of members and copying
 * all of it back for each of them would move the tensor hundreds of times. */
static rf_status rollout_host_region(rf_engine *e, int t, rf_region *r, rf_box *held, void **view) {
  const rf_layout *lay = e->plan->layout;
  const rf_rollout_slot *slot = &lay->slots[t];
  const rf_rollout_tensor *rt = &lay->rollout_tensors[slot->local];
  *r = engine_rollout_region(e, t, held);
  *view = NULL;
  if (rf_box_is_empty(held))
    return RF_OK;
  int64_t row_bytes = rt->shape[1] * rf_dtype_size(rt->dtype);
  char *from = (char *)e->data->rollout[slot->local] + slot->row * row_bytes;
  RF_TRY(host_view(e, from, (size_t)((held->hi[0] - held->lo[0]) * row_bytes), view));
  r->base = (char *)*view + (r->base - from);
  return RF_OK;
}

static uint32_t bits_at(const rf_region *r, int64_t i, int64_t j) {
  const char *p = rf_region_at(r, i, j);
  if (r->esize == 4) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
  }
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}

/* Compares a held box with the same box read from the checkpoint. */
static rf_status check_against_file(rf_engine *e, rf_checkpoint *ckpt, int t, rf_mismatch *first,
                                    int max, int *n, int64_t *wrong) {
  const rf_tensor *tensor = &e->plan->layout->model->tensors[t];
  rf_region got;
  rf_box held;
  void *view = NULL;
  RF_TRY(rollout_host_region(e, t, &got, &held, &view));
  size_t bytes = (size_t)(rf_box_numel(&held) * engine_esize(e, t));
  void *buf = rf_malloc(bytes, "the checkpoint's copy of a shard");
  rf_status st = buf ? RF_OK : RF_ERR_NOMEM;
  rf_region want = rf_region_row_major(buf, &held, engine_esize(e, t));
  if (st == RF_OK && !rf_box_is_empty(&held))
    st = rf_checkpoint_read(ckpt, t, &held, &want);
  for (int64_t i = held.lo[0]; i < held.hi[0] && st == RF_OK; i++)
    for (int64_t j = held.lo[1]; j < held.hi[1]; j++) {
      uint32_t expected = bits_at(&want, i, j), value = bits_at(&got, i, j);
      if (expected == value)
        continue;
      if (*n < max)
        first[(*n)++] = (rf_mismatch){t, i * tensor->shape[1] + j, expected, value};
      (*wrong)++;
    }
  free(buf);
  release_view(e, view);
  return st;
}

void rf_engine_set_progress(rf_engine *e, void (*fn)(void *ctx), void *ctx) {
  e->progress = fn;
  e->progress_ctx = ctx;
}

static void progress(const rf_engine *e) {
  if (e->progress)
    e->progress(e->progress_ctx);
}

int64_t rf_engine_check(rf_engine *e, rf_checkpoint *checkpoint) {
  if (e->rollout_rank < 0)
    return 0;
  const rf_model *m = e->plan->layout->model;
  int64_t wrong = 0;
  int reported = 0;
  for (int t = 0; t < m->tensor_count; t++) {
    rf_box held;
    rf_region r = engine_rollout_region(e, t, &held);
    progress(e);
    if (rf_box_is_empty(&held))
      continue;
    if (rf_layout_fp8(e->plan->layout, t)) { /* bytes and scales against the quantized reference */
      int64_t w = engine_fp8_check(e, checkpoint, t, &reported);
      if (w < 0)
        return -1;
      wrong += w;
      continue;
    }
    rf_mismatch first[4];
    int n = 0;
    int64_t w = 0;
    rf_status st = checkpoint
                       ? check_against_file(e, checkpoint, t, first, 4, &n, &w)
                       : rf_check_region_on(e->memory, &r, &held, &m->tensors[t], e->seed,
                                            &e->moved, m->tensors[t].dtype, first, 4, &n, &w);
    if (st != RF_OK)
      return -1;
    wrong += w;
    /* A forwarded tensor names the rank it came from: a wrong element that arrived by
     * forwarding was already wrong there, or went wrong on that link. */
    char via[64] = "";
    int from = n ? rf_plan_forwarded_from(e->plan, t, e->rollout_rank) : -1;
    if (from >= 0)
      snprintf(via, sizeof via, " (received from rollout rank %d via forwarding)", from);
    for (int i = 0; i < n && reported < 4; i++, reported++)
      RF_ERROR("verify: %s on rollout rank %d: element %lld (row %lld, col %lld) is 0x%x, "
               "expected 0x%x%s",
               m->tensors[t].name, e->rollout_rank, (long long)first[i].index,
               (long long)(first[i].index / m->tensors[t].shape[1]),
               (long long)(first[i].index % m->tensors[t].shape[1]), first[i].got,
               first[i].expected, via);
  }
  return wrong;
}

/* A box replicated on several ranks of a group is counted by the lowest of them only. */
static int lowest_trainer_holder(const rf_layout *lay, int t, int rank, const rf_box *box) {
  for (int r = 0; r < rank; r++) {
    rf_box other = rf_layout_trainer_box(lay, t, r);
    if (rf_box_equal(&other, box))
      return 0;
  }
  return 1;
}

static int lowest_rollout_holder(const rf_layout *lay, int t, int rank, const rf_box *box) {
  for (int r = rank - rank % lay->rollout.tp; r < rank; r++) {
    rf_box other = rf_layout_rollout_box(lay, t, r);
    if (rf_box_equal(&other, box))
      return 0;
  }
  return 1;
}

rf_status rf_engine_checksums(rf_engine *e, uint64_t *trainer, uint64_t *rollout) {
  const rf_layout *lay = e->plan->layout;
  const rf_model *m = lay->model;
  for (int t = 0; t < m->tensor_count; t++) {
    uint64_t sum = 0;
    progress(e);
    /* A trainer's quantized weight (a quantized checkpoint) is summed as its rollout is, bytes
     * and scales (rf_format_checksum), each cut block's scale once
     * (engine_fp8_trainer_checksum). */
    if (e->trainer_rank >= 0) {
      rf_box box = rf_layout_trainer_box(lay, t, e->trainer_rank);
      rf_region r = engine_shard_region(e, t);
      if (lowest_trainer_holder(lay, t, e->trainer_rank, &box)) {
        if (rf_tensor_quantized(&m->tensors[t]))
          RF_TRY(engine_fp8_trainer_checksum(e, t, &sum));
        else
          RF_TRY(rf_checksum_region_on(e->memory, &r, &box, &m->tensors[t], m->tensors[t].dtype,
                                       &sum));
        trainer[t] += sum;
      }
    }
    if (e->rollout_rank >= 0) {
      rf_box held;
      rf_region r = engine_rollout_region(e, t, &held);
      int replica = e->rollout_rank / lay->rollout.tp;
      if (!rf_box_is_empty(&held) && lowest_rollout_holder(lay, t, e->rollout_rank, &held)) {
        if (rf_layout_fp8(lay, t))
          RF_TRY(engine_fp8_checksum(e, t, &sum));
        else
          RF_TRY(rf_checksum_region_on(e->memory, &r, &held, &m->tensors[t], m->tensors[t].dtype,
                                       &sum));
        /* An expert under rollout ep lives on one rank and serves every replica. */
        int shared = rf_layout_rollout_shared(lay, t);
        for (int p = shared ? 0 : replica; p < (shared ? lay->rollout.dp : replica + 1); p++)
          rollout[(size_t)p * m->tensor_count + t] += sum;
      }
    }
  }
  return RF_OK;
}

/* xxh3 of a region's box, row by row in row-major order of the box. */
static rf_status digest_region(const rf_region *r, const rf_box *box, uint64_t *out) {
  XXH3_state_t *h = XXH3_createState();
  if (!h)
    return rf_fail(RF_ERR_NOMEM, "out of memory for an xxh3 state (shard digests)");
  XXH3_64bits_reset(h);
  int64_t width = box->hi[1] - box->lo[1];
  for (int64_t i = box->lo[0]; i < box->hi[0] && width > 0; i++) {
    if (r->stride[1] == 1) {
      XXH3_64bits_update(h, rf_region_at(r, i, box->lo[1]), (size_t)(width * r->esize));
      continue;
    }
    for (int64_t j = box->lo[1]; j < box->hi[1]; j++)
      XXH3_64bits_update(h, rf_region_at(r, i, j), (size_t)r->esize);
  }
  *out = XXH3_64bits_digest(h);
  XXH3_freeState(h);
  return RF_OK;
}

rf_status rf_engine_digests(rf_engine *e, rf_shard_digest **out, int *count) {
  const rf_layout *lay = e->plan->layout;
  int nt = lay->model->tensor_count, n = 0;
  *out = NULL;
  *count = 0;
  rf_shard_digest *d = rf_calloc((size_t)nt * 2 + 1, sizeof *d, "shard digests");
  if (!d)
    return RF_ERR_NOMEM;
  rf_status st = RF_OK;
  for (int t = 0; t < nt && st == RF_OK; t++) {
    void *view = NULL;
    if (e->trainer_rank >= 0) {
      rf_box box = rf_layout_trainer_box(lay, t, e->trainer_rank);
      size_t bytes = (size_t)(rf_box_numel(&box) * engine_esize(e, t));
      /* As stored: the bytes of the shard buffer, in its own (HF or JAX) order. */
      st = host_view(e, e->data->shards[t], bytes, &view);
      if (st == RF_OK) {
        d[n++] = (rf_shard_digest){e->world_rank, t, 0, XXH3_64bits(view, bytes)};
        release_view(e, view);
      }
    }
    rf_box held;
    rf_region r;
    if (st == RF_OK && e->rollout_rank >= 0) {
      st = rollout_host_region(e, t, &r, &held, &view);
      if (st == RF_OK && !rf_box_is_empty(&held)) {
        d[n].rank = e->world_rank, d[n].tensor = t, d[n].role = 1;
        st = digest_region(&r, &r.box, &d[n++].xxh3); /* the bytes of held (packed: fewer) */
      }
      if (view)
        release_view(e, view);
    }
  }
  if (st != RF_OK) {
    free(d);
    return st;
  }
  *out = d;
  *count = n;
  return RF_OK;
}

void rf_engine_corrupt(rf_engine *e) { e->corrupt_armed = 1; }

/* The rank that flips a byte: where the plan forwards, a rank that forwards the first tensor
 * (so that the flip travels on), else the last rollout rank. */
static int corrupting_rank(const rf_plan *plan) {
  const rf_layout *lay = plan->layout;
  if (plan->forward_depth > 0 && plan->root[0] >= 0)
    return plan->root[0] * lay->rollout.tp + lay->rollout.tp - 1;
  return lay->rollout_ranks - 1;
}

int engine_corrupt_rank(const rf_engine *e) { return corrupting_rank(e->plan); }

rf_status engine_apply_corrupt(rf_engine *e) {
  if (e->rollout_rank < 0 || e->rollout_rank != corrupting_rank(e->plan))
    return RF_OK;
  rf_box held;
  rf_region r = engine_rollout_region(e, 0, &held);
  if (rf_box_is_empty(&held))
    return RF_OK;
  char *at = rf_region_at(&r, held.lo[0], held.lo[1]), byte;
  RF_TRY(rf_mem_transfer(&byte, RF_MEM_HOST, at, e->memory, 1));
  byte ^= 0x5a;
  RF_TRY(rf_mem_transfer(at, e->memory, &byte, RF_MEM_HOST, 1));
  RF_WARN("inject corrupt: flipped bits of %s element (%lld, %lld) on rollout rank %d%s",
          e->plan->layout->model->tensors[0].name, (long long)held.lo[0], (long long)held.lo[1],
          e->rollout_rank, e->plan->forward_depth > 0 ? ", before forwarding it" : "");
  return RF_OK;
}

int engine_corrupt_round(const rf_engine *e) {
  const rf_plan *plan = e->plan;
  int last = e->rounds.round_count - 1, rank = corrupting_rank(plan);
  if (plan->forward_depth == 0)
    return last;
  /* The transfer bucket (transfer bucket k is in round k) that brings the flipped element. */
  rf_box held = rf_layout_rollout_box(plan->layout, 0, rank);
  for (int i = 0; i < e->transfer.chunk_count; i++) {
    const rf_chunk *k = &e->transfer.chunks[i];
    const rf_piece *p = &plan->pieces[k->piece];
    if (p->tensor == 0 && p->dst == rank && k->box.lo[0] <= held.lo[0] &&
        held.lo[0] < k->box.hi[0] && k->box.lo[1] <= held.lo[1] && held.lo[1] < k->box.hi[1])
      return k->bucket;
  }
  return last;
}
