/* The order in which the schedule fills its buckets: the pieces of a stage grouped by rank
 * pair (source, destination), and the pairs taken in turn, the one furthest behind first.
 *
 * Why: filled in the plan's storage order, a bucket holds the pieces of the first tensors
 * only, and on a mixture of experts those are one ep rank's experts, so two senders of the
 * whole trainer work while the others wait for the bucket to end (Kimi-K2 on 48 nodes: 28,804
 * buckets, the busiest adapter 0.4 % busy). Taken pair by pair, by the share of its bytes each
 * pair has placed, every pair moves a little in every bucket, and a bucket closes only once no
 * pair has room left in it: every sender and receiver of the stage works in every bucket.
 * Within a bucket the schedule puts the chunks back in plan order (schedule.c), so runs that
 * continue each other in memory still join into one message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan_internal.h"

/* A stable counting sort of `n` piece indices by key[], keys in [0, range). */
static rf_status sort_by(const int *in, int *out, int n, const int *key, int range) {
  int *count = rf_calloc((size_t)range + 1, sizeof *count, "schedule pair counts");
  if (!count)
    return RF_ERR_NOMEM;
  for (int i = 0; i < n; i++)
    count[key[i] + 1]++;
  for (int k = 0; k < range; k++)
    count[k + 1] += count[k];
  for (int i = 0; i < n; i++)
    out[count[key[i]]++] = in[i];
  free(count);
  return RF_OK;
}

/* The pieces [first, end) of `stage`, grouped by (source, destination) world rank, each group
 * in plan order: a radix sort, destination then source, linear in the pieces. */
static rf_status group_pieces(const rf_plan *plan, rf_stage stage, int first, int end, int **out,
                              int *count) {
  int n = 0;
  for (int i = first; i < end; i++)
    n += plan->pieces[i].stage == (int32_t)stage;
  *count = n;
  int world = plan->layout->world_size;
  int *a = rf_malloc((size_t)n * sizeof *a + 1, "the schedule's order");
  int *b = rf_malloc((size_t)n * sizeof *b + 1, "the schedule's order");
  int *key = rf_malloc((size_t)n * sizeof *key + 1, "the schedule's order");
  rf_status st = a && b && key ? RF_OK : RF_ERR_NOMEM;
  if (st == RF_OK) {
    n = 0;
    for (int i = first; i < end; i++)
      if (plan->pieces[i].stage == (int32_t)stage)
        a[n++] = i;
    for (int i = 0; i < n; i++)
      key[i] = rf_piece_dst_world(plan, &plan->pieces[a[i]]);
    st = sort_by(a, b, n, key, world);
  }
  if (st == RF_OK) {
    for (int i = 0; i < n; i++)
      key[i] = rf_piece_src_world(plan, &plan->pieces[b[i]]);
    st = sort_by(b, a, n, key, world);
  }
  free(b);
  free(key);
  if (st != RF_OK) {
    free(a);
    return st;
  }
  *out = a;
  return RF_OK;
}

/* Whether heap entry x is further behind than y: the smaller share of its bytes placed, then
 * the lower pair (so that every rank orders them alike: each computes the same shares from the
 * same integers). The share sits in the entry itself, so that a turn's sift touches only the
 * heap's own array, which matters at tens of thousands of pairs and millions of turns. */
static int behind(const sched_turn *x, const sched_turn *y) {
  return x->share != y->share ? x->share < y->share : x->pair < y->pair;
}

static void sift_down(sched_pairs *q, int i) {
  sched_turn *h = q->heap, moving = h[i];
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = l;
    if (l >= q->heap_count)
      break;
    if (r < q->heap_count && behind(&h[r], &h[l]))
      m = r;
    if (!behind(&h[m], &moving))
      break;
    h[i] = h[m];
    i = m;
  }
  h[i] = moving;
}

static void sift_up(sched_pairs *q, int i) {
  sched_turn *h = q->heap, moving = h[i];
  while (i > 0) {
    int parent = (i - 1) / 2;
    if (!behind(&moving, &h[parent]))
      break;
    h[i] = h[parent];
    i = parent;
  }
  h[i] = moving;
}

rf_status sched_pairs_open(sched_pairs *q, const rf_plan *plan, rf_stage stage, int first,
                           int end) {
  memset(q, 0, sizeof *q);
  int n;
  RF_TRY(group_pieces(plan, stage, first, end, &q->order, &n));
  int pairs = 0;
  for (int i = 0; i < n; i++)
    pairs += i == 0 ||
             rf_piece_src_world(plan, &plan->pieces[q->order[i]]) !=
                 rf_piece_src_world(plan, &plan->pieces[q->order[i - 1]]) ||
             rf_piece_dst_world(plan, &plan->pieces[q->order[i]]) !=
                 rf_piece_dst_world(plan, &plan->pieces[q->order[i - 1]]);
  q->pairs = rf_calloc((size_t)pairs + 1, sizeof *q->pairs, "schedule pairs");
  q->heap = rf_malloc(((size_t)pairs + 1) * sizeof *q->heap, "schedule pairs");
  q->blocked = rf_malloc(((size_t)pairs + 1) * sizeof *q->blocked, "schedule pairs");
  if (!q->pairs || !q->heap || !q->blocked) {
    sched_pairs_close(q);
    return RF_ERR_NOMEM;
  }
  for (int i = 0, p = -1; i < n; i++) {
    const rf_piece *piece = &plan->pieces[q->order[i]];
    if (p < 0 || rf_piece_src_world(plan, piece) != q->pairs[p].src ||
        rf_piece_dst_world(plan, piece) != q->pairs[p].dst) {
      sched_pair *np = &q->pairs[++p];
      np->index = p;
      np->src = rf_piece_src_world(plan, piece);
      np->dst = rf_piece_dst_world(plan, piece);
      np->next = np->end = i;
      np->quota = INT64_MAX; /* unpaced until the schedule says otherwise */
    }
    q->pairs[p].end++;
    q->pairs[p].total += piece->bytes;
  }
  q->pair_count = pairs;
  for (int p = 0; p < pairs; p++) {
    q->pairs[p].total = RF_MAX(q->pairs[p].total, 1); /* shares of empty pieces */
    q->heap[q->heap_count++] = (sched_turn){0.0, p};  /* already in order: all at share 0 */
  }
  return RF_OK;
}

void sched_pairs_close(sched_pairs *q) {
  free(q->order);
  free(q->pairs);
  free(q->heap);
  free(q->blocked);
  memset(q, 0, sizeof *q);
}

sched_pair *sched_pairs_top(sched_pairs *q) {
  return q->heap_count ? &q->pairs[q->heap[0].pair] : NULL;
}

/* The top pair after it placed bytes: it leaves when it has no pieces left, waits for the next
 * bucket when it is blocked, else takes its place by its new share. */
void sched_pairs_update(sched_pairs *q, int blocked) {
  sched_pair *top = &q->pairs[q->heap[0].pair];
  int done = top->next == top->end;
  if (done || blocked) {
    if (!done)
      q->blocked[q->blocked_count++] = top->index;
    q->heap[0] = q->heap[--q->heap_count];
  } else {
    q->heap[0].share = (double)top->placed / (double)top->total;
  }
  if (q->heap_count)
    sift_down(q, 0);
}

void sched_pairs_unblock(sched_pairs *q) {
  for (int i = 0; i < q->blocked_count; i++) {
    const sched_pair *p = &q->pairs[q->blocked[i]];
    q->heap[q->heap_count++] = (sched_turn){(double)p->placed / (double)p->total, p->index};
    sift_up(q, q->heap_count - 1);
  }
  q->blocked_count = 0;
}
