/* The report's delta section (issue 33): every measured run of a changing version (--update
 * other than none) in a file that sent deltas, with its changed fraction, time, delta phases
 * and wire bytes, the dense refit of the same job beside each delta run, and per file two
 * charts against the changed fraction: the median time and the bytes on the wire. Files
 * without a delta run write none of it, so their reports stay as they were. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "report_internal.h"

#define MS(s) ((s)*1e3)

/* wire_bytes: a delta run's encoded bytes (wire_delta_bytes), a dense run's wire bytes (the
 * transfer's and the forward steps', quantized where the rollout is: dense_wire_bytes).
 * The dense_* columns name the dense run beside a delta run: the first run of the file with
 * --delta off and the same model, layouts, plan, transport, mode, bucket size and --update;
 * time_ratio is the delta run's median over the dense one's, wire_pct its wire bytes in
 * percent of the dense run's. */
static const char *const delta_head[] = {"file",
                                         "run",
                                         "model",
                                         "trainer",
                                         "rollout",
                                         "plan",
                                         "transport",
                                         "mode",
                                         "bucket_size_bytes",
                                         "update",
                                         "delta",
                                         "changed_fraction",
                                         "time_median_ms",
                                         "encode_ms",
                                         "transfer_ms",
                                         "apply_ms",
                                         "wire_bytes",
                                         "dense_run",
                                         "dense_time_ms",
                                         "dense_wire_bytes",
                                         "time_ratio",
                                         "wire_pct"};
static const int delta_digits[] = {0, 0, -1, -1, -1, -1, -1, -1, 0, -1, -1,
                                   7, 3, 3,  3,  3,  0,  0,  3,  0, 3,  4};

/* A run sent deltas: --delta other than off (its last iteration may have gone dense). */
static int is_delta(const rf_loaded_run *r) { return r->delta[0] && strcmp(r->delta, "off") != 0; }

/* A run the section shows: measured, with a counted changed fraction. */
static int shown(const rf_loaded_run *r) {
  return report_measured(r) && !isnan(r->changed_fraction);
}

static int file_has_delta(const rf_loaded_results *f) {
  for (int i = 0; i < f->run_count; i++)
    if (shown(&f->runs[i]) && is_delta(&f->runs[i]))
      return 1;
  return 0;
}

int rf_report_has_delta(const rf_loaded_results *files, int count) {
  for (int f = 0; f < count; f++)
    if (file_has_delta(&files[f]))
      return 1;
  return 0;
}

static double wire_of(const rf_loaded_run *r) {
  if (is_delta(r))
    return r->wire_delta_bytes >= 0 ? (double)r->wire_delta_bytes : NAN;
  return r->dense_wire_bytes >= 0 ? (double)r->dense_wire_bytes : NAN;
}

/* The dense refit of delta run r's job in the same file, or NULL. */
static const rf_loaded_run *dense_of(const rf_loaded_results *f, const rf_loaded_run *r) {
  for (int i = 0; i < f->run_count; i++) {
    const rf_loaded_run *o = &f->runs[i];
    if (shown(o) && !is_delta(o) && report_same_config(o, r) && strcmp(o->update, r->update) == 0)
      return o;
  }
  return NULL;
}

static rf_status add_row(rf_report_table *t, int file, const rf_loaded_results *f,
                         const rf_loaded_run *r) {
  rf_report_cell *row = rf_report_table_row(t);
  if (!row)
    return RF_ERR_NOMEM;
  rf_cell_int(&row[0], file);
  rf_cell_int(&row[1], r->number);
  const char *text[] = {r->model, r->trainer, r->rollout, r->plan, r->transport, r->mode};
  for (int i = 0; i < (int)RF_ARRAY_LEN(text); i++)
    rf_cell_text(&row[2 + i], "%s", text[i]);
  rf_cell_int(&row[8], r->bucket_size);
  rf_cell_text(&row[9], "%s", r->update);
  rf_cell_text(&row[10], "%s", is_delta(r) ? r->delta : "off");
  rf_cell_num(&row[11], r->changed_fraction);
  rf_cell_num(&row[12], MS(r->time_median_s));
  rf_phase phases[] = {RF_PHASE_ENCODE, RF_PHASE_TRANSFER, RF_PHASE_APPLY};
  for (int i = 0; i < (int)RF_ARRAY_LEN(phases); i++)
    rf_cell_num(&row[13 + i], r->has_summary ? MS(r->phase_median[phases[i]]) : NAN);
  double wire = wire_of(r);
  if (!isnan(wire))
    rf_cell_int(&row[16], (int64_t)wire);
  const rf_loaded_run *d = is_delta(r) ? dense_of(f, r) : NULL;
  if (!d)
    return RF_OK;
  double dense_wire = wire_of(d);
  rf_cell_int(&row[17], d->number);
  rf_cell_num(&row[18], MS(d->time_median_s));
  if (!isnan(dense_wire))
    rf_cell_int(&row[19], (int64_t)dense_wire);
  rf_cell_num(&row[20], r->time_median_s / d->time_median_s);
  rf_cell_num(&row[21], 100.0 * wire / dense_wire);
  return RF_OK;
}

rf_status rf_report_build_delta(const rf_loaded_results *files, int count, rf_report_tables *t) {
  rf_report_table_init(&t->delta, "delta", "Delta refits against the changed fraction",
                       (int)RF_ARRAY_LEN(delta_head), delta_head, delta_digits);
  for (int f = 0; f < count; f++) {
    if (!file_has_delta(&files[f]))
      continue;
    for (int i = 0; i < files[f].run_count; i++)
      if (shown(&files[f].runs[i]))
        RF_TRY(add_row(&t->delta, f + 1, &files[f], &files[f].runs[i]));
  }
  return RF_OK;
}

/* Do the file's shown runs differ in more than --delta and --update? Then the series name
 * their mode and job too. */
static int mixed(const rf_loaded_results *f) {
  const rf_loaded_run *first = NULL;
  for (int i = 0; i < f->run_count; i++) {
    const rf_loaded_run *r = &f->runs[i];
    if (!shown(r))
      continue;
    if (!first)
      first = r;
    else if (!report_same_config(first, r))
      return 1;
  }
  return 0;
}

/* One chart of file `file`: a category per --update, in the order of its changed fraction, a
 * series per --delta choice ("off (dense)" for the dense refits); the median time, or the bytes
 * on the wire on a log axis. A configuration run twice shows its latest run. */
static void delta_chart(rf_report_chart *c, const rf_loaded_results *f, int file, int wire) {
  rf_report_chart_init(c, wire ? "delta_wire" : "delta_time", file, RF_CHART_BARS,
                       "--update, by changed fraction",
                       wire ? "bytes on the wire (log)" : "median time (ms)");
  c->log_y = wire;
  snprintf(c->title, sizeof c->title, "%s against the changed fraction, file %d",
           wire ? "Wire bytes" : "Median time", file);
  int several = mixed(f);
  double key[256];
  for (int i = 0; i < f->run_count; i++) {
    const rf_loaded_run *r = &f->runs[i];
    if (!shown(r))
      continue;
    char series[RF_CHART_LABEL];
    const char *choice = is_delta(r) ? r->delta : "off (dense)";
    if (several)
      snprintf(series, sizeof series, "%s %s %s>%s %s", choice, r->mode, r->trainer, r->rollout,
               r->transport);
    else
      snprintf(series, sizeof series, "%s", choice);
    int k = rf_report_chart_category(c, r->update);
    if (k < 0 || k >= (int)RF_ARRAY_LEN(key))
      continue;                   /* More rules than a chart can show; the table has them all. */
    key[k] = r->changed_fraction; /* the category's latest run's */
    rf_report_chart_set(c, rf_report_chart_series(c, series), k,
                        wire ? wire_of(r) : MS(r->time_median_s));
  }
  if (c->categories <= (int)RF_ARRAY_LEN(key))
    rf_report_chart_sort(c, key);
}

void rf_report_delta_html(const rf_loaded_results *files, int count, const rf_report_tables *t,
                          rf_strbuf *out) {
  rf_strbuf_printf(out, "<h2 id=\"%s\">", t->delta.id);
  rf_report_html_text(out, t->delta.title);
  rf_strbuf_printf(out, "</h2>\n");
  for (int f = 1; f <= count; f++) {
    if (!file_has_delta(&files[f - 1]))
      continue;
    for (int wire = 0; wire < 2; wire++) {
      rf_report_chart c;
      delta_chart(&c, &files[f - 1], f, wire);
      rf_report_chart_svg(&c, out);
      rf_report_chart_free(&c);
    }
  }
  rf_report_table_html(&t->delta, out);
}
