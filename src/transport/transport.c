/* The registry of transports compiled into this build: ipc joins the table in builds with
 * CUDA, nccl in builds with CUDA and NCCL; this is the only place that knows which exist. */
#include <stdio.h>
#include <string.h>

#include "transport.h"

static const rf_transport_ops *const registry[] = {
    &rf_transport_mpi,
#ifdef REFIT_HAVE_NCCL
    &rf_transport_nccl,
#endif
#ifdef REFIT_HAVE_CUDA
    &rf_transport_ipc,
#endif
};

int rf_transport_count(void) { return (int)RF_ARRAY_LEN(registry); }

const rf_transport_ops *rf_transport_at(int index) {
  return index >= 0 && index < rf_transport_count() ? registry[index] : NULL;
}

void rf_transport_names(char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < rf_transport_count() && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "", registry[i]->name);
}

rf_status rf_transport_find(const char *name, const rf_transport_ops **out) {
  for (int i = 0; i < rf_transport_count(); i++)
    if (strcmp(registry[i]->name, name) == 0) {
      *out = registry[i];
      return RF_OK;
    }
  char names[256];
  rf_transport_names(names, sizeof names);
  return rf_fail(RF_ERR_USAGE, "option --transport: '%s' is not in this build; available: %s", name,
                 names);
}

rf_status rf_transport_open(const rf_transport_ops *ops, rf_control *ctl, const rf_plan *plan,
                            rf_transport *tp) {
  memset(tp, 0, sizeof *tp);
  tp->ops = ops;
  tp->ctl = ctl;
  tp->plan = plan;
  return ops->init(tp);
}

void rf_transport_close(rf_transport *tp) {
  if (tp->ops)
    tp->ops->finalize(tp);
  memset(tp, 0, sizeof *tp);
}
