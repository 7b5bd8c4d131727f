/* report: what people read. The nccl-tests-style table that rank 0 prints while a job runs,
 * and the offline `refit report` (HTML with inline SVG, Markdown, CSV) built from results files
 * read back through io. The result model it prints is result.h's. */
#ifndef RF_REPORT_H
#define RF_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "io/io.h"
#include "result/result.h"

/* The links as header text: one line per link for jobs of at most 16 links, then one line per
 * distance class, nearest first: "# links: 4 process (1.00 GiB), 12 switch (3.00 GiB)". */
void rf_report_links(FILE *out, const rf_link_info *links, int link_count);

/* The table, in three parts so rows can be printed as runs finish. The header carries refit
 * version and commit, the MPI library, the command line, the job, the transport and why (when
 * `transport_line` is not NULL), one line per rank and the links (when `links` is not NULL). */
void rf_report_header(FILE *out, const char *command_line, const char *job_line,
                      const char *transport_line, const rf_rank_info *ranks, int rank_count,
                      const rf_link_info *links, int link_count);
void rf_report_row(FILE *out, const rf_run_result *r);
/* "# PASS" or "# FAIL: <reason>"; the reason names the first failing run. */
void rf_report_footer(FILE *out, rf_status status, const char *reason);

/* ---- refit report: a page, Markdown and CSV from results files ---------------------------- */

/* Writes report.html (one self-contained page with inline SVG charts), report.md and one CSV
 * per table into `dir`, creating it when missing. The first file is the reference that the
 * others are compared with. */
rf_status rf_report_write(const struct rf_loaded_results *files, int count, const char *dir);

#endif
