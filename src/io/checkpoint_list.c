/* --checkpoint v0.safetensors,v1.safetensors,...: a list of checkpoints, the versions of the
 * trainer's weights that refit run moves one after another (docs/architecture.md, "Weight
 * versions"). The list is split on commas, so a path in it holds none. */
#include <stdio.h>
#include <string.h>

#include "io/io.h"

int rf_checkpoint_list_count(const char *list) {
  if (!list || !list[0])
    return 0;
  int n = 1;
  for (const char *p = list; *p; p++)
    n += *p == ',';
  return n;
}

rf_status rf_checkpoint_list_item(const char *list, int i, char *out, size_t len) {
  const char *at = list;
  for (int k = 0; k < i && at; k++) {
    at = strchr(at, ',');
    at = at ? at + 1 : NULL;
  }
  if (!at || i < 0)
    return rf_fail(RF_ERR_INTERNAL, "--checkpoint '%s' has no item %d", list, i + 1);
  const char *end = strchr(at, ',');
  size_t n = end ? (size_t)(end - at) : strlen(at);
  if (n == 0)
    return rf_fail(RF_ERR_USAGE,
                   "--checkpoint '%s': item %d is empty; separate the checkpoints with single "
                   "commas",
                   list, i + 1);
  if (n >= len)
    return rf_fail(RF_ERR_USAGE, "--checkpoint '%s': item %d is longer than %zu characters", list,
                   i + 1, len - 1);
  memcpy(out, at, n);
  out[n] = '\0';
  return RF_OK;
}
