/* model: the public face of the model module. Dtype and tensor-kind names, finding a model's
 * config.json from a shipped name or a path, the digest, and the list of shipped models.
 * Reading the config itself and listing its tensors lives in model_spec.c. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY /* for XXH3_state_t on the stack: no allocation to fail */
#include <xxhash.h>

#include "model_spec.h"

/* ---- dtypes and kinds -------------------------------------------------------------------- */

static const struct {
  const char *name;
  int size;
} dtypes[] = {{"bf16", 2}, {"fp16", 2}, {"fp32", 4}, {"fp8_e4m3fn", 1}, {"u8", 1}};

static int dtype_valid(rf_dtype dt) { return (int)dt >= 0 && (int)dt < (int)RF_ARRAY_LEN(dtypes); }

const char *rf_dtype_name(rf_dtype dt) { return dtype_valid(dt) ? dtypes[dt].name : "unknown"; }

int rf_dtype_size(rf_dtype dt) { return dtype_valid(dt) ? dtypes[dt].size : 0; }

/* Logs nothing: the caller knows whether the text came from an option or a config key and
 * reports it there, as one line with that context. */
rf_status rf_dtype_parse(const char *s, rf_dtype *out) {
  static const struct {
    const char *alias;
    rf_dtype dt;
  } aliases[] = {
      {"bf16", RF_DTYPE_BF16},    {"bfloat16", RF_DTYPE_BF16}, {"fp16", RF_DTYPE_FP16},
      {"float16", RF_DTYPE_FP16}, {"half", RF_DTYPE_FP16},     {"fp32", RF_DTYPE_FP32},
      {"float32", RF_DTYPE_FP32}, {"float", RF_DTYPE_FP32},
  };
  for (size_t i = 0; s && i < RF_ARRAY_LEN(aliases); i++)
    if (strcasecmp(s, aliases[i].alias) == 0) {
      *out = aliases[i].dt;
      return RF_OK;
    }
  return RF_ERR_USAGE;
}

const char *rf_tensor_kind_name(rf_tensor_kind kind) {
  static const char *names[] = {
#define RF_X_KIND_NAME(id, text) text,
      RF_TENSOR_KIND_LIST(RF_X_KIND_NAME)
#undef RF_X_KIND_NAME
  };
  return (int)kind >= 0 && kind < RF_T_KIND_COUNT ? names[kind] : "unknown";
}

int rf_tensor_kind_is_moe(rf_tensor_kind kind) {
  return kind >= RF_T_ROUTER && kind <= RF_T_EXPERT_DOWN_BIAS;
}

int rf_tensor_kind_is_mla(rf_tensor_kind kind) { return kind >= RF_T_Q_A && kind <= RF_T_KV_B; }

int rf_tensor_kind_is_linear(rf_tensor_kind kind) {
  switch (kind) {
  case RF_T_Q:
  case RF_T_K:
  case RF_T_V:
  case RF_T_O:
  case RF_T_GATE:
  case RF_T_UP:
  case RF_T_DOWN:
  case RF_T_EXPERT_GATE:
  case RF_T_EXPERT_UP:
  case RF_T_EXPERT_DOWN:
  case RF_T_EXPERT_GATE_UP:
  case RF_T_SHARED_GATE:
  case RF_T_SHARED_UP:
  case RF_T_SHARED_DOWN:
  case RF_T_Q_A:
  case RF_T_Q_B:
  case RF_T_MLA_Q:
  case RF_T_KV_A:
  case RF_T_KV_B:
    return 1;
  default: /* embeddings, lm_head, norms, biases and routers */
    return 0;
  }
}

/* ---- finding the config file ------------------------------------------------------------- */

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* A slash or a .json suffix marks a path; anything else is a shipped name. */
static int is_path(const char *s) { return strchr(s, '/') != NULL || ends_with(s, ".json"); }

static rf_status resolve(const char *arg, char *path, size_t len) {
  if (is_path(arg)) {
    struct stat sb;
    char why[128];
    int fd = rf_open_input(arg, &sb, why, sizeof why);
    if (fd < 0 && errno == EISDIR)
      return rf_fail(RF_ERR_MODEL,
                     "model '%s': cannot read: is a directory; pass the "
                     "config.json inside it",
                     arg);
    if (fd < 0 && errno == EINVAL)
      return rf_fail(RF_ERR_MODEL, "model '%s': cannot read: %s; pass a config.json file", arg,
                     why);
    if (fd < 0)
      return rf_fail(RF_ERR_MODEL, "model '%s': cannot read: %s", arg, why);
    close(fd);
    if (snprintf(path, len, "%s", arg) >= (int)len)
      return rf_fail(RF_ERR_MODEL, "model '%s': the path is too long", arg);
    return RF_OK;
  }
  const char *dirs[3];
  char storage[2][RF_SHIPPED_DIR_MAX];
  int n = rf_shipped_dirs("REFIT_MODEL_DIR", "models", storage, dirs);
  for (int i = 0; i < n && *arg; i++) {
    if (snprintf(path, len, "%s/%s.json", dirs[i], arg) >= (int)len)
      continue;
    if (access(path, R_OK) == 0)
      return RF_OK;
  }
  char list[512];
  rf_model_list_shipped(list, sizeof list);
  return rf_fail(RF_ERR_MODEL,
                 "unknown model '%s'; use one of: %s, or a path to a Hugging "
                 "Face config.json",
                 arg, list);
}

/* Copies s into out, cutting it to fit; a name longer than rf_model.name is still unique
 * enough for reports, and snprintf("%s") here draws truncation warnings from gcc -O2. */
static void copy_cut(char *out, size_t len, const char *s) {
  size_t n = RF_MIN(strlen(s), len - 1);
  memcpy(out, s, n);
  out[n] = '\0';
}

/* The model's name is the file's stem, except that a file literally named config.json (the
 * Hugging Face convention) is named after its directory. This is lexical on purpose: the HF
 * cache links config.json to a blob named by its hash, which realpath would expose. */
void rf_model_stem(const char *path, char *out, size_t len) {
  char buf[PATH_MAX];
  snprintf(buf, sizeof buf, "%s", path);
  char *base = strrchr(buf, '/');
  base = base ? base + 1 : buf;
  if (strcmp(base, "config.json") != 0) {
    size_t n = strlen(base);
    if (ends_with(base, ".json"))
      base[n - 5] = '\0';
    copy_cut(out, len, base);
    return;
  }
  /* Drop "config.json", then trailing slashes and "." components, to reach the directory. */
  *base = '\0';
  size_t n = strlen(buf);
  for (;;) {
    if (n > 0 && buf[n - 1] == '/')
      buf[--n] = '\0';
    else if ((n == 1 && buf[0] == '.') || (n >= 2 && strcmp(buf + n - 2, "/.") == 0))
      buf[--n] = '\0';
    else
      break;
  }
  const char *dir = strrchr(buf, '/') ? strrchr(buf, '/') + 1 : buf;
  char real[PATH_MAX];
  /* Only "x/config.json" names its directory lexically; "./config.json" or
   * "../config.json" needs the real directory. */
  if ((*dir == '\0' || strcmp(dir, "..") == 0) && realpath(*buf ? buf : ".", real)) {
    dir = strrchr(real, '/') ? strrchr(real, '/') + 1 : real;
  }
  copy_cut(out, len, *dir && strcmp(dir, "..") != 0 ? dir : "config");
}

/* ---- the public entry points ------------------------------------------------------------- */

rf_status rf_model_load(const char *name_or_path, rf_model *model) {
  memset(model, 0, sizeof *model);
  char path[PATH_MAX];
  RF_TRY(resolve(name_or_path ? name_or_path : "", path, sizeof path));
  rf_status st = rf_model_read_config(path, model);
  if (st != RF_OK) {
    rf_model_free(model);
    return st;
  }
  rf_model_stem(path, model->name, sizeof model->name);
  RF_DEBUG("model %s: %s from %s, %d tensors, %lld parameters", model->name, model->model_type,
           path, model->tensor_count, (long long)model->total_params);
  return RF_OK;
}

void rf_model_free(rf_model *model) {
  if (!model)
    return;
  free(model->tensors);
  memset(model, 0, sizeof *model);
}

int rf_model_find(const rf_model *model, const char *name) {
  for (int i = 0; i < model->tensor_count; i++)
    if (strcmp(model->tensors[i].name, name) == 0)
      return i;
  return -1;
}

/* Integers go in as 8 little-endian bytes and strings with their NUL, so the digest is the
 * same on every host and no two different fields run together into the same bytes. */
static void hash_u64(XXH3_state_t *st, uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; i++)
    b[i] = (unsigned char)(v >> (8 * i));
  XXH3_64bits_update(st, b, sizeof b);
}

static void hash_str(XXH3_state_t *st, const char *s) { XXH3_64bits_update(st, s, strlen(s) + 1); }

uint64_t rf_model_digest(const rf_model *model) {
  XXH3_state_t st;
  XXH3_INITSTATE(&st);
  XXH3_64bits_reset(&st);
  hash_str(&st, model->name);
  hash_str(&st, rf_dtype_name(model->dtype));
  hash_u64(&st, (uint64_t)model->tensor_count);
  for (int i = 0; i < model->tensor_count; i++) {
    const rf_tensor *t = &model->tensors[i];
    hash_str(&st, t->name);
    hash_u64(&st, (uint64_t)t->ndim);
    hash_u64(&st, (uint64_t)t->shape[0]);
    hash_u64(&st, (uint64_t)t->shape[1]);
    /* Only a dtype of its own: the others follow the model's, hashed above, and leaving them
     * out keeps the digests of dense models what they were. */
    if (t->own_dtype)
      hash_str(&st, rf_dtype_name(t->dtype));
  }
  return XXH3_64bits_digest(&st);
}

/* ---- the shipped list -------------------------------------------------------------------- */

#define MAX_SHIPPED 64

static int cmp_names(const void *a, const void *b) {
  return strcmp((const char *)a, (const char *)b);
}

/* Collects the stems of the *.json files in every searched directory: the union is exactly
 * the set of names rf_model_load accepts. */
static int collect_shipped(char names[][RF_NAME_MAX]) {
  const char *dirs[3];
  char storage[2][RF_SHIPPED_DIR_MAX];
  int ndirs = rf_shipped_dirs("REFIT_MODEL_DIR", "models", storage, dirs), n = 0;
  for (int i = 0; i < ndirs; i++) {
    DIR *d = opendir(dirs[i]);
    if (!d)
      continue;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < MAX_SHIPPED) {
      size_t len = strlen(e->d_name);
      if (e->d_name[0] == '.' || !ends_with(e->d_name, ".json") || len - 5 >= RF_NAME_MAX)
        continue;
      char stem[RF_NAME_MAX];
      snprintf(stem, sizeof stem, "%.*s", (int)(len - 5), e->d_name);
      int dup = 0;
      for (int j = 0; j < n && !dup; j++)
        dup = strcmp(names[j], stem) == 0;
      if (!dup)
        memcpy(names[n++], stem, sizeof stem);
    }
    closedir(d);
  }
  return n;
}

void rf_model_list_shipped(char *buf, int len) {
  /* Used when no directory can be read, e.g. a binary moved away from its install prefix. */
  static const char *fallback[] = {
      "deepseek-v2-lite", "deepseek-v3",   "gemma-2-9b",   "gemma-2b",
      "gemma-3-1b",       "gemma-7b",      "kimi-k2",      "llama-3.1-405b",
      "llama-3.1-70b",    "llama-3.1-8b",  "llama-3.2-1b", "mixtral-8x7b",
      "qwen3-235b-a22b",  "qwen3-30b-a3b", "qwen3-8b",     "tiny"};
  if (!buf || len <= 0)
    return;
  char names[MAX_SHIPPED][RF_NAME_MAX];
  int n = collect_shipped(names);
  if (n == 0)
    for (; n < (int)RF_ARRAY_LEN(fallback); n++)
      snprintf(names[n], RF_NAME_MAX, "%s", fallback[n]);
  qsort(names, (size_t)n, sizeof names[0], cmp_names);

  /* Names that do not fit are replaced by ", ..." (room for which is kept while more
   * names follow), so the list is never cut mid-name. */
  size_t used = 0, cap = (size_t)len;
  buf[0] = '\0';
  for (int i = 0; i < n; i++) {
    const char *sep = i ? ", " : "";
    size_t need = strlen(sep) + strlen(names[i]), reserve = i + 1 < n ? 5 : 0;
    if (used + need + reserve + 1 > cap) {
      snprintf(buf + used, cap - used, "%s...", sep);
      break;
    }
    used += (size_t)snprintf(buf + used, cap - used, "%s%s", sep, names[i]);
  }
}

/* Recomputes every tensor's bytes and the model's total from the tensors' dtypes. */
static void recount_bytes(rf_model *model) {
  model->total_bytes = 0;
  for (int i = 0; i < model->tensor_count; i++) {
    rf_tensor *t = &model->tensors[i];
    t->bytes = t->elem_bits ? (t->numel * t->elem_bits + 7) / 8 : t->numel * rf_tensor_esize(t);
    model->total_bytes += t->bytes;
  }
}

void rf_model_set_dtype(rf_model *model, rf_dtype dtype) {
  model->dtype = dtype;
  for (int i = 0; i < model->tensor_count; i++)
    if (!model->tensors[i].own_dtype)
      model->tensors[i].dtype = dtype;
  recount_bytes(model);
}

int rf_model_quantizes(const rf_model *model, const rf_tensor *t) {
  return rf_tensor_kind_is_linear(t->kind) && !(model->unquantized_kinds & RF_KIND_BIT(t->kind));
}

void rf_model_quantized_kinds(const rf_model *model, char *buf, size_t len) {
  int seen[RF_T_KIND_COUNT] = {0};
  size_t at = 0;
  if (len)
    buf[0] = '\0';
  for (int i = 0; i < model->tensor_count && at < len; i++) {
    const rf_tensor *t = &model->tensors[i];
    if (rf_model_quantizes(model, t) && !seen[t->kind]++)
      at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? ", " : "",
                             rf_tensor_kind_name(t->kind));
  }
}

void rf_model_weights_quantized(rf_model *model, rf_dtype dtype, int elem_bits) {
  for (int i = 0; i < model->tensor_count; i++)
    if (rf_model_quantizes(model, &model->tensors[i])) {
      model->tensors[i].dtype = dtype;
      model->tensors[i].own_dtype = 1;
      model->tensors[i].elem_bits = elem_bits;
    }
  recount_bytes(model);
}

rf_status rf_model_set_tensor_dtype(rf_model *model, int index, rf_dtype dtype) {
  if (index < 0 || index >= model->tensor_count)
    return rf_fail(RF_ERR_INTERNAL, "model %s has no tensor %d; pass an index below %d",
                   model->name, index, model->tensor_count);
  /* fp8 is the rollout's only: a trainer tensor in it would need scales refit does not move. */
  if (rf_dtype_size(dtype) == 0 || dtype == RF_DTYPE_FP8)
    return rf_fail(RF_ERR_INTERNAL,
                   "model %s: %d is not a dtype to give tensor %s; pass an rf_dtype", model->name,
                   (int)dtype, model->tensors[index].name);
  model->tensors[index].dtype = dtype;
  model->tensors[index].own_dtype = 1;
  recount_bytes(model);
  return RF_OK;
}
