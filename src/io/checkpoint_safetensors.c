/* safetensors: an 8-byte little-endian header length N, N bytes of JSON mapping each tensor
 * name to {"dtype", "shape", "data_offsets": [begin, end)} (offsets counted from the byte
 * after the header, optional "__metadata__" of strings), then the data. A directory holds
 * model.safetensors.index.json, whose "weight_map" names each tensor's shard, or a lone
 * model.safetensors.
 *
 * Opening parses every header once and checks everything a read could trip over later, so a
 * rank that opened a checkpoint only ever fails to read it if the file changes underneath. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/checkpoint_internal.h"

/* The safetensors library refuses headers above 100 MB; so does refit, rather than
 * allocating whatever eight random bytes ask for. */
#define ST_HEADER_MAX ((int64_t)100000000)
/* Offsets above this cannot be real and would overflow the sums below. */
#define ST_OFFSET_MAX ((int64_t)1 << 60)
#define ST_INDEX "model.safetensors.index.json"

/* ---- opening ------------------------------------------------------------------------------ */

/* Opens one file, checks its header length against the file and parses the header. */
static rf_status load_file(rf_checkpoint *c, const char *path, int *index, json_t **header) {
  ck_file *files =
      rf_realloc(c->files, (size_t)(c->file_count + 1) * sizeof *files, "the checkpoint file list");
  if (!files)
    return RF_ERR_NOMEM;
  c->files = files;
  ck_file *f = &files[c->file_count];
  memset(f, 0, sizeof *f);
  f->fd = -1;
  f->path = rf_strdup(path);
  if (!f->path)
    return RF_ERR_NOMEM;
  *index = c->file_count++;

  struct stat sb;
  char why[128];
  f->fd = rf_open_input(path, &sb, why, sizeof why);
  if (f->fd < 0 && errno == ENOENT)
    return rf_fail(RF_ERR_CHECKPOINT, "checkpoint '%s': no such file or directory", path);
  if (f->fd < 0 && (errno == EISDIR || errno == EINVAL))
    return rf_fail(RF_ERR_CHECKPOINT, "checkpoint '%s' %s; give a safetensors file", path, why);
  if (f->fd < 0)
    return rf_fail(RF_ERR_CHECKPOINT, "checkpoint '%s': cannot open: %s", path, why);
  f->size = (int64_t)sb.st_size;
  if (f->size < 8)
    return rf_fail(RF_ERR_CHECKPOINT,
                   "checkpoint '%s': the file's %" PRId64 " bytes are too "
                   "few for a safetensors header (truncated or not safetensors)",
                   path, f->size);
  unsigned char len8[8];
  static const rf_tensor no_tensor = {.name = "(header)"};
  RF_TRY(ck_pread(f->fd, len8, 8, 0, path, &no_tensor));
  uint64_t n = 0;
  for (int k = 7; k >= 0; k--)
    n = n << 8 | len8[k];
  if (n > (uint64_t)(f->size - 8))
    return rf_fail(RF_ERR_CHECKPOINT,
                   "checkpoint '%s': header length %" PRIu64 " is beyond the "
                   "file's %" PRId64 " bytes (truncated or not safetensors)",
                   path, n, f->size);
  if ((int64_t)n > ST_HEADER_MAX)
    return rf_fail(RF_ERR_CHECKPOINT,
                   "checkpoint '%s': header length %" PRIu64 " is above the "
                   "safetensors limit of %" PRId64 " bytes (not safetensors)",
                   path, n, ST_HEADER_MAX);
  f->data_start = 8 + (int64_t)n;
  char *text = rf_malloc(n ? n : 1, "the safetensors header");
  if (!text)
    return RF_ERR_NOMEM;
  rf_status st = ck_pread(f->fd, text, n, 8, path, &no_tensor);
  json_error_t err;
  *header = st == RF_OK ? json_loadb(text, n, JSON_REJECT_DUPLICATES, &err) : NULL;
  free(text);
  RF_TRY(st);
  if (!*header)
    return rf_fail(RF_ERR_CHECKPOINT, "checkpoint '%s': the header is not valid JSON: %s", path,
                   err.text);
  if (!json_is_object(*header))
    return rf_fail(RF_ERR_CHECKPOINT, "checkpoint '%s': the header is not a JSON object", path);
  const char *key;
  json_t *value;
  json_object_foreach(*header, key, value) {
    if (strcmp(key, "__metadata__") != 0 && !json_is_object(value))
      return rf_fail(RF_ERR_CHECKPOINT,
                     "checkpoint '%s': the header entry '%s' is not an "
                     "object",
                     path, key);
  }
  return RF_OK;
}

static int get_int(json_t *a, size_t i, int64_t *out) {
  json_t *v = json_array_get(a, i);
  if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > ST_OFFSET_MAX)
    return 0;
  *out = (int64_t)json_integer_value(v);
  return 1;
}

/* Checks tensor t's entry in file fi's header and records where its data starts. */
/* A member of a stacked entry (rf_model_stack) is checked against the entry's header entry and
 * lies at its member's place in it. */
static rf_status check_tensor(rf_checkpoint *c, int fi, json_t *header, const rf_tensor *t) {
  const ck_file *f = &c->files[fi];
  ck_entry entry;
  ck_entry_of(c->model, t, &entry);
  json_t *e = json_object_get(header, entry.name);
  if (!e)
    return rf_fail(RF_ERR_CHECKPOINT,
                   "checkpoint '%s': tensor %s is missing; is it a checkpoint of model %s? refit "
                   "checkpoint writes a complete one",
                   f->path, entry.name, c->model->name);
  json_t *dtype = json_object_get(e, "dtype"), *shape = json_object_get(e, "shape"),
         *offsets = json_object_get(e, "data_offsets");
  int64_t dims[8], begin, end;
  int ndim = json_is_array(shape) ? (int)json_array_size(shape) : -1;
  int ok = json_is_string(dtype) && ndim >= 0 && json_is_array(offsets) &&
           json_array_size(offsets) == 2 && get_int(offsets, 0, &begin) &&
           get_int(offsets, 1, &end) && begin <= end;
  for (int d = 0; ok && d < RF_MIN(ndim, 8); d++)
    ok = get_int(shape, (size_t)d, &dims[d]);
  if (!ok)
    return rf_fail(RF_ERR_CHECKPOINT,
                   "checkpoint '%s': tensor %s: the header entry needs a "
                   "dtype string, a shape of sizes and data_offsets [begin, end]",
                   f->path, t->name);
  rf_dtype dt;
  int readable = ck_dtype_from_tag(json_string_value(dtype), &dt);
  if (!readable || dt != t->dtype)
    return ck_fail_dtype(c, f->path, t, json_string_value(dtype), readable);
  int stacked = entry.name != t->name;
  if (!stacked && !ck_shape_matches(t, ndim, dims))
    return ck_fail_shape(f->path, t, ndim, dims);
  int same = ndim == entry.ndim;
  for (int d = 0; stacked && same && d < ndim; d++)
    same = dims[d] == entry.shape[d];
  if (stacked && !same)
    return ck_fail_entry_shape(f->path, &entry, ndim, dims);
  int64_t a = f->data_start + begin, b = f->data_start + end;
  if (end - begin != entry.bytes)
    return rf_fail(RF_ERR_CHECKPOINT,
                   "checkpoint '%s': tensor %s data [%" PRId64 ", %" PRId64 ") holds %" PRId64
                   " bytes, its shape and dtype need %" PRId64,
                   f->path, entry.name, a, b, end - begin, entry.bytes);
  if (b > f->size)
    return rf_fail(RF_ERR_CHECKPOINT,
                   "checkpoint '%s': tensor %s data [%" PRId64 ", %" PRId64
                   ") ends beyond the file's %" PRId64 " bytes (truncated)",
                   f->path, t->name, a, b, f->size);
  c->tensor_file[t->id] = fi;
  c->tensor_offset[t->id] = a + entry.member * t->bytes;
  c->tensor_transposed[t->id] = (unsigned char)entry.transposed;
  return RF_OK;
}

typedef struct {
  int64_t begin, end;
  int tensor;
} span;

static int span_cmp(const void *pa, const void *pb) {
  const span *a = pa, *b = pb;
  if (a->begin != b->begin)
    return a->begin < b->begin ? -1 : 1;
  return (a->tensor > b->tensor) - (a->tensor < b->tensor);
}

/* No two model tensors of file fi share a byte: sorted by start, each must start at or after
 * the furthest end so far. */
static rf_status check_overlaps(rf_checkpoint *c, int fi) {
  const rf_model *m = c->model;
  span *s = rf_malloc((size_t)RF_MAX(m->tensor_count, 1) * sizeof *s, "the tensor ranges");
  if (!s)
    return RF_ERR_NOMEM;
  int n = 0;
  for (int i = 0; i < m->tensor_count; i++)
    if (c->tensor_file[i] == fi && m->tensors[i].numel > 0)
      s[n++] = (span){c->tensor_offset[i], c->tensor_offset[i] + m->tensors[i].bytes, i};
  qsort(s, (size_t)n, sizeof *s, span_cmp);
  rf_status st = RF_OK;
  for (int k = 1, far = 0; k < n && st == RF_OK; k++) {
    if (s[k].begin < s[far].end)
      st = rf_fail(RF_ERR_CHECKPOINT, "checkpoint '%s': tensors %s and %s overlap in the file",
                   c->files[fi].path, m->tensors[s[far].tensor].name, m->tensors[s[k].tensor].name);
    if (s[k].end > s[far].end)
      far = k;
  }
  free(s);
  return st;
}

static rf_status alloc_maps(rf_checkpoint *c) {
  size_t n = (size_t)RF_MAX(c->model->tensor_count, 1);
  c->tensor_file = rf_malloc(n * sizeof *c->tensor_file, "the checkpoint tensor map");
  c->tensor_offset = rf_calloc(n, sizeof *c->tensor_offset, "the checkpoint tensor map");
  c->tensor_transposed = rf_calloc(n, 1, "the checkpoint tensor map");
  if (!c->tensor_file || !c->tensor_offset || !c->tensor_transposed)
    return RF_ERR_NOMEM;
  for (int i = 0; i < c->model->tensor_count; i++)
    c->tensor_file[i] = -1;
  return RF_OK;
}

rf_status ck_st_open_file(rf_checkpoint *c, const char *path) {
  RF_TRY(alloc_maps(c));
  int fi;
  json_t *header = NULL;
  rf_status st = load_file(c, path, &fi, &header);
  for (int i = 0; st == RF_OK && i < c->model->tensor_count; i++)
    st = check_tensor(c, fi, header, &c->model->tensors[i]);
  json_decref(header);
  return st == RF_OK ? check_overlaps(c, fi) : st;
}

/* A sharded checkpoint: each tensor's shard comes from the index; every shard is opened and
 * parsed once, the first time a tensor needs it, so the first error is the first tensor's. */
/* Whether a weight_map value names a file beside the index, as Hugging Face's shard names
 * ("model-00001-of-00004.safetensors") all do: no directory part, so neither an absolute path
 * nor "../x" can make refit read outside the checkpoint's directory. */
static int is_shard_name(const char *name) {
  return name[0] && !strchr(name, '/') && strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

static rf_status open_sharded(rf_checkpoint *c, const char *dir, const char *index_path) {
  json_error_t err;
  char why[128];
  size_t len;
  char *text = rf_read_input(index_path, RF_INPUT_MAX, &len, why, sizeof why);
  if (!text)
    return rf_fail(RF_ERR_CHECKPOINT, "checkpoint '%s': cannot read: %s", index_path, why);
  json_t *index = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
  free(text);
  if (!index)
    return rf_fail(RF_ERR_CHECKPOINT, "checkpoint '%s': not valid JSON: %s (line %d)", index_path,
                   err.text, err.line);
  json_t *map = json_object_get(index, "weight_map");
  if (!json_is_object(map)) {
    json_decref(index);
    return rf_fail(RF_ERR_CHECKPOINT, "checkpoint '%s': there is no \"weight_map\" object",
                   index_path);
  }
  json_t **headers = NULL;
  rf_status st = alloc_maps(c);
  for (int i = 0; st == RF_OK && i < c->model->tensor_count; i++) {
    const rf_tensor *t = &c->model->tensors[i];
    ck_entry entry;
    ck_entry_of(c->model, t, &entry);
    json_t *file = json_object_get(map, entry.name);
    if (!file) {
      st = rf_fail(RF_ERR_CHECKPOINT,
                   "checkpoint '%s': tensor %s is missing; is it a checkpoint of model %s? refit "
                   "checkpoint writes a complete one",
                   index_path, entry.name, c->model->name);
      break;
    }
    if (!json_is_string(file)) {
      st = rf_fail(RF_ERR_CHECKPOINT,
                   "checkpoint '%s': the weight_map entry of tensor %s is "
                   "not a file name",
                   index_path, entry.name);
      break;
    }
    if (!is_shard_name(json_string_value(file))) {
      st = rf_fail(RF_ERR_CHECKPOINT,
                   "checkpoint '%s': the weight_map entry of tensor %s is '%s', which is not a "
                   "file beside the index; shards must sit in the checkpoint's directory",
                   index_path, entry.name, json_string_value(file));
      break;
    }
    char path[CK_PATH_MAX * 2];
    snprintf(path, sizeof path, "%s/%s", dir, json_string_value(file));
    int fi = 0;
    while (fi < c->file_count && strcmp(c->files[fi].path, path) != 0)
      fi++;
    if (fi == c->file_count) {
      json_t **h = rf_realloc(headers, (size_t)(fi + 1) * sizeof *h, "the shard headers");
      if (!h) {
        st = RF_ERR_NOMEM;
        break;
      }
      headers = h;
      headers[fi] = NULL;
      st = load_file(c, path, &fi, &headers[fi]);
    }
    if (st == RF_OK)
      st = check_tensor(c, fi, headers[fi], t);
  }
  for (int fi = 0; fi < c->file_count; fi++) {
    if (st == RF_OK)
      st = check_overlaps(c, fi);
    if (headers)
      json_decref(headers[fi]);
  }
  free(headers);
  json_decref(index);
  return st;
}

rf_status ck_st_open_dir(rf_checkpoint *c, const char *dir) {
  char path[CK_PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/%s", dir, ST_INDEX);
  if (access(path, F_OK) == 0)
    return open_sharded(c, dir, path);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  if (access(path, F_OK) == 0)
    return ck_st_open_file(c, path);
  return rf_fail(RF_ERR_CHECKPOINT,
                 "checkpoint '%s': the directory holds neither %s nor "
                 "model.safetensors",
                 dir, ST_INDEX);
}

void ck_st_dtype_tag(const char *path, const char *name, char *tag, size_t len) {
  tag[0] = '\0';
  struct stat sb;
  if (stat(path, &sb) != 0)
    return;
  char file[CK_PATH_MAX * 2];
  snprintf(file, sizeof file, "%s", path);
  if (S_ISDIR(sb.st_mode)) { /* the shard the index names for it */
    char index[CK_PATH_MAX * 2], why[128];
    size_t n;
    snprintf(index, sizeof index, "%s/%s", path, ST_INDEX);
    char *text = rf_read_input(index, RF_INPUT_MAX, &n, why, sizeof why);
    json_t *root = text ? json_loadb(text, n, JSON_REJECT_DUPLICATES, NULL) : NULL;
    const char *shard =
        json_string_value(json_object_get(json_object_get(root, "weight_map"), name));
    if (shard && is_shard_name(shard))
      snprintf(file, sizeof file, "%s/%s", path, shard);
    else
      snprintf(file, sizeof file, "%s/model.safetensors", path);
    json_decref(root);
    free(text);
  }
  rf_checkpoint c = {.path = file, .h5_file = -1};
  json_t *header = NULL;
  int fi;
  rf_log_push_quiet(1); /* what is wrong with the file is the ordinary open's to say */
  if (load_file(&c, file, &fi, &header) == RF_OK) {
    const char *dtype = json_string_value(json_object_get(json_object_get(header, name), "dtype"));
    snprintf(tag, len, "%s", dtype ? dtype : "");
  }
  rf_log_pop_quiet();
  json_decref(header);
  ck_st_close(&c);
}

void ck_st_close(rf_checkpoint *c) {
  for (int i = 0; i < c->file_count; i++) {
    if (c->files[i].fd >= 0)
      close(c->files[i].fd);
    free(c->files[i].path);
  }
  free(c->files);
  free(c->tensor_file);
  free(c->tensor_offset);
  free(c->tensor_transposed);
}

/* ---- reading ------------------------------------------------------------------------------ */

/* A member stored transposed ([in, out]): each column of the box is one run of the file, read
 * into a buffer of the box's transpose and turned over into `out`. */
static rf_status read_transposed(const ck_file *f, const rf_tensor *t, int64_t offset,
                                 const rf_box *box, void *out) {
  int64_t rows = t->shape[0], h = box->hi[0] - box->lo[0], w = box->hi[1] - box->lo[1];
  int es = rf_tensor_esize(t);
  char *buf = rf_malloc((size_t)RF_MAX(h * w * es, 1), "a transposed checkpoint read");
  if (!buf)
    return RF_ERR_NOMEM;
  rf_status st = RF_OK;
  for (int64_t j = box->lo[1]; j < box->hi[1] && st == RF_OK; j++)
    st = ck_pread(f->fd, buf + (j - box->lo[1]) * h * es, (size_t)(h * es),
                  offset + (j * rows + box->lo[0]) * es, f->path, t);
  if (st == RF_OK) {
    rf_region src = rf_region_transposed(buf, box, es), dst = rf_region_row_major(out, box, es);
    rf_region_copy(&dst, &src, box);
  }
  free(buf);
  return st;
}

/* Whole rows are one run of the file; a column range is one pread per row. */
rf_status ck_st_read_rows(rf_checkpoint *c, int tensor, const rf_box *box, void *out) {
  const rf_tensor *t = &c->model->tensors[tensor];
  const ck_file *f = &c->files[c->tensor_file[tensor]];
  if (c->tensor_transposed[tensor])
    return read_transposed(f, t, c->tensor_offset[tensor], box, out);
  int64_t cols = t->shape[1], w = box->hi[1] - box->lo[1], es = rf_tensor_esize(t);
  int64_t at = c->tensor_offset[tensor] + (box->lo[0] * cols + box->lo[1]) * es;
  if (w == cols)
    return ck_pread(f->fd, out, (size_t)((box->hi[0] - box->lo[0]) * cols * es), at, f->path, t);
  char *p = out;
  for (int64_t i = box->lo[0]; i < box->hi[0]; i++, p += w * es, at += cols * es)
    RF_TRY(ck_pread(f->fd, p, (size_t)(w * es), at, f->path, t));
  return RF_OK;
}
