/* Writing safetensors: the synthetic weights as one file, or as shards packed greedily in
 * tensor order with model.safetensors.index.json beside them, the way Hugging Face's
 * save_pretrained lays them out. Every file streams its tensors in row batches, so writing a
 * model never holds more than one batch of it. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/checkpoint_internal.h"

#define ST_INDEX "model.safetensors.index.json"

/* ---- writing ------------------------------------------------------------------------------ */

typedef struct {
  int fd;
  const char *path;
} emit_ctx;

static rf_status emit_to_file(void *ctx, const rf_tensor *t, int64_t row0, int64_t row1,
                              const void *data, size_t bytes) {
  const emit_ctx *e = ctx;
  return ck_write_all(e->fd, data, bytes, e->path);
}

/* The plain generator: tensor i's values at version *gen (NULL: version 0) in its own dtype, as
 * the file stores it (transposed inside a stacked entry). */
static rf_status generate_plain(void *gen, const rf_model *m, int i, uint64_t seed, ck_emit_fn emit,
                                void *ctx) {
  return ck_generate_stored(m, &m->tensors[i], seed, gen, emit, ctx);
}

/* One safetensors file holding tensors [first, last) of the model, in order, each streamed by
 * `generate`. */
static rf_status write_file(const char *path, const rf_model *m, uint64_t seed, int first, int last,
                            ck_gen_fn generate, void *gen) {
  RF_TRY(ck_check_stacks(m, first, last));
  char seed_text[32];
  snprintf(seed_text, sizeof seed_text, "%" PRIu64, seed);
  json_t *h = json_object(), *meta = json_object();
  json_object_set_new(meta, "format", json_string("pt"));
  json_object_set_new(meta, "generator", json_string("refit"));
  json_object_set_new(meta, "seed", json_string(seed_text));
  json_object_set_new(meta, "model", json_string(m->name));
  json_object_set_new(h, "__metadata__", meta);
  int64_t off = 0;
  for (int i = first; i < last; i++) {
    const rf_tensor *t = &m->tensors[i];
    ck_entry entry;
    ck_entry_of(m, t, &entry);
    /* A stacked entry is declared once, by member 0, over every member's bytes: the members
     * follow each other (ck_check_stacks). */
    if (entry.declares) {
      json_t *e = json_object(), *shape = json_array();
      for (int d = 0; d < entry.ndim; d++)
        json_array_append_new(shape, json_integer(entry.shape[d]));
      json_object_set_new(e, "dtype", json_string(ck_dtype_tag(t->dtype)));
      json_object_set_new(e, "shape", shape);
      json_object_set_new(e, "data_offsets",
                          json_pack("[I, I]", (json_int_t)off, (json_int_t)(off + entry.bytes)));
      json_object_set_new(h, entry.name, e);
    }
    off += t->bytes;
  }
  char *text = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(h);
  if (!text)
    return rf_fail(RF_ERR_NOMEM, "out of memory formatting the safetensors header");
  /* Padded with spaces to a multiple of 8 bytes, as the safetensors library does, so that
   * the data starts aligned. */
  size_t len = strlen(text), padded = (len + 7) / 8 * 8;
  unsigned char *head = rf_malloc(8 + padded, "the safetensors header");
  if (!head) {
    free(text);
    return RF_ERR_NOMEM;
  }
  for (int k = 0; k < 8; k++)
    head[k] = (unsigned char)((uint64_t)padded >> (8 * k));
  memcpy(head + 8, text, len);
  memset(head + 8 + len, ' ', padded - len);
  free(text);

  int fd;
  char tmp[CK_TEMP_MAX];
  rf_status st = ck_create(path, tmp, &fd);
  if (st == RF_OK) {
    st = ck_write_all(fd, head, 8 + padded, path);
    emit_ctx e = {fd, path};
    for (int i = first; i < last && st == RF_OK; i++)
      st = generate(gen, m, i, seed, emit_to_file, &e);
    if (close(fd) != 0 && st == RF_OK)
      st = rf_fail(RF_ERR_IO, "checkpoint '%s': writing failed: %s", path, strerror(errno));
    st = st == RF_OK ? ck_commit(path, tmp) : st;
    if (st != RF_OK)
      ck_abandon(tmp);
  }
  free(head);
  return st;
}

static rf_status write_index(const char *dir, const rf_model *m, const int *shard_of, int shards) {
  char path[CK_PATH_MAX + 64], name[64];
  snprintf(path, sizeof path, "%s/%s", dir, ST_INDEX);
  json_t *index = json_object(), *map = json_object();
  json_object_set_new(index, "metadata",
                      json_pack("{s:I}", "total_size", (json_int_t)m->total_bytes));
  for (int i = 0; i < m->tensor_count; i++) {
    ck_entry entry;
    ck_entry_of(m, &m->tensors[i], &entry);
    snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", shard_of[i] + 1, shards);
    if (entry.declares)
      json_object_set_new(map, entry.name, json_string(name));
  }
  json_object_set_new(index, "weight_map", map);
  char *text = json_dumps(index, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(index);
  if (!text)
    return rf_fail(RF_ERR_NOMEM, "out of memory formatting %s", ST_INDEX);
  int fd;
  char tmp[CK_TEMP_MAX];
  rf_status st = ck_create(path, tmp, &fd);
  if (st == RF_OK) {
    st = ck_write_all(fd, text, strlen(text), path);
    if (st == RF_OK)
      st = ck_write_all(fd, "\n", 1, path);
    if (close(fd) != 0 && st == RF_OK)
      st = rf_fail(RF_ERR_IO, "checkpoint '%s': writing failed: %s", path, strerror(errno));
    st = st == RF_OK ? ck_commit(path, tmp) : st;
    if (st != RF_OK)
      ck_abandon(tmp);
  }
  free(text);
  return st;
}

rf_status ck_st_write(const char *path, const rf_model *m, uint64_t seed,
                      const rf_weight_version *version, int64_t shard_size) {
  /* The writers take the generator's state as void *: the version is only read. */
  void *gen = (void *)(uintptr_t)version;
  struct stat sb;
  int exists = stat(path, &sb) == 0;
  if (shard_size == 0) {
    if (exists && S_ISDIR(sb.st_mode))
      return rf_fail(RF_ERR_USAGE,
                     "checkpoint '%s' is a directory: give a file name, or "
                     "--shard-size for a sharded checkpoint",
                     path);
    return write_file(path, m, seed, 0, m->tensor_count, generate_plain, gen);
  }
  if (exists && !S_ISDIR(sb.st_mode))
    return rf_fail(RF_ERR_USAGE,
                   "checkpoint '%s' exists and is not a directory, which a "
                   "sharded checkpoint (--shard-size) needs",
                   path);
  if (!exists && mkdir(path, 0755) != 0)
    return rf_fail(RF_ERR_IO, "checkpoint '%s': cannot create the directory: %s", path,
                   strerror(errno));
  int *shard_of = rf_calloc((size_t)RF_MAX(m->tensor_count, 1), sizeof *shard_of, "the shard plan");
  if (!shard_of)
    return RF_ERR_NOMEM;
  int shards = ck_shard_plan(m, shard_size, shard_of);
  rf_status st = RF_OK;
  for (int s = 0, first = 0; s < shards && st == RF_OK; s++) {
    int last = first;
    while (last < m->tensor_count && shard_of[last] == s)
      last++;
    char file[CK_PATH_MAX + 64];
    snprintf(file, sizeof file, "%s/model-%05d-of-%05d.safetensors", path, s + 1, shards);
    st = write_file(file, m, seed, first, last, generate_plain, gen);
    first = last;
  }
  if (st == RF_OK)
    st = write_index(path, m, shard_of, shards);
  free(shard_of);
  return st;
}

rf_status ck_st_write_file(const char *path, const rf_model *m, uint64_t seed, ck_gen_fn generate,
                           void *gen) {
  struct stat sb;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
    return rf_fail(RF_ERR_USAGE, "checkpoint '%s' is a directory: give a file name", path);
  return write_file(path, m, seed, 0, m->tensor_count, generate, gen);
}
