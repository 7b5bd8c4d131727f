/* `refit checkpoint`: writes the synthetic weights of a model as a real checkpoint, so that
 * users without weights, and the tests, have files to give `refit run --checkpoint`. No MPI
 * and no layouts: only the model spec and its dtypes (each tensor is written in its own, so
 * DeepSeek's fp32 router bias sits among bf16 weights as in DeepSeek's checkpoints).
 * --update RULE --version K writes version K of the generated weights under the rule
 * (verify/versions.h), so that files of versions 0, 1, 2... are the sequence that
 * `refit run --checkpoint V0,V1,V2` moves, bit for bit what `refit run --update RULE` moves. */
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

/* --update and --version: the version to write. One of the rule's versions past 0 needs both;
 * a quantized file is one version of the generator's values. */
static rf_status version_of(const rf_config *cfg, rf_weight_version *v) {
  char why[256];
  memset(v, 0, sizeof *v);
  if (rf_update_parse(cfg->update, &v->update, why, sizeof why) != RF_OK)
    return rf_fail(RF_ERR_USAGE, "option --update: %s", why); /* the CLI checked it */
  v->k = cfg->version;
  if (v->k > 0 && v->update.kind == RF_UPDATE_NONE)
    return rf_fail(RF_ERR_USAGE,
                   "refit checkpoint --version %lld: under --update none every version is "
                   "version 0; give --update full, sparse:F or adam:LR",
                   (long long)v->k);
  if (v->k > 0 && rf_format_find(cfg->dtype))
    return rf_fail(RF_ERR_USAGE,
                   "refit checkpoint --dtype %s writes version 0 only; drop --version, or "
                   "--dtype to write version %lld in the model's dtype",
                   cfg->dtype, (long long)v->k);
  return RF_OK;
}

rf_status rf_cmd_checkpoint(const rf_config *cfg) {
  if (!cfg->checkpoint[0])
    return rf_fail(RF_ERR_USAGE, "refit checkpoint needs --checkpoint PATH (where to write)");
  rf_model model;
  rf_weight_version version;
  RF_TRY(version_of(cfg, &version));
  if (rf_format_find(cfg->dtype))
    return write_format(cfg, rf_format_find(cfg->dtype));
  RF_TRY(rf_job_load_model(cfg, &model));
  /* Without --format the name decides, so that `--checkpoint x.h5` writes the HDF5 file that
   * `refit run --checkpoint x.h5` expects. */
  const char *format = rf_checkpoint_format_for(cfg->checkpoint, cfg->format);
  rf_status st = rf_checkpoint_check_target(cfg->checkpoint, cfg->shard_size, cfg->force);
  if (st == RF_OK)
    st = rf_checkpoint_write_version(cfg->checkpoint, &model, (uint64_t)cfg->seed, &version, format,
                                     cfg->shard_size);
  if (st == RF_OK) {
    printf("wrote %s: %s, %d tensors, %" PRId64 " bytes, %s", cfg->checkpoint, model.name,
           model.tensor_count, model.total_bytes, format);
    if (strcmp(format, "safetensors") == 0 && cfg->shard_size > 0)
      printf(", %d shards", rf_checkpoint_shard_count(&model, format, cfg->shard_size));
    if (version.k > 0)
      printf(", version %lld of --update %s", (long long)version.k, cfg->update);
    printf("\n");
    fflush(stdout);
  }
  rf_model_free(&model);
  return st;
}
