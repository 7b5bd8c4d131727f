/* `refit verify`: compares the per-tensor checksums of a run in a results file with a
 * reference results file, or with the checksums computed from a checkpoint. Exit 0 when every
 * tensor agrees, 1 when some differ (each named), 2 when the files cannot be compared.
 *
 * A verdict compares what both sides define, and says what it compared. A trainer checksum is
 * of the tensor as that run's trainer held it: in the model's dtype, or for a trainer that read
 * a block-FP8 checkpoint, of its fp8 bytes and scales (rf_fp8_checksum; the tensors table's
 * dtype column says fp8). Two runs' trainer checksums of a tensor are compared where both
 * trainers held it in the same dtype; a run quantized in flight and a run read from a block-FP8
 * checkpoint meet on their rollout checksums, which are of fp8 bytes and scales in both. Files
 * written before refit recorded a block-FP8 trainer's checksums hold 0 there: not compared. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "io/io.h"

typedef struct {
  int run, count;
  char (*names)[RF_NAME_MAX];
  char (*dtypes)[8]; /* the trainer's dtype of each tensor (rf_results_read_tensor_dtypes) */
  uint64_t *trainer, *rollout;
} run_sums;

static void sums_free(run_sums *s) {
  free(s->names);
  free(s->dtypes);
  free(s->trainer);
  free(s->rollout);
  memset(s, 0, sizeof *s);
}

static rf_status read_sums(const char *path, int run, run_sums *s) {
  memset(s, 0, sizeof *s);
  RF_TRY(rf_results_read_checksums(path, run, &s->run, &s->count, &s->names, &s->trainer,
                                   &s->rollout));
  return rf_results_read_tensor_dtypes(path, s->run, s->count, &s->dtypes);
}

/* Whether the run's trainer held tensor i as a block-FP8 checkpoint's fp8 weight. */
static int trainer_fp8(const run_sums *s, int i) { return strncmp(s->dtypes[i], "fp8", 3) == 0; }

/* Whether the run recorded a trainer checksum for tensor i (see the top of the file). */
static int trainer_recorded(const run_sums *s, int i) {
  return !(trainer_fp8(s, i) && s->trainer[i] == 0);
}

/* The model a run moved (rf_job_model_of_run), from its name and its configuration. */
static rf_status run_model(const char *path, int run, char *model, size_t len) {
  enum { CONFIG_MAX = (1 << 16) + 1 }; /* results strings are read up to 64 KiB */
  char *config = rf_malloc(CONFIG_MAX, "a run's configuration");
  char name[RF_PATH_MAX];
  if (!config)
    return RF_ERR_NOMEM;
  snprintf(name, sizeof name, "%s", model);
  if (!rf_job_model_name_ok(name)) {
    free(config);
    return rf_fail(RF_ERR_RESULTS,
                   "results file '%s' run %04d: attribute 'model' is '%s', not a model's name; "
                   "give a results file written by 'refit run --output'",
                   path, run, name);
  }
  rf_log_push_quiet(1); /* runs written before config_json have none */
  rf_status st = rf_results_run_attribute(path, run, "config_json", config, CONFIG_MAX);
  rf_log_pop_quiet();
  rf_job_model_of_run(name, st == RF_OK ? config : NULL, model, len);
  free(config);
  return RF_OK;
}

/* The reference checksums of the run's tensors from a checkpoint, for the run's model. An fp8
 * run is compared with a block-FP8 checkpoint: its linear weights' checksums are of fp8 bytes
 * and scales (fp8_tensor[i] = 1), the trainer's weights behind them are not in the file. */
static rf_status checkpoint_sums(const rf_config *cfg, const run_sums *mine, const rf_format *fmt,
                                 int format, uint64_t **out, int **fp8_tensor) {
  int fp8 = fmt != NULL;
  char model_name[RF_PATH_MAX] = "", dtype[16] = "";
  RF_TRY(
      rf_results_run_attribute(cfg->inputs[0], mine->run, "model", model_name, sizeof model_name));
  RF_TRY(rf_results_run_attribute(cfg->inputs[0], mine->run, "dtype", dtype, sizeof dtype));
  rf_model model;
  RF_TRY(run_model(cfg->inputs[0], mine->run, model_name, sizeof model_name));
  RF_TRY(rf_model_load(model_name, &model));
  rf_dtype dt;
  if (rf_dtype_parse(dtype, &dt) == RF_OK)
    rf_model_set_dtype(&model, dt);
  /* With fp8, every tensor's checksum from the block-FP8 checkpoint first, by model tensor. */
  size_t nt = (size_t)model.tensor_count + 1;
  uint64_t *fp8_sums = fp8 ? rf_calloc(nt, sizeof *fp8_sums, "fp8 checksums") : NULL;
  int *is_fp8 = fp8 ? rf_calloc(nt, sizeof *is_fp8, "fp8 tensors") : NULL;
  *out = rf_calloc((size_t)mine->count + 1, sizeof **out, "reference checksums");
  *fp8_tensor = rf_calloc((size_t)mine->count + 1, sizeof **fp8_tensor, "fp8 tensors");
  rf_checkpoint *ckpt = NULL;
  rf_status st = *out && *fp8_tensor && (!fp8 || (fp8_sums && is_fp8)) ? RF_OK : RF_ERR_NOMEM;
  if (st == RF_OK)
    st =
        fp8 ? rf_checkpoint_format_checksums(cfg->checkpoint, &model, fmt, format, fp8_sums, is_fp8)
            : rf_checkpoint_open_for(cfg->checkpoint, &model, RF_CHECKPOINT_FOR_VERIFY, &ckpt);
  if (ckpt)
    rf_checkpoint_checksum_format(ckpt, format);
  for (int i = 0; i < mine->count && st == RF_OK; i++) {
    int t = rf_model_find(&model, mine->names[i]);
    if (t < 0)
      st = rf_fail(RF_ERR_CHECKPOINT, "model %s has no tensor %s of the results file", model.name,
                   mine->names[i]);
    else if (fp8)
      (*out)[i] = fp8_sums[t], (*fp8_tensor)[i] = is_fp8[t];
    else
      st = rf_checkpoint_checksum(ckpt, t, &(*out)[i]);
  }
  free(fp8_sums);
  free(is_fp8);
  if (ckpt)
    rf_checkpoint_close(ckpt);
  rf_model_free(&model);
  return st;
}

/* The rollout dtype a run moved: in a quantized format its rollout checksums are of the
 * format's bytes and scales (rf_fp8_checksum), comparable only with a run of the same format.
 * Runs written before formats have no rollout_dtype attribute and moved the model's dtype. */
static rf_rollout_dtype run_rollout_dtype(const char *path, int run) {
  char text[32] = "";
  rf_rollout_dtype dtype = RF_ROLLOUT_DTYPE_MODEL;
  rf_log_push_quiet(1);
  if (rf_results_run_attribute(path, run, "rollout_dtype", text, sizeof text) != RF_OK ||
      rf_rollout_dtype_parse(text, &dtype) != RF_OK)
    dtype = RF_ROLLOUT_DTYPE_MODEL;
  rf_log_pop_quiet();
  return dtype;
}

/* The run's --update ("none" in files written before weight versions). */
static void run_update(const char *path, int run, char *text, size_t len) {
  rf_log_push_quiet(1);
  if (rf_results_run_attribute(path, run, "update", text, len) != RF_OK)
    snprintf(text, len, "none");
  rf_log_pop_quiet();
}

static const char *rollout_dtype_text(rf_rollout_dtype d) {
  return d == RF_ROLLOUT_DTYPE_MODEL ? "model-dtype" : rf_rollout_dtype_name(d);
}

/* What a verdict compared: rollout and trainer checksums, and why some trainer checksums were
 * not (of other terms: held in other dtypes; or not recorded). */
typedef struct {
  int rollout, trainer, other_dtype, unrecorded;
  int fp8_input; /* one of the other_dtype tensors was read fp8 by a trainer */
} compared;

static void print_compared(const compared *c, int reference) {
  const char *sep = "; not compared:";
  printf("# compared %d rollout and %d trainer checksums", c->rollout, c->trainer);
  if (c->other_dtype) {
    printf("%s %d trainer checksums of tensors %s%s", sep, c->other_dtype,
           reference ? "the two runs' trainers held in different dtypes"
                     : "the checkpoint holds in fp8 and the run's trainer quantized in flight",
           reference && c->fp8_input ? " (one read a block-FP8 checkpoint, one quantized in flight)"
                                     : "");
    sep = ";";
  }
  if (c->unrecorded)
    printf("%s %d trainer checksums of fp8 tensors that %s did not record (written before refit "
           "recorded them)",
           sep, c->unrecorded, reference ? "one of the runs" : "the run");
  printf("\n");
}

rf_status rf_cmd_verify(const rf_config *cfg) {
  if (!cfg->reference[0] == !cfg->checkpoint[0])
    return rf_fail(RF_ERR_USAGE, "refit verify needs exactly one of --reference RESULTS.h5 or "
                                 "--checkpoint PATH");
  run_sums mine, ref;
  memset(&ref, 0, sizeof ref);
  RF_TRY(read_sums(cfg->inputs[0], (int)cfg->run, &mine));
  uint64_t *expected = NULL, *expected_rollout = NULL;
  const char *against = cfg->reference[0] ? cfg->reference : cfg->checkpoint;
  rf_rollout_dtype rollout_dtype = run_rollout_dtype(cfg->inputs[0], mine.run);
  int fp8 = rollout_dtype != RF_ROLLOUT_DTYPE_MODEL;
  int *fp8_tensor = NULL; /* with --checkpoint: compared by their rollout checksums only */
  int format = 0, ref_format = 0;
  char update[64], ref_update[64] = "none";
  run_update(cfg->inputs[0], mine.run, update, sizeof update);
  rf_status st = rf_results_format(cfg->inputs[0], &format);
  /* A run of a later version of the weights holds other checksums than version 0's. */
  if (st == RF_OK && cfg->checkpoint[0] && strcmp(update, "none") != 0)
    st = rf_fail(RF_ERR_USAGE,
                 "run %04d of '%s' moved later versions of the weights (--update %s) and a "
                 "checkpoint holds version 0; compare it with a run of the same --update "
                 "(--reference)",
                 mine.run, cfg->inputs[0], update);
  if (st == RF_OK && cfg->reference[0]) {
    st = rf_results_format(cfg->reference, &ref_format);
    /* Files of two formats hold checksums under different terms: no two can be compared. */
    if (st == RF_OK && ref_format != format)
      st = rf_fail(RF_ERR_USAGE,
                   "'%s' is a refit-results/%d file but the reference '%s' is refit-results/%d, "
                   "whose checksums use other terms; compare each with the checkpoint "
                   "(--checkpoint) instead",
                   cfg->inputs[0], format, cfg->reference, ref_format);
    if (st == RF_OK)
      st = read_sums(cfg->reference, -1, &ref);
    if (st == RF_OK)
      run_update(cfg->reference, ref.run, ref_update, sizeof ref_update);
    if (st == RF_OK && strcmp(update, ref_update) != 0)
      st = rf_fail(RF_ERR_USAGE,
                   "run %04d of '%s' moved versions of --update %s but the reference run %04d of "
                   "'%s' those of --update %s; compare runs of one --update",
                   mine.run, cfg->inputs[0], update, ref.run, cfg->reference, ref_update);
    rf_rollout_dtype ref_dtype = st == RF_OK ? run_rollout_dtype(cfg->reference, ref.run) : 0;
    if (st == RF_OK && rollout_dtype != ref_dtype)
      st = rf_fail(RF_ERR_USAGE,
                   "run %04d of '%s' moved %s rollouts but the reference run %04d of '%s' moved "
                   "%s; compare runs of one rollout dtype",
                   mine.run, cfg->inputs[0], rollout_dtype_text(rollout_dtype), ref.run,
                   cfg->reference, rollout_dtype_text(ref_dtype));
    if (st == RF_OK && ref.count != mine.count)
      st = rf_fail(RF_ERR_RESULTS,
                   "'%s' has %d tensors but the reference '%s' has %d; compare "
                   "runs of the same model",
                   cfg->inputs[0], mine.count, cfg->reference, ref.count);
    expected = ref.trainer;
    expected_rollout = fp8 ? ref.rollout : ref.trainer;
  } else if (st == RF_OK) {
    st = checkpoint_sums(cfg, &mine, rf_format_of(rollout_dtype), format, &expected, &fp8_tensor);
    expected_rollout = expected;
  }
  int differ = 0;
  compared cmp = {0, 0, 0, 0, 0};
  for (int i = 0; i < mine.count && st == RF_OK; i++) {
    if (ref.names && strcmp(ref.names[i], mine.names[i]) != 0) {
      st = rf_fail(RF_ERR_RESULTS,
                   "tensor %d is %s in '%s' but %s in the reference; compare "
                   "runs of the same model",
                   i, mine.names[i], cfg->inputs[0], ref.names[i]);
      break;
    }
    /* The trainer checksum is compared where the other side holds one of the same terms: the
     * reference run's trainer held the tensor in the same dtype; the checkpoint holds it as
     * this run's trainer did (an fp8 weight only for a trainer that read it as fp8). */
    int same_terms = cfg->reference[0] ? strcmp(mine.dtypes[i], ref.dtypes[i]) == 0
                                       : !fp8_tensor || !fp8_tensor[i] || trainer_fp8(&mine, i);
    int recorded = trainer_recorded(&mine, i) && (!ref.names || trainer_recorded(&ref, i));
    int check_trainer = same_terms && recorded;
    cmp.rollout++;
    cmp.trainer += check_trainer;
    cmp.other_dtype += !same_terms;
    cmp.fp8_input |= !same_terms && ref.names && (trainer_fp8(&mine, i) || trainer_fp8(&ref, i));
    cmp.unrecorded += same_terms && !recorded;
    uint64_t want = expected[i];
    int trainer_ok = !check_trainer || mine.trainer[i] == want;
    if (trainer_ok && mine.rollout[i] == expected_rollout[i])
      continue;
    differ++;
    if (cfg->reference[0])
      printf("differs: %s  trainer %016llx  rollout %016llx  reference trainer %016llx  rollout "
             "%016llx\n",
             mine.names[i], (unsigned long long)mine.trainer[i],
             (unsigned long long)mine.rollout[i], (unsigned long long)ref.trainer[i],
             (unsigned long long)ref.rollout[i]);
    else
      printf("differs: %s  trainer %016llx  rollout %016llx  checkpoint %016llx\n", mine.names[i],
             (unsigned long long)mine.trainer[i], (unsigned long long)mine.rollout[i],
             (unsigned long long)want);
  }
  if (st == RF_OK) {
    print_compared(&cmp, cfg->reference[0] != 0);
    printf("# %s run %04d against %s: %d of %d tensors differ\n", cfg->inputs[0], mine.run, against,
           differ, mine.count);
    printf(differ ? "# FAIL: %d tensors differ\n" : "# PASS\n", differ);
    st = differ ? RF_ERR_VERIFY : RF_OK;
  }
  if (!cfg->reference[0])
    free(expected);
  free(fp8_tensor);
  sums_free(&mine);
  sums_free(&ref);
  return st;
}
