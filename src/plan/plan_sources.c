/* Choosing sources: for one tensor, which trainer rank sends each region a destination wants.
 *
 * The rule is simple: among the trainer ranks that hold a region, the nearest to the
 * destination, ties broken by the least load so far, then by the lowest rank. Applied naively
 * it costs trainer ranks × destinations per tensor, minutes for data-parallel replicas in the
 * thousands. So the trainer ranks of a tensor are first grouped into classes that hold the
 * same box (replicas, and mesh axes the tensor is not split over), sorted so that a target
 * box finds the classes it overlaps by binary search, and each class keeps its holders in a
 * heap ordered by (load, rank) and an index by node. A destination then looks only at the
 * classes it overlaps, and in each at the holders on its own node (when the distance is known
 * to be "far" for every other node) or at the top of the heap. The choice is the same as the
 * naive scan's, piece for piece.
 *
 * Where ranks sit on nodes, load is kept per link class: bytes that leave the node (the
 * source's network adapter) and bytes that stay on it (NVLink or the node's memory). A holder
 * that feeds its own node's destinations is no busier on its adapter for it, so the bytes that
 * must cross the network spread over every holder's adapter; one load for both had the far
 * destinations avoid the holders that fed near ones, and the other nodes' adapters carried up
 * to 1.3 times their share (DeepSeek-V3 on GB200 racks, results/published.md).
 *
 * Nor does a tensor look at every trainer rank to find its holders: the layout names the ranks
 * of its pipeline stage and, for a routed expert, of its ep rank (rf_layout_trainer_candidates).
 * A model with tens of thousands of experts over as many ep ranks would otherwise cost tensors
 * × trainer ranks, billions of boxes, before choosing anything. For the same reason the index
 * is allocated once per plan, sized for the most holders a tensor can have, and each tensor
 * resets only what the one before it used. */
#include <stdlib.h>
#include <string.h>

#include "plan_internal.h"

/* Trainer ranks holding one box of the tensor. */
typedef struct {
  rf_box box;
  int first, count; /* holders[first .. first+count): trainer ranks, ascending */
  int min_rank;     /* the lowest holder: the order a naive scan would meet the class in */
  int *heap;        /* count trainer ranks, a min-heap by (load, rank) */
} source_class;

typedef struct {
  rf_box box;
  int rank;
} holder_box;

struct plan_sources {
  const rf_layout *layout;
  const rf_plan_options *options;
  int64_t *load;      /* the builder's load, by trainer rank: bytes that leave the node */
  int64_t *near_load; /* with nodes: bytes to destinations on the source's own node */
  int cap;            /* the most holders a tensor has: the trainer ranks of one stage */
  int held;           /* the current tensor's holders */
  int class_count;
  source_class *classes; /* sorted by (lo[0], lo[1]) */
  int *holders;          /* trainer ranks grouped by class */
  holder_box *sorted;    /* scratch: the holders and their boxes, to sort */
  int *by_node;          /* per class, its holders sorted by (node, rank); NULL without nodes */
  int *heap_pos;         /* [trainer rank]: index in its class's heap */
  int *class_of;         /* [trainer rank]: its class, -1 when it holds nothing */
  int64_t *reach;        /* [class]: the largest hi[0] of classes 0..k, for the search */
  int *found;            /* scratch: the classes a target overlaps */
  int *heap_store;       /* the classes' heaps, one allocation */
};

/* ---- the heap of a class: least load first, then lowest rank ------------------------------ */

static int lighter_by(const int64_t *load, int a, int b) {
  return load[a] != load[b] ? load[a] < load[b] : a < b;
}

static int lighter(const plan_sources *s, int a, int b) { return lighter_by(s->load, a, b); }

static void heap_swap(plan_sources *s, int *heap, int i, int j) {
  int t = heap[i];
  heap[i] = heap[j];
  heap[j] = t;
  s->heap_pos[heap[i]] = i;
  s->heap_pos[heap[j]] = j;
}

static void heap_down(plan_sources *s, int *heap, int n, int i) {
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && lighter(s, heap[l], heap[m]))
      m = l;
    if (r < n && lighter(s, heap[r], heap[m]))
      m = r;
    if (m == i)
      return;
    heap_swap(s, heap, i, m);
    i = m;
  }
}

/* The load of `rank` grew: move it down its class's heap. */
static void loaded(plan_sources *s, int rank) {
  int c = s->class_of[rank];
  if (c >= 0)
    heap_down(s, s->classes[c].heap, s->classes[c].count, s->heap_pos[rank]);
}

/* ---- building the classes ----------------------------------------------------------------- */

static const plan_sources *sort_ctx; /* qsort has no context argument in C11 */

static int box_order(const rf_box *a, const rf_box *b) {
  for (int d = 0; d < 2; d++) {
    if (a->lo[d] != b->lo[d])
      return a->lo[d] < b->lo[d] ? -1 : 1;
    if (a->hi[d] != b->hi[d])
      return a->hi[d] < b->hi[d] ? -1 : 1;
  }
  return 0;
}

static int by_box_then_rank(const void *pa, const void *pb) {
  const holder_box *a = pa, *b = pb;
  int c = box_order(&a->box, &b->box);
  return c ? c : (a->rank > b->rank) - (a->rank < b->rank);
}

static int by_node_then_rank(const void *pa, const void *pb) {
  int a = *(const int *)pa, b = *(const int *)pb;
  const int *node = sort_ctx->options->node_of;
  int na = node[rf_layout_trainer_world_rank(sort_ctx->layout, a)];
  int nb = node[rf_layout_trainer_world_rank(sort_ctx->layout, b)];
  if (na != nb)
    return na < nb ? -1 : 1;
  return (a > b) - (a < b);
}

static int has_nodes(const plan_sources *s) {
  return s->options && s->options->distance && s->options->node_of;
}

rf_status plan_sources_open(plan_builder *b, int64_t *load, plan_sources **out) {
  const rf_layout *lay = b->plan->layout;
  int n = lay->trainer_ranks, cap = n / lay->trainer.pp;
  plan_sources *s = rf_calloc(1, sizeof *s, "plan sources");
  if (!s)
    return RF_ERR_NOMEM;
  s->layout = lay;
  s->options = b->options;
  s->load = load;
  s->cap = cap;
  s->classes = rf_malloc((size_t)cap * sizeof *s->classes, "plan source classes");
  s->holders = rf_malloc((size_t)cap * sizeof *s->holders, "plan holders");
  s->sorted = rf_malloc((size_t)cap * sizeof *s->sorted, "plan holder boxes");
  s->heap_pos = rf_malloc((size_t)n * sizeof *s->heap_pos, "plan heap");
  s->class_of = rf_malloc((size_t)n * sizeof *s->class_of, "plan classes");
  s->found = rf_malloc((size_t)cap * sizeof *s->found, "plan overlaps");
  s->reach = rf_malloc((size_t)cap * sizeof *s->reach, "plan reach");
  s->heap_store = rf_malloc((size_t)cap * sizeof *s->heap_store, "plan heaps");
  if (has_nodes(s)) {
    s->by_node = rf_malloc((size_t)cap * sizeof *s->by_node, "plan holders by node");
    s->near_load = rf_calloc((size_t)n + 1, sizeof *s->near_load, "plan load");
  }
  if (!s->classes || !s->holders || !s->sorted || !s->heap_pos || !s->class_of || !s->found ||
      !s->reach || !s->heap_store || (has_nodes(s) && (!s->by_node || !s->near_load))) {
    plan_sources_free(s);
    return RF_ERR_NOMEM;
  }
  for (int r = 0; r < n; r++)
    s->class_of[r] = -1;
  *out = s;
  return RF_OK;
}

void plan_sources_select(plan_sources *s, int tensor) {
  const rf_layout *lay = s->layout;
  for (int i = 0; i < s->held; i++) /* the tensor before this one's */
    s->class_of[s->holders[i]] = -1;
  s->held = s->class_count = 0;
  /* Candidates ascend, as a scan by rank would meet them; the sort keeps ranks ascending
   * inside a class. */
  int n = rf_layout_trainer_candidates(lay, tensor, s->holders);
  for (int i = 0; i < n; i++) {
    holder_box h = {rf_layout_trainer_box(lay, tensor, s->holders[i]), s->holders[i]};
    if (!rf_box_is_empty(&h.box))
      s->sorted[s->held++] = h;
  }
  qsort(s->sorted, (size_t)s->held, sizeof *s->sorted, by_box_then_rank);
  for (int i = 0; i < s->held; i++) {
    const holder_box *h = &s->sorted[i];
    source_class *c = &s->classes[s->class_count - 1];
    if (s->class_count == 0 || !rf_box_equal(&c->box, &h->box)) {
      c = &s->classes[s->class_count++];
      c->box = h->box;
      c->first = i;
      c->count = 0;
      c->min_rank = h->rank; /* ranks ascend inside a class */
      c->heap = s->heap_store + i;
    }
    c->count++;
    s->holders[i] = h->rank;
    s->class_of[h->rank] = s->class_count - 1;
  }
  sort_ctx = s;
  for (int k = 0; k < s->class_count; k++) {
    source_class *c = &s->classes[k];
    for (int i = 0; i < c->count; i++) {
      c->heap[i] = s->holders[c->first + i];
      s->heap_pos[c->heap[i]] = i;
    }
    for (int i = c->count / 2 - 1; i >= 0; i--)
      heap_down(s, c->heap, c->count, i);
    if (s->by_node) {
      memcpy(s->by_node + c->first, s->holders + c->first, (size_t)c->count * sizeof(int));
      qsort(s->by_node + c->first, (size_t)c->count, sizeof(int), by_node_then_rank);
    }
  }
  sort_ctx = NULL;
  for (int k = 0; k < s->class_count; k++)
    s->reach[k] = RF_MAX(k ? s->reach[k - 1] : 0, s->classes[k].box.hi[0]);
}

void plan_sources_free(plan_sources *s) {
  if (!s)
    return;
  free(s->heap_store);
  free(s->reach);
  free(s->classes);
  free(s->holders);
  free(s->sorted);
  free(s->by_node);
  free(s->near_load);
  free(s->heap_pos);
  free(s->class_of);
  free(s->found);
  free(s);
}

/* ---- covering a target -------------------------------------------------------------------- */

static int by_min_rank(const void *pa, const void *pb) {
  const source_class *a = &sort_ctx->classes[*(const int *)pa];
  const source_class *b = &sort_ctx->classes[*(const int *)pb];
  return (a->min_rank > b->min_rank) - (a->min_rank < b->min_rank);
}

/* The classes whose box overlaps target, in the order a scan by rank meets them. Classes are
 * sorted by their first row, so the ones that start before target ends are a prefix, and the
 * running maximum of their last rows skips those that end before target starts. */
static int overlapping(plan_sources *s, const rf_box *target) {
  int lo = 0, hi = s->class_count;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (s->reach[mid] > target->lo[0])
      hi = mid;
    else
      lo = mid + 1;
  }
  int n = 0;
  rf_box x;
  for (int k = lo; k < s->class_count && s->classes[k].box.lo[0] < target->hi[0]; k++)
    if (rf_box_intersect(&s->classes[k].box, target, &x))
      s->found[n++] = k;
  sort_ctx = s;
  qsort(s->found, (size_t)n, sizeof *s->found, by_min_rank);
  sort_ctx = NULL;
  return n;
}

static int distance(const plan_sources *s, int src_world, int dst_world) {
  if (s->options && s->options->distance)
    return s->options->distance(s->options->distance_ctx, src_world, dst_world);
  return src_world == dst_world ? 0 : 1;
}

/* The nearest, then least loaded (by `load`), then lowest of `count` trainer ranks. */
static int best_of(const plan_sources *s, const int64_t *load, const int *ranks, int count,
                   int dst_world) {
  int best = -1, best_dist = 0;
  for (int i = 0; i < count; i++) {
    int r = ranks[i];
    int d = distance(s, rf_layout_trainer_world_rank(s->layout, r), dst_world);
    if (best < 0 || d < best_dist || (d == best_dist && lighter_by(load, r, best))) {
      best = r;
      best_dist = d;
    }
  }
  return best;
}

static int choose(const plan_sources *s, int k, int dst_world) {
  const source_class *c = &s->classes[k];
  if (s->by_node) {
    /* Every holder on another node is equally far, and farther than any on dst's node. */
    const int *node = s->options->node_of;
    int want = node[dst_world], lo = 0, hi = c->count;
    const int *v = s->by_node + c->first;
    while (lo < hi) {
      int mid = lo + (hi - lo) / 2;
      if (node[rf_layout_trainer_world_rank(s->layout, v[mid])] < want)
        lo = mid + 1;
      else
        hi = mid;
    }
    int end = lo;
    while (end < c->count && node[rf_layout_trainer_world_rank(s->layout, v[end])] == want)
      end++;
    return end > lo ? best_of(s, s->near_load, v + lo, end - lo, dst_world) : c->heap[0];
  }
  if (s->options && s->options->distance) /* an opaque distance: ask about every holder */
    return best_of(s, s->load, s->holders + c->first, c->count, dst_world);
  /* The default distance: only the destination's own process is nearer than the rest, and
   * trainer rank r is world rank r (layout.h). */
  if (dst_world >= 0 && dst_world < s->layout->trainer_ranks && s->class_of[dst_world] == k &&
      rf_layout_trainer_world_rank(s->layout, dst_world) == dst_world)
    return dst_world;
  return c->heap[0];
}

rf_status plan_cover_from_trainers(plan_builder *b, plan_sources *s, int tensor, rf_stage stage,
                                   int dst, int dst_world, const rf_box *target) {
  int n = overlapping(s, target);
  for (int i = 0; i < n; i++) {
    int k = s->found[i], src = choose(s, k, dst_world);
    rf_box region;
    rf_box_intersect(&s->classes[k].box, target, &region);
    RF_TRY(plan_add_piece(b, tensor, stage, src, dst, &region));
    /* Load counts what crosses a link: a local copy does not make a source busier. */
    int src_world = rf_layout_trainer_world_rank(s->layout, src);
    int64_t bytes = b->plan->pieces[b->plan->piece_count - 1].bytes;
    if (src_world == dst_world)
      continue;
    if (s->by_node && s->options->node_of[src_world] == s->options->node_of[dst_world]) {
      s->near_load[src] += bytes;
    } else {
      s->load[src] += bytes;
      loaded(s, src);
    }
  }
  return RF_OK;
}
