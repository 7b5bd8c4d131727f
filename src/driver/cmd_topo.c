/* `refit topo`: where every rank of a job would run and how far apart the ends of each planned
 * trainer→rollout link are, from a topology file or this machine, without MPI. Every node is
 * assumed to look like the topology given. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "placement.h"
#include "transport/transport.h"
#include "transport_auto.h"

/* `choice`: --transport auto's line, "" for a named transport. */
static void print_text(const rf_job *job, const rf_topo_distance_ctx *ctx,
                       const rf_link_info *links, int nlinks, const char *transport,
                       const char *choice) {
  const rf_layout *lay = &job->layout;
  int rpn = ctx->ranks_per_node;
  if (choice[0])
    printf("transport: %s\n", choice);
  else
    printf("transport: %s (--transport %s)\n", transport, transport);
  for (int w = 0; w < lay->world_size; w++) {
    const rf_topo_place *p = &ctx->place[w % rpn];
    int t, r;
    char ts[16] = "-", rs[16] = "-", gpu[16] = "-", numa[16] = "-";
    rf_layout_roles(lay, w, &t, &r);
    if (t >= 0)
      snprintf(ts, sizeof ts, "%d", t);
    if (r >= 0)
      snprintf(rs, sizeof rs, "%d", r);
    if (p->gpu >= 0)
      snprintf(gpu, sizeof gpu, "%d", p->gpu);
    if (p->numa >= 0)
      snprintf(numa, sizeof numa, "%d", p->numa);
    printf("rank %d node %d trainer %s rollout %s gpu %s bus %s cores %s numa %s nic %s\n", w,
           w / rpn, ts, rs, gpu, p->bus_id, p->cpus, numa, p->nic);
  }
  for (int i = 0; i < nlinks; i++)
    printf("link %d -> %d bytes %" PRId64 " distance %s\n", links[i].src, links[i].dst,
           links[i].bytes, links[i].name);
}

static rf_status print_json(const rf_job *job, const rf_topo_distance_ctx *ctx,
                            const rf_link_info *links, int nlinks, const char *transport,
                            const char *choice) {
  const rf_layout *lay = &job->layout;
  int rpn = ctx->ranks_per_node;
  json_t *o = json_object(), *ranks = json_array(), *ls = json_array();
  json_object_set_new(o, "world_size", json_integer(lay->world_size));
  json_object_set_new(o, "ranks_per_node", json_integer(rpn));
  json_object_set_new(o, "nodes", json_integer((lay->world_size + rpn - 1) / rpn));
  json_object_set_new(o, "transport", json_string(transport));
  if (choice[0])
    json_object_set_new(o, "transport_choice", json_string(choice));
  for (int w = 0; w < lay->world_size; w++) {
    const rf_topo_place *p = &ctx->place[w % rpn];
    int t, r;
    rf_layout_roles(lay, w, &t, &r);
    json_t *e = json_object();
    json_object_set_new(e, "rank", json_integer(w));
    json_object_set_new(e, "node", json_integer(w / rpn));
    json_object_set_new(e, "local_rank", json_integer(w % rpn));
    json_object_set_new(e, "trainer", t >= 0 ? json_integer(t) : json_null());
    json_object_set_new(e, "rollout", r >= 0 ? json_integer(r) : json_null());
    json_object_set_new(e, "gpu", p->gpu >= 0 ? json_integer(p->gpu) : json_null());
    json_object_set_new(e, "bus_id", p->gpu >= 0 ? json_string(p->bus_id) : json_null());
    json_object_set_new(e, "cores", strcmp(p->cpus, "-") ? json_string(p->cpus) : json_null());
    json_object_set_new(e, "numa", p->numa >= 0 ? json_integer(p->numa) : json_null());
    json_object_set_new(e, "nic", strcmp(p->nic, "-") ? json_string(p->nic) : json_null());
    json_array_append_new(ranks, e);
  }
  for (int i = 0; i < nlinks; i++) {
    json_t *e = json_object();
    json_object_set_new(e, "src", json_integer(links[i].src));
    json_object_set_new(e, "dst", json_integer(links[i].dst));
    json_object_set_new(e, "bytes", json_integer(links[i].bytes));
    json_object_set_new(e, "distance", json_string(links[i].name));
    json_array_append_new(ls, e);
  }
  json_object_set_new(o, "ranks", ranks);
  json_object_set_new(o, "links", ls);
  char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(o);
  if (!text)
    return rf_fail(RF_ERR_NOMEM, "out of memory formatting the placement as JSON");
  printf("%s\n", text);
  free(text);
  return RF_OK;
}

rf_status rf_cmd_topo(const rf_config *cfg) {
  rf_job job;
  rf_topo *topo = NULL;
  rf_topo_place *place = NULL;
  rf_link_info *links = NULL;
  int nlinks = 0;
  const rf_transport_ops *transport = NULL;
  rf_topo_place_options o = {.device = (int)cfg->device, .bind = cfg->bind};
  rf_status st = RF_OK;
  RF_TRY_GOTO(rf_job_build(cfg, 0, &job), out);
  int world = job.layout.world_size;
  o.ranks_per_node = cfg->ranks_per_node > 0 ? (int)RF_MIN(cfg->ranks_per_node, world) : world;
  RF_TRY_GOTO(rf_topo_load(&topo, cfg->topology_xml), out);
  /* Only NCCL refuses two ranks on one GPU; ipc and mpi share one between processes. The
   * machine described may have transports this build lacks; auto chooses as refit run would
   * on nodes like it. */
  rf_transport_site site = {.nodes = (world + o.ranks_per_node - 1) / o.ranks_per_node,
                            .ranks = world,
                            .ranks_per_node = o.ranks_per_node,
                            .gpus = rf_topo_gpu_count(topo),
                            .any_build = 1};
  char choice[RF_TRANSPORT_CHOICE_MAX];
  RF_TRY_GOTO(
      rf_transport_describe(rf_transport_choose(cfg, &site, choice, sizeof choice), &transport),
      out);
  o.gpu_per_rank = transport->gpu_per_rank ? transport->name : NULL;
  place = rf_calloc((size_t)o.ranks_per_node, sizeof *place, "placement");
  if (!place) {
    st = RF_ERR_NOMEM;
    goto out;
  }
  RF_TRY_GOTO(rf_topo_place_node(topo, &o, place), out);
  /* The job's plan did not know the machine; show the one that prefers near sources. */
  rf_topo_distance_ctx ctx = {topo, o.ranks_per_node, place};
  rf_plan_options popt = {.distance = rf_topo_distance, .distance_ctx = &ctx};
  RF_TRY_GOTO(rf_job_replan(&job, &popt), out);
  RF_TRY_GOTO(rf_job_plan_links(&job.plan, world, &popt, &links, &nlinks), out);
  if (cfg->json)
    st = print_json(&job, &ctx, links, nlinks, transport->name, choice);
  else
    print_text(&job, &ctx, links, nlinks, transport->name, choice);
out:
  free(links);
  free(place);
  rf_topo_free(topo);
  rf_job_free(&job);
  return st;
}
