/* `refit report`'s files: the directory, report.html, report.md and one CSV per table. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "report_internal.h"

/* mkdir -p: each missing parent is created in turn, so `-o out/today/report` works. */
static rf_status make_dir(const char *dir) {
  char path[1024];
  if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
    return rf_fail(RF_ERR_USAGE, "report directory '%s' is too long a path; choose a shorter -o",
                   dir);
  for (char *p = path + 1;; p++) {
    if (*p != '/' && *p != '\0')
      continue;
    char was = *p;
    *p = '\0';
    struct stat sb;
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
      return rf_fail(RF_ERR_USAGE, "report directory '%s' cannot be created: %s; choose another -o",
                     dir, strerror(errno));
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
      return rf_fail(RF_ERR_USAGE,
                     "report directory '%s' cannot be created: '%s' is not a directory; choose "
                     "another -o",
                     dir, path);
    *p = was;
    if (was == '\0')
      return RF_OK;
  }
}

/* Each file is written under a name that mkstemp creates exclusively in the report directory
 * and then renamed over report.html and the others: a symlink planted at one of those names,
 * or at any predictable temporary name, is replaced, never followed, and a reader never sees a
 * half-written report. */
static rf_status write_file(const char *dir, const char *name, const char *ext,
                            const rf_strbuf *text) {
  char path[1200], tmp[1220];
  snprintf(path, sizeof path, "%s/%s%s", dir, name, ext);
  if (!text->data || text->failed)
    return rf_fail(RF_ERR_NOMEM, "out of memory building '%s'", path);
  snprintf(tmp, sizeof tmp, "%s.partial-XXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0)
    return rf_fail(RF_ERR_IO, "cannot write '%s': %s; choose another -o", path, strerror(errno));
  /* mkstemp makes the file 0600; a report is as readable as any file the user creates. */
  mode_t mask = umask(0);
  umask(mask);
  int ok = fchmod(fd, 0666 & ~mask) == 0;
  for (size_t done = 0; ok && done < text->len;) {
    ssize_t put = write(fd, text->data + done, text->len - done);
    if (put < 0 && errno == EINTR)
      continue;
    ok = put > 0;
    done += ok ? (size_t)put : 0;
  }
  int err = errno;
  if (close(fd) != 0 && ok)
    ok = 0, err = errno;
  if (ok && rename(tmp, path) != 0)
    ok = 0, err = errno;
  if (!ok) {
    unlink(tmp);
    return rf_fail(RF_ERR_IO, "cannot write '%s': %s; free some space or choose another -o", path,
                   strerror(err));
  }
  return RF_OK;
}

static rf_status write_all(const rf_loaded_results *files, int count, const char *dir,
                           const rf_report_tables *t) {
  const rf_report_table *tables[11] = {&t->runs,   &t->status, &t->modes, &t->layouts,
                                       &t->phases, &t->spread, &t->limits};
  int shown = 7;
  /* The comparison needs a second file, the delta section a delta run, the predictions a
   * simulated run. */
  if (count > 1)
    tables[shown++] = &t->compare;
  if (rf_report_has_delta(files, count))
    tables[shown++] = &t->delta;
  if (rf_report_has_simulated(files, count)) {
    tables[shown++] = &t->simulated;
    tables[shown++] = &t->published;
  }
  rf_strbuf md = {0};
  rf_strbuf_printf(&md, "# refit report\n\n| file | path | created | refit | runs |\n"
                        "|---:|---|---|---|---:|\n");
  for (int f = 0; f < count; f++)
    rf_strbuf_printf(&md, "| %d | %s | %s | %s | %d |\n", f + 1, files[f].path, files[f].created,
                     files[f].refit_version, files[f].run_count);
  rf_strbuf_printf(&md, "\n");
  rf_status st = RF_OK;
  for (int i = 0; i < shown && st == RF_OK; i++) {
    rf_strbuf csv = {0};
    rf_report_table_csv(tables[i], &csv);
    st = write_file(dir, tables[i]->id, ".csv", &csv);
    rf_strbuf_free(&csv);
    rf_report_table_md(tables[i], &md);
  }
  if (st == RF_OK)
    st = write_file(dir, "report", ".md", &md);
  rf_strbuf_free(&md);
  rf_strbuf html = {0};
  if (st == RF_OK)
    st = rf_report_html(files, count, t, &html);
  if (st == RF_OK)
    st = write_file(dir, "report", ".html", &html);
  rf_strbuf_free(&html);
  return st;
}

rf_status rf_report_write(const rf_loaded_results *files, int count, const char *dir) {
  RF_TRY(make_dir(dir));
  rf_report_tables t;
  memset(&t, 0, sizeof t);
  rf_status st = rf_report_build_tables(files, count, &t);
  if (st == RF_ERR_NOMEM)
    rf_fail(st, "out of memory building the report's tables");
  if (st == RF_OK)
    st = write_all(files, count, dir, &t);
  rf_report_tables_free(&t);
  return st;
}
