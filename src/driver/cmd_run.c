/* `refit run`: the MPI-launched job. MPI carries the control plane (split, handshake, status
 * agreement, gathering results); the engine moves the plan's pieces over the transport. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control/control.h"
#include "driver.h"
#include "engine/engine.h"
#include "placement.h"
#include "plan_auto.h"
#include "report/report.h"
#include "run_collect.h"
#include "run_engine.h"
#include "run_record.h"
#include "run_setup.h"
#include "run_versions.h"
#include "sweep.h"

/* The iterations: warmup ones, then timed ones into mine[iteration][phase]. Each starts
 * with a barrier, so ranks start their clocks together, and ends with the ranks agreeing on
 * its outcome; the last one writes every element again after the engine poisons them, and
 * is the one --inject corrupt flips a byte in (before any forwarding, so that it travels).
 * Every iteration but the job's first moves a new version of the weights (run_versions.h),
 * which the trainer makes (or, from a sequence of checkpoints, reads) before the barrier;
 * *update_s is this rank's mean time for one. */
static rf_status iterate(rf_control *ctl, const rf_config *cfg, run_setup *rs, rf_engine *e,
                         double setup, double *mine, double *update_s) {
  int iters = (int)cfg->iters, warmup = (int)cfg->warmup, last = warmup + iters - 1;
  /* --inject stall: trainer rank 0 posts nothing; under delta only in the last iteration, a
   * delta one, so that the version before it is there for run_mode to show. */
  int staller = cfg->inject == RF_INJECT_STALL && ctl->trainer_rank == 0;
  int delta = e->delta != RF_DELTA_CHOICE_OFF;
  if (staller && !delta)
    RF_WARN("inject stall: trainer rank 0 will not post its messages");
  double scratch[RF_PHASE_COUNT], updating = 0;
  int updates = 0;
  rf_status st = RF_OK;
  for (int it = 0; it < warmup + iters && st == RF_OK; it++) {
    /* A sequence of checkpoints: iteration `it` of every run moves file `it`. */
    int sequence = rs->checkpoints.count > 1;
    int advance = rs->iterations_done++ > 0;
    if (sequence)
      advance = e->data->version.k != it;
    if (advance) {
      double u0 = rf_now();
      st = sequence ? rf_buffers_load(e->data, rs->checkpoints.files[it], it)
                    : rf_buffers_advance(e->data);
      updating += rf_now() - u0, updates++;
    }
    /* Under delta the rollout must hold the version before, which the iteration's pieces
     * change: no poison then; the check still compares every element with the version moved. */
    if (it == last && st == RF_OK) {
      if (!rf_engine_delta_next(e))
        st = rf_engine_poison(e);
      if (cfg->inject == RF_INJECT_CORRUPT)
        rf_engine_corrupt(e);
    }
    /* A rollout rank drops the version before the last, which the last then refits dense. */
    if (it == last - 1 && cfg->inject == RF_INJECT_SKIP_VERSION)
      rf_engine_skip_version(e);
    int stall = staller && (!delta || it == last);
    if (stall && delta)
      RF_WARN("inject stall: trainer rank 0 will not post its messages");
    double *times = it < warmup ? scratch : mine + (size_t)(it - warmup) * RF_PHASE_COUNT;
    /* A rank whose poisoning failed still takes part (run_engine.h). */
    st = rf_run_iteration(ctl, e, st, setup, stall, times);
    /* Delta refits apply only once every rank has all of its pieces checked (transactional):
     * a refused piece anywhere leaves every rollout rank at the version before. */
    if (st == RF_OK) {
      if (e->delta_dense && ctl->world_rank == 0)
        printf("# delta %s: version %lld: dense (%s)\n", rf_delta_choice_name(e->delta),
               (long long)e->moved.k,
               rs->iterations_done > 1 ? "the trainer kept no version before it"
                                       : "the rollout holds no version");
      if (ctl->world_rank == 0)
        rf_run_print_stale(e);
      st = rf_control_agree(ctl, rf_engine_delta_apply(e, times));
      if (st == RF_OK)
        rs->held = e->moved.k;
    } else {
      /* A refused delta leaves the rollout at the version it held, which for a sequence of
       * checkpoints at a run's first iteration is the last file of the run before. */
      rs->refused = e->moved.k;
      rf_engine_delta_refused(e);
      if (sequence)
        e->moved.k = rs->held;
    }
    /* Every rank has the same status (a rank whose wait expired aborts the job instead). */
    if (st != RF_OK && st != RF_ERR_TIMEOUT)
      rf_engine_abandon(e); /* its own timeout marks the control plane: main then aborts */
  }
  *update_s = updates ? updating / updates : 0;
  return st;
}

/* One run: one mode over the whole job: the engine, the iterations, verification, the
 * figures rank 0 collects, the record. Returns the agreed status of every rank. */
static rf_status run_mode(rf_control *ctl, const rf_config *cfg, run_setup *rs, rf_transport *tp,
                          rf_buffers *data, rf_mode mode, rf_delta_choice delta,
                          rf_run_result *res) {
  int iters = (int)cfg->iters, rank0 = ctl->world_rank == 0;
  rf_control_hold(ctl); /* memory that does not fit fails every rank alike: one line says so */
  double *mine = rf_calloc((size_t)iters * RF_PHASE_COUNT, sizeof *mine, "timings");
  double *all =
      rank0 ? rf_calloc((size_t)iters * ctl->world_size * RF_PHASE_COUNT, sizeof *all, "timings")
            : NULL;
  rf_engine e;
  memset(&e, 0, sizeof e);
  res->wrong = -1; /* nothing verified until rf_run_verify says otherwise */
  res->checksum_bad = -1;
  double t0 = rf_now();
  rf_status st = mine && (all || !rank0)
                     ? rf_run_engine_open(ctl, cfg, rs, data, tp, mode, delta, cfg->inject, &e)
                     : RF_ERR_NOMEM;
  double setup = rf_now() - t0, update_s = 0;
  st = rf_control_agree(ctl, st);
  if (st == RF_OK)
    st = iterate(ctl, cfg, rs, &e, setup, mine, &update_s);
  /* The checks compare the rollout with the file of the version moved last. */
  rf_checkpoint *ck = rf_run_checkpoint_of(&rs->checkpoints, e.moved.k);
  /* A refused delta, or one a silent trainer rank cut short (the waits for it timed out and
   * were cancelled, the control plane still answers), applied nothing: the full check against
   * the version before shows it. */
  if (delta != RF_DELTA_CHOICE_OFF &&
      (st == RF_ERR_CORRUPT || (st == RF_ERR_TIMEOUT && !ctl->timed_out))) {
    rf_status shown =
        rf_control_agree(ctl, rf_run_verify(ctl, &rs->job, &e, ck, 1, 0, &rs->record, res));
    if (rank0 && shown == RF_OK)
      printf("# delta %s: the refit of version %lld %s; the rollout still holds version %lld: "
             "%lld wrong elements\n",
             rf_delta_choice_name(delta), (long long)rs->refused,
             st == RF_ERR_CORRUPT ? "was refused" : "timed out", (long long)e.moved.k,
             (long long)res->wrong);
  }
  /* The reference checksums (checked, and kept in the results file) are that file's too. */
  if (st == RF_OK)
    st = rf_run_checkpoints_reference(ctl, &rs->job, &rs->checkpoints, e.moved.k,
                                      &rs->record.reference);
  if (st == RF_OK) {
    double v0 = rf_now();
    st = rf_control_agree(ctl, rf_run_verify(ctl, &rs->job, &e, ck, rs->verify_full,
                                             rs->verify_checksum, &rs->record, res));
    double verify = rf_now() - v0; /* one value, repeated in every iteration */
    for (int it = 0; it < iters; it++)
      mine[(size_t)it * RF_PHASE_COUNT + RF_PHASE_VERIFY] = verify;
  }
  if (st == RF_OK)
    st = rf_control_agree(
        ctl, rf_run_version_changes(ctl, &rs->job, &e, &rs->checkpoints, update_s, res));
  if (st == RF_OK)
    st = rf_control_agree(ctl, rf_run_delta_figures(ctl, &rs->job, &e, res));
  if (st == RF_OK)
    st = rf_run_collect(ctl, &e, mode, mine, all, iters, res);
  if (rank0) {
    rf_run_describe_result(cfg, &rs->job, rs->transport->name, mode, res);
    res->ranks = ctl->world_size;
    res->timings = all;
    res->status = st;
    if (st == RF_OK && (res->wrong > 0 || res->checksum_bad > 0))
      res->status = RF_ERR_VERIFY;
    if (st == RF_OK)
      st = rf_run_result_summarise(res);
  }
  free(mine);
  if (st == RF_OK)
    st = rf_control_agree(ctl, rf_record_run(&rs->record, ctl, cfg, &rs->job, &e, mode, res));
  rf_engine_free(&e);
  /* A verification failure is known on rank 0 only; share it so every rank exits 1. */
  if (st == RF_OK)
    st = rf_control_agree(ctl, rank0 ? res->status : RF_OK);
  return st;
}

/* Every mode of the job over the same data, one result row each (and the calibrated limits
 * after it) on rank 0. Returns the agreed status; *failed_mode names the mode that ended it. */
static rf_status run_modes(rf_control *ctl, const rf_config *cfg, const rf_sweep_slot *slot,
                           run_setup *rs, rf_transport *tp, rf_buffers *data,
                           const char **failed_mode) {
  rf_status st = RF_OK;
  *failed_mode = NULL;
  /* --delta a,b: each choice runs every mode, a run (a row) each, over the same data. */
  int deltas = cfg->delta.count > 0 ? cfg->delta.count : 1;
  for (int j = 0; j < deltas * cfg->mode.count && st == RF_OK; j++) {
    int i = j % cfg->mode.count;
    rf_delta_choice delta =
        cfg->delta.count ? cfg->delta.items[j / cfg->mode.count] : RF_DELTA_CHOICE_OFF;
    rf_run_result res;
    memset(&res, 0, sizeof res);
    rf_sweep_announce(slot, i, rf_mode_name(cfg->mode.items[i]));
    st = run_mode(ctl, cfg, rs, tp, data, cfg->mode.items[i], delta, &res);
    if (ctl->world_rank == 0 && res.timings) {
      rf_report_row(stdout, &res);
      rf_run_print_update(cfg, &res);
      rf_run_print_delta(&res);
      rf_record_print_limits(&rs->record, &res);
      fflush(stdout);
    }
    if (st != RF_OK)
      *failed_mode = rf_mode_name(cfg->mode.items[i]);
    free(res.timings);
    free(res.delta_kinds);
  }
  return st;
}

/* One job (a sweep's combination, or the whole of a plain run): runs on every rank between
 * MPI_Init and MPI_Finalize; returns the status all ranks agreed. Each step returns an agreed
 * status, so every rank takes the same path through it. */
static rf_status run_job(const rf_config *cfg, const rf_sweep_slot *slot, rf_control *ctl,
                         int *ctl_open) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  /* Building the job is deterministic: every rank would print the same error, so only rank 0
   * speaks. Ranks started with different options are caught by the handshake. */
  rf_log_push_quiet(rank != 0);
  run_setup rs;
  memset(&rs, 0, sizeof rs);
  rs.record.slot = slot;
  double setup[RF_SETUP_STEP_COUNT] = {0}, t0 = rf_now();
  rf_status st = rf_run_build_setup(cfg, &rs);
  setup[RF_SETUP_PLAN] = rf_now() - t0, t0 = rf_now();
  if (st == RF_OK)
    st = rf_control_init(ctl, &rs.job.layout, cfg->timeout);
  rf_log_pop_quiet();
  if (st != RF_OK) {
    rf_job_free(&rs.job);
    return st;
  }
  *ctl_open = 1;
  rf_job_placement placement;
  st = rf_run_place_job(ctl, cfg, &rs, &placement);
  rf_job_desc desc;
  rf_run_describe_job(cfg, &rs.job, &desc);
  if (st == RF_OK)
    st = rf_control_handshake(ctl, &desc);
  setup[RF_SETUP_CONTROL] = rf_now() - t0;
  if (st == RF_OK)
    st = rf_control_agree(ctl, rf_run_print_header(ctl, cfg, &rs.job, rs.memory, &rs.record));
  /* A checkpoint that does not match the model (a missing expert, a truncated file) stops the
   * job before the results file is touched; then rank 0 refuses a results file that is not
   * refit's, before anything moves. */
  if (st == RF_OK && cfg->checkpoint[0])
    st = rf_run_checkpoints_open(ctl, cfg, &rs.job, &rs.checkpoints, &rs.record.reference);
  if (st == RF_OK)
    st = rf_control_agree(ctl, rf_record_open(&rs.record, ctl, cfg));
  t0 = rf_now();
  if (st == RF_OK && rs.memory == RF_MEM_DEVICE)
    st = rf_run_select_gpu(ctl, cfg, &placement);
  setup[RF_SETUP_GPU] = rf_now() - t0, t0 = rf_now();
  rf_transport tp;
  memset(&tp, 0, sizeof tp);
  if (st == RF_OK)
    st = rf_control_agree(ctl, rf_transport_open(rs.transport, ctl, &rs.job.plan, &tp));
  tp.register_unit = cfg->register_unit;
  setup[RF_SETUP_TRANSPORT] = rf_now() - t0, t0 = rf_now();
  /* The weights are generated once; every mode moves the same data. */
  rf_buffers data;
  memset(&data, 0, sizeof data);
  if (st == RF_OK)
    st = rf_run_buffers_open(ctl, cfg, &rs, rf_run_checkpoint_of(&rs.checkpoints, 0), &tp, &data);
  /* Windows the transport made as it allocated the arenas are its registration. */
  setup[RF_SETUP_ARENAS] = rf_now() - t0 - data.register_seconds;
  t0 = rf_now() - data.register_seconds;
  if (st == RF_OK && tp.ops->peer_buffer) { /* a mapping or one-sided transport */
    rf_control_hold(ctl); /* a kind of memory the transport refuses, refused on every rank */
    st = rf_control_agree(ctl, rf_engine_expose(&data, &tp));
  }
  setup[RF_SETUP_REGISTER] = rf_now() - t0;
  if (st == RF_OK)
    st = rf_run_report_setup(ctl, setup, &rs.record);
  const char *failed_mode = NULL;
  if (st == RF_OK)
    st = run_modes(ctl, cfg, slot, &rs, &tp, &data, &failed_mode);
  rf_buffers_free(&data);
  if (tp.ops)
    rf_transport_close(&tp);
  if (rank == 0) {
    char reason[256];
    snprintf(reason, sizeof reason, "%s%s%s", rf_status_text(st), failed_mode ? " in mode " : "",
             failed_mode ? failed_mode : "");
    rf_report_footer(stdout, st, st == RF_OK ? NULL : reason);
  }
  rf_record_free(&rs.record);
  rf_job_placement_free(&placement);
  rf_run_checkpoints_close(&rs.checkpoints);
  rf_job_free(&rs.job);
  return st;
}

/* A sweep's job with a control plane of its own, freed here unless a wait timed out. */
static rf_status run_one(const rf_config *cfg, const rf_sweep_slot *slot, int *timed_out) {
  rf_control ctl;
  memset(&ctl, 0, sizeof ctl);
  int ctl_open = 0;
  rf_status st = run_job(cfg, slot, &ctl, &ctl_open);
  if (ctl_open && !ctl.timed_out)
    rf_control_free(&ctl); /* which may time out, receiving the ranks' failure notices */
  *timed_out = ctl.timed_out;
  return st;
}

rf_status rf_cmd_run(const rf_config *cfg, int *argc, char ***argv) {
  /* The placement numbers GPUs in PCI bus order, as hwloc lists them; CUDA must number them
   * the same way. It reads the variable once, when it starts, which MPI_Init or the GPU count
   * of --memory auto may already do, so it is set first (a user's own choice stays, and then
   * run_job warns where the placement and CUDA disagree). */
  setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 0);
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
    return rf_fail(RF_ERR_MPI, "MPI_Init failed; start refit run under mpirun");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  rf_log_set_rank(rank, size);

  int timed_out = 0;
  rf_status st = rf_sweep_execute(cfg, run_one, &timed_out);
  fflush(stdout);
  if (!timed_out) {
    /* Nobody leaves before rank 0 has printed: under mpirun the first rank to exit with an
     * error gets the others killed, rank 0 perhaps before its error line or footer is out. */
    rf_control world;
    rf_control_attach(&world, MPI_COMM_WORLD, cfg->timeout);
    rf_control_barrier(&world, MPI_COMM_WORLD, "every rank to finish");
    timed_out = world.timed_out;
  }
  if (timed_out) {
    /* A request is still pending on a dead or silent peer: finalising would hang. */
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, rf_status_exit_code(st));
  }
  MPI_Finalize();
  return st;
}
