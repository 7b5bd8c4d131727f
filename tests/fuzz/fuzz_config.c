/* The --config JSON file of `refit run` (src/cli/cli_config.c), through the public parser so
 * that the sweep lists and the option values are checked as for a user; a config that loads is
 * printed back both ways, which reads every field it set. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static rf_config cfg; /* tens of kilobytes with the sweep lists: not on the stack */
  fuzz_quiet();
  const char *path = fuzz_write("job.json", data, size);
  char *argv[] = {"refit", "run", "--config", (char *)path, NULL};
  if (rf_cli_parse(4, argv, &cfg) == RF_OK) {
    FILE *null = fopen("/dev/null", "w");
    if (null) {
      rf_cli_print_config(&cfg, null, "");
      fclose(null);
    }
    free(rf_cli_config_json(&cfg));
  }
  return 0;
}
