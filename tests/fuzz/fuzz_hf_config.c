/* A Hugging Face config.json given as --model PATH (src/model/): the architecture fields and
 * the tensor list built from them. A model that loads is also digested, which walks every
 * tensor it listed. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_quiet();
  const char *path = fuzz_write("config.json", data, size);
  rf_model model;
  if (rf_model_load(path, &model) == RF_OK) {
    (void)rf_model_digest(&model);
    (void)rf_model_find(&model, "lm_head.weight");
  }
  rf_model_free(&model);
  return 0;
}
