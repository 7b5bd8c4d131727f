/* The JSON config file: one object whose keys are long option names ('_' and '-'
 * interchangeable) and whose values have the option's JSON type. Every problem is reported as
 * `FILE:LINE:COLUMN: ...` at the key it concerns, like a compiler, so that an editor can jump
 * there. jansson keeps no positions for parsed values, so a key is found again in the text. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli_internal.h"

/* 1-based line and column of a byte offset, counting columns in characters as jansson does,
 * so that its positions and ours agree on lines with UTF-8 text. */
static void position_of(const char *text, size_t offset, int *line, int *col) {
  *line = 1;
  *col = 1;
  for (size_t i = 0; i < offset; i++) {
    if (text[i] == '\n') {
      (*line)++;
      *col = 1;
    } else if (((unsigned char)text[i] & 0xC0) != 0x80) {
      (*col)++;
    }
  }
}

/* Byte offset of the opening quote of key as a member name of the top-level object, or -1.
 * Strings are skipped whole, so a value or a nested key that spells the same never matches;
 * a key written with escapes is not recognised and gets no position. */
static long find_key(const char *text, size_t len, const char *key) {
  size_t klen = strlen(key);
  int depth = 0;
  for (size_t i = 0; i < len; i++) {
    if (text[i] == '{' || text[i] == '[') {
      depth++;
    } else if (text[i] == '}' || text[i] == ']') {
      depth--;
    } else if (text[i] == '"') {
      size_t start = i++;
      while (i < len && text[i] != '"')
        i += text[i] == '\\' ? 2 : 1;
      if (i >= len)
        return -1;
      if (depth != 1 || i - start - 1 != klen || memcmp(text + start + 1, key, klen) != 0)
        continue;
      size_t j = i + 1;
      j += strspn(text + j, " \t\r\n");
      if (j < len && text[j] == ':')
        return (long)start;
    }
  }
  return -1;
}

typedef struct {
  const char *path;
  const char *text;
  size_t len;
  rf_config *cfg;
  const char *seen[RF_CLI_MAX_OPTIONS]; /* the spelling each option was first given under */
} config_file;

/* "FILE:LINE:COLUMN" of key, or "FILE" when it cannot be found in the text. */
static const char *where(const config_file *cf, const char *key, char *buf, size_t len) {
  long at = find_key(cf->text, cf->len, key);
  if (at < 0) {
    snprintf(buf, len, "%s", cf->path);
  } else {
    int line, col;
    position_of(cf->text, (size_t)at, &line, &col);
    snprintf(buf, len, "%s:%d:%d", cf->path, line, col);
  }
  return buf;
}

static const char *json_kind(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT:
    return "an object";
  case JSON_ARRAY:
    return "a list";
  case JSON_STRING:
    return "a string";
  case JSON_INTEGER:
    return "an integer";
  case JSON_REAL:
    return "a real number";
  case JSON_TRUE:
  case JSON_FALSE:
    return "a boolean";
  case JSON_NULL:
    break;
  }
  return "null";
}

static rf_status wrong_type(const char *expected, const json_t *v, char *why, size_t len) {
  snprintf(why, len, "expected %s, not %s", expected, json_kind(v));
  return RF_ERR_USAGE;
}

/* Stores one value. Integers are turned back into text and go through the command-line
 * parsers, so a file and the command line accept and refuse exactly the same values. */
static rf_status set_json(const rf_cli_option *o, const json_t *v, rf_config *cfg, char *why,
                          size_t len) {
  char shown[64];
  if (json_is_integer(v))
    snprintf(shown, sizeof shown, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
  switch (o->type) {
  case RF_OPT_STRING:
  case RF_OPT_ENUM:
  case RF_OPT_CHOICE:
    if (!json_is_string(v))
      return wrong_type("a string", v, why, len);
    if (strlen(json_string_value(v)) != json_string_length(v)) {
      snprintf(why, len, "the string holds a NUL character");
      return RF_ERR_USAGE;
    }
    return rf_cli_set_text(o, json_string_value(v), cfg, why, len);
  case RF_OPT_SIZE:
    if (json_is_string(v))
      return rf_cli_set_text(o, json_string_value(v), cfg, why, len);
    if (!json_is_integer(v))
      return wrong_type("a byte count or a size string such as \"64MiB\"", v, why, len);
    return rf_cli_set_text(o, shown, cfg, why, len);
  case RF_OPT_INT:
    if (!json_is_integer(v))
      return wrong_type("an integer", v, why, len);
    return rf_cli_set_text(o, shown, cfg, why, len);
  case RF_OPT_DOUBLE:
    if (!json_is_number(v))
      return wrong_type("a number", v, why, len);
    rf_cli_format_double(json_number_value(v), shown, sizeof shown);
    RF_TRY(rf_cli_check_double(o, json_number_value(v), shown, why, len));
    rf_cli_store_double(o, cfg, json_number_value(v));
    return RF_OK;
  case RF_OPT_FLAG:
    if (!json_is_boolean(v))
      return wrong_type("true or false", v, why, len);
    rf_cli_store_flag(o, cfg, json_is_true(v));
    return RF_OK;
  }
  return RF_ERR_INTERNAL;
}

/* A list element as the command line would give it: a string as is, an integer in base 10. */
static rf_status element_text(const json_t *v, char *out, size_t len, char *why, size_t why_len) {
  int n = json_is_string(v)    ? snprintf(out, len, "%s", json_string_value(v))
          : json_is_integer(v) ? snprintf(out, len, "%" JSON_INTEGER_FORMAT, json_integer_value(v))
                               : 0;
  if (n < 0 || (size_t)n >= len) {
    snprintf(why, why_len, "the value is longer than %zu characters", len - 1);
    return RF_ERR_USAGE;
  }
  return RF_OK;
}

rf_status rf_cli_sweep_set(rf_config *cfg, const rf_cli_option *o, char texts[][RF_SWEEP_VALUE_MAX],
                           int n, char *why, size_t why_len) {
  rf_sweep *sw = &cfg->sweep;
  if (o->list) { /* a list of modes: one job that runs each in turn */
    char joined[RF_SWEEP_MAX_VALUES * RF_SWEEP_VALUE_MAX];
    size_t used = 0;
    joined[0] = '\0';
    for (int i = 0; i < n; i++)
      used += (size_t)snprintf(joined + used, sizeof joined - used, "%s%s", i ? "," : "", texts[i]);
    return rf_cli_set_text(o, joined, cfg, why, why_len);
  }
  for (int i = n - 1; i >= 0; i--) /* every value is checked; the first one stays */
    RF_TRY(rf_cli_set_text(o, texts[i], cfg, why, why_len));
  if (n < 2)
    return RF_OK;
  if (sw->axis_count == RF_SWEEP_MAX_AXES) {
    snprintf(why, why_len, "a sweep has at most %d lists", RF_SWEEP_MAX_AXES);
    return RF_ERR_USAGE;
  }
  rf_sweep_axis *axis = &sw->axes[sw->axis_count++];
  memset(axis, 0, sizeof *axis);
  snprintf(axis->name, sizeof axis->name, "%s", o->name);
  axis->count = n;
  for (int i = 0; i < n; i++)
    memcpy(axis->values[i], texts[i], RF_SWEEP_VALUE_MAX);
  return RF_OK;
}

rf_status rf_cli_set_command_line(rf_config *cfg, const rf_cli_option *o, const char *text,
                                  char *why, size_t why_len) {
  char sep = o->separator ? o->separator : ',';
  if (!o->sweep || o->list || cfg->command != RF_CMD_RUN || !strchr(text, sep))
    return rf_cli_set_text(o, text, cfg, why, why_len);
  char texts[RF_SWEEP_MAX_VALUES][RF_SWEEP_VALUE_MAX];
  int n = 0;
  for (const char *p = text;; p++) {
    size_t len = strcspn(p, (char[]){sep, '\0'});
    if (len == 0) {
      snprintf(why, why_len, "'%s' has an empty value; separate the values with '%c'", text, sep);
      return RF_ERR_USAGE;
    }
    if (n == RF_SWEEP_MAX_VALUES || len >= RF_SWEEP_VALUE_MAX) {
      snprintf(why, why_len,
               "'%.40s...' holds more than %d values or a value longer than %d "
               "characters",
               text, RF_SWEEP_MAX_VALUES, RF_SWEEP_VALUE_MAX - 1);
      return RF_ERR_USAGE;
    }
    snprintf(texts[n++], RF_SWEEP_VALUE_MAX, "%.*s", (int)len, p);
    p += len;
    if (!*p)
      break;
  }
  return rf_cli_sweep_set(cfg, o, texts, n, why, why_len);
}

/* A list: every element is checked as the scalar would be, the field keeps the first one and
 * the texts become a sweep axis (or, for mode, one comma-separated list of modes). */
static rf_status apply_list(config_file *cf, const rf_cli_option *o, const char *key,
                            const json_t *list, const char *at) {
  rf_config *cfg = cf->cfg;
  size_t n = json_array_size(list);
  char why[512], texts[RF_SWEEP_MAX_VALUES][RF_SWEEP_VALUE_MAX];
  if (!o->sweep || cfg->command != RF_CMD_RUN)
    return rf_fail(RF_ERR_USAGE,
                   "%s: key '%s' holds a list; only mode, plan, transport, trainer, "
                   "rollout, rollout_dtype, placement, bucket_size and model can be swept, by "
                   "refit run",
                   at, key);
  if (n == 0 || n > RF_SWEEP_MAX_VALUES)
    return rf_fail(RF_ERR_USAGE, "%s: key '%s' holds %zu values; give 1 to %d", at, key, n,
                   RF_SWEEP_MAX_VALUES);
  for (size_t i = 0; i < n; i++) {
    const json_t *v = json_array_get(list, i);
    if (set_json(o, v, cfg, why, sizeof why) != RF_OK ||
        element_text(v, texts[i], RF_SWEEP_VALUE_MAX, why, sizeof why) != RF_OK)
      return rf_fail(RF_ERR_USAGE, "%s: key '%s', value %zu: %s", at, key, i + 1, why);
  }
  if (rf_cli_sweep_set(cfg, o, texts, (int)n, why, sizeof why) != RF_OK)
    return rf_fail(RF_ERR_USAGE, "%s: key '%s': %s", at, key, why);
  return RF_OK;
}

void rf_cli_sweep_drop(rf_config *cfg, const rf_cli_option *o) {
  rf_sweep *sw = &cfg->sweep;
  for (int i = 0; i < sw->axis_count; i++)
    if (strcmp(sw->axes[i].name, o->name) == 0) {
      memmove(&sw->axes[i], &sw->axes[i + 1], (size_t)(sw->axis_count - i - 1) * sizeof *sw->axes);
      sw->axis_count--;
      return;
    }
}

rf_status rf_cli_set_option(rf_config *cfg, const char *name, const char *text) {
  const rf_cli_option *o = rf_cli_find_option(name);
  char why[512];
  if (!o)
    return rf_fail(RF_ERR_USAGE, "option --%s does not exist; see refit run --help", name);
  if (rf_cli_set_text(o, text, cfg, why, sizeof why) != RF_OK)
    return rf_fail(RF_ERR_USAGE, "option --%s: %s", o->name, why);
  return RF_OK;
}

static rf_status apply_key(config_file *cf, const char *key, const json_t *value) {
  const char *cmd = rf_command_name(cf->cfg->command);
  const rf_cli_option *o = rf_cli_find_option(key);
  char at[RF_PATH_MAX + 32], why[512];
  where(cf, key, at, sizeof at);
  if (!o)
    return rf_fail(RF_ERR_USAGE, "%s: unknown key '%s'; see refit %s --help", at, key, cmd);
  if (!(o->commands & (unsigned)cf->cfg->command))
    return rf_fail(RF_ERR_USAGE, "%s: key '%s' does not apply to 'refit %s'", at, key, cmd);
  size_t index = (size_t)(o - rf_cli_options);
  if (cf->seen[index])
    return rf_fail(RF_ERR_USAGE, "%s: key '%s' repeats '%s'", at, key, cf->seen[index]);
  cf->seen[index] = key;
  if (json_is_array(value))
    return apply_list(cf, o, key, value, at);
  if (strcmp(o->name, "config") == 0) {
    /* Not followed: a file does not include another. The key is allowed so that the printed
     * configuration (rf_cli_config_json) can be fed back as a config file. */
    if (!json_is_string(value))
      return rf_fail(RF_ERR_USAGE, "%s: key '%s': expected a string, not %s", at, key,
                     json_kind(value));
    return RF_OK;
  }
  if (set_json(o, value, cf->cfg, why, sizeof why) != RF_OK)
    return rf_fail(RF_ERR_USAGE, "%s: key '%s': %s", at, key, why);
  return RF_OK;
}

rf_status rf_cli_load_config(rf_config *cfg) {
  config_file cf = {.path = cfg->config, .cfg = cfg};
  /* Only a regular file of at most RF_INPUT_MAX bytes: a FIFO (or --config <(...)) would
   * wait for its writer and a device such as /dev/urandom would never end. */
  char why[128];
  char *text = rf_read_input(cf.path, RF_INPUT_MAX, &cf.len, why, sizeof why);
  if (!text) {
    int refused = errno == EISDIR || errno == EINVAL || errno == EFBIG;
    return rf_fail(RF_ERR_USAGE, "%s: cannot read the config file: %s%s", cf.path, why,
                   refused ? "; give a JSON file of options" : "");
  }
  cf.text = text;
  json_error_t err;
  json_t *root = json_loadb(text, cf.len, JSON_REJECT_DUPLICATES, &err);
  rf_status st = RF_OK;
  if (!root) {
    st = rf_fail(RF_ERR_USAGE, "%s:%d:%d: %s", cf.path, err.line, RF_MAX(err.column, 1), err.text);
  } else if (!json_is_object(root)) {
    int line, col;
    position_of(text, strspn(text, " \t\r\n"), &line, &col);
    st = rf_fail(RF_ERR_USAGE, "%s:%d:%d: the file must hold one object of option names, not %s",
                 cf.path, line, col, json_kind(root));
  } else {
    const char *key;
    json_t *value;
    json_object_foreach(root, key, value) {
      st = apply_key(&cf, key, value);
      if (st != RF_OK)
        break;
    }
  }
  json_decref(root);
  free(text);
  return st;
}
