/* The report's two tables of refit simulate's predictions: every simulated run with the cluster
 * it was predicted for, and, for runs that carry another system's published time
 * (--published-s, --published-label), refit's best prediction beside that time. Predictions
 * stay out of every other table, which compare measurements (report_internal.h). */
#include <math.h>
#include <string.h>

#include "report_internal.h"

#define MS(s) ((s)*1e3)

/* fits: whether the prediction's memory fits the cluster's GPUs (or nodes); empty in files
 * written before refit recorded it. */
static const char *const simulated_head[] = {"file",
                                             "run",
                                             "model",
                                             "trainer",
                                             "rollout",
                                             "cluster",
                                             "plan",
                                             "mode",
                                             "bucket_size_bytes",
                                             "fits",
                                             "predicted_ms",
                                             "published_ms",
                                             "published_label",
                                             "ratio"};
static const int simulated_digits[] = {0, 0, -1, -1, -1, -1, -1, -1, 0, -1, 3, 3, -1, 3};

/* One row per published reference: refit's fastest prediction over the plans, modes and bucket
 * sizes simulated for it, among those whose memory fits when any does (best_fits says which),
 * and ratio = predicted / published (below 1: refit predicts itself faster). runs says how many
 * predictions the best was chosen from. */
static const char *const published_head[] = {"file",
                                             "published_label",
                                             "model",
                                             "trainer",
                                             "rollout",
                                             "cluster",
                                             "published_ms",
                                             "runs",
                                             "best_plan",
                                             "best_mode",
                                             "best_bucket_size_bytes",
                                             "best_fits",
                                             "predicted_ms",
                                             "ratio"};
static const int published_digits[] = {0, -1, -1, -1, -1, -1, 3, 0, -1, -1, 0, -1, 3, 3};

static const char *fits_text(const rf_loaded_run *r) {
  return r->memory_fits < 0 ? "" : r->memory_fits ? "yes" : "no";
}

/* Is a better than b as the best prediction: one that fits beats one that does not (a file
 * from before memory_fits counts as fitting), then the shorter time. */
static int better(const rf_loaded_run *a, const rf_loaded_run *b) {
  int fa = a->memory_fits != 0, fb = b->memory_fits != 0;
  if (fa != fb)
    return fa;
  return a->time_median_s < b->time_median_s;
}

static int has_published(const rf_loaded_run *r) {
  return r->simulated && !isnan(r->published_s) && r->published_s > 0;
}

/* The same published job: the same reference, model, layouts and cluster. */
static int same_reference(const rf_loaded_run *a, const rf_loaded_run *b) {
  return strcmp(a->published_label, b->published_label) == 0 && a->published_s == b->published_s &&
         strcmp(a->model, b->model) == 0 && strcmp(a->trainer, b->trainer) == 0 &&
         strcmp(a->rollout, b->rollout) == 0 && strcmp(a->cluster, b->cluster) == 0;
}

static rf_status add_simulated(rf_report_table *t, int file, const rf_loaded_run *r) {
  rf_report_cell *row = rf_report_table_row(t);
  if (!row)
    return RF_ERR_NOMEM;
  rf_cell_int(&row[0], file);
  rf_cell_int(&row[1], r->number);
  const char *text[] = {r->model, r->trainer, r->rollout, r->cluster, r->plan, r->mode};
  for (int i = 0; i < (int)RF_ARRAY_LEN(text); i++)
    rf_cell_text(&row[2 + i], "%s", text[i]);
  rf_cell_int(&row[8], r->bucket_size);
  rf_cell_text(&row[9], "%s", fits_text(r));
  rf_cell_num(&row[10], MS(r->time_median_s));
  /* A prediction without a reference leaves the published cells empty, not zero. */
  int ref = has_published(r);
  rf_cell_num(&row[11], ref ? MS(r->published_s) : NAN);
  rf_cell_text(&row[12], "%s", ref ? r->published_label : "");
  rf_cell_num(&row[13], ref ? r->time_median_s / r->published_s : NAN);
  return RF_OK;
}

/* Each reference's row comes at its first run, so the table keeps the file's order. */
static rf_status add_published(rf_report_table *t, int file, const rf_loaded_results *f) {
  for (int i = 0; i < f->run_count; i++) {
    const rf_loaded_run *r = &f->runs[i], *best = NULL;
    if (!has_published(r))
      continue;
    int first = 1, runs = 0;
    for (int j = 0; j < f->run_count && first; j++) {
      const rf_loaded_run *o = &f->runs[j];
      if (!has_published(o) || !same_reference(r, o))
        continue;
      first = j >= i;
      runs++;
      if (!isnan(o->time_median_s) && (!best || better(o, best)))
        best = o;
    }
    if (!first || !best)
      continue;
    rf_report_cell *row = rf_report_table_row(t);
    if (!row)
      return RF_ERR_NOMEM;
    rf_cell_int(&row[0], file);
    const char *text[] = {r->published_label, r->model, r->trainer, r->rollout, r->cluster};
    for (int k = 0; k < (int)RF_ARRAY_LEN(text); k++)
      rf_cell_text(&row[1 + k], "%s", text[k]);
    rf_cell_num(&row[6], MS(r->published_s));
    rf_cell_int(&row[7], runs);
    rf_cell_text(&row[8], "%s", best->plan);
    rf_cell_text(&row[9], "%s", best->mode);
    rf_cell_int(&row[10], best->bucket_size);
    rf_cell_text(&row[11], "%s", fits_text(best));
    rf_cell_num(&row[12], MS(best->time_median_s));
    rf_cell_num(&row[13], best->time_median_s / r->published_s);
  }
  return RF_OK;
}

int rf_report_has_simulated(const rf_loaded_results *files, int count) {
  for (int f = 0; f < count; f++)
    for (int i = 0; i < files[f].run_count; i++)
      if (files[f].runs[i].simulated)
        return 1;
  return 0;
}

rf_status rf_report_build_simulated(const rf_loaded_results *files, int count,
                                    rf_report_tables *t) {
  rf_report_table_init(&t->simulated, "simulated", "Simulated runs (refit simulate: predicted)",
                       (int)RF_ARRAY_LEN(simulated_head), simulated_head, simulated_digits);
  rf_report_table_init(&t->published, "published",
                       "Published refits: refit's best prediction beside each",
                       (int)RF_ARRAY_LEN(published_head), published_head, published_digits);
  for (int f = 0; f < count; f++) {
    for (int i = 0; i < files[f].run_count; i++)
      if (files[f].runs[i].simulated)
        RF_TRY(add_simulated(&t->simulated, f + 1, &files[f].runs[i]));
    RF_TRY(add_published(&t->published, f + 1, &files[f]));
  }
  return RF_OK;
}
