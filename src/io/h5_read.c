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

rf_status rf_h5_dataset_stored(const rf_h5_source *src, hid_t dset, hsize_t elements) {
  hid_t type = H5Dget_type(dset), dcpl = H5Dget_create_plist(dset);
  size_t size = type >= 0 ? H5Tget_size(type) : 0;
  int filters = dcpl >= 0 ? H5Pget_nfilters(dcpl) : -1;
  if (type >= 0)
    H5Tclose(type);
  if (dcpl >= 0)
    H5Pclose(dcpl);
  if (size == 0 || filters < 0)
    return fail_at(src, dset, NULL, "has no readable type or layout (damaged)");
  hsize_t stored = H5Dget_storage_size(dset);
  /* elements * size, saturating rather than wrapping past 64 bits */
  hsize_t declared = elements > HSIZE_UNDEF / size ? HSIZE_UNDEF : elements * size;
  if (elements == 0 || (filters > 0 ? stored > 0 : stored >= declared))
    return RF_OK;
  char want[32], got[32];
  rf_format_bytes((int64_t)RF_MIN(declared, (hsize_t)INT64_MAX), want, sizeof want);
  rf_format_bytes((int64_t)RF_MIN(stored, (hsize_t)INT64_MAX), got, sizeof got);
  return fail_at(src, dset, NULL, "declares %s of data but the file holds %s of it (never written)",
                 want, got);
}

/* ---- objects and their types --------------------------------------------------------------- */

static const char *kind_name(H5I_type_t kind) {
  return kind == H5I_GROUP      ? "a group"
         : kind == H5I_DATASET  ? "a dataset"
         : kind == H5I_DATATYPE ? "a named datatype"
                                : "an object of another kind";
}

rf_status rf_h5_open_object(const rf_h5_source *src, hid_t loc, const char *name, H5I_type_t want,
                            hid_t *out) {
  *out = H5I_INVALID_HID;
  char where[512] = "", path[1024];
  if (H5Iget_name(loc, where, sizeof where) < 0)
    snprintf(where, sizeof where, "?");
  snprintf(path, sizeof path, "%s%s%s", where, strcmp(where, "/") == 0 ? "" : "/", name);
  hid_t obj = H5Oopen(loc, name, H5P_DEFAULT);
  H5I_type_t got = obj >= 0 ? H5Iget_type(obj) : H5I_BADID;
  if (got == want) {
    *out = obj;
    return RF_OK;
  }
  if (obj >= 0)
    H5Oclose(obj);
  if (src->quiet)
    return src->bad;
  if (got == H5I_BADID)
    return rf_fail(src->bad, "%s '%s': %s cannot be opened (damaged)%s%s", src->kind, src->path,
                   path, src->todo ? "; " : "", src->todo ? src->todo : "");
  return rf_fail(src->bad, "%s '%s': %s is %s, expected %s%s%s", src->kind, src->path, path,
                 kind_name(got), kind_name(want), src->todo ? "; " : "",
                 src->todo ? src->todo : "");
}

/* "4-byte floats", "fixed-length strings", "an HDF5 array": what a type is, for the messages
 * below. */
static void describe_type(hid_t type, char *buf, size_t len) {
  H5T_class_t cls = H5Tget_class(type);
  if (cls == H5T_INTEGER || cls == H5T_FLOAT)
    snprintf(buf, len, "%zu-byte %ss", H5Tget_size(type), class_name(cls));
  else if (cls == H5T_STRING)
    snprintf(buf, len, "%s strings",
             H5Tis_variable_str(type) > 0 ? "variable-length" : "fixed-length");
  else if (cls == H5T_COMPOUND)
    snprintf(buf, len, "a table (an HDF5 compound)");
  else
    snprintf(buf, len, "an HDF5 %s", class_name(cls));
}

/* Whether type is of class cls and, where size is not 0, `size` bytes. */
static int type_is(hid_t type, H5T_class_t cls, size_t size) {
  return H5Tget_class(type) == cls && (size == 0 || H5Tget_size(type) == size);
}

rf_status rf_h5_dataset_number(const rf_h5_source *src, hid_t dset, H5T_class_t cls, size_t size) {
  hid_t type = H5Dget_type(dset);
  if (type < 0)
    return fail_at(src, dset, NULL, "has no readable type (damaged)");
  char got[64];
  describe_type(type, got, sizeof got);
  int ok = type_is(type, cls, size);
  H5Tclose(type);
  return ok ? RF_OK
            : fail_at(src, dset, NULL, "holds %s, expected %zu-byte %ss", got, size,
                      class_name(cls));
}

/* Whether member type m has the form `want` describes; if not, what was expected in words. */
static int member_fits(hid_t m, const rf_h5_member *want, char *expected, size_t len) {
  if (want->cls == H5T_STRING) {
    snprintf(expected, len, "a fixed-length string");
    return H5Tget_class(m) == H5T_STRING && H5Tis_variable_str(m) == 0;
  }
  if (want->cls != H5T_ARRAY) {
    snprintf(expected, len, "a %zu-byte %s", want->size, class_name(want->cls));
    return type_is(m, want->cls, want->size);
  }
  snprintf(expected, len, "a 1-D array of %zu-byte %ss", want->size, class_name(want->base));
  if (H5Tget_class(m) != H5T_ARRAY || H5Tget_array_ndims(m) != 1)
    return 0;
  hid_t base = H5Tget_super(m);
  int ok = base >= 0 && type_is(base, want->base, want->size);
  if (base >= 0)
    H5Tclose(base);
  return ok;
}

rf_status rf_h5_dataset_table(const rf_h5_source *src, hid_t dset, const rf_h5_member *members,
                              int count) {
  hid_t type = H5Dget_type(dset);
  if (type < 0)
    return fail_at(src, dset, NULL, "has no readable type (damaged)");
  rf_status st = RF_OK;
  char got[64], expected[96];
  if (H5Tget_class(type) != H5T_COMPOUND) {
    describe_type(type, got, sizeof got);
    st = fail_at(src, dset, NULL, "holds %s, expected a table (an HDF5 compound)", got);
  }
  for (int i = 0; i < count && st == RF_OK; i++) {
    int index = H5Tget_member_index(type, members[i].name);
    hid_t m = index >= 0 ? H5Tget_member_type(type, (unsigned)index) : H5I_INVALID_HID;
    if (m < 0) {
      st = fail_at(src, dset, NULL, "has no member '%s'", members[i].name);
      break;
    }
    if (!member_fits(m, &members[i], expected, sizeof expected)) {
      describe_type(m, got, sizeof got);
      st = fail_at(src, dset, NULL, "member '%s' holds %s, expected %s", members[i].name, got,
                   expected);
    }
    H5Tclose(m);
  }
  H5Tclose(type);
  return st;
}

rf_status rf_h5_dataset_read(const rf_h5_source *src, hid_t dset, hid_t mem_type, hid_t mem_space,
                             hid_t file_space, void *buf) {
  return rf_h5_dataset_read_with(src, dset, mem_type, mem_space, file_space, H5P_DEFAULT, buf);
}

rf_status rf_h5_dataset_read_with(const rf_h5_source *src, hid_t dset, hid_t mem_type,
                                  hid_t mem_space, hid_t file_space, hid_t xfer, void *buf) {
  if (H5Dread(dset, mem_type, mem_space, file_space, xfer, buf) < 0)
    return fail_at(src, dset, NULL,
                   "cannot be read (damaged, or compressed with a filter this "
                   "HDF5 lacks)");
  return RF_OK;
}
