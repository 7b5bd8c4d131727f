/* Checked reads of what an HDF5 file controls: the attributes and dataset extents of
 * checkpoints and results files. H5Aread and H5Dread write as many elements as the file says
 * into whatever buffer they are given, so every read in src/io/ goes through these functions,
 * which check the class, size, rank and element count first and size the buffers from what
 * was checked. Private to src/io/. */
#ifndef RF_H5_READ_H
#define RF_H5_READ_H

#include <hdf5.h>

#include "core/core.h"

/* How the one-line errors name the file and what the user should do. */
typedef struct {
  const char *kind; /* "checkpoint", "results file" */
  const char *path;
  rf_status bad;    /* the status of a file that does not hold what refit expects */
  const char *todo; /* appended after "; ", or NULL */
  int quiet;        /* fail without logging: the caller decides what an odd file means */
} rf_h5_source;

/* The longest string attribute refit reads; anything longer is not refit's. */
#define RF_H5_STRING_MAX ((size_t)1 << 16)

/* Reads the numeric attribute `name` of obj, one integer or float element (scalar or an array
 * of one), converted to mem_type (a native integer or float type) into out. */
rf_status rf_h5_attr_read_num(const rf_h5_source *src, hid_t obj, const char *name, hid_t mem_type,
                              void *out);

/* Reads the string attribute `name` of obj, one fixed- or variable-length string of at most
 * RF_H5_STRING_MAX bytes, into buf (cut to len - 1 bytes, always NUL-terminated). */
rf_status rf_h5_attr_read_str(const rf_h5_source *src, hid_t obj, const char *name, char *buf,
                              size_t len);

/* Reads the 1-D string attribute `name` of obj, which must hold exactly `count` strings, into
 * out: count slots of `width` bytes, each cut to width - 1 bytes and NUL-terminated. */
rf_status rf_h5_attr_read_strs(const rf_h5_source *src, hid_t obj, const char *name, int count,
                               char *out, size_t width);

/* The extent of dataset dset, which must have `rank` dimensions and at most max_elements
 * elements in all (checked without overflow), into dims[rank]. Callers size their buffers
 * from dims, so a file that claims more elements than refit ever writes cannot make them
 * allocate or overflow. */
rf_status rf_h5_dataset_extent(const rf_h5_source *src, hid_t dset, int rank, hsize_t max_elements,
                               hsize_t *dims);

/* Checks that dataset dset, of `elements` elements, is stored in the file: refit writes every
 * dataset in full, while a dataset declared and never written reads as fill values, any extent
 * for a few bytes of file, and reading it costs the time of its declared size. Without filters
 * the file must hold every byte; with them (a file repacked with compression) some. */
rf_status rf_h5_dataset_stored(const rf_h5_source *src, hid_t dset, hsize_t elements);

/* Opens the object `name` below loc, which must be of kind `want` (H5I_GROUP or H5I_DATASET):
 * H5Gopen2 and H5Dopen2 fail without saying why on an object of the other kind, and refit
 * names it instead. The caller closes *out with H5Oclose. */
rf_status rf_h5_open_object(const rf_h5_source *src, hid_t loc, const char *name, H5I_type_t want,
                            hid_t *out);

/* Checks that the elements of dataset dset are numbers of class cls (H5T_INTEGER, H5T_FLOAT)
 * and `size` bytes, as refit writes them. */
rf_status rf_h5_dataset_number(const rf_h5_source *src, hid_t dset, H5T_class_t cls, size_t size);

/* One member of a table (a compound dataset) as refit reads it: a number of class cls and
 * `size` bytes, a fixed-length string (H5T_STRING, size 0), or a 1-D array (H5T_ARRAY) of
 * numbers of class `base` and `size` bytes. */
typedef struct {
  const char *name;
  H5T_class_t cls, base;
  size_t size;
} rf_h5_member;

/* Checks that dset is a table holding every one of `members` in the form given; other members
 * are not looked at (reads match members by name). HDF5 converts between the file's and the
 * reader's types only where the forms agree, and fails deep inside H5Dread otherwise. */
rf_status rf_h5_dataset_table(const rf_h5_source *src, hid_t dset, const rf_h5_member *members,
                              int count);

/* H5Dread of the selection file_space of dset into buf, failing with one line naming the
 * dataset (damaged data, a filter this HDF5 lacks) instead of HDF5's stack. */
rf_status rf_h5_dataset_read(const rf_h5_source *src, hid_t dset, hid_t mem_type, hid_t mem_space,
                             hid_t file_space, void *buf);
/* The same with a transfer property list of the caller's (conversion buffers of its size). */
rf_status rf_h5_dataset_read_with(const rf_h5_source *src, hid_t dset, hid_t mem_type,
                                  hid_t mem_space, hid_t file_space, hid_t xfer, void *buf);

#endif
