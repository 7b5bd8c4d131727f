/* Checkpoints: the synthetic writer and the readers round-trip every element of the tiny
 * model in safetensors (one file, a lone model.safetensors, shards with an index) and HDF5,
 * for bf16, fp16 and fp32, into row-major, transposed and fused-slot regions; checksums match
 * the generator's; and each kind of bad checkpoint gives RF_ERR_CHECKPOINT with its exact
 * one-line message. */
#include <hdf5.h>
#include <sys/stat.h>

#include "test_checkpoint_helpers.h"

static void copy_file(const char *from, const char *to, size_t keep) {
  size_t len;
  char *buf = slurp(from, &len);
  spit(to, buf, RF_MIN(len, keep));
  free(buf);
}

static void test_round_trips(rf_model *m) {
  rf_dtype dts[] = {RF_DTYPE_BF16, RF_DTYPE_FP16, RF_DTYPE_FP32};
  for (int k = 0; k < 3; k++) {
    rf_model_set_dtype(m, dts[k]);
    const char *dn = rf_dtype_name(dts[k]);
    char single[64], sharded[64], h5[64], lone[64];
    snprintf(single, sizeof single, "ck-%s.safetensors", dn);
    snprintf(sharded, sizeof sharded, "ck-%s-sharded", dn);
    snprintf(h5, sizeof h5, "ck-%s.h5", dn);
    snprintf(lone, sizeof lone, "lone-%s", dn);

    ASSERT_OK(rf_checkpoint_write(at_tmp(single), m, seed, "safetensors", 0));
    check_header(at_tmp(single), m);
    check_checkpoint(at_tmp(single), m);

    /* A small shard size gives several shards; the embedding, larger than it, its own. */
    int64_t shard = 40000;
    int shards = rf_checkpoint_shard_count(m, "safetensors", shard);
    ASSERT_GT(shards, 3);
    ASSERT_OK(rf_checkpoint_write(at_tmp(sharded), m, seed, "safetensors", shard));
    for (int s = 1; s <= shards; s++) {
      char name[128];
      struct stat sb;
      snprintf(name, sizeof name, "%s/model-%05d-of-%05d.safetensors", sharded, s, shards);
      ASSERT_EQ(stat(at_tmp(name), &sb), 0);
      ASSERT_TRUE(sb.st_size <= 8 + 4096 + shard || s == 1 || s == shards);
    }
    check_checkpoint(at_tmp(sharded), m);
    char slash[80];
    snprintf(slash, sizeof slash, "%s/", sharded);
    check_checkpoint(at_tmp(slash), m);

    ASSERT_EQ(mkdir(at_tmp(lone), 0755), 0);
    char lone_file[96];
    snprintf(lone_file, sizeof lone_file, "%s/model.safetensors", lone);
    ASSERT_OK(rf_checkpoint_write(at_tmp(lone_file), m, seed, "safetensors", 0));
    check_checkpoint(at_tmp(lone), m);

    ASSERT_OK(rf_checkpoint_write(at_tmp(h5), m, seed, "hdf5", 0));
    check_checkpoint(at_tmp(h5), m);
    /* Found by its signature too, whatever it is called. */
    char renamed[64];
    snprintf(renamed, sizeof renamed, "ck-%s.weights", dn);
    copy_file(at_tmp(h5), at_tmp(renamed), SIZE_MAX);
    check_checkpoint(at_tmp(renamed), m);

    /* Writing again replaces the file; nothing half-written is left behind. */
    ASSERT_OK(rf_checkpoint_write(at_tmp(single), m, seed, "safetensors", 0));
    char partial[96];
    snprintf(partial, sizeof partial, "%s.partial", single);
    ASSERT_TRUE(access(at_tmp(partial), F_OK) != 0);
  }
  rf_model_set_dtype(m, RF_DTYPE_BF16);
}

/* ---- bad safetensors ---------------------------------------------------------------------- */

static void drop_up_proj(json_t *h) { json_object_del(h, "model.layers.0.mlp.up_proj.weight"); }
static void flip_down_proj(json_t *h) {
  json_object_set_new(json_object_get(h, "model.layers.0.mlp.down_proj.weight"), "shape",
                      json_pack("[i, i]", 128, 64));
}
static void overlap_q(json_t *h) {
  json_object_set_new(json_object_get(h, "model.layers.0.self_attn.q_proj.weight"), "data_offsets",
                      json_pack("[i, i]", 60000, 68192));
}
static void int_dtype(json_t *h) {
  json_object_set_new(json_object_get(h, "model.embed_tokens.weight"), "dtype", json_string("I64"));
}
static void short_embed(json_t *h) {
  json_object_set_new(json_object_get(h, "model.embed_tokens.weight"), "data_offsets",
                      json_pack("[i, i]", 0, 100));
}
static void scalar_norm(json_t *h) { json_object_set_new(h, "model.norm.weight", json_integer(5)); }
static void no_offsets(json_t *h) {
  json_object_del(json_object_get(h, "model.norm.weight"), "data_offsets");
}
static void extra_tensor(json_t *h) {
  json_object_set_new(
      h, "model.extra.weight",
      json_pack("{s:s, s:[i], s:[i, i]}", "dtype", "F64", "shape", 3, "data_offsets", 0, 24));
}

static void test_bad_safetensors(rf_model *m) {
  char good[512]; /* at_tmp's buffers are reused */
  snprintf(good, sizeof good, "%s", at_tmp("ck-bf16.safetensors"));
  size_t len;
  char *buf = slurp(good, &len);
  int64_t ds = 8 + (int64_t)header_len(buf);
  char line[1024];

  expect_open_error(at_tmp("absent.safetensors"), m,
                    (snprintf(line, sizeof line, "checkpoint '%s': no such file or directory",
                              at_tmp("absent.safetensors")),
                     line));

  copy_file(good, at_tmp("trunc.safetensors"), len - 100);
  snprintf(line, sizeof line,
           "checkpoint '%s': tensor lm_head.weight data [%" PRId64 ", %" PRId64
           ") ends beyond the file's %zu bytes (truncated)",
           at_tmp("trunc.safetensors"), ds + m->total_bytes - 65536, ds + m->total_bytes,
           len - 100);
  expect_open_error(at_tmp("trunc.safetensors"), m, line);

  copy_file(good, at_tmp("tiny.safetensors"), 5);
  snprintf(line, sizeof line,
           "checkpoint '%s': the file's 5 bytes are too few for a safetensors "
           "header (truncated or not safetensors)",
           at_tmp("tiny.safetensors"));
  expect_open_error(at_tmp("tiny.safetensors"), m, line);

  char *copy = malloc(len);
  memcpy(copy, buf, len);
  uint64_t big = 1000000;
  for (int k = 0; k < 8; k++)
    copy[k] = (char)(big >> (8 * k));
  spit(at_tmp("long.safetensors"), copy, len);
  snprintf(line, sizeof line,
           "checkpoint '%s': header length 1000000 is beyond the file's %zu "
           "bytes (truncated or not safetensors)",
           at_tmp("long.safetensors"), len);
  expect_open_error(at_tmp("long.safetensors"), m, line);

  /* Not JSON: the message carries jansson's own reason, on the same line. */
  memcpy(copy, buf, len);
  memcpy(copy + 8, "{\"bad\" ", 7);
  spit(at_tmp("json.safetensors"), copy, len);
  snprintf(line, sizeof line,
           "checkpoint '%s': the header is not valid JSON: ", at_tmp("json.safetensors"));
  rf_checkpoint *c;
  capture_begin();
  ASSERT_STATUS(rf_checkpoint_open(at_tmp("json.safetensors"), m, &c), RF_ERR_CHECKPOINT);
  char *err = capture_end();
  ASSERT_TRUE(strncmp(err, "refit: error: ", 14) == 0 && strstr(err, line) == err + 14);
  ASSERT_TRUE(strchr(err, '\n') == err + strlen(err) - 1);
  free(copy);

  struct {
    void (*edit)(json_t *h);
    const char *file, *message;
  } cases[] = {
      {drop_up_proj, "missing.safetensors",
       "tensor model.layers.0.mlp.up_proj.weight is missing; is it a checkpoint of model tiny? "
       "refit checkpoint writes a complete one"},
      {flip_down_proj, "shape.safetensors",
       "tensor model.layers.0.mlp.down_proj.weight has "
       "shape [128, 64], the model needs [64, 128]"},
      {overlap_q, "overlap.safetensors",
       "tensors model.embed_tokens.weight and "
       "model.layers.0.self_attn.q_proj.weight overlap in the "
       "file"},
      {int_dtype, "i64.safetensors",
       "tensor model.embed_tokens.weight is I64, which refit does "
       "not read; the model needs BF16"},
      {scalar_norm, "entry.safetensors", "the header entry 'model.norm.weight' is not an object"},
      {no_offsets, "fields.safetensors",
       "tensor model.norm.weight: the header entry needs a "
       "dtype string, a shape of sizes and data_offsets "
       "[begin, end]"},
  };
  for (size_t k = 0; k < RF_ARRAY_LEN(cases); k++) {
    rewrite_header(good, at_tmp(cases[k].file), cases[k].edit);
    snprintf(line, sizeof line, "checkpoint '%s': %s", at_tmp(cases[k].file), cases[k].message);
    expect_open_error(at_tmp(cases[k].file), m, line);
  }

  rewrite_header(good, at_tmp("size.safetensors"), short_embed);
  size_t len2;
  char *b2 = slurp(at_tmp("size.safetensors"), &len2);
  int64_t ds2 = 8 + (int64_t)header_len(b2);
  free(b2);
  snprintf(line, sizeof line,
           "checkpoint '%s': tensor model.embed_tokens.weight data [%" PRId64 ", %" PRId64
           ") holds 100 bytes, its shape and dtype need 65536",
           at_tmp("size.safetensors"), ds2, ds2 + 100);
  expect_open_error(at_tmp("size.safetensors"), m, line);

  /* A tensor the model lacks is ignored, whatever it holds. */
  rewrite_header(good, at_tmp("extra.safetensors"), extra_tensor);
  ASSERT_OK(rf_checkpoint_open(at_tmp("extra.safetensors"), m, &c));
  rf_checkpoint_close(c);

  /* A whole checkpoint of another dtype: the first tensor says so, with the way out. */
  snprintf(line, sizeof line,
           "checkpoint '%s': tensor model.embed_tokens.weight is F32, the "
           "model needs BF16 (use --dtype fp32 or another checkpoint)",
           at_tmp("ck-fp32.safetensors"));
  expect_open_error(at_tmp("ck-fp32.safetensors"), m, line);
  free(buf);
}

static void test_bad_sharded(rf_model *m) {
  char d[512];
  snprintf(d, sizeof d, "%s", at_tmp("bad-sharded"));
  ASSERT_OK(rf_checkpoint_write(d, m, seed, "safetensors", 40000));
  int shards = rf_checkpoint_shard_count(m, "safetensors", 40000);
  char index[1024], shard2[1024], line[2048];
  snprintf(index, sizeof index, "%s/model.safetensors.index.json", d);
  snprintf(shard2, sizeof shard2, "%s/model-00002-of-%05d.safetensors", d, shards);

  json_t *j = json_load_file(index, 0, NULL);
  ASSERT_TRUE(j != NULL);
  ASSERT_EQ(json_integer_value(json_object_get(json_object_get(j, "metadata"), "total_size")),
            m->total_bytes);
  json_object_del(json_object_get(j, "weight_map"), "model.norm.weight");
  ASSERT_EQ(json_dump_file(j, index, JSON_INDENT(2) | JSON_PRESERVE_ORDER), 0);
  json_decref(j);
  snprintf(
      line, sizeof line,
      "checkpoint '%s': tensor model.norm.weight is missing; is it a checkpoint of model tiny? "
      "refit checkpoint writes a complete one",
      index);
  expect_open_error(d, m, line);

  ASSERT_OK(rf_checkpoint_write(d, m, seed, "safetensors", 40000));
  ASSERT_EQ(unlink(shard2), 0);
  snprintf(line, sizeof line, "checkpoint '%s': no such file or directory", shard2);
  expect_open_error(d, m, line);

  ASSERT_EQ(mkdir(at_tmp("empty-dir"), 0755), 0);
  snprintf(line, sizeof line,
           "checkpoint '%s': the directory holds neither "
           "model.safetensors.index.json nor model.safetensors",
           at_tmp("empty-dir"));
  expect_open_error(at_tmp("empty-dir"), m, line);
}

/* ---- bad HDF5 ----------------------------------------------------------------------------- */

static hid_t h5_copy(const char *name) {
  copy_file(at_tmp("ck-bf16.h5"), at_tmp(name), SIZE_MAX);
  hid_t f = H5Fopen(at_tmp(name), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  return f;
}

static void test_bad_hdf5(rf_model *m) {
  char line[1024];
  hid_t f = h5_copy("missing.h5");
  ASSERT_GE(H5Ldelete(f, "model.layers.0.mlp.up_proj.weight", H5P_DEFAULT), 0);
  H5Fclose(f);
  snprintf(line, sizeof line,
           "checkpoint '%s': tensor model.layers.0.mlp.up_proj.weight is missing; is it a "
           "checkpoint of model tiny? refit checkpoint writes a complete one",
           at_tmp("missing.h5"));
  expect_open_error(at_tmp("missing.h5"), m, line);

  f = h5_copy("shape.h5");
  const char *down = "model.layers.0.mlp.down_proj.weight";
  hid_t d = H5Dopen2(f, down, H5P_DEFAULT), ty = H5Dget_type(d);
  H5Dclose(d);
  ASSERT_GE(H5Ldelete(f, down, H5P_DEFAULT), 0);
  hsize_t dims[2] = {128, 64};
  hid_t sp = H5Screate_simple(2, dims, NULL);
  d = H5Dcreate2(f, down, ty, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  uint16_t *zeros = calloc(128 * 64, 2);
  ASSERT_GE(H5Dwrite(d, ty, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros), 0);
  free(zeros);
  H5Dclose(d), H5Sclose(sp), H5Tclose(ty), H5Fclose(f);
  snprintf(line, sizeof line,
           "checkpoint '%s': tensor %s is uint16 without the attribute "
           "dtype = \"bfloat16\", which refit does not read; the model needs BF16",
           at_tmp("shape.h5"), down);
  expect_open_error(at_tmp("shape.h5"), m, line);
  f = H5Fopen(at_tmp("shape.h5"), H5F_ACC_RDWR, H5P_DEFAULT);
  d = H5Dopen2(f, down, H5P_DEFAULT);
  hid_t st = H5Tcopy(H5T_C_S1), as = H5Screate(H5S_SCALAR);
  H5Tset_size(st, 9); /* fixed-length, as other writers store it */
  hid_t a = H5Acreate2(d, "dtype", st, as, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(H5Awrite(a, st, "bfloat16"), 0);
  H5Aclose(a), H5Sclose(as), H5Tclose(st), H5Dclose(d), H5Fclose(f);
  snprintf(line, sizeof line,
           "checkpoint '%s': tensor %s has shape [128, 64], the model needs "
           "[64, 128]",
           at_tmp("shape.h5"), down);
  expect_open_error(at_tmp("shape.h5"), m, line);

  snprintf(line, sizeof line,
           "checkpoint '%s': tensor model.embed_tokens.weight is F32, the "
           "model needs BF16 (use --dtype fp32 or another checkpoint)",
           at_tmp("ck-fp32.h5"));
  expect_open_error(at_tmp("ck-fp32.h5"), m, line);
  rf_model_set_dtype(m, RF_DTYPE_FP32);
  snprintf(line, sizeof line,
           "checkpoint '%s': tensor model.embed_tokens.weight is F16, the "
           "model needs F32 (use --dtype fp16 or another checkpoint)",
           at_tmp("ck-fp16.h5"));
  expect_open_error(at_tmp("ck-fp16.h5"), m, line);
  rf_model_set_dtype(m, RF_DTYPE_BF16);

  size_t len;
  free(slurp(at_tmp("ck-bf16.h5"), &len));
  copy_file(at_tmp("ck-bf16.h5"), at_tmp("trunc.h5"), len - 1000);
  snprintf(line, sizeof line, "checkpoint '%s': HDF5 cannot open it (truncated or damaged)",
           at_tmp("trunc.h5"));
  expect_open_error(at_tmp("trunc.h5"), m, line);
}

/* ---- writing errors ----------------------------------------------------------------------- */

static void test_write_errors(rf_model *m) {
  char line[1024];
  capture_begin();
  rf_status s1 = rf_checkpoint_write(at_tmp("no/such/dir.safetensors"), m, seed, "safetensors", 0);
  rf_status s2 = rf_checkpoint_write(at_tmp("x.h5"), m, seed, "hdf5", 1000);
  rf_status s3 = rf_checkpoint_write(at_tmp("x.bin"), m, seed, "pickle", 0);
  rf_status s4 = rf_checkpoint_write(at_tmp("no/such/dir.h5"), m, seed, "hdf5", 0);
  char *err = capture_end();
  ASSERT_STATUS(s1, RF_ERR_IO);
  ASSERT_STATUS(s2, RF_ERR_USAGE);
  ASSERT_STATUS(s3, RF_ERR_USAGE);
  ASSERT_STATUS(s4, RF_ERR_IO);
  snprintf(line, sizeof line,
           "refit: error: checkpoint '%s': cannot create the file: No such "
           "file or directory\n",
           at_tmp("no/such/dir.safetensors"));
  ASSERT_TRUE(strncmp(err, line, strlen(line)) == 0);
  ASSERT_TRUE(access(at_tmp("x.h5"), F_OK) != 0);
}

int main(void) {
  snprintf(tmp, sizeof tmp, "/tmp/refit-test-checkpoint-XXXXXX");
  ASSERT_TRUE(mkdtemp(tmp) != NULL);
  rf_model m;
  ASSERT_OK(rf_model_load("tiny", &m));
  test_round_trips(&m);
  test_bad_safetensors(&m);
  test_bad_sharded(&m);
  test_bad_hdf5(&m);
  test_write_errors(&m);
  rf_model_free(&m);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  ASSERT_EQ(system(cmd), 0);
  printf("test_checkpoint: ok\n");
  return 0;
}
