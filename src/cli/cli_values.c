/* Option values: the strict parsers for sizes, integers and doubles, storing a value into its
 * rf_config field, and printing the effective configuration as text and as JSON.
 *
 * Sizes are a base-10 number with an optional unit: B, KiB, MiB, GiB, TiB, PiB (powers of 1024)
 * or kB/KB, MB, GB, TB, PB (powers of 1000), case as written here, no space before the unit.
 * A decimal fraction is accepted when the result is a whole number of bytes ("1.5GiB",
 * "0.5KiB"), because people write sizes that way; "1.5B" or "0.3KiB" are refused rather than
 * rounded, so a size always means exactly what it says. Signs, exponents, hex and spaces are
 * refused. */
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli_internal.h"

static const struct {
  const char *suffix;
  int64_t mult;
} size_units[] = {
    {"", 1},
    {"B", 1},
    {"KiB", INT64_C(1) << 10},
    {"MiB", INT64_C(1) << 20},
    {"GiB", INT64_C(1) << 30},
    {"TiB", INT64_C(1) << 40},
    {"PiB", INT64_C(1) << 50},
    {"kB", INT64_C(1000)},
    {"KB", INT64_C(1000)},
    {"MB", INT64_C(1000000)},
    {"GB", INT64_C(1000000000)},
    {"TB", INT64_C(1000000000000)},
    {"PB", INT64_C(1000000000000000)},
};

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* Reads a run of digits as an integer, noting overflow instead of stopping, so that the
 * syntax is checked in full before the size is judged too large. */
static const char *read_digits(const char *p, int64_t *value, int *digits, int *overflow) {
  *value = 0;
  *digits = 0;
  for (; is_digit(*p); p++, (*digits)++)
    if (__builtin_mul_overflow(*value, 10, value) ||
        __builtin_add_overflow(*value, *p - '0', value))
      *overflow = 1;
  return p;
}

rf_status rf_parse_size(const char *text, int64_t *out, char *why, size_t why_len) {
  static const char hint[] = "(use e.g. 64MiB, 1GiB or a byte count)";
  if (text[0] == '-') {
    snprintf(why, why_len, "'%s' is negative; a size is 0 or more bytes", text);
    return RF_ERR_USAGE;
  }
  int64_t whole = 0, frac = 0;
  int whole_digits = 0, frac_digits = 0, overflow = 0;
  const char *p = read_digits(text, &whole, &whole_digits, &overflow);
  int point = *p == '.';
  if (point)
    p = read_digits(p + 1, &frac, &frac_digits, &overflow);
  size_t unit = RF_ARRAY_LEN(size_units);
  for (size_t i = 0; i < RF_ARRAY_LEN(size_units); i++)
    if (strcmp(p, size_units[i].suffix) == 0)
      unit = i;
  /* A point needs digits on both sides, and 18 fraction digits keep 10^k inside int64. */
  if (whole_digits == 0 || unit == RF_ARRAY_LEN(size_units) ||
      (point && (frac_digits == 0 || frac_digits > 18))) {
    snprintf(why, why_len, "'%s' is not a size %s", text, hint);
    return RF_ERR_USAGE;
  }
  int64_t mult = size_units[unit].mult, bytes = 0, part = 0;
  if (frac_digits > 0) {
    /* whole·mult + frac·mult/10^k must be whole: with g = gcd(mult, 10^k), 10^k/g must divide
     * frac, which keeps every product below in int64 whenever the result fits. */
    int64_t pow10 = 1;
    for (int i = 0; i < frac_digits; i++)
      pow10 *= 10;
    int64_t g = gcd64(mult, pow10);
    if (frac % (pow10 / g) != 0) {
      snprintf(why, why_len, "'%s' is not a whole number of bytes", text);
      return RF_ERR_USAGE;
    }
    if (__builtin_mul_overflow(frac / (pow10 / g), mult / g, &part))
      overflow = 1;
  }
  if (overflow || __builtin_mul_overflow(whole, mult, &bytes) ||
      __builtin_add_overflow(bytes, part, &bytes)) {
    snprintf(why, why_len, "'%s' is too large; the largest size is %" PRId64 " bytes", text,
             INT64_MAX);
    return RF_ERR_USAGE;
  }
  *out = bytes;
  return RF_OK;
}

static rf_status int_out_of_range(const char *shown, int64_t min, int64_t max, char *why,
                                  size_t why_len) {
  snprintf(why, why_len, "'%s' is out of range %" PRId64 "..%" PRId64, shown, min, max);
  return RF_ERR_USAGE;
}

rf_status rf_parse_int(const char *text, int64_t min, int64_t max, int64_t *out, char *why,
                       size_t why_len) {
  /* strtoll alone would accept spaces, a '+' and trailing junk; check the shape first. */
  const char *p = text + (text[0] == '-');
  if (!is_digit(*p) || p[strspn(p, "0123456789")] != '\0') {
    snprintf(why, why_len, "'%s' is not an integer", text);
    return RF_ERR_USAGE;
  }
  errno = 0;
  long long v = strtoll(text, NULL, 10);
  if (errno == ERANGE || v < min || v > max)
    return int_out_of_range(text, min, max, why, why_len);
  *out = (int64_t)v;
  return RF_OK;
}

rf_status rf_parse_double(const char *text, double min, double max, double *out, char *why,
                          size_t why_len) {
  /* Only plain decimal notation: strtod would also take hex, "inf", "nan" and spaces. */
  char *end = NULL;
  double v = 0;
  int ok = text[0] && text[strspn(text, "0123456789.eE+-")] == '\0' && strpbrk(text, "0123456789");
  if (ok) {
    errno = 0;
    v = strtod(text, &end);
    ok = end && *end == '\0';
  }
  if (!ok) {
    snprintf(why, why_len, "'%s' is not a number", text);
    return RF_ERR_USAGE;
  }
  if (!isfinite(v) || v < min || v > max) {
    char lo[32], hi[32];
    snprintf(why, why_len, "'%s' is out of range [%s, %s]", text,
             rf_cli_format_double(min, lo, sizeof lo), rf_cli_format_double(max, hi, sizeof hi));
    return RF_ERR_USAGE;
  }
  *out = v;
  return RF_OK;
}

const char *rf_cli_format_double(double v, char *buf, size_t len) {
  snprintf(buf, len, "%.15g", v);
  if (strtod(buf, NULL) != v)
    snprintf(buf, len, "%.17g", v);
  return buf;
}

rf_status rf_cli_check_int(const rf_cli_option *o, int64_t v, const char *shown, char *why,
                           size_t why_len) {
  if (v < o->imin || v > o->imax)
    return int_out_of_range(shown, o->imin, o->imax, why, why_len);
  return RF_OK;
}

rf_status rf_cli_check_double(const rf_cli_option *o, double v, const char *shown, char *why,
                              size_t why_len) {
  if (isfinite(v) && (o->dmin_open ? v > o->dmin : v >= o->dmin) && v <= o->dmax)
    return RF_OK;
  char lo[32], hi[32];
  snprintf(why, why_len, "'%s' is out of range %c%s, %s]", shown, o->dmin_open ? '(' : '[',
           rf_cli_format_double(o->dmin, lo, sizeof lo),
           rf_cli_format_double(o->dmax, hi, sizeof hi));
  return RF_ERR_USAGE;
}

void rf_cli_store_int(const rf_cli_option *o, rf_config *cfg, int64_t v) {
  memcpy((char *)cfg + o->offset, &v, sizeof v);
}

void rf_cli_store_double(const rf_cli_option *o, rf_config *cfg, double v) {
  memcpy((char *)cfg + o->offset, &v, sizeof v);
}

void rf_cli_store_flag(const rf_cli_option *o, rf_config *cfg, int v) {
  memcpy((char *)cfg + o->offset, &v, sizeof v);
}

const char *rf_cli_choices(const rf_cli_option *o, char *buf, size_t len) {
  return rf_enum_choices(o->names, o->name_count, buf, len);
}

/* A comma-separated list of names into the list field (count, then the indexes): no empty
 * element, each one of the names, at most RF_MAX_MODES of them. */
static rf_status set_enum_list(const rf_cli_option *o, const char *text, rf_config *cfg, char *why,
                               size_t why_len) {
  int list[1 + RF_MAX_MODES] = {0};
  char choices[256];
  int ok = text[0] != '\0' && text[0] != ',' && text[strlen(text) - 1] != ',' &&
           strstr(text, ",,") == NULL;
  int count = 0;
  for (const char *p = text; ok && *p; p += *p == ',', count++) {
    size_t n = strcspn(p, ",");
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)n, p);
    int v = n < sizeof name ? rf_enum_find(o->names, o->name_count, name) : -1;
    ok = v >= 0;
    if (count < RF_MAX_MODES)
      list[1 + count] = v;
    p += n;
  }
  if (!ok) {
    snprintf(why, why_len, "'%s' is not one of %s, or a comma-separated list of them", text,
             rf_cli_choices(o, choices, sizeof choices));
    return RF_ERR_USAGE;
  }
  if (count > RF_MAX_MODES) {
    snprintf(why, why_len, "'%s' lists %d values; give at most %d", text, count, RF_MAX_MODES);
    return RF_ERR_USAGE;
  }
  list[0] = count;
  memcpy((char *)cfg + o->offset, list, RF_MIN(sizeof list, o->size));
  return RF_OK;
}

rf_status rf_cli_set_text(const rf_cli_option *o, const char *text, rf_config *cfg, char *why,
                          size_t why_len) {
  int64_t i = 0;
  double d = 0;
  char choices[256];
  switch (o->type) {
  case RF_OPT_ENUM:
  case RF_OPT_CHOICE:
    if (o->list)
      return set_enum_list(o, text, cfg, why, why_len);
    i = rf_enum_find(o->names, o->name_count, text);
    if (i < 0) {
      snprintf(why, why_len, "'%s' is not one of %s", text,
               rf_cli_choices(o, choices, sizeof choices));
      return RF_ERR_USAGE;
    }
    if (o->type == RF_OPT_ENUM) {
      int v = (int)i;
      memcpy((char *)cfg + o->offset, &v, sizeof v);
      return RF_OK;
    }
    __attribute__((fallthrough)); /* a choice is stored as its text */
  case RF_OPT_STRING:
    if (strlen(text) >= o->size) {
      snprintf(why, why_len, "'%.40s...' is too long (at most %zu characters)", text, o->size - 1);
      return RF_ERR_USAGE;
    }
    if (o->check)
      RF_TRY(o->check(text, why, why_len));
    memcpy((char *)cfg + o->offset, text, strlen(text) + 1);
    return RF_OK;
  case RF_OPT_INT:
    RF_TRY(rf_parse_int(text, o->imin, o->imax, &i, why, why_len));
    rf_cli_store_int(o, cfg, i);
    return RF_OK;
  case RF_OPT_SIZE:
    RF_TRY(rf_parse_size(text, &i, why, why_len));
    RF_TRY(rf_cli_check_int(o, i, text, why, why_len));
    rf_cli_store_int(o, cfg, i);
    return RF_OK;
  case RF_OPT_DOUBLE:
    RF_TRY(rf_parse_double(text, -DBL_MAX, DBL_MAX, &d, why, why_len));
    RF_TRY(rf_cli_check_double(o, d, text, why, why_len));
    rf_cli_store_double(o, cfg, d);
    return RF_OK;
  case RF_OPT_FLAG:
    if (strcmp(text, "true") != 0 && strcmp(text, "false") != 0) {
      snprintf(why, why_len, "'%s' is not true or false", text);
      return RF_ERR_USAGE;
    }
    rf_cli_store_flag(o, cfg, strcmp(text, "true") == 0);
    return RF_OK;
  }
  snprintf(why, why_len, "option --%s has no type", o->name);
  return RF_ERR_INTERNAL;
}

/* ---- printing the effective configuration ------------------------------------------------ */

static int64_t field_int(const rf_config *cfg, const rf_cli_option *o) {
  int64_t v;
  memcpy(&v, (const char *)cfg + o->offset, sizeof v);
  return v;
}

static double field_double(const rf_config *cfg, const rf_cli_option *o) {
  double v;
  memcpy(&v, (const char *)cfg + o->offset, sizeof v);
  return v;
}

static int field_flag(const rf_config *cfg, const rf_cli_option *o) {
  int v;
  memcpy(&v, (const char *)cfg + o->offset, sizeof v);
  return v;
}

static const char *field_string(const rf_config *cfg, const rf_cli_option *o) {
  return (const char *)cfg + o->offset;
}

/* A text, choice or enum field as the command line would give it; a list joined by commas. */
static const char *field_text(const rf_config *cfg, const rf_cli_option *o, char *buf, size_t len) {
  if (o->type != RF_OPT_ENUM)
    return field_string(cfg, o);
  int v[1 + RF_MAX_MODES] = {0};
  memcpy(v, (const char *)cfg + o->offset, RF_MIN(sizeof v, o->size));
  if (!o->list)
    return rf_enum_name(o->names, o->name_count, v[0]);
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < RF_MIN(v[0], RF_MAX_MODES) && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? "," : "",
                             rf_enum_name(o->names, o->name_count, v[1 + i]));
  return buf;
}

void rf_cli_print_config(const rf_config *cfg, FILE *out, const char *prefix) {
  char a[64], b[64], text[256];
  const char *shown;
  for (size_t k = 0; k < rf_cli_option_count; k++) {
    const rf_cli_option *o = &rf_cli_options[k];
    if (!(o->commands & (unsigned)cfg->command))
      continue;
    fprintf(out, "%s%s = ", prefix ? prefix : "", o->name);
    switch (o->type) {
    case RF_OPT_STRING:
    case RF_OPT_ENUM:
    case RF_OPT_CHOICE:
      shown = field_text(cfg, o, text, sizeof text);
      fprintf(out, "%s\n", shown[0] ? shown : "(none)");
      break;
    case RF_OPT_INT:
      fprintf(out, "%" PRId64 "\n", field_int(cfg, o));
      break;
    case RF_OPT_SIZE:
      fprintf(out, "%" PRId64 " (%s)\n", field_int(cfg, o),
              rf_format_bytes(field_int(cfg, o), a, sizeof a));
      break;
    case RF_OPT_DOUBLE:
      fprintf(out, "%s%s%s\n", rf_cli_format_double(field_double(cfg, o), b, sizeof b),
              o->unit[0] ? " " : "", o->unit);
      break;
    case RF_OPT_FLAG:
      fprintf(out, "%s\n", field_flag(cfg, o) ? "true" : "false");
      break;
    }
  }
}

char *rf_cli_config_json(const rf_config *cfg) {
  char shown[256];
  json_t *obj = json_object();
  for (size_t k = 0; obj && k < rf_cli_option_count; k++) {
    const rf_cli_option *o = &rf_cli_options[k];
    if (!(o->commands & (unsigned)cfg->command))
      continue;
    json_t *v = NULL;
    switch (o->type) {
    case RF_OPT_STRING:
    case RF_OPT_ENUM:
    case RF_OPT_CHOICE:
      v = json_string(field_text(cfg, o, shown, sizeof shown));
      break;
    case RF_OPT_INT:
    case RF_OPT_SIZE:
      v = json_integer(field_int(cfg, o));
      break;
    case RF_OPT_DOUBLE:
      v = json_real(field_double(cfg, o));
      break;
    case RF_OPT_FLAG:
      v = json_boolean(field_flag(cfg, o));
      break;
    }
    if (!v) /* json_string refuses text that is not UTF-8, such as a Latin-1 path */
      RF_WARN("the value of --%s is not UTF-8; it is left out of the JSON configuration", o->name);
    json_object_set_new(obj, o->name, v);
  }
  /* jansson prints reals with 17 digits, which turns a timeout of 0.1 into
   * 0.10000000000000001; 15 digits read back exactly for any value a user typed. */
  int digits = 15;
  for (size_t k = 0; k < rf_cli_option_count; k++) {
    char buf[64];
    if (rf_cli_options[k].type != RF_OPT_DOUBLE)
      continue;
    double v = field_double(cfg, &rf_cli_options[k]);
    snprintf(buf, sizeof buf, "%.15g", v);
    if (strtod(buf, NULL) != v)
      digits = 17;
  }
  size_t flags = JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(digits);
  char *text = obj ? json_dumps(obj, flags) : NULL;
  json_decref(obj);
  if (!text)
    RF_ERROR("out of memory formatting the configuration as JSON");
  return text;
}
