/* `refit report`: placeholder until the report module lands. */
#include "driver.h"

rf_status rf_cmd_report(const rf_config *cfg) {
  (void)cfg;
  return rf_fail(RF_ERR_USAGE, "refit report is not in this build yet");
}
