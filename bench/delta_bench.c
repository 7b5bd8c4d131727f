/* refit-delta-bench: the delta encodings' encode and apply against their memory limits, on
 * one GPU (or on the host), measured in the same run.
 *
 * The piece is one tensor of bf16 (1 GiB on the device, 256 MiB on the host by default: a
 * 131072-row, 4096-column weight at 1 GiB), row-major. For each changed fraction (1e-6, 1e-3,
 * 0.01, 0.5 and 1) the current version is the previous one with that fraction of elements
 * changed, at random places (1: every element). Rows, each the median of 10 after 2 warm-ups,
 * timed by the wall clock around the call and a wait for the stream, as the engine would see
 * them (encode waits for its count and its hash anyway):
 *   copy    one copy of the piece, device to device (host: memcpy): the limit. It reads and
 *           writes the piece once, so its rate is 2 * bytes / time of memory traffic;
 *   encode  rf_delta_encode under auto, against reading both versions at the copy's rate:
 *           that is the copy's own time, so "of its limit" is copy time / encode time;
 *   apply   rf_delta_apply of what encode wrote, onto the previous version, against reading
 *           the encoded bytes twice (their hash is checked before anything is written, then
 *           they are applied) and writing the changed elements (dense: all of them) at the
 *           copy's rate; and against a limit memory can reach, which moves whole units: the
 *           32-byte sectors holding a change (device), or the 64-byte cache lines (host), each
 *           read and written. A 2-byte store costs its sector's read and write in the GPU's
 *           memory too (with ECC on, the sector is written whole): under Nsight Compute the
 *           sparse scatter of 5.3 million changes (1 %) reads 189 MB from DRAM and writes 154:
 *           the 32 MB payload and about a sector each way per change.
 *           Scattered sectors do not move at the copy's rate, so a sparse apply is also
 *   scatter compared with a plain scatter of its changes (the encoded offsets and values,
 *           one store each, nothing checked: delta_bench_scatter.h) plus a read of the encoded
 *           bytes at the copy's rate for the hash: what memory gives those writes.
 *           bench/scatterprobe.cu, run in the same call by bench/delta_gpu.sh, found no faster
 *           way to write them (whole sectors, merged, are slower).
 * Repeated applies write the same places, which at small fractions stay in cache (the host's,
 * or the GPU's L2) between repetitions: there apply may beat a memory limit. After the timed
 * applies the destination is checked against the current version, byte for byte.
 *
 * Usage: refit-delta-bench [device|host] [MiB]. Exits 77 on the device without a GPU. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delta/delta.h"
#include "delta_bench_scatter.h"
#include "memory/memory.h"

#define WARMUP 2
#define REPEAT 10
#define COLS 4096

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static uint64_t rng_state = 0x243f6a8885a308d3ULL;
static uint64_t rng(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

typedef struct {
  rf_mem_kind kind;
  size_t bytes;
  rf_box box;
  char *prev, *cur, *dst, *enc; /* in `kind` memory */
  size_t cap;
  rf_delta_info info;
  int failed;
} bench;

typedef rf_status (*step_fn)(bench *b);

/* The median time of a step, in ms. */
static double time_step(bench *b, step_fn fn) {
  double ms[REPEAT];
  for (int r = 0; r < WARMUP + REPEAT; r++) {
    double t0 = rf_now();
    if (fn(b) != RF_OK || rf_mem_sync(b->kind) != RF_OK) {
      b->failed = 1;
      return 0;
    }
    if (r >= WARMUP)
      ms[r - WARMUP] = (rf_now() - t0) * 1e3;
  }
  qsort(ms, REPEAT, sizeof ms[0], cmp_double);
  return (ms[REPEAT / 2 - 1] + ms[REPEAT / 2]) / 2;
}

static rf_status step_copy(bench *b) {
  return rf_mem_transfer(b->dst, b->kind, b->prev, b->kind, b->bytes);
}

static rf_status step_encode(bench *b) {
  rf_region p = rf_region_row_major(b->prev, &b->box, 2),
            c = rf_region_row_major(b->cur, &b->box, 2);
  return rf_delta_encode(b->kind, &p, &c, &b->box, RF_DELTA_AUTO, b->enc, b->cap, "bench piece",
                         &b->info);
}

/* The plain scatter of a sparse payload's changes (offsets after the header, then values). */
static rf_status step_scatter(bench *b) {
  const int32_t *offsets = (const int32_t *)(b->enc + RF_DELTA_HEADER_BYTES);
  const uint16_t *values = (const uint16_t *)(offsets + b->info.changed);
  uint16_t *dst = (uint16_t *)b->dst;
  if (b->kind == RF_MEM_DEVICE)
    return bench_scatter_device(dst, offsets, values, b->info.changed) ? RF_ERR_CUDA : RF_OK;
  for (int64_t k = 0; k < b->info.changed; k++)
    dst[offsets[k]] = values[k];
  return RF_OK;
}

static rf_status step_apply(bench *b) {
  rf_region d = rf_region_row_major(b->dst, &b->box, 2);
  return rf_delta_apply(b->kind, b->enc, (size_t)b->info.bytes, &d, &b->box, "bench piece", NULL);
}

/* The units of `unit` bytes of the piece that hold a change. */
static int64_t units_changed(const uint16_t *cur, const uint16_t *prev, int64_t n, int unit) {
  int64_t units = 0, per = unit / 2;
  for (int64_t i = 0; i < n; i += per)
    units += memcmp(cur + i, prev + i, (size_t)RF_MIN(per, n - i) * 2) != 0;
  return units;
}

/* The current version on the host: prev with `fraction` of its elements changed. */
static void make_current(uint16_t *cur, const uint16_t *prev, int64_t n, double fraction) {
  memcpy(cur, prev, (size_t)n * 2);
  if (fraction >= 1) {
    for (int64_t i = 0; i < n; i++)
      cur[i] ^= 1;
  } else if (fraction >= 0.1) {
    uint64_t cut = (uint64_t)(fraction * 18446744073709551616.0);
    for (int64_t i = 0; i < n; i++)
      if (rng() < cut)
        cur[i] ^= 1;
  } else {
    for (int64_t k = (int64_t)(fraction * (double)n + 0.5); k > 0; k--)
      cur[rng() % (uint64_t)n] ^= (uint16_t)(1 + rng() % 0xffff);
  }
}

int main(int argc, char **argv) {
  bench b;
  memset(&b, 0, sizeof b);
  b.kind = argc > 1 && strcmp(argv[1], "host") == 0 ? RF_MEM_HOST : RF_MEM_DEVICE;
  if (argc > 1 && strcmp(argv[1], "host") != 0 && strcmp(argv[1], "device") != 0) {
    fprintf(stderr, "usage: refit-delta-bench [device|host] [MiB]\n");
    return 2;
  }
  int64_t mib = argc > 2 ? atoll(argv[2]) : b.kind == RF_MEM_DEVICE ? 1024 : 256;
  int64_t rows = mib * (1 << 20) / 2 / COLS;
  if (rows < 1 || rows * COLS > RF_DELTA_MAX_ELEMENTS) {
    fprintf(stderr, "refit-delta-bench: MiB must be 1 to 4095\n");
    return 2;
  }
  char what[160] = "host memory";
  int unit = 64; /* bytes a write moves: a cache line, or on the device a sector */
  if (b.kind == RF_MEM_DEVICE) {
    rf_gpu_info gi;
    rf_status st = rf_gpu_select(0, -1, &gi);
    if (st == RF_ERR_UNSUPPORTED)
      return 77;
    if (st != RF_OK)
      return rf_status_exit_code(st);
    snprintf(what, sizeof what, "%s (%s)", gi.name, gi.bus_id);
    unit = 32;
  }
  int64_t n = rows * COLS;
  b.box = (rf_box){{0, 0}, {rows, COLS}};
  b.bytes = (size_t)n * 2;
  b.cap = (size_t)rf_delta_capacity(RF_DELTA_AUTO, n, 2);
  uint16_t *hprev = malloc(b.bytes), *hcur = malloc(b.bytes), *hback = malloc(b.bytes);
  if (!hprev || !hcur || !hback || rf_mem_alloc(b.kind, b.bytes, "bench prev", (void **)&b.prev) ||
      rf_mem_alloc(b.kind, b.bytes, "bench cur", (void **)&b.cur) ||
      rf_mem_alloc(b.kind, b.bytes, "bench dst", (void **)&b.dst) ||
      rf_mem_alloc(b.kind, b.cap, "bench encoded", (void **)&b.enc))
    return 3;
  for (int64_t i = 0; i < n; i += 4) {
    uint64_t r = rng();
    memcpy(hprev + i, &r, (size_t)RF_MIN(4, n - i) * 2);
  }
  if (rf_mem_transfer(b.prev, b.kind, hprev, RF_MEM_HOST, b.bytes))
    return 3;

  char size[32];
  printf("# refit-delta-bench: %s, one bf16 piece of %s (%" PRId64 " x %d)\n", what,
         rf_format_bytes((int64_t)b.bytes, size, sizeof size), rows, COLS);
  double copy_ms = time_step(&b, step_copy);
  printf("# copy %.3f ms (%.1f GB/s of traffic: read and write); median of %d, wall clock\n",
         copy_ms, 2.0 * (double)b.bytes / (copy_ms * 1e-3) / 1e9, REPEAT);
  printf("# encode's limit: both versions read at that rate (the copy's time); apply's: the\n"
         "# encoded bytes read twice (hash, then apply) and the changed elements written\n"
         "# (dense: all) at that rate; apply's units: the %d-byte %s holding a change read\n"
         "# and written instead of the changed elements\n",
         unit, b.kind == RF_MEM_DEVICE ? "sectors" : "cache lines");
  printf("# apply's scatter: a plain scatter of a sparse payload's changes, ms, and apply's time\n"
         "# against it and a read of the payload at the copy's rate\n");
  printf("%-9s %11s %-8s %12s %8s %10s %8s %10s %8s %8s %10s %8s\n", "fraction", "changed",
         "encoding", "wire bytes", "of dense", "encode ms", "of limit", "apply ms", "of limit",
         "of units", "scatter ms", "of it");
  static const double fractions[] = {1e-6, 1e-3, 0.01, 0.5, 1};
  int bad = 0;
  for (size_t f = 0; f < RF_ARRAY_LEN(fractions); f++) {
    make_current(hcur, hprev, n, fractions[f]);
    if (rf_mem_transfer(b.cur, b.kind, hcur, RF_MEM_HOST, b.bytes) ||
        rf_mem_transfer(b.dst, b.kind, b.prev, b.kind, b.bytes))
      return 3;
    double enc_ms = time_step(&b, step_encode);
    double app_ms = time_step(&b, step_apply);
    double scatter_ms = 0;
    if (b.info.encoding == RF_DELTA_SPARSE && b.info.changed > 0) {
      scatter_ms = time_step(&b, step_scatter);
      /* the plain scatter wrote the same values to the same places: the check below holds */
    }
    if (b.failed || rf_mem_transfer(hback, RF_MEM_HOST, b.dst, b.kind, b.bytes))
      return 3;
    int same = memcmp(hback, hcur, b.bytes) == 0;
    bad |= !same;
    double written =
        b.info.encoding == RF_DELTA_DENSE ? (double)b.bytes : 2.0 * (double)b.info.changed;
    double read = 2.0 * (double)b.info.bytes;
    double app_limit = copy_ms * (read + written) / (2.0 * (double)b.bytes);
    double unit_bytes = (double)units_changed(hcur, hprev, n, unit) * unit * 2;
    if (b.info.encoding == RF_DELTA_DENSE)
      unit_bytes = (double)b.bytes;
    double unit_limit = copy_ms * (read + unit_bytes) / (2.0 * (double)b.bytes);
    char scatter[2][16] = {"-", "-"};
    if (scatter_ms > 0) {
      double hash_ms = copy_ms * (double)b.info.bytes / (2.0 * (double)b.bytes);
      snprintf(scatter[0], sizeof scatter[0], "%.3f", scatter_ms);
      snprintf(scatter[1], sizeof scatter[1], "%.3f", (scatter_ms + hash_ms) / app_ms);
    }
    printf("%-9g %11" PRId64 " %-8s %12" PRId64
           " %8.4f %10.3f %8.3f %10.3f %8.3f %8.3f %10s %8s%s\n",
           fractions[f], b.info.changed, rf_delta_encoding_name(b.info.encoding), b.info.bytes,
           (double)b.info.bytes / (double)(b.bytes + RF_DELTA_HEADER_BYTES), enc_ms,
           copy_ms / enc_ms, app_ms, app_limit / app_ms, unit_limit / app_ms, scatter[0],
           scatter[1], same ? "" : "  WRONG RESULT");
    fflush(stdout);
  }
  rf_mem_free(b.kind, b.prev, b.bytes);
  rf_mem_free(b.kind, b.cur, b.bytes);
  rf_mem_free(b.kind, b.dst, b.bytes);
  rf_mem_free(b.kind, b.enc, b.cap);
  free(hprev), free(hcur), free(hback);
  return bad ? 1 : 0;
}
