/* Delta encodings on the GPU against the host's bytes: every encoding and auto over changed
 * fractions 0, 1e-6, 1e-3, 0.01, 0.5 and 1, 1-, 2- and 4-byte elements, in row-major, padded
 * and transposed regions, sub-boxes whose rows the kernels load 16 bytes at a time and ones
 * they take element by element, with a last partial tile. Each case holds the same bytes in
 * host and device buffers, encodes on both and compares what encode reports and the encoded
 * bytes exactly, applies the device's bytes on the device and compares the whole destination
 * buffer, padding included, with the host's; a corrupted payload byte and header byte are
 * refused on the device with the host's message and nothing written.
 * Exits 77 (skipped) in a build without CUDA or on a machine without a GPU. */
#include "delta_cases.h"

static const rf_delta_encoding wants[] = {RF_DELTA_DENSE, RF_DELTA_SPARSE, RF_DELTA_BITMASK,
                                          RF_DELTA_AUTO};

/* A host buffer and its copy in device memory, and the region over each. */
typedef struct {
  dc_buf host;
  char *dev;
  rf_region dr;
} mirror;

static mirror mirror_of(const dc_buf *b) {
  mirror m = {*b, NULL, b->r};
  ASSERT_OK(rf_mem_alloc(RF_MEM_DEVICE, b->bytes, "test device buffer", (void **)&m.dev));
  ASSERT_OK(rf_mem_transfer(m.dev, RF_MEM_DEVICE, b->base, RF_MEM_HOST, b->bytes));
  m.dr.base = m.dev + (b->r.base - b->base);
  return m;
}

static void mirror_free(mirror *m) { rf_mem_free(RF_MEM_DEVICE, m->dev, m->host.bytes); }

/* Whether the device buffer holds the bytes of `host`. */
static int mirror_equals(const mirror *m, const char *host) {
  char *back = malloc(m->host.bytes + 1);
  ASSERT_TRUE(back);
  ASSERT_OK(rf_mem_transfer(back, RF_MEM_HOST, m->dev, RF_MEM_DEVICE, m->host.bytes));
  int same = memcmp(back, host, m->host.bytes) == 0;
  free(back);
  return same;
}

static int64_t cases_run, bytes_compared;

/* Applies `bytes` of a corrupted device delta and expects the host's refusal, nothing written. */
static void expect_refused_on_device(const char *enc_dev, const char *enc_host, size_t bytes,
                                     const rf_box *whole, const rf_box *box, const dc_buf *prev,
                                     int ld) {
  dc_buf hd = dc_buf_new(ld, whole, prev->r.esize);
  dc_copy(&hd, prev, whole);
  mirror dd = mirror_of(&hd);
  char host_err[512] = "", dev_err[512] = "";
  rf_log_capture(host_err, sizeof host_err);
  rf_status hs = rf_delta_apply(RF_MEM_HOST, enc_host, bytes, &hd.r, box, "piece", NULL);
  rf_log_capture(dev_err, sizeof dev_err);
  rf_status ds = rf_delta_apply(RF_MEM_DEVICE, enc_dev, bytes, &dd.dr, box, "piece", NULL);
  rf_log_capture(NULL, 0);
  ASSERT_STATUS(hs, RF_ERR_CORRUPT);
  ASSERT_STATUS(ds, RF_ERR_CORRUPT);
  ASSERT_STR_EQ(dev_err, host_err);
  ASSERT_TRUE(mirror_equals(&dd, hd.base));
  mirror_free(&dd);
  dc_buf_free(&hd);
}

static void check_case(const rf_box *whole, const rf_box *box, int es, int lp, int lc, int ld,
                       int64_t k, int corrupt) {
  dc_buf prev = dc_buf_new(lp, whole, es), cur = dc_buf_new(lc, whole, es);
  dc_copy(&cur, &prev, whole);
  int64_t n = rf_box_numel(box);
  int32_t *pos = dc_pick(n, k);
  for (int64_t i = 0; i < k; i++)
    dc_change(&cur.r, box, pos[i]);
  free(pos);
  mirror mp = mirror_of(&prev), mc = mirror_of(&cur);

  int64_t host_count = -1, dev_count = -1;
  ASSERT_OK(rf_delta_count(RF_MEM_HOST, &prev.r, &cur.r, box, "piece", &host_count));
  ASSERT_OK(rf_delta_count(RF_MEM_DEVICE, &mp.dr, &mc.dr, box, "piece", &dev_count));
  ASSERT_EQ(host_count, k);
  ASSERT_EQ(dev_count, k);

  size_t cap = (size_t)rf_delta_capacity(RF_DELTA_SPARSE, n, es);
  char *enc_host = malloc(cap), *enc_back = malloc(cap), *enc_dev = NULL;
  ASSERT_TRUE(enc_host && enc_back);
  ASSERT_OK(rf_mem_alloc(RF_MEM_DEVICE, cap, "test encoded piece", (void **)&enc_dev));
  for (size_t w = 0; w < RF_ARRAY_LEN(wants); w++) {
    rf_delta_info hi, di;
    ASSERT_OK(
        rf_delta_encode(RF_MEM_HOST, &prev.r, &cur.r, box, wants[w], enc_host, cap, "piece", &hi));
    ASSERT_OK(
        rf_delta_encode(RF_MEM_DEVICE, &mp.dr, &mc.dr, box, wants[w], enc_dev, cap, "piece", &di));
    ASSERT_EQ(di.encoding, hi.encoding);
    ASSERT_EQ(di.changed, k);
    ASSERT_EQ(di.bytes, hi.bytes);
    ASSERT_U64_EQ(di.hash, hi.hash);
    ASSERT_OK(rf_mem_transfer(enc_back, RF_MEM_HOST, enc_dev, RF_MEM_DEVICE, (size_t)di.bytes));
    ASSERT_EQ(memcmp(enc_back, enc_host, (size_t)hi.bytes), 0);
    bytes_compared += hi.bytes;

    dc_buf hd = dc_buf_new(ld, whole, es);
    dc_copy(&hd, &prev, whole);
    mirror dd = mirror_of(&hd);
    ASSERT_OK(rf_delta_apply(RF_MEM_HOST, enc_host, (size_t)hi.bytes, &hd.r, box, "piece", NULL));
    ASSERT_OK(rf_delta_apply(RF_MEM_DEVICE, enc_dev, (size_t)di.bytes, &dd.dr, box, "piece", NULL));
    ASSERT_OK(rf_mem_sync(RF_MEM_DEVICE));
    ASSERT_TRUE(dc_same_box(&hd.r, &cur.r, box));
    ASSERT_TRUE(mirror_equals(&dd, hd.base));
    mirror_free(&dd);
    dc_buf_free(&hd);

    if (corrupt && hi.bytes > RF_DELTA_HEADER_BYTES) {
      /* A payload byte in the middle, then the changed count in the header. */
      static const size_t spots[] = {0, 16};
      for (size_t i = 0; i < RF_ARRAY_LEN(spots); i++) {
        size_t at = spots[i] ? spots[i] : (size_t)(RF_DELTA_HEADER_BYTES + hi.bytes) / 2;
        char flipped = (char)(enc_host[at] ^ 0x20);
        enc_host[at] = flipped;
        ASSERT_OK(rf_mem_transfer(enc_dev + at, RF_MEM_DEVICE, &flipped, RF_MEM_HOST, 1));
        expect_refused_on_device(enc_dev, enc_host, (size_t)hi.bytes, whole, box, &prev, ld);
        enc_host[at] = (char)(flipped ^ 0x20);
        ASSERT_OK(rf_mem_transfer(enc_dev + at, RF_MEM_DEVICE, enc_host + at, RF_MEM_HOST, 1));
      }
    }
    cases_run++;
  }
  rf_mem_free(RF_MEM_DEVICE, enc_dev, cap);
  free(enc_host), free(enc_back);
  mirror_free(&mp), mirror_free(&mc);
  dc_buf_free(&prev), dc_buf_free(&cur);
}

int main(void) {
  if (!rf_gpu_built()) {
    printf("test_delta_gpu: skipped: this build has no CUDA\n");
    return RF_TEST_SKIP;
  }
  rf_gpu_info info;
  rf_status st = rf_gpu_select(0, -1, &info);
  if (st == RF_ERR_UNSUPPORTED) {
    printf("test_delta_gpu: skipped: no GPU is visible to this process\n");
    return RF_TEST_SKIP;
  }
  ASSERT_OK(st);
  printf("test_delta_gpu: GPU %d of %d: %s (%s)\n", info.device, info.count, info.name,
         info.bus_id);
  double t0 = rf_now();

  static const double fractions[] = {0, 1e-3, 0.01, 0.5, 1};
  static const int layouts[][3] = {{DC_ROW_MAJOR, DC_ROW_MAJOR, DC_ROW_MAJOR},
                                   {DC_PADDED, DC_TRANSPOSED, DC_PADDED},
                                   {DC_TRANSPOSED, DC_TRANSPOSED, DC_ROW_MAJOR}};
  /* Boxes: a whole tensor of a last partial tile (one dense run: 16-byte loads, then elements);
   * rows of 512 elements 2048 elements apart, 16-byte aligned (16-byte loads row by row, also
   * for 1-byte elements: 512 is a multiple of every vector's elements); an odd sub-box. */
  static const rf_box wholes[] = {{{0, 0}, {1000, 333}}, {{0, 0}, {300, 2048}}, {{0, 0}, {37, 53}}};
  static const rf_box boxes[] = {{{0, 0}, {1000, 333}}, {{1, 64}, {299, 576}}, {{3, 5}, {30, 48}}};
  for (int es = 1; es <= 4; es *= 2)
    for (size_t b = 0; b < RF_ARRAY_LEN(boxes); b++)
      for (size_t l = 0; l < RF_ARRAY_LEN(layouts); l++)
        for (size_t f = 0; f < RF_ARRAY_LEN(fractions); f++) {
          int64_t n = rf_box_numel(&boxes[b]);
          check_case(&wholes[b], &boxes[b], es, layouts[l][0], layouts[l][1], layouts[l][2],
                     (int64_t)(fractions[f] * (double)n + 0.5), f == 2);
        }
  /* 1e-6 on 4 Mi bf16 elements: 4 changes. */
  rf_box big = {{0, 0}, {2048, 2048}};
  check_case(&big, &big, 2, DC_ROW_MAJOR, DC_ROW_MAJOR, DC_PADDED, 4, 1);
  printf("test_delta_gpu: %" PRId64 " encodings equal to the host's (%" PRId64
         " bytes), applied and refused alike (%.2f s)\n",
         cases_run, bytes_compared, rf_now() - t0);
  return 0;
}
