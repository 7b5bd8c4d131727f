/* Rounds: the transfer stage and fanout's forward steps run together, so that forwarding
 * overlaps receiving (docs/architecture.md, "Plans"). Round k posts transfer bucket k and every
 * forward bucket whose bytes had all reached its sender by the end of round k - 1, then
 * completes them; a forward bucket's round is one more than the latest round of the buckets
 * (transfer, or an earlier forward step) that deliver any row it sends.
 *
 * Dependencies are found per row: a forward chunk waits for every chunk that delivers any
 * element of its rows to its sender, whichever columns that chunk covers. That is exact for
 * the usual row-split chunks and early enough otherwise (a trainer split by columns delivers a
 * row in parts that the schedule places in neighbouring buckets).
 *
 * The forward schedules need no reordering for this: the transfer and every forward step list
 * their pieces tensor by tensor in the layout's storage order, so forward bucket j forwards
 * about what the first transfer buckets delivered, and the rounds come out close to "bucket j
 * of step s in round j + s + 1". */
#include <stdlib.h>
#include <string.h>

#include "plan.h"

/* A chunk's rows of one tensor on one rollout rank, and the round they arrive in (arrivals)
 * or the bucket that sends them on (forward chunks). */
typedef struct {
  int32_t tensor, rank;
  int64_t lo, hi;
  int32_t round;
} rows;

static int by_tensor_rank(const void *pa, const void *pb) {
  const rows *a = pa, *b = pb;
  if (a->tensor != b->tensor)
    return a->tensor < b->tensor ? -1 : 1;
  if (a->rank != b->rank)
    return a->rank < b->rank ? -1 : 1;
  return (a->lo > b->lo) - (a->lo < b->lo);
}

/* Appends the rows every chunk of `s` delivers to its destination, in round round_of[bucket]
 * (NULL: the bucket's own number). */
static rf_status add_arrivals(const rf_plan *plan, const rf_schedule *s, const int *round_of,
                              rows **list, int *count, int *cap) {
  for (int i = 0; i < s->chunk_count; i++) {
    const rf_chunk *k = &s->chunks[i];
    const rf_piece *p = &plan->pieces[k->piece];
    if (p->stage == RF_STAGE_RESHAPE)
      continue; /* lands on a trainer rank, never forwarded */
    RF_TRY(rf_grow((void **)list, *count, cap, sizeof **list, "round arrivals"));
    int b = k->bucket - s->first_bucket;
    (*list)[(*count)++] =
        (rows){p->tensor, p->dst, k->box.lo[0], k->box.hi[0], round_of ? round_of[b] : b};
  }
  return RF_OK;
}

/* One forward step: need[b] becomes the latest round in which a row that bucket b sends
 * arrives at its sender (-1 for a bucket without chunks). `arrivals` is sorted. */
static rf_status step_needs(const rf_plan *plan, const rf_schedule *s, int step,
                            const rows *arrivals, int narrivals, int *need) {
  int n = s->chunk_count;
  rows *sends = rf_malloc((size_t)n * sizeof *sends + 1, "a forward step's rows");
  if (!sends)
    return RF_ERR_NOMEM;
  for (int i = 0; i < n; i++) {
    const rf_chunk *k = &s->chunks[i];
    const rf_piece *p = &plan->pieces[k->piece];
    sends[i] = (rows){p->tensor, p->src, k->box.lo[0], k->box.hi[0], k->bucket - s->first_bucket};
  }
  qsort(sends, (size_t)n, sizeof *sends, by_tensor_rank);
  for (int b = 0; b < s->bucket_count; b++)
    need[b] = -1;
  rf_status st = RF_OK;
  int32_t *latest = NULL; /* per row of the group's extent: the latest round it arrives in */
  int64_t latest_cap = 0;
  int a = 0; /* the first arrival not before the current group */
  for (int g = 0; g < n && st == RF_OK;) {
    int end = g;
    int64_t lo = sends[g].lo, hi = sends[g].hi;
    while (end < n && sends[end].tensor == sends[g].tensor && sends[end].rank == sends[g].rank) {
      lo = RF_MIN(lo, sends[end].lo), hi = RF_MAX(hi, sends[end].hi);
      end++;
    }
    if (hi - lo > latest_cap) {
      free(latest);
      latest_cap = hi - lo;
      latest = rf_malloc((size_t)latest_cap * sizeof *latest, "rows of a forwarded tensor");
      if (!latest) {
        st = RF_ERR_NOMEM;
        break;
      }
    }
    for (int64_t r = 0; r < hi - lo; r++)
      latest[r] = -1;
    rows key = {sends[g].tensor, sends[g].rank, INT64_MIN, 0, 0};
    while (a < narrivals && by_tensor_rank(&arrivals[a], &key) < 0)
      a++;
    for (int i = a;
         i < narrivals && arrivals[i].tensor == key.tensor && arrivals[i].rank == key.rank; i++)
      for (int64_t r = RF_MAX(lo, arrivals[i].lo); r < RF_MIN(hi, arrivals[i].hi); r++)
        latest[r - lo] = RF_MAX(latest[r - lo], arrivals[i].round);
    for (int i = g; i < end && st == RF_OK; i++)
      for (int64_t r = sends[i].lo; r < sends[i].hi; r++) {
        if (latest[r - lo] < 0) {
          st = rf_fail(RF_ERR_INTERNAL,
                       "rounds: forward step %d sends row %lld of %s from rollout rank %d, which "
                       "nothing delivers there; the plan is inconsistent",
                       step, (long long)r, plan->layout->model->tensors[key.tensor].name, key.rank);
          break;
        }
        need[sends[i].round] = RF_MAX(need[sends[i].round], latest[r - lo]);
      }
    g = end;
  }
  free(latest);
  free(sends);
  return st;
}

/* Lays the items out round by round: each round's stage bucket first, then its forward
 * buckets by step and bucket. */
static rf_status lay_out(rf_rounds *r, const rf_schedule *stage, const rf_schedule *forward) {
  int items = stage->bucket_count + r->step_first[r->steps];
  r->first = rf_calloc((size_t)r->round_count + 1, sizeof *r->first, "round starts");
  r->items = rf_malloc((size_t)items * sizeof *r->items + 1, "round items");
  int *at = rf_calloc((size_t)r->round_count + 1, sizeof *at, "round cursors");
  if (!r->first || !r->items || !at) {
    free(at);
    return RF_ERR_NOMEM;
  }
  for (int b = 0; b < stage->bucket_count; b++)
    r->first[b + 1]++;
  for (int i = 0; i < r->step_first[r->steps]; i++)
    r->first[r->forward_round[i] + 1]++;
  for (int k = 0; k < r->round_count; k++) {
    r->first[k + 1] += r->first[k];
    at[k] = r->first[k]; /* round k's next free slot */
  }
  for (int b = 0; b < stage->bucket_count; b++)
    r->items[at[b]++] = (rf_round_item){-1, b};
  for (int s = 0; s < r->steps; s++)
    for (int b = 0; b < forward[s].bucket_count; b++) {
      int k = r->forward_round[r->step_first[s] + b];
      r->items[at[k]++] = (rf_round_item){s, b};
    }
  free(at);
  return RF_OK;
}

rf_status rf_rounds_build(const rf_plan *plan, const rf_schedule *stage, const rf_schedule *forward,
                          int steps, rf_rounds *out) {
  memset(out, 0, sizeof *out);
  out->steps = steps;
  out->step_first = rf_calloc((size_t)steps + 1, sizeof *out->step_first, "round steps");
  if (!out->step_first)
    return RF_ERR_NOMEM;
  for (int s = 0; s < steps; s++)
    out->step_first[s + 1] = out->step_first[s] + forward[s].bucket_count;
  out->forward_round =
      rf_malloc((size_t)out->step_first[steps] * sizeof *out->forward_round + 1, "forward rounds");
  rows *arrivals = NULL;
  int narrivals = 0, cap = 0;
  rf_status st = out->forward_round ? RF_OK : RF_ERR_NOMEM;
  if (st == RF_OK)
    st = add_arrivals(plan, stage, NULL, &arrivals, &narrivals, &cap);
  out->round_count = stage->bucket_count;
  for (int s = 0; s < steps && st == RF_OK; s++) {
    int *round = out->forward_round + out->step_first[s];
    qsort(arrivals, (size_t)narrivals, sizeof *arrivals, by_tensor_rank);
    st = step_needs(plan, &forward[s], s, arrivals, narrivals, round);
    for (int b = 0; b < forward[s].bucket_count && st == RF_OK; b++) {
      round[b]++; /* one round after its last row arrives (a bucket without chunks: round 0) */
      out->round_count = RF_MAX(out->round_count, round[b] + 1);
    }
    if (st == RF_OK)
      st = add_arrivals(plan, &forward[s], round, &arrivals, &narrivals, &cap);
  }
  free(arrivals);
  if (st == RF_OK)
    st = lay_out(out, stage, forward);
  if (st != RF_OK)
    rf_rounds_free(out);
  return st;
}

void rf_rounds_free(rf_rounds *r) {
  free(r->first);
  free(r->items);
  free(r->step_first);
  free(r->forward_round);
  memset(r, 0, sizeof *r);
}
