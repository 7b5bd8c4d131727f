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
  hid_t host = H5I_INVALID_HID, type = H5I_INVALID_HID, bus = H5I_INVALID_HID;
  hid_t cpus = H5I_INVALID_HID, nic = H5I_INVALID_HID;
  hsize_t dims[1] = {(hsize_t)n};
  RF_H5_GOTO(host = rf_results_fixed_string(sizeof rows[0].host), done);
  RF_H5_GOTO(bus = rf_results_fixed_string(sizeof rows[0].bus_id), done);
  RF_H5_GOTO(cpus = rf_results_fixed_string(sizeof rows[0].cpus), done);
  RF_H5_GOTO(nic = rf_results_fixed_string(sizeof rows[0].nic), done);
  RF_H5_GOTO(type = H5Tcreate(H5T_COMPOUND, sizeof(placement_row)), done);
  RF_H5_GOTO(H5Tinsert(type, "rank", HOFFSET(placement_row, rank), H5T_NATIVE_INT32), done);
  RF_H5_GOTO(H5Tinsert(type, "host", HOFFSET(placement_row, host), host), done);
  RF_H5_GOTO(H5Tinsert(type, "pid", HOFFSET(placement_row, pid), H5T_NATIVE_INT64), done);
  RF_H5_GOTO(
      H5Tinsert(type, "trainer_rank", HOFFSET(placement_row, trainer_rank), H5T_NATIVE_INT32),
      done);
  RF_H5_GOTO(
      H5Tinsert(type, "rollout_rank", HOFFSET(placement_row, rollout_rank), H5T_NATIVE_INT32),
      done);
  RF_H5_GOTO(H5Tinsert(type, "gpu", HOFFSET(placement_row, gpu), H5T_NATIVE_INT32), done);
  RF_H5_GOTO(H5Tinsert(type, "bus_id", HOFFSET(placement_row, bus_id), bus), done);
  RF_H5_GOTO(H5Tinsert(type, "cpus", HOFFSET(placement_row, cpus), cpus), done);
  RF_H5_GOTO(H5Tinsert(type, "numa", HOFFSET(placement_row, numa), H5T_NATIVE_INT32), done);
  RF_H5_GOTO(H5Tinsert(type, "nic", HOFFSET(placement_row, nic), nic), done);
  RF_TRY_GOTO(rf_results_dataset(g, "placement", type, 1, dims, rows), done);
  RF_TRY_GOTO(rf_results_attr_str(g, "placement", "description",
                                  "one row per world rank; trainer_rank and rollout_rank are "
                                  "-1 where the rank has no such role; gpu and numa are -1 and "
                                  "bus_id, cpus and nic are \"-\" where there is none (cpus "
                                  "\"-\": not bound)"),
              done);
done:;
  hid_t types[] = {type, host, bus, cpus, nic};
  for (size_t i = 0; i < RF_ARRAY_LEN(types); i++)
    if (types[i] >= 0)
      H5Tclose(types[i]);
  free(rows);
  return st;
}

/* The plan's links with their distance classes, so a run can be compared with its topology. */
rf_status rf_results_write_links(hid_t g, const rf_results_run *run) {
  rf_status st = RF_OK;
  hid_t name = H5I_INVALID_HID, type = H5I_INVALID_HID;
  hsize_t dims[1] = {(hsize_t)(run->links ? RF_MAX(run->link_count, 0) : 0)};
  RF_H5_GOTO(name = rf_results_fixed_string(sizeof run->links[0].name), done);
  RF_H5_GOTO(type = H5Tcreate(H5T_COMPOUND, sizeof(rf_link_info)), done);
  RF_H5_GOTO(H5Tinsert(type, "src", HOFFSET(rf_link_info, src), H5T_NATIVE_INT32), done);
  RF_H5_GOTO(H5Tinsert(type, "dst", HOFFSET(rf_link_info, dst), H5T_NATIVE_INT32), done);
  RF_H5_GOTO(H5Tinsert(type, "bytes", HOFFSET(rf_link_info, bytes), H5T_NATIVE_INT64), done);
  RF_H5_GOTO(H5Tinsert(type, "distance", HOFFSET(rf_link_info, name), name), done);
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
  if (name >= 0)
    H5Tclose(name);
  return st;
}
