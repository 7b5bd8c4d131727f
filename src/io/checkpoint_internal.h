/* Shared between the checkpoint formats: the open checkpoint, the helpers that phrase the
 * one-line errors the same way for safetensors and HDF5, and the pieces of the streaming
 * writer. Nothing here is public; io.h is the interface. */
#ifndef RF_CHECKPOINT_INTERNAL_H
#define RF_CHECKPOINT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "io/io.h"
#include "verify/verify.h"

/* Reads, checksums and writes move at most this many bytes of rows at a time, so a rank
 * never holds more than one such batch of a tensor beyond its own shard. */
#define CK_BATCH_BYTES ((int64_t)64 << 20)

/* Paths, with room for a shard's name or ".partial" after a directory. */
#define CK_PATH_MAX 4096

/* One open safetensors file: the header is parsed at open and only offsets are kept. */
typedef struct {
  char *path;
  int fd;
  int64_t size;       /* bytes, at open */
  int64_t data_start; /* 8 + header length: where data_offsets count from */
} ck_file;

struct rf_checkpoint {
  char *path;            /* as given, without trailing slashes */
  const rf_model *model; /* borrowed: it must outlive the checkpoint; each tensor is read,
                            checked and checksummed in its own dtype */
  int hdf5;

  /* safetensors: every file opened once, and where each model tensor starts. */
  int file_count;
  ck_file *files;
  int *tensor_file;                 /* [tensor] index into files */
  int64_t *tensor_offset;           /* [tensor] absolute byte offset of element 0 */
  unsigned char *tensor_transposed; /* [tensor] stored [in, out] in a stacked entry */

  /* HDF5: the file, and each tensor's dataset and its file type (hid_t values; the type is
   * also the memory type of every read, so HDF5 copies the bits without converting). */
  int64_t h5_file;
  int64_t *h5_dset, *h5_type; /* [tensor] */

  /* Rows read for a strided destination land here before they are placed. */
  void *scratch;
  size_t scratch_cap;

  /* A quantized checkpoint read as trainer weights (rf_checkpoint_open_quantized): `model` is
   * its view in `format`, owned here, and view_of[t] the view tensor of the run's model tensor
   * t (its scales follow it, then its global). NULL for every other checkpoint, whose model is
   * the run's. */
  const rf_format *format;
  rf_model *view;
  int *view_of;
  const rf_model *run_model; /* borrowed, like model */

  rf_checksum_scheme checksum; /* the terms rf_checkpoint_checksum sums */
  rf_checkpoint_use use;       /* whose advice the errors give */
};

/* Reads `box` of tensor `tensor` of c->model (the view, for a block-FP8 checkpoint). */
rf_status ck_read(rf_checkpoint *c, int tensor, const rf_box *box, const rf_region *dst);

/* ---- the formats --------------------------------------------------------------------------
 * open fills c (whose path and model are set) and logs one line on failure;
 * close releases what open acquired, also after a failed open. read_rows reads `box` of a
 * tensor into `out` in row-major order. */
rf_status ck_st_open_file(rf_checkpoint *c, const char *path);
rf_status ck_st_open_dir(rf_checkpoint *c, const char *dir);
rf_status ck_st_read_rows(rf_checkpoint *c, int tensor, const rf_box *box, void *out);
void ck_st_close(rf_checkpoint *c);
/* The dtype tag of tensor `name` in the safetensors checkpoint at `path` (a file, or a directory
 * and the shard its index names), read from that file's header alone with the checks of an
 * open; "" when it cannot be read, which the ordinary open then describes. */
void ck_st_dtype_tag(const char *path, const char *name, char *tag, size_t len);
/* in checkpoint_safetensors_write.c */
rf_status ck_st_write(const char *path, const rf_model *model, uint64_t seed,
                      const rf_weight_version *version, int64_t shard_size);

rf_status ck_h5_open(rf_checkpoint *c, const char *path);
rf_status ck_h5_read_rows(rf_checkpoint *c, int tensor, const rf_box *box, void *out);
void ck_h5_close(rf_checkpoint *c);
rf_status ck_h5_write(const char *path, const rf_model *model, uint64_t seed,
                      const rf_weight_version *version);

/* ---- checks and their messages ------------------------------------------------------------ */

/* The safetensors dtype names ("BF16", "F16", "F32"), also used for HDF5 in messages. */
const char *ck_dtype_tag(rf_dtype dt);
/* Parses a safetensors dtype name; returns 0 for names refit does not read. */
int ck_dtype_from_tag(const char *tag, rf_dtype *out);

/* Whether a shape read from a file is the tensor's ([n] for 1-D tensors). */
int ck_shape_matches(const rf_tensor *t, int ndim, const int64_t *shape);

/* "checkpoint 'F': tensor X has shape [a, b], the model needs [c, d]" */
rf_status ck_fail_shape(const char *file, const rf_tensor *t, int ndim, const int64_t *shape);
/* "checkpoint 'F': tensor X is F32, the model needs BF16 (use --dtype fp32 or another
 * checkpoint)", where the model needs tensor t's own dtype (a tensor with a dtype of its own
 * is not told to use --dtype, which does not change it); `got` names what the file holds,
 * `readable` whether refit reads that type. The advice is that of c->use's command; a linear
 * weight that is F8_E4M3 where the first was not (or the reverse) is named as a mixed file.
 * The formats check tensors in the model's order, so every tensor before t has passed. */
rf_status ck_fail_dtype(const rf_checkpoint *c, const char *file, const rf_tensor *t,
                        const char *got, int readable);

/* The number of rows of a tensor that one batch of `width` columns holds. */
int64_t ck_batch_rows(const rf_tensor *t, int64_t width, int esize);

/* ---- plain file input and output ---------------------------------------------------------- */

/* pread of exactly n bytes; a file that ends early is a truncated checkpoint. */
rf_status ck_pread(int fd, void *buf, size_t n, int64_t offset, const char *file,
                   const rf_tensor *t);
rf_status ck_write_all(int fd, const void *buf, size_t n, const char *file);

/* Files are written under a temporary name beside `path` and renamed into place when
 * complete, so an interrupted write never leaves a file that looks like a whole checkpoint.
 * The name, "<path>.partial-XXXXXX", is made by mkstemp: created exclusively and never
 * guessable, so a symlink planted beside the target cannot redirect the write. ck_create fills
 * tmp (CK_TEMP_MAX bytes); ck_commit renames it to path; ck_abandon removes it. */
#define CK_TEMP_MAX (CK_PATH_MAX + 32)
rf_status ck_create(const char *path, char *tmp, int *fd);
rf_status ck_commit(const char *path, const char *tmp);
void ck_abandon(const char *tmp);

/* Streams a tensor's generator values in its own dtype, row batch by row batch, through `emit`:
 * those of `version` (verify/versions.h; NULL: version 0). */
typedef rf_status (*ck_emit_fn)(void *ctx, const rf_tensor *t, int64_t row0, int64_t row1,
                                const void *data, size_t bytes);
rf_status ck_generate(const rf_tensor *t, uint64_t seed, const rf_weight_version *version,
                      ck_emit_fn emit, void *ctx);
/* The same in the order the file stores it: a member of a stacked entry that is stored
 * transposed (rf_model_stack) is streamed column batch by column batch, each column of the
 * logical tensor one row of the file (row0, row1 then count columns). */
rf_status ck_generate_stored(const rf_model *m, const rf_tensor *t, uint64_t seed,
                             const rf_weight_version *version, ck_emit_fn emit, void *ctx);

/* ---- stacked entries (rf_model_stack) ----------------------------------------------------- */

/* The name, shape and bytes under which tensor t is stored: its own, or its stacked entry's
 * (which only member 0 declares: *declares is 0 for the other members). */
typedef struct {
  const char *name;
  int ndim;
  int64_t shape[4];
  int64_t bytes;
  int declares;
  int64_t member; /* its place in the entry, 0 for a tensor of its own */
  int transposed;
  rf_stack stack; /* holds the entry's name */
} ck_entry;
void ck_entry_of(const rf_model *m, const rf_tensor *t, ck_entry *out);
/* RF_OK when the members of every stacked entry among tensors [first, last) follow each other
 * from member 0, as the writers lay them out; else an internal error naming the tensor. */
rf_status ck_check_stacks(const rf_model *m, int first, int last);
/* "checkpoint 'F': tensor X has shape [a, b, c], the model needs [d, e, f]" for an entry. */
rf_status ck_fail_entry_shape(const char *file, const ck_entry *e, int ndim, const int64_t *shape);

/* Streams tensor i of the model being written through `emit`; `gen` is the generator's own
 * state. ck_st_write_file writes one safetensors file of every tensor of `m` with it (the
 * block-FP8 checkpoint, checkpoint_fp8.c). */
typedef rf_status (*ck_gen_fn)(void *gen, const rf_model *m, int i, uint64_t seed, ck_emit_fn emit,
                               void *ctx);
rf_status ck_st_write_file(const char *path, const rf_model *m, uint64_t seed, ck_gen_fn generate,
                           void *gen);

/* The tensors of a quantized checkpoint of `m` in format f (checkpoint_format.c), which the
 * writer streams and the readers open (checkpoint_fp8.c): each weight that f quantizes
 * (rf_model_quantizes) P.weight becomes P + weight_suffix, followed by its scales and, for a
 * format with one, its global scale; every other tensor is as in `m`. Allocates view->tensors
 * and the map's arrays (the caller frees them: free and ck_view_map_free). */
enum { CK_ROLE_PLAIN, CK_ROLE_WEIGHT, CK_ROLE_SCALE, CK_ROLE_GLOBAL };
/* Per view tensor i: source[i] and role[i] as above; for a weight, scale[i] and global[i] the
 * view tensors of its scales and global (-1 where none). They follow the weight, except for the
 * members of a stacked entry (gpt-oss's experts), whose parts are entries of their own: the view
 * lists every member's weight, then every member's scales (and globals), each entry's members
 * one after another. */
typedef struct {
  int *source, *role, *scale, *global;
} ck_view_map;
rf_status ck_format_view(const rf_model *m, const rf_format *f, rf_model *view, ck_view_map *map);
void ck_view_map_free(ck_view_map *map);

/* rf_checkpoint_checksum of the checkpoint's tensor `tensor`, its terms under tensor t's id
 * (t has the same shape and dtype): a view of a model (checkpoint_fp8.c) numbers its tensors
 * apart from the model whose checksums it computes. */
rf_status ck_checksum_as(rf_checkpoint *c, int tensor, const rf_tensor *t, uint64_t *out);
/* rf_checkpoint_checksum of run tensor t of a quantized checkpoint opened for reading. */
rf_status ck_fp8_checksum(rf_checkpoint *c, int t, uint64_t *out);

/* Greedy packing of tensors, in order, into shards of at most shard_size bytes (a larger
 * tensor gets a shard of its own). Fills shard_of[tensor] and returns the shard count. */
int ck_shard_plan(const rf_model *model, int64_t shard_size, int *shard_of);

#endif
