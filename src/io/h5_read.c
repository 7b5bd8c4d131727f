/* Checked HDF5 reads: each function looks at the attribute's or dataset's type and dataspace
 * before anything is read, so that a crafted file gets one line naming the file, the object
 * and what was expected instead of a write past the end of a buffer. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/h5_read.h"

/* ---- messages ----------------------------------------------------------------------------- */

/* "checkpoint 'F': attribute 'dtype' of /model.norm.weight <detail>; <todo>". `name` is the
 * attribute, or NULL for the dataset obj itself. */
static rf_status fail_at(const rf_h5_source *src, hid_t obj, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static rf_status fail_at(const rf_h5_source *src, hid_t obj, const char *name, const char *fmt,
                         ...) {
  if (src->quiet)
    return src->bad;
  char where[512] = "?", detail[256];
  if (H5Iget_name(obj, where, sizeof where) < 0)
    snprintf(where, sizeof where, "?");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  if (name)
    return rf_fail(src->bad, "%s '%s': attribute '%s' of %s %s%s%s", src->kind, src->path, name,
                   where, detail, src->todo ? "; " : "", src->todo ? src->todo : "");
  return rf_fail(src->bad, "%s '%s': dataset %s %s%s%s", src->kind, src->path, where, detail,
                 src->todo ? "; " : "", src->todo ? src->todo : "");
}

static const char *class_name(H5T_class_t cls) {
  static const char *const names[] = {"integer",  "float",           "time",     "string",
                                      "bitfield", "opaque",          "compound", "reference",
                                      "enum",     "variable-length", "array"};
  return (int)cls >= 0 && (int)cls < (int)RF_ARRAY_LEN(names) ? names[cls] : "unknown type";
}

/* ---- attributes --------------------------------------------------------------------------- */

typedef struct {
  hid_t attr, type, space;
} attr_ids;

static void close_attr(attr_ids *a) {
  if (a->space >= 0)
    H5Sclose(a->space);
  if (a->type >= 0)
    H5Tclose(a->type);
  if (a->attr >= 0)
    H5Aclose(a->attr);
  a->attr = a->type = a->space = H5I_INVALID_HID;
}

/* Opens attribute `name` and checks that it holds exactly `count` elements in at most one
 * dimension, of class `cls` (or, with numeric set, integer or float). */
static rf_status open_attr(const rf_h5_source *src, hid_t obj, const char *name, H5T_class_t cls,
                           int numeric, hssize_t count, attr_ids *a) {
  a->attr = a->type = a->space = H5I_INVALID_HID;
  htri_t exists = H5Aexists(obj, name);
  if (exists == 0)
    return fail_at(src, obj, name, "is missing");
  if (exists < 0 || (a->attr = H5Aopen(obj, name, H5P_DEFAULT)) < 0 ||
      (a->type = H5Aget_type(a->attr)) < 0 || (a->space = H5Aget_space(a->attr)) < 0) {
    close_attr(a);
    return fail_at(src, obj, name, "cannot be opened (damaged)");
  }
  H5T_class_t got = H5Tget_class(a->type);
  int rank = H5Sget_simple_extent_ndims(a->space);
  hssize_t n = H5Sget_simple_extent_npoints(a->space);
  rf_status st = RF_OK;
  if (numeric ? got != H5T_INTEGER && got != H5T_FLOAT : got != cls)
    st = fail_at(src, obj, name, "is an HDF5 %s, expected %s", class_name(got),
                 numeric             ? "a number"
                 : cls != H5T_STRING ? class_name(cls)
                 : count == 1        ? "a string"
                                     : "strings");
  else if (rank < 0 || rank > 1)
    st = fail_at(src, obj, name, "has %d dimensions, expected at most 1", rank);
  else if (n != count)
    st = fail_at(src, obj, name, "holds %" PRId64 " elements, expected %" PRId64, (int64_t)n,
                 (int64_t)count);
  if (st != RF_OK)
    close_attr(a);
  return st;
}

rf_status rf_h5_attr_read_num(const rf_h5_source *src, hid_t obj, const char *name, hid_t mem_type,
                              void *out) {
  attr_ids a;
  RF_TRY(open_attr(src, obj, name, H5T_NO_CLASS, 1, 1, &a));
  rf_status st = RF_OK;
  if (H5Aread(a.attr, mem_type, out) < 0)
    st = fail_at(src, obj, name, "cannot be read as a %zu-byte number", H5Tget_size(mem_type));
  close_attr(&a);
  return st;
}

/* Reads the `count` strings of an attribute already checked by open_attr into out[count]
 * slots of `width` bytes. */
static rf_status read_strings(const rf_h5_source *src, hid_t obj, const char *name, attr_ids *a,
                              int count, char *out, size_t width) {
  hid_t mem = H5Tcopy(H5T_C_S1);
  RF_H5(mem);
  rf_status st = RF_OK;
  int vlen = H5Tis_variable_str(a->type) > 0;
  size_t size = vlen ? 0 : H5Tget_size(a->type);
  if (!vlen && (size == 0 || size > RF_H5_STRING_MAX)) {
    st = fail_at(src, obj, name, "is a string of %zu bytes, more than the %zu refit reads", size,
                 RF_H5_STRING_MAX);
    goto done;
  }
  /* A vlen read fills count pointers; a fixed one count strings of size + 1 bytes, the +1
   * making room for the terminator that the memory type adds. */
  size_t slot = vlen ? sizeof(char *) : size + 1;
  char *buf = rf_calloc((size_t)RF_MAX(count, 1), slot, "a string attribute");
  if (!buf) {
    st = RF_ERR_NOMEM;
    goto done;
  }
  if (H5Tset_size(mem, vlen ? H5T_VARIABLE : size + 1) < 0 ||
      H5Tset_cset(mem, H5Tget_cset(a->type)) < 0 || H5Tset_strpad(mem, H5T_STR_NULLTERM) < 0 ||
      H5Aread(a->attr, mem, buf) < 0) {
    free(buf);
    st = fail_at(src, obj, name, "cannot be read as strings (damaged)");
    goto done;
  }
  for (int i = 0; i < count; i++) {
    const char *s = vlen ? ((char **)buf)[i] : buf + (size_t)i * slot;
    if (!s)
      s = "";
    size_t n = vlen ? strnlen(s, RF_H5_STRING_MAX) : strnlen(s, size);
    n = RF_MIN(n, width - 1);
    memcpy(out + (size_t)i * width, s, n);
    out[(size_t)i * width + n] = '\0';
    if (vlen)
      H5free_memory(((char **)buf)[i]);
  }
  free(buf);
done:
  H5Tclose(mem);
  return st;
}

rf_status rf_h5_attr_read_str(const rf_h5_source *src, hid_t obj, const char *name, char *buf,
                              size_t len) {
  if (len == 0)
    return rf_fail(RF_ERR_INTERNAL, "rf_h5_attr_read_str: no room for attribute '%s'", name);
  buf[0] = '\0';
  attr_ids a;
  RF_TRY(open_attr(src, obj, name, H5T_STRING, 0, 1, &a));
  rf_status st = read_strings(src, obj, name, &a, 1, buf, len);
  close_attr(&a);
  return st;
}

rf_status rf_h5_attr_read_strs(const rf_h5_source *src, hid_t obj, const char *name, int count,
                               char *out, size_t width) {
  if (count < 0 || width == 0)
    return rf_fail(RF_ERR_INTERNAL, "rf_h5_attr_read_strs: no room for attribute '%s'", name);
  attr_ids a;
  RF_TRY(open_attr(src, obj, name, H5T_STRING, 0, count, &a));
  rf_status st = read_strings(src, obj, name, &a, count, out, width);
  close_attr(&a);
  return st;
}

/* ---- dataset extents ---------------------------------------------------------------------- */

rf_status rf_h5_dataset_extent(const rf_h5_source *src, hid_t dset, int rank, hsize_t max_elements,
                               hsize_t *dims) {
  hid_t space = H5Dget_space(dset);
  if (space < 0)
    return fail_at(src, dset, NULL, "has no readable dataspace (damaged)");
  hsize_t got[H5S_MAX_RANK];
  int nd = H5Sget_simple_extent_ndims(space);
  if (nd >= 0 && nd <= H5S_MAX_RANK)
    nd = H5Sget_simple_extent_dims(space, got, NULL);
  H5Sclose(space);
  if (nd != rank)
    return fail_at(src, dset, NULL, "has %d dimensions, expected %d", nd, rank);
  char shape[256] = "[";
  size_t used = 1;
  int too_many = 0;
  hsize_t total = 1;
  for (int d = 0; d < rank; d++) {
    used += (size_t)snprintf(shape + used, sizeof shape - RF_MIN(used, sizeof shape), "%s%llu",
                             d ? ", " : "", (unsigned long long)got[d]);
    used = RF_MIN(used, sizeof shape);
    /* total * got[d] > max_elements, asked without multiplying past 64 bits */
    if (got[d] != 0 && total > max_elements / got[d])
      too_many = 1;
    else
      total *= got[d];
    dims[d] = got[d];
  }
  if (too_many) {
    snprintf(shape + RF_MIN(used, sizeof shape - 2), 2, "]");
    return fail_at(src, dset, NULL, "has shape %s, more than the %llu elements refit reads there",
                   shape, (unsigned long long)max_elements);
  }
  return RF_OK;
}
