/* cli internals: the option table and the helpers that cli.c (command line), cli_config.c
 * (JSON config file) and cli_values.c (parsing and printing values) share. Nothing outside
 * src/cli includes this header. */
#ifndef RF_CLI_INTERNAL_H
#define RF_CLI_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "cli.h"

/* An option that applies to every command, present and future (only --config). */
#define RF_CLI_ALL_COMMANDS 0xffffffffu

/* Upper bound on the table's length, so getopt's array can live on the stack; cli_options.c
 * checks the table against it at compile time. */
#define RF_CLI_MAX_OPTIONS 64

typedef enum {
  RF_OPT_STRING, /* char[] field, any text that fits */
  RF_OPT_ENUM,   /* enum field (an int), the index of one of `names`; with `list`, an
                    rf_mode_list-shaped field (count, then up to RF_MAX_MODES indexes) */
  RF_OPT_CHOICE, /* char[] field, one of `names` kept as text (formats the driver passes on) */
  RF_OPT_INT,    /* int64_t field, base-10 integer in [imin, imax] */
  RF_OPT_SIZE,   /* int64_t field, bytes ("64MiB", "1GB", "4096"), in [imin, imax] */
  RF_OPT_DOUBLE, /* double field, finite, in [dmin, dmax] or (dmin, dmax] when dmin_open */
  RF_OPT_FLAG,   /* int field, 0 or 1; takes no value on the command line */
} rf_opt_type;

typedef struct {
  const char *name; /* long name, also the JSON key */
  char letter;      /* short option letter, 0 = none */
  rf_opt_type type;
  const char *const *names; /* enums and choices: the valid names (the enum's X-macro list) */
  int name_count;
  int list;            /* enums: a comma-separated list of names is accepted ("a,c") */
  int sweep;           /* refit run: a list of values (config file or command line) is swept */
  char separator;      /* the command line's separator of a sweep's values; 0 = ',' */
  int64_t imin, imax;  /* ints and sizes */
  double dmin, dmax;   /* doubles */
  int dmin_open;       /* doubles: dmin itself is excluded */
  size_t offset;       /* offsetof(rf_config, field) */
  size_t size;         /* sizeof the field (the string capacity for strings and enums) */
  const char *def;     /* default as text, parsed like a command-line value */
  const char *unit;    /* "bytes", "s", "" */
  const char *metavar; /* shown after the option name in --help; enums show their choices */
  unsigned commands;   /* mask of rf_command bits */
  const char *help;    /* one sentence, lower case, no final period */
  /* strings: a stricter check of the text (a rule with a parameter, like --update), which
   * writes the reason to why and returns RF_ERR_USAGE; NULL accepts any text that fits */
  rf_status (*check)(const char *text, char *why, size_t why_len);
} rf_cli_option;

extern const rf_cli_option rf_cli_options[];
extern const size_t rf_cli_option_count;

/* The option with this long name, '_' and '-' being interchangeable; NULL if none. */
const rf_cli_option *rf_cli_find_option(const char *name);

/* Parses text as a value of o (the command-line form) and stores it in cfg. On failure
 * returns RF_ERR_USAGE, logs nothing and writes the reason, which quotes the text, to why. */
rf_status rf_cli_set_text(const rf_cli_option *o, const char *text, rf_config *cfg, char *why,
                          size_t why_len);

/* Range checks shared by the text and JSON paths; `shown` is the value as the user wrote it. */
rf_status rf_cli_check_int(const rf_cli_option *o, int64_t v, const char *shown, char *why,
                           size_t why_len);
rf_status rf_cli_check_double(const rf_cli_option *o, double v, const char *shown, char *why,
                              size_t why_len);

/* Stores v in o's field, which must be of the matching type. */
void rf_cli_store_int(const rf_cli_option *o, rf_config *cfg, int64_t v);
void rf_cli_store_double(const rf_cli_option *o, rf_config *cfg, double v);
void rf_cli_store_flag(const rf_cli_option *o, rf_config *cfg, int v);

/* Loads the JSON config file cfg->config on top of cfg (options of cfg->command only). Logs
 * one line `FILE:LINE:COLUMN: ...` and returns RF_ERR_USAGE on any problem. */
rf_status rf_cli_load_config(rf_config *cfg);

/* Drops the sweep axis of option o, if any: a value on the command line replaces the list. */
void rf_cli_sweep_drop(rf_config *cfg, const rf_cli_option *o);

/* Makes texts[0 .. n) the sweep axis of option o (no axis for n = 1; for a list option, one
 * list value): checks each, stores the first in cfg. On failure writes the reason to why. */
rf_status rf_cli_sweep_set(rf_config *cfg, const rf_cli_option *o, char texts[][RF_SWEEP_VALUE_MAX],
                           int n, char *why, size_t why_len);

/* A command-line value of a sweepable option of `refit run`: split at the option's separator
 * into a sweep axis when it holds more than one value, else stored as is. */
rf_status rf_cli_set_command_line(rf_config *cfg, const rf_cli_option *o, const char *text,
                                  char *why, size_t why_len);

/* "a|b|c": the names of an enum or choice option, as --help and the errors show them. */
const char *rf_cli_choices(const rf_cli_option *o, char *buf, size_t len);

/* Formats a double with the fewest digits that read back to the same value. */
const char *rf_cli_format_double(double v, char *buf, size_t len);

#endif
