/* The registry of transports compiled into this build: mpi, shm and rma always; ipc joins the table
 * in builds with CUDA, nccl in builds with CUDA and NCCL; this is the only place that knows which
 * exist. Those left out are still described (what they need, for `refit topo` planning another
 * machine's placement), by entries that cannot be opened. */
#include <stdio.h>
#include <string.h>

#include "transport.h"

RF_ENUM_DEFINE(rf_rma_direction, "rma", RF_RMA_DIRECTION_LIST, RF_RMA_DIRECTION_COUNT)
RF_ENUM_DEFINE(rf_register_unit, "register", RF_REGISTER_UNIT_LIST, RF_REGISTER_UNIT_COUNT)

static const rf_transport_ops *const registry[] = {
    &rf_transport_mpi,  &rf_transport_shm, &rf_transport_rma,
#ifdef REFIT_HAVE_NCCL
    &rf_transport_nccl,
#endif
#ifdef REFIT_HAVE_CUDA
    &rf_transport_ipc,
#endif
};

#if !defined(REFIT_HAVE_NCCL) || !defined(REFIT_HAVE_CUDA)
static rf_status absent_init(rf_transport *tp) {
  return rf_fail(RF_ERR_USAGE, "transport %s is not in this build (it needs CUDA%s)", tp->ops->name,
                 strcmp(tp->ops->name, "nccl") == 0 ? " and NCCL" : "");
}
#endif

/* The same needs as the real tables (transport_nccl.c, transport_ipc.c). */
static const rf_transport_ops *const absent[] = {
#ifndef REFIT_HAVE_NCCL
    &(const rf_transport_ops){.name = "nccl",
                              .description = "it needs CUDA and NCCL",
                              .memory = RF_MEM_DEVICE,
                              .gpu_per_rank = 1,
                              .limit = RF_LIMIT_NCCL,
                              .ordered = 1,
                              .init = absent_init},
#endif
#ifndef REFIT_HAVE_CUDA
    &(const rf_transport_ops){.name = "ipc",
                              .description = "it needs CUDA",
                              .memory = RF_MEM_DEVICE,
                              .gpu_per_rank = 0,
                              .limit = RF_LIMIT_DEVICE_COPY,
                              .mapping = 1,
                              .init = absent_init},
#endif
    NULL,
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

rf_status rf_transport_describe(const char *name, const rf_transport_ops **out) {
  for (int i = 0; absent[i]; i++)
    if (strcmp(absent[i]->name, name) == 0) {
      *out = absent[i];
      return RF_OK;
    }
  for (int i = 0; i < rf_transport_count(); i++)
    if (strcmp(registry[i]->name, name) == 0) {
      *out = registry[i];
      return RF_OK;
    }
  /* Every transport refit has, built here or not, since the caller describes another machine. */
  char names[256];
  rf_transport_names(names, sizeof names);
  size_t used = strlen(names);
  for (int i = 0; absent[i] && used < sizeof names; i++)
    used += (size_t)snprintf(names + used, sizeof names - used, ", %s", absent[i]->name);
  return rf_fail(RF_ERR_USAGE, "option --transport: '%s' is not a transport; refit has %s", name,
                 names);
}

rf_status rf_transport_check_register(const rf_transport_ops *t, rf_register_unit unit) {
  if (unit != RF_REGISTER_ARENA && !t->one_sided)
    return rf_fail(RF_ERR_USAGE,
                   "option --register %s: the %s transport registers no memory; "
                   "use --transport rma, or leave --register out",
                   rf_register_unit_name(unit), t->name);
  return RF_OK;
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
