/* `refit run`'s job before its first mode (run_setup.h). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plan_auto.h"
#include "report/report.h"
#include "run_setup.h"

/* --memory: GPU transports need the weights on the GPU, shm in shared host memory; mpi takes
 * them from wherever they are, staging device weights through pinned host memory (the
 * baseline GPU users compare the GPU transports with). auto puts them on a GPU when this
 * process sees one, except for fp8 rollouts over mpi, which quantize on the GPU only where the
 * transport keeps the bytes there (engine.c, check_fp8). */
static rf_status choose_memory(const rf_config *cfg, run_setup *rs) {
  int gpu_transport = rs->transport->memory == RF_MEM_DEVICE;
  if (rs->transport->memory == RF_MEM_SHARED) {
    /* shm maps host memory between processes; it has no way to reach a GPU's. */
    if (cfg->memory == RF_MEM_REQUEST_DEVICE)
      return rf_fail(RF_ERR_USAGE,
                     "option --memory device: the %s transport moves host memory; "
                     "use --memory host or --transport ipc",
                     rs->transport->name);
    rs->memory = RF_MEM_SHARED;
  } else if (cfg->memory == RF_MEM_REQUEST_HOST) {
    if (gpu_transport)
      return rf_fail(RF_ERR_USAGE,
                     "option --memory host: the %s transport moves GPU memory; "
                     "use --memory device or --transport mpi",
                     rs->transport->name);
    rs->memory = RF_MEM_HOST;
  } else if (cfg->memory == RF_MEM_REQUEST_DEVICE || gpu_transport) {
    rs->memory = RF_MEM_DEVICE;
  } else if (rf_format_of(cfg->rollout_dtype)) {
    rs->memory = RF_MEM_HOST; /* mpi stages GPU weights through host memory */
  } else if (rs->transport->one_sided) {
    /* rma's windows over GPU memory need a CUDA-aware MPI: only asked for (--memory device),
     * when the transport checks for one. */
    rs->memory = RF_MEM_HOST;
  } else {
    rs->memory = rf_gpu_count() > 0 ? RF_MEM_DEVICE : RF_MEM_HOST;
  }
  return RF_OK;
}

rf_status rf_run_build_setup(const rf_config *cfg, run_setup *rs) {
  return rf_run_build_setup_on(cfg, MPI_COMM_WORLD, rs);
}

rf_status rf_run_build_setup_on(const rf_config *cfg, MPI_Comm comm, run_setup *rs) {
  RF_TRY(rf_run_versions_setup(cfg, &rs->update));
  RF_TRY(rf_transport_find(cfg->transport, &rs->transport));
  RF_TRY(rf_transport_check_register(rs->transport, cfg->register_unit));
  RF_TRY(choose_memory(cfg, rs));
  rs->verify_full = cfg->verify == RF_VERIFY_FULL;
  rs->verify_checksum = cfg->verify != RF_VERIFY_NONE;
  int world = 0;
  RF_MPI(MPI_Comm_size(comm, &world));
  /* --plan auto is chosen once the ranks are placed (choose_plan). */
  return cfg->plan == RF_PLAN_AUTO ? rf_job_build_layout(cfg, world, &rs->job)
                                   : rf_job_build(cfg, world, &rs->job);
}

void rf_run_describe_job(const rf_config *cfg, const rf_job *job, rf_job_desc *d) {
  memset(d, 0, sizeof *d);
  snprintf(d->model, sizeof d->model, "%s", job->model.name);
  d->model_digest = rf_model_digest(&job->model);
  rf_trainer_layout_format(&job->trainer, d->trainer, sizeof d->trainer);
  rf_rollout_layout_format(&job->rollout, d->rollout, sizeof d->rollout);
  snprintf(d->placement, sizeof d->placement, "%s", rf_placement_name(cfg->placement));
  snprintf(d->plan, sizeof d->plan, "%s", rf_plan_kind_name(job->plan.kind));
  d->plan_digest = job->plan.digest;
}

/* Where every rank runs (GPU, cores, NUMA node, NIC), decided per node and applied before
 * anything touches CUDA; then the plan again with the machine's distances, the same on every
 * rank because every rank has world rank 0's table. Rank 0 keeps the links for the header. */
rf_status rf_run_place_job(rf_control *ctl, const rf_config *cfg, run_setup *rs,
                           rf_job_placement *placement) {
  memset(placement, 0, sizeof *placement); /* run_job frees it whatever happens */
  rf_job_placement_options o = {.topology_xml = cfg->topology_xml,
                                .device = (int)cfg->device,
                                .bind = cfg->bind,
                                .gpu_per_rank =
                                    rs->transport->gpu_per_rank ? rs->transport->name : NULL,
                                .nic_auto = cfg->nic == RF_NIC_AUTO};
  RF_TRY(rf_job_place(ctl, &o, placement));
  rs->record.place = placement->mine;
  rf_plan_options popt = rf_job_placement_plan_options(placement);
  rf_status st = cfg->plan == RF_PLAN_AUTO
                     ? rf_job_plan_run(ctl, cfg, &rs->job, rs->transport,
                                       rs->memory == RF_MEM_DEVICE, placement->node_gpus, &popt)
                     : rf_job_replan(&rs->job, &popt);
  rs->forward_crosses_gpus = st == RF_OK && rf_job_forward_crosses_gpus(&rs->job.plan, &popt);
  if (st == RF_OK && ctl->world_rank == 0)
    st = rf_job_plan_links(&rs->job.plan, ctl->world_size, &popt, &rs->record.links,
                           &rs->record.link_count);
  return rf_control_agree(ctl, st);
}

rf_status rf_run_rank_table(rf_control *ctl, run_record *rec) {
  rf_rank_info mine = {.rank = ctl->world_rank,
                       .pid = (long)getpid(),
                       .trainer_rank = ctl->trainer_rank,
                       .rollout_rank = ctl->rollout_rank};
  snprintf(mine.host, sizeof mine.host, "%s", rf_hostname());
  mine.gpu = rec->place.gpu;
  mine.numa = rec->place.numa;
  snprintf(mine.bus_id, sizeof mine.bus_id, "%s", rec->place.bus_id);
  snprintf(mine.cpus, sizeof mine.cpus, "%s", rec->place.cpus);
  snprintf(mine.nic, sizeof mine.nic, "%s", rec->place.nic);
  rf_rank_info *all =
      ctl->world_rank == 0 ? rf_calloc((size_t)ctl->world_size, sizeof *all, "rank table") : NULL;
  /* Rank 0 without its table would hand the gather a NULL buffer: the ranks agree first. */
  rf_status st = rf_control_agree(ctl, ctl->world_rank == 0 && !all ? RF_ERR_NOMEM : RF_OK);
  if (st == RF_OK)
    st = rf_control_gather(ctl, ctl->world, &mine, all, (int)sizeof mine, MPI_BYTE,
                           "the rank table");
  free(rec->placement);
  rec->placement = all; /* rank 0 keeps the table for the results file */
  return st;
}

/* Rank 0 prints the header: versions, command line, the job and one line per rank. */
rf_status rf_run_print_header(rf_control *ctl, const rf_config *cfg, const rf_job *job,
                              rf_mem_kind rs_memory, run_record *rec) {
  rf_status st = rf_run_rank_table(ctl, rec);
  const rf_rank_info *all = rec->placement;
  if (st == RF_OK && all) {
    const rf_model *m = &job->model;
    /* An fp8 rollout says what its plan puts on the wire: fp8 and scales where the sources
     * quantize, the trainer's dtype where the destinations do. */
    char fp8[320] = "", only[160] = "";
    /* A model whose quantization leaves some linear weights in its dtype (gpt-oss: all but the
     * experts) says which kinds the format covers. */
    if (m->unquantized_kinds) {
      snprintf(only, sizeof only, ": ");
      rf_model_quantized_kinds(m, only + 2, sizeof only - 2);
      snprintf(only + strlen(only), sizeof only - strlen(only), " only");
    }
    if (job->quantized_checkpoint)
      snprintf(fp8, sizeof fp8,
               " (%s from the %s checkpoint; wire %lld bytes, quantized bytes and scales as the "
               "trainer holds them)",
               job->quantized_checkpoint->name, job->quantized_checkpoint->name,
               (long long)job->plan.wire_transfer_bytes);
    else if (rf_format_of(cfg->rollout_dtype))
      snprintf(fp8, sizeof fp8,
               " (%s, block-quantized%s; wire %lld bytes, %d tensors quantized at the source, "
               "%d at the destination)",
               rf_format_of(cfg->rollout_dtype)->name, only,
               (long long)job->plan.wire_transfer_bytes, job->plan.source_tensors,
               job->plan.destination_tensors);
    char job_line[1400], update[96] = "";
    int versions = rf_checkpoint_list_count(cfg->checkpoint);
    if (strcmp(cfg->update, "none") != 0)
      snprintf(update, sizeof update, "; update %s", cfg->update);
    else if (versions > 1)
      snprintf(update, sizeof update, "; %d checkpoint versions", versions);
    snprintf(job_line, sizeof job_line,
             "%s (%s, %lld bytes, %d tensors); trainer %s (%s, %s order); rollout %s%s; %s; "
             "transport %s (weights in %s memory); verify %s; warmup %lld, iters %lld; "
             "seed %lld%s%s%s",
             m->name, rf_dtype_name(m->dtype), (long long)m->total_bytes, m->tensor_count,
             cfg->trainer, rf_trainer_style_name(cfg->trainer_style),
             rf_trainer_order_name(cfg->trainer_order), cfg->rollout, fp8,
             rf_placement_name(cfg->placement), cfg->transport, rf_mem_kind_name(rs_memory),
             rf_verify_level_name(cfg->verify), (long long)cfg->warmup, (long long)cfg->iters,
             (long long)cfg->seed, update, job->plan_why[0] ? "; " : "", job->plan_why);
    /* --transport auto's choice and reason, or the transport named. */
    char named[64];
    snprintf(named, sizeof named, "%s (--transport %s)", cfg->transport, cfg->transport);
    const char *transport =
        rec->slot && rec->slot->transport_choice[0] ? rec->slot->transport_choice : named;
    rf_report_header(stdout, cfg->command_line, job_line, transport, all, ctl->world_size,
                     rec->links, rec->link_count);
  }
  return st;
}

/* GPU transports: each rank picks its GPU before anything creates a CUDA context: the
 * placement's GPU when it is this machine's (PCI order, as CUDA numbers them under
 * CUDA_DEVICE_ORDER=PCI_BUS_ID; a topology file's GPUs are not this machine's), else
 * --device. One rank per node says what is wrong; the ranks agree on the outcome. */
rf_status rf_run_select_gpu(rf_control *ctl, const rf_config *cfg,
                            const rf_job_placement *placement) {
  rf_gpu_info gpu;
  const rf_topo_place *p = &placement->mine;
  int device = placement->this_machine && p->gpu >= 0 ? p->gpu : (int)cfg->device;
  rf_log_push_quiet(ctl->world_rank != 0 && ctl->node_rank != 0);
  rf_status st = rf_gpu_select(ctl->node_rank, device, &gpu);
  rf_log_pop_quiet();
  RF_TRY(rf_control_agree(ctl, st));
  RF_INFO("rank %d uses GPU %d (%s, %s)", ctl->world_rank, gpu.device, gpu.name, gpu.bus_id);
  rf_mem_set_copy_path(cfg->copy);
  if (placement->this_machine && p->gpu >= 0 && !rf_topo_same_bus_id(gpu.bus_id, p->bus_id))
    RF_WARN("CUDA device %d is %s but the placement chose %s (cores %s); CUDA numbers GPUs "
            "differently: unset CUDA_VISIBLE_DEVICES and set CUDA_DEVICE_ORDER=PCI_BUS_ID",
            gpu.device, gpu.bus_id, p->bus_id, p->cpus);
  return RF_OK;
}

/* The job's own setup, the slowest rank's time of each step, to rank 0: printed under the
 * header, and kept for every run's results (setup_<step>_s). */
rf_status rf_run_report_setup(rf_control *ctl, const double *mine, run_record *rec) {
  RF_TRY(rf_control_reduce(ctl, ctl->world, mine, rec->job_setup, RF_SETUP_STEP_COUNT, MPI_DOUBLE,
                           MPI_MAX, "every rank's setup times"));
  if (ctl->world_rank != 0)
    return RF_OK;
  rec->job_setup_known = 1;
  printf("# setup (slowest rank, once per job):");
  for (int i = 0; i < RF_SETUP_STEP_COUNT; i++)
    printf("%s %s %.1f ms", i ? "," : "", rf_setup_step_name((rf_setup_step)i),
           rec->job_setup[i] * 1e3);
  printf("\n");
  fflush(stdout);
  return RF_OK;
}
