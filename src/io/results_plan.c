/* The run's `plan` group: the plan's totals, fanout's forward stage and an fp8 rollout's wire
 * bytes (results/README.md is the schema). */
#include <stdio.h>

#include "results_internal.h"

static rf_status write_bytes_per_rank(hid_t plan, const char *name, const int64_t *bytes, int count,
                                      const char *description) {
  hsize_t dims[1] = {(hsize_t)(bytes ? RF_MAX(count, 0) : 0)};
  RF_TRY(rf_results_dataset(plan, name, H5T_NATIVE_INT64, 1, dims, bytes));
  RF_TRY(rf_results_attr_str(plan, name, "units", "bytes"));
  return rf_results_attr_str(plan, name, "description", description);
}

static rf_status write_forward(hid_t plan, const rf_results_run *run) {
  RF_TRY(rf_results_attr_i64(plan, ".", "forward_bytes", run->forward_bytes));
  RF_TRY(rf_results_attr_i64(plan, ".", "forward_depth", run->forward_depth));
  RF_TRY(write_bytes_per_rank(plan, "forward_send_bytes", run->forward_send_bytes,
                              run->rollout_ranks,
                              "bytes each rollout rank forwards to other replicas per iteration"));
  return write_bytes_per_rank(plan, "forward_recv_bytes", run->forward_recv_bytes,
                              run->rollout_ranks,
                              "bytes each rollout rank receives from other replicas per iteration");
}

/* An fp8 rollout's wire bytes and where it was quantized (plan_fp8.c). */
static rf_status write_wire(hid_t plan, const rf_results_run *run) {
  RF_TRY(rf_results_attr_i64(plan, ".", "wire_transfer_bytes", run->wire_transfer_bytes));
  if (run->forward_send_bytes)
    RF_TRY(rf_results_attr_i64(plan, ".", "wire_forward_bytes", run->wire_forward_bytes));
  RF_TRY(rf_results_attr_i64(plan, ".", "source_quantized_tensors", run->source_quantized_tensors));
  RF_TRY(rf_results_attr_i64(plan, ".", "destination_quantized_tensors",
                             run->destination_quantized_tensors));
  RF_TRY(write_bytes_per_rank(plan, "wire_send_bytes", run->wire_send_bytes, run->trainer_ranks,
                              "bytes on the wire from each trainer rank per iteration: fp8 and "
                              "scales where it quantizes, else the trainer's dtype"));
  return write_bytes_per_rank(plan, "wire_recv_bytes", run->wire_recv_bytes, run->rollout_ranks,
                              "bytes on the wire to each rollout rank from the trainer per "
                              "iteration");
}

rf_status rf_results_write_plan(hid_t g, const rf_results_run *run) {
  rf_status st = RF_OK;
  hid_t plan = H5I_INVALID_HID;
  RF_H5_GOTO(plan = H5Gcreate2(g, "plan", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), done);
  RF_TRY_GOTO(rf_results_attr_i64(plan, ".", "pieces", run->pieces), done);
  RF_TRY_GOTO(rf_results_attr_i64(plan, ".", "messages", run->messages), done);
  RF_TRY_GOTO(rf_results_attr_i64(plan, ".", "transfer_bytes", run->transfer_bytes), done);
  RF_TRY_GOTO(rf_results_attr_i64(plan, ".", "reshape_bytes", run->reshape_bytes), done);
  /* Fanout's forward stage and fp8's wire add their totals; the other plans' groups stay as
   * they were. */
  int forward = run->forward_send_bytes != NULL, wire = run->wire_send_bytes != NULL;
  char units[512];
  snprintf(units, sizeof units,
           "{\"pieces\": \"count\", \"messages\": \"count per iteration, all ranks\", "
           "\"transfer_bytes\": \"bytes\", \"reshape_bytes\": \"bytes\"%s%s%s}",
           forward ? ", \"forward_bytes\": \"bytes\", \"forward_depth\": \"steps\"" : "",
           wire ? ", \"wire_transfer_bytes\": \"bytes\", \"source_quantized_tensors\": "
                  "\"count\", \"destination_quantized_tensors\": \"count\""
                : "",
           wire && forward ? ", \"wire_forward_bytes\": \"bytes\"" : "");
  RF_TRY_GOTO(rf_results_attr_str(plan, ".", "units", units), done);
  RF_TRY_GOTO(write_bytes_per_rank(plan, "send_bytes", run->send_bytes, run->trainer_ranks,
                                   "bytes each trainer rank sends per iteration"),
              done);
  RF_TRY_GOTO(write_bytes_per_rank(plan, "recv_bytes", run->recv_bytes, run->rollout_ranks,
                                   forward ? "bytes each rollout rank receives from the trainer "
                                             "per iteration"
                                           : "bytes each rollout rank receives per iteration"),
              done);
  if (forward)
    st = write_forward(plan, run);
  if (st == RF_OK && wire)
    st = write_wire(plan, run);
done:
  if (plan >= 0)
    H5Gclose(plan);
  return st;
}
