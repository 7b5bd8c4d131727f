/* What the fuzz targets share: a private temporary directory for the files they hand to the
 * readers (every reader takes a path), a reader of fuzz input bytes as choices for the
 * structure-aware targets, and a small fixed model that the checkpoint targets check against.
 *
 * Each fuzz_<reader>.c defines LLVMFuzzerTestOneInput. Under -DREFIT_FUZZ=ON it links
 * libFuzzer; in every other build it links replay.c, whose main runs it once per file, so the
 * seed corpora and the regression inputs are replayed by ctest (label fuzz). */
#ifndef RF_FUZZ_H
#define RF_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Sends refit's one-line errors into a buffer instead of stderr: they are still formatted, so
 * a message that reads past a string the file supplied is caught, but a long run stays
 * readable. */
void fuzz_quiet(void);

/* The process's own directory under $TMPDIR (created on first use, removed at exit). Aborts
 * when it cannot be made: a fuzz target without its files would report nothing useful. */
const char *fuzz_dir(void);

/* Writes `size` bytes to fuzz_dir()/name and returns the full path (static storage, valid until
 * the next call). */
const char *fuzz_write(const char *name, const void *data, size_t size);

/* The micro model (llama, 1 layer, hidden 8, 12 tensors): its config.json is written to
 * fuzz_dir() and loaded once. */
const rf_model *fuzz_model(void);

/* Opens `path` as a checkpoint of the micro model and, when it opens, reads what a run and
 * `refit verify` read: every tensor's checksum, and of each tensor a box of its last row and
 * its last columns, into a row-major and into a transposed destination. */
void fuzz_use_checkpoint(const char *path);

/* Fuzz input read as a stream of choices; reads past the end give zeros, so every input
 * decodes to some file. */
typedef struct {
  const uint8_t *data;
  size_t size, at;
} fuzz_input;

uint8_t fuzz_byte(fuzz_input *in);
/* A value in [0, n) (n >= 1). */
unsigned fuzz_pick(fuzz_input *in, unsigned n);
uint64_t fuzz_u64(fuzz_input *in);
/* A string of at most len - 1 bytes: a length byte, then the bytes (NUL-terminated). */
void fuzz_string(fuzz_input *in, char *buf, size_t len);

#endif
