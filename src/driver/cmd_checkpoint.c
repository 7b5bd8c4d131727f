/* `refit checkpoint`: writes the synthetic weights of a model as a real checkpoint, so that
 * users without weights, and the tests, have files to give `refit run --checkpoint`. No MPI
 * and no layouts: only the model spec and its dtypes (each tensor is written in its own, so
 * DeepSeek's fp32 router bias sits among bf16 weights as in DeepSeek's checkpoints). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "driver.h"
#include "io/io.h"

/* --dtype FORMAT: the model's weights in its own dtype, quantized to one of the formats
 * (format.h). One safetensors file, in the names and dtypes of the format's ecosystem (the
 * block-FP8 layout of DeepSeek's checkpoints for fp8, which refit verify reads). */
static rf_status write_format(const rf_config *cfg, const rf_format *f) {
  const char *format = rf_checkpoint_format_for(cfg->checkpoint, cfg->format);
  if (strcmp(format, "safetensors") != 0 || cfg->shard_size > 0)
    return rf_fail(RF_ERR_USAGE,
                   "refit checkpoint --dtype %s writes one safetensors file: drop "
                   "--shard-size and --format hdf5 (and a .h5 name)",
                   f->name);
  rf_model model;
  RF_TRY(rf_model_load(cfg->model, &model));
  /* A model that stacks its experts (gpt-oss) is written quantized in its own format only, the
   * layout of its published files (experts.gate_up_proj_blocks [E, 2Fe, D/32, 16] and _scales);
   * other formats would need stacked names no ecosystem reads. */
  if (model.stacked_experts && strcmp(f->name, model.native_format) != 0) {
    rf_status st = rf_fail(RF_ERR_USAGE,
                           "refit checkpoint --dtype %s: model %s stacks its experts, which refit "
                           "writes quantized only in the model's own format; use --dtype %s, or "
                           "drop --dtype to write its %s weights",
                           f->name, model.name, model.native_format[0] ? model.native_format : "?",
                           rf_dtype_name(model.dtype));
    rf_model_free(&model);
    return st;
  }
  int64_t bytes = 0;
  rf_status st = rf_checkpoint_check_target(cfg->checkpoint, 0, cfg->force);
  if (st == RF_OK)
    st = rf_checkpoint_write_format(cfg->checkpoint, &model, f, (uint64_t)cfg->seed, &bytes);
  if (st == RF_OK) {
    printf("wrote %s: %s, %d tensors, %" PRId64 " bytes, safetensors, %s (%s)\n", cfg->checkpoint,
           model.name, model.tensor_count, bytes, f->name, f->summary);
    fflush(stdout);
  }
  rf_model_free(&model);
  return st;
}

rf_status rf_cmd_checkpoint(const rf_config *cfg) {
  if (!cfg->checkpoint[0])
    return rf_fail(RF_ERR_USAGE, "refit checkpoint needs --checkpoint PATH (where to write)");
  rf_model model;
  if (rf_format_find(cfg->dtype))
    return write_format(cfg, rf_format_find(cfg->dtype));
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
