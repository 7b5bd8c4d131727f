/* The report's tables: building rows, and writing each table as CSV, Markdown and HTML. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report_internal.h"

void rf_report_table_init(rf_report_table *t, const char *id, const char *title, int cols,
                          const char *const *head, const int *digits) {
  memset(t, 0, sizeof *t);
  t->id = id;
  t->title = title;
  t->cols = cols;
  t->head = head;
  t->digits = digits;
}

void rf_report_table_free(rf_report_table *t) {
  free(t->cells);
  t->cells = NULL;
  t->rows = t->cap = 0;
}

rf_report_cell *rf_report_table_row(rf_report_table *t) {
  if (t->rows == t->cap) {
    int cap = t->cap ? 2 * t->cap : 16;
    void *p =
        rf_realloc(t->cells, (size_t)cap * (size_t)t->cols * sizeof *t->cells, "a report table");
    if (!p)
      return NULL;
    t->cells = p;
    t->cap = cap;
  }
  rf_report_cell *row = t->cells + (size_t)t->rows++ * (size_t)t->cols;
  memset(row, 0, (size_t)t->cols * sizeof *row);
  return row;
}

void rf_cell_text(rf_report_cell *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->text, sizeof c->text, fmt, ap);
  va_end(ap);
  c->kind = RF_CELL_TEXT;
}

void rf_cell_int(rf_report_cell *c, int64_t v) {
  c->kind = RF_CELL_INT;
  c->i = v;
}

void rf_cell_num(rf_report_cell *c, double v) {
  c->kind = RF_CELL_NUM;
  c->num = v;
}

/* A cell as people read it: numbers rounded to the column's decimals, missing ones as "-". */
static const char *cell_display(const rf_report_table *t, int col, const rf_report_cell *c,
                                char *buf, size_t len) {
  switch (c->kind) {
  case RF_CELL_TEXT:
    return c->text;
  case RF_CELL_INT:
    snprintf(buf, len, "%lld", (long long)c->i);
    return buf;
  case RF_CELL_NUM:
    if (isnan(c->num))
      return "-";
    snprintf(buf, len, "%.*f", t->digits ? t->digits[col] : 3, c->num);
    return buf;
  default:
    return "-";
  }
}

/* RFC 4180: a field holding a comma, quote or line break is quoted, its quotes doubled. */
static void csv_field(rf_strbuf *out, const char *s) {
  if (!strpbrk(s, ",\"\n\r")) {
    rf_strbuf_printf(out, "%s", s);
    return;
  }
  rf_strbuf_printf(out, "\"");
  for (; *s; s++)
    rf_strbuf_printf(out, *s == '"' ? "\"\"" : "%c", *s);
  rf_strbuf_printf(out, "\"");
}

void rf_report_table_csv(const rf_report_table *t, rf_strbuf *out) {
  for (int c = 0; c < t->cols; c++)
    rf_strbuf_printf(out, "%s%s", c ? "," : "", t->head[c]);
  rf_strbuf_printf(out, "\n");
  for (int r = 0; r < t->rows; r++) {
    const rf_report_cell *row = t->cells + (size_t)r * (size_t)t->cols;
    for (int c = 0; c < t->cols; c++) {
      if (c)
        rf_strbuf_printf(out, ",");
      /* Full precision, so a program reading the CSV gets the file's values back. */
      if (row[c].kind == RF_CELL_TEXT)
        csv_field(out, row[c].text);
      else if (row[c].kind == RF_CELL_INT)
        rf_strbuf_printf(out, "%lld", (long long)row[c].i);
      else if (row[c].kind == RF_CELL_NUM && !isnan(row[c].num))
        rf_strbuf_printf(out, "%.17g", row[c].num);
    }
    rf_strbuf_printf(out, "\n");
  }
}

static void md_text(rf_strbuf *out, const char *s) {
  for (; *s; s++) {
    if (*s == '|')
      rf_strbuf_printf(out, "\\|");
    else
      rf_strbuf_printf(out, "%c", *s == '\n' ? ' ' : *s);
  }
}

void rf_report_table_md(const rf_report_table *t, rf_strbuf *out) {
  rf_strbuf_printf(out, "## %s\n\n", t->title);
  if (t->rows == 0) {
    rf_strbuf_printf(out, "(none)\n\n");
    return;
  }
  for (int c = 0; c < t->cols; c++)
    rf_strbuf_printf(out, "| %s ", t->head[c]);
  rf_strbuf_printf(out, "|\n");
  /* Numeric columns are right-aligned, as in the HTML table. */
  for (int c = 0; c < t->cols; c++)
    rf_strbuf_printf(out, "|%s", t->digits && t->digits[c] >= 0 ? "---:" : "---");
  rf_strbuf_printf(out, "|\n");
  char buf[64];
  for (int r = 0; r < t->rows; r++) {
    const rf_report_cell *row = t->cells + (size_t)r * (size_t)t->cols;
    for (int c = 0; c < t->cols; c++) {
      rf_strbuf_printf(out, "| ");
      md_text(out, cell_display(t, c, &row[c], buf, sizeof buf));
      rf_strbuf_printf(out, " ");
    }
    rf_strbuf_printf(out, "|\n");
  }
  rf_strbuf_printf(out, "\n");
}

void rf_report_html_text(rf_strbuf *out, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '&':
      rf_strbuf_printf(out, "&amp;");
      break;
    case '<':
      rf_strbuf_printf(out, "&lt;");
      break;
    case '>':
      rf_strbuf_printf(out, "&gt;");
      break;
    case '"':
      rf_strbuf_printf(out, "&quot;");
      break;
    default:
      rf_strbuf_printf(out, "%c", *s);
    }
  }
}

void rf_report_table_html(const rf_report_table *t, rf_strbuf *out) {
  if (t->rows == 0) {
    rf_strbuf_printf(out, "<p class=\"none\">(none)</p>\n");
    return;
  }
  rf_strbuf_printf(out, "<table data-table=\"%s\">\n<thead><tr>", t->id);
  for (int c = 0; c < t->cols; c++) {
    rf_strbuf_printf(out, "<th>");
    /* Long column names may break after an underscore, so wide tables fit the page. */
    for (const char *h = t->head[c]; *h; h++)
      rf_strbuf_printf(out, *h == '_' ? "_<wbr>" : "%c", *h);
    rf_strbuf_printf(out, "</th>");
  }
  rf_strbuf_printf(out, "</tr></thead>\n<tbody>\n");
  char buf[64];
  for (int r = 0; r < t->rows; r++) {
    const rf_report_cell *row = t->cells + (size_t)r * (size_t)t->cols;
    rf_strbuf_printf(out, "<tr>");
    for (int c = 0; c < t->cols; c++) {
      const char *text = cell_display(t, c, &row[c], buf, sizeof buf);
      /* Verdicts are coloured so a failed, skipped or simulated run stands out in a long table. */
      const char *cls = row[c].kind == RF_CELL_NUM || row[c].kind == RF_CELL_INT         ? "num"
                        : strcmp(text, "PASS") == 0                                      ? "pass"
                        : strcmp(text, "FAIL") == 0                                      ? "fail"
                        : strcmp(text, "skipped") == 0 || strcmp(text, "simulated") == 0 ? "skip"
                                                                                         : "";
      rf_strbuf_printf(out, "<td%s%s%s>", *cls ? " class=\"" : "", cls, *cls ? "\"" : "");
      rf_report_html_text(out, text);
      rf_strbuf_printf(out, "</td>");
    }
    rf_strbuf_printf(out, "</tr>\n");
  }
  rf_strbuf_printf(out, "</tbody></table>\n");
}

const char *rf_report_bucket_label(int64_t bucket, char *buf, size_t len) {
  if (bucket == 0)
    snprintf(buf, len, "whole model");
  else if (bucket < 0)
    snprintf(buf, len, "-");
  else
    rf_format_bytes(bucket, buf, len);
  return buf;
}
