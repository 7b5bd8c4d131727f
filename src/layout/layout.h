/* layout: where every element of every logical tensor lives, on the trainer (its mesh and
 * style) and on the rollout engine (vLLM tensor parallelism with fused qkv/gate_up tensors,
 * stacked FusedMoE expert tensors and, with ep, expert parallelism).
 *
 * Boxes are half-open rectangles in a tensor's logical (HF) coordinates; 1-D tensors use
 * dim 0 only, with dim 1 fixed to [0, 1). A rank that does not hold a tensor at all (another
 * pipeline stage's layer, another ep rank's expert) has an empty box.
 *
 * Trainer ranks are numbered ((((d*PP + s)*EP + x)*F + f)*T + t): tp fastest, then fsdp, then
 * expert parallelism, then pipeline stage, then trainer replica. The megatron style folds its
 * experts onto the other axes instead (Megatron's grid order tp, cp, ep, dp, pp): rank
 * ((s*D + d)*C + c)*T + t, and within a stage the i-th rank is ep rank i mod EP. Rollout ranks
 * are p*R + r (tp rank r of engine replica p); with rollout ep, expert e lives on rollout rank
 * e / (E/(R*P)). */
#ifndef RF_LAYOUT_H
#define RF_LAYOUT_H

#include <stdint.h>

#include "core/box.h"
#include "format/format.h"
#include "model/model.h"

/* The whole of a tensor as a box. */
rf_box rf_box_whole(const rf_tensor *t);

/* --trainer-style: how the trainer shards each tensor (JAX tunix, PyTorch FSDP2 with TP, or
 * Megatron-Core with parallel folding and expert tensor parallelism 1). */
#define RF_TRAINER_STYLE_LIST(X)                                                                   \
  X(RF_STYLE_TUNIX, "tunix")                                                                       \
  X(RF_STYLE_FSDP2, "fsdp2")                                                                       \
  X(RF_STYLE_MEGATRON, "megatron")
typedef enum { RF_TRAINER_STYLE_LIST(RF_ENUM_ID) RF_TRAINER_STYLE_COUNT } rf_trainer_style;
RF_ENUM_DECLARE(rf_trainer_style);

/* --trainer-order: jax stores some tensors transposed, as JAX does. */
#define RF_TRAINER_ORDER_LIST(X)                                                                   \
  X(RF_ORDER_HF, "hf")                                                                             \
  X(RF_ORDER_JAX, "jax")
typedef enum { RF_TRAINER_ORDER_LIST(RF_ENUM_ID) RF_TRAINER_ORDER_COUNT } rf_trainer_order;
RF_ENUM_DECLARE(rf_trainer_order);

/* --placement: trainer and rollout in separate processes, or sharing each process. */
#define RF_PLACEMENT_LIST(X)                                                                       \
  X(RF_PLACEMENT_DISAGGREGATED, "disaggregated")                                                   \
  X(RF_PLACEMENT_COLOCATED, "colocated")
typedef enum { RF_PLACEMENT_LIST(RF_ENUM_ID) RF_PLACEMENT_COUNT } rf_placement;
RF_ENUM_DECLARE(rf_placement);

typedef struct {
  int fsdp, tp, dp; /* the mesh is fsdp x tp, replicated dp times */
  int ep;           /* expert parallelism: each ep rank holds E/ep whole experts */
  int pp;           /* pipeline stages: contiguous runs of layers */
  int cp;           /* megatron's context parallelism: replicas of the tp shards, no split */
  rf_trainer_style style;
  rf_trainer_order order;
} rf_trainer_layout;

typedef struct {
  int tp, dp;             /* dp = engine replicas, each a vLLM TP group of tp ranks */
  int ep;                 /* 1 = vLLM's --enable-expert-parallel: experts over all tp*dp ranks */
  rf_rollout_dtype dtype; /* not part of the layout's text: --rollout-dtype sets it */
} rf_rollout_layout;

/* Parse "fsdp=4,tp=2[,dp=2][,ep=8][,pp=4][,cp=2]" and "tp=4[,dp=2][,ep]"; missing axes are 1 (ep on
 * the rollout is a bare word). Errors name the text. */
rf_status rf_trainer_layout_parse(const char *text, rf_trainer_layout *out);
rf_status rf_rollout_layout_parse(const char *text, rf_rollout_layout *out);
void rf_trainer_layout_format(const rf_trainer_layout *t, char *buf, int len);
/* The trainer's rank count: fsdp*tp*ep*pp*dp, or for the megatron style, whose experts fold
 * onto the other axes, tp*cp*dp*pp. */
int rf_trainer_layout_ranks(const rf_trainer_layout *t);
/* --system: reads an NCCL M2N reshard_model_bench system file (layout_system.c) and writes the
 * trainer layout it describes (for --trainer-style megatron) and the rollout layout as text.
 * Anything the file says that refit cannot express is one line naming the numbers, and
 * RF_ERR_USAGE. */
rf_status rf_layout_read_system(const char *path, char *trainer, int trainer_len, char *rollout,
                                int rollout_len);
/* The most ranks one side may have: the parsers refuse more, so rank counts fit an int. */
#define RF_LAYOUT_MAX_RANKS (1 << 20)
/* The world a job of these layouts needs: trainer plus rollout ranks, or the larger of the
 * two when colocated. */
int rf_layout_ranks_needed(const rf_trainer_layout *t, const rf_rollout_layout *r,
                           rf_placement placement);
/* RF_OK when `world_size` is what the layouts need, else one line ("world size is W but
 * trainer ... need N ranks; run mpirun -np N") and RF_ERR_WORLD. Cheap: the driver checks it
 * before planning, so a typo in a layout fails at once. */
rf_status rf_layout_check_world(const rf_trainer_layout *t, const rf_rollout_layout *r,
                                rf_placement placement, int world_size);
void rf_rollout_layout_format(const rf_rollout_layout *r, char *buf, int len);

/* One tensor of a rollout rank in vLLM's own naming (qkv_proj, gate_up_proj, experts.w13_weight,
 * ...). Every rollout rank has the same list with the same shapes. refit addresses it as a 2-D
 * array of `shape`; vLLM's FusedMoE tensors are 3-D ([experts, rows, cols], `vllm_shape`), which
 * is the same memory with the expert and row dimensions merged. */
typedef struct {
  char name[RF_NAME_MAX];
  int scale_of; /* a weight_scale_inv: the index of its weight's rollout tensor; else -1 */
  int ndim;
  int64_t shape[2];
  int vllm_ndim;
  int64_t vllm_shape[3];
  int64_t numel;
  rf_dtype dtype; /* its members' dtype, or fp8 for an fp8 rollout's linear weights */
  int64_t bytes;
} rf_rollout_tensor;

/* Where a logical tensor's held box lands in a rollout rank's fused tensor: element (i, j) of
 * the held box B goes to local (row + i - B.lo[0], col + j - B.lo[1]). The same on every rank. */
typedef struct {
  int local;        /* index into rf_layout.rollout_tensors */
  int64_t row, col; /* offset of the held box's origin */
} rf_rollout_slot;

/* How one dimension of a tensor is split over the trainer mesh: up to two mesh axes, outer
 * first, each with a granule (the head size when the axis splits whole heads). */
typedef enum { RF_AXIS_NONE = 0, RF_AXIS_FSDP, RF_AXIS_TP } rf_mesh_axis;
typedef struct {
  rf_mesh_axis axis[2];
  int64_t granule[2];
} rf_dim_split;

typedef struct {
  const rf_model *model;
  rf_trainer_layout trainer;
  rf_rollout_layout rollout;
  rf_placement placement;
  int trainer_ranks; /* F*T*EP*PP*D (megatron: T*C*D*PP) */
  int rollout_ranks; /* R*P */
  int world_size;    /* disaggregated: trainer + rollout; colocated: the larger */
  int64_t vocab_padded;

  int64_t expert_group; /* rollout ep: experts per rollout rank; 0 without ep */
  /* The order tensors are planned and stored in on the trainer: the model's, except that each
   * layer's routed experts come as vLLM stacks them (gate and up expert by expert, then the
   * downs), so a trainer rank's whole experts lie in the order of a rollout rank's w13_weight
   * and w2_weight, and runs of them can move as one block. `position` is its inverse. */
  int *order, *position;
  int *stage_first; /* [pp + 1]: the first layer of each pipeline stage */

  rf_dim_split (*trainer_split)[2]; /* [tensor][dim] */
  rf_rollout_slot *slots;           /* [tensor] */
  int rollout_tensor_count;
  rf_rollout_tensor *rollout_tensors;
  /* A format with a global scale (nvfp4): per logical tensor, the first tensor of the model
   * that shares its global (rf_layout_global_groups), -1 for tensors without one; else NULL. */
  int *global_leader;
} rf_layout;

/* Checks that both layouts divide every tensor of the model and precomputes the splits.
 * A layout that does not divide gives one line naming the tensor, the dimension, its size
 * and the mesh axis (e.g. "32 heads over trainer fsdp=3") and RF_ERR_LAYOUT. */
rf_status rf_layout_init(rf_layout *lay, const rf_model *model, const rf_trainer_layout *trainer,
                         const rf_rollout_layout *rollout, rf_placement placement);
void rf_layout_free(rf_layout *lay);

/* World ranks: disaggregated puts trainer ranks first, then rollout ranks; colocated gives
 * world rank i trainer rank i and rollout rank i where those exist. */
int rf_layout_trainer_world_rank(const rf_layout *lay, int trainer_rank);
int rf_layout_rollout_world_rank(const rf_layout *lay, int rollout_rank);
/* The roles of a world rank: its trainer and rollout rank, or -1. */
void rf_layout_roles(const rf_layout *lay, int world_rank, int *trainer_rank, int *rollout_rank);

/* The pipeline stage that holds a tensor: its layer's, 0 for the embeddings, the last for the
 * final norm and lm_head. Stage s holds layers [stage_first[s], stage_first[s+1]). */
int rf_layout_tensor_stage(const rf_layout *lay, int tensor);
/* The box of tensor `tensor` stored on a trainer rank (empty when its stage or ep rank does
 * not hold it). */
rf_box rf_layout_trainer_box(const rf_layout *lay, int tensor, int trainer_rank);
/* The trainer ranks that can hold a tensor, ascending: those of its pipeline stage and, for a
 * routed expert, of its ep rank; every other rank's box is empty. Writes them to `ranks` (room
 * for trainer_ranks / pp) unless it is NULL, and returns how many. The planner asks this rather
 * than every rank's box, which for an expert would cost all trainer ranks to find a few. */
int rf_layout_trainer_candidates(const rf_layout *lay, int tensor, int *ranks);
/* With --trainer-order jax, 2-D linear weights (and lm_head) are stored transposed, the way
 * the JAX trainer keeps them ([in, out]); embeddings and 1-D tensors keep HF order. */
int rf_layout_trainer_transposed(const rf_layout *lay, int tensor);

/* The box of a tensor held by a rollout rank (empty for vocab ranges that fall wholly into
 * vLLM's padding, and with rollout ep for the experts of other ranks). */
rf_box rf_layout_rollout_box(const rf_layout *lay, int tensor, int rollout_rank);
/* The rollout dimension that TP splits (0 for column-parallel, 1 for row-parallel), or -1
 * (replicated, or a whole expert on one rank under rollout ep). */
int rf_layout_rollout_split_dim(const rf_layout *lay, int tensor);
/* ---- FP8 rollouts (layout_fp8.c) -----------------------------------------------------------
 *
 * With --rollout-dtype fp8 every linear weight of the rollout is float8_e4m3fn with an fp32
 * weight_scale_inv of one element per 128x128 block, as vLLM's block-FP8 layers hold them;
 * embeddings, lm_head, norms, biases and routers keep the trainer's dtype. */
#define RF_FP8_BLOCK_EDGE 128
/* The format the rollout's linear weights take (format.h), or NULL for the trainer's dtype. */
const rf_format *rf_layout_format(const rf_layout *lay);
/* Whether the rollout receives logical tensor `tensor` quantized to fp8. */
int rf_layout_fp8(const rf_layout *lay, int tensor);
/* Bytes per element of logical tensor `tensor` in the rollout's tensors: 1 where the rollout
 * receives it quantized (for 4-bit elements: a byte of the byte tensor that packs them,
 * rf_layout_rollout_bytes), else its own dtype's. */
int rf_layout_rollout_esize(const rf_layout *lay, int tensor);
/* The 128x128 blocks of the HF tensor's grid that a box touches (fp8's grid). */
int64_t rf_layout_fp8_blocks(const rf_box *box);
/* The blocks of format f's grid that a box touches. */
int64_t rf_format_box_blocks(const rf_format *f, const rf_box *box);
/* Whether every edge of a box lies on the HF tensor's block grid of the rollout's format (a
 * multiple of the block's edge, or the tensor's end), so that it holds whole blocks only. */
int rf_layout_fp8_aligned(const rf_layout *lay, int tensor, const rf_box *box);

/* The bytes of a box of logical tensor `tensor` in the rollout, as a box of a byte tensor: the
 * box itself, or for a tensor the rollout receives in 4-bit elements its columns halved
 * (rf_format_byte_box). A packed rollout tensor is a byte tensor [rows, cols/2] (u8, as vLLM
 * holds NVFP4 and MXFP4 weights), and a member's column offset in it halves the same way. */
rf_box rf_layout_rollout_bytes(const rf_layout *lay, int tensor, const rf_box *box);
/* The same for the trainer's shards: a trainer that holds a quantized checkpoint's weight
 * (rf_tensor_quantized) holds its bytes, packed for 4-bit elements as the rollout's are, so a
 * box of it is the byte box; any other tensor's box is itself. */
rf_box rf_layout_trainer_bytes(const rf_layout *lay, int tensor, const rf_box *box);
/* The global-scale groups of a format with a global scale (nvfp4): every linear weight of m
 * gets in leader[t] the first tensor of m whose rollout tensor, and for a routed expert whose
 * expert, it shares (q, k and v share qkv_proj's; gate and up gate_up_proj's; an expert's gate
 * and up its row of w13_weight's; an expert's down its own), as vLLM keeps one weight_scale_2
 * per parameter and ModelOpt's export gives fused members one; -1 for the other tensors. The
 * checkpoint writer and the rollout group alike. */
rf_status rf_layout_global_groups(const rf_model *m, int *leader);

/* Whether a rollout rank's copy of the tensor serves every engine replica (an expert under
 * rollout ep lives on one rank of the whole rollout group) rather than its own replica only. */
int rf_layout_rollout_shared(const rf_layout *lay, int tensor);
/* The one rollout rank that holds a shared tensor, or -1 for a tensor that is not shared: the
 * planner asks it rather than every rollout rank's box. */
int rf_layout_rollout_owner(const rf_layout *lay, int tensor);

#endif
