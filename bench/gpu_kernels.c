/* refit-gpu-bench: refit's GPU kernels against a plain device-to-device copy of the same
 * bytes, on one GPU.
 *
 * The data set is the q, k, v, gate and up projections of N Llama-3.1-8B layers in bf16
 * (272 MiB a layer; 15 layers, 4.0 GiB, by default), each tensor on its own in a source
 * buffer, and the vLLM fused tensors qkv_proj and gate_up_proj of a tp=1 engine in a
 * destination buffer of the same size. Rows timed, each the median of 10 after 2 warm-ups,
 * with CUDA events on refit's stream:
 *   d2d            cudaMemcpyAsync of all the bytes: the limit;
 *   pack fused     rf_copy_boxes, one batch: every tensor into its fused slot;
 *   pack jax       the same from sources stored transposed (--trainer-order jax);
 *   unpack fused   the fused tensors back into the separate ones;
 *   pack halves    each tensor's left and right column halves into tensors of their own
 *                  (lines of 4 KiB with unequal pitches, as a row-parallel split gives);
 *   fill, checksum, check   rf_*_region_on over the source buffer seen as one tensor;
 *   checksum x N   the same checksum tensor by tensor, one call each, as the engine calls it;
 *   fill, check R v10   the same fill and check of version 10 of the weights under --update R
 *                  (sparse:0.01, adam:1e-6; verify/versions.h): O(k) steps per element;
 *   quantize F     each quantizer the engine runs (every moved --rollout-dtype F) alone: every
 *                  tensor into F's elements and scales, one job per tensor and one flush, as the
 *                  engine quantizes a whole tensor's piece; "quantize F jax" the same from
 *                  sources stored transposed (the fused transpose and quantize). After each, a
 *                  line gives its own limit: the bytes it reads and writes at the d2d rate.
 * GB/s is the data set's bytes over the time (10^9 bytes/s): a copy counts each byte once,
 * as the d2d figure does (it reads and writes each once), a checksum or check counts the bytes
 * it reads, a fill those it writes, quantize the bf16 bytes it reads. "vs d2d" is the d2d
 * time over the row's time.
 *
 * Usage: refit-gpu-bench [layers]. Exits 77 without a GPU. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout/layout.h"
#include "memory/memory.h"
#include "memory/memory_gpu.h"
#include "verify/fp8.h"
#include "verify/verify.h"

#define WARMUP 2
#define REPEAT 10
#define HIDDEN 4096

/* The rows of the five tensors of a layer, in the order of their fused slots. */
static const int64_t tensor_rows[5] = {4096, 1024, 1024, 14336, 14336};
#define LAYER_ROWS (4096 + 1024 + 1024 + 14336 + 14336)

typedef struct {
  int layers;
  char *src, *dst, *scales;
  size_t bytes;
  rf_box_copy *copies; /* 5 per layer, or 10 for the halves */
  int count;
} bench;

/* A step of the benchmark, timed over and over. */
typedef rf_status (*step_fn)(bench *b);

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

static double d2d_ms, last_ms;

static int time_step(bench *b, const char *name, step_fn fn) {
  cudaStream_t s = (cudaStream_t)rf_gpu_stream();
  cudaEvent_t t0, t1;
  float ms[REPEAT];
  if (cudaEventCreate(&t0) != cudaSuccess || cudaEventCreate(&t1) != cudaSuccess)
    return fprintf(stderr, "cudaEventCreate failed\n"), 1;
  for (int r = 0; r < WARMUP + REPEAT; r++) {
    cudaEventRecord(t0, s);
    if (fn(b) != RF_OK)
      return 1;
    cudaEventRecord(t1, s);
    if (cudaEventSynchronize(t1) != cudaSuccess)
      return fprintf(stderr, "%s: %s\n", name, cudaGetErrorString(cudaGetLastError())), 1;
    if (r >= WARMUP)
      cudaEventElapsedTime(&ms[r - WARMUP], t0, t1);
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  qsort(ms, REPEAT, sizeof ms[0], cmp_float);
  double med = (ms[REPEAT / 2 - 1] + ms[REPEAT / 2]) / 2;
  if (d2d_ms == 0)
    d2d_ms = med;
  last_ms = med;
  printf("%-16s %10.3f %9.1f %8.3f\n", name, med, (double)b->bytes / (med * 1e-3) / 1e9,
         d2d_ms / med);
  fflush(stdout);
  return 0;
}

/* ---- the layouts ------------------------------------------------------------------------ */

/* Byte offset of layer l's tensor k in the source buffer, and of its fused slot's tensor in
 * the destination (qkv first, then gate_up; both in the same order as the sources). */
static size_t tensor_offset(int l, int k) {
  int64_t rows = (int64_t)l * LAYER_ROWS;
  for (int j = 0; j < k; j++)
    rows += tensor_rows[j];
  return (size_t)rows * HIDDEN * 2;
}

static void layout_fused(bench *b, int transposed, int unpack) {
  b->count = 0;
  for (int l = 0; l < b->layers; l++)
    for (int k = 0; k < 5; k++) {
      rf_box box = {{0, 0}, {tensor_rows[k], HIDDEN}};
      rf_box_copy *c = &b->copies[b->count++];
      char *s = b->src + tensor_offset(l, k);
      rf_region separate =
          transposed ? rf_region_transposed(s, &box, 2) : rf_region_row_major(s, &box, 2);
      /* qkv_proj starts at q, gate_up_proj at gate; a slot's row is its offset in those. */
      int first = k < 3 ? 0 : 3;
      int64_t row = 0;
      for (int j = first; j < k; j++)
        row += tensor_rows[j];
      char *fused = b->dst + tensor_offset(l, first);
      rf_region slot = rf_region_in_fused(fused, HIDDEN, row, 0, &box, 2);
      c->box = box;
      c->src = unpack ? slot : separate;
      c->dst = unpack ? separate : slot;
    }
}

static void layout_halves(bench *b) {
  b->count = 0;
  for (int l = 0; l < b->layers; l++)
    for (int k = 0; k < 5; k++)
      for (int half = 0; half < 2; half++) {
        rf_box whole = {{0, 0}, {tensor_rows[k], HIDDEN}};
        rf_box box = {{0, half * HIDDEN / 2}, {tensor_rows[k], (half + 1) * HIDDEN / 2}};
        size_t at = tensor_offset(l, k);
        rf_box_copy *c = &b->copies[b->count++];
        c->box = box;
        c->src = rf_region_row_major(b->src + at, &whole, 2);
        c->dst = rf_region_row_major(b->dst + at + (size_t)half * tensor_rows[k] * HIDDEN, &box, 2);
      }
}

/* ---- the steps -------------------------------------------------------------------------- */

static rf_status step_d2d(bench *b) {
  cudaError_t rc = cudaMemcpyAsync(b->dst, b->src, b->bytes, cudaMemcpyDeviceToDevice,
                                   (cudaStream_t)rf_gpu_stream());
  return rc == cudaSuccess ? RF_OK : rf_fail(RF_ERR_CUDA, "%s", cudaGetErrorString(rc));
}

static rf_status step_copy(bench *b) { return rf_copy_boxes(RF_MEM_DEVICE, b->copies, b->count); }

/* The source buffer as one [layers * LAYER_ROWS, HIDDEN] tensor. */
static rf_tensor whole_tensor(const bench *b, rf_box *box, rf_region *r) {
  rf_tensor t;
  memset(&t, 0, sizeof t);
  t.id = 7, t.ndim = 2;
  t.shape[0] = (int64_t)b->layers * LAYER_ROWS, t.shape[1] = HIDDEN;
  t.numel = t.shape[0] * t.shape[1];
  *box = rf_box_whole(&t);
  *r = rf_region_row_major(b->src, box, 2);
  return t;
}

/* The version step_fill and step_check compute: NULL for version 0. */
static const rf_weight_version *bench_version;

static rf_status step_fill(bench *b) {
  rf_box box;
  rf_region r;
  rf_tensor t = whole_tensor(b, &box, &r);
  return rf_fill_region_on(RF_MEM_DEVICE, &r, &box, &t, 42, bench_version, RF_DTYPE_BF16);
}

static rf_status step_checksum(bench *b) {
  rf_box box;
  rf_region r;
  rf_tensor t = whole_tensor(b, &box, &r);
  uint64_t sum;
  return rf_checksum_region_on(RF_MEM_DEVICE, &r, &box, &t, RF_DTYPE_BF16, &sum);
}

static rf_status step_check(bench *b) {
  rf_box box;
  rf_region r;
  rf_tensor t = whole_tensor(b, &box, &r);
  rf_mismatch m[8];
  int reported;
  int64_t wrong;
  RF_TRY(rf_check_region_on(RF_MEM_DEVICE, &r, &box, &t, 42, bench_version, RF_DTYPE_BF16, m, 8,
                            &reported, &wrong));
  return wrong == 0 ? RF_OK : rf_fail(RF_ERR_VERIFY, "%lld elements wrong", (long long)wrong);
}

static rf_status step_checksum_each(bench *b) {
  for (int l = 0; l < b->layers; l++)
    for (int k = 0; k < 5; k++) {
      rf_tensor t;
      memset(&t, 0, sizeof t);
      t.id = l * 5 + k, t.ndim = 2;
      t.shape[0] = tensor_rows[k], t.shape[1] = HIDDEN;
      t.numel = t.shape[0] * t.shape[1];
      rf_box box = rf_box_whole(&t);
      rf_region r = rf_region_row_major(b->src + tensor_offset(l, k), &box, 2);
      uint64_t sum;
      RF_TRY(rf_checksum_region_on(RF_MEM_DEVICE, &r, &box, &t, RF_DTYPE_BF16, &sum));
    }
  return RF_OK;
}

/* The format and source order step_quantize runs. */
static const rf_format *quant_format;
static int quant_transposed;

/* Every tensor of the data set, row-major in src (or, transposed, as a JAX-order shard holds
 * it), into its format's bytes (packed two a byte for 4-bit elements) at the same element
 * offset in dst and its scales after each other in `scales`, laid out as the rollout holds
 * them (nvfp4: 128x4 tiles): one job per tensor, all queued, then one flush, as the engine
 * does. nvfp4's global is 1: the time does not depend on it. */
static rf_status step_quantize(bench *b) {
  const rf_format *f = quant_format;
  size_t scale_at = 0;
  for (int l = 0; l < b->layers; l++)
    for (int k = 0; k < 5; k++) {
      size_t at = tensor_offset(l, k) / 2;
      int64_t grid = rf_format_block_grid(f, 1, HIDDEN);
      rf_fp8_job job = {.x = b->src + at * 2,
                        .dtype = RF_DTYPE_BF16,
                        .x_stride = quant_transposed ? 1 : HIDDEN,
                        .x_col_stride = quant_transposed ? tensor_rows[k] : 1,
                        .rows = tensor_rows[k],
                        .cols = HIDDEN,
                        .q = (uint8_t *)b->dst + rf_format_row_bytes(f, (int64_t)at),
                        .q_stride = rf_format_row_bytes(f, HIDDEN),
                        .scale = b->scales + scale_at,
                        .scale_stride = grid};
      if (f->scale_layout == RF_SCALE_SWIZZLED_128X4)
        job.tile_grid_cols = grid;
      rf_fp8_job_format(&job, f, 1.0f);
      RF_TRY(rf_fp8_quantize_device(&job));
      scale_at += (size_t)rf_format_scale_bytes(f, tensor_rows[k], HIDDEN);
    }
  return rf_fp8_device_flush();
}

/* The bytes of every tensor's scales in format f, as step_quantize lays them out. */
static size_t scales_of(const bench *b, const rf_format *f) {
  size_t n = 0;
  for (int l = 0; l < b->layers; l++)
    for (int k = 0; k < 5; k++)
      n += (size_t)rf_format_scale_bytes(f, tensor_rows[k], HIDDEN);
  return n;
}

/* A quantize row against its own limit: the bytes it reads (bf16) and writes (elements and
 * scales) moved at the rate of the d2d row, which reads and writes the data set once each. */
static void print_limit(const bench *b, const char *name, double ms) {
  size_t elems = b->bytes / 2, scales = scales_of(b, quant_format);
  size_t moved = b->bytes + (size_t)rf_format_row_bytes(quant_format, (int64_t)elems) + scales;
  double limit_ms = d2d_ms * (double)moved / (2.0 * (double)b->bytes);
  printf("# %s: reads %zu and writes %zu bytes; at the d2d rate %.3f ms; %.3f of its limit\n", name,
         b->bytes, moved - b->bytes, limit_ms, limit_ms / ms);
}

int main(int argc, char **argv) {
  bench b;
  memset(&b, 0, sizeof b);
  b.layers = argc > 1 ? atoi(argv[1]) : 15;
  if (b.layers < 1) {
    fprintf(stderr, "usage: refit-gpu-bench [layers]\n");
    return 2;
  }
  rf_gpu_info info;
  rf_status st = rf_gpu_select(0, -1, &info);
  if (st == RF_ERR_UNSUPPORTED)
    return 77;
  if (st != RF_OK)
    return rf_status_exit_code(st);
  b.bytes = (size_t)b.layers * LAYER_ROWS * HIDDEN * 2;
  b.copies = calloc((size_t)b.layers * 10, sizeof *b.copies);
  if (!b.copies || rf_mem_alloc(RF_MEM_DEVICE, b.bytes, "bench source", (void **)&b.src) ||
      rf_mem_alloc(RF_MEM_DEVICE, b.bytes, "bench destination", (void **)&b.dst))
    return 3;
  char size[32];
  printf("# refit-gpu-bench: %s (%s), %d SMs\n", info.name, info.bus_id, rf_gpu_sm_count());
  printf("# %s of bf16 in %d tensors: %s of %d Llama-3.1-8B layers; fused = vLLM tp=1\n",
         rf_format_bytes((int64_t)b.bytes, size, sizeof size), b.layers * 5, "q, k, v, gate, up",
         b.layers);
  printf("# GB/s = data-set bytes / median of %d (10^9 B/s): copies count each byte once, like\n"
         "# d2d; checksum and check the bytes read, fill the bytes written\n",
         REPEAT);
  printf("%-16s %10s %9s %8s\n", "op", "time ms", "GB/s", "vs d2d");

  int bad = 0;
  bad |= time_step(&b, "d2d", step_d2d);
  layout_fused(&b, 0, 0);
  bad |= time_step(&b, "pack fused", step_copy);
  layout_fused(&b, 1, 0);
  bad |= time_step(&b, "pack jax", step_copy);
  layout_fused(&b, 0, 1);
  bad |= time_step(&b, "unpack fused", step_copy);
  layout_halves(&b);
  bad |= time_step(&b, "pack halves", step_copy);
  bad |= time_step(&b, "fill", step_fill);
  bad |= time_step(&b, "checksum", step_checksum);
  bad |= time_step(&b, "check", step_check);
  bad |= time_step(&b, "checksum x N", step_checksum_each);
  static const char *const rules[] = {"sparse:0.01", "adam:1e-6"};
  for (size_t i = 0; i < RF_ARRAY_LEN(rules); i++) {
    rf_weight_version v = {{0}, 10};
    char why[256], name[48];
    if (rf_update_parse(rules[i], &v.update, why, sizeof why) != RF_OK)
      return 3;
    bench_version = &v;
    snprintf(name, sizeof name, "fill %s v10", rules[i]);
    bad |= time_step(&b, name, step_fill);
    snprintf(name, sizeof name, "check %s v10", rules[i]);
    bad |= time_step(&b, name, step_check);
  }
  bench_version = NULL;
  bad |= step_fill(&b) != RF_OK; /* version 0 again for the quantizers */
  /* The weights the fill wrote are finite, so no block is refused. */
  size_t scale_bytes = 1; /* the most any moved format needs (nvfp4: a byte per 16, tiled) */
  for (int i = 0; i < rf_format_count(); i++)
    if (rf_format_moved(rf_format_at(i)) && scales_of(&b, rf_format_at(i)) > scale_bytes)
      scale_bytes = scales_of(&b, rf_format_at(i));
  if (rf_mem_alloc(RF_MEM_DEVICE, scale_bytes, "bench scales", (void **)&b.scales))
    return 3;
  for (int i = 0; i < rf_format_count(); i++) {
    quant_format = rf_format_at(i);
    if (!rf_format_moved(quant_format))
      continue;
    for (quant_transposed = 0; quant_transposed < 2; quant_transposed++) {
      char name[48];
      snprintf(name, sizeof name, "quantize %s%s", quant_format->name,
               quant_transposed ? " jax" : "");
      bad |= time_step(&b, name, step_quantize);
      print_limit(&b, name, last_ms);
    }
  }
  rf_fp8_bad refused;
  if (rf_fp8_device_bad(&refused) != RF_OK || refused.found)
    bad = 1;
  rf_mem_free(RF_MEM_DEVICE, b.scales, scale_bytes);
  rf_mem_free(RF_MEM_DEVICE, b.src, b.bytes);
  rf_mem_free(RF_MEM_DEVICE, b.dst, b.bytes);
  free(b.copies);
  return bad ? 3 : 0;
}
