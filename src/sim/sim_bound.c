/* The least time any plan could take for a job on a cluster (docs/architecture.md, "The lower
 * bound"): from which ranks hold each byte and which need it, the bytes that must cross each
 * link class, over its rate, with relays allowed.
 *
 * Each tensor is cut into cells by every edge of every trainer and rollout box that touches it,
 * so that each cell lies wholly inside or outside each box; a cell's bytes then share one set
 * of holders and one of needers, and the counting is per cell, never per byte. A box lists the
 * cells it covers, and each cell the boxes that cover it, so the work is the sum over boxes of
 * the cells they cover, a few thousand a tensor even for a Kimi-K2 expert and 128 rollout ranks.
 *
 * A place is where a copy engine and a link's ingress and egress belong: a GPU for weights in
 * GPU memory, a process for weights in host memory, as the link model has them (sim_net.c).
 *
 * With a delta, a byte that crosses counts at the least any encoding the choice allows makes
 * of it (sim_delta_least), and a byte a rollout rank keeps at the changed fraction, the
 * changed values it must write, at the faster of its copy and its apply rate. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "sim_internal.h"

typedef struct {
  const rf_layout *lay;
  int device, mapping, push, nodes, places, rpn, gpus;
  /* per tensor */
  rf_box *box;
  int *world, nbox, ntrainer; /* boxes[0 .. ntrainer) are the trainer's */
  int64_t *cut[2];
  int ncut[2];
  int *span;  /* [4 * box]: the cells a box covers, rows i0..i1, columns j0..j1 */
  int *first; /* [cells + 1]: entry[first[c] .. first[c + 1]) are the boxes covering cell c */
  int *entry;
  size_t cells_cap, entry_cap;
  /* stamps: a place or node is marked for the cell being counted */
  int64_t serial, *hold_place, *need_place, *hold_node, *need_node;
  /* totals */
  int64_t *in, *writes, *out, *push_writes; /* [place] */
  int64_t *node_in, *node_out;              /* [node] */
  int64_t leave, all_writes;
  int trainer_nodes;               /* nodes with a trainer rank */
  const rf_sim_delta_model *delta; /* or NULL: whole versions */
  double apply;                    /* with a delta, the memory's apply rate; else 0 */
  int *rollout_of, *trainer_of;    /* [place]: its first rollout and trainer rank, or -1 */
} bound_ctx;

static int place_of(const bound_ctx *b, int w) {
  return b->device ? w / b->rpn * b->gpus + w % b->rpn % b->gpus : w;
}
static int node_of_place(const bound_ctx *b, int p) { return b->device ? p / b->gpus : p / b->rpn; }

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* The index of v in the sorted cuts. */
static int find_cut(const int64_t *cut, int n, int64_t v) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (cut[mid] < v)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static rf_status grow(void *pp, size_t *cap, size_t need, size_t size) {
  if (need <= *cap)
    return RF_OK;
  size_t n = RF_MAX(need, 2 * *cap);
  void *p = rf_realloc(*(void **)pp, n * size, "the bound's cells");
  if (!p)
    return RF_ERR_NOMEM;
  *(void **)pp = p;
  *cap = n;
  return RF_OK;
}

static void add_box(bound_ctx *b, rf_box box, int world) {
  if (rf_box_is_empty(&box))
    return;
  b->box[b->nbox] = box;
  b->world[b->nbox++] = world;
}

/* A cell's bytes scaled by a delta's factor, rounded down: still a lower bound. */
static int64_t scaled(int64_t bytes, double factor) {
  return factor == 1.0 ? bytes : (int64_t)floor((double)bytes * factor);
}

/* One cell of `bytes` bytes covered by the boxes entry[lo .. hi): `bytes` of it cross, `kept`
 * of it are written where it is needed (both the cell's bytes without a delta). */
static void count_cell(bound_ctx *b, int lo, int hi, int64_t bytes, int64_t kept) {
  int64_t s = ++b->serial;
  int holders = 0, hold_nodes = 0, sole = -1, sole_node = -1, needers = 0, leaves = 0;
  int leaves_place = 0;
  for (int e = lo; e < hi && b->entry[e] < b->ntrainer; e++) {
    int p = place_of(b, b->world[b->entry[e]]), n = node_of_place(b, p);
    if (b->hold_place[p] != s) {
      b->hold_place[p] = s;
      holders++;
      sole = p;
    }
    if (b->hold_node[n] != s) {
      b->hold_node[n] = s;
      hold_nodes++;
      sole_node = n;
    }
  }
  if (holders == 0)
    return; /* no trainer rank holds it: nothing can deliver it, nothing to count */
  for (int e = lo; e < hi; e++) {
    if (b->entry[e] < b->ntrainer)
      continue;
    needers++;
    int p = place_of(b, b->world[b->entry[e]]), n = node_of_place(b, p);
    if (b->need_place[p] != s) {
      b->need_place[p] = s;
      if (b->hold_place[p] != s) {
        b->in[p] += bytes;
        leaves_place = 1;
      }
    }
    if (b->need_node[n] != s) {
      b->need_node[n] = s;
      if (b->hold_node[n] != s) {
        b->node_in[n] += bytes;
        leaves = 1;
      }
    }
  }
  if (holders == 1) {
    if (leaves_place)
      b->out[sole] += bytes;
    b->push_writes[sole] += (int64_t)needers * kept;
  }
  if (hold_nodes == 1 && leaves)
    b->node_out[sole_node] += bytes;
  if (leaves)
    b->leave += bytes;
}

static rf_status count_tensor(bound_ctx *b, int t, int *ranks) {
  const rf_layout *lay = b->lay;
  b->nbox = 0;
  int n = rf_layout_trainer_candidates(lay, t, ranks);
  for (int i = 0; i < n; i++)
    add_box(b, rf_layout_trainer_box(lay, t, ranks[i]),
            rf_layout_trainer_world_rank(lay, ranks[i]));
  b->ntrainer = b->nbox;
  int owner = rf_layout_rollout_owner(lay, t);
  for (int r = owner >= 0 ? owner : 0; r < (owner >= 0 ? owner + 1 : lay->rollout_ranks); r++)
    add_box(b, rf_layout_rollout_box(lay, t, r), rf_layout_rollout_world_rank(lay, r));
  if (b->nbox == b->ntrainer)
    return RF_OK;
  int64_t esize = rf_layout_rollout_esize(lay, t);
  int delta = sim_delta_on(b->delta);
  double cross = delta ? sim_delta_least(b->delta, esize) : 1.0;
  double kept = delta ? b->delta->changed : 1.0;
  for (int i = b->ntrainer; i < b->nbox; i++) {
    rf_box held = rf_layout_rollout_bytes(lay, t, &b->box[i]); /* packed 4-bit: half */
    int64_t bytes = scaled(rf_box_numel(&held) * esize, kept);
    b->writes[place_of(b, b->world[i])] += bytes;
    b->all_writes += bytes;
  }
  for (int d = 0; d < 2; d++) {
    for (int i = 0; i < b->nbox; i++) {
      b->cut[d][2 * i] = b->box[i].lo[d];
      b->cut[d][2 * i + 1] = b->box[i].hi[d];
    }
    qsort(b->cut[d], (size_t)(2 * b->nbox), sizeof(int64_t), cmp_i64);
    int k = 0;
    for (int i = 0; i < 2 * b->nbox; i++)
      if (k == 0 || b->cut[d][i] != b->cut[d][k - 1])
        b->cut[d][k++] = b->cut[d][i];
    b->ncut[d] = k;
  }
  int cols = b->ncut[1] - 1;
  size_t cells = (size_t)(b->ncut[0] - 1) * (size_t)cols, entries = 0;
  RF_TRY(grow(&b->first, &b->cells_cap, cells + 1, sizeof *b->first));
  memset(b->first, 0, (cells + 1) * sizeof *b->first);
  for (int i = 0; i < b->nbox; i++) {
    int *s = &b->span[4 * i];
    for (int d = 0; d < 2; d++) {
      s[2 * d] = find_cut(b->cut[d], b->ncut[d], b->box[i].lo[d]);
      s[2 * d + 1] = find_cut(b->cut[d], b->ncut[d], b->box[i].hi[d]);
    }
    for (int r = s[0]; r < s[1]; r++)
      for (int c = s[2]; c < s[3]; c++)
        b->first[(size_t)r * cols + c + 1]++;
    entries += (size_t)(s[1] - s[0]) * (size_t)(s[3] - s[2]);
  }
  RF_TRY(grow(&b->entry, &b->entry_cap, entries + 1, sizeof *b->entry));
  for (size_t c = 0; c < cells; c++)
    b->first[c + 1] += b->first[c];
  /* Filled in box order, so each cell lists its trainer boxes first (count_cell relies on it);
   * the fill moves first[c] on to first[c + 1], and the pass after reads the ranges back. */
  for (int i = 0; i < b->nbox; i++) {
    const int *s = &b->span[4 * i];
    for (int r = s[0]; r < s[1]; r++)
      for (int c = s[2]; c < s[3]; c++)
        b->entry[b->first[(size_t)r * cols + c]++] = i;
  }
  int lo = 0;
  for (size_t c = 0; c < cells; c++) {
    int r = (int)(c / (size_t)cols), k = (int)(c % (size_t)cols);
    int64_t bytes = (b->cut[0][r + 1] - b->cut[0][r]) * (b->cut[1][k + 1] - b->cut[1][k]) * esize;
    count_cell(b, lo, b->first[c], scaled(bytes, cross), scaled(bytes, kept));
    lo = b->first[c];
  }
  return RF_OK;
}

/* The running maximum of the terms. */
static void term(rf_sim_bound *out, double bytes, double rate, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void term(rf_sim_bound *out, double bytes, double rate, const char *fmt, ...) {
  if (!(bytes > 0) || !(rate > 0) || !(bytes / rate > out->seconds))
    return;
  out->seconds = bytes / rate;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out->binding, sizeof out->binding, fmt, ap);
  va_end(ap);
}

/* "copy 1000 + NVLink 100 + NIC 50 GB/s": the rates a term adds up, in the link model's names. */
typedef struct {
  double copy, link, nic, sum;
  char text[96];
} rates;

static rates rates_of(const bound_ctx *b, const rf_cluster *c, int copy, int link, int nic) {
  rates r = {copy ? (b->device ? c->gpu_copy : c->host_memcpy) : 0,
             link ? (b->device ? (c->nvlink > 0 ? c->nvlink : c->pcie) : c->host_mpi) : 0,
             nic ? c->nic : 0, 0, ""};
  const char *link_name = !b->device ? "host MPI" : c->nvlink > 0 ? "NVLink" : "PCIe";
  /* A delta's changed values are written by its applier, or by copies, whichever is faster. */
  const char *copy_name = copy && b->apply > r.copy ? "apply" : "copy";
  r.copy = copy ? fmax(r.copy, b->apply) : 0;
  size_t n = 0;
  if (r.copy > 0)
    n += (size_t)snprintf(r.text + n, sizeof r.text - n, "%s %g", copy_name, r.copy / 1e9);
  if (r.link > 0)
    n += (size_t)snprintf(r.text + n, sizeof r.text - n, "%s%s %g", n ? " + " : "", link_name,
                          r.link / 1e9);
  if (r.nic > 0 && n < sizeof r.text)
    n += (size_t)snprintf(r.text + n, sizeof r.text - n, "%sNIC %g", n ? " + " : "", r.nic / 1e9);
  if (n < sizeof r.text)
    snprintf(r.text + n, sizeof r.text - n, " GB/s");
  r.sum = r.copy + r.link + r.nic;
  return r;
}

/* "the GPU of rollout rank 3 (node 1 gpu 1: NVLink 100 + NIC 1 GB/s)", or for host memory
 * "rollout rank 3 (host MPI 5 GB/s)". */
static void place_name(const bound_ctx *b, int p, const char *role, int rank, const rates *r,
                       char *buf, size_t len) {
  if (b->device)
    snprintf(buf, len, "the GPU of %s rank %d (node %d gpu %d: %s)", role, rank, p / b->gpus,
             p % b->gpus, r->text);
  else
    snprintf(buf, len, "%s rank %d (%s)", role, rank, r->text);
}

/* The adapters the job's ranks on node n send and receive by: in the link model each place
 * uses its own GPU's adapter (its share of the node's by local rank without GPUs, sim_net.c),
 * so an adapter whose GPUs run no rank of the job carries none of its bytes, even relayed. A
 * rack of 72 GPUs that runs 40 rollout ranks takes its bytes in through 40 adapters. */
static int adapters_used(const bound_ctx *b, const rf_cluster *c, int n, char *mark, int *trainer) {
  int per = b->device ? b->gpus : b->rpn, used = 0;
  memset(mark, 0, (size_t)c->nics);
  *trainer = 0;
  for (int local = 0; local < per; local++) {
    int p = n * per + local;
    if (p >= b->places || (b->rollout_of[p] < 0 && b->trainer_of[p] < 0))
      continue;
    *trainer |= b->trainer_of[p] >= 0;
    int a = sim_adapter_of(local, c->nics, per);
    used += !mark[a];
    mark[a] = 1;
  }
  return used;
}

static void network_terms(const bound_ctx *b, const rf_cluster *c, rf_sim_bound *out) {
  char *mark = rf_malloc((size_t)c->nics + 1, "the bound's adapters");
  int *used = rf_malloc((size_t)b->nodes * sizeof *used, "the bound's adapters");
  if (!mark || !used) { /* the node terms are left out: a looser bound, still a bound */
    free(mark), free(used);
    return;
  }
  int held = 0; /* the adapters of the trainer nodes */
  for (int n = 0; n < b->nodes; n++) {
    int trainer;
    used[n] = adapters_used(b, c, n, mark, &trainer);
    held += trainer ? used[n] : 0;
  }
  for (int n = 0; n < b->nodes; n++)
    term(out, (double)b->node_in[n], used[n] * c->nic,
         "NIC ingress of node %d (%d adapter%s, %g GB/s)", n, used[n], used[n] == 1 ? "" : "s",
         used[n] * c->nic / 1e9);
  for (int n = 0; n < b->nodes; n++)
    term(out, (double)b->node_out[n], used[n] * c->nic,
         "NIC egress of node %d (%d adapter%s, %g GB/s)", n, used[n], used[n] == 1 ? "" : "s",
         used[n] * c->nic / 1e9);
  /* What must leave the nodes that hold it leaves by their adapters, however it is split. */
  term(out, (double)b->leave, held * c->nic,
       "NIC egress of the %d trainer nodes together (%d adapters, %g GB/s)", b->trainer_nodes, held,
       held * c->nic / 1e9);
  free(mark);
  free(used);
}

static void terms(const bound_ctx *b, const rf_cluster *c, rf_sim_bound *out) {
  char name[RF_SIM_TEXT_MAX];
  int multi = b->nodes > 1;
  if (multi)
    network_terms(b, c, out);
  /* Over a mapping transport a piece is a copy by one side's engine, with the link between
   * two GPUs beside it; over messages a byte lands by a copy on the place (a local one, or
   * between two processes of one GPU), over the link, or over the network. */
  rates in =
      b->mapping ? rates_of(b, c, 0, b->device, 0) : rates_of(b, c, 0, 1, b->device && multi);
  rates wr = b->mapping ? rates_of(b, c, 1, 0, 0) : rates_of(b, c, 1, 1, b->device && multi);
  for (int p = 0; p < b->places; p++) {
    if (b->rollout_of[p] >= 0) {
      place_name(b, p, "rollout", b->rollout_of[p], &in, name, sizeof name);
      term(out, (double)b->in[p], in.sum, "ingress of %s", name);
      if (!b->push) {
        place_name(b, p, "rollout", b->rollout_of[p], &wr, name, sizeof name);
        term(out, (double)b->writes[p], wr.sum, "writes of %s", name);
      }
    }
    if (b->trainer_of[p] >= 0) {
      place_name(b, p, "trainer", b->trainer_of[p], &in, name, sizeof name);
      term(out, (double)b->out[p], in.sum, "egress of %s", name);
      if (b->push) {
        place_name(b, p, "trainer", b->trainer_of[p], &wr, name, sizeof name);
        term(out, (double)b->push_writes[p], wr.sum, "copies pushed by %s", name);
      }
    }
  }
  if (b->push) {
    int used = 0;
    for (int p = 0; p < b->places; p++)
      used += b->rollout_of[p] >= 0 || b->trainer_of[p] >= 0;
    term(out, (double)b->all_writes, used * wr.sum,
         "the copy engines of all %d %s together (%g GB/s)", used, b->device ? "GPUs" : "processes",
         used * wr.sum / 1e9);
  }
}

static void bound_free(bound_ctx *b) {
  free(b->box);
  free(b->world);
  free(b->cut[0]);
  free(b->cut[1]);
  free(b->span);
  free(b->first);
  free(b->entry);
  free(b->hold_place);
  free(b->need_place);
  free(b->hold_node);
  free(b->need_node);
  free(b->in);
  free(b->writes);
  free(b->out);
  free(b->push_writes);
  free(b->node_in);
  free(b->node_out);
  free(b->rollout_of);
  free(b->trainer_of);
}

rf_status rf_sim_lower_bound(const rf_layout *lay, const rf_cluster *c, int device, int mapping,
                             rf_sim_bound *out) {
  return rf_sim_lower_bound_delta(lay, c, device, mapping, NULL, out);
}

rf_status rf_sim_lower_bound_delta(const rf_layout *lay, const rf_cluster *c, int device,
                                   int mapping, const rf_sim_delta_model *delta,
                                   rf_sim_bound *out) {
  *out = (rf_sim_bound){0.0, "none: nothing must move"};
  sim_net net;
  RF_TRY(sim_net_init(&net, c, lay->world_size, device, mapping));
  /* Whether a mapping transport's sources copy depends on the layouts alone (engine.h). */
  rf_plan probe;
  memset(&probe, 0, sizeof probe);
  probe.layout = lay;
  bound_ctx b = {.lay = lay,
                 .device = device,
                 .mapping = mapping,
                 .push = mapping && rf_engine_pushes(&probe),
                 .nodes = net.nodes,
                 .rpn = c->ranks_per_node,
                 .gpus = c->gpus,
                 .delta = delta,
                 .apply = sim_delta_on(delta) ? sim_apply_rate(c, device) : 0.0};
  b.places = device ? net.nodes * c->gpus : lay->world_size;
  size_t boxes = (size_t)lay->trainer_ranks + (size_t)lay->rollout_ranks + 1;
  size_t places = (size_t)b.places + 1, nodes = (size_t)b.nodes + 1;
  b.box = rf_calloc(boxes, sizeof *b.box, "the bound's boxes");
  b.world = rf_calloc(boxes, sizeof *b.world, "the bound's boxes");
  b.cut[0] = rf_calloc(2 * boxes, sizeof *b.cut[0], "the bound's cuts");
  b.cut[1] = rf_calloc(2 * boxes, sizeof *b.cut[1], "the bound's cuts");
  b.span = rf_calloc(4 * boxes, sizeof *b.span, "the bound's boxes");
  int *ranks = rf_calloc(boxes, sizeof *ranks, "the bound's ranks");
  int64_t **per_place[] = {&b.hold_place, &b.need_place, &b.in, &b.writes, &b.out, &b.push_writes};
  int64_t **per_node[] = {&b.hold_node, &b.need_node, &b.node_in, &b.node_out};
  int ok = b.box && b.world && b.cut[0] && b.cut[1] && b.span && ranks;
  for (size_t i = 0; i < RF_ARRAY_LEN(per_place); i++)
    ok &= (*per_place[i] = rf_calloc(places, sizeof(int64_t), "the bound's places")) != NULL;
  for (size_t i = 0; i < RF_ARRAY_LEN(per_node); i++)
    ok &= (*per_node[i] = rf_calloc(nodes, sizeof(int64_t), "the bound's nodes")) != NULL;
  ok &= (b.rollout_of = rf_calloc(places, sizeof(int), "the bound's places")) != NULL;
  ok &= (b.trainer_of = rf_calloc(places, sizeof(int), "the bound's places")) != NULL;
  rf_status st = ok ? RF_OK : RF_ERR_NOMEM;
  if (st == RF_OK) {
    for (int p = 0; p < b.places; p++)
      b.rollout_of[p] = b.trainer_of[p] = -1;
    /* Descending, so that each place keeps its lowest rank's number. */
    for (int w = lay->world_size - 1; w >= 0; w--) {
      int t, r;
      rf_layout_roles(lay, w, &t, &r);
      if (t >= 0)
        b.trainer_of[place_of(&b, w)] = t;
      if (r >= 0)
        b.rollout_of[place_of(&b, w)] = r;
    }
  }
  for (int n = 0; st == RF_OK && n < b.nodes; n++) {
    int t = -1, r;
    for (int w = n * b.rpn; t < 0 && w < RF_MIN((n + 1) * b.rpn, lay->world_size); w++)
      rf_layout_roles(lay, w, &t, &r);
    b.trainer_nodes += t >= 0;
  }
  for (int t = 0; st == RF_OK && t < lay->model->tensor_count; t++)
    st = count_tensor(&b, t, ranks);
  if (st == RF_OK)
    terms(&b, c, out);
  free(ranks);
  bound_free(&b);
  return st;
}
