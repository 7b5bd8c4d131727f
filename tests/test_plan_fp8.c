/* FP8 rollouts in the plan: where each piece is quantized and the wire bytes, exact for a small
 * model whose tensors are whole 128x128 blocks (tests/data/fp8-small.json: V=512, D=256, two
 * heads of 128, two kv heads, F=512, one layer), in both placements and mixed; every rollout
 * element still written exactly once (plan_checks.h); schedules that cut fp8 pieces at block
 * edges only and add up to the wire bytes. */
#include <stdio.h>
#include <stdlib.h>

#include "plan_checks.h"

static rf_model model;
/* The rollout's format: fp8, but mxfp8 in test_mxfp8. */
static rf_rollout_dtype format = RF_FORMAT_FP8;

/* Per fp8 block on the wire: 128 x 128 fp8 bytes and one fp32 scale. */
#define BLOCK (128 * 128 + 4)

static void load(void) {
  char path[1024];
  const char *src = getenv("REFIT_SOURCE_DIR"); /* set by CTest */
  snprintf(path, sizeof path, "%s/tests/data/fp8-small.json", src ? src : ".");
  ASSERT_OK(rf_model_load(path, &model));
}

static void build_style(rf_layout *lay, rf_plan *plan, const char *trainer, const char *rollout,
                        rf_trainer_style style, rf_trainer_order order, rf_plan_kind kind) {
  rf_trainer_layout t;
  rf_rollout_layout r;
  ASSERT_OK(rf_trainer_layout_parse(trainer, &t));
  ASSERT_OK(rf_rollout_layout_parse(rollout, &r));
  t.style = style;
  t.order = order;
  r.dtype = format;
  ASSERT_OK(rf_layout_init(lay, &model, &t, &r, RF_PLACEMENT_DISAGGREGATED));
  ASSERT_OK(rf_plan_build(plan, lay, kind, NULL));
  check_coverage(plan);
  check_bytes(plan, 1);
}

static void build(rf_layout *lay, rf_plan *plan, const char *trainer, const char *rollout,
                  rf_trainer_order order, rf_plan_kind kind) {
  build_style(lay, plan, trainer, rollout, RF_STYLE_TUNIX, order, kind);
}

static int64_t sum64(const int64_t *v, int n) {
  int64_t s = 0;
  for (int i = 0; i < n; i++)
    s += v[i];
  return s;
}

static void expect_counts(const int *v, int n, int each) {
  for (int i = 0; i < n; i++)
    ASSERT_EQ(v[i], each);
}

/* The bf16 bytes every case moves: embed and lm_head 512 x 256 each, q, k, v, o 256 x 256,
 * gate, up 512 x 256, down 256 x 512, three norms of 256 sent to both rollout ranks. */
#define TRANSFER (2 * 262144 + 4 * 131072 + 3 * 262144 + 2 * 3 * 512)

/* fsdp=2 (tunix) to tp=2: q, k, v and o rows by fsdp in whole heads (128), gate and up columns
 * (128), down rows (128), against rollout shares of 128 or 256 rows and columns: every piece is
 * whole blocks, quantized at its source. q, k, v: two pieces of 128 x 256 (2 blocks); o four of
 * 128 x 128; gate, up: four of 256 x 128; down four of 128 x 256. */
static void test_source(void) {
  rf_layout lay;
  rf_plan plan;
  build(&lay, &plan, "fsdp=2", "tp=2", RF_ORDER_HF, RF_PLAN_P2P);
  int64_t fp8 = 3 * 2 * 2 * BLOCK + 4 * BLOCK + 3 * 4 * 2 * BLOCK;
  ASSERT_EQ(fp8, 655520);
  ASSERT_EQ(plan.transfer_bytes, TRANSFER);
  ASSERT_EQ(plan.wire_transfer_bytes, fp8 + 2 * 262144 + 2 * 3 * 512);
  ASSERT_EQ(plan.wire_transfer_bytes, 1182880);
  ASSERT_EQ(sum64(plan.wire_send_bytes, 2), 1182880);
  ASSERT_EQ(plan.wire_recv_bytes[0], 1182880 / 2);
  ASSERT_EQ(plan.wire_recv_bytes[1], 1182880 / 2);
  ASSERT_EQ(plan.source_tensors, 7);
  ASSERT_EQ(plan.destination_tensors, 0);
  expect_counts(plan.source_quantized, 2, 7);
  expect_counts(plan.destination_quantized, 2, 0);
  for (int i = 0; i < plan.piece_count; i++) {
    const rf_piece *p = &plan.pieces[i];
    ASSERT_EQ(rf_piece_quant(&plan, p),
              rf_layout_fp8(&lay, p->tensor) ? RF_QUANT_SOURCE : RF_QUANT_NONE);
  }
  rf_plan_free(&plan);
  rf_layout_free(&lay);
}

/* The same layouts with the trainer in JAX order: every shard holds its blocks transposed, and
 * the quantizer reads them that way, so the pieces are quantized at their sources as in HF
 * order and the wire carries the same bytes. */
static void test_jax_order(void) {
  rf_layout lay;
  rf_plan plan;
  build(&lay, &plan, "fsdp=2", "tp=2", RF_ORDER_JAX, RF_PLAN_P2P);
  ASSERT_EQ(plan.wire_transfer_bytes, 1182880);
  ASSERT_EQ(plan.wire_recv_bytes[0], 1182880 / 2);
  ASSERT_EQ(plan.source_tensors, 7);
  ASSERT_EQ(plan.destination_tensors, 0);
  expect_counts(plan.source_quantized, 2, 7);
  expect_counts(plan.destination_quantized, 2, 0);
  rf_plan_free(&plan);
  rf_layout_free(&lay);
}

/* fsdp=2,tp=2 (fsdp2): q, k and v rows by tp in whole heads (128), then by fsdp: 64, half
 * blocks, so they move as bf16; o's columns by tp (128) and rows by fsdp (128), the MLP's rows
 * by tp then fsdp (128) and down's columns by tp (256) stay whole blocks: o four pieces of
 * 128 x 128, gate, up and down four of 128 x 256 (2 blocks) each. */
static void test_mixed(void) {
  rf_layout lay;
  rf_plan plan;
  build_style(&lay, &plan, "fsdp=2,tp=2", "tp=2", RF_STYLE_FSDP2, RF_ORDER_HF, RF_PLAN_P2P);
  ASSERT_EQ(plan.wire_transfer_bytes,
            3 * 131072 + 4 * BLOCK + 3 * 4 * 2 * BLOCK + 2 * 262144 + 2 * 3 * 512);
  ASSERT_EQ(plan.wire_transfer_bytes, 1379440);
  ASSERT_EQ(plan.source_tensors, 4);
  ASSERT_EQ(plan.destination_tensors, 3);
  expect_counts(plan.source_quantized, 4, 4);
  expect_counts(plan.destination_quantized, 2, 3);
  rf_plan_free(&plan);
  rf_layout_free(&lay);
}

/* fanout over two replicas: the forward step carries what a replica holds, fp8 and scales for
 * the linear weights (655520 bytes, as the transfer of test_source), bf16 for the rest. */
static void test_fanout(void) {
  rf_layout lay;
  rf_plan plan;
  build(&lay, &plan, "fsdp=2", "tp=2,dp=2", RF_ORDER_HF, RF_PLAN_FANOUT);
  ASSERT_EQ(plan.wire_transfer_bytes, 1182880);
  ASSERT_EQ(plan.wire_forward_bytes, 655520 + 2 * 262144 + 2 * 3 * 512);
  for (int i = plan.forward_first[0]; i < plan.piece_count; i++) {
    const rf_piece *p = &plan.pieces[i];
    ASSERT_EQ(rf_piece_quant(&plan, p),
              rf_layout_fp8(&lay, p->tensor) ? RF_QUANT_FORWARDED : RF_QUANT_NONE);
  }
  rf_plan_free(&plan);
  rf_layout_free(&lay);
}

/* The schedule of an fp8 plan: chunk bytes are wire bytes and add up to the stage's; a chunk of
 * an fp8 piece holds whole blocks; no rank sends or receives more than a bucket. A bucket of
 * 20000 bytes holds one block (16388), so every 128-row band of two blocks is cut in two,
 * whichever the pace (a pair's share never cuts below a band). */
static void test_schedule(rf_pace pace) {
  rf_layout lay;
  rf_plan plan;
  rf_schedule s;
  build(&lay, &plan, "fsdp=2", "tp=2", RF_ORDER_HF, RF_PLAN_P2P);
  ASSERT_OK(rf_schedule_build(&plan, RF_STAGE_TRANSFER, 20000, pace, &s));
  int64_t total = 0, fp8_chunks = 0;
  int world = lay.world_size;
  int64_t *sent = calloc((size_t)world * (size_t)s.bucket_count, sizeof *sent);
  int64_t *received = calloc((size_t)world * (size_t)s.bucket_count, sizeof *received);
  for (int i = 0; i < s.chunk_count; i++) {
    const rf_chunk *c = &s.chunks[i];
    const rf_piece *p = &plan.pieces[c->piece];
    ASSERT_EQ(c->bytes, rf_piece_wire_bytes(&plan, p, &c->box));
    total += c->bytes;
    if (rf_piece_quant(&plan, p) == RF_QUANT_SOURCE) {
      ASSERT_TRUE(rf_layout_fp8_aligned(&lay, p->tensor, &c->box));
      ASSERT_EQ(c->bytes, BLOCK);
      fp8_chunks++;
    }
    sent[(size_t)c->bucket * world + rf_piece_src_world(&plan, p)] += c->bytes;
    received[(size_t)c->bucket * world + rf_piece_dst_world(&plan, p)] += c->bytes;
  }
  for (int i = 0; i < world * s.bucket_count; i++) {
    ASSERT_LE(sent[i], 20000);
    ASSERT_LE(received[i], 20000);
  }
  ASSERT_EQ(total, plan.wire_transfer_bytes);
  ASSERT_EQ(fp8_chunks, 655520 / BLOCK); /* 40 blocks, one a chunk */
  free(sent);
  free(received);
  rf_schedule_free(&s);
  /* With room for the whole plan the pieces stay whole. */
  ASSERT_OK(rf_schedule_build(&plan, RF_STAGE_TRANSFER, 0, pace, &s));
  ASSERT_EQ(s.chunk_count, plan.piece_count);
  rf_schedule_free(&s);
  rf_plan_free(&plan);
  rf_layout_free(&lay);
}

/* mxfp8's 1x32 blocks with one E8M0 byte each: the linear weights' 655360 elements put
 * 655360 fp8 bytes and 655360 / 32 = 20480 scale bytes on the wire. Rows are whole blocks, so
 * test_mixed's 64-row fsdp shards, which cut fp8's blocks, hold whole mxfp8 blocks: every
 * tensor is quantized at its source in both layouts. A schedule of 200-byte buckets cuts each
 * row of 256 columns (256 + 8 = 264 bytes) into runs of 200 / 33 = 6 blocks (192 columns,
 * 198 bytes) and the rest (64 columns, 66 bytes), each on the 32-column grid. */
static void test_mxfp8(void) {
  rf_layout lay;
  rf_plan plan;
  rf_schedule s;
  format = RF_FORMAT_MXFP8;
  build(&lay, &plan, "fsdp=2", "tp=2", RF_ORDER_HF, RF_PLAN_P2P);
  int64_t fp8 = 655360 + 655360 / 32;
  ASSERT_EQ(plan.wire_transfer_bytes, fp8 + 2 * 262144 + 2 * 3 * 512);
  ASSERT_EQ(plan.wire_transfer_bytes, 1203200);
  ASSERT_EQ(plan.source_tensors, 7);
  ASSERT_EQ(plan.destination_tensors, 0);
  ASSERT_EQ(rf_format_min_bucket(rf_layout_format(&lay)), 33);
  ASSERT_OK(rf_schedule_build(&plan, RF_STAGE_TRANSFER, 200, RF_PACE_PIECES, &s));
  int64_t total = 0, wide = 0, narrow = 0;
  for (int i = 0; i < s.chunk_count; i++) {
    const rf_chunk *c = &s.chunks[i];
    const rf_piece *p = &plan.pieces[c->piece];
    ASSERT_EQ(c->bytes, rf_piece_wire_bytes(&plan, p, &c->box));
    total += c->bytes;
    if (rf_piece_quant(&plan, p) != RF_QUANT_SOURCE)
      continue;
    ASSERT_TRUE(rf_layout_fp8_aligned(&lay, p->tensor, &c->box));
    ASSERT_LE(c->bytes, 200);
    wide += c->bytes == 198;
    narrow += c->bytes == 66;
  }
  ASSERT_EQ(total, plan.wire_transfer_bytes);
  /* Rows of 256 columns: q, k, v (256 x 256), gate and up (512 x 256); down's 256 x 512 pieces
   * (256 rows of 256 columns a rank) and o's (128 x 128: 132 bytes a row) too. */
  ASSERT_TRUE(wide > 0 && wide == narrow);
  rf_schedule_free(&s);
  rf_plan_free(&plan);
  rf_layout_free(&lay);
  build_style(&lay, &plan, "fsdp=2,tp=2", "tp=2", RF_STYLE_FSDP2, RF_ORDER_HF, RF_PLAN_P2P);
  ASSERT_EQ(plan.wire_transfer_bytes, 1203200);
  ASSERT_EQ(plan.source_tensors, 7);
  ASSERT_EQ(plan.destination_tensors, 0);
  rf_plan_free(&plan);
  rf_layout_free(&lay);
  format = RF_FORMAT_FP8;
}

/* The digest tells an fp8 plan from the same plan in the model's dtype. */
static void test_digest(void) {
  rf_layout lay, plain_lay;
  rf_plan plan, plain;
  build(&lay, &plan, "fsdp=2", "tp=2", RF_ORDER_HF, RF_PLAN_P2P);
  rf_trainer_layout t;
  rf_rollout_layout r;
  ASSERT_OK(rf_trainer_layout_parse("fsdp=2", &t));
  ASSERT_OK(rf_rollout_layout_parse("tp=2", &r));
  t.style = RF_STYLE_TUNIX;
  t.order = RF_ORDER_HF;
  ASSERT_OK(rf_layout_init(&plain_lay, &model, &t, &r, RF_PLACEMENT_DISAGGREGATED));
  ASSERT_OK(rf_plan_build(&plain, &plain_lay, RF_PLAN_P2P, NULL));
  ASSERT_EQ(plain.piece_count, plan.piece_count);
  ASSERT_EQ(plain.wire_transfer_bytes, plain.transfer_bytes);
  ASSERT_TRUE(plain.digest != plan.digest);
  rf_plan_free(&plain);
  rf_layout_free(&plain_lay);
  rf_plan_free(&plan);
  rf_layout_free(&lay);
}

int main(void) {
  load();
  test_source();
  test_jax_order();
  test_mixed();
  test_fanout();
  test_schedule(RF_PACE_PIECES);
  test_schedule(RF_PACE_ROWS);
  test_digest();
  test_mxfp8();
  rf_model_free(&model);
  return 0;
}
