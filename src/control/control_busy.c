/* Local work that may outlast the timeout: a rank checking every element of a large model on
 * the CPU can take minutes, while its peers wait for it in the status agreement that follows,
 * and a wait longer than --timeout means a dead peer. So a busy rank ticks: every interval it
 * joins the next of a sequence of one-int reductions (MPI_Iallreduce, minimum), to which ranks
 * that are done contribute 1 and busy ranks 0. A waiting rank waits for one tick at a time,
 * each bounded by the timeout, until a tick says every rank is done; a rank that stops ticking
 * (dead, or stuck in one step for longer than the timeout) still ends the job within the
 * timeout. Each rank keeps at most one tick posted, so the ticks need no list: a busy rank
 * whose last tick has not completed yet (a peer is busier) skips one instead of queueing.
 * Every rank sees the same tick results, so all of them leave at the same tick. */
#include "control/control.h"

/* The longest gap between a busy rank's ticks, when the timeout does not ask for less. */
#define RF_BUSY_TICK 1.0

static double tick_interval(const rf_control *ctl) {
  double quarter = ctl->timeout / 4;
  return quarter < RF_BUSY_TICK ? quarter : RF_BUSY_TICK;
}

static rf_status post_tick(rf_control *ctl, int done) {
  ctl->tick_in = done;
  ctl->tick_last = rf_now();
  RF_MPI(
      MPI_Iallreduce(&ctl->tick_in, &ctl->tick_out, 1, MPI_INT, MPI_MIN, ctl->world, &ctl->tick));
  return RF_OK;
}

void rf_control_busy_begin(rf_control *ctl) {
  ctl->busy = 1;
  ctl->tick_last = rf_now();
}

void rf_control_busy(void *control) {
  rf_control *ctl = control;
  if (!ctl->busy || ctl->timed_out || rf_now() - ctl->tick_last < tick_interval(ctl))
    return;
  if (ctl->tick != MPI_REQUEST_NULL) {
    int done = 0;
    if (MPI_Test(&ctl->tick, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done)
      return; /* a failed test shows again in rf_control_agree_busy's wait */
  }
  if (post_tick(ctl, 0) != RF_OK)
    ctl->busy = 0; /* logged; the agreement's wait fails too, with a timeout line */
}

rf_status rf_control_agree_busy(rf_control *ctl, rf_status local) {
  rf_status st = RF_OK;
  ctl->busy = 0;
  if (ctl->tick != MPI_REQUEST_NULL)
    st = rf_control_wait(ctl, &ctl->tick, "a busy rank's progress (MPI_Iallreduce)");
  while (st == RF_OK) {
    st = post_tick(ctl, 1);
    if (st == RF_OK)
      st = rf_control_wait(ctl, &ctl->tick, "a busy rank's progress (MPI_Iallreduce)");
    if (st == RF_OK && ctl->tick_out == 1)
      break;
  }
  return st == RF_OK ? rf_control_agree(ctl, local) : st;
}
