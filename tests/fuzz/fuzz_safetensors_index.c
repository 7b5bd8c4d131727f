/* A sharded safetensors checkpoint (src/io/checkpoint_safetensors.c): the fuzz input is
 * model.safetensors.index.json, beside real shards of the micro model written once at start
 * (three of them, so the weight_map has files to choose between and to share). */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz.h"
#include "io/io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char dir[1100];
  fuzz_quiet();
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "%s/sharded", fuzz_dir());
    /* 512 bytes per shard: the embeddings and lm_head alone, the rest packed between. */
    if (rf_checkpoint_write(dir, fuzz_model(), 1, "safetensors", 512) != RF_OK) {
      fprintf(stderr, "fuzz: the micro model's sharded checkpoint cannot be written\n");
      abort();
    }
  }
  fuzz_write("sharded/model.safetensors.index.json", data, size);
  fuzz_use_checkpoint(dir);
  return 0;
}
