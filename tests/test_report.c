/* The report module: order statistics on known samples, the per-iteration slowest-rank
 * summary, the printed table's shape (comment lines, column and units lines, one field per
 * column in a row, exact footers), and refit report's delta section from a small results file
 * (its CSV exactly, its charts' points). Runs without mpirun: the header's
 * MPI_Get_library_version is allowed before MPI_Init. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "report/report.h"
#include "test.h"

#define ASSERT_NEAR(a, b)                                                                          \
  do {                                                                                             \
    double rf_na_ = (a), rf_nb_ = (b);                                                             \
    if (!(fabs(rf_na_ - rf_nb_) <= 1e-12 * (1.0 + fabs(rf_nb_)))) {                                \
      fprintf(stderr, "%s:%d: assertion failed: %s ~= %s (%.17g vs %.17g)\n", __FILE__, __LINE__,  \
              #a, #b, rf_na_, rf_nb_);                                                             \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

static void test_phase_names(void) {
  ASSERT_STR_EQ(rf_phase_name(RF_PHASE_SETUP), "setup");
  ASSERT_STR_EQ(rf_phase_name(RF_PHASE_ENCODE), "encode");
  ASSERT_STR_EQ(rf_phase_name(RF_PHASE_TRANSFER), "transfer");
  ASSERT_STR_EQ(rf_phase_name(RF_PHASE_APPLY), "apply");
  ASSERT_STR_EQ(rf_phase_name(RF_PHASE_TOTAL), "total");
  ASSERT_STR_EQ(rf_phase_name(RF_PHASE_VERIFY), "verify");
  ASSERT_STR_EQ(rf_phase_name(RF_PHASE_COUNT), "unknown");
}

/* The statistics of count values; they are the only thing a test of them looks at. */
static rf_stats stats_of(const double *values, int count) {
  rf_stats s;
  ASSERT_OK(rf_stats_of(values, count, &s));
  return s;
}

static void test_stats(void) {
  rf_stats s = stats_of(NULL, 0);
  ASSERT_NEAR(s.min, 0);
  ASSERT_NEAR(s.median, 0);
  ASSERT_NEAR(s.p99, 0);
  ASSERT_NEAR(s.max, 0);
  ASSERT_NEAR(s.mean, 0);

  double one[] = {4.5};
  s = stats_of(one, 1);
  ASSERT_NEAR(s.min, 4.5);
  ASSERT_NEAR(s.median, 4.5);
  ASSERT_NEAR(s.p99, 4.5);
  ASSERT_NEAR(s.max, 4.5);
  ASSERT_NEAR(s.mean, 4.5);

  /* Unsorted on purpose, and the input must be left as it was. */
  double odd[] = {5, 1, 4, 2, 3};
  s = stats_of(odd, 5);
  ASSERT_NEAR(s.min, 1);
  ASSERT_NEAR(s.median, 3);
  ASSERT_NEAR(s.p99, 5);
  ASSERT_NEAR(s.max, 5);
  ASSERT_NEAR(s.mean, 3);
  ASSERT_NEAR(odd[0], 5);
  ASSERT_NEAR(odd[4], 3);

  double even[] = {8, 2, 6, 4};
  s = stats_of(even, 4);
  ASSERT_NEAR(s.median, 5);
  ASSERT_NEAR(s.mean, 5);
  ASSERT_NEAR(s.p99, 8);

  double hundred[100], ten[10];
  for (int i = 0; i < 100; i++)
    hundred[99 - i] = i + 1;
  for (int i = 0; i < 10; i++)
    ten[i] = i + 1;
  s = stats_of(hundred, 100);
  ASSERT_NEAR(s.p99, 99);
  ASSERT_NEAR(s.median, 50.5);
  ASSERT_NEAR(s.mean, 50.5);
  ASSERT_NEAR(s.min, 1);
  ASSERT_NEAR(s.max, 100);
  s = stats_of(ten, 10);
  ASSERT_NEAR(s.p99, 10);
  ASSERT_NEAR(s.median, 5.5);

  /* Nearest rank at sizes where 0.99 * n is not a whole number, and at 200 where it is. */
  double many[201];
  for (int i = 0; i < 201; i++)
    many[i] = i + 1;
  ASSERT_NEAR(stats_of(many, 200).p99, 198);
  ASSERT_NEAR(stats_of(many, 201).p99, 199);
  ASSERT_NEAR(stats_of(many, 101).p99, 100);
}

static void set_total(double *timings, int ranks, int it, int rank, double seconds) {
  timings[((size_t)it * ranks + rank) * RF_PHASE_COUNT + RF_PHASE_TOTAL] = seconds;
}

static void test_summarise(void) {
  enum { ITERS = 2, RANKS = 3 };
  double timings[ITERS * RANKS * RF_PHASE_COUNT];
  /* Every other phase holds a larger number than any total, so reading the wrong phase
   * shows up as a wrong median. */
  for (size_t i = 0; i < RF_ARRAY_LEN(timings); i++)
    timings[i] = 100.0;
  set_total(timings, RANKS, 0, 0, 0.010);
  set_total(timings, RANKS, 0, 1, 0.030); /* slowest of iteration 0 */
  set_total(timings, RANKS, 0, 2, 0.020);
  set_total(timings, RANKS, 1, 0, 0.050); /* slowest of iteration 1 */
  set_total(timings, RANKS, 1, 1, 0.040);
  set_total(timings, RANKS, 1, 2, 0.001);

  rf_run_result r = {0};
  r.replica_bytes = 4000000000;   /* 4 GB */
  r.transfer_bytes = 12000000000; /* 12 GB */
  r.iterations = ITERS;
  r.ranks = RANKS;
  r.timings = timings;
  ASSERT_OK(rf_run_result_summarise(&r));
  ASSERT_NEAR(r.total.min, 0.030);
  ASSERT_NEAR(r.total.max, 0.050);
  ASSERT_NEAR(r.total.median, 0.040);
  ASSERT_NEAR(r.total.mean, 0.040);
  ASSERT_NEAR(r.total.p99, 0.050);
  ASSERT_NEAR(r.algbw, 4e9 / 0.040 / 1e9);
  ASSERT_NEAR(r.algbw, 100.0);
  ASSERT_NEAR(r.aggbw, 300.0);

  /* Zero times (or no iterations) must not divide by zero. */
  double zeros[RANKS * RF_PHASE_COUNT] = {0};
  r.timings = zeros;
  r.iterations = 1;
  ASSERT_OK(rf_run_result_summarise(&r));
  ASSERT_NEAR(r.total.median, 0);
  ASSERT_NEAR(r.algbw, 0);
  ASSERT_NEAR(r.aggbw, 0);
  r.iterations = 0;
  r.algbw = 7;
  ASSERT_OK(rf_run_result_summarise(&r));
  ASSERT_NEAR(r.algbw, 0);
}

/* Reads everything written to f so far into a NUL-terminated heap string. */
static char *slurp(FILE *f) {
  fflush(f);
  long len = ftell(f);
  ASSERT_GE(len, 0);
  rewind(f);
  char *text = malloc((size_t)len + 1);
  ASSERT_TRUE(text);
  ASSERT_EQ((int64_t)fread(text, 1, (size_t)len, f), len);
  text[len] = '\0';
  return text;
}

static int count_fields(const char *line) {
  int n = 0;
  const char *p = line;
  while (*p) {
    while (*p == ' ' || *p == '\t')
      p++;
    if (!*p)
      break;
    n++;
    while (*p && *p != ' ' && *p != '\t')
      p++;
  }
  return n;
}

/* The n-th (0-based) whitespace-separated field of a line, copied into buf. */
static const char *field(const char *line, int n, char *buf, size_t len) {
  const char *p = line;
  for (int i = 0;; i++) {
    while (*p == ' ')
      p++;
    const char *start = p;
    while (*p && *p != ' ')
      p++;
    if (i == n) {
      size_t w = RF_MIN((size_t)(p - start), len - 1);
      memcpy(buf, start, w);
      buf[w] = '\0';
      return buf;
    }
    if (!*p)
      return "";
  }
}

static rf_run_result sample_row(void) {
  rf_run_result r = {0};
  snprintf(r.mode, sizeof r.mode, "fused");
  snprintf(r.plan, sizeof r.plan, "p2p");
  snprintf(r.transport, sizeof r.transport, "nccl");
  snprintf(r.verify, sizeof r.verify, "full");
  r.model_bytes = 810219192320; /* Llama-3.1-405B in bf16 */
  r.replica_bytes = 810219192320;
  r.transfer_bytes = 1620438384640;
  r.pieces = 123456;
  r.messages = 4096;
  r.bucket_size = 0;
  r.iterations = 20;
  r.ranks = 16;
  r.total = (rf_stats){.min = 1.2, .median = 1.5, .p99 = 2.25, .max = 2.5, .mean = 1.6};
  r.algbw = 540.15;
  r.aggbw = 1080.29;
  r.wrong = 0;
  r.checksum_bad = 0;
  r.peak_staging = 8589934592;
  return r;
}

static void test_table(void) {
  FILE *f = tmpfile();
  ASSERT_TRUE(f);
  rf_rank_info ranks[3] = {
      {.rank = 0,
       .host = "node1",
       .pid = 12345,
       .trainer_rank = 0,
       .rollout_rank = -1,
       .gpu = 0,
       .bus_id = "0000:19:00.0",
       .cpus = "0-3",
       .numa = 0,
       .nic = "mlx5_0"},
      {.rank = 1,
       .host = "node1",
       .pid = 12346,
       .trainer_rank = 1,
       .rollout_rank = -1,
       .gpu = 1,
       .bus_id = "0000:1a:00.0",
       .cpus = "4-7",
       .numa = 0,
       .nic = "mlx5_1"},
      {.rank = 2,
       .host = "gpu-node-long",
       .pid = 7,
       .trainer_rank = -1,
       .rollout_rank = 0,
       .gpu = -1,
       .bus_id = "-",
       .cpus = "-",
       .numa = -1,
       .nic = "-"},
  };
  rf_link_info links[3] = {
      {0, 2, 3 << 20, 4, "node"}, {1, 2, 1 << 20, 2, "switch"}, {1, 1, 1 << 10, 0, "process"}};
  rf_report_header(f, "refit run --model llama-3.1-405b", "trainer tp8 -> rollout tp4", NULL, ranks,
                   3, links, 3);

  rf_run_result r = sample_row();
  rf_report_row(f, &r);
  /* Not checked, bucketed, with bad checksums and no timed iterations. */
  rf_run_result r2 = sample_row();
  snprintf(r2.verify, sizeof r2.verify, "checksum");
  r2.bucket_size = 67108864;
  r2.wrong = -1;
  r2.checksum_bad = 3;
  r2.iterations = 0;
  r2.total = (rf_stats){0};
  rf_report_row(f, &r2);
  rf_run_result r3 = sample_row();
  r3.mode[0] = '\0';
  r3.checksum_bad = -1;
  rf_report_row(f, &r3);
  rf_report_footer(f, RF_ERR_VERIFY, NULL);
  rf_report_footer(f, RF_ERR_VERIFY, "run 2: 17 elements wrong");
  rf_report_footer(f, RF_OK, "ignored");

  char *text = slurp(f);
  fclose(f);
  fputs(text, stdout);

  const char *columns = NULL, *units = NULL;
  const char *rows[3] = {NULL};
  const char *footers[3] = {NULL};
  const char *rank_line[3] = {NULL}, *link_line[3] = {NULL}, *link_summary = NULL;
  int row_count = 0, footer_count = 0, rank_lines = 0, saw_mpi = 0, saw_version = 0;
  int link_lines = 0;
  size_t rank_len = 0;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    if (line[0] != '#') {
      ASSERT_LT(row_count, 3);
      rows[row_count++] = line;
      continue;
    }
    if (strncmp(line, "#  rank ", 8) == 0) {
      /* Padded to one width, so the fields of every rank line line up. */
      if (rank_lines == 0)
        rank_len = strlen(line);
      ASSERT_EQ((int64_t)strlen(line), (int64_t)rank_len);
      rank_line[rank_lines++] = line;
    } else if (strncmp(line, "#  link ", 8) == 0) {
      ASSERT_LT(link_lines, 3);
      link_line[link_lines++] = line;
    } else if (strncmp(line, "# links:", 8) == 0)
      link_summary = line;
    else if (strncmp(line, "# MPI: ", 7) == 0)
      saw_mpi = strlen(line) > 7;
    else if (strncmp(line, "# refit ", 8) == 0 && strstr(line, " (git "))
      saw_version = 1;
    else if (strncmp(line, "# PASS", 6) == 0 || strncmp(line, "# FAIL", 6) == 0)
      footers[footer_count++] = line;
    else if (strstr(line, " mode ") && strstr(line, " #wrong "))
      columns = line;
    else if (strstr(line, "(GB/s)"))
      units = line;
  }
  ASSERT_TRUE(saw_version);
  ASSERT_TRUE(saw_mpi);
  ASSERT_EQ(rank_lines, 3);
  ASSERT_STR_EQ(rank_line[0], "#  rank   0 host node1         pid 12345 trainer 0 rollout - gpu 0 "
                              "bus 0000:19:00.0 cores 0-3 numa 0 nic mlx5_0");
  ASSERT_STR_EQ(rank_line[2], "#  rank   2 host gpu-node-long pid     7 trainer - rollout 0 gpu - "
                              "bus -            cores -   numa - nic -     ");
  ASSERT_EQ(link_lines, 3);
  ASSERT_STR_EQ(link_line[0], "#  link 0 -> 2 bytes 3145728 distance node");
  ASSERT_STR_EQ(link_line[2], "#  link 1 -> 1 bytes 1024 distance process");
  ASSERT_TRUE(link_summary);
  ASSERT_STR_EQ(link_summary,
                "# links: 1 process (1.00 KiB), 1 switch (1.00 MiB), 1 node (3.00 MiB)");
  ASSERT_TRUE(columns);
  ASSERT_TRUE(units);
  ASSERT_EQ(row_count, 3);

  /* The column line's names, without its leading '#'; every row has exactly that many. */
  int names = count_fields(columns + 1);
  ASSERT_EQ(names, 16);
  for (int i = 0; i < row_count; i++)
    ASSERT_EQ(count_fields(rows[i]), names);
  /* Cells sit under their names: each row is as long as the column line. */
  for (int i = 0; i < row_count; i++)
    ASSERT_EQ((int64_t)strlen(rows[i]), (int64_t)strlen(columns));
  ASSERT_TRUE(strstr(units, "(ms)"));
  ASSERT_TRUE(strstr(units, "(B)"));

  char buf[64];
  ASSERT_STR_EQ(field(columns + 1, 6, buf, sizeof buf), "bucket");
  ASSERT_STR_EQ(field(rows[0], 6, buf, sizeof buf), "model");
  ASSERT_STR_EQ(field(rows[1], 6, buf, sizeof buf), "67108864");
  ASSERT_STR_EQ(field(rows[0], 3, buf, sizeof buf), "810219192320");
  ASSERT_STR_EQ(field(rows[0], 8, buf, sizeof buf), "1500.000");
  ASSERT_STR_EQ(field(rows[0], 9, buf, sizeof buf), "2250.000");
  ASSERT_STR_EQ(field(rows[0], 10, buf, sizeof buf), "540.15");
  ASSERT_STR_EQ(field(rows[0], 13, buf, sizeof buf), "0");
  ASSERT_STR_EQ(field(rows[0], 14, buf, sizeof buf), "ok");
  ASSERT_STR_EQ(field(rows[0], 15, buf, sizeof buf), "8589934592");
  ASSERT_STR_EQ(field(rows[1], 8, buf, sizeof buf), "-");
  ASSERT_STR_EQ(field(rows[1], 11, buf, sizeof buf), "-");
  ASSERT_STR_EQ(field(rows[1], 13, buf, sizeof buf), "-");
  ASSERT_STR_EQ(field(rows[1], 14, buf, sizeof buf), "3bad");
  ASSERT_STR_EQ(field(rows[2], 0, buf, sizeof buf), "-");
  ASSERT_STR_EQ(field(rows[2], 14, buf, sizeof buf), "-");

  ASSERT_EQ(footer_count, 3);
  ASSERT_STR_EQ(footers[0], "# FAIL: verification failed");
  ASSERT_STR_EQ(footers[1], "# FAIL: run 2: 17 elements wrong");
  ASSERT_STR_EQ(footers[2], "# PASS");
  free(text);
}

/* ---- refit report's delta section, from a small results file --------------------------- */

enum { D_ITERS = 2, D_RANKS = 2 };

/* Appends one run of `update` and `delta` whose every iteration and rank took these phase
 * times (seconds, powers of two so that the CSV's milliseconds are exact), with `changed` of
 * 100000 elements changed and `wire` bytes on the wire under delta. */
static void add_delta_run(rf_results *file, const rf_model *model, const char *update,
                          const char *delta, const double *phases, int64_t changed, int64_t wire) {
  double timings[D_ITERS * D_RANKS * RF_PHASE_COUNT];
  for (int cell = 0; cell < D_ITERS * D_RANKS; cell++)
    memcpy(timings + cell * RF_PHASE_COUNT, phases, RF_PHASE_COUNT * sizeof *phases);
  rf_delta_kind kinds[2] = {{"q_proj", {0, 2, 0}, 1000, 10, wire - 1000},
                            {"norm", {1, 0, 0}, 64, 64, 1000}};
  rf_run_result res = sample_row();
  snprintf(res.transport, sizeof res.transport, "mpi");
  res.iterations = D_ITERS;
  res.ranks = D_RANKS;
  res.timings = timings;
  res.replica_bytes = res.transfer_bytes = res.model_bytes = 262144;
  res.version = 3;
  res.version_changed = changed;
  res.version_elements = changed >= 0 ? 100000 : 0;
  snprintf(res.delta, sizeof res.delta, "%s", delta);
  if (strcmp(delta, "off") != 0) {
    res.wire_delta_bytes = wire;
    res.delta_pieces[0] = res.delta_pieces[1] = 2;
    res.delta_kinds = kinds;
    res.delta_kind_count = 2;
  }
  ASSERT_OK(rf_run_result_summarise(&res));
  rf_results_run run = {.config_json = "{}",
                        .model = "tiny",
                        .model_type = "llama",
                        .dtype = "bf16",
                        .trainer = "fsdp=2",
                        .rollout = "tp=2",
                        .placement = "disaggregated",
                        .plan = "p2p",
                        .mode = "fused",
                        .transport = "mpi",
                        .update = update,
                        .result = &res,
                        .model_spec = model,
                        .replicas = 1,
                        .transfer_bytes = 262144};
  int number = -1;
  ASSERT_OK(rf_results_add_run(file, &run, &number));
}

static void test_delta_section(void) {
  char dir[] = "/tmp/refit-test-report-XXXXXX";
  ASSERT_TRUE(mkdtemp(dir));
  char path[256], out[256], csv[320];
  snprintf(path, sizeof path, "%s/delta.h5", dir);
  snprintf(out, sizeof out, "%s/report", dir);
  snprintf(csv, sizeof csv, "%s/delta.csv", out);
  rf_model model;
  ASSERT_OK(rf_model_load("tiny", &model));
  rf_results_file_info info = {"refit run --delta off,auto", "node0", "", 10};
  rf_results *file = NULL;
  ASSERT_OK(rf_results_open(path, &info, &file));
  /* Phases [setup, reshape, encode, pack, transfer, unpack, apply, total, verify]. */
  double dense[RF_PHASE_COUNT] = {1, 0, 0, 0x1p-10, 0x1p-9, 0x1p-10, 0, 0x1p-8, 1};
  double fast[RF_PHASE_COUNT] = {1, 0, 0x1p-11, 0, 0x1p-12, 0, 0x1p-12, 0x1p-10, 1};
  double slow[RF_PHASE_COUNT] = {1, 0, 0x1p-8, 0, 0x1p-9, 0, 0x1p-9, 0x1p-7, 1};
  add_delta_run(file, &model, "sparse:0.5", "off", dense, 50000, 0);
  add_delta_run(file, &model, "sparse:0.5", "auto", slow, 50000, 139264);
  add_delta_run(file, &model, "none", "off", dense, -1, 0); /* nothing changes: not shown */
  add_delta_run(file, &model, "sparse:0.01", "off", dense, 1000, 0);
  add_delta_run(file, &model, "sparse:0.01", "auto", fast, 1000, 4096);
  rf_results_close(file);
  rf_model_free(&model);

  rf_loaded_results loaded;
  ASSERT_OK(rf_results_load(path, &loaded));
  ASSERT_OK(rf_report_write(&loaded, 1, out));
  rf_loaded_results_free(&loaded);
  FILE *f = fopen(csv, "r");
  ASSERT_TRUE(f);
  fseek(f, 0, SEEK_END);
  char *text = slurp(f);
  fclose(f);
  /* The dense runs have no dense run beside them; the delta runs the one of their --update:
   * at 1 %, a quarter of the dense time and 1.5625 % of its 262144 bytes. */
  ASSERT_STR_EQ(
      text,
      "file,run,model,trainer,rollout,plan,transport,mode,bucket_size_bytes,update,delta,"
      "changed_fraction,time_median_ms,encode_ms,transfer_ms,apply_ms,wire_bytes,dense_run,"
      "dense_time_ms,dense_wire_bytes,time_ratio,wire_pct\n"
      "1,0,tiny,fsdp=2,tp=2,p2p,mpi,fused,0,sparse:0.5,off,0.5,3.90625,0,1.953125,0,262144,,,,,\n"
      "1,1,tiny,fsdp=2,tp=2,p2p,mpi,fused,0,sparse:0.5,auto,0.5,7.8125,3.90625,1.953125,1.953125,"
      "139264,0,3.90625,262144,2,53.125\n"
      "1,3,tiny,fsdp=2,tp=2,p2p,mpi,fused,0,sparse:0.01,off,0.01,3.90625,0,1.953125,0,262144,,,,"
      ",\n"
      "1,4,tiny,fsdp=2,tp=2,p2p,mpi,fused,0,sparse:0.01,auto,0.01,0.9765625,0.48828125,"
      "0.244140625,0.244140625,4096,3,3.90625,262144,0.25,1.5625\n");
  free(text);
  /* The page draws both charts, a point per run shown, the wire's on a log axis of decades
   * (1e3 to 1e6 bytes), the categories in the order of their changed fraction. */
  snprintf(csv, sizeof csv, "%s/report.html", out);
  f = fopen(csv, "r");
  ASSERT_TRUE(f);
  fseek(f, 0, SEEK_END);
  text = slurp(f);
  fclose(f);
  for (int wire = 0; wire < 2; wire++) {
    const char *chart = strstr(text, wire ? "data-chart=\"delta_wire\" data-file=\"1\""
                                          : "data-chart=\"delta_time\" data-file=\"1\"");
    ASSERT_TRUE(chart);
    const char *end = strstr(chart, "</svg>");
    int points = 0;
    for (const char *p = strstr(chart, "class=\"point\""); p && p < end;
         p = strstr(p + 1, "class=\"point\""))
      points++;
    ASSERT_EQ(points, 4);
    const char *first = strstr(chart, ">sparse:0.01</text>"),
               *second = strstr(chart, ">sparse:0.5<");
    ASSERT_TRUE(first && second && first < second && second < end);
    if (wire) {
      const char *lo = strstr(chart, ">1000</text>"), *hi = strstr(chart, ">1e6</text>");
      ASSERT_TRUE(lo && hi && lo < hi && hi < end);
    }
  }
  free(text);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ASSERT_EQ(system(cmd), 0);
}

int main(void) {
  test_phase_names();
  test_stats();
  test_summarise();
  test_table();
  test_delta_section();
  printf("test_report: ok\n");
  return 0;
}
