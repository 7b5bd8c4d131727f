/* A run's weight versions and delta refit in its group (results/README.md is the schema): the
 * update rule and the changed fraction of the last version moved, and under --delta the encoded
 * bytes on the wire, the pieces per encoding and the `delta_kinds` table, the pieces of each
 * tensor kind per encoding. */
#include <stdio.h>
#include <string.h>

#include "results_internal.h"

static rf_status write_kinds(hid_t g, const rf_run_result *res) {
  rf_status st = RF_OK;
  hid_t type = H5I_INVALID_HID;
  const rf_results_field fields[] = {
      RF_FIELD_STR("kind", rf_delta_kind, kind),
      RF_FIELD("dense_pieces", rf_delta_kind, pieces[0], H5T_NATIVE_INT64),
      RF_FIELD("sparse_pieces", rf_delta_kind, pieces[1], H5T_NATIVE_INT64),
      RF_FIELD("bitmask_pieces", rf_delta_kind, pieces[2], H5T_NATIVE_INT64),
      RF_FIELD("elements", rf_delta_kind, elements, H5T_NATIVE_INT64),
      RF_FIELD("changed", rf_delta_kind, changed, H5T_NATIVE_INT64),
      RF_FIELD("wire_bytes", rf_delta_kind, wire_bytes, H5T_NATIVE_INT64),
  };
  hsize_t dims[1] = {(hsize_t)res->delta_kind_count};
  RF_TRY_GOTO(rf_results_compound(sizeof(rf_delta_kind), fields, (int)RF_ARRAY_LEN(fields), &type),
              done);
  RF_TRY_GOTO(rf_results_dataset(g, "delta_kinds", type, 1, dims, res->delta_kinds), done);
  RF_TRY_GOTO(rf_results_attr_str(g, "delta_kinds", "description",
                                  "the last iteration's pieces by tensor kind: how many each "
                                  "trainer rank sent in each encoding, their elements and "
                                  "changed elements, and the encoded bytes of those that "
                                  "crossed to another rank, summed over the ranks"),
              done);
  RF_TRY_GOTO(rf_results_attr_str(g, "delta_kinds", "units_wire_bytes", "bytes"), done);
done:
  if (type >= 0)
    H5Tclose(type);
  return st;
}

rf_status rf_results_write_versions(hid_t g, const rf_results_run *run) {
  const rf_run_result *res = run->result;
  if (run->update) {
    RF_TRY(rf_results_attr_str(g, ".", "update", run->update));
    RF_TRY(rf_results_attr_i64(g, ".", "update_version", res->version));
  }
  if (res->delta[0] && strcmp(res->delta, "off") != 0) {
    RF_TRY(rf_results_attr_str(g, ".", "delta", res->delta));
    RF_TRY(rf_results_attr_i64(g, ".", "wire_delta_bytes", res->wire_delta_bytes));
    RF_TRY(rf_results_attr_i64(g, ".", "wire_delta_forward_bytes", res->wire_delta_forward_bytes));
    RF_TRY(rf_results_attr_i64(g, ".", "delta_kept_bytes", res->delta_kept_bytes));
    RF_TRY(rf_results_attr_i64(g, ".", "delta_dense_pieces", res->delta_pieces[0]));
    RF_TRY(rf_results_attr_i64(g, ".", "delta_sparse_pieces", res->delta_pieces[1]));
    RF_TRY(rf_results_attr_i64(g, ".", "delta_bitmask_pieces", res->delta_pieces[2]));
    RF_TRY(rf_results_attr_i64(g, ".", "delta_stale_dense_pieces", res->delta_stale_pieces));
    RF_TRY(rf_results_attr_i64(g, ".", "delta_marked_pieces", res->delta_marked_pieces));
    RF_TRY(rf_results_attr_i64(g, ".", "delta_marks_bytes", res->delta_marks_bytes));
    if (res->delta_kind_count > 0)
      RF_TRY(write_kinds(g, res));
  }
  if (run->update && res->version_elements > 0) {
    RF_TRY(rf_results_attr_i64(g, ".", "update_changed_elements", res->version_changed));
    RF_TRY(rf_results_attr_i64(g, ".", "update_elements", res->version_elements));
    RF_TRY(rf_results_attr_f64(g, ".", "changed_fraction",
                               (double)res->version_changed / (double)res->version_elements));
    RF_TRY(rf_results_attr_f64(g, ".", "update_s", res->update_s));
  }
  return RF_OK;
}
