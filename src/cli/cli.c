/* cli: the commands, the command line and --help. getopt_long's tables are generated from the
 * option table (cli_options.c) for the one command being parsed, so an option that does not
 * apply to a command is refused there. Values are parsed in cli_values.c and the JSON config
 * file is read in cli_config.c. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli_internal.h"

/* Adding a command (topo, verify, report...) is a bit in rf_command plus one row here. */
static const struct {
  rf_command cmd;
  const char *name;
  const char *about;
  int min_inputs;   /* how many positional arguments (file names) the command needs */
  int max_inputs;   /* and takes at most */
  const char *args; /* how usage shows them */
} commands[] = {
    {RF_CMD_RUN, "run",
     "move the weights from trainer to rollout ranks, time and verify it "
     "(under mpirun)",
     0, 0, ""},
    {RF_CMD_PLAN, "plan", "print the transfer plan: totals, bytes per link and pieces (no MPI)", 0,
     0, ""},
    {RF_CMD_CHECKPOINT, "checkpoint", "write a deterministic synthetic checkpoint of a model", 0, 0,
     ""},
    {RF_CMD_VERIFY, "verify",
     "compare a results file with a reference results file or a "
     "checkpoint",
     1, 1, " RESULTS.h5"},
    {RF_CMD_TOPO, "topo",
     "print where every rank would run: GPU, cores, NUMA node, NIC, link "
     "distances (no MPI)",
     0, 0, ""},
    {RF_CMD_REPORT, "report",
     "write an HTML, Markdown and CSV report of results files (a "
     "second file is compared with the first)",
     1, RF_MAX_INPUTS, " RESULTS.h5..."},
    {RF_CMD_SIMULATE, "simulate",
     "predict a transfer's time, bottleneck link and memory per rank on a described cluster "
     "(no MPI, no GPU)",
     0, 0, ""},
};

static int command_row(rf_command cmd) {
  for (size_t i = 0; i < RF_ARRAY_LEN(commands); i++)
    if (commands[i].cmd == cmd)
      return (int)i;
  return 0;
}

#define LINE_WIDTH 100
#define HELP_COLUMN_MAX 32
/* getopt_long returns LONG_BASE + the table index for a long option, above any letter. */
#define LONG_BASE 256
#define NBSP '\x1f'

const char *rf_command_name(rf_command cmd) {
  for (size_t i = 0; i < RF_ARRAY_LEN(commands); i++)
    if (commands[i].cmd == cmd)
      return commands[i].name;
  return "none";
}

static int applies(const rf_cli_option *o, rf_command cmd) {
  return (o->commands & (unsigned)cmd) != 0;
}

void rf_cli_defaults(rf_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  for (size_t i = 0; i < rf_cli_option_count; i++) {
    char why[256];
    if (rf_cli_set_text(&rf_cli_options[i], rf_cli_options[i].def, cfg, why, sizeof why))
      RF_ERROR("internal error: the default of --%s: %s", rf_cli_options[i].name, why);
  }
}

/* ---- usage ------------------------------------------------------------------------------ */

/* "--bucket-size SIZE", "--mode unfused|grouped|fused", "--json". */
static void option_head(const rf_cli_option *o, char *buf, size_t len) {
  char choices[256];
  const char *meta = o->names ? rf_cli_choices(o, choices, sizeof choices) : o->metavar;
  if (o->type == RF_OPT_FLAG || !meta)
    meta = "";
  char letter[8] = "";
  if (o->letter)
    snprintf(letter, sizeof letter, "-%c, ", o->letter);
  snprintf(buf, len, "%s--%s%s%s", letter, o->name, meta[0] ? " " : "", meta);
}

/* Prints text starting at column col, breaking at spaces to stay within LINE_WIDTH; NBSP
 * prints as a space that is no place to break, so "default: 60" stays on one line. */
static void print_wrapped(FILE *out, const char *text, int col) {
  int at = col;
  for (const char *p = text; *p;) {
    int word = (int)strcspn(p, " ");
    if (at > col && at + 1 + word > LINE_WIDTH) {
      fprintf(out, "\n%*s", col, "");
      at = col;
    } else if (at > col) {
      fputc(' ', out);
      at++;
    }
    for (int i = 0; i < word; i++)
      fputc(p[i] == NBSP ? ' ' : p[i], out);
    at += word;
    p += word;
    p += strspn(p, " ");
  }
  fputc('\n', out);
}

/* A head too wide for the column gets a line of its own, so the texts stay aligned. */
static void print_option(FILE *out, const char *head, const char *text, int col) {
  int n = fprintf(out, "  %s", head);
  if (n + 2 > col)
    fprintf(out, "\n%*s", col, "");
  else
    fprintf(out, "%*s", col - n, "");
  print_wrapped(out, text, col);
}

/* Notes that other modules contribute to a command's --help (the transports of this build). */
static const char *help_notes[8];

static int command_bit(rf_command cmd) {
  int bit = 0;
  while (bit < 7 && (1u << bit) != (unsigned)cmd)
    bit++;
  return bit;
}

void rf_cli_set_help_note(rf_command cmd, const char *note) { help_notes[command_bit(cmd)] = note; }

void rf_cli_usage(FILE *out, rf_command cmd) {
  if (cmd == RF_CMD_NONE) {
    fprintf(out, "usage: refit COMMAND [options]\n\ncommands:\n");
    for (size_t i = 0; i < RF_ARRAY_LEN(commands); i++)
      print_option(out, commands[i].name, commands[i].about, 10);
    fprintf(out, "\nrefit COMMAND --help for its options; refit --version for the version\n");
    return;
  }
  const char *name = rf_command_name(cmd);
  char head[160];
  int col = (int)strlen("  -h, --help  ");
  for (size_t i = 0; i < rf_cli_option_count; i++)
    if (applies(&rf_cli_options[i], cmd)) {
      option_head(&rf_cli_options[i], head, sizeof head);
      col = RF_MAX(col, (int)strlen(head) + 4);
    }
  col = RF_MIN(col, HELP_COLUMN_MAX);
  for (size_t i = 0; i < RF_ARRAY_LEN(commands); i++)
    if (commands[i].cmd == cmd)
      fprintf(out, "usage: refit %s%s [options]\n%s\n\noptions:\n", name, commands[i].args,
              commands[i].about);
  rf_strbuf text = {0};
  for (size_t i = 0; i < rf_cli_option_count; i++) {
    const rf_cli_option *o = &rf_cli_options[i];
    if (!applies(o, cmd))
      continue;
    option_head(o, head, sizeof head);
    text.len = 0;
    rf_strbuf_printf(&text, "%s (default:%c%s%s%s)", o->help, NBSP, o->def[0] ? o->def : "none",
                     o->unit[0] ? ", unit:\x1f" : "", o->unit);
    print_option(out, head, text.data ? text.data : o->help, col);
  }
  rf_strbuf_free(&text);
  print_option(out, "-h, --help", "print this help and exit", col);
  fprintf(out, "\n--config FILE holds a JSON object with the same names as keys ('_' or '-'); "
               "options\ngiven on the command line win over the file.\n");
  if (cmd == RF_CMD_RUN)
    fprintf(out, "A list (a file's, or values separated by ',' on the command line, by ';' for "
                 "--trainer\nand --rollout) of --plan, --transport, --trainer, --rollout, "
                 "--rollout-dtype,\n--placement, --bucket-size or --model sweeps its values; "
                 "--mode a,b runs each mode in\none job.\n");
  if (help_notes[command_bit(cmd)])
    fprintf(out, "%s\n", help_notes[command_bit(cmd)]);
}

/* ---- the command line ------------------------------------------------------------------- */

/* The argv as one shell-pastable line: words with characters a shell treats specially are
 * single-quoted. */
static void record_command_line(int argc, char **argv, rf_config *cfg) {
  static const char safe[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                             "@%+=:,./_-";
  rf_strbuf sb = {0};
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    rf_strbuf_printf(&sb, "%s", i ? " " : "");
    if (a[0] && a[strspn(a, safe)] == '\0') {
      rf_strbuf_printf(&sb, "%s", a);
      continue;
    }
    rf_strbuf_printf(&sb, "'");
    for (const char *p = a; *p; p++)
      rf_strbuf_printf(&sb, *p == '\'' ? "'\\''" : "%c", *p);
    rf_strbuf_printf(&sb, "'");
  }
  snprintf(cfg->command_line, sizeof cfg->command_line, "%s", sb.data ? sb.data : "");
  if (sb.len >= sizeof cfg->command_line) /* say that it was cut rather than cut silently */
    memcpy(cfg->command_line + sizeof cfg->command_line - 4, "...", 4);
  rf_strbuf_free(&sb);
}

static const rf_cli_option *by_letter(int c) {
  for (size_t i = 0; i < rf_cli_option_count; i++)
    if (rf_cli_options[i].letter && rf_cli_options[i].letter == c)
      return &rf_cli_options[i];
  return NULL;
}

static const rf_cli_option *by_value(int c) {
  return c >= LONG_BASE ? &rf_cli_options[c - LONG_BASE] : by_letter(c);
}

/* The word that named the option getopt_long just returned: the last one consumed, or the one
 * before it when the value came as a separate word. */
static const char *last_option_word(const rf_cli_option *o, char **argv) {
  if (o->type != RF_OPT_FLAG && optarg == argv[optind - 1])
    return argv[optind - 2];
  return argv[optind - 1];
}

/* getopt_long accepts unambiguous prefixes ("--buck"); refit does not, so that scripts do not
 * break when a later option shares the prefix. */
static int written_out(const rf_cli_option *o, const char *word) {
  size_t n = strlen(o->name);
  return strncmp(word, "--", 2) != 0 ||
         (strncmp(word + 2, o->name, n) == 0 && (word[2 + n] == '\0' || word[2 + n] == '='));
}

/* One line for an option word that getopt_long did not take as written: an option of another
 * command, a '_' spelling, an abbreviation, or nothing refit knows. */
static void describe_unknown(const char *word, rf_command cmd, char *error, size_t len) {
  const char *name = rf_command_name(cmd);
  int n = (int)RF_MIN(strcspn(word, "="), 200);
  char opt[256] = "";
  if (strncmp(word, "--", 2) == 0)
    snprintf(opt, sizeof opt, "%.*s", n - 2, word + 2);
  const rf_cli_option *known = rf_cli_find_option(opt);
  if (known && !applies(known, cmd)) {
    snprintf(error, len, "option '--%s' does not apply to 'refit %s'; see refit %s --help",
             known->name, name, name);
    return;
  }
  if (known) {
    snprintf(error, len, "unknown option '--%s' for 'refit %s'; did you mean --%s?", opt, name,
             known->name);
    return;
  }
  for (size_t i = 0; opt[0] && i < rf_cli_option_count; i++)
    if (applies(&rf_cli_options[i], cmd) &&
        strncmp(rf_cli_options[i].name, opt, strlen(opt)) == 0) {
      snprintf(error, len, "option '--%s' must be written out: --%s", opt, rf_cli_options[i].name);
      return;
    }
  snprintf(error, len, "unknown option '%.*s' for 'refit %s'; see refit %s --help", n, word, name,
           name);
}

/* One line for what getopt_long refused (c is '?' or ':'). */
static void getopt_error(int c, char **argv, rf_command cmd, char *error, size_t len) {
  const char *name = rf_command_name(cmd);
  const rf_cli_option *o = by_value(optopt);
  if (c == ':' && o) {
    snprintf(error, len, "option --%s needs a value; see refit %s --help", o->name, name);
    return;
  }
  if (optopt >= LONG_BASE) {
    snprintf(error, len, "option --%s takes no value", o->name);
    return;
  }
  if (optopt != 0) {
    snprintf(error, len, "unknown option '-%c' for 'refit %s'; see refit %s --help", optopt, name,
             name);
    return;
  }
  describe_unknown(argv[optind - 1], cmd, error, len);
}

/* Walks the command's options. The first pass (apply = 0) checks their spelling, finds
 * --config and --help and stores nothing else; the second (apply = 1), run after the config
 * file was loaded, stores the values so that the command line wins over the file. argv[0]
 * is the command. */
static rf_status scan_options(int argc, char **argv, rf_config *cfg, int apply) {
  struct option longopts[RF_CLI_MAX_OPTIONS + 2];
  char shortopts[3 * RF_CLI_MAX_OPTIONS + 4] = "+:h"; /* '+': leave argv in its order */
  size_t nlong = 0, nshort = strlen(shortopts);
  for (size_t i = 0; i < rf_cli_option_count; i++) {
    const rf_cli_option *o = &rf_cli_options[i];
    if (!applies(o, cfg->command))
      continue;
    int has_arg = o->type == RF_OPT_FLAG ? no_argument : required_argument;
    longopts[nlong++] = (struct option){o->name, has_arg, NULL, LONG_BASE + (int)i};
    if (o->letter) {
      shortopts[nshort++] = o->letter;
      if (has_arg)
        shortopts[nshort++] = ':';
    }
  }
  longopts[nlong++] = (struct option){"help", no_argument, NULL, 'h'};
  longopts[nlong] = (struct option){NULL, 0, NULL, 0};
  shortopts[nshort] = '\0';

#ifdef __GLIBC__
  optind = 0; /* glibc: 0 also drops what an earlier, unfinished scan left behind */
#else
  optind = 1;
#endif
  opterr = 0;
  int help = 0;
  char error[1024] = "", why[512];
  int max_inputs = commands[command_row(cfg->command)].max_inputs;
  int min_inputs = commands[command_row(cfg->command)].min_inputs;
  cfg->input_count = 0;
  for (int c;;) {
    c = getopt_long(argc, argv, shortopts, longopts, NULL);
    if (c == -1) {
      /* '+' stops at the first word that is not an option: take it as a file name when the
       * command wants one, and go on with the options after it. */
      if (optind >= argc || strcmp(argv[optind - 1], "--") == 0 || cfg->input_count >= max_inputs)
        break;
      snprintf(cfg->inputs[cfg->input_count++], RF_PATH_MAX, "%s", argv[optind++]);
      continue;
    }
    if (c == 'h') {
      help = 1;
      continue;
    }
    if (c == '?' || c == ':') {
      if (!error[0])
        getopt_error(c, argv, cfg->command, error, sizeof error);
      continue;
    }
    const rf_cli_option *o = by_value(c);
    const char *word = last_option_word(o, argv);
    if (!written_out(o, word)) {
      if (!error[0])
        describe_unknown(word, cfg->command, error, sizeof error);
      continue;
    }
    if (apply == (strcmp(o->name, "config") == 0))
      continue; /* --config is stored by the first pass, everything else by the second */
    if (apply)
      rf_cli_sweep_drop(cfg, o);
    if (o->type == RF_OPT_FLAG) {
      rf_cli_store_flag(o, cfg, 1);
    } else if (rf_cli_set_command_line(cfg, o, optarg, why, sizeof why) != RF_OK) {
      if (apply)
        return rf_fail(RF_ERR_USAGE, "option --%s: %s", o->name, why);
      if (!error[0])
        snprintf(error, sizeof error, "option --%s: %s", o->name, why);
    }
  }
  if (apply)
    return RF_OK;
  if (help) {
    rf_cli_usage(stdout, cfg->command);
    cfg->help = 1;
    return RF_OK;
  }
  if (error[0])
    return rf_fail(RF_ERR_USAGE, "%s", error);
  if (optind < argc)
    return rf_fail(RF_ERR_USAGE, "unexpected argument '%s' for 'refit %s'; see refit %s --help",
                   argv[optind], argv[0], argv[0]);
  if (cfg->input_count < min_inputs)
    return rf_fail(RF_ERR_USAGE, "refit %s needs%s; see refit %s --help", argv[0],
                   commands[command_row(cfg->command)].args, argv[0]);
  return RF_OK;
}

/* --system sets the trainer, its style and the rollout. Rather than rank one source over the
 * other, a value of any of them other than its default beside --system (on the command line, in
 * the config file or as a sweep's list) is refused. */
static rf_status apply_system(rf_config *cfg) {
  if (!cfg->system[0])
    return RF_OK;
  static const char *const set[] = {"trainer", "trainer-style", "rollout"};
  rf_config defaults;
  rf_cli_defaults(&defaults);
  for (size_t i = 0; i < RF_ARRAY_LEN(set); i++) {
    const rf_cli_option *o = rf_cli_find_option(set[i]);
    int swept = 0;
    for (int a = 0; a < cfg->sweep.axis_count; a++)
      swept |= strcmp(cfg->sweep.axes[a].name, o->name) == 0;
    const char *mine = (const char *)cfg + o->offset, *def = (const char *)&defaults + o->offset;
    if (swept || (o->type == RF_OPT_STRING ? strcmp(mine, def) : memcmp(mine, def, o->size)))
      return rf_fail(RF_ERR_USAGE,
                     "--system %s sets --trainer, --trainer-style and --rollout; leave --%s out "
                     "or leave --system out",
                     cfg->system, o->name);
  }
  RF_TRY(rf_layout_read_system(cfg->system, cfg->trainer, (int)sizeof cfg->trainer, cfg->rollout,
                               (int)sizeof cfg->rollout));
  cfg->trainer_style = RF_STYLE_MEGATRON;
  return RF_OK;
}

rf_status rf_cli_parse(int argc, char **argv, rf_config *cfg) {
  rf_cli_defaults(cfg);
  record_command_line(argc, argv, cfg);
  if (argc < 2) {
    rf_cli_usage(stderr, RF_CMD_NONE);
    return RF_ERR_USAGE;
  }
  const char *word = argv[1];
  if (strcmp(word, "--help") == 0 || strcmp(word, "-h") == 0) {
    rf_cli_usage(stdout, RF_CMD_NONE);
    cfg->help = 1;
    return RF_OK;
  }
  if (strcmp(word, "--version") == 0) {
    printf("refit %s (git %s)\n", rf_version, rf_git_commit);
    cfg->help = 1;
    return RF_OK;
  }
  for (size_t i = 0; i < RF_ARRAY_LEN(commands); i++)
    if (strcmp(word, commands[i].name) == 0)
      cfg->command = commands[i].cmd;
  if (cfg->command == RF_CMD_NONE)
    return rf_fail(RF_ERR_USAGE, "unknown command '%s'; see refit --help", word);
  RF_TRY(scan_options(argc - 1, argv + 1, cfg, 0));
  if (cfg->help)
    return RF_OK;
  /* The first pass only checked the command line's lists; the second makes them axes after
   * the file's. */
  memset(&cfg->sweep, 0, sizeof cfg->sweep);
  if (cfg->config[0])
    RF_TRY(rf_cli_load_config(cfg));
  RF_TRY(scan_options(argc - 1, argv + 1, cfg, 1));
  return apply_system(cfg);
}
