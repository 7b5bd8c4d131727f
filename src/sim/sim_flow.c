/* Max-min fair flows by progressive filling. Every active flow's rate rises together until a
 * link is full; the flows crossing it are frozen at its fair share and the rest rise on. That
 * is the allocation TCP-like and NCCL-like transports tend to on shared links, and it needs no
 * knowledge of packet-level behaviour. Rates are set again whenever a flow ends, so a unit's
 * time is exact for fluid flows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim_internal.h"

/* Workspace sized once for the job's resources, so a unit touching a few links costs work in
 * the few, not in the thousands a large cluster has. */
struct sim_solver {
  int resources;
  int *local;   /* [resources]: the unit's index of a resource, or -1 */
  int *global;  /* [resources]: back, for the unit's first `used` */
  double *left; /* capacity not yet given out in this round */
  int *count;   /* unfrozen active flows crossing it */
  int *first;   /* [resources + 1]: its flows are through[first[j] .. first[j + 1]) */
  int *through;
  double *remaining, *rate; /* [flows] */
  char *frozen, *done;
  int *act; /* [flows]: the flows still moving */
  int cap_flows;
};

rf_status sim_solver_new(int resources, sim_solver **out) {
  sim_solver *s = rf_calloc(1, sizeof *s, "the flow solver");
  *out = NULL;
  if (!s)
    return RF_ERR_NOMEM;
  size_t n = (size_t)resources + 1;
  s->resources = resources;
  s->local = rf_malloc(n * sizeof *s->local, "the flow solver");
  s->global = rf_malloc(n * sizeof *s->global, "the flow solver");
  s->left = rf_malloc(n * sizeof *s->left, "the flow solver");
  s->count = rf_malloc(n * sizeof *s->count, "the flow solver");
  s->first = rf_malloc((n + 1) * sizeof *s->first, "the flow solver");
  if (!s->local || !s->global || !s->left || !s->count || !s->first) {
    sim_solver_free(s);
    return RF_ERR_NOMEM;
  }
  for (int r = 0; r < resources; r++)
    s->local[r] = -1;
  *out = s;
  return RF_OK;
}

void sim_solver_free(sim_solver *s) {
  if (!s)
    return;
  free(s->local);
  free(s->global);
  free(s->left);
  free(s->count);
  free(s->first);
  free(s->through);
  free(s->remaining);
  free(s->rate);
  free(s->frozen);
  free(s->done);
  free(s->act);
  free(s);
}

static rf_status reserve(sim_solver *s, int flows) {
  if (flows <= s->cap_flows)
    return RF_OK;
  int cap = RF_MAX(flows, 2 * s->cap_flows);
  free(s->through), free(s->remaining), free(s->rate), free(s->frozen), free(s->done);
  free(s->act);
  s->through = rf_malloc((size_t)cap * SIM_ROUTE_MAX * sizeof *s->through, "flows");
  s->remaining = rf_malloc((size_t)cap * sizeof *s->remaining, "flows");
  s->rate = rf_malloc((size_t)cap * sizeof *s->rate, "flows");
  s->frozen = rf_malloc((size_t)cap, "flows");
  s->done = rf_malloc((size_t)cap, "flows");
  s->act = rf_malloc((size_t)cap * sizeof *s->act, "flows");
  s->cap_flows = s->through && s->remaining && s->rate && s->frozen && s->done && s->act ? cap : 0;
  return s->cap_flows ? RF_OK : RF_ERR_NOMEM;
}

/* Numbers the unit's resources and lists the flows through each. */
static int index_links(sim_solver *s, const sim_flow *f, int n) {
  int used = 0;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < f[i].nres; k++)
      if (s->local[f[i].res[k]] < 0) {
        s->global[used] = f[i].res[k];
        s->count[used] = 0;
        s->local[f[i].res[k]] = used++;
      }
  for (int i = 0; i < n; i++)
    for (int k = 0; k < f[i].nres; k++)
      s->count[s->local[f[i].res[k]]]++;
  s->first[0] = 0;
  for (int j = 0; j < used; j++)
    s->first[j + 1] = s->first[j] + s->count[j];
  for (int j = 0; j < used; j++)
    s->count[j] = s->first[j];
  for (int i = 0; i < n; i++)
    for (int k = 0; k < f[i].nres; k++)
      s->through[s->count[s->local[f[i].res[k]]]++] = i;
  return used;
}

/* A link rate the filling cannot share out: a cluster's rates are checked when it loads and
 * the fit keeps them in range, so this is a bug's mark, refused rather than looped on. */
static rf_status bad_share(double share) {
  return rf_fail(RF_ERR_INTERNAL,
                 "the flow model met a link share of %g bytes/s; every link rate must be finite "
                 "and positive (at most %g bytes/s)",
                 share, RF_SIM_RATE_MAX);
}

/* One round of progressive filling over the active flows act[0 .. nact) (a done flow stays
 * frozen): every unfrozen flow's rate rises to the smallest fair share of the links it crosses,
 * link by link from the tightest. Each pass
 * freezes every flow through one link, so at most `used` passes run; a share that is not a
 * finite positive rate (an infinite or a zero link) is an error, not a flow left unset. */
static rf_status fill(sim_solver *s, const sim_flow *f, const int *act, int nact, int used,
                      const double *cap) {
  int unfrozen = nact;
  for (int j = 0; j < used; j++) {
    s->left[j] = cap[s->global[j]];
    s->count[j] = 0;
  }
  for (int a = 0; a < nact; a++) {
    int i = act[a];
    s->frozen[i] = 0;
    for (int k = 0; k < f[i].nres; k++)
      s->count[s->local[f[i].res[k]]]++;
  }
  for (int pass = 0; unfrozen > 0 && pass < used; pass++) {
    int tight = -1;
    double share = INFINITY;
    for (int j = 0; j < used; j++)
      if (s->count[j] > 0 && (tight < 0 || s->left[j] / s->count[j] < share)) {
        share = s->left[j] / s->count[j];
        tight = j;
      }
    if (tight < 0 || !(share > 0 && share <= RF_SIM_RATE_MAX))
      return bad_share(share);
    for (int t = s->first[tight]; t < s->first[tight + 1]; t++) {
      int i = s->through[t];
      if (s->frozen[i])
        continue;
      s->rate[i] = share;
      s->frozen[i] = 1;
      unfrozen--;
      for (int k = 0; k < f[i].nres; k++) {
        int j = s->local[f[i].res[k]];
        s->left[j] -= share;
        s->count[j]--;
      }
    }
  }
  return unfrozen == 0 ? RF_OK : bad_share(NAN);
}

/* Runs the flows f[0 .. n) from s->remaining, `now` seconds in, until `until`, until no flow
 * of group `target` (>= 0) moves any more, or until every flow has ended; s->remaining and
 * s->done say where each stands, *now when it stopped. */
static rf_status run(sim_solver *s, const sim_flow *f, int n, const double *cap, const int *group,
                     int target, double until, double *now) {
  int used = index_links(s, f, n);
  /* The flows still moving, compacted as they end, so that a unit of thousands of pairs whose
   * flows end one after the other costs the flows left in each round, not all of them. */
  int *act = s->act, nact = 0, moving = 0;
  for (int i = 0; i < n; i++) {
    s->done[i] = !(s->remaining[i] > 0) || f[i].nres == 0;
    s->frozen[i] = 1;
    if (!s->done[i]) {
      act[nact++] = i;
      moving += group && group[i] == target;
    }
  }
  /* Every round ends at least the flow that ends first, so n rounds at most. */
  rf_status st = RF_OK;
  for (int round = 0; st == RF_OK && nact > 0 && round < n && *now < until; round++) {
    if (target >= 0 && moving == 0)
      break;
    st = fill(s, f, act, nact, used, cap);
    double step = INFINITY;
    int first = -1;
    for (int a = 0; st == RF_OK && a < nact; a++) {
      int i = act[a];
      if (first < 0 || s->remaining[i] / s->rate[i] < step) {
        step = s->remaining[i] / s->rate[i];
        first = i;
      }
    }
    if (st != RF_OK)
      break;
    if (*now + step > until) { /* stop part way: every flow moves on at its rate */
      for (int a = 0; a < nact; a++)
        s->remaining[act[a]] -= s->rate[act[a]] * (until - *now);
      *now = until;
      break;
    }
    *now += step;
    /* Flows that end within a rounding error of the first end together, so equal flows give
     * one event and exact times; the first ends whatever its rounding. */
    int kept = 0;
    for (int a = 0; a < nact; a++) {
      int i = act[a];
      s->remaining[i] -= s->rate[i] * step;
      if (i == first || s->remaining[i] <= 1e-9 * f[i].bytes) {
        s->done[i] = 1;
        s->frozen[i] = 1;
        moving -= group && group[i] == target;
      } else {
        act[kept++] = i;
      }
    }
    nact = kept;
  }
  for (int j = 0; j < used; j++)
    s->local[s->global[j]] = -1;
  return st;
}

rf_status sim_solve(sim_solver *s, const sim_flow *f, int n, const double *cap, double *end) {
  *end = 0.0;
  RF_TRY(reserve(s, n));
  for (int i = 0; i < n; i++)
    s->remaining[i] = f[i].bytes;
  return run(s, f, n, cap, NULL, -1, INFINITY, end);
}

/* ---- flows that outlive a unit ------------------------------------------------------------ */

void sim_fluid_free(sim_fluid *fl) {
  free(fl->flows);
  free(fl->group);
  memset(fl, 0, sizeof *fl);
}

rf_status sim_fluid_add(sim_fluid *fl, const sim_flow *f, int n, int group) {
  if (fl->count + n > fl->cap) {
    int cap = RF_MAX(fl->count + n, 2 * fl->cap);
    sim_flow *flows = rf_realloc(fl->flows, (size_t)cap * sizeof *flows, "flows in flight");
    if (!flows)
      return RF_ERR_NOMEM;
    fl->flows = flows;
    int *g = rf_realloc(fl->group, (size_t)cap * sizeof *g, "flows in flight");
    if (!g)
      return RF_ERR_NOMEM;
    fl->group = g;
    fl->cap = cap;
  }
  for (int i = 0; i < n; i++)
    if (f[i].bytes > 0 && f[i].nres > 0) {
      fl->flows[fl->count] = f[i];
      fl->group[fl->count++] = group;
    }
  return RF_OK;
}

rf_status sim_fluid_run(sim_fluid *fl, sim_solver *s, const double *cap, double until, int target) {
  int n = fl->count;
  RF_TRY(reserve(s, n));
  for (int i = 0; i < n; i++)
    s->remaining[i] = fl->flows[i].bytes;
  double now = fl->now;
  rf_status st = run(s, fl->flows, n, cap, fl->group, target, until, &now);
  /* What is left moves on from here: the ended flows drop out. */
  int kept = 0;
  for (int i = 0; i < n; i++)
    if (!s->done[i]) {
      fl->flows[kept] = fl->flows[i];
      fl->flows[kept].bytes = s->remaining[i];
      fl->group[kept++] = fl->group[i];
    }
  fl->count = kept;
  /* Run to a time, the flows stop short of it only by ending: the clock is there either way. */
  fl->now = target < 0 && until < INFINITY ? RF_MAX(now, until) : now;
  return st;
}
