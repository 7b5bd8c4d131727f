/* Checkpoints: opening one in whichever format the path holds, reading boxes of tensors into
 * regions of any strides, checksums of whole tensors, and the synthetic writer's dispatch.
 * The formats live in checkpoint_safetensors.c and checkpoint_hdf5.c; the helpers here phrase
 * their errors alike and stream the generator's values for both writers. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/checkpoint_internal.h"
#include "verify/verify.h"

/* Every format stores little-endian elements, and the readers hand the bytes on unchanged. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "refit's checkpoint code assumes a little-endian host"
#endif

/* ---- checks and their messages ------------------------------------------------------------ */

static const char *const dtype_tags[] = {[RF_DTYPE_BF16] = "BF16",
                                         [RF_DTYPE_FP16] = "F16",
                                         [RF_DTYPE_FP32] = "F32",
                                         [RF_DTYPE_FP8] = "F8_E4M3",
                                         [RF_DTYPE_U8] = "U8"};

const char *ck_dtype_tag(rf_dtype dt) {
  return (int)dt >= 0 && (int)dt < (int)RF_ARRAY_LEN(dtype_tags) ? dtype_tags[dt] : "?";
}

int ck_dtype_from_tag(const char *tag, rf_dtype *out) {
  for (int i = 0; i < (int)RF_ARRAY_LEN(dtype_tags); i++)
    if (strcmp(tag, dtype_tags[i]) == 0) {
      *out = (rf_dtype)i;
      return 1;
    }
  return 0;
}

int ck_shape_matches(const rf_tensor *t, int ndim, const int64_t *shape) {
  if (ndim != t->ndim)
    return 0;
  for (int d = 0; d < ndim; d++)
    if (shape[d] != t->shape[d])
      return 0;
  return 1;
}

static void format_shape(char *buf, size_t len, int ndim, const int64_t *shape) {
  size_t n = (size_t)snprintf(buf, len, "[");
  for (int d = 0; d < ndim && n < len; d++)
    n += (size_t)snprintf(buf + n, len - n, "%s%" PRId64, d ? ", " : "", shape[d]);
  if (n < len)
    snprintf(buf + n, len - n, "]");
}

rf_status ck_fail_shape(const char *file, const rf_tensor *t, int ndim, const int64_t *shape) {
  char got[128], want[64];
  format_shape(got, sizeof got, RF_MIN(ndim, 8), shape);
  format_shape(want, sizeof want, t->ndim, t->shape);
  return rf_fail(RF_ERR_CHECKPOINT, "checkpoint '%s': tensor %s has shape %s, the model needs %s",
                 file, t->name, got, want);
}

rf_status ck_fail_entry_shape(const char *file, const ck_entry *e, int ndim, const int64_t *shape) {
  char got[128], want[96];
  format_shape(got, sizeof got, RF_MIN(ndim, 8), shape);
  format_shape(want, sizeof want, RF_MIN(e->ndim, 4), e->shape);
  return rf_fail(RF_ERR_CHECKPOINT, "checkpoint '%s': tensor %s has shape %s, the model needs %s",
                 file, e->name, got, want);
}

void ck_entry_of(const rf_model *m, const rf_tensor *t, ck_entry *out) {
  memset(out, 0, sizeof *out);
  out->name = t->name;
  out->ndim = t->ndim;
  out->shape[0] = t->shape[0];
  out->shape[1] = t->shape[1];
  out->bytes = t->bytes;
  out->declares = 1;
  if (!rf_model_stack(m, t, &out->stack))
    return;
  out->name = out->stack.name;
  out->ndim = out->stack.ndim;
  memcpy(out->shape, out->stack.shape, sizeof out->shape);
  out->bytes = out->stack.members * t->bytes;
  out->declares = out->stack.member == 0;
  out->member = out->stack.member;
  out->transposed = out->stack.transposed;
}

rf_status ck_check_stacks(const rf_model *m, int first, int last) {
  for (int i = first; i < last; i++) {
    ck_entry e, prev;
    ck_entry_of(m, &m->tensors[i], &e);
    if (e.member == 0)
      continue;
    if (i > first)
      ck_entry_of(m, &m->tensors[i - 1], &prev);
    if (i == first || prev.member != e.member - 1 || strcmp(prev.name, e.name) != 0)
      return rf_fail(RF_ERR_INTERNAL,
                     "checkpoint: tensor %s is member %lld of %s but does not follow member %lld",
                     m->tensors[i].name, (long long)e.member, e.name, (long long)e.member - 1);
  }
  return RF_OK;
}

/* The model's first linear weight that a format quantizes (rf_model_quantizes), whose dtype in
 * the file (it passed) says which kind of checkpoint the file is: block-FP8 or not. */
static const rf_tensor *first_linear(const rf_model *m) {
  for (int i = 0; i < m->tensor_count; i++)
    if (rf_model_quantizes(m, &m->tensors[i]))
      return &m->tensors[i];
  return NULL;
}

/* A linear weight whose dtype in the file is F8_E4M3 where the first linear weight's is not,
 * or the reverse: neither a block-FP8 checkpoint nor any other. */
static int mixes_fp8(const rf_checkpoint *c, const rf_tensor *t, rf_dtype got) {
  const rf_tensor *first = first_linear(c->model);
  return first && first->id < t->id && rf_model_quantizes(c->model, t) &&
         t->dtype == first->dtype && (got == RF_DTYPE_FP8) != (first->dtype == RF_DTYPE_FP8);
}

rf_status ck_fail_dtype(const rf_checkpoint *c, const char *file, const rf_tensor *t,
                        const char *got, int readable) {
  rf_dtype dt = RF_DTYPE_BF16, want = t->dtype;
  int verify = c->use == RF_CHECKPOINT_FOR_VERIFY;
  readable = readable && ck_dtype_from_tag(got, &dt);
  if (readable && mixes_fp8(c, t, dt))
    return rf_fail(RF_ERR_CHECKPOINT,
                   "checkpoint '%s': tensor %s is %s but the first linear weight %s is %s; a "
                   "checkpoint holds every linear weight as F8_E4M3 (block-FP8) or none, so use "
                   "a checkpoint of one kind",
                   file, t->name, got, first_linear(c->model)->name,
                   ck_dtype_tag(first_linear(c->model)->dtype));
  const rf_tensor *weight = t->id > 0 ? &c->model->tensors[t->id - 1] : NULL;
  size_t wn = weight ? strlen(weight->name) : 0;
  if (weight && weight->dtype == RF_DTYPE_FP8 && strncmp(t->name, weight->name, wn) == 0 &&
      strcmp(t->name + wn, "_scale_inv") == 0) /* its scales, in the view */
    return rf_fail(RF_ERR_CHECKPOINT,
                   "checkpoint '%s': tensor %s is %s, but a block-FP8 checkpoint holds the "
                   "scales of %s as F32, one per 128x128 block; give a complete block-FP8 "
                   "checkpoint (refit checkpoint --dtype fp8 writes one)",
                   file, t->name, got, weight->name);
  if (want == RF_DTYPE_FP8) /* the view of a block-FP8 checkpoint (checkpoint_fp8.c) */
    return rf_fail(
        RF_ERR_CHECKPOINT,
        "checkpoint '%s': tensor %s is %s, but a block-FP8 checkpoint holds it as "
        "F8_E4M3 with its weight_scale_inv; %s (refit checkpoint --dtype fp8 writes one)",
        file, t->name, got,
        verify ? "compare an fp8 run with a block-FP8 checkpoint"
               : "give a complete block-FP8 checkpoint");
  if (readable && dt == RF_DTYPE_FP8 && verify)
    return rf_fail(RF_ERR_CHECKPOINT,
                   "checkpoint '%s': tensor %s is %s (a block-FP8 checkpoint), which only the "
                   "rollout of an fp8 run (refit run --rollout-dtype fp8) can meet; verify such "
                   "a run against it, or this run against a %s checkpoint",
                   file, t->name, got, ck_dtype_tag(want));
  if (readable && dt == RF_DTYPE_FP8)
    return rf_fail(RF_ERR_CHECKPOINT,
                   "checkpoint '%s': tensor %s is %s (a block-FP8 checkpoint), which refit "
                   "reads as trainer weights for fp8 rollouts only: add --rollout-dtype fp8, "
                   "or use a %s checkpoint",
                   file, t->name, got, ck_dtype_tag(want));
  if (readable && verify)
    return rf_fail(RF_ERR_CHECKPOINT,
                   "checkpoint '%s': tensor %s is %s, but the run's trainer held it in %s; "
                   "verify the run against a checkpoint of its weights in that dtype",
                   file, t->name, got, ck_dtype_tag(want));
  if (readable && t->own_dtype)
    return rf_fail(RF_ERR_CHECKPOINT,
                   "checkpoint '%s': tensor %s is %s, the model needs %s (its own dtype, which "
                   "--dtype does not change; use another checkpoint)",
                   file, t->name, got, ck_dtype_tag(want));
  if (readable)
    return rf_fail(RF_ERR_CHECKPOINT,
                   "checkpoint '%s': tensor %s is %s, the model needs %s (use --dtype %s or "
                   "another checkpoint)",
                   file, t->name, got, ck_dtype_tag(want), rf_dtype_name(dt));
  return rf_fail(RF_ERR_CHECKPOINT,
                 "checkpoint '%s': tensor %s is %s, which refit does not read; the model needs "
                 "%s",
                 file, t->name, got, ck_dtype_tag(want));
}

int64_t ck_batch_rows(const rf_tensor *t, int64_t width, int esize) {
  int64_t row_bytes = RF_MAX(width, 1) * esize;
  return RF_MAX(CK_BATCH_BYTES / row_bytes, 1);
}

/* ---- plain file input and output ---------------------------------------------------------- */

rf_status ck_pread(int fd, void *buf, size_t n, int64_t offset, const char *file,
                   const rf_tensor *t) {
  char *p = buf;
  while (n > 0) {
    ssize_t got = pread(fd, p, n, (off_t)offset);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      return rf_fail(RF_ERR_IO, "checkpoint '%s': reading tensor %s at byte %" PRId64 " failed: %s",
                     file, t->name, offset, strerror(errno));
    if (got == 0) /* it passed the size checks at open, so it shrank since */
      return rf_fail(RF_ERR_CHECKPOINT,
                     "checkpoint '%s': tensor %s: the file ends at byte %" PRId64
                     " (truncated while in use)",
                     file, t->name, offset);
    p += got, n -= (size_t)got, offset += got;
  }
  return RF_OK;
}

rf_status ck_write_all(int fd, const void *buf, size_t n, const char *file) {
  const char *p = buf;
  while (n > 0) {
    ssize_t put = write(fd, p, n);
    if (put < 0 && errno == EINTR)
      continue;
    if (put < 0)
      return rf_fail(RF_ERR_IO, "checkpoint '%s': writing failed: %s", file, strerror(errno));
    p += put, n -= (size_t)put;
  }
  return RF_OK;
}

rf_status ck_create(const char *path, char *tmp, int *fd) {
  snprintf(tmp, CK_TEMP_MAX, "%s.partial-XXXXXX", path);
  *fd = mkstemp(tmp);
  if (*fd >= 0)
    fcntl(*fd, F_SETFD, FD_CLOEXEC);
  if (*fd < 0)
    return rf_fail(RF_ERR_IO, "checkpoint '%s': cannot create the file: %s", path, strerror(errno));
  /* mkstemp makes the file 0600; a checkpoint is as readable as any file the user creates. */
  mode_t mask = umask(0);
  umask(mask);
  if (fchmod(*fd, 0644 & ~mask) != 0) {
    rf_status st = rf_fail(RF_ERR_IO, "checkpoint '%s': cannot set the mode of '%s': %s", path, tmp,
                           strerror(errno));
    close(*fd);
    ck_abandon(tmp);
    return st;
  }
  return RF_OK;
}

rf_status ck_commit(const char *path, const char *tmp) {
  if (rename(tmp, path) != 0) {
    rf_status st = rf_fail(RF_ERR_IO, "checkpoint '%s': cannot rename '%s' into place: %s", path,
                           tmp, strerror(errno));
    unlink(tmp);
    return st;
  }
  return RF_OK;
}

void ck_abandon(const char *tmp) { unlink(tmp); }

rf_status ck_generate(const rf_tensor *t, uint64_t seed, const rf_weight_version *version,
                      ck_emit_fn emit, void *ctx) {
  int es = rf_tensor_esize(t);
  int64_t rows = RF_MIN(ck_batch_rows(t, t->shape[1], es), t->shape[0]);
  size_t cap = (size_t)(rows * t->shape[1] * es);
  char *buf = rf_malloc(cap ? cap : 1, "a batch of checkpoint rows");
  if (!buf)
    return RF_ERR_NOMEM;
  rf_status st = RF_OK;
  for (int64_t r0 = 0; r0 < t->shape[0] && st == RF_OK; r0 += rows) {
    int64_t r1 = RF_MIN(r0 + rows, t->shape[0]);
    rf_box b = {{r0, 0}, {r1, t->shape[1]}};
    rf_region reg = rf_region_row_major(buf, &b, es);
    rf_fill_region(&reg, &b, t, seed, version, t->dtype);
    st = emit(ctx, t, r0, r1, buf, (size_t)((r1 - r0) * t->shape[1] * es));
  }
  free(buf);
  return st;
}

rf_status ck_generate_stored(const rf_model *m, const rf_tensor *t, uint64_t seed,
                             const rf_weight_version *version, ck_emit_fn emit, void *ctx) {
  ck_entry e;
  ck_entry_of(m, t, &e);
  if (!e.transposed)
    return ck_generate(t, seed, version, emit, ctx);
  /* Columns c0..c1 of the logical tensor, written as that many rows of the file. */
  int es = rf_tensor_esize(t);
  int64_t cols = RF_MIN(ck_batch_rows(t, t->shape[0], es), t->shape[1]);
  size_t cap = (size_t)(cols * t->shape[0] * es);
  char *buf = rf_malloc(cap ? cap : 1, "a batch of checkpoint columns");
  if (!buf)
    return RF_ERR_NOMEM;
  rf_status st = RF_OK;
  for (int64_t c0 = 0; c0 < t->shape[1] && st == RF_OK; c0 += cols) {
    int64_t c1 = RF_MIN(c0 + cols, t->shape[1]);
    rf_box b = {{0, c0}, {t->shape[0], c1}};
    rf_region reg = rf_region_transposed(buf, &b, es);
    rf_fill_region(&reg, &b, t, seed, version, t->dtype);
    st = emit(ctx, t, c0, c1, buf, (size_t)((c1 - c0) * t->shape[0] * es));
  }
  free(buf);
  return st;
}

int ck_shard_plan(const rf_model *model, int64_t shard_size, int *shard_of) {
  int shard = 0;
  int64_t used = 0;
  for (int i = 0; i < model->tensor_count; i++) {
    int64_t b = model->tensors[i].bytes;
    ck_entry e;
    ck_entry_of(model, &model->tensors[i], &e);
    /* A stacked entry is one tensor of the file: its members stay in member 0's shard. */
    if (used > 0 && e.member == 0 && used + e.bytes > shard_size)
      shard++, used = 0;
    shard_of[i] = shard;
    used += b;
  }
  return model->tensor_count ? shard + 1 : 0;
}

int rf_checkpoint_shard_count(const rf_model *model, const char *format, int64_t shard_size) {
  if (strcmp(format, "safetensors") != 0 || shard_size <= 0)
    return 1;
  int *shard_of =
      rf_calloc((size_t)RF_MAX(model->tensor_count, 1), sizeof *shard_of, "the shard plan");
  if (!shard_of)
    return 0;
  int n = ck_shard_plan(model, shard_size, shard_of);
  free(shard_of);
  return n;
}

/* ---- opening ------------------------------------------------------------------------------ */

/* HDF5 by its extension or its signature at byte 0 (where every file refit or h5py writes
 * has it); anything else is taken for safetensors, whose parser then says what is wrong. */
static int has_hdf5_extension(const char *path) {
  size_t n = strlen(path);
  return (n > 3 && strcmp(path + n - 3, ".h5") == 0) ||
         (n > 5 && strcmp(path + n - 5, ".hdf5") == 0);
}

static int looks_like_hdf5(const char *path) {
  if (has_hdf5_extension(path))
    return 1;
  static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  unsigned char head[8];
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return 0;
  int is =
      pread(fd, head, sizeof head, 0) == (ssize_t)sizeof head && memcmp(head, sig, sizeof sig) == 0;
  close(fd);
  return is;
}

/* Anything but a directory must be a regular file: a FIFO would block every open (HDF5's
 * too), so it is refused here, through a descriptor opened without blocking. HDF5 then opens
 * the file again by name, which only someone who can write the directory could swap. */
static rf_status check_regular(const char *path) {
  struct stat sb;
  char why[128];
  int fd = rf_open_input(path, &sb, why, sizeof why);
  if (fd >= 0) {
    close(fd);
    return RF_OK;
  }
  if (errno == EISDIR || errno == EINVAL)
    return rf_fail(RF_ERR_CHECKPOINT,
                   "checkpoint '%s' %s; give a checkpoint file or a directory of shards", path,
                   why);
  return rf_fail(RF_ERR_CHECKPOINT, "checkpoint '%s': %s", path, why);
}

rf_status rf_checkpoint_open(const char *path, const rf_model *model, rf_checkpoint **out) {
  return rf_checkpoint_open_for(path, model, RF_CHECKPOINT_FOR_RUN, out);
}

rf_status rf_checkpoint_open_for(const char *path, const rf_model *model, rf_checkpoint_use use,
                                 rf_checkpoint **out) {
  *out = NULL;
  struct stat sb;
  if (!path || !*path)
    return rf_fail(RF_ERR_USAGE, "no checkpoint path given");
  if (stat(path, &sb) != 0) {
    if (errno == ENOENT)
      return rf_fail(RF_ERR_CHECKPOINT, "checkpoint '%s': no such file or directory", path);
    return rf_fail(RF_ERR_CHECKPOINT, "checkpoint '%s': %s", path, strerror(errno));
  }
  rf_checkpoint *c = rf_calloc(1, sizeof *c, "the checkpoint");
  if (!c)
    return RF_ERR_NOMEM;
  c->path = rf_strdup(path);
  c->checksum = RF_CHECKSUM_CURRENT;
  c->use = use;
  c->model = model;
  c->h5_file = -1;
  if (!c->path) {
    free(c);
    return RF_ERR_NOMEM;
  }
  /* "dir/" and "dir" name the same files; messages read better without the slash. */
  for (size_t n = strlen(c->path); n > 1 && c->path[n - 1] == '/'; n--)
    c->path[n - 1] = '\0';
  rf_status st = S_ISDIR(sb.st_mode) ? RF_OK : check_regular(c->path);
  if (st == RF_OK && S_ISDIR(sb.st_mode)) {
    st = ck_st_open_dir(c, c->path);
  } else if (st == RF_OK && looks_like_hdf5(c->path)) {
    c->hdf5 = 1;
    st = ck_h5_open(c, c->path);
  } else if (st == RF_OK) {
    st = ck_st_open_file(c, c->path);
  }
  if (st != RF_OK) {
    rf_checkpoint_close(c);
    return st;
  }
  RF_DEBUG("checkpoint %s: %d tensors of %s checked (%s)", c->path, model->tensor_count,
           model->name, c->hdf5 ? "HDF5" : "safetensors");
  *out = c;
  return RF_OK;
}

void rf_checkpoint_close(rf_checkpoint *c) {
  if (!c)
    return;
  if (c->hdf5)
    ck_h5_close(c);
  else
    ck_st_close(c);
  free(c->scratch);
  free(c->path);
  if (c->view)
    rf_model_free(c->view);
  free(c->view);
  free(c->view_of);
  free(c);
}

/* ---- reading ------------------------------------------------------------------------------ */

static rf_status read_rows(rf_checkpoint *c, int tensor, const rf_box *b, void *out) {
  return c->hdf5 ? ck_h5_read_rows(c, tensor, b, out) : ck_st_read_rows(c, tensor, b, out);
}

/* The box is read in batches of whole box rows. A batch that is one contiguous run of dst
 * (a row-major destination as wide as the box) is read in place; any other goes through the
 * scratch buffer and is placed by rf_region_copy, which transposes in tiles. */
rf_status rf_checkpoint_read(rf_checkpoint *c, int tensor, const rf_box *box,
                             const rf_region *dst) {
  if (c->view_of && tensor >= 0 && tensor < c->run_model->tensor_count)
    tensor = c->view_of[tensor];
  return ck_read(c, tensor, box, dst);
}

rf_status ck_read(rf_checkpoint *c, int tensor, const rf_box *box, const rf_region *dst) {
  if (tensor < 0 || tensor >= c->model->tensor_count)
    return rf_fail(RF_ERR_INTERNAL, "checkpoint '%s': no tensor %d in the model", c->path, tensor);
  const rf_tensor *t = &c->model->tensors[tensor];
  if (rf_box_is_empty(box))
    return RF_OK;
  if (box->lo[0] < 0 || box->lo[1] < 0 || box->hi[0] > t->shape[0] || box->hi[1] > t->shape[1])
    return rf_fail(RF_ERR_INTERNAL,
                   "checkpoint '%s': box [%" PRId64 ", %" PRId64 ") x [%" PRId64 ", %" PRId64
                   ") is outside tensor %s",
                   c->path, box->lo[0], box->hi[0], box->lo[1], box->hi[1], t->name);
  int64_t w = box->hi[1] - box->lo[1];
  int es = rf_tensor_esize(t);
  /* A region built with the model's element size instead of the tensor's would be read into
   * at the wrong strides, silently, wherever the two differ. */
  if (dst->esize != es)
    return rf_fail(RF_ERR_INTERNAL,
                   "checkpoint '%s': tensor %s is %s, %d bytes an element, but the region to "
                   "read it into has %d; build the region with the tensor's own element size",
                   c->path, t->name, rf_dtype_name(t->dtype), es, dst->esize);
  int64_t rows = ck_batch_rows(t, w, es);
  for (int64_t r0 = box->lo[0]; r0 < box->hi[0]; r0 += rows) {
    rf_box b = {{r0, box->lo[1]}, {RF_MIN(r0 + rows, box->hi[0]), box->hi[1]}};
    if (rf_region_contiguous(dst, &b)) {
      RF_TRY(read_rows(c, tensor, &b, rf_region_at(dst, b.lo[0], b.lo[1])));
      continue;
    }
    size_t need = (size_t)(rf_box_numel(&b) * es);
    if (need > c->scratch_cap) {
      void *p = rf_realloc(c->scratch, need, "the checkpoint read buffer");
      if (!p)
        return RF_ERR_NOMEM;
      c->scratch = p, c->scratch_cap = need;
    }
    RF_TRY(read_rows(c, tensor, &b, c->scratch));
    rf_region src = rf_region_row_major(c->scratch, &b, es);
    rf_region_copy(dst, &src, &b);
  }
  return RF_OK;
}

rf_status rf_checkpoint_checksum(rf_checkpoint *c, int tensor, uint64_t *out) {
  *out = 0;
  if (c->view_of)
    return ck_fp8_checksum(c, tensor, out);
  if (tensor < 0 || tensor >= c->model->tensor_count)
    return rf_fail(RF_ERR_INTERNAL, "checkpoint '%s': no tensor %d in the model", c->path, tensor);
  return ck_checksum_as(c, tensor, &c->model->tensors[tensor], out);
}

void rf_checkpoint_checksum_format(rf_checkpoint *c, int format) {
  c->checksum = format == 1 ? RF_CHECKSUM_V1 : RF_CHECKSUM_V2;
}

rf_status ck_checksum_as(rf_checkpoint *c, int tensor, const rf_tensor *t, uint64_t *out) {
  *out = 0;
  int es = rf_tensor_esize(t);
  int64_t rows = RF_MIN(ck_batch_rows(t, t->shape[1], es), t->shape[0]);
  size_t cap = (size_t)(rows * t->shape[1] * es);
  char *buf = rf_malloc(cap ? cap : 1, "a batch of checkpoint rows");
  if (!buf)
    return RF_ERR_NOMEM;
  rf_status st = RF_OK;
  uint64_t sum = 0;
  for (int64_t r0 = 0; r0 < t->shape[0]; r0 += rows) {
    rf_box b = {{r0, 0}, {RF_MIN(r0 + rows, t->shape[0]), t->shape[1]}};
    rf_region reg = rf_region_row_major(buf, &b, es);
    st = ck_read(c, tensor, &b, &reg);
    if (st != RF_OK)
      break;
    sum += rf_checksum_region_as(c->checksum, &reg, &b, t, t->dtype);
  }
  free(buf);
  if (st == RF_OK)
    *out = sum;
  return st;
}

/* ---- writing ------------------------------------------------------------------------------ */

const char *rf_checkpoint_format_for(const char *path, const char *format) {
  if (strcmp(format, "auto") != 0)
    return format;
  return has_hdf5_extension(path) ? "hdf5" : "safetensors";
}

rf_status rf_checkpoint_check_target(const char *path, int64_t shard_size, int force) {
  if (force)
    return RF_OK;
  struct stat sb;
  char index[CK_PATH_MAX + 64];
  const char *existing = path;
  if (shard_size > 0) {
    if (lstat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
      return RF_OK; /* absent, or not a directory, which the writer refuses itself */
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", path);
    existing = index;
  }
  if (lstat(existing, &sb) != 0)
    return RF_OK;
  return rf_fail(RF_ERR_USAGE,
                 "checkpoint '%s' already exists; give --force to overwrite it, or another "
                 "--checkpoint",
                 existing);
}

rf_status rf_checkpoint_write(const char *path, const rf_model *model, uint64_t seed,
                              const char *format, int64_t shard_size) {
  return rf_checkpoint_write_version(path, model, seed, NULL, format, shard_size);
}

rf_status rf_checkpoint_write_version(const char *path, const rf_model *model, uint64_t seed,
                                      const rf_weight_version *version, const char *format,
                                      int64_t shard_size) {
  if (!path || !*path)
    return rf_fail(RF_ERR_USAGE, "no checkpoint path given");
  if (strlen(path) + 64 >= CK_PATH_MAX)
    return rf_fail(RF_ERR_USAGE, "checkpoint '%s': the path is too long", path);
  if (shard_size < 0)
    return rf_fail(RF_ERR_USAGE, "checkpoint '%s': shard size %" PRId64 " is negative", path,
                   shard_size);
  format = rf_checkpoint_format_for(path, format);
  if (strcmp(format, "safetensors") == 0)
    return ck_st_write(path, model, seed, version, shard_size);
  if (strcmp(format, "hdf5") == 0) {
    if (shard_size > 0)
      return rf_fail(RF_ERR_USAGE,
                     "checkpoint '%s': --shard-size needs --format safetensors "
                     "(an HDF5 checkpoint is one file)",
                     path);
    return ck_h5_write(path, model, seed, version);
  }
  return rf_fail(RF_ERR_USAGE, "checkpoint '%s': format '%s' is not one of safetensors|hdf5", path,
                 format);
}
