/* The report's charts, drawn as inline SVG by refit itself so the page needs no script and no
 * file beside it. Every chart is <svg class="chart" data-chart="ID" data-file="N">, every
 * series a <g class="series" data-series="NAME">, and every bar or marker carries
 * class="point", so a test can count what was drawn. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report_internal.h"

/* A palette that stays distinguishable for the usual handful of series (phases, modes). */
static const char *const colours[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                      "#76b7b2", "#edc948", "#b07aa1", "#9c755f"};

/* Modes and phases keep their colour from chart to chart, whatever order a file lists them in;
 * other series are coloured in order. */
static const char *colour_of(const rf_report_chart *c, int s) {
  static const char *const known[] = {"unfused", "grouped", "fused",    "setup",  "reshape",
                                      "encode",  "pack",    "transfer", "unpack", "apply"};
  for (size_t i = 0; i < RF_ARRAY_LEN(known); i++)
    if (strcmp(c->series_name[s], known[i]) == 0)
      return colours[(i < 3 ? i : i - 3) % RF_ARRAY_LEN(colours)];
  return colours[s % RF_ARRAY_LEN(colours)];
}

enum { WIDTH = 900, HEIGHT = 380, LEFT = 80, RIGHT = 190, TOP = 44, BOTTOM = 116 };

void rf_report_chart_init(rf_report_chart *c, const char *id, int file, rf_chart_kind kind,
                          const char *x_label, const char *y_label) {
  memset(c, 0, sizeof *c);
  snprintf(c->id, sizeof c->id, "%s", id);
  c->file = file;
  c->kind = kind;
  c->x_label = x_label;
  c->y_label = y_label;
}

void rf_report_chart_free(rf_report_chart *c) {
  free(c->category);
  free(c->series_name);
  free(c->values);
  memset(c, 0, sizeof *c);
}

/* Values are stored [series][category_cap], so growing either axis re-lays them out. */
static int resize(rf_report_chart *c, int series_cap, int category_cap) {
  double *v = rf_calloc((size_t)series_cap * (size_t)category_cap, sizeof *v, "chart values");
  if (!v)
    return -1;
  for (int i = 0; i < series_cap * category_cap; i++)
    v[i] = NAN;
  for (int s = 0; s < c->series; s++)
    for (int k = 0; k < c->categories; k++)
      v[s * category_cap + k] = c->values[s * c->category_cap + k];
  free(c->values);
  c->values = v;
  c->series_cap = series_cap;
  c->category_cap = category_cap;
  return 0;
}

static int find_or_add(rf_report_chart *c, const char *label, int is_series) {
  char(*names)[RF_CHART_LABEL] = is_series ? c->series_name : c->category;
  int n = is_series ? c->series : c->categories;
  for (int i = 0; i < n; i++)
    if (strcmp(names[i], label) == 0)
      return i;
  int *label_cap = is_series ? &c->series_label_cap : &c->category_label_cap;
  if (n == *label_cap) {
    int more = *label_cap ? 2 * *label_cap : 8;
    void *p = rf_realloc(names, (size_t)more * sizeof *names, "chart labels");
    if (!p)
      return -1;
    names = p;
    if (is_series)
      c->series_name = p;
    else
      c->category = p;
    *label_cap = more;
  }
  int value_cap = is_series ? c->series_cap : c->category_cap;
  if (n == value_cap &&
      resize(c, is_series ? RF_MAX(2 * value_cap, 8) : RF_MAX(c->series_cap, 8),
             is_series ? RF_MAX(c->category_cap, 8) : RF_MAX(2 * value_cap, 8)) != 0)
    return -1;
  snprintf(names[n], RF_CHART_LABEL, "%s", label);
  return is_series ? c->series++ : c->categories++;
}

int rf_report_chart_category(rf_report_chart *c, const char *label) {
  return find_or_add(c, label, 0);
}

int rf_report_chart_series(rf_report_chart *c, const char *label) {
  return find_or_add(c, label, 1);
}

void rf_report_chart_set(rf_report_chart *c, int series, int category, double value) {
  if (series >= 0 && category >= 0)
    c->values[series * c->category_cap + category] = value;
}

void rf_report_chart_sort(rf_report_chart *c, double *key) {
  /* Insertion sort: a chart has tens of categories, and ties keep their first-seen order. */
  for (int i = 1; i < c->categories; i++)
    for (int j = i; j > 0 && key[j - 1] > key[j]; j--) {
      char label[RF_CHART_LABEL];
      memcpy(label, c->category[j], sizeof label);
      memcpy(c->category[j], c->category[j - 1], sizeof label);
      memcpy(c->category[j - 1], label, sizeof label);
      double t = key[j];
      key[j] = key[j - 1];
      key[j - 1] = t;
      for (int s = 0; s < c->series; s++) {
        double *v = c->values + s * c->category_cap;
        t = v[j];
        v[j] = v[j - 1];
        v[j - 1] = t;
      }
    }
}

static double value_at(const rf_report_chart *c, int s, int k) {
  return c->values[s * c->category_cap + k];
}

/* The top of the y axis: the smallest 1, 2, 2.5 or 5 times a power of ten above the data, so
 * five ticks fall on round numbers. */
static double nice_top(double max) {
  if (!(max > 0))
    return 1.0;
  double p = pow(10.0, floor(log10(max)));
  static const double steps[] = {1.0, 2.0, 2.5, 5.0, 10.0};
  for (size_t i = 0; i < RF_ARRAY_LEN(steps); i++)
    if (steps[i] * p >= max)
      return steps[i] * p;
  return 10.0 * p;
}

/* Whether value v is drawn: a log axis has no place for zero or less. */
static int drawn(const rf_report_chart *c, double v) { return !isnan(v) && (!c->log_y || v > 0); }

/* The y range: [0, max], stacked where the chart stacks; on a log axis [min, max] of the
 * positive values (a log chart does not stack). */
static double data_max(const rf_report_chart *c, int *points, double *min) {
  double max = 0.0;
  *points = 0;
  *min = INFINITY;
  for (int k = 0; k < c->categories; k++) {
    double stack = 0.0;
    for (int s = 0; s < c->series; s++) {
      double v = value_at(c, s, k);
      if (!drawn(c, v))
        continue;
      (*points)++;
      stack += v;
      *min = RF_MIN(*min, v);
      max = RF_MAX(max, c->kind == RF_CHART_STACKED && !c->log_y ? stack : v);
    }
  }
  return max;
}

/* The axis: [0, top] linear, or [bottom, top] in whole decades on a log axis. */
typedef struct {
  double bottom, top;
} y_range;

/* The height above the x axis of value v, in pixels of a plot plot_h high. */
static double height_of(const rf_report_chart *c, y_range r, double v, int plot_h) {
  if (!c->log_y)
    return plot_h * v / r.top;
  return plot_h * (log10(v) - log10(r.bottom)) / (log10(r.top) - log10(r.bottom));
}

static void axes(const rf_report_chart *c, rf_strbuf *out, y_range r) {
  int plot_w = WIDTH - LEFT - RIGHT, plot_h = HEIGHT - TOP - BOTTOM;
  rf_strbuf_printf(out, "<g class=\"axes\">\n");
  /* Five linear ticks, or one a decade (every other one past ten decades). */
  int ticks = c->log_y ? (int)lround(log10(r.top / r.bottom)) : 5;
  int step = ticks > 10 ? 2 : 1;
  for (int i = 0; i <= ticks; i += step) {
    double v = c->log_y ? r.bottom * pow(10.0, i) : r.top * i / 5.0;
    double y = TOP + plot_h - (c->log_y ? height_of(c, r, v, plot_h) : plot_h * i / 5.0);
    /* A decade past four digits reads 1e6, short enough to stay clear of the axis title. */
    char tick[32];
    int exponent = c->log_y ? (int)lround(log10(v)) : 0;
    if (exponent >= 4 || exponent <= -4)
      snprintf(tick, sizeof tick, "1e%d", exponent);
    else
      snprintf(tick, sizeof tick, "%g", v);
    rf_strbuf_printf(out,
                     "<line class=\"grid\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>"
                     "<text class=\"tick\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                     LEFT, y, LEFT + plot_w, y, LEFT - 6, y + 4, tick);
  }
  rf_strbuf_printf(out,
                   "<line class=\"axis\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>"
                   "<line class=\"axis\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>\n",
                   LEFT, TOP, LEFT, TOP + plot_h, LEFT, TOP + plot_h, LEFT + plot_w, TOP + plot_h);
  double band = (double)plot_w / c->categories;
  /* Labels stay level while every one fits its band (about 6.5 px a character at 11 px);
   * otherwise all are tilted, and cut to 24 characters so they stay inside the chart. */
  size_t longest = 0;
  for (int k = 0; k < c->categories; k++)
    longest = RF_MAX(longest, strlen(c->category[k]));
  int tilt = longest * 6.5 > band;
  for (int k = 0; k < c->categories; k++) {
    double x = LEFT + band * (k + 0.5);
    int y = TOP + plot_h + 16;
    if (tilt)
      rf_strbuf_printf(out,
                       "<text class=\"cat\" x=\"%.1f\" y=\"%d\" text-anchor=\"end\" "
                       "transform=\"rotate(-30 %.1f %d)\">",
                       x, y, x, y);
    else
      rf_strbuf_printf(out, "<text class=\"cat\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">", x,
                       y);
    char label[RF_CHART_LABEL];
    snprintf(label, sizeof label, "%s", c->category[k]);
    if (tilt && strlen(label) > 24)
      snprintf(label + 21, sizeof label - 21, "...");
    rf_report_html_text(out, label);
    rf_strbuf_printf(out, "</text>\n");
  }
  /* The axis title sits under the labels: at the bottom when tilted ones fill the margin. */
  rf_strbuf_printf(out, "<text class=\"label\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">",
                   LEFT + plot_w / 2, tilt ? HEIGHT - 6 : TOP + plot_h + 40);
  rf_report_html_text(out, c->x_label);
  rf_strbuf_printf(out,
                   "</text>\n<text class=\"label\" x=\"16\" y=\"%d\" text-anchor=\"middle\" "
                   "transform=\"rotate(-90 16 %d)\">",
                   TOP + plot_h / 2, TOP + plot_h / 2);
  rf_report_html_text(out, c->y_label);
  rf_strbuf_printf(out, "</text>\n</g>\n");
}

static void point_title(rf_strbuf *out, const rf_report_chart *c, int s, int k, double v) {
  rf_strbuf_printf(out, "<title>");
  rf_report_html_text(out, c->series_name[s]);
  rf_strbuf_printf(out, ", ");
  rf_report_html_text(out, c->category[k]);
  rf_strbuf_printf(out, ": %.4g</title>", v);
}

static void series(const rf_report_chart *c, rf_strbuf *out, y_range r) {
  int plot_w = WIDTH - LEFT - RIGHT, plot_h = HEIGHT - TOP - BOTTOM;
  double band = (double)plot_w / c->categories;
  double *stack = rf_calloc((size_t)c->categories, sizeof *stack, "chart stacks");
  if (!stack) {
    out->failed = 1; /* the page is not written without its series */
    return;
  }
  for (int s = 0; s < c->series; s++) {
    const char *colour = colour_of(c, s);
    rf_strbuf_printf(out, "<g class=\"series\" data-series=\"");
    rf_report_html_text(out, c->series_name[s]);
    rf_strbuf_printf(out, "\" fill=\"%s\">\n", colour);
    for (int k = 0; k < c->categories; k++) {
      double v = value_at(c, s, k);
      if (!drawn(c, v))
        continue;
      double h = height_of(c, r, v, plot_h), x, w;
      if (c->kind == RF_CHART_MARKERS) {
        x = LEFT + band * (k + 0.5);
        rf_strbuf_printf(out, "<circle class=\"point\" cx=\"%.1f\" cy=\"%.1f\" r=\"5\">", x,
                         TOP + plot_h - h);
      } else if (c->kind == RF_CHART_STACKED && !c->log_y) {
        w = band * 0.6;
        x = LEFT + band * k + band * 0.2;
        stack[k] += h;
        rf_strbuf_printf(out,
                         "<rect class=\"point\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                         "height=\"%.1f\">",
                         x, TOP + plot_h - stack[k], w, h);
      } else {
        w = band * 0.8 / c->series;
        x = LEFT + band * k + band * 0.1 + w * s;
        rf_strbuf_printf(out,
                         "<rect class=\"point\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                         "height=\"%.1f\">",
                         x, TOP + plot_h - h, w, h);
      }
      point_title(out, c, s, k, v);
      rf_strbuf_printf(out, c->kind == RF_CHART_MARKERS ? "</circle>\n" : "</rect>\n");
    }
    rf_strbuf_printf(out, "</g>\n");
  }
  free(stack);
}

static void legend(const rf_report_chart *c, rf_strbuf *out) {
  int x = WIDTH - RIGHT + 16;
  rf_strbuf_printf(out, "<g class=\"legend\">\n");
  for (int s = 0; s < c->series; s++) {
    int y = TOP + 18 * s;
    rf_strbuf_printf(out,
                     "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                     "<text x=\"%d\" y=\"%d\">",
                     x, y, colour_of(c, s), x + 18, y + 10);
    rf_report_html_text(out, c->series_name[s]);
    rf_strbuf_printf(out, "</text>\n");
  }
  rf_strbuf_printf(out, "</g>\n");
}

void rf_report_chart_svg(const rf_report_chart *c, rf_strbuf *out) {
  int points = 0;
  double min, max = data_max(c, &points, &min);
  if (points == 0) {
    rf_strbuf_printf(out, "<p class=\"none\">");
    rf_report_html_text(out, c->title);
    rf_strbuf_printf(out, ": nothing to draw.</p>\n");
    return;
  }
  y_range r = {0.0, nice_top(max)};
  if (c->log_y) { /* whole decades around the data, at least one */
    r.bottom = pow(10.0, floor(log10(min)));
    r.top = pow(10.0, RF_MAX(ceil(log10(max)), log10(r.bottom) + 1));
  }
  rf_strbuf_printf(out,
                   "<svg class=\"chart\" data-chart=\"%s\" data-file=\"%d\" "
                   "xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                   "viewBox=\"0 0 %d %d\" role=\"img\">\n<text class=\"title\" x=\"%d\" "
                   "y=\"22\" text-anchor=\"middle\">",
                   c->id, c->file, WIDTH, HEIGHT, WIDTH, HEIGHT, (WIDTH - RIGHT + LEFT) / 2);
  rf_report_html_text(out, c->title);
  rf_strbuf_printf(out, "</text>\n");
  axes(c, out, r);
  series(c, out, r);
  legend(c, out);
  rf_strbuf_printf(out, "</svg>\n");
}
