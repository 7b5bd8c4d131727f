/* report_text: the nccl-tests-style text table that rank 0 prints while a job runs
 * (docs/architecture.md, "Results").
 *
 * The table is for people and for awk: every line that is not a data row starts with '#', the
 * column line is followed by a units line, and every cell of a row is one whitespace-free
 * token (empty or absent values print as "-"), so `grep -v '^#' | awk '{print $10}'` always
 * picks the same column. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "report/report.h"

/* ---- the table -------------------------------------------------------------------------- */

/* One column: its name, its unit ("" when it has none) and its right-aligned width. The widths
 * hold 405B-sized byte counts (810 GB of bf16 is 12 digits) with room to spare. */
typedef struct {
  const char *name, *unit;
  int width;
} column;

static const column columns[] = {
    {"mode", "", 8},        {"plan", "", 9},     {"transport", "", 9},   {"bytes", "(B)", 14},
    {"pieces", "", 9},      {"messages", "", 9}, {"bucket", "(B)", 11},  {"iters", "", 5},
    {"median", "(ms)", 10}, {"p99", "(ms)", 10}, {"algbw", "(GB/s)", 8}, {"aggbw", "(GB/s)", 8},
    {"verify", "", 8},      {"#wrong", "", 12},  {"checksums", "", 9},   {"staging", "(B)", 13},
};
enum { COLUMN_COUNT = (int)RF_ARRAY_LEN(columns) };

/* A row starts with a space where the header lines have their '#', so the cells of both line
 * up under each other. */
static void print_cells(FILE *out, char lead, const char *const *cells) {
  fputc(lead, out);
  for (int c = 0; c < COLUMN_COUNT; c++)
    fprintf(out, " %*s", columns[c].width, cells[c]);
  fputc('\n', out);
}

static const char *or_dash(const char *s) { return s && s[0] ? s : "-"; }

/* The first line of the MPI library's self-description; Open MPI's is one line already, MPICH
 * spreads its configuration over many. MPI-3 allows this call before MPI_Init. */
static void mpi_library_line(char *buf, size_t len) {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int n = 0;
  if (MPI_Get_library_version(version, &n) != MPI_SUCCESS || n <= 0) {
    snprintf(buf, len, "unknown");
    return;
  }
  version[RF_MIN(n, MPI_MAX_LIBRARY_VERSION_STRING - 1)] = '\0';
  version[strcspn(version, "\r\n")] = '\0';
  size_t end = strlen(version);
  while (end > 0 &&
         (version[end - 1] == ' ' || version[end - 1] == ',' || version[end - 1] == '\t'))
    version[--end] = '\0';
  snprintf(buf, len, "%s", version[0] ? version : "unknown");
}

static int digits_of(long v) {
  int d = v < 0 ? 2 : 1;
  while (v <= -10 || v >= 10) {
    v /= 10;
    d++;
  }
  return d;
}

/* Trainer and rollout ranks are "-" on ranks that play no part on that side; "-" is one
 * character wide, whatever digits_of says about -1. */
static int role_width(int role_rank) { return role_rank < 0 ? 1 : digits_of(role_rank); }

static void format_role(char *buf, size_t len, int role_rank) {
  if (role_rank < 0)
    snprintf(buf, len, "-");
  else
    snprintf(buf, len, "%d", role_rank);
}

static void format_index(char *buf, size_t len, int index) {
  format_role(buf, len, index); /* the same rule: a number, or "-" when negative */
}

/* The rank's identity, then where it runs: GPU and bus id, cores, NUMA node and network
 * adapter, the same facts `nvidia-smi topo -m` shows for the GPU. */
static void print_rank_lines(FILE *out, const rf_rank_info *ranks, int rank_count) {
  /* Widths come from the data so a 4-rank job and a 1024-rank job both print straight
   * columns; 3 digits at least keeps small jobs from looking cramped. */
  int rank_w = 3, host_w = 1, pid_w = 1, trainer_w = 1, rollout_w = 1;
  int gpu_w = 1, bus_w = 1, cpus_w = 1, numa_w = 1, nic_w = 1;
  for (int i = 0; i < rank_count; i++) {
    const rf_rank_info *ri = &ranks[i];
    rank_w = RF_MAX(rank_w, digits_of(ri->rank));
    host_w = RF_MAX(host_w, (int)strlen(or_dash(ri->host)));
    pid_w = RF_MAX(pid_w, digits_of(ri->pid));
    trainer_w = RF_MAX(trainer_w, role_width(ri->trainer_rank));
    rollout_w = RF_MAX(rollout_w, role_width(ri->rollout_rank));
    gpu_w = RF_MAX(gpu_w, role_width(ri->gpu));
    bus_w = RF_MAX(bus_w, (int)strlen(or_dash(ri->bus_id)));
    cpus_w = RF_MAX(cpus_w, (int)strlen(or_dash(ri->cpus)));
    numa_w = RF_MAX(numa_w, role_width(ri->numa));
    nic_w = RF_MAX(nic_w, (int)strlen(or_dash(ri->nic)));
  }
  for (int i = 0; i < rank_count; i++) {
    const rf_rank_info *ri = &ranks[i];
    char trainer[16], rollout[16], gpu[16], numa[16];
    format_role(trainer, sizeof trainer, ri->trainer_rank);
    format_role(rollout, sizeof rollout, ri->rollout_rank);
    format_index(gpu, sizeof gpu, ri->gpu);
    format_index(numa, sizeof numa, ri->numa);
    fprintf(out,
            "#  rank %*d host %-*s pid %*ld trainer %*s rollout %*s gpu %*s bus %-*s cores %-*s "
            "numa %*s nic %-*s\n",
            rank_w, ri->rank, host_w, or_dash(ri->host), pid_w, ri->pid, trainer_w, trainer,
            rollout_w, rollout, gpu_w, gpu, bus_w, or_dash(ri->bus_id), cpus_w, or_dash(ri->cpus),
            numa_w, numa, nic_w, or_dash(ri->nic));
  }
}

/* Links up to this many are listed one by one; beyond it only the per-class totals help. */
enum { LINKS_LISTED_MAX = 16 };

void rf_report_links(FILE *out, const rf_link_info *links, int link_count) {
  if (link_count <= LINKS_LISTED_MAX)
    for (int i = 0; i < link_count; i++)
      fprintf(out, "#  link %d -> %d bytes %" PRId64 " distance %s\n", links[i].src, links[i].dst,
              links[i].bytes, links[i].name);
  /* Classes are few (topo.h has six) and small integers, so a scan per class is enough. */
  int lo = 0, hi = -1;
  for (int i = 0; i < link_count; i++) {
    lo = i == 0 ? links[i].distance : RF_MIN(lo, links[i].distance);
    hi = RF_MAX(hi, links[i].distance);
  }
  fprintf(out, "# links:");
  if (link_count == 0)
    fprintf(out, " none");
  for (int d = lo, first = 1; d <= hi; d++) {
    int count = 0;
    int64_t bytes = 0;
    const char *name = NULL;
    for (int i = 0; i < link_count; i++)
      if (links[i].distance == d) {
        count++;
        bytes += links[i].bytes;
        name = links[i].name;
      }
    if (!count)
      continue;
    char size[32];
    fprintf(out, "%s %d %s (%s)", first ? "" : ",", count, name,
            rf_format_bytes(bytes, size, sizeof size));
    first = 0;
  }
  fputc('\n', out);
}

void rf_report_header(FILE *out, const char *command_line, const char *job_line,
                      const char *transport_line, const rf_rank_info *ranks, int rank_count,
                      const rf_link_info *links, int link_count) {
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
  mpi_library_line(mpi, sizeof mpi);
  fprintf(out, "# refit %s (git %s)\n", rf_version, rf_git_commit);
  fprintf(out, "# MPI: %s\n", mpi);
  fprintf(out, "# command: %s\n", or_dash(command_line));
  fprintf(out, "# job: %s\n", or_dash(job_line));
  if (transport_line)
    fprintf(out, "# transport: %s\n", transport_line);
  fprintf(out, "# units: sizes in bytes, times in ms, GB/s = 1e9 bytes/s; "
               "algbw = bytes received by one rollout replica / median time; "
               "aggbw = bytes over all links / median time\n");
  if (ranks)
    print_rank_lines(out, ranks, rank_count);
  if (links)
    rf_report_links(out, links, link_count);

  const char *names[COLUMN_COUNT], *units[COLUMN_COUNT];
  for (int c = 0; c < COLUMN_COUNT; c++) {
    names[c] = columns[c].name;
    units[c] = columns[c].unit;
  }
  print_cells(out, '#', names);
  print_cells(out, '#', units);
  fflush(out);
}

void rf_report_row(FILE *out, const rf_run_result *r) {
  char bytes[24], pieces[24], messages[24], bucket[24], iters[16], median[32], p99[32];
  char algbw[32], aggbw[32], wrong[24], checksums[24], staging[24];
  snprintf(bytes, sizeof bytes, "%" PRId64, r->model_bytes);
  snprintf(pieces, sizeof pieces, "%" PRId64, r->pieces);
  snprintf(messages, sizeof messages, "%" PRId64, r->messages);
  if (r->bucket_size == 0)
    snprintf(bucket, sizeof bucket, "model");
  else
    snprintf(bucket, sizeof bucket, "%" PRId64, r->bucket_size);
  snprintf(iters, sizeof iters, "%d", r->iterations);
  /* A run that failed before its timed loop has no times; zeros would read as infinitely
   * fast, so its time and bandwidth cells say "-". */
  if (r->iterations > 0 && r->total.median > 0.0) {
    snprintf(median, sizeof median, "%.3f", r->total.median * 1e3);
    snprintf(p99, sizeof p99, "%.3f", r->total.p99 * 1e3);
    snprintf(algbw, sizeof algbw, "%.2f", r->algbw);
    snprintf(aggbw, sizeof aggbw, "%.2f", r->aggbw);
  } else {
    snprintf(median, sizeof median, "-");
    snprintf(p99, sizeof p99, "-");
    snprintf(algbw, sizeof algbw, "-");
    snprintf(aggbw, sizeof aggbw, "-");
  }
  if (r->wrong < 0)
    snprintf(wrong, sizeof wrong, "-");
  else
    snprintf(wrong, sizeof wrong, "%" PRId64, r->wrong);
  /* "<n>bad" stays one token, so a failing row has as many fields as a passing one. */
  if (r->checksum_bad < 0)
    snprintf(checksums, sizeof checksums, "-");
  else if (r->checksum_bad == 0)
    snprintf(checksums, sizeof checksums, "ok");
  else
    snprintf(checksums, sizeof checksums, "%dbad", r->checksum_bad);
  snprintf(staging, sizeof staging, "%" PRId64, r->peak_staging);

  const char *cells[COLUMN_COUNT] = {
      or_dash(r->mode),
      or_dash(r->plan),
      or_dash(r->transport),
      bytes,
      pieces,
      messages,
      bucket,
      iters,
      median,
      p99,
      algbw,
      aggbw,
      or_dash(r->verify),
      wrong,
      checksums,
      staging,
  };
  print_cells(out, ' ', cells);
  fflush(out);
}

void rf_report_footer(FILE *out, rf_status status, const char *reason) {
  if (status == RF_OK)
    fprintf(out, "# PASS\n");
  else
    fprintf(out, "# FAIL: %s\n", reason && reason[0] ? reason : rf_status_text(status));
  fflush(out);
}
