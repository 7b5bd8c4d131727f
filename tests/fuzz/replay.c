/* Runs a fuzz target's LLVMFuzzerTestOneInput once on each file given, or on each file of each
 * directory given, the way `fuzz_<reader> -runs=0 DIR...` does under libFuzzer: the builds
 * without libFuzzer replay the seed corpora and the regression inputs with this. Arguments that
 * start with '-' (libFuzzer flags) are ignored. Exits 0 when every input ran, 2 when an
 * argument cannot be read, and a crash ends the process as it would under libFuzzer. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
    return -1;
  }
  size_t cap = 4096, n = 0, got;
  uint8_t *data = malloc(cap);
  while (data && (got = fread(data + n, 1, cap - n, f)) > 0)
    if ((n += got) == cap)
      data = realloc(data, cap *= 2);
  fclose(f);
  if (!data) {
    fprintf(stderr, "replay: %s: out of memory\n", path);
    return -1;
  }
  LLVMFuzzerTestOneInput(data, n);
  free(data);
  return 0;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The files of a directory in name order, so that a failing run is the same run every time. */
static int run_dir(const char *path, int *count) {
  DIR *d = opendir(path);
  if (!d) {
    fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
    return -1;
  }
  char **names = NULL;
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    names = realloc(names, (n + 1) * sizeof *names);
    names[n] = malloc(strlen(path) + strlen(e->d_name) + 2);
    sprintf(names[n++], "%s/%s", path, e->d_name);
  }
  closedir(d);
  qsort(names, n, sizeof *names, by_name);
  int rc = 0;
  for (size_t i = 0; i < n; i++) {
    if (rc == 0 && run_file(names[i]) != 0)
      rc = -1;
    free(names[i]);
    (*count)++;
  }
  free(names);
  return rc;
}

int main(int argc, char **argv) {
  int count = 0;
  for (int i = 1; i < argc; i++) {
    struct stat sb;
    if (argv[i][0] == '-')
      continue;
    if (stat(argv[i], &sb) != 0) {
      fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
      return 2;
    }
    if (S_ISDIR(sb.st_mode) ? run_dir(argv[i], &count) != 0 : (count++, run_file(argv[i]) != 0))
      return 2;
  }
  printf("replay: %d inputs ran\n", count);
  return 0;
}
