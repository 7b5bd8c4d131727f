/* `refit checkpoint`: writes the synthetic weights of a model as a real checkpoint, so that
 * users without weights, and the tests, have files to give `refit run --checkpoint`. No MPI
 * and no layouts: only the model spec and its dtypes (each tensor is written in its own, so
 * DeepSeek's fp32 router bias sits among bf16 weights as in DeepSeek's checkpoints). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "driver.h"
#include "io/io.h"

rf_status rf_cmd_checkpoint(const rf_config *cfg) {
  if (!cfg->checkpoint[0])
    return rf_fail(RF_ERR_USAGE, "refit checkpoint needs --checkpoint PATH (where to write)");
  rf_model model;
  RF_TRY(rf_job_load_model(cfg, &model));
  /* Without --format the name decides, so that `--checkpoint x.h5` writes the HDF5 file that
   * `refit run --checkpoint x.h5` expects. */
  const char *format = rf_checkpoint_format_for(cfg->checkpoint, cfg->format);
  rf_status st = rf_checkpoint_check_target(cfg->checkpoint, cfg->shard_size, cfg->force);
  if (st == RF_OK)
    st = rf_checkpoint_write(cfg->checkpoint, &model, (uint64_t)cfg->seed, format, cfg->shard_size);
  if (st == RF_OK) {
    printf("wrote %s: %s, %d tensors, %" PRId64 " bytes, %s", cfg->checkpoint, model.name,
           model.tensor_count, model.total_bytes, format);
    if (strcmp(format, "safetensors") == 0 && cfg->shard_size > 0)
      printf(", %d shards", rf_checkpoint_shard_count(&model, format, cfg->shard_size));
    printf("\n");
    fflush(stdout);
  }
  rf_model_free(&model);
  return st;
}
