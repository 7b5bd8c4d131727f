/* The shared pieces of the fuzz targets (fuzz.h). */
#define _XOPEN_SOURCE 700
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "io/io.h"

static char dir[512];

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

/* libFuzzer leaves through exit() when its time is up, so the directory goes with it; a crash
 * leaves it behind, next to the reproducer it may help to read. */
static void remove_dir(void) {
  if (dir[0])
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void fuzz_quiet(void) {
  static char last_error[4096];
  rf_log_capture(last_error, sizeof last_error);
}

const char *fuzz_dir(void) {
  if (dir[0])
    return dir;
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/refit-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("fuzz: mkdtemp");
    abort();
  }
  atexit(remove_dir);
  return dir;
}

const char *fuzz_write(const char *name, const void *data, size_t size) {
  static char path[1024];
  snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
  FILE *f = fopen(path, "wb");
  if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
    perror(path);
    abort();
  }
  return path;
}

/* Small enough that a checkpoint of it is a few hundred bytes, with every kind of llama tensor
 * (embeddings, q/k/v/o, the MLP, norms, lm_head) and k/v narrower than q. */
static const char micro_config[] =
    "{\"model_type\": \"llama\", \"vocab_size\": 16, \"hidden_size\": 8, "
    "\"intermediate_size\": 12, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
    "\"num_key_value_heads\": 1, \"head_dim\": 4, \"torch_dtype\": \"bfloat16\", "
    "\"tie_word_embeddings\": false}\n";

const rf_model *fuzz_model(void) {
  static rf_model model;
  static int loaded;
  if (!loaded) {
    const char *path = fuzz_write("micro.json", micro_config, strlen(micro_config));
    if (rf_model_load(path, &model) != RF_OK) {
      fprintf(stderr, "fuzz: the micro model does not load\n");
      abort();
    }
    loaded = 1;
  }
  return &model;
}

void fuzz_use_checkpoint(const char *path) {
  const rf_model *model = fuzz_model();
  rf_checkpoint *c;
  if (rf_checkpoint_open(path, model, &c) != RF_OK)
    return;
  for (int i = 0; i < model->tensor_count; i++) {
    const rf_tensor *t = &model->tensors[i];
    uint64_t sum;
    (void)rf_checkpoint_checksum(c, i, &sum);
    /* Part of the row width makes the safetensors reader go row by row. */
    rf_box box = {{t->shape[0] - 1, t->shape[1] > 1 ? 1 : 0}, {t->shape[0], t->shape[1]}};
    char buf[64 * 4];
    rf_region rows = rf_region_row_major(buf, &box, model->tensors[i].bytes / t->numel);
    (void)rf_checkpoint_read(c, i, &box, &rows);
    rf_region cols = rf_region_transposed(buf, &box, model->tensors[i].bytes / t->numel);
    (void)rf_checkpoint_read(c, i, &box, &cols);
  }
  rf_checkpoint_close(c);
}

uint8_t fuzz_byte(fuzz_input *in) { return in->at < in->size ? in->data[in->at++] : 0; }

unsigned fuzz_pick(fuzz_input *in, unsigned n) {
  unsigned v = fuzz_byte(in);
  if (n > 256)
    v = v << 8 | fuzz_byte(in);
  return v % n;
}

uint64_t fuzz_u64(fuzz_input *in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v = v << 8 | fuzz_byte(in);
  return v;
}

void fuzz_string(fuzz_input *in, char *buf, size_t len) {
  size_t n = fuzz_byte(in) % len, i = 0;
  for (; i < n && in->at < in->size; i++)
    buf[i] = (char)in->data[in->at++];
  buf[i] = '\0';
}
