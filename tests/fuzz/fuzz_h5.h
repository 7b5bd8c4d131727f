/* Building small HDF5 files from fuzz input, for the structure-aware targets: random bytes
 * almost never pass HDF5's signature check, so the input chooses what goes into a well-formed
 * file instead (names, type classes, sizes, ranks, element counts, extents, layouts), and the
 * reader meets the odd shapes a foreign or damaged writer could leave. */
#ifndef RF_FUZZ_H5_H
#define RF_FUZZ_H5_H

#include <hdf5.h>

#include "fuzz.h"

/* Attribute `name` on obj, meant to hold `value`: usually a scalar string (variable- or
 * fixed-length), else a string array of a few elements, an empty or null dataspace, a number,
 * or a string read from the input instead of `value`. */
void fuzz_h5_attr_str(hid_t obj, const char *name, const char *value, fuzz_input *in);

/* Attribute `name` on obj, meant to hold the number `value`: an int64 or double scalar, or an
 * array, a string or a narrow integer, as the input chooses. */
void fuzz_h5_attr_num(hid_t obj, const char *name, double value, fuzz_input *in);

/* A dataspace of `rank` dims (0 = scalar) whose extents are `dims` or, as the input chooses,
 * one of them off by one, zero or huge; a null dataspace now and then. */
hid_t fuzz_h5_space(int rank, const hsize_t *dims, fuzz_input *in);

/* A dataset creation property list: contiguous, compact or chunked (perhaps compressed),
 * with space allocated early or late. */
hid_t fuzz_h5_dcpl(hid_t space, fuzz_input *in);

/* Writes `size` bytes of the input (zeros past its end) to a dataset of any type, when the
 * input chooses to and the dataset is small; otherwise leaves it unwritten. */
void fuzz_h5_fill(hid_t dset, fuzz_input *in);

/* Cuts the file at path to a length the input picks, now and then (truncated files). */
void fuzz_h5_truncate(const char *path, fuzz_input *in);

#endif
