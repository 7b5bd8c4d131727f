/* The library's status strings, versions, contexts and the capture of a call's error line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

/* refit.h's statuses are refit's own, in the same order: a status passes through unchanged. */
_Static_assert((int)REFIT_ERR_USAGE == (int)RF_ERR_USAGE, "refit_status follows rf_status");
_Static_assert((int)REFIT_ERR_VERIFY == (int)RF_ERR_VERIFY, "refit_status follows rf_status");
_Static_assert((int)REFIT_ERR_TIMEOUT == (int)RF_ERR_TIMEOUT, "refit_status follows rf_status");
_Static_assert((int)REFIT_ERR_INTERNAL == (int)RF_ERR_INTERNAL &&
                   RF_ERR_INTERNAL + 1 == RF_STATUS_COUNT,
               "refit_status follows rf_status");
_Static_assert(REFIT_PHASE_COUNT == RF_PHASE_COUNT, "refit.h names every phase");

const char *refit_status_string(refit_status st) {
  if ((int)st < 0 || (int)st >= RF_STATUS_COUNT)
    return "unknown status";
  return rf_status_text((rf_status)st);
}

int refit_api_version(void) { return REFIT_API_VERSION; }

const char *refit_version_string(void) {
  static char text[96]; /* the same text every time: written once, then only read */
  if (!text[0])
    snprintf(text, sizeof text, "%s (git %s)", rf_version, rf_git_commit);
  return text;
}

const char *refit_phase_name(int phase) {
  if (phase < 0 || phase >= RF_PHASE_COUNT)
    return NULL;
  return rf_phase_name((rf_phase)phase);
}

void rf_api_capture_begin(rf_api_capture *c, char *error) {
  rf_log_capture_current(&c->saved, &c->saved_len);
  c->error = error;
  c->line[0] = '\0';
  rf_log_capture(c->line, sizeof c->line);
}

refit_status rf_api_capture_end(rf_api_capture *c, rf_status st) {
  rf_log_capture(c->saved, c->saved_len);
  if (st != RF_OK && c->line[0])
    snprintf(c->error, RF_API_ERROR_MAX, "%s", c->line);
  else if (st != RF_OK)
    snprintf(c->error, RF_API_ERROR_MAX, "%s (another rank has the message)", rf_status_text(st));
  return (refit_status)st;
}

refit_status refit_context_create(refit_context **out) {
  if (!out)
    return REFIT_ERR_USAGE;
  *out = NULL;
  refit_context *ctx = calloc(1, sizeof *ctx);
  if (!ctx)
    return REFIT_ERR_NOMEM;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) {
    free(ctx);
    return REFIT_ERR_MPI;
  }
  if (!initialized) {
    /* Under mpirun, a Python process without mpi4py has no other way to start MPI. */
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
      free(ctx);
      return REFIT_ERR_MPI;
    }
    ctx->finalize_mpi = 1;
  }
  rf_log_init_from_env();
  *out = ctx;
  return REFIT_OK;
}

void refit_context_destroy(refit_context *ctx) {
  if (!ctx)
    return;
  if (ctx->jobs > 0) {
    /* Its jobs still point at it, and MPI must outlive their communicators. */
    snprintf(ctx->error, sizeof ctx->error,
             "refit_context_destroy: %d jobs of this context are still alive; destroy them first",
             ctx->jobs);
    return;
  }
  if (ctx->finalize_mpi)
    MPI_Finalize();
  free(ctx);
}

const char *refit_context_error(const refit_context *ctx) { return ctx ? ctx->error : ""; }
