/* The views of the status list: name, text and exit code, all generated from RF_STATUS_LIST. */
#include "core.h"

static const struct {
  const char *name;
  const char *text;
  int exit_code;
} status_table[] = {
#define RF_X_ROW(name, exit_code, text) {#name, text, exit_code},
    RF_STATUS_LIST(RF_X_ROW)
#undef RF_X_ROW
};

static int status_valid(rf_status st) { return (int)st >= 0 && st < RF_STATUS_COUNT; }

const char *rf_status_name(rf_status st) {
  return status_valid(st) ? status_table[st].name : "RF_ERR_UNKNOWN";
}

const char *rf_status_text(rf_status st) {
  return status_valid(st) ? status_table[st].text : "unknown status";
}

int rf_status_exit_code(rf_status st) { return status_valid(st) ? status_table[st].exit_code : 3; }

/* Rank order for combining verdicts across ranks: usage (2) beats verification (1) beats
 * runtime (3); RF_ERR_PEER only says "someone else failed" and loses to any real cause. */
static int severity(rf_status st) {
  if (st == RF_OK)
    return 0;
  if (st == RF_ERR_PEER)
    return 1;
  switch (rf_status_exit_code(st)) {
  case 2:
    return 4;
  case 1:
    return 3;
  default:
    return 2;
  }
}

rf_status rf_status_worse(rf_status a, rf_status b) { return severity(b) > severity(a) ? b : a; }
