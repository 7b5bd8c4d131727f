/* The placement datasets of a run: where each rank ran (host, GPU, bus id, cores, NUMA node,
 * NIC) and the plan's links with their distance classes, written beside the run's other
 * datasets by results_write.c. results/README.md is the schema. */
#include <stdio.h>
#include <stdlib.h>

#include "results_internal.h"

typedef struct {
  char host[64];
  int64_t pid;
  int32_t rank, trainer_rank, rollout_rank, gpu, numa;
  char bus_id[16], cpus[256], nic[32];
} placement_row;

rf_status rf_results_write_placement(hid_t g, const rf_results_run *run) {
  int n = run->rank_table ? RF_MAX(run->ranks, 0) : 0;
  placement_row *rows = rf_calloc((size_t)n + 1, sizeof *rows, "the placement table");
  if (!rows)
    return RF_ERR_NOMEM;
  for (int i = 0; i < n; i++) {
    const rf_rank_info *p = &run->rank_table[i];
    rows[i] = (placement_row){.pid = p->pid,
                              .rank = p->rank,
                              .trainer_rank = p->trainer_rank,
                              .rollout_rank = p->rollout_rank,
                              .gpu = p->gpu,
                              .numa = p->numa};
    snprintf(rows[i].host, sizeof rows[i].host, "%s", p->host);
    snprintf(rows[i].bus_id, sizeof rows[i].bus_id, "%s", p->bus_id[0] ? p->bus_id : "-");
    snprintf(rows[i].cpus, sizeof rows[i].cpus, "%s", p->cpus[0] ? p->cpus : "-");
    snprintf(rows[i].nic, sizeof rows[i].nic, "%s", p->nic[0] ? p->nic : "-");
  }
  rf_status st = RF_OK;
  hid_t type = H5I_INVALID_HID;
  hsize_t dims[1] = {(hsize_t)n};
  const rf_results_field fields[] = {
      RF_FIELD("rank", placement_row, rank, H5T_NATIVE_INT32),
      RF_FIELD_STR("host", placement_row, host),
      RF_FIELD("pid", placement_row, pid, H5T_NATIVE_INT64),
      RF_FIELD("trainer_rank", placement_row, trainer_rank, H5T_NATIVE_INT32),
      RF_FIELD("rollout_rank", placement_row, rollout_rank, H5T_NATIVE_INT32),
      RF_FIELD("gpu", placement_row, gpu, H5T_NATIVE_INT32),
      RF_FIELD_STR("bus_id", placement_row, bus_id),
      RF_FIELD_STR("cpus", placement_row, cpus),
      RF_FIELD("numa", placement_row, numa, H5T_NATIVE_INT32),
      RF_FIELD_STR("nic", placement_row, nic),
  };
  RF_TRY_GOTO(rf_results_compound(sizeof(placement_row), fields, (int)RF_ARRAY_LEN(fields), &type),
              done);
  RF_TRY_GOTO(rf_results_dataset(g, "placement", type, 1, dims, rows), done);
  RF_TRY_GOTO(rf_results_attr_str(g, "placement", "description",
                                  "one row per world rank; trainer_rank and rollout_rank are "
                                  "-1 where the rank has no such role; gpu and numa are -1 and "
                                  "bus_id, cpus and nic are \"-\" where there is none (cpus "
                                  "\"-\": not bound)"),
              done);
done:
  if (type >= 0)
    H5Tclose(type);
  free(rows);
  return st;
}

/* The plan's links with their distance classes, so a run can be compared with its topology. */
rf_status rf_results_write_links(hid_t g, const rf_results_run *run) {
  rf_status st = RF_OK;
  hid_t type = H5I_INVALID_HID;
  hsize_t dims[1] = {(hsize_t)(run->links ? RF_MAX(run->link_count, 0) : 0)};
  const rf_results_field fields[] = {
      RF_FIELD("src", rf_link_info, src, H5T_NATIVE_INT32),
      RF_FIELD("dst", rf_link_info, dst, H5T_NATIVE_INT32),
      RF_FIELD("bytes", rf_link_info, bytes, H5T_NATIVE_INT64),
      RF_FIELD_STR("distance", rf_link_info, name),
  };
  RF_TRY_GOTO(rf_results_compound(sizeof(rf_link_info), fields, (int)RF_ARRAY_LEN(fields), &type),
              done);
  RF_TRY_GOTO(rf_results_dataset(g, "links", type, 1, dims, run->links), done);
  RF_TRY_GOTO(rf_results_attr_str(g, "links", "units", "{\"bytes\": \"bytes per iteration\"}"),
              done);
  RF_TRY_GOTO(rf_results_attr_str(g, "links", "description",
                                  "one row per planned trainer->rollout link between world "
                                  "ranks src and dst; distance is its class, nearest first: "
                                  "process, gpu, switch, numa, node, network"),
              done);
done:
  if (type >= 0)
    H5Tclose(type);
  return st;
}
