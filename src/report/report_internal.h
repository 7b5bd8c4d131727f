/* What the files of `refit report` share: a table that becomes one CSV file, one Markdown table
 * and one HTML table, and a chart that becomes one inline SVG. Private to src/report/report_*.c.
 *
 * Each table is built once, so the three outputs cannot disagree: numbers are kept as numbers
 * and printed in full precision in CSV (for programs) and rounded in Markdown and HTML (for
 * people). */
#ifndef RF_REPORT_INTERNAL_H
#define RF_REPORT_INTERNAL_H

#include "core/core.h"
#include "io/io.h"

typedef enum { RF_CELL_NONE, RF_CELL_TEXT, RF_CELL_INT, RF_CELL_NUM } rf_cell_kind;

typedef struct {
  rf_cell_kind kind;
  char text[256];
  int64_t i;
  double num; /* NAN prints as an empty CSV field and "-" elsewhere */
} rf_report_cell;

typedef struct {
  const char *id;    /* the CSV file's name without .csv, and the HTML table's data-table */
  const char *title; /* the section heading */
  int cols;
  const char *const *head; /* column names, with units */
  const int *digits;       /* decimals of each numeric column in Markdown and HTML */
  rf_report_cell *cells;   /* [row][col] */
  int rows, cap;
} rf_report_table;

void rf_report_table_init(rf_report_table *t, const char *id, const char *title, int cols,
                          const char *const *head, const int *digits);
void rf_report_table_free(rf_report_table *t);
/* Appends an empty row and returns its cols cells, or NULL when out of memory (logged). */
rf_report_cell *rf_report_table_row(rf_report_table *t);
void rf_cell_text(rf_report_cell *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rf_cell_int(rf_report_cell *c, int64_t v);
void rf_cell_num(rf_report_cell *c, double v);

void rf_report_table_csv(const rf_report_table *t, rf_strbuf *out);
void rf_report_table_md(const rf_report_table *t, rf_strbuf *out);
void rf_report_table_html(const rf_report_table *t, rf_strbuf *out);

/* Text with &, <, >, " escaped for HTML element content and attribute values. */
void rf_report_html_text(rf_strbuf *out, const char *text);

/* A chart: values[series][category] (NAN: no point). Bars are grouped per category, or stacked
 * into one column per category; markers draw one dot per value instead. */
typedef enum { RF_CHART_BARS, RF_CHART_STACKED, RF_CHART_MARKERS } rf_chart_kind;

#define RF_CHART_LABEL 1024

typedef struct {
  char id[32]; /* data-chart */
  int file;    /* data-file: the input it draws, 1-based */
  char title[160];
  const char *x_label, *y_label; /* the y label carries the unit */
  rf_chart_kind kind;
  int log_y; /* a logarithmic y axis of whole decades, for values over orders of magnitude;
              * values <= 0 are not drawn on it */
  int categories, series;
  char (*category)[RF_CHART_LABEL];
  char (*series_name)[RF_CHART_LABEL];
  double *values;
  int category_cap, series_cap; /* of values */
  int category_label_cap, series_label_cap;
} rf_report_chart;

void rf_report_chart_init(rf_report_chart *c, const char *id, int file, rf_chart_kind kind,
                          const char *x_label, const char *y_label);
void rf_report_chart_free(rf_report_chart *c);
/* The index of a category or series with this label, added when new; -1 when out of memory. */
int rf_report_chart_category(rf_report_chart *c, const char *label);
int rf_report_chart_series(rf_report_chart *c, const char *label);
void rf_report_chart_set(rf_report_chart *c, int series, int category, double value);
/* Reorders the categories by key[category] (ascending), carrying their values and the keys
 * themselves along. */
void rf_report_chart_sort(rf_report_chart *c, double *key);
/* Appends the <svg class="chart">, or a short paragraph when there is nothing to draw. */
void rf_report_chart_svg(const rf_report_chart *c, rf_strbuf *out);

/* The tables and charts of the report, built from the loaded files. */
typedef struct {
  rf_report_table runs, status, modes, layouts, phases, spread, limits, compare;
  rf_report_table simulated, published; /* refit simulate's predictions (report_simulated.c) */
  rf_report_table delta;                /* delta refits (report_delta.c) */
} rf_report_tables;

rf_status rf_report_build_tables(const rf_loaded_results *files, int count, rf_report_tables *t);
void rf_report_tables_free(rf_report_tables *t);

/* The simulated runs and the published refits beside refit's best prediction of each. The two
 * tables are written only when some file holds a simulated run, so reports of measured runs
 * alone stay as they were. */
rf_status rf_report_build_simulated(const rf_loaded_results *files, int count, rf_report_tables *t);
int rf_report_has_simulated(const rf_loaded_results *files, int count);

/* The delta section: the table of every measured run of a changing version in the files that
 * sent deltas, with the dense refit of the same job beside each delta run; and in the page,
 * per such file, the median time and the wire bytes against the changed fraction. Written only
 * when some file holds a delta run. */
rf_status rf_report_build_delta(const rf_loaded_results *files, int count, rf_report_tables *t);
int rf_report_has_delta(const rf_loaded_results *files, int count);
void rf_report_delta_html(const rf_loaded_results *files, int count, const rf_report_tables *t,
                          rf_strbuf *out);

/* The page: every table and, for each file, its charts. */
rf_status rf_report_html(const rf_loaded_results *files, int count, const rf_report_tables *t,
                         rf_strbuf *out);
/* "whole model" for 0, else binary units ("256.00 MiB"). */
const char *rf_report_bucket_label(int64_t bucket, char *buf, size_t len);

/* A run that measured something: neither a skipped sweep combination nor refit simulate's
 * prediction. Only these go into the charts and the tables that compare times. */
static inline int report_measured(const rf_loaded_run *r) { return !r->skipped && !r->simulated; }
/* Two runs of the same configuration: model, layouts, placement, plan, mode, transport and
 * bucket size (report_build.c). */
int report_same_config(const rf_loaded_run *a, const rf_loaded_run *b);

#endif
