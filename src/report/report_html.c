/* The report's page and files: the charts of each input drawn from the tables, the one
 * self-contained report.html (inline CSS and SVG, no script), report.md and a CSV per table.
 * Nothing in the output depends on when or where the report was made, only on the files. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "report_internal.h"

static const char css[] =
    "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}"
    "h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ccc}"
    "table{border-collapse:collapse;margin:8px 0;font-size:12px}"
    "th,td{border:1px solid #ccc;padding:2px 6px;text-align:left}th{background:#f0f0f0}"
    "td{white-space:nowrap}"
    "td.num{text-align:right;font-variant-numeric:tabular-nums}"
    "td.pass{color:#1a7f37;font-weight:bold}td.fail{color:#cf222e;font-weight:bold}"
    "td.skip{color:#9a6700}p.none{color:#666}"
    "svg.chart{display:block;margin:8px 0;background:#fff;border:1px solid #ddd}"
    "svg .grid{stroke:#e6e6e6}svg .axis{stroke:#444}svg text{font-size:11px;fill:#222}"
    "svg .title{font-size:14px;font-weight:bold}svg .label{font-size:12px}";

/* The cell of `table` row r, column c. */
static const rf_report_cell *cell(const rf_report_table *t, int r, int c) {
  return t->cells + (size_t)r * (size_t)t->cols + c;
}

static void run_label(char *buf, size_t len, const rf_report_table *t, int r) {
  char bucket[32];
  snprintf(buf, len, "%04lld %s %s", (long long)cell(t, r, 1)->i, cell(t, r, 2)->text,
           rf_report_bucket_label(cell(t, r, 3)->i, bucket, sizeof bucket));
}

/* Does file `file` hold more than one layout, plan or transport? Then a mode alone does not
 * name a series of the modes chart. */
static int mixed_layouts(const rf_loaded_results *f) {
  const rf_loaded_run *first = NULL;
  for (int i = 0; i < f->run_count; i++) {
    const rf_loaded_run *r = &f->runs[i];
    if (!report_measured(r))
      continue;
    if (!first)
      first = r;
    else if (strcmp(first->trainer, r->trainer) || strcmp(first->rollout, r->rollout) ||
             strcmp(first->placement, r->placement) || strcmp(first->plan, r->plan) ||
             strcmp(first->transport, r->transport) || strcmp(first->model, r->model))
      return 1;
  }
  return 0;
}

/* Time (ms) or bandwidth (GB/s) per mode (series) and bucket size (categories, ascending,
 * the whole model last). A configuration run twice shows its latest run. */
static void modes_chart(rf_report_chart *c, const rf_loaded_results *f, int file, int bandwidth) {
  rf_report_chart_init(c, bandwidth ? "bandwidth" : "modes_buckets", file, RF_CHART_BARS,
                       "bucket size", bandwidth ? "algbw (GB/s)" : "median time (ms)");
  snprintf(c->title, sizeof c->title, "%s per mode and bucket size, file %d",
           bandwidth ? "Bandwidth" : "Median time", file);
  int mixed = mixed_layouts(f);
  double key[256];
  for (int i = 0; i < f->run_count; i++) {
    const rf_loaded_run *r = &f->runs[i];
    if (!report_measured(r))
      continue;
    char series[RF_CHART_LABEL], bucket[32];
    if (mixed)
      snprintf(series, sizeof series, "%s %s>%s %s %s %s", r->mode, r->trainer, r->rollout, r->plan,
               r->placement, r->transport);
    else
      snprintf(series, sizeof series, "%s", r->mode);
    int k =
        rf_report_chart_category(c, rf_report_bucket_label(r->bucket_size, bucket, sizeof bucket));
    if (k < 0 || k >= (int)RF_ARRAY_LEN(key))
      continue; /* More bucket sizes than a chart can show; the table has them all. */
    key[k] = r->bucket_size > 0 ? (double)r->bucket_size : INFINITY;
    rf_report_chart_set(c, rf_report_chart_series(c, series), k,
                        bandwidth ? r->algbw_GBps : r->time_median_s * 1e3);
  }
  if (c->categories <= (int)RF_ARRAY_LEN(key))
    rf_report_chart_sort(c, key);
}

static void layouts_chart(rf_report_chart *c, const rf_report_table *t, int file) {
  rf_report_chart_init(c, "layouts", file, RF_CHART_BARS, "trainer > rollout (placement)",
                       "fastest median time (ms)");
  snprintf(c->title, sizeof c->title, "Fastest run per layout and plan, file %d", file);
  for (int r = 0; r < t->rows; r++) {
    if (cell(t, r, 0)->i != file)
      continue;
    char label[RF_CHART_LABEL];
    snprintf(label, sizeof label, "%s > %s (%s)", cell(t, r, 1)->text, cell(t, r, 2)->text,
             cell(t, r, 3)->text);
    rf_report_chart_set(c, rf_report_chart_series(c, cell(t, r, 4)->text),
                        rf_report_chart_category(c, label), cell(t, r, 6)->num);
  }
}

/* One category per run of `file` in table t, with the numeric columns `cols` as series named
 * `names`. */
static void runs_chart(rf_report_chart *c, const rf_report_table *t, int file, const int *cols,
                       const char *const *names, int n) {
  for (int r = 0; r < t->rows; r++) {
    if (cell(t, r, 0)->i != file)
      continue;
    char label[RF_CHART_LABEL];
    run_label(label, sizeof label, t, r);
    int k = rf_report_chart_category(c, label);
    for (int s = 0; s < n; s++)
      if (!isnan(cell(t, r, cols[s])->num))
        rf_report_chart_set(c, rf_report_chart_series(c, names[s]), k, cell(t, r, cols[s])->num);
  }
}

static void compare_chart(rf_report_chart *c, const rf_report_table *t, int file) {
  rf_report_chart_init(c, "compare", file, RF_CHART_BARS, "matched configuration",
                       "median time (ms)");
  snprintf(c->title, sizeof c->title, "File 1 (A) against file %d (B)", file);
  char a[32], b[32];
  snprintf(a, sizeof a, "A: file 1");
  snprintf(b, sizeof b, "B: file %d", file);
  for (int r = 0; r < t->rows; r++) {
    if (cell(t, r, 0)->i != file)
      continue;
    char label[RF_CHART_LABEL], bucket[32];
    snprintf(label, sizeof label, "%04lld %s %s", (long long)cell(t, r, 9)->i, cell(t, r, 6)->text,
             rf_report_bucket_label(cell(t, r, 8)->i, bucket, sizeof bucket));
    int k = rf_report_chart_category(c, label);
    rf_report_chart_set(c, rf_report_chart_series(c, a), k, cell(t, r, 11)->num);
    rf_report_chart_set(c, rf_report_chart_series(c, b), k, cell(t, r, 12)->num);
  }
}

static void draw(rf_report_chart *c, rf_strbuf *out) {
  rf_report_chart_svg(c, out);
  rf_report_chart_free(c);
}

static void section(rf_strbuf *out, const rf_report_table *t) {
  rf_strbuf_printf(out, "<h2 id=\"%s\">", t->id);
  rf_report_html_text(out, t->title);
  rf_strbuf_printf(out, "</h2>\n");
}

static void files_list(rf_strbuf *out, const rf_loaded_results *files, int count) {
  rf_strbuf_printf(out, "<table data-table=\"files\"><thead><tr><th>file</th><th>path</th>"
                        "<th>created</th><th>refit</th><th>hosts</th><th>runs</th></tr>"
                        "</thead>\n<tbody>\n");
  for (int f = 0; f < count; f++) {
    const char *text[] = {files[f].path, files[f].created, files[f].refit_version, files[f].hosts};
    rf_strbuf_printf(out, "<tr><td class=\"num\">%d%s</td>", f + 1,
                     f == 0 && count > 1 ? " (reference)" : "");
    for (size_t i = 0; i < RF_ARRAY_LEN(text); i++) {
      rf_strbuf_printf(out, "<td>");
      rf_report_html_text(out, text[i]);
      rf_strbuf_printf(out, "</td>");
    }
    rf_strbuf_printf(out, "<td class=\"num\">%d</td></tr>\n", files[f].run_count);
  }
  rf_strbuf_printf(out, "</tbody></table>\n");
}

rf_status rf_report_html(const rf_loaded_results *files, int count, const rf_report_tables *t,
                         rf_strbuf *out) {
  int phase_cols[RF_PHASE_TOTAL]; /* the phases before total */
  for (int p = 0; p < RF_PHASE_TOTAL; p++)
    phase_cols[p] = 4 + p;
  static const int spread_cols[] = {6, 7};
  static const char *const spread_names[] = {"median", "p99"};
  static const int limit_cols[RF_LIMIT_COUNT] = {6, 8, 10, 12};
  rf_report_chart c;
  rf_strbuf_printf(out,
                   "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                   "<title>refit report</title>\n<style>%s</style>\n</head>\n<body>\n"
                   "<h1>refit report</h1>\n",
                   css);
  files_list(out, files, count);
  section(out, &t->runs);
  rf_report_table_html(&t->runs, out);
  section(out, &t->status);
  rf_report_table_html(&t->status, out);
  section(out, &t->modes);
  for (int f = 1; f <= count; f++) {
    modes_chart(&c, &files[f - 1], f, 0);
    draw(&c, out);
    modes_chart(&c, &files[f - 1], f, 1);
    draw(&c, out);
  }
  rf_report_table_html(&t->modes, out);
  section(out, &t->layouts);
  for (int f = 1; f <= count; f++) {
    layouts_chart(&c, &t->layouts, f);
    draw(&c, out);
  }
  rf_report_table_html(&t->layouts, out);
  section(out, &t->phases);
  for (int f = 1; f <= count; f++) {
    rf_report_chart_init(&c, "phases", f, RF_CHART_STACKED, "run", "median time (ms)");
    snprintf(c.title, sizeof c.title, "Phases per run (summary medians), file %d", f);
    runs_chart(&c, &t->phases, f, phase_cols, rf_phase_names, RF_PHASE_TOTAL);
    draw(&c, out);
  }
  rf_report_table_html(&t->phases, out);
  section(out, &t->spread);
  for (int f = 1; f <= count; f++) {
    rf_report_chart_init(&c, "spread", f, RF_CHART_MARKERS, "run", "total time (ms)");
    snprintf(c.title, sizeof c.title, "Total over all iterations and ranks, file %d", f);
    runs_chart(&c, &t->spread, f, spread_cols, spread_names, 2);
    draw(&c, out);
  }
  rf_report_table_html(&t->spread, out);
  section(out, &t->limits);
  for (int f = 1; f <= count; f++) {
    rf_report_chart_init(&c, "limits", f, RF_CHART_BARS, "run", "% of the calibrated limit");
    snprintf(c.title, sizeof c.title, "Limit time / median time, file %d", f);
    runs_chart(&c, &t->limits, f, limit_cols, rf_limit_names, RF_LIMIT_COUNT);
    if (c.series == 0)
      rf_strbuf_printf(out,
                       "<p class=\"none\">File %d: not calibrated (run with --calibrate)"
                       "</p>\n",
                       f);
    else
      rf_report_chart_svg(&c, out);
    rf_report_chart_free(&c);
  }
  rf_report_table_html(&t->limits, out);
  if (count > 1) {
    section(out, &t->compare);
    for (int f = 2; f <= count; f++) {
      compare_chart(&c, &t->compare, f);
      draw(&c, out);
    }
    rf_report_table_html(&t->compare, out);
  }
  if (rf_report_has_delta(files, count))
    rf_report_delta_html(files, count, t, out);
  if (rf_report_has_simulated(files, count)) {
    section(out, &t->simulated);
    rf_report_table_html(&t->simulated, out);
    section(out, &t->published);
    rf_report_table_html(&t->published, out);
  }
  rf_strbuf_printf(out, "</body>\n</html>\n");
  return out->data ? RF_OK : rf_fail(RF_ERR_NOMEM, "out of memory building the report page");
}
