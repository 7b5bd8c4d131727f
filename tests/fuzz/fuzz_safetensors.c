/* One .safetensors file given as --checkpoint (src/io/checkpoint_safetensors.c): the 8-byte
 * header length, the JSON header (dtype, shape, data_offsets of each tensor, __metadata__) and
 * the data it points into, checked against the micro model and then read. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_quiet();
  (void)fuzz_model();
  fuzz_use_checkpoint(fuzz_write("model.safetensors", data, size));
  return 0;
}
