/* Cluster files (configs/clusters/README.md is the schema): read strictly, because a typo in a
 * rate changes every prediction silently. Every key must be known, every number positive where
 * a rate or a size is meant, and each problem is one line naming the file and the key. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim.h"

#define SCHEMA "see configs/clusters/README.md"
#define GB 1e9
#define GIB 1073741824.0

typedef struct {
  const char *path;
  const char *at; /* the object's key path, "" at the top: "node.nics" */
} where;

/* Keys other than these (and "comment", allowed everywhere) are typos. */
static rf_status known_keys(const where *w, json_t *obj, const char *const *keys, size_t n) {
  const char *key;
  json_t *value;
  json_object_foreach(obj, key, value) {
    int ok = strcmp(key, "comment") == 0;
    for (size_t i = 0; i < n && !ok; i++)
      ok = strcmp(key, keys[i]) == 0;
    if (!ok)
      return rf_fail(RF_ERR_CONFIG, "cluster %s: unknown key '%s%s%s'; " SCHEMA, w->path, w->at,
                     *w->at ? "." : "", key);
  }
  return RF_OK;
}

static rf_status object(const where *w, json_t *parent, const char *key, int required,
                        json_t **out) {
  *out = json_object_get(parent, key);
  if ((*out && json_is_object(*out)) || (!*out && !required))
    return RF_OK;
  return rf_fail(RF_ERR_CONFIG, "cluster %s: key '%s%s%s' is missing or not an object; " SCHEMA,
                 w->path, w->at, *w->at ? "." : "", key);
}

/* A number, scaled to refit's units, from `min` to `max` of them. `zero_ok`: 0 is allowed too
 * (no NVLink, no latency). The limits keep the scaled value finite and the flow model's times
 * with it: a rate of 1e300 GB/s is infinite in bytes a second, and an infinite link cannot be
 * shared out, nor can a link of 1e-320 bytes a second carry a byte in finite time. */
static rf_status number(const where *w, json_t *obj, const char *key, int required, int zero_ok,
                        double scale, double min, double max, double *out) {
  json_t *v = obj ? json_object_get(obj, key) : NULL;
  if (!v && !required)
    return RF_OK;
  double x = v && json_is_number(v) ? json_number_value(v) : -1.0;
  if (!(x > 0 || (zero_ok && x == 0 && v && json_is_number(v))))
    return rf_fail(RF_ERR_CONFIG, "cluster %s: key '%s%s%s' is missing or not a %s number; " SCHEMA,
                   w->path, w->at, *w->at ? "." : "", key, zero_ok ? "non-negative" : "positive");
  if (x > 0 && !(x * scale >= min && x * scale <= max))
    return rf_fail(
        RF_ERR_CONFIG,
        "cluster %s: key '%s%s%s' is %g, outside the range %g to %g refit accepts; " SCHEMA,
        w->path, w->at, *w->at ? "." : "", key, x, min / scale, max / scale);
  *out = x * scale;
  return RF_OK;
}

static rf_status integer(const where *w, json_t *obj, const char *key, int required, int lo, int hi,
                         int *out) {
  json_t *v = obj ? json_object_get(obj, key) : NULL;
  if (!v && !required)
    return RF_OK;
  if (v && json_is_integer(v) && json_integer_value(v) >= lo && json_integer_value(v) <= hi) {
    *out = (int)json_integer_value(v);
    return RF_OK;
  }
  return rf_fail(RF_ERR_CONFIG,
                 "cluster %s: key '%s%s%s' is missing or not an integer from %d to %d; " SCHEMA,
                 w->path, w->at, *w->at ? "." : "", key, lo, hi);
}

static rf_status text(const where *w, json_t *obj, const char *key, int required, char *out,
                      size_t len) {
  json_t *v = obj ? json_object_get(obj, key) : NULL;
  if (!v && !required)
    return RF_OK;
  if (v && json_is_string(v) && strlen(json_string_value(v)) < len) {
    snprintf(out, len, "%s", json_string_value(v));
    return RF_OK;
  }
  return rf_fail(RF_ERR_CONFIG,
                 "cluster %s: key '%s%s%s' is missing or not a string of fewer than %zu "
                 "characters; " SCHEMA,
                 w->path, w->at, *w->at ? "." : "", key, len);
}

/* Optional, as the quantize rates: files written before delta refits were simulated have none,
 * and both passes are memory-bound like a copy (sim.h, RF_SIM_DELTA_RATES). */
static rf_status delta_rates(const where *w, json_t *obj, double copy, double *encode,
                             double *apply) {
  *encode = *apply = copy;
  RF_TRY(number(w, obj, "delta_encode_GBps", 0, 0, GB, RF_SIM_RATE_MIN, RF_SIM_RATE_MAX, encode));
  return number(w, obj, "delta_apply_GBps", 0, 0, GB, RF_SIM_RATE_MIN, RF_SIM_RATE_MAX, apply);
}

static rf_status read_gpus(const char *path, json_t *node, rf_cluster *c) {
  where w = {path, "node.gpu"};
  json_t *gpu, *nics;
  RF_TRY(object(&(where){path, "node"}, node, "gpu", c->gpus > 0, &gpu));
  if (gpu) {
    static const char *const keys[] = {"name",          "memory_GiB",        "copy_GBps",
                                       "quantize_GBps", "delta_encode_GBps", "delta_apply_GBps"};
    RF_TRY(known_keys(&w, gpu, keys, RF_ARRAY_LEN(keys)));
    RF_TRY(text(&w, gpu, "name", 1, c->gpu_name, sizeof c->gpu_name));
    RF_TRY(number(&w, gpu, "memory_GiB", 1, 0, GIB, 0, RF_SIM_MEMORY_MAX, &c->gpu_memory));
    RF_TRY(number(&w, gpu, "copy_GBps", 1, 0, GB, RF_SIM_RATE_MIN, RF_SIM_RATE_MAX, &c->gpu_copy));
    /* Optional: files written before quantized rollouts were simulated have none, and the
     * quantizer runs at about a copy's rate (sim.h). */
    c->gpu_quantize = RF_SIM_GPU_QUANTIZE_OF_COPY * c->gpu_copy;
    RF_TRY(number(&w, gpu, "quantize_GBps", 0, 0, GB, RF_SIM_RATE_MIN, RF_SIM_RATE_MAX,
                  &c->gpu_quantize));
    RF_TRY(delta_rates(&w, gpu, c->gpu_copy, &c->gpu_delta_encode, &c->gpu_delta_apply));
  }
  w.at = "node";
  RF_TRY(number(&w, node, "nvlink_GBps", 0, 1, GB, RF_SIM_RATE_MIN, RF_SIM_RATE_MAX, &c->nvlink));
  RF_TRY(number(&w, node, "pcie_GBps", c->gpus > 0, 0, GB, RF_SIM_RATE_MIN, RF_SIM_RATE_MAX,
                &c->pcie));
  /* One node talks to no other: adapters are only needed to reach a second one. */
  RF_TRY(object(&w, node, "nics", c->nodes > 1, &nics));
  if (nics) {
    static const char *const keys[] = {"count", "Gbps"};
    w.at = "node.nics";
    RF_TRY(known_keys(&w, nics, keys, RF_ARRAY_LEN(keys)));
    RF_TRY(integer(&w, nics, "count", 1, 1, 1024, &c->nics));
    RF_TRY(number(&w, nics, "Gbps", 1, 0, GB / 8, RF_SIM_RATE_MIN, RF_SIM_RATE_MAX, &c->nic));
  }
  return RF_OK;
}

static rf_status read_cluster(const char *path, json_t *root, rf_cluster *c) {
  static const char *const top[] = {"name", "description", "nodes",
                                    "node", "latency_us",  "sources"};
  static const char *const node_keys[] = {"gpus",      "ranks_per_node", "gpu", "nvlink_GBps",
                                          "pcie_GBps", "nics",           "host"};
  static const char *const host_keys[] = {"memcpy_GBps",   "mpi_GBps",          "memory_GiB",
                                          "quantize_GBps", "delta_encode_GBps", "delta_apply_GBps",
                                          "register_GBps"};
  static const char *const latency_keys[] = {"node", "network", "copy", "register"};
  where w = {path, ""};
  json_t *node, *host, *latency, *sources;
  if (!json_is_object(root))
    return rf_fail(RF_ERR_CONFIG, "cluster %s: the file is not a JSON object; " SCHEMA, path);
  RF_TRY(known_keys(&w, root, top, RF_ARRAY_LEN(top)));
  RF_TRY(text(&w, root, "name", 1, c->name, sizeof c->name));
  RF_TRY(text(&w, root, "description", 0, c->description, sizeof c->description));
  RF_TRY(object(&w, root, "sources", 0, &sources));
  RF_TRY(integer(&w, root, "nodes", 1, 1, 1 << 20, &c->nodes));
  RF_TRY(object(&w, root, "node", 1, &node));
  w.at = "node";
  RF_TRY(known_keys(&w, node, node_keys, RF_ARRAY_LEN(node_keys)));
  RF_TRY(integer(&w, node, "gpus", 1, 0, 4096, &c->gpus));
  /* A host without GPUs must say how many ranks it runs; with GPUs it is one per GPU unless
   * said otherwise (ranks sharing a GPU, as on the lent H200). */
  c->ranks_per_node = c->gpus;
  RF_TRY(integer(&w, node, "ranks_per_node", c->gpus == 0, 1, 1 << 16, &c->ranks_per_node));
  RF_TRY(read_gpus(path, node, c));
  RF_TRY(object(&w, node, "host", 1, &host));
  w.at = "node.host";
  RF_TRY(known_keys(&w, host, host_keys, RF_ARRAY_LEN(host_keys)));
  RF_TRY(
      number(&w, host, "memcpy_GBps", 1, 0, GB, RF_SIM_RATE_MIN, RF_SIM_RATE_MAX, &c->host_memcpy));
  RF_TRY(number(&w, host, "mpi_GBps", 1, 0, GB, RF_SIM_RATE_MIN, RF_SIM_RATE_MAX, &c->host_mpi));
  RF_TRY(number(&w, host, "memory_GiB", 1, 0, GIB, 0, RF_SIM_MEMORY_MAX, &c->host_memory));
  c->host_quantize = RF_SIM_HOST_QUANTIZE; /* optional, as the GPU's */
  RF_TRY(number(&w, host, "quantize_GBps", 0, 0, GB, RF_SIM_RATE_MIN, RF_SIM_RATE_MAX,
                &c->host_quantize));
  RF_TRY(delta_rates(&w, host, c->host_memcpy, &c->host_delta_encode, &c->host_delta_apply));
  RF_TRY(number(&w, host, "register_GBps", 0, 0, GB, RF_SIM_RATE_MIN, RF_SIM_RATE_MAX,
                &c->host_register));
  w.at = "";
  RF_TRY(object(&w, root, "latency_us", 1, &latency));
  w.at = "latency_us";
  RF_TRY(known_keys(&w, latency, latency_keys, RF_ARRAY_LEN(latency_keys)));
  RF_TRY(number(&w, latency, "node", 1, 1, 1e-6, 0, RF_SIM_LATENCY_MAX, &c->latency_node));
  RF_TRY(number(&w, latency, "network", c->nodes > 1, 1, 1e-6, 0, RF_SIM_LATENCY_MAX,
                &c->latency_network));
  RF_TRY(number(&w, latency, "copy", 1, 1, 1e-6, 0, RF_SIM_LATENCY_MAX, &c->latency_copy));
  RF_TRY(number(&w, latency, "register", 0, 1, 1e-6, 0, RF_SIM_LATENCY_MAX, &c->latency_register));
  if (c->nics == 0)
    c->latency_network = c->latency_node; /* unused: one node */
  return RF_OK;
}

static int is_path(const char *s) {
  size_t n = strlen(s);
  return strchr(s, '/') != NULL || (n >= 5 && strcmp(s + n - 5, ".json") == 0);
}

/* The shipped names: $REFIT_CLUSTER_DIR, the source tree, the install prefix. */
static rf_status resolve(const char *arg, char *path, size_t len) {
  if (is_path(arg)) {
    snprintf(path, len, "%s", arg);
    return RF_OK;
  }
  const char *dirs[3];
  char storage[2][RF_SHIPPED_DIR_MAX];
  int n = rf_shipped_dirs("REFIT_CLUSTER_DIR", "clusters", storage, dirs);
  for (int i = 0; i < n && *arg && !strchr(arg, '.'); i++)
    if (snprintf(path, len, "%s/%s.json", dirs[i], arg) < (int)len && access(path, R_OK) == 0)
      return RF_OK;
  return rf_fail(RF_ERR_CONFIG,
                 "unknown cluster '%s'; give a cluster JSON file or the name of one in "
                 "configs/clusters",
                 arg);
}

rf_status rf_cluster_load(const char *arg, rf_cluster *c) {
  memset(c, 0, sizeof *c);
  char path[sizeof c->path], why[128];
  RF_TRY(resolve(arg, path, sizeof path));
  size_t len;
  char *body = rf_read_input(path, RF_INPUT_MAX, &len, why, sizeof why);
  if (!body)
    return rf_fail(RF_ERR_CONFIG, "cluster %s: cannot read: %s", arg, why);
  json_error_t err;
  json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &err);
  free(body);
  if (!root)
    return rf_fail(RF_ERR_CONFIG, "cluster %s:%d:%d: %s; fix the JSON in this file", arg, err.line,
                   err.column, err.text);
  rf_status st = read_cluster(arg, root, c);
  json_decref(root);
  snprintf(c->path, sizeof c->path, "%s", path);
  if (st != RF_OK)
    memset(c, 0, sizeof *c);
  return st;
}
