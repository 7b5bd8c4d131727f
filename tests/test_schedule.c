/* Schedule properties over the small shipped models (and tiny with tensors of three dtypes),
 * several layouts, every plan kind (each step of fanout's forward stage a schedule of its own),
 * several bucket sizes and both paces: the chunks of every piece tile its box exactly, each
 * chunk's bytes in its tensor's own element size, no rank sends or receives more than a
 * bucket's bytes in one bucket, a bucket closes only once every pair is out of room or at its
 * pace, every pair keeps its pace, the schedule is a pure function of plan, stage, bucket size
 * and pace (what lets every rank build it alone and still agree), and a cursor's windows put
 * together are the same schedule. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "test.h"

static const char *const models[] = {"tiny", "llama-3.2-1b", "gemma-3-1b"};

typedef struct {
  const char *trainer, *rollout;
  rf_trainer_style style;
  rf_placement placement;
} layout_case;

static const layout_case layouts[] = {
    {"fsdp=2", "tp=2", RF_STYLE_TUNIX, RF_PLACEMENT_DISAGGREGATED},
    {"fsdp=2,tp=2", "tp=4", RF_STYLE_TUNIX, RF_PLACEMENT_DISAGGREGATED},
    {"fsdp=4", "tp=2", RF_STYLE_FSDP2, RF_PLACEMENT_COLOCATED},
    {"fsdp=2,tp=2", "tp=2,dp=2", RF_STYLE_FSDP2, RF_PLACEMENT_DISAGGREGATED},
    /* Four replicas: fanout forwards in two steps. */
    {"fsdp=2", "tp=1,dp=4", RF_STYLE_TUNIX, RF_PLACEMENT_COLOCATED},
};

/* 0 is one bucket for the whole stage; 4096 is the smallest size refit run accepts. It cuts
 * a 1B model into some 600,000 chunks a stage, so the 1B models take it on their first
 * layout only, to keep the test short on a loaded machine. */
static const int64_t bucket_sizes[] = {0, 4096, 65536, 1 << 20, 64 << 20};

/* A cursor's windows of about this many chunks; 1 hands out one bucket a time. */
static const int window_sizes[] = {1, 7, 1000};

/* Read a window at a time through a cursor, the schedule is the same: the same chunks in the
 * same order, the same buckets with the same first chunk, each window's first_bucket where the
 * one before it ended, and an empty window at the end. */
static void check_windows(const rf_plan *plan, rf_stage stage, const rf_schedule *whole,
                          int max_chunks) {
  rf_schedule_cursor *c = NULL;
  ASSERT_OK(rf_schedule_cursor_open(plan, stage, whole->bucket_size, whole->pace, &c));
  int chunks = 0, buckets = 0;
  for (;;) {
    rf_schedule win;
    ASSERT_OK(rf_schedule_cursor_next(c, max_chunks, &win));
    if (win.bucket_count == 0) {
      ASSERT_EQ(win.chunk_count, 0);
      break;
    }
    ASSERT_EQ(win.first_bucket, buckets);
    ASSERT_EQ(win.pace, whole->pace);
    ASSERT_LE(buckets + win.bucket_count, whole->bucket_count);
    for (int b = 0; b < win.bucket_count; b++) {
      ASSERT_EQ(win.buckets[b].first + chunks, whole->buckets[buckets + b].first);
      ASSERT_EQ(win.buckets[b].count, whole->buckets[buckets + b].count);
    }
    ASSERT_LE(chunks + win.chunk_count, whole->chunk_count);
    if (win.chunk_count)
      ASSERT_EQ(
          memcmp(win.chunks, whole->chunks + chunks, (size_t)win.chunk_count * sizeof *win.chunks),
          0);
    chunks += win.chunk_count;
    buckets += win.bucket_count;
    rf_schedule_free(&win);
  }
  ASSERT_EQ(chunks, whole->chunk_count);
  ASSERT_EQ(buckets, whole->bucket_count);
  rf_schedule_cursor_close(c);
}

/* The chunks [first, end) of one piece tile its box: read in order, they scan the box in
 * row-major order, as the schedule promises (a piece is cut along its rows, and a single row
 * along its columns). A cursor starts at the box's first element; each chunk must start at
 * the cursor and be either whole rows of the box's full width, or part of one row, and the
 * scan must end exactly after the box's last element. That leaves no gap, no overlap and
 * nothing outside the box. */
static void check_tiling(const rf_schedule *s, int first, int end, const rf_piece *p,
                         int64_t esize) {
  int64_t row = p->box.lo[0], col = p->box.lo[1], numel = 0, bytes = 0;
  for (int i = first; i < end; i++) {
    const rf_box *b = &s->chunks[i].box;
    ASSERT_FALSE(rf_box_is_empty(b));
    ASSERT_EQ(s->chunks[i].bytes, rf_box_numel(b) * esize);
    ASSERT_EQ(b->lo[0], row);
    ASSERT_EQ(b->lo[1], col);
    ASSERT_LE(b->hi[0], p->box.hi[0]);
    ASSERT_LE(b->hi[1], p->box.hi[1]);
    if (b->hi[0] - b->lo[0] > 1 || (col == p->box.lo[1] && b->hi[1] == p->box.hi[1])) {
      ASSERT_EQ(b->lo[1], p->box.lo[1]); /* whole rows */
      ASSERT_EQ(b->hi[1], p->box.hi[1]);
      row = b->hi[0];
    } else if (b->hi[1] == p->box.hi[1]) { /* the end of a row */
      row++, col = p->box.lo[1];
    } else { /* the start or middle of a row */
      col = b->hi[1];
    }
    numel += rf_box_numel(b);
    bytes += s->chunks[i].bytes;
  }
  ASSERT_EQ(row, p->box.hi[0]);
  ASSERT_EQ(col, p->box.lo[1]);
  ASSERT_EQ(numel, rf_box_numel(&p->box));
  ASSERT_EQ(bytes, p->bytes);
}

/* Buckets engage every pair: a bucket closes only once no rank pair with bytes still to send
 * has room in it for its next row, that is, its sender or its receiver holds more than a
 * bucket less one row, or the pair has kept pace: paced by rows, one more row would take its
 * bytes placed so far past its target; paced by pieces, they have reached it. The target of
 * bucket b is worked out here from the schedule's own chunks: b + 1 quotas, a quota a pair's
 * remote bytes over B, B the buckets the busiest rank's remote bytes need, both rounded up (no
 * target from bucket B - 1 on). Buckets closed by a row wider than a whole bucket (cut along
 * its columns, a bucket a column range) are the exception.
 *
 * And the pairs keep pace: a pair's every chunk is a turn of its own (a turn places into one
 * piece, and a pair cut short by room or pace waits for the next bucket), and before its last
 * turn in a bucket the pair had not yet reached the bucket's target unless that was its first
 * turn there. Paced by rows, that last turn placed no more than its target left it, or one
 * row. */
static void check_full(const rf_plan *plan, const rf_schedule *s) {
  const rf_layout *lay = plan->layout;
  int world = lay->world_size;
  int64_t *sent = calloc((size_t)world, sizeof *sent), *received = calloc((size_t)world, 8);
  int *next = malloc((size_t)world * world * sizeof *next); /* a pair's first chunk after b */
  /* A pair's remote bytes in all, then its quota; its bytes placed through bucket b. */
  int64_t *quota = calloc((size_t)world * world, sizeof *quota);
  int64_t *placed = calloc((size_t)world * world, sizeof *placed);
  int64_t *in_bucket = calloc((size_t)world * world, sizeof *in_bucket);
  int *last = malloc((size_t)world * world * sizeof *last); /* a pair's last chunk in b */
  ASSERT_TRUE(sent && received && next && quota && placed && in_bucket && last);
  memset(next, -1, (size_t)world * world * sizeof *next);
  for (int i = 0; i < s->chunk_count; i++) {
    const rf_piece *p = &plan->pieces[s->chunks[i].piece];
    int src = rf_piece_src_world(plan, p), dst = rf_piece_dst_world(plan, p);
    if (src != dst) {
      quota[src * world + dst] += s->chunks[i].bytes;
      placed[src * world + dst] += s->chunks[i].bytes;
      sent[src] += s->chunks[i].bytes;
      received[dst] += s->chunks[i].bytes;
    }
  }
  int64_t busiest = 0;
  for (int r = 0; r < world; r++)
    busiest = RF_MAX(busiest, RF_MAX(sent[r], received[r]));
  int64_t buckets = RF_MAX(1, (busiest + s->bucket_size - 1) / s->bucket_size);
  for (int pair = 0; pair < world * world; pair++)
    quota[pair] = RF_MAX(1, (quota[pair] + buckets - 1) / buckets);
  /* From the last bucket back, so that next[] holds each pair's first chunk of later buckets. */
  for (int b = s->bucket_count - 1; b >= 0; b--) {
    memset(sent, 0, (size_t)world * sizeof *sent);
    memset(received, 0, (size_t)world * sizeof *received);
    memset(in_bucket, 0, (size_t)world * world * sizeof *in_bucket);
    memset(last, -1, (size_t)world * world * sizeof *last);
    const rf_bucket *bk = &s->buckets[b];
    int cut_row = 0;
    for (int i = bk->first; i < bk->first + bk->count; i++) {
      const rf_piece *p = &plan->pieces[s->chunks[i].piece];
      cut_row |= s->chunks[i].box.hi[1] - s->chunks[i].box.lo[1] < p->box.hi[1] - p->box.lo[1];
      if (!rf_piece_is_local(plan, p)) {
        int src = rf_piece_src_world(plan, p), dst = rf_piece_dst_world(plan, p);
        sent[src] += s->chunks[i].bytes;
        received[dst] += s->chunks[i].bytes;
        in_bucket[src * world + dst] += s->chunks[i].bytes;
        last[src * world + dst] = i;
      }
    }
    for (int pair = 0; pair < world * world; pair++) {
      if (last[pair] < 0)
        continue;
      const rf_chunk *k = &s->chunks[last[pair]];
      int64_t target = b + 1 >= buckets ? INT64_MAX : (b + 1) * quota[pair];
      int64_t before_last = placed[pair] - k->bytes;
      ASSERT_TRUE(before_last < target || before_last == placed[pair] - in_bucket[pair]);
      int64_t row = (k->box.hi[1] - k->box.lo[1]) *
                    rf_tensor_esize(&lay->model->tensors[plan->pieces[k->piece].tensor]);
      if (s->pace == RF_PACE_ROWS && target != INT64_MAX)
        ASSERT_LE(k->bytes, RF_MAX(target - before_last, row));
    }
    for (int pair = 0; pair < world * world && !cut_row; pair++) {
      if (next[pair] < 0 || pair / world == pair % world)
        continue;
      const rf_chunk *k = &s->chunks[next[pair]];
      int64_t row = (k->box.hi[1] - k->box.lo[1]) *
                    rf_tensor_esize(&lay->model->tensors[plan->pieces[k->piece].tensor]);
      int full = RF_MAX(sent[pair / world], received[pair % world]) + row > s->bucket_size;
      int64_t target = b + 1 >= buckets ? INT64_MAX : (b + 1) * quota[pair];
      int paced =
          placed[pair] >= target || (s->pace == RF_PACE_ROWS && placed[pair] + row > target);
      ASSERT_TRUE(full || paced);
    }
    /* What the pairs placed in this bucket is not placed through bucket b - 1. */
    for (int i = bk->first; i < bk->first + bk->count; i++) {
      const rf_piece *p = &plan->pieces[s->chunks[i].piece];
      if (!rf_piece_is_local(plan, p))
        placed[rf_piece_src_world(plan, p) * world + rf_piece_dst_world(plan, p)] -=
            s->chunks[i].bytes;
    }
    for (int i = bk->first + bk->count - 1; i >= bk->first; i--) {
      const rf_piece *p = &plan->pieces[s->chunks[i].piece];
      next[rf_piece_src_world(plan, p) * world + rf_piece_dst_world(plan, p)] = i;
    }
  }
  free(sent);
  free(received);
  free(next);
  free(quota);
  free(placed);
  free(in_bucket);
  free(last);
}

/* The schedule of a stage, or of one step of the forward stage (step >= 0). */
static rf_status build(const rf_plan *plan, rf_stage stage, int step, int64_t bucket_size,
                       rf_pace pace, rf_schedule *s) {
  return step >= 0 ? rf_schedule_build_forward(plan, step, bucket_size, pace, s)
                   : rf_schedule_build(plan, stage, bucket_size, pace, s);
}

/* Everything one schedule promises, for one stage (or forward step) of one plan. Returns its
 * chunk count. */
static int check_schedule(const rf_plan *plan, rf_stage stage, int step, int64_t bucket_size,
                          rf_pace pace) {
  const rf_layout *lay = plan->layout;
  int first = step >= 0 ? plan->forward_first[step] : 0;
  int end = step >= 0 ? plan->forward_first[step + 1] : plan->piece_count;
  rf_schedule s;
  ASSERT_OK(build(plan, stage, step, bucket_size, pace, &s));
  ASSERT_EQ(s.stage, stage);
  ASSERT_EQ(s.bucket_size, bucket_size);
  ASSERT_EQ(s.pace, pace);

  /* Buckets are non-empty, consecutive, in order, and cover every chunk once. */
  int stage_pieces = 0;
  for (int i = first; i < end; i++)
    stage_pieces += plan->pieces[i].stage == (int32_t)stage;
  ASSERT_TRUE(step < 0 || stage_pieces > 0);
  ASSERT_GE(s.bucket_count, 1);
  int next = 0;
  for (int b = 0; b < s.bucket_count; b++) {
    ASSERT_EQ(s.buckets[b].first, next);
    ASSERT_TRUE(s.buckets[b].count > 0 || stage_pieces == 0);
    for (int i = next; i < next + s.buckets[b].count; i++)
      ASSERT_EQ(s.chunks[i].bucket, b);
    next += s.buckets[b].count;
  }
  ASSERT_EQ(next, s.chunk_count);
  if (bucket_size == 0) {
    ASSERT_EQ(s.bucket_count, 1);
    ASSERT_EQ(s.chunk_count, stage_pieces);
  }

  /* Within a bucket the chunks come in plan order. Taken piece by piece in schedule order,
   * each piece of the stage has a run of chunks that tiles it, and a local piece (a copy
   * inside one process) is never cut. */
  for (int b = 0; b < s.bucket_count; b++)
    for (int i = s.buckets[b].first + 1; i < s.buckets[b].first + s.buckets[b].count; i++)
      ASSERT_LE(s.chunks[i - 1].piece, s.chunks[i].piece);
  rf_schedule by_piece = s;
  by_piece.chunks = malloc((size_t)s.chunk_count * sizeof *s.chunks + 1);
  int *start = calloc((size_t)plan->piece_count + 1, sizeof *start);
  ASSERT_TRUE(by_piece.chunks && start);
  for (int i = 0; i < s.chunk_count; i++)
    start[s.chunks[i].piece + 1]++;
  for (int i = 0; i < plan->piece_count; i++)
    start[i + 1] += start[i];
  for (int i = 0; i < s.chunk_count; i++)
    by_piece.chunks[start[s.chunks[i].piece]++] = s.chunks[i];
  free(start);
  int at = 0;
  for (int i = first; i < end; i++) {
    const rf_piece *p = &plan->pieces[i];
    if (p->stage != (int32_t)stage)
      continue;
    int last = at;
    while (last < s.chunk_count && by_piece.chunks[last].piece == i)
      last++;
    ASSERT_GT(last, at);
    if (rf_piece_is_local(plan, p))
      ASSERT_EQ(last - at, 1);
    check_tiling(&by_piece, at, last, p, rf_tensor_esize(&lay->model->tensors[p->tensor]));
    at = last;
  }
  ASSERT_EQ(at, s.chunk_count);
  free(by_piece.chunks);
  if (bucket_size > 0)
    check_full(plan, &s);

  /* The bound: within one bucket no world rank sends, nor receives, more than bucket_size
   * bytes to or from other ranks (local copies are not in flight). The schedule cuts a row
   * wider than a bucket into column ranges of at most a bucket, and the smallest bucket
   * (4096 bytes) holds many elements, so here no indivisible unit exceeds it: the bound
   * holds with no exception. */
  if (bucket_size > 0) {
    int64_t *sent = calloc((size_t)lay->world_size, sizeof *sent);
    int64_t *received = calloc((size_t)lay->world_size, sizeof *received);
    ASSERT_TRUE(sent && received);
    for (int b = 0; b < s.bucket_count; b++) {
      memset(sent, 0, (size_t)lay->world_size * sizeof *sent);
      memset(received, 0, (size_t)lay->world_size * sizeof *received);
      const rf_bucket *bk = &s.buckets[b];
      for (int i = bk->first; i < bk->first + bk->count; i++) {
        const rf_piece *p = &plan->pieces[s.chunks[i].piece];
        if (rf_piece_is_local(plan, p))
          continue;
        ASSERT_LE(s.chunks[i].bytes, bucket_size);
        sent[rf_piece_src_world(plan, p)] += s.chunks[i].bytes;
        received[rf_piece_dst_world(plan, p)] += s.chunks[i].bytes;
      }
      for (int r = 0; r < lay->world_size; r++) {
        ASSERT_LE(sent[r], bucket_size);
        ASSERT_LE(received[r], bucket_size);
      }
    }
    free(sent);
    free(received);
  }

  /* A pure function: built again from the same plan, the same chunks and buckets. */
  rf_schedule again;
  ASSERT_OK(build(plan, stage, step, bucket_size, pace, &again));
  ASSERT_EQ(again.chunk_count, s.chunk_count);
  ASSERT_EQ(again.bucket_count, s.bucket_count);
  /* An empty stage has no arrays at all, and memcmp may not be given NULL even for 0 bytes. */
  if (s.chunk_count)
    ASSERT_EQ(memcmp(again.chunks, s.chunks, (size_t)s.chunk_count * sizeof *s.chunks), 0);
  if (s.bucket_count)
    ASSERT_EQ(memcmp(again.buckets, s.buckets, (size_t)s.bucket_count * sizeof *s.buckets), 0);
  rf_schedule_free(&again);
  /* A cursor walks a whole stage; a forward step is a part of one. */
  for (size_t w = 0; w < RF_ARRAY_LEN(window_sizes) && step < 0; w++)
    check_windows(plan, stage, &s, window_sizes[w]);
  int chunks = s.chunk_count;
  rf_schedule_free(&s);
  return chunks;
}

static void make_layout(rf_layout *lay, const rf_model *m, const layout_case *c) {
  rf_trainer_layout t;
  rf_rollout_layout r;
  ASSERT_OK(rf_trainer_layout_parse(c->trainer, &t));
  ASSERT_OK(rf_rollout_layout_parse(c->rollout, &r));
  t.style = c->style;
  t.order = RF_ORDER_HF;
  ASSERT_OK(rf_layout_init(lay, m, &t, &r, c->placement));
}

/* Two ranks that build everything on their own (model, layout, plan) get the same plan
 * digest and byte-identical schedules of both stages. */
static void check_independent(const char *model, const layout_case *c, rf_plan_kind kind,
                              int64_t bucket_size, rf_pace pace) {
  rf_model m[2];
  rf_layout lay[2];
  rf_plan plan[2];
  rf_schedule s[2][2];
  for (int k = 0; k < 2; k++) {
    ASSERT_OK(rf_model_load(model, &m[k]));
    make_layout(&lay[k], &m[k], c);
    ASSERT_OK(rf_plan_build(&plan[k], &lay[k], kind, NULL));
    ASSERT_OK(rf_schedule_build(&plan[k], RF_STAGE_RESHAPE, bucket_size, pace, &s[k][0]));
    ASSERT_OK(rf_schedule_build(&plan[k], RF_STAGE_TRANSFER, bucket_size, pace, &s[k][1]));
  }
  ASSERT_U64_EQ(plan[0].digest, plan[1].digest);
  for (int st = 0; st < 2; st++) {
    ASSERT_EQ(s[0][st].chunk_count, s[1][st].chunk_count);
    ASSERT_EQ(s[0][st].bucket_count, s[1][st].bucket_count);
    /* An empty stage (p2p's reshape) has no arrays to compare. */
    if (s[0][st].chunk_count)
      ASSERT_EQ(
          memcmp(s[0][st].chunks, s[1][st].chunks, (size_t)s[0][st].chunk_count * sizeof(rf_chunk)),
          0);
    if (s[0][st].bucket_count)
      ASSERT_EQ(memcmp(s[0][st].buckets, s[1][st].buckets,
                       (size_t)s[0][st].bucket_count * sizeof(rf_bucket)),
                0);
  }
  for (int k = 0; k < 2; k++) {
    rf_schedule_free(&s[k][0]);
    rf_schedule_free(&s[k][1]);
    rf_plan_free(&plan[k]);
    rf_layout_free(&lay[k]);
    rf_model_free(&m[k]);
  }
}

/* The chunks of piece 0 in order: `rows` rows at a time, 4096 bytes each, in later and later
 * buckets (with `every_other`, buckets 0, 2, 4, ...); and each of those buckets also holds a chunk
 * of the other sender to the other receiver, so both senders and both receivers work in every
 * bucket. */
static void check_first_piece(const rf_plan *plan, const rf_schedule *s, int rows, int chunks,
                              int every_other) {
  int seen = 0, last = -1;
  for (int i = 0; i < s->chunk_count; i++) {
    const rf_chunk *k = &s->chunks[i];
    if (k->piece != 0)
      continue;
    ASSERT_EQ(k->box.lo[0], rows * seen);
    ASSERT_EQ(k->box.hi[0], rows * seen + rows);
    ASSERT_EQ(k->bytes, 4096);
    if (every_other)
      ASSERT_EQ(k->bucket, 2 * seen);
    ASSERT_GT(k->bucket, last);
    last = k->bucket;
    const rf_bucket *b = &s->buckets[k->bucket];
    ASSERT_EQ(b->count, 2);
    const rf_piece *x = &plan->pieces[s->chunks[b->first].piece];
    const rf_piece *y = &plan->pieces[s->chunks[b->first + 1].piece];
    ASSERT_NE(x->src, y->src);
    ASSERT_NE(x->dst, y->dst);
    seen++;
  }
  ASSERT_EQ(seen, chunks);
}

/* A hand-checked case: tiny, fsdp=2 -> tp=2 p2p, 4096-byte buckets. Tunix splits
 * embed_tokens (512 x 64 bf16) by columns over fsdp, so trainer rank 0 holds columns 0..31
 * (64 bytes a row); rollout rank 0 keeps vocab rows 0..255. The first piece is therefore
 * rows 0..255 x columns 0..31 (16 KiB), cut into 4 chunks of 64 rows (4096 bytes). Buckets
 * fill pair by pair: bucket 0 takes the pairs 0 -> 0 and 1 -> 1, bucket 1 the pairs 1 -> 0 and
 * 0 -> 1, and so on, so the first piece's chunks land in buckets 0, 2, 4 and 6. */
static void test_tiny_by_hand(void) {
  rf_model m;
  ASSERT_OK(rf_model_load("tiny", &m));
  rf_layout lay;
  make_layout(&lay, &m, &layouts[0]);
  rf_plan plan;
  ASSERT_OK(rf_plan_build(&plan, &lay, RF_PLAN_P2P, NULL));
  const rf_piece *p = &plan.pieces[0];
  ASSERT_STR_EQ(m.tensors[p->tensor].name, "model.embed_tokens.weight");
  ASSERT_EQ(p->src, 0);
  ASSERT_EQ(p->dst, 0);
  ASSERT_EQ(p->box.lo[0], 0);
  ASSERT_EQ(p->box.hi[0], 256);
  ASSERT_EQ(p->box.lo[1], 0);
  ASSERT_EQ(p->box.hi[1], 32);
  rf_schedule s;
  ASSERT_OK(rf_schedule_build(&plan, RF_STAGE_TRANSFER, 4096, RF_PACE_PIECES, &s));
  check_first_piece(&plan, &s, 64, 4, 1);
  rf_schedule_free(&s);
  rf_plan_free(&plan);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

/* tiny with tensors of three dtypes: the embedding fp32, every norm fp16, the rest bf16. */
static void mix_dtypes(rf_model *m) {
  for (int t = 0; t < m->tensor_count; t++) {
    if (m->tensors[t].kind == RF_T_EMBED)
      ASSERT_OK(rf_model_set_tensor_dtype(m, t, RF_DTYPE_FP32));
    if (m->tensors[t].kind == RF_T_NORM)
      ASSERT_OK(rf_model_set_tensor_dtype(m, t, RF_DTYPE_FP16));
  }
}

/* The hand-checked case again with embed_tokens fp32 of its own: a row of the first piece is
 * 32 columns of 4 bytes, so its 256 rows (32 KiB) are cut into 8 chunks of 32 rows, 4096
 * bytes each: twice the bf16 case's chunks, each of half the rows. */
static void test_tiny_mixed_by_hand(void) {
  rf_model m;
  ASSERT_OK(rf_model_load("tiny", &m));
  mix_dtypes(&m);
  rf_layout lay;
  make_layout(&lay, &m, &layouts[0]);
  rf_plan plan;
  ASSERT_OK(rf_plan_build(&plan, &lay, RF_PLAN_P2P, NULL));
  ASSERT_EQ(plan.pieces[0].bytes, 256 * 32 * 4);
  rf_schedule s;
  ASSERT_OK(rf_schedule_build(&plan, RF_STAGE_TRANSFER, 4096, RF_PACE_PIECES, &s));
  check_first_piece(&plan, &s, 32, 8, 0);
  rf_schedule_free(&s);
  rf_plan_free(&plan);
  rf_layout_free(&lay);
  rf_model_free(&m);
}

/* Pacing worked out by hand: one trainer rank sends two pieces of tiny's embedding (bf16, 8
 * columns: 16 bytes a row) to two rollout ranks, 96 rows (1536 bytes) to one and 32 rows (512
 * bytes) to the other, in buckets of 512 bytes. The sender needs B = 2048 / 512 = 4 buckets,
 * so the quotas are 384 bytes (24 rows) and 128 bytes (8 rows). Paced by rows, each bucket
 * carries 24 rows of the first piece and 8 of the second: a quarter of each pair, so the
 * sender's two links work alike in all four buckets. Paced by pieces a piece is not cut at its
 * share, and each pair here has one piece: the first fills bucket 0 by its room (32 rows),
 * the second, now further behind, bucket 1 whole, and the first the last two. */
static void test_pace_by_hand(void) {
  rf_model m;
  ASSERT_OK(rf_model_load("tiny", &m));
  ASSERT_STR_EQ(m.tensors[0].name, "model.embed_tokens.weight");
  ASSERT_EQ(rf_tensor_esize(&m.tensors[0]), 2);
  rf_layout lay = {.model = &m, .trainer_ranks = 1, .rollout_ranks = 2, .world_size = 3};
  lay.placement = RF_PLACEMENT_DISAGGREGATED;
  rf_piece pieces[] = {{0, RF_STAGE_TRANSFER, 0, 0, {{0, 0}, {96, 8}}, 96 * 16},
                       {0, RF_STAGE_TRANSFER, 0, 1, {{96, 0}, {128, 8}}, 32 * 16}};
  rf_plan plan = {.kind = RF_PLAN_P2P, .layout = &lay, .piece_count = 2, .pieces = pieces};
  /* {piece, first row, end row} of each chunk, bucket by bucket (two chunks a bucket). */
  static const int rows[2][4][2][3] = {
      {{{0, 0, 24}, {1, 96, 104}},
       {{0, 24, 48}, {1, 104, 112}},
       {{0, 48, 72}, {1, 112, 120}},
       {{0, 72, 96}, {1, 120, 128}}},
      {{{0, 0, 32}, {-1, 0, 0}},
       {{1, 96, 128}, {-1, 0, 0}},
       {{0, 32, 64}, {-1, 0, 0}},
       {{0, 64, 96}, {-1, 0, 0}}},
  };
  for (int k = 0; k < 2; k++) {
    rf_schedule s;
    ASSERT_OK(rf_schedule_build(&plan, RF_STAGE_TRANSFER, 512,
                                k == 0 ? RF_PACE_ROWS : RF_PACE_PIECES, &s));
    ASSERT_EQ(s.bucket_count, 4);
    for (int b = 0; b < 4; b++) {
      int count = rows[k][b][1][0] < 0 ? 1 : 2;
      ASSERT_EQ(s.buckets[b].count, count);
      for (int c = 0; c < count; c++) {
        const rf_chunk *ch = &s.chunks[s.buckets[b].first + c];
        ASSERT_EQ(ch->piece, rows[k][b][c][0]);
        ASSERT_EQ(ch->box.lo[0], rows[k][b][c][1]);
        ASSERT_EQ(ch->box.hi[0], rows[k][b][c][2]);
        ASSERT_EQ(ch->box.lo[1], 0);
        ASSERT_EQ(ch->box.hi[1], 8);
        ASSERT_EQ(ch->bytes, (rows[k][b][c][2] - rows[k][b][c][1]) * 16);
      }
    }
    check_full(&plan, &s);
    rf_schedule_free(&s);
  }
  rf_model_free(&m);
}

int main(void) {
  test_pace_by_hand();
  test_tiny_by_hand();
  test_tiny_mixed_by_hand();
  int schedules = 0;
  long chunks = 0;
  for (size_t mi = 0; mi < RF_ARRAY_LEN(models); mi++) {
    rf_model m;
    ASSERT_OK(rf_model_load(models[mi], &m));
    for (size_t li = 0; li < RF_ARRAY_LEN(layouts); li++) {
      rf_layout lay;
      make_layout(&lay, &m, &layouts[li]);
      for (int kind = RF_PLAN_P2P; kind <= RF_PLAN_FANOUT; kind++) {
        rf_plan plan;
        ASSERT_OK(rf_plan_build(&plan, &lay, (rf_plan_kind)kind, NULL));
        ASSERT_EQ(plan.reshape_count > 0, kind == RF_PLAN_STAR);
        for (size_t bi = 0; bi < RF_ARRAY_LEN(bucket_sizes); bi++) {
          if (bucket_sizes[bi] == 4096 && mi > 0 && li > 0)
            continue;
          for (int pace = RF_PACE_PIECES; pace <= RF_PACE_ROWS; pace++) {
            for (int stage = RF_STAGE_RESHAPE; stage <= RF_STAGE_TRANSFER; stage++) {
              chunks += check_schedule(&plan, (rf_stage)stage, -1, bucket_sizes[bi], (rf_pace)pace);
              schedules++;
            }
            for (int step = 0; step < plan.forward_depth; step++) {
              chunks +=
                  check_schedule(&plan, RF_STAGE_FORWARD, step, bucket_sizes[bi], (rf_pace)pace);
              schedules++;
            }
          }
        }
        rf_plan_free(&plan);
        for (int pace = RF_PACE_PIECES; pace <= RF_PACE_ROWS; pace++)
          check_independent(models[mi], &layouts[li], (rf_plan_kind)kind, 65536, (rf_pace)pace);
      }
      rf_layout_free(&lay);
    }
    rf_model_free(&m);
  }
  /* The properties again for tiny with tensors of three dtypes. */
  rf_model m;
  ASSERT_OK(rf_model_load("tiny", &m));
  mix_dtypes(&m);
  for (size_t li = 0; li < RF_ARRAY_LEN(layouts); li++) {
    rf_layout lay;
    make_layout(&lay, &m, &layouts[li]);
    for (int kind = RF_PLAN_P2P; kind <= RF_PLAN_STAR; kind++) {
      rf_plan plan;
      ASSERT_OK(rf_plan_build(&plan, &lay, (rf_plan_kind)kind, NULL));
      for (size_t bi = 0; bi < RF_ARRAY_LEN(bucket_sizes); bi++)
        for (int pace = RF_PACE_PIECES; pace <= RF_PACE_ROWS; pace++)
          for (int stage = RF_STAGE_RESHAPE; stage <= RF_STAGE_TRANSFER; stage++) {
            chunks += check_schedule(&plan, (rf_stage)stage, -1, bucket_sizes[bi], (rf_pace)pace);
            schedules++;
          }
      rf_plan_free(&plan);
    }
    rf_layout_free(&lay);
  }
  rf_model_free(&m);
  printf("schedules checked: %d, chunks: %ld\n", schedules, chunks);
  /* Model, layout and bucket size: 3 * 5 * 5 less the 8 skipped; p2p, star and fanout two
   * stages each; fanout's forward steps: 1 (dp=2) and 2 (dp=4), 13 combinations each; then
   * tiny with three dtypes: 5 layouts, p2p and star, 5 bucket sizes, two stages each. Each of
   * them paced both ways. */
  ASSERT_EQ(schedules, 2 * ((3 * 5 * 5 - 2 * 4) * 3 * 2 + 13 * (1 + 2) + 5 * 2 * 5 * 2));
  return 0;
}
