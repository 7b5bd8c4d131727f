/* One .safetensors file read as a block-FP8 checkpoint (src/io/checkpoint_fp8.c): the view of
 * a small model in which every linear weight is F8_E4M3 followed by its weight_scale_inv (F32,
 * one per 128x128 block), so the header's dtypes, shapes and offsets of the weights and their
 * scale tensors are checked against that view. The input goes through what refit does with
 * such a file: the header check that decides whether it is one (rf_checkpoint_quantized_format),
 * refit verify's fp8 checksums and its ordinary open, and refit run's open as trainer weights,
 * whose reads of weight rows and of the scales of their blocks follow. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "io/io.h"

/* The micro model of fuzz.h with an MLP 136 wide, so that gate_proj and up_proj [136, 8] have
 * two block rows of scales and down_proj [8, 136] two block columns; a file of it is about
 * 5 KB. */
static const char fp8_config[] =
    "{\"model_type\": \"llama\", \"vocab_size\": 16, \"hidden_size\": 8, "
    "\"intermediate_size\": 136, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
    "\"num_key_value_heads\": 1, \"head_dim\": 4, \"torch_dtype\": \"bfloat16\", "
    "\"tie_word_embeddings\": false}\n";

/* The model as refit verify loads it, and as refit run holds it from a block-FP8 file. */
static rf_model model, weights;

static void load_models(void) {
  static int loaded;
  if (loaded)
    return;
  const char *path = fuzz_write("fp8micro.json", fp8_config, strlen(fp8_config));
  if (rf_model_load(path, &model) != RF_OK || rf_model_load(path, &weights) != RF_OK) {
    fprintf(stderr, "fuzz: the fp8 micro model does not load\n");
    abort();
  }
  rf_model_weights_quantized(&weights, RF_DTYPE_FP8, 8);
  loaded = 1;
}

/* Reads the last (up to) 16 rows and 16 columns of tensor t, across a block edge where the
 * tensor has one, row-major and transposed, and for an fp8 weight the scales of their blocks. */
static void read_corner(rf_checkpoint *c, const rf_tensor *t) {
  char buf[16 * 16 * 4];
  float scales[4];
  int esize = (int)(t->bytes / (t->numel ? t->numel : 1));
  rf_box box = {{RF_MAX(t->shape[0] - 16, 0), RF_MAX(t->shape[1] - 16, 0)},
                {t->shape[0], t->shape[1]}};
  if (t->numel == 0 || esize < 1 || esize > 4)
    return;
  rf_region rows = rf_region_row_major(buf, &box, esize);
  (void)rf_checkpoint_read(c, t->id, &box, &rows);
  rf_region cols = rf_region_transposed(buf, &box, esize);
  (void)rf_checkpoint_read(c, t->id, &box, &cols);
  if (!rf_tensor_quantized(t))
    return;
  rf_box blocks = {{box.lo[0] / 128, box.lo[1] / 128},
                   {(box.hi[0] + 127) / 128, (box.hi[1] + 127) / 128}};
  rf_region s = rf_region_row_major(scales, &blocks, 4);
  (void)rf_checkpoint_read_scales(c, t->id, &blocks, &s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_quiet();
  load_models();
  const char *path = fuzz_write("model.safetensors", data, size);
  const rf_format *format = NULL;
  (void)rf_checkpoint_quantized_format(path, &model, &format);

  /* refit verify: an fp8 run's checksums from the file (under either format's terms, by the
   * input's length), and the ordinary open a model-dtype run's verdict takes. */
  uint64_t sums[64];
  int is_fp8[64];
  if (model.tensor_count <= 64)
    (void)rf_checkpoint_fp8_checksums(path, &model, 1 + (int)(size & 1), sums, is_fp8);
  rf_checkpoint *c = NULL;
  if (rf_checkpoint_open_for(path, &model, RF_CHECKPOINT_FOR_VERIFY, &c) == RF_OK)
    rf_checkpoint_close(c);

  /* refit run --rollout-dtype fp8: the trainer's weights. */
  if (rf_checkpoint_open_quantized(path, &weights, rf_format_of(RF_FORMAT_FP8), &c) != RF_OK)
    return 0;
  for (int i = 0; i < weights.tensor_count; i++) {
    uint64_t sum;
    (void)rf_checkpoint_checksum(c, i, &sum);
    read_corner(c, &weights.tensors[i]);
  }
  rf_checkpoint_close(c);
  return 0;
}
