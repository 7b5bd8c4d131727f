/* The HDF5 file builder of the structure-aware fuzz targets (fuzz_h5.h). Every HDF5 call may
 * fail on a combination the input chose (a compact layout too large, a chunk of a scalar):
 * failures are ignored, the object is simply not there, which is one more shape to read. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_h5.h"

static void close_id(hid_t id, herr_t (*fn)(hid_t)) {
  if (id >= 0)
    fn(id);
}

/* A string for an attribute: the intended one most of the time, one read from the input
 * otherwise (which may hold no terminator within the fixed size). */
static const char *pick_text(const char *value, fuzz_input *in, char *buf, size_t len) {
  if (fuzz_pick(in, 4) != 0)
    return value;
  fuzz_string(in, buf, len);
  return buf;
}

static void write_attr(hid_t obj, const char *name, hid_t type, hid_t space, const void *data) {
  H5Adelete(obj, name); /* an input may name the same attribute twice */
  hid_t a = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  if (a >= 0 && data)
    H5Awrite(a, type, data);
  close_id(a, H5Aclose);
}

/* Element counts of the non-scalar shapes: 0 (empty), 1, 2, 3. */
static hid_t attr_space(fuzz_input *in, hsize_t *count) {
  unsigned shape = fuzz_pick(in, 8);
  if (shape < 5) {
    *count = 1;
    return H5Screate(H5S_SCALAR);
  }
  if (shape == 5) {
    *count = 0;
    return H5Screate(H5S_NULL);
  }
  hsize_t dims[2] = {fuzz_pick(in, 4), 1 + fuzz_pick(in, 2)};
  int rank = shape == 6 ? 1 : 2;
  *count = rank == 1 ? dims[0] : dims[0] * dims[1];
  return H5Screate_simple(rank, dims, NULL);
}

void fuzz_h5_attr_str(hid_t obj, const char *name, const char *value, fuzz_input *in) {
  char buf[64];
  unsigned kind = fuzz_pick(in, 8);
  if (kind >= 6) {
    fuzz_h5_attr_num(obj, name, (double)strlen(value), in);
    return;
  }
  hsize_t count;
  hid_t space = attr_space(in, &count), type = H5Tcopy(H5T_C_S1);
  const char *text = pick_text(value, in, buf, sizeof buf);
  if (kind < 3) { /* variable-length, h5py's str */
    const char *strings[6];
    for (hsize_t i = 0; i < count && i < 6; i++)
      strings[i] = text;
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, kind == 0 ? H5T_CSET_UTF8 : H5T_CSET_ASCII);
    if (count <= 6)
      write_attr(obj, name, type, space, strings);
  } else { /* fixed-length: exact, padded, or cut short */
    size_t n = strlen(text), size = n + fuzz_pick(in, 3);
    if (size > n && kind == 5)
      size = n - (n > 0);
    size = size ? size : 1;
    H5Tset_size(type, size);
    H5Tset_strpad(type, kind == 3   ? H5T_STR_NULLTERM
                        : kind == 4 ? H5T_STR_NULLPAD
                                    : H5T_STR_SPACEPAD);
    char *data = calloc(count ? count : 1, size);
    for (hsize_t i = 0; data && i < count; i++)
      memcpy(data + i * size, text, n < size ? n : size);
    write_attr(obj, name, type, space, data);
    free(data);
  }
  close_id(type, H5Tclose);
  close_id(space, H5Sclose);
}

void fuzz_h5_attr_num(hid_t obj, const char *name, double value, fuzz_input *in) {
  const hid_t types[] = {H5T_STD_I64LE,  H5T_IEEE_F64LE, H5T_STD_U8LE,
                         H5T_IEEE_F32BE, H5T_STD_I32BE,  H5T_STD_U64LE};
  unsigned kind = fuzz_pick(in, 8);
  if (kind == 7) {
    fuzz_h5_attr_str(obj, name, "12", in);
    return;
  }
  hid_t type = types[kind % RF_ARRAY_LEN(types)];
  if (fuzz_pick(in, 4) == 0) /* a value from the input: NaN, infinities, huge, negative */
    value = (double)(int64_t)fuzz_u64(in);
  hsize_t count;
  hid_t space = attr_space(in, &count);
  double values[6];
  for (int i = 0; i < 6; i++)
    values[i] = value;
  if (count <= 6) {
    H5Adelete(obj, name);
    hid_t a = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0)
      H5Awrite(a, H5T_NATIVE_DOUBLE, values); /* HDF5 converts, clipping what does not fit */
    close_id(a, H5Aclose);
  }
  close_id(space, H5Sclose);
}

hid_t fuzz_h5_space(int rank, const hsize_t *dims, fuzz_input *in) {
  unsigned how = fuzz_pick(in, 16);
  if (how == 15)
    return H5Screate(H5S_NULL);
  if (how == 14)
    rank = (int)fuzz_pick(in, 4);
  if (rank == 0)
    return H5Screate(H5S_SCALAR);
  hsize_t d[4], max[4];
  for (int k = 0; k < rank; k++) {
    d[k] = k < 2 ? dims[k] : 1 + fuzz_pick(in, 3);
    max[k] = d[k];
  }
  if (how >= 10) {
    int k = (int)fuzz_pick(in, (unsigned)rank);
    static const hsize_t odd[] = {0, 1, 1000000, (hsize_t)1 << 40};
    unsigned which = fuzz_pick(in, 6);
    d[k] = which < 4 ? odd[which] : which == 4 ? d[k] + 1 : (d[k] ? d[k] - 1 : 0);
    max[k] = H5S_UNLIMITED;
  }
  return H5Screate_simple(rank, d, max);
}

hid_t fuzz_h5_dcpl(hid_t space, fuzz_input *in) {
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  unsigned layout = fuzz_pick(in, 4);
  int rank = H5Sget_simple_extent_ndims(space);
  if (layout == 1) {
    H5Pset_layout(dcpl, H5D_COMPACT);
  } else if ((layout >= 2 || H5Sget_simple_extent_type(space) == H5S_SIMPLE) && rank > 0) {
    hsize_t dims[H5S_MAX_RANK], chunk[H5S_MAX_RANK];
    hsize_t maxd[H5S_MAX_RANK];
    H5Sget_simple_extent_dims(space, dims, maxd);
    int unlimited = 0;
    for (int k = 0; k < rank; k++) {
      unlimited |= maxd[k] == H5S_UNLIMITED;
      chunk[k] = 1 + fuzz_pick(in, 8);
    }
    if (layout >= 2 || unlimited) {
      H5Pset_chunk(dcpl, rank, chunk);
      if (layout == 3)
        H5Pset_deflate(dcpl, 1 + fuzz_pick(in, 9));
    }
  }
  /* Early allocation writes the fill value over the whole extent: only for small ones, or a
   * huge extent would take the file builder minutes and terabytes. */
  int early = fuzz_pick(in, 2) && H5Sget_simple_extent_npoints(space) <= 1 << 16;
  H5Pset_alloc_time(dcpl, early ? H5D_ALLOC_TIME_EARLY : H5D_ALLOC_TIME_LATE);
  H5Pset_fill_time(dcpl, early ? H5D_FILL_TIME_IFSET : H5D_FILL_TIME_NEVER);
  return dcpl;
}

void fuzz_h5_fill(hid_t dset, fuzz_input *in) {
  if (fuzz_pick(in, 8) == 0)
    return;
  hid_t type = H5Dget_type(dset), space = H5Dget_space(dset);
  hssize_t n = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
  size_t size = type >= 0 ? H5Tget_size(type) : 0;
  /* Variable-length data would be pointers: written only as fixed-size bytes. */
  int plain = type >= 0 && H5Tdetect_class(type, H5T_VLEN) <= 0 && H5Tis_variable_str(type) <= 0;
  if (plain && n > 0 && size > 0 && (size_t)n * size <= 1 << 16) {
    size_t bytes = (size_t)n * size;
    unsigned char *data = calloc(1, bytes);
    for (size_t i = 0; data && i < bytes && in->at < in->size && i < 256; i++)
      data[i] = fuzz_byte(in);
    if (data)
      H5Dwrite(dset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    free(data);
  }
  close_id(space, H5Sclose);
  close_id(type, H5Tclose);
}

void fuzz_h5_truncate(const char *path, fuzz_input *in) {
  if (fuzz_pick(in, 16) != 0)
    return;
  FILE *f = fopen(path, "rb");
  if (!f)
    return;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fclose(f);
  /* A file that cannot be cut is fuzzed whole: the reader sees a valid file instead. */
  if (size > 0 && truncate(path, (off_t)((uint64_t)size * fuzz_pick(in, 256) / 256)) != 0)
    return;
}
