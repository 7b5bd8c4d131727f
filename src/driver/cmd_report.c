/* `refit report FILE.h5... -o DIR`: reads every results file, then writes the page, the
 * Markdown and the CSV tables. No MPI: a report is made on a laptop from copied files. */
#include <stdio.h>
#include <stdlib.h>

#include "driver.h"
#include "report/report.h"

rf_status rf_cmd_report(const rf_config *cfg) {
  if (cfg->input_count < 1)
    return rf_fail(RF_ERR_USAGE, "refit report needs at least one results file; see refit "
                                 "report --help");
  rf_loaded_results files[RF_MAX_INPUTS] = {0};
  rf_status st = RF_OK;
  int loaded = 0, runs = 0;
  for (; loaded < cfg->input_count && st == RF_OK; loaded++) {
    st = rf_results_load(cfg->inputs[loaded], &files[loaded]);
    runs += files[loaded].run_count;
  }
  if (st == RF_OK)
    st = rf_report_write(files, cfg->input_count, cfg->output_dir);
  if (st == RF_OK)
    printf("report: %s/report.html, report.md and CSV tables from %d run(s) in %d file(s)\n",
           cfg->output_dir, runs, cfg->input_count);
  for (int i = 0; i < loaded; i++)
    rf_loaded_results_free(&files[i]);
  return st;
}
