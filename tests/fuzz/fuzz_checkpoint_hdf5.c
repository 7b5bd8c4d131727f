/* An HDF5 checkpoint (src/io/checkpoint_hdf5.c), structure-aware: the input chooses, for each
 * tensor of the micro model, whether its dataset is there, under its name or a link to another,
 * its type (bf16 as uint16 with or without the dtype attribute in its many string forms, fp16,
 * fp32, big-endian, integers, strings, compounds), its dataspace, layout and whether it was
 * written; the file may be cut short. The reader then opens and reads it like a run. */
#include <stdio.h>
#include <string.h>

#include "fuzz_h5.h"

/* The types a tensor's dataset may have; the first is what refit writes for bf16. */
static hid_t tensor_type(fuzz_input *in) {
  const hid_t plain[] = {H5T_STD_U16LE,  H5T_STD_U16BE,  H5T_STD_I16LE, H5T_IEEE_F32LE,
                         H5T_IEEE_F32BE, H5T_IEEE_F64LE, H5T_STD_U8LE,  H5T_STD_U32LE};
  unsigned kind = fuzz_pick(in, 16);
  if (kind < 8)
    return H5Tcopy(kind < 4 ? H5T_STD_U16LE : plain[kind]);
  hid_t t = -1;
  switch (kind) {
  case 8: /* fp16 the way h5py writes numpy.float16 */
  case 9: /* and with one field off */
    t = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(t, 15, 10, 5, 0, 10 - (kind == 9));
    H5Tset_size(t, 2);
    H5Tset_ebias(t, 15);
    break;
  case 10:
    t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, 1 + fuzz_pick(in, 4));
    break;
  case 11:
    t = H5Tcreate(H5T_COMPOUND, 4);
    H5Tinsert(t, "lo", 0, H5T_STD_U16LE);
    H5Tinsert(t, "hi", 2, H5T_STD_U16LE);
    break;
  case 12: {
    hsize_t two = 2;
    t = H5Tarray_create2(H5T_STD_U16LE, 1, &two);
    break;
  }
  case 13:
    t = H5Tenum_create(H5T_STD_U16LE);
    break;
  case 14:
    t = H5Tcreate(H5T_OPAQUE, 2);
    break;
  default:
    t = H5Tcopy(H5T_STD_U16LE);
    H5Tset_precision(t, 1 + fuzz_pick(in, 16));
  }
  return t;
}

static void add_tensor(hid_t f, const rf_tensor *t, const rf_model *model, fuzz_input *in) {
  unsigned how = fuzz_pick(in, 16);
  if (how == 15)
    return; /* missing */
  if (how == 14) {
    H5Gclose(H5Gcreate2(f, t->name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    return;
  }
  if (how == 13) { /* a soft link to another tensor's name, perhaps not there yet */
    H5Lcreate_soft(model->tensors[fuzz_pick(in, (unsigned)model->tensor_count)].name, f, t->name,
                   H5P_DEFAULT, H5P_DEFAULT);
    return;
  }
  if (how == 12) {
    H5Lcreate_external("absent.h5", "/x", f, t->name, H5P_DEFAULT, H5P_DEFAULT);
    return;
  }
  hsize_t dims[2] = {(hsize_t)t->shape[0], (hsize_t)t->shape[1]};
  hid_t type = tensor_type(in), space = fuzz_h5_space(t->ndim, dims, in);
  hid_t dcpl = fuzz_h5_dcpl(space, in);
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  hid_t d = H5Dcreate2(f, t->name, type, space, lcpl, dcpl, H5P_DEFAULT);
  if (d >= 0) {
    unsigned attrs = fuzz_pick(in, 4);
    if (attrs != 0)
      fuzz_h5_attr_str(d, "dtype", "bfloat16", in);
    if (attrs == 3)
      fuzz_h5_attr_str(d, "dtype ", "bfloat16", in);
    fuzz_h5_fill(d, in);
    H5Dclose(d);
  }
  H5Pclose(lcpl);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Tclose(type);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_quiet();
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  const rf_model *model = fuzz_model();
  fuzz_input in = {data, size, 0};
  char path[1100];
  snprintf(path, sizeof path, "%s/checkpoint.h5", fuzz_dir());
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0)
    return 0;
  for (int i = 0; i < model->tensor_count; i++)
    add_tensor(f, &model->tensors[i], model, &in);
  H5Fclose(f);
  fuzz_h5_truncate(path, &in);
  fuzz_use_checkpoint(path);
  return 0;
}
