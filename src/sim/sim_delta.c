/* Delta refits in the simulation (docs/architecture.md, "Delta refits"): what each encoding
 * makes of a piece, which one a --delta choice takes, and the least any of them could make of a
 * byte, for the lower bound. The sizes are the encodings' own (src/delta's wire format): a
 * fixed header, then dense the new bytes, sparse an int32 offset and the new value per changed
 * element, bitmask a bit per element and the changed values. */
#include <math.h>

#include "delta/delta.h"
#include "sim_internal.h"

RF_ENUM_DEFINE(rf_sim_encoding, "encoding", RF_SIM_ENCODING_LIST, RF_SIM_ENCODING_COUNT)

/* The engine's sizes (rf_delta_size), which are linear in the changed count: the size with
 * none changed plus c times what each changed element adds, so an expected count may be
 * fractional. */
double rf_sim_encoded_bytes(rf_sim_encoding enc, int64_t n, double c, int64_t e) {
  rf_delta_encoding d = enc == RF_SIM_ENCODING_SPARSE  ? RF_DELTA_SPARSE
                        : enc == RF_SIM_ENCODING_DENSE ? RF_DELTA_DENSE
                                                       : RF_DELTA_BITMASK;
  double none = (double)rf_delta_size(d, n, 0, (int)e);
  return none + c * (double)(rf_delta_size(d, n, 1, (int)e) - rf_delta_size(d, n, 0, (int)e));
}

/* Whether a --delta choice may send a piece in encoding `enc` (dense aside). */
static int allows(rf_delta_choice delta, rf_sim_encoding enc) {
  return delta == RF_DELTA_CHOICE_AUTO ||
         (delta == RF_DELTA_CHOICE_SPARSE && enc == RF_SIM_ENCODING_SPARSE) ||
         (delta == RF_DELTA_CHOICE_BITMASK && enc == RF_SIM_ENCODING_BITMASK);
}

rf_sim_encoding rf_sim_delta_encoding(rf_delta_choice delta, int64_t n, double c, int64_t e) {
  if (delta == RF_DELTA_CHOICE_SPARSE)
    return RF_SIM_ENCODING_SPARSE;
  if (delta == RF_DELTA_CHOICE_BITMASK)
    return RF_SIM_ENCODING_BITMASK;
  if (delta != RF_DELTA_CHOICE_AUTO)
    return RF_SIM_ENCODING_DENSE;
  /* The list's order is the order of preference on a tie: only a strictly smaller size wins. */
  rf_sim_encoding best = RF_SIM_ENCODING_DENSE;
  for (int k = 1; k < RF_SIM_ENCODING_COUNT; k++)
    if (rf_sim_encoded_bytes((rf_sim_encoding)k, n, c, e) < rf_sim_encoded_bytes(best, n, c, e))
      best = (rf_sim_encoding)k;
  return best;
}

rf_status rf_sim_delta_model_init(rf_delta_choice delta, double changed, rf_sim_delta_model *out) {
  *out = (rf_sim_delta_model){RF_DELTA_CHOICE_OFF, 0.0};
  if (!(changed >= 0.0 && changed <= 1.0))
    return rf_fail(RF_ERR_USAGE,
                   "a changed fraction of %g cannot be simulated; give a fraction from 0 to 1 "
                   "(--update sparse:F)",
                   changed);
  *out = (rf_sim_delta_model){delta, changed};
  return RF_OK;
}

int sim_delta_on(const rf_sim_delta_model *d) { return d && d->choice != RF_DELTA_CHOICE_OFF; }

sim_delta_chunk sim_delta_encode(const rf_sim_delta_model *d, int64_t elements, int64_t esize,
                                 int64_t bytes) {
  /* A chunk in its elements' own bytes is n elements of e; any other (a format's bytes and
   * scales, 4-bit elements packed two a byte) is its bytes, which is how the encodings see a
   * format's data. */
  int64_t n = elements, e = esize;
  if (!(n > 0 && bytes == n * e))
    n = bytes, e = 1;
  double c = d->changed * (double)n;
  sim_delta_chunk k;
  k.encoding = rf_sim_delta_encoding(d->choice, n, c, e);
  /* The expected size, to the byte: the header keeps it above the least the bound allows. */
  k.wire = llround(rf_sim_encoded_bytes(k.encoding, n, c, e));
  k.read = 2 * bytes;
  k.applied = k.wire + llround(c * (double)e);
  return k;
}

double sim_delta_least(const rf_sim_delta_model *d, int64_t e) {
  double f = d->changed, per[RF_SIM_ENCODING_COUNT] = {
                             [RF_SIM_ENCODING_DENSE] = (double)e,
                             [RF_SIM_ENCODING_BITMASK] = 0.125 + f * (double)e,
                             [RF_SIM_ENCODING_SPARSE] = f * (double)(4 + e),
                         };
  /* Dense is always among them: star's reshape and local copies move whole bytes, and a
   * forced bitmask of a piece that changed throughout is larger than the piece. */
  double least = per[RF_SIM_ENCODING_DENSE];
  for (int k = 1; k < RF_SIM_ENCODING_COUNT; k++)
    if (allows(d->choice, (rf_sim_encoding)k))
      least = fmin(least, per[k]);
  return least / (double)e;
}
