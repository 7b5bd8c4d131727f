/* HDF5 checkpoints: one dataset per HF name at the root (the dots in the names are fine in
 * HDF5 link names), 1-D or 2-D, little-endian, each in its tensor's dtype. fp32 is H5T_IEEE_F32LE;
 * fp16 the IEEE half type that h5py uses for numpy.float16; bf16, which HDF5 and numpy lack, is
 * H5T_STD_U16LE with the dataset attribute dtype = "bfloat16", so h5py users see the raw bits and
 * are told what they are. The reader accepts exactly these three and reads each box with a
 * hyperslab, using the dataset's own type as the memory type so that HDF5 converts nothing. */
#include <hdf5.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/checkpoint_internal.h"
#include "io/h5_read.h"

_Static_assert(sizeof(hid_t) == sizeof(int64_t), "rf_checkpoint keeps hid_t values as int64_t");

static const char bf16_attr[] = "bfloat16";

/* IEEE 754 binary16, built the way h5py builds it for numpy.float16. */
static hid_t half_type(void) {
  hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  if (t < 0)
    return t;
  if (H5Tset_fields(t, 15, 10, 5, 0, 10) < 0 || H5Tset_size(t, 2) < 0 || H5Tset_ebias(t, 15) < 0) {
    H5Tclose(t);
    return -1;
  }
  return t;
}

static void close_id(hid_t id, herr_t (*fn)(hid_t)) {
  if (id >= 0)
    fn(id);
}

/* ---- opening ------------------------------------------------------------------------------ */

/* Whether dataset d carries the string attribute dtype = "bfloat16", stored fixed-length
 * (null- or space-padded) or variable-length (h5py writes the latter for a Python str). A
 * dtype attribute that is not one string is refused: the file was not written for refit. */
static rf_status bf16_marked(const rf_checkpoint *c, hid_t d, int *yes) {
  *yes = 0;
  htri_t exists = H5Aexists(d, "dtype");
  RF_H5(exists);
  if (!exists)
    return RF_OK;
  const rf_h5_source src = {.kind = "checkpoint", .path = c->path, .bad = RF_ERR_CHECKPOINT};
  char s[64];
  RF_TRY(rf_h5_attr_read_str(&src, d, "dtype", s, sizeof s));
  size_t n = strlen(s);
  while (n > 0 && s[n - 1] == ' ')
    s[--n] = '\0';
  *yes = strcmp(s, bf16_attr) == 0;
  return RF_OK;
}

/* Which of refit's dtypes the dataset holds; otherwise 0 and a description for the error. */
static int classify(hid_t ty, int bf16, rf_dtype *dt, char *desc, size_t len) {
  H5T_class_t cls = H5Tget_class(ty);
  size_t size = H5Tget_size(ty);
  int le = H5Tget_order(ty) == H5T_ORDER_LE;
  if (cls == H5T_FLOAT) {
    size_t sp, ep, es, mp, ms, bias = H5Tget_ebias(ty);
    if (le && H5Tget_fields(ty, &sp, &ep, &es, &mp, &ms) >= 0) {
      if (size == 4 && sp == 31 && ep == 23 && es == 8 && mp == 0 && ms == 23 && bias == 127) {
        *dt = RF_DTYPE_FP32;
        return 1;
      }
      if (size == 2 && sp == 15 && ep == 10 && es == 5 && mp == 0 && ms == 10 && bias == 15) {
        *dt = RF_DTYPE_FP16;
        return 1;
      }
    }
    snprintf(desc, len, "an HDF5 float of %zu bytes%s", size, le ? "" : ", big-endian");
    return 0;
  }
  if (cls == H5T_INTEGER && size == 2 && le && H5Tget_sign(ty) == H5T_SGN_NONE) {
    if (bf16) {
      *dt = RF_DTYPE_BF16;
      return 1;
    }
    snprintf(desc, len, "uint16 without the attribute dtype = \"%s\"", bf16_attr);
    return 0;
  }
  static const char *names[] = {"integer",  "float",           "time",     "string",
                                "bitfield", "opaque",          "compound", "reference",
                                "enum",     "variable-length", "array"};
  snprintf(desc, len, "an HDF5 %s of %zu bytes",
           (int)cls >= 0 && (int)cls < (int)RF_ARRAY_LEN(names) ? names[cls] : "type", size);
  return 0;
}

static rf_status check_dataset(rf_checkpoint *c, const rf_tensor *t, int64_t file_size) {
  hid_t f = (hid_t)c->h5_file;
  if (H5Lexists(f, t->name, H5P_DEFAULT) <= 0)
    return rf_fail(RF_ERR_CHECKPOINT,
                   "checkpoint '%s': tensor %s is missing; is it a checkpoint of model %s? refit "
                   "checkpoint writes a complete one",
                   c->path, t->name, c->model->name);
  hid_t d = H5Dopen2(f, t->name, H5P_DEFAULT);
  if (d < 0)
    return rf_fail(RF_ERR_CHECKPOINT, "checkpoint '%s': tensor %s is not a dataset", c->path,
                   t->name);
  c->h5_dset[t->id] = d;
  hid_t ty = H5Dget_type(d);
  RF_H5(ty);
  c->h5_type[t->id] = ty;

  rf_dtype dt;
  char desc[96] = "";
  int bf16;
  RF_TRY(bf16_marked(c, d, &bf16));
  int readable = classify(ty, bf16, &dt, desc, sizeof desc);
  if (!readable || dt != t->dtype)
    return ck_fail_dtype(c, c->path, t, readable ? ck_dtype_tag(dt) : desc, readable);

  hid_t sp = H5Dget_space(d);
  RF_H5(sp);
  hsize_t dims[H5S_MAX_RANK];
  int nd = H5Sget_simple_extent_dims(sp, dims, NULL);
  H5Sclose(sp);
  RF_H5(nd);
  int64_t shape[H5S_MAX_RANK];
  for (int k = 0; k < nd; k++)
    shape[k] = (int64_t)dims[k];
  if (!ck_shape_matches(t, nd, shape))
    return ck_fail_shape(c->path, t, nd, shape);

  H5D_space_status_t status;
  RF_H5(H5Dget_space_status(d, &status));
  if (status == H5D_SPACE_STATUS_NOT_ALLOCATED && t->numel > 0)
    return rf_fail(RF_ERR_CHECKPOINT,
                   "checkpoint '%s': tensor %s has no data in the file (it "
                   "was never written)",
                   c->path, t->name);
  /* HDF5 itself refuses a file shorter than it expects, but a contiguous dataset can say
   * exactly which bytes are gone. */
  haddr_t at = H5Dget_offset(d);
  if (at != HADDR_UNDEF) {
    int64_t a = (int64_t)at, b = a + (int64_t)H5Dget_storage_size(d);
    if (b > file_size)
      return rf_fail(RF_ERR_CHECKPOINT,
                     "checkpoint '%s': tensor %s data [%" PRId64 ", %" PRId64
                     ") ends beyond the file's %" PRId64 " bytes (truncated)",
                     c->path, t->name, a, b, file_size);
  }
  return RF_OK;
}

rf_status ck_h5_open(rf_checkpoint *c, const char *path) {
  /* Problems are reported as refit's one line; the HDF5 stack only at REFIT_LOG=debug. */
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  size_t n = (size_t)RF_MAX(c->model->tensor_count, 1);
  c->h5_dset = rf_malloc(n * sizeof *c->h5_dset, "the checkpoint datasets");
  c->h5_type = rf_malloc(n * sizeof *c->h5_type, "the checkpoint datasets");
  if (!c->h5_dset || !c->h5_type)
    return RF_ERR_NOMEM;
  for (int i = 0; i < c->model->tensor_count; i++)
    c->h5_dset[i] = c->h5_type[i] = -1;
  if (H5Fis_hdf5(path) <= 0)
    return rf_fail(RF_ERR_CHECKPOINT, "checkpoint '%s': not an HDF5 file", path);
  c->h5_file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (c->h5_file < 0)
    return rf_fail(RF_ERR_CHECKPOINT,
                   "checkpoint '%s': HDF5 cannot open it (truncated or "
                   "damaged)",
                   path);
  struct stat sb;
  if (stat(path, &sb) != 0)
    return rf_fail(RF_ERR_CHECKPOINT, "checkpoint '%s': cannot stat the file", path);
  for (int i = 0; i < c->model->tensor_count; i++)
    RF_TRY(check_dataset(c, &c->model->tensors[i], (int64_t)sb.st_size));
  return RF_OK;
}

void ck_h5_close(rf_checkpoint *c) {
  for (int i = 0; c->h5_dset && i < c->model->tensor_count; i++) {
    close_id((hid_t)c->h5_dset[i], H5Dclose);
    close_id((hid_t)c->h5_type[i], H5Tclose);
  }
  free(c->h5_dset);
  free(c->h5_type);
  close_id((hid_t)c->h5_file, H5Fclose);
}

/* ---- reading and writing rows ------------------------------------------------------------- */

/* Selects `box` of a tensor in its dataset and makes a memory space of the box's shape. */
static rf_status select_box(hid_t d, const rf_tensor *t, const rf_box *box, hid_t *fs, hid_t *ms) {
  hsize_t start[2] = {(hsize_t)box->lo[0], (hsize_t)box->lo[1]};
  hsize_t count[2] = {(hsize_t)(box->hi[0] - box->lo[0]), (hsize_t)(box->hi[1] - box->lo[1])};
  *ms = -1;
  *fs = H5Dget_space(d);
  RF_H5(*fs);
  RF_H5(H5Sselect_hyperslab(*fs, H5S_SELECT_SET, start, NULL, count, NULL));
  *ms = H5Screate_simple(t->ndim, count, NULL);
  RF_H5(*ms);
  return RF_OK;
}

rf_status ck_h5_read_rows(rf_checkpoint *c, int tensor, const rf_box *box, void *out) {
  const rf_tensor *t = &c->model->tensors[tensor];
  hid_t d = (hid_t)c->h5_dset[tensor], fs = -1, ms = -1;
  rf_status st = select_box(d, t, box, &fs, &ms);
  if (st == RF_OK && H5Dread(d, (hid_t)c->h5_type[tensor], ms, fs, H5P_DEFAULT, out) < 0) {
    st = rf_fail(RF_ERR_CHECKPOINT,
                 "checkpoint '%s': reading tensor %s failed (damaged or "
                 "truncated; REFIT_LOG=debug shows HDF5's reason)",
                 c->path, t->name);
    if (rf_log_level_get() >= RF_LOG_DEBUG)
      H5Eprint2(H5E_DEFAULT, stderr);
  }
  close_id(ms, H5Sclose);
  close_id(fs, H5Sclose);
  return st;
}

typedef struct {
  hid_t dset, type;
} emit_ctx;

static rf_status emit_to_dataset(void *ctx, const rf_tensor *t, int64_t row0, int64_t row1,
                                 const void *data, size_t bytes) {
  const emit_ctx *e = ctx;
  rf_box b = {{row0, 0}, {row1, t->shape[1]}};
  hid_t fs, ms;
  rf_status st = select_box(e->dset, t, &b, &fs, &ms);
  if (st == RF_OK)
    RF_H5_GOTO(H5Dwrite(e->dset, e->type, ms, fs, H5P_DEFAULT, data), done);
done:
  close_id(ms, H5Sclose);
  close_id(fs, H5Sclose);
  return st;
}

/* ---- writing ------------------------------------------------------------------------------ */

static rf_status write_string_attr(hid_t obj, const char *name, const char *value) {
  rf_status st = RF_OK;
  hid_t ty = -1, sp = -1, a = -1;
  RF_H5_GOTO(ty = H5Tcopy(H5T_C_S1), done);
  RF_H5_GOTO(H5Tset_size(ty, H5T_VARIABLE), done);
  RF_H5_GOTO(H5Tset_cset(ty, H5T_CSET_UTF8), done);
  RF_H5_GOTO(sp = H5Screate(H5S_SCALAR), done);
  RF_H5_GOTO(a = H5Acreate2(obj, name, ty, sp, H5P_DEFAULT, H5P_DEFAULT), done);
  RF_H5_GOTO(H5Awrite(a, ty, &value), done);
done:
  close_id(a, H5Aclose);
  close_id(sp, H5Sclose);
  close_id(ty, H5Tclose);
  return st;
}

/* The file type of a dtype, as the top of this file describes; the caller closes it. */
static hid_t file_type(rf_dtype dtype) {
  switch (dtype) {
  case RF_DTYPE_FP32:
    return H5Tcopy(H5T_IEEE_F32LE);
  case RF_DTYPE_FP16:
    return half_type();
  default:
    return H5Tcopy(H5T_STD_U16LE);
  }
}

/* One dataset in the tensor's own dtype, which may differ from the model's (DeepSeek's fp32
 * router bias among bf16 weights); the reader checks each dataset against its tensor. */
static rf_status write_tensor(hid_t f, const rf_tensor *t, uint64_t seed,
                              const rf_weight_version *version) {
  rf_status st = RF_OK;
  hsize_t dims[2] = {(hsize_t)t->shape[0], (hsize_t)t->shape[1]};
  hid_t type = -1, sp = -1, d = -1;
  RF_H5_GOTO(type = file_type(t->dtype), done);
  RF_H5_GOTO(sp = H5Screate_simple(t->ndim, dims, NULL), done);
  RF_H5_GOTO(d = H5Dcreate2(f, t->name, type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), done);
  if (t->dtype == RF_DTYPE_BF16)
    RF_TRY_GOTO(write_string_attr(d, "dtype", bf16_attr), done);
  emit_ctx e = {d, type};
  st = ck_generate(t, seed, version, emit_to_dataset, &e);
done:
  close_id(d, H5Dclose);
  close_id(sp, H5Sclose);
  close_id(type, H5Tclose);
  return st;
}

rf_status ck_h5_write(const char *path, const rf_model *m, uint64_t seed,
                      const rf_weight_version *version) {
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  /* The temporary file is created by ck_create (mkstemp) and only then truncated and written
   * by HDF5 under its name: HDF5 cannot create exclusively, but a name that refit made
   * exclusively, in the target's directory, cannot be a planted symlink. It also gives a plain
   * reason (a missing directory, no permission) where H5Fcreate would only fail. */
  int fd;
  char tmp[CK_TEMP_MAX];
  RF_TRY(ck_create(path, tmp, &fd));
  close(fd);
  rf_status st = RF_OK;
  hid_t f = -1, sp = -1, a = -1;
  RF_H5_GOTO(f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), done);
  RF_TRY_GOTO(write_string_attr(f, "generator", "refit"), done);
  RF_TRY_GOTO(write_string_attr(f, "model", m->name), done);
  RF_H5_GOTO(sp = H5Screate(H5S_SCALAR), done);
  RF_H5_GOTO(a = H5Acreate2(f, "seed", H5T_STD_U64LE, sp, H5P_DEFAULT, H5P_DEFAULT), done);
  RF_H5_GOTO(H5Awrite(a, H5T_NATIVE_UINT64, &seed), done);
  for (int i = 0; i < m->tensor_count && st == RF_OK; i++)
    st = write_tensor(f, &m->tensors[i], seed, version);
done:
  close_id(a, H5Aclose);
  close_id(sp, H5Sclose);
  if (f >= 0 && H5Fclose(f) < 0 && st == RF_OK)
    st = rf_hdf5_failed("H5Fclose(f)", __FILE__, __LINE__);
  st = st == RF_OK ? ck_commit(path, tmp) : st;
  if (st != RF_OK)
    ck_abandon(tmp);
  return st;
}
