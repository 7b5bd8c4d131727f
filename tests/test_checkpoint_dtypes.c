/* Checkpoints of a model whose tensors keep dtypes of their own: tiny with every norm fp32 and
 * layer 0's o_proj fp16 among bf16 weights. Written as safetensors (one file, and shards) and
 * HDF5, each tensor carries its own dtype (the safetensors tag and byte range, the HDF5 type)
 * and reads back element by element and by checksum equal to the generator's. A checkpoint of
 * another dtype for a tensor with its own is refused without pointing at --dtype, which does
 * not change it; a byte range sized for the model's dtype instead of the tensor's is refused.
 * And a run whose trainer shards come from each file verifies every element against it, in
 * all three modes, with the same checksums on both sides as the file's. */
#include <hdf5.h>

#include "engine/engine.h"
#include "test_checkpoint_helpers.h"
#include "transport/transport_loopback.h"

/* The dtype each tensor must have, decided from its name and kind alone, not from the model. */
static rf_dtype wanted_dtype(const rf_tensor *t) {
  if (t->kind == RF_T_NORM)
    return RF_DTYPE_FP32;
  if (strcmp(t->name, "model.layers.0.self_attn.o_proj.weight") == 0)
    return RF_DTYPE_FP16;
  return RF_DTYPE_BF16;
}

static void mix_dtypes(rf_model *m) {
  for (int t = 0; t < m->tensor_count; t++)
    if (wanted_dtype(&m->tensors[t]) != RF_DTYPE_BF16)
      ASSERT_OK(rf_model_set_tensor_dtype(m, t, wanted_dtype(&m->tensors[t])));
}

/* Every tensor's safetensors tag and byte range are its own dtype's; the ranges tile the data. */
static void check_tags(const char *path, const rf_model *m) {
  static const char *tags[] = {
      [RF_DTYPE_BF16] = "BF16", [RF_DTYPE_FP16] = "F16", [RF_DTYPE_FP32] = "F32"};
  size_t len;
  char *buf = slurp(path, &len);
  json_t *h = json_loadb(buf + 8, header_len(buf), 0, NULL);
  ASSERT_TRUE(h != NULL);
  int64_t end = 0;
  for (int i = 0; i < m->tensor_count; i++) {
    const rf_tensor *t = &m->tensors[i];
    json_t *e = json_object_get(h, t->name), *off = json_object_get(e, "data_offsets");
    ASSERT_STR_EQ(json_string_value(json_object_get(e, "dtype")), tags[wanted_dtype(t)]);
    ASSERT_EQ(json_integer_value(json_array_get(off, 0)), end);
    end += t->numel * rf_dtype_size(wanted_dtype(t));
    ASSERT_EQ(json_integer_value(json_array_get(off, 1)), end);
  }
  ASSERT_EQ(end, 279168 + 320 * 2); /* the 320 norm elements at 4 bytes instead of 2 */
  json_decref(h);
  free(buf);
}

/* Every HDF5 dataset's type is its tensor's dtype: IEEE fp32, IEEE fp16, or uint16 (bf16). */
static void check_h5_types(const char *path, const rf_model *m) {
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  for (int i = 0; i < m->tensor_count; i++) {
    hid_t d = H5Dopen2(f, m->tensors[i].name, H5P_DEFAULT), ty = H5Dget_type(d);
    ASSERT_GE(ty, 0);
    rf_dtype want = wanted_dtype(&m->tensors[i]);
    ASSERT_EQ(H5Tget_class(ty), want == RF_DTYPE_BF16 ? H5T_INTEGER : H5T_FLOAT);
    ASSERT_EQ(H5Tget_size(ty), (size_t)rf_dtype_size(want));
    ASSERT_EQ(H5Aexists(d, "dtype"), want == RF_DTYPE_BF16);
    H5Tclose(ty);
    H5Dclose(d);
  }
  H5Fclose(f);
}

static void test_round_trips(const rf_model *m) {
  ASSERT_EQ(m->total_bytes, 279808);
  ASSERT_OK(rf_checkpoint_write(at_tmp("mixed.safetensors"), m, seed, "safetensors", 0));
  check_header(at_tmp("mixed.safetensors"), m);
  check_tags(at_tmp("mixed.safetensors"), m);
  check_checkpoint(at_tmp("mixed.safetensors"), m);
  ASSERT_OK(rf_checkpoint_write(at_tmp("mixed-sharded"), m, seed, "safetensors", 40000));
  ASSERT_EQ(rf_checkpoint_shard_count(m, "safetensors", 40000), 7);
  check_checkpoint(at_tmp("mixed-sharded"), m);
  ASSERT_OK(rf_checkpoint_write(at_tmp("mixed.h5"), m, seed, "hdf5", 0));
  check_h5_types(at_tmp("mixed.h5"), m);
  check_checkpoint(at_tmp("mixed.h5"), m);
}

/* model.norm.weight's byte range as long as it would be in bf16, the model's dtype. */
static void short_norm(json_t *h) {
  json_t *e = json_object_get(h, "model.norm.weight");
  json_int_t b = json_integer_value(json_array_get(json_object_get(e, "data_offsets"), 0));
  json_object_set_new(e, "data_offsets", json_pack("[I, I]", b, b + 128));
}

static void test_refusals(const rf_model *mixed, const rf_model *plain) {
  char line[1024], file[512];
  ASSERT_OK(rf_checkpoint_write(at_tmp("plain.safetensors"), plain, seed, "safetensors", 0));
  ASSERT_OK(rf_checkpoint_write(at_tmp("plain.h5"), plain, seed, "hdf5", 0));
  /* A bf16 file for the mixed model: the first tensor with a dtype of its own says so, and
   * --dtype, which leaves it alone, is not offered. */
  for (int k = 0; k < 2; k++) {
    snprintf(file, sizeof file, "%s", at_tmp(k ? "plain.h5" : "plain.safetensors"));
    snprintf(line, sizeof line,
             "checkpoint '%s': tensor model.layers.0.self_attn.o_proj.weight is BF16, the "
             "model needs F16 (its own dtype, which --dtype does not change; use another "
             "checkpoint)",
             file);
    expect_open_error(file, mixed, line);
  }
  /* The mixed file for the all-bf16 model: as for any file of another dtype. */
  for (int k = 0; k < 2; k++) {
    snprintf(file, sizeof file, "%s", at_tmp(k ? "mixed.h5" : "mixed.safetensors"));
    snprintf(line, sizeof line,
             "checkpoint '%s': tensor model.layers.0.self_attn.o_proj.weight is F16, the model "
             "needs BF16 (use --dtype fp16 or another checkpoint)",
             file);
    expect_open_error(file, plain, line);
  }
  /* The size check counts the tensor's own element size: 64 fp32 elements need 256 bytes. */
  snprintf(file, sizeof file, "%s", at_tmp("short-norm.safetensors"));
  rewrite_header(at_tmp("mixed.safetensors"), file, short_norm);
  size_t len;
  char *buf = slurp(file, &len);
  int64_t begin = 8 + (int64_t)header_len(buf) + 279808 - 65536 - 256;
  free(buf);
  snprintf(line, sizeof line,
           "checkpoint '%s': tensor model.norm.weight data [%" PRId64 ", %" PRId64
           ") holds 128 bytes, its shape and dtype need 256",
           file, begin, begin + 128);
  expect_open_error(file, mixed, line);

  /* A region of the model's element size for an fp32 tensor is refused, not filled. */
  rf_checkpoint *c;
  ASSERT_OK(rf_checkpoint_open(at_tmp("mixed.safetensors"), mixed, &c));
  int norm = rf_model_find(mixed, "model.norm.weight");
  rf_box whole = rf_box_whole(&mixed->tensors[norm]);
  uint16_t halves[64];
  rf_region r = rf_region_row_major(halves, &whole, 2);
  char err[512] = "";
  rf_log_capture(err, sizeof err);
  rf_status st = rf_checkpoint_read(c, norm, &whole, &r);
  rf_log_capture(NULL, 0);
  ASSERT_STATUS(st, RF_ERR_INTERNAL);
  snprintf(line, sizeof line,
           "checkpoint '%s': tensor model.norm.weight is fp32, 4 bytes an element, but the "
           "region to read it into has 2; build the region with the tensor's own element size",
           at_tmp("mixed.safetensors"));
  ASSERT_STR_EQ(err, line);
  rf_checkpoint_close(c);
}

/* One process holding trainer rank 0 (fsdp=1, JAX order: its 2-D shards are read from the file
 * transposed) and rollout rank 0 (tp=1), colocated, so every piece is a local copy into the
 * fused rollout tensors. The run's seed differs from the file's: only weights read from the
 * file can match it. */
static void test_run_from(const char *path, const rf_model *m) {
  rf_trainer_layout tl = {.fsdp = 1,
                          .tp = 1,
                          .dp = 1,
                          .ep = 1,
                          .pp = 1,
                          .style = RF_STYLE_TUNIX,
                          .order = RF_ORDER_JAX};
  rf_rollout_layout rl = {.tp = 1, .dp = 1};
  rf_layout lay;
  ASSERT_OK(rf_layout_init(&lay, m, &tl, &rl, RF_PLACEMENT_COLOCATED));
  /* The layout sizes each fused rollout tensor in its members' dtype. */
  for (int t = 0; t < m->tensor_count; t++) {
    const rf_rollout_tensor *rt = &lay.rollout_tensors[lay.slots[t].local];
    ASSERT_EQ(rt->bytes, rt->numel * rf_tensor_esize(&m->tensors[t]));
  }
  rf_plan plan;
  ASSERT_OK(rf_plan_build(&plan, &lay, RF_PLAN_P2P, NULL));
  rf_checkpoint *c;
  ASSERT_OK(rf_checkpoint_open(path, m, &c));
  uint64_t *file_sum = calloc((size_t)m->tensor_count, sizeof *file_sum);
  uint64_t *trainer = calloc((size_t)m->tensor_count, sizeof *trainer);
  uint64_t *rollout = calloc((size_t)m->tensor_count, sizeof *rollout);
  ASSERT_TRUE(file_sum && trainer && rollout);
  for (int t = 0; t < m->tensor_count; t++)
    ASSERT_OK(rf_checkpoint_checksum(c, t, &file_sum[t]));
  rf_buffers data;
  ASSERT_OK(rf_buffers_init(&data, &plan, RF_MEM_HOST, seed + 1, c, 0));
  rf_loopback *lb;
  ASSERT_OK(rf_loopback_create(&plan, 0, 10.0, &lb));
  rf_transport tp;
  ASSERT_OK(rf_loopback_open(lb, 0, &tp));
  for (int mode = 0; mode < RF_MODE_COUNT; mode++) {
    rf_engine e;
    double times[RF_PHASE_COUNT];
    ASSERT_OK(rf_engine_init(&e, &data, &tp, (rf_mode)mode, 4096, seed + 1, RF_INJECT_NONE, 0));
    ASSERT_OK(rf_engine_poison(&e));
    ASSERT_OK(rf_engine_iterate(&e, times, 0));
    ASSERT_EQ(rf_engine_check(&e, c), 0);
    memset(trainer, 0, (size_t)m->tensor_count * sizeof *trainer);
    memset(rollout, 0, (size_t)m->tensor_count * sizeof *rollout);
    ASSERT_OK(rf_engine_checksums(&e, trainer, rollout));
    for (int t = 0; t < m->tensor_count; t++) {
      ASSERT_U64_EQ(trainer[t], file_sum[t]);
      ASSERT_U64_EQ(rollout[t], file_sum[t]);
    }
    rf_engine_free(&e);
  }
  rf_transport_close(&tp);
  rf_loopback_free(lb);
  rf_buffers_free(&data);
  free(file_sum), free(trainer), free(rollout);
  rf_checkpoint_close(c);
  rf_plan_free(&plan);
  rf_layout_free(&lay);
}

int main(void) {
  snprintf(tmp, sizeof tmp, "/tmp/refit-test-checkpoint-dtypes-XXXXXX");
  ASSERT_TRUE(mkdtemp(tmp) != NULL);
  rf_model mixed, plain;
  ASSERT_OK(rf_model_load("tiny", &mixed));
  ASSERT_OK(rf_model_load("tiny", &plain));
  mix_dtypes(&mixed);
  test_round_trips(&mixed);
  test_refusals(&mixed, &plain);
  test_run_from(at_tmp("mixed.safetensors"), &mixed);
  test_run_from(at_tmp("mixed-sharded"), &mixed);
  test_run_from(at_tmp("mixed.h5"), &mixed);
  rf_model_free(&mixed);
  rf_model_free(&plain);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  ASSERT_EQ(system(cmd), 0);
  printf("test_checkpoint_dtypes: ok\n");
  return 0;
}
