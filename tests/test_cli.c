/* The command line and config file: defaults, precedence, every accepted and refused value
 * form, the exact one-line errors (stderr captured), --help, and the printed configuration in
 * both forms. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/cli.h"
#include "cli/cli_internal.h"
#include "test.h"

/* ---- helpers ---------------------------------------------------------------------------- */

/* Redirects a stream's file descriptor into a temporary file until capture_end. */
typedef struct {
  FILE *stream, *tmp;
  int saved;
} capture;

static void capture_begin(capture *c, FILE *stream) {
  fflush(stream);
  c->stream = stream;
  c->tmp = tmpfile();
  ASSERT_TRUE(c->tmp != NULL);
  c->saved = dup(fileno(stream));
  ASSERT_GE(dup2(fileno(c->tmp), fileno(stream)), 0);
}

/* Ends the capture and returns what was written, without a final newline. */
static const char *capture_end(capture *c, char *buf, size_t len) {
  fflush(c->stream);
  dup2(c->saved, fileno(c->stream));
  close(c->saved);
  rewind(c->tmp);
  size_t n = fread(buf, 1, len - 1, c->tmp);
  fclose(c->tmp);
  buf[n] = '\0';
  if (n > 0 && buf[n - 1] == '\n')
    buf[n - 1] = '\0';
  return buf;
}

/* Parses "refit ARGS..." (NULL-terminated), keeping stderr in err and stdout in out. */
static char err[16384], out[16384];
static rf_status parse_list(rf_config *cfg, const char *const *args) {
  char *argv[64];
  int argc = 0;
  argv[argc++] = "refit";
  for (; *args; args++)
    argv[argc++] = (char *)*args;
  argv[argc] = NULL;
  capture ce, co;
  capture_begin(&ce, stderr);
  capture_begin(&co, stdout);
  rf_status st = rf_cli_parse(argc, argv, cfg);
  capture_end(&co, out, sizeof out);
  capture_end(&ce, err, sizeof err);
  return st;
}
#define PARSE(cfg, ...) parse_list(cfg, (const char *const[]){__VA_ARGS__, NULL})

/* The modes of a configuration, as "fused,grouped". */
#define ASSERT_MODES(cfg, text)                                                                    \
  do {                                                                                             \
    char modes_[128];                                                                              \
    ASSERT_STR_EQ(rf_mode_list_format(&(cfg).mode, modes_, sizeof modes_), text);                  \
  } while (0)

/* Asserts that parsing fails with usage status and exactly one error line. */
#define EXPECT_ERROR(line, ...)                                                                    \
  do {                                                                                             \
    rf_config c_;                                                                                  \
    ASSERT_STATUS(PARSE(&c_, __VA_ARGS__), RF_ERR_USAGE);                                          \
    ASSERT_STR_EQ(err, line);                                                                      \
  } while (0)

/* Writes text to a new temporary file whose name goes to path. */
static void write_temp(char *path, size_t len, const char *text) {
  snprintf(path, len, "/tmp/refit_test_cli_XXXXXX");
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, text, strlen(text)), (int64_t)strlen(text));
  close(fd);
}

/* Writes text as a config file and parses `refit CMD --config FILE`. */
static char cfg_path[256];
static rf_status parse_config(rf_config *cfg, const char *cmd, const char *text) {
  write_temp(cfg_path, sizeof cfg_path, text);
  rf_status st = PARSE(cfg, cmd, "--config", cfg_path);
  unlink(cfg_path);
  return st;
}

static void expect_config_error(const char *cmd, const char *text, const char *tail) {
  rf_config c;
  ASSERT_STATUS(parse_config(&c, cmd, text), RF_ERR_USAGE);
  char want[1024];
  snprintf(want, sizeof want, "refit: error: %s:%s", cfg_path, tail);
  ASSERT_STR_EQ(err, want);
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_table(void) {
  for (size_t i = 0; i < rf_cli_option_count; i++) {
    const rf_cli_option *o = &rf_cli_options[i];
    ASSERT_TRUE(o->help && o->help[0] && o->def && o->unit && o->commands != 0);
    ASSERT_TRUE(rf_cli_find_option(o->name) == o);
    ASSERT_TRUE(o->letter != 'h');
    for (size_t j = 0; j < i; j++) {
      ASSERT_TRUE(strcmp(o->name, rf_cli_options[j].name) != 0);
      ASSERT_TRUE(o->offset != rf_cli_options[j].offset);
      ASSERT_TRUE(!o->letter || o->letter != rf_cli_options[j].letter);
    }
    /* Numbers show a unit in --help (the seed is a plain number); others a metavar. */
    if (o->type == RF_OPT_SIZE || o->type == RF_OPT_DOUBLE)
      ASSERT_TRUE(o->unit[0]);
    if (o->type != RF_OPT_ENUM && o->type != RF_OPT_CHOICE && o->type != RF_OPT_FLAG)
      ASSERT_TRUE(o->metavar != NULL);
    /* Enums and choices name their values; an enum field is an int, or a list of them. */
    ASSERT_EQ(o->names != NULL, o->type == RF_OPT_ENUM || o->type == RF_OPT_CHOICE);
    if (o->type == RF_OPT_ENUM)
      ASSERT_EQ(o->size, o->list ? sizeof(rf_mode_list) : sizeof(int));
    rf_config c;
    char why[256];
    ASSERT_OK(rf_cli_set_text(o, o->def, &c, why, sizeof why));
  }
  ASSERT_TRUE(rf_cli_find_option("bucket_size") == rf_cli_find_option("bucket-size"));
  ASSERT_TRUE(rf_cli_find_option("bucket") == NULL);
  ASSERT_STR_EQ(rf_command_name(RF_CMD_RUN), "run");
  ASSERT_STR_EQ(rf_command_name(RF_CMD_PLAN), "plan");
}

static void test_defaults(void) {
  rf_config c;
  ASSERT_OK(PARSE(&c, "run"));
  ASSERT_EQ(c.command, RF_CMD_RUN);
  ASSERT_EQ(c.help, 0);
  ASSERT_STR_EQ(c.config, "");
  ASSERT_STR_EQ(c.model, "llama-3.2-1b");
  ASSERT_STR_EQ(c.dtype, "model");
  ASSERT_STR_EQ(c.trainer, "fsdp=2");
  ASSERT_EQ(c.trainer_style, RF_STYLE_TUNIX);
  ASSERT_EQ(c.trainer_order, RF_ORDER_HF);
  ASSERT_STR_EQ(c.rollout, "tp=2");
  ASSERT_EQ(c.placement, RF_PLACEMENT_DISAGGREGATED);
  ASSERT_EQ(c.plan, RF_PLAN_AUTO);
  ASSERT_MODES(c, "grouped");
  ASSERT_EQ(c.bucket_size, INT64_C(268435456));
  ASSERT_STR_EQ(c.transport, "auto");
  ASSERT_EQ(c.seed, 1);
  ASSERT_EQ(c.warmup, 1);
  ASSERT_EQ(c.iters, 5);
  ASSERT_EQ(c.verify, RF_VERIFY_FULL);
  ASSERT_EQ(c.inject, RF_INJECT_NONE);
  ASSERT_TRUE(c.timeout == 60.0);
  ASSERT_STR_EQ(c.output, "");
  ASSERT_EQ(c.json, 0);
  ASSERT_STR_EQ(c.command_line, "refit run");
  ASSERT_STR_EQ(err, "");
  ASSERT_OK(PARSE(&c, "plan", "--json"));
  ASSERT_EQ(c.command, RF_CMD_PLAN);
  ASSERT_EQ(c.json, 1);
}

static void test_sizes(void) {
  static const struct {
    const char *text;
    int64_t bytes;
  } good[] = {
      {"0", 0},
      {"1048576", 1048576},
      {"64MiB", INT64_C(67108864)},
      {"1GiB", INT64_C(1073741824)},
      {"512KiB", 524288},
      {"2TiB", INT64_C(2199023255552)},
      {"1PiB", INT64_C(1125899906842624)},
      {"64MB", 64000000},
      {"1GB", 1000000000},
      {"3kB", 3000},
      {"3KB", 3000},
      {"2TB", INT64_C(2000000000000)},
      {"4096B", 4096},
      {"0B", 0},
      {"007", 7},
      {"1.5GiB", INT64_C(1610612736)},
      {"0.5KiB", 512},
      {"2.25MiB", INT64_C(2359296)},
      {"1.000B", 1},
      {"1.5kB", 1500},
      {"0.000001MB", 1},
      {"9223372036854775807", INT64_MAX},
      {"8191.99951171875PiB", INT64_C(9223371487098961920)},
      {"8191.5PiB", INT64_C(9222809086901354496)},
  };
  char why[256];
  for (size_t i = 0; i < RF_ARRAY_LEN(good); i++) {
    int64_t v = -1;
    ASSERT_OK(rf_parse_size(good[i].text, &v, why, sizeof why));
    ASSERT_EQ(v, good[i].bytes);
  }
  static const char *const bad[] = {
      "",
      "-1",
      "64Mi",
      "64 MiB",
      " 64MiB",
      "64MiB ",
      "64mib",
      "MiB",
      "1.5B",
      "0.3KiB",
      "1.",
      ".5GiB",
      "1e9",
      "0x10",
      "+5",
      "12XB",
      "64MiBB",
      "1..5GiB",
      "8EiB",
      "9223372036854775808",
      "8192PiB",
      "99999999999999999999999",
      "1.0000000000000000000GiB",
      "8191.999999999999999PiB",
      "8191.99999999999999911182158029987PiB",
  };
  for (size_t i = 0; i < RF_ARRAY_LEN(bad); i++) {
    int64_t v = 42;
    why[0] = '\0';
    ASSERT_STATUS(rf_parse_size(bad[i], &v, why, sizeof why), RF_ERR_USAGE);
    ASSERT_EQ(v, 42);
    ASSERT_TRUE(why[0] == '\'');
  }
  int64_t v;
  rf_parse_size("12XB", &v, why, sizeof why);
  ASSERT_STR_EQ(why, "'12XB' is not a size (use e.g. 64MiB, 1GiB or a byte count)");
  rf_parse_size("1.5B", &v, why, sizeof why);
  ASSERT_STR_EQ(why, "'1.5B' is not a whole number of bytes");
  rf_parse_size("-1", &v, why, sizeof why);
  ASSERT_STR_EQ(why, "'-1' is negative; a size is 0 or more bytes");
  rf_parse_size("8192PiB", &v, why, sizeof why);
  ASSERT_STR_EQ(why, "'8192PiB' is too large; the largest size is 9223372036854775807 bytes");
}

static void test_ints_and_doubles(void) {
  char why[256];
  int64_t i = 0;
  ASSERT_OK(rf_parse_int("0", 0, 10, &i, why, sizeof why));
  ASSERT_EQ(i, 0);
  ASSERT_OK(rf_parse_int("-12", -20, 10, &i, why, sizeof why));
  ASSERT_EQ(i, -12);
  ASSERT_OK(rf_parse_int("9223372036854775807", 0, INT64_MAX, &i, why, sizeof why));
  ASSERT_EQ(i, INT64_MAX);
  static const char *const not_ints[] = {"", "-", "+1", " 1", "1 ", "1.0", "1e3", "0x10", "5x"};
  for (size_t k = 0; k < RF_ARRAY_LEN(not_ints); k++)
    ASSERT_STATUS(rf_parse_int(not_ints[k], 0, 10, &i, why, sizeof why), RF_ERR_USAGE);
  rf_parse_int("5x", 0, 10, &i, why, sizeof why);
  ASSERT_STR_EQ(why, "'5x' is not an integer");
  ASSERT_STATUS(rf_parse_int("11", 0, 10, &i, why, sizeof why), RF_ERR_USAGE);
  ASSERT_STR_EQ(why, "'11' is out of range 0..10");
  ASSERT_STATUS(rf_parse_int("9223372036854775808", 0, INT64_MAX, &i, why, sizeof why),
                RF_ERR_USAGE);

  double d = 0;
  ASSERT_OK(rf_parse_double("0.25", 0, 1, &d, why, sizeof why));
  ASSERT_TRUE(d == 0.25);
  ASSERT_OK(rf_parse_double("1e2", 0, 1000, &d, why, sizeof why));
  ASSERT_TRUE(d == 100.0);
  static const char *const not_doubles[] = {"", "inf", "nan", "0x1p3", " 1", "1s", "1e", "."};
  for (size_t k = 0; k < RF_ARRAY_LEN(not_doubles); k++)
    ASSERT_STATUS(rf_parse_double(not_doubles[k], -1e9, 1e9, &d, why, sizeof why), RF_ERR_USAGE);
  ASSERT_STATUS(rf_parse_double("1e999", -1e9, 1e9, &d, why, sizeof why), RF_ERR_USAGE);
  ASSERT_STATUS(rf_parse_double("2", 0, 1, &d, why, sizeof why), RF_ERR_USAGE);
  ASSERT_STR_EQ(why, "'2' is out of range [0, 1]");

  rf_config c;
  ASSERT_OK(PARSE(&c, "run", "--timeout", "0.5", "--seed=9223372036854775807", "--iters", "1000000",
                  "--warmup", "0", "--bucket-size", "0"));
  ASSERT_TRUE(c.timeout == 0.5);
  ASSERT_EQ(c.seed, INT64_MAX);
  ASSERT_EQ(c.iters, 1000000);
  ASSERT_EQ(c.warmup, 0);
  ASSERT_EQ(c.bucket_size, 0);
  EXPECT_ERROR("refit: error: option --iters: '0' is out of range 1..1000000", "run", "--iters",
               "0");
  EXPECT_ERROR("refit: error: option --warmup: '1000001' is out of range 0..1000000", "run",
               "--warmup=1000001");
  EXPECT_ERROR("refit: error: option --seed: '-1' is out of range 0..9223372036854775807", "run",
               "--seed", "-1");
  EXPECT_ERROR("refit: error: option --timeout: '0' is out of range (0, 86400]", "run", "--timeout",
               "0");
  EXPECT_ERROR("refit: error: option --timeout: '86401' is out of range (0, 86400]", "run",
               "--timeout", "86401");
  EXPECT_ERROR("refit: error: option --timeout: '1m' is not a number", "run", "--timeout", "1m");
}

static void test_command_line_errors(void) {
  EXPECT_ERROR("refit: error: option --bucket-size: '12XB' is not a size (use e.g. 64MiB, 1GiB "
               "or a byte count)",
               "run", "--bucket-size", "12XB");
  EXPECT_ERROR("refit: error: option --mode: 'fast' is not one of unfused|grouped|fused, or a "
               "comma-separated list of them",
               "run", "--mode", "fast");
  EXPECT_ERROR("refit: error: option --mode: 'unfused|grouped' is not one of "
               "unfused|grouped|fused, or a comma-separated list of them",
               "run", "--mode=unfused|grouped");
  EXPECT_ERROR("refit: error: option --mode: 'fused,,grouped' is not one of "
               "unfused|grouped|fused, or a comma-separated list of them",
               "run", "--mode=fused,,grouped");
  /* Only refit run sweeps a list; the other commands take one value. */
  EXPECT_ERROR(
      "refit: error: option --plan: 'p2p,star' is not one of p2p|star|fanout|hierarchical|auto",
      "plan", "--plan=p2p,star");
  EXPECT_ERROR("refit: error: unknown option '--foo' for 'refit plan'; see refit plan --help",
               "plan", "--foo");
  EXPECT_ERROR("refit: error: unknown option '--foo' for 'refit plan'; see refit plan --help",
               "plan", "--foo=1");
  EXPECT_ERROR("refit: error: unknown option '-x' for 'refit run'; see refit run --help", "run",
               "-x");
  EXPECT_ERROR("refit: error: option '--mode' does not apply to 'refit plan'; see refit plan "
               "--help",
               "plan", "--mode", "fused");
  EXPECT_ERROR("refit: error: option '--json' does not apply to 'refit run'; see refit run "
               "--help",
               "run", "--json");
  EXPECT_ERROR("refit: error: unknown option '--bucket_size' for 'refit run'; did you mean "
               "--bucket-size?",
               "run", "--bucket_size", "1");
  EXPECT_ERROR("refit: error: option '--buck' must be written out: --bucket-size", "run", "--buck",
               "1");
  EXPECT_ERROR("refit: error: option --mode needs a value; see refit run --help", "run", "--mode");
  EXPECT_ERROR("refit: error: option --json takes no value", "plan", "--json=true");
  EXPECT_ERROR("refit: error: unexpected argument 'extra' for 'refit plan'; see refit plan "
               "--help",
               "plan", "--json", "extra");
  EXPECT_ERROR("refit: error: unexpected argument 'x' for 'refit plan'; see refit plan --help",
               "plan", "--", "x");
  EXPECT_ERROR("refit: error: unknown command 'fly'; see refit --help", "fly");
  EXPECT_ERROR("refit: error: unknown command '--mode'; see refit --help", "--mode", "fused");
  /* The first problem is the one reported. */
  EXPECT_ERROR("refit: error: unknown option '--a' for 'refit run'; see refit run --help", "run",
               "--a", "--b");
  /* A value that looks like an option is still the value. */
  rf_config c;
  ASSERT_OK(PARSE(&c, "run", "--output", "--help", "--model", "-h"));
  ASSERT_STR_EQ(c.output, "--help");
  ASSERT_STR_EQ(c.model, "-h");
  ASSERT_EQ(c.help, 0);
  /* The last occurrence wins, as with the config file below it. */
  ASSERT_OK(PARSE(&c, "run", "--mode", "fused", "--mode=unfused"));
  ASSERT_MODES(c, "unfused");
}

static void test_help_and_version(void) {
  rf_config c;
  ASSERT_OK(PARSE(&c, "plan", "--help"));
  ASSERT_EQ(c.help, 1);
  ASSERT_EQ(c.command, RF_CMD_PLAN);
  ASSERT_TRUE(strncmp(out, "usage: refit plan [options]\n", 28) == 0);
  ASSERT_TRUE(strstr(out, "  --json ") != NULL);
  ASSERT_TRUE(strstr(out, "--mode ") == NULL);
  /* --help wins over errors elsewhere on the line and a config file that is not there. */
  ASSERT_OK(PARSE(&c, "run", "--bucket-size", "12XB", "--config", "/nonexistent.json", "-h"));
  ASSERT_EQ(c.help, 1);
  ASSERT_STR_EQ(err, "");
  ASSERT_TRUE(strstr(out, "(default: 256MiB, unit: bytes)") != NULL);
  ASSERT_TRUE(strstr(out, "  --mode unfused|grouped|fused  ") != NULL);
  ASSERT_TRUE(strstr(out, "(default: none)") != NULL);
  for (const char *line = out; (line = strchr(line, '\n')); line++)
    ASSERT_LE((int64_t)strcspn(line + 1, "\n"), 100);
  ASSERT_OK(PARSE(&c, "--help"));
  ASSERT_EQ(c.help, 1);
  ASSERT_TRUE(strstr(out, "commands:\n  run ") != NULL);
  ASSERT_TRUE(strstr(out, "refit COMMAND --help for its options") != NULL);
  ASSERT_OK(PARSE(&c, "--version"));
  ASSERT_EQ(c.help, 1);
  char version[128];
  snprintf(version, sizeof version, "refit %s (git %s)", rf_version, rf_git_commit);
  ASSERT_STR_EQ(out, version);
  /* No arguments: the command list on stderr and a usage error. */
  char *argv[] = {"refit", NULL};
  capture ce;
  capture_begin(&ce, stderr);
  ASSERT_STATUS(rf_cli_parse(1, argv, &c), RF_ERR_USAGE);
  capture_end(&ce, err, sizeof err);
  ASSERT_TRUE(strncmp(err, "usage: refit COMMAND [options]", 30) == 0);
}

static void test_config_file(void) {
  rf_config c;
  /* Precedence: defaults < file < command line; '_' and '-' both name a key. */
  write_temp(cfg_path, sizeof cfg_path,
             "{\"mode\": \"fused\", \"bucket_size\": \"64MiB\", \"seed\": 7, \"timeout\": 2,\n"
             " \"trainer-style\": \"fsdp2\", \"iters\": 3, \"output\": \"r.h5\"}\n");
  ASSERT_OK(PARSE(&c, "run", "--config", cfg_path, "--iters", "9", "--mode=unfused"));
  ASSERT_MODES(c, "unfused");
  ASSERT_EQ(c.bucket_size, INT64_C(67108864));
  ASSERT_EQ(c.seed, 7);
  ASSERT_TRUE(c.timeout == 2.0);
  ASSERT_EQ(c.trainer_style, RF_STYLE_FSDP2);
  ASSERT_EQ(c.iters, 9);
  ASSERT_STR_EQ(c.output, "r.h5");
  ASSERT_STR_EQ(c.config, cfg_path);
  ASSERT_STR_EQ(c.model, "llama-3.2-1b"); /* untouched by either */
  /* --config after the options it loses to still loses to them. */
  ASSERT_OK(PARSE(&c, "run", "--seed", "5", "--config", cfg_path));
  ASSERT_EQ(c.seed, 5);
  unlink(cfg_path);

  ASSERT_OK(parse_config(&c, "plan", "{\"json\": true, \"trainer_style\": \"fsdp2\"}"));
  ASSERT_EQ(c.json, 1);
  ASSERT_EQ(c.trainer_style, RF_STYLE_FSDP2);
  ASSERT_OK(parse_config(&c, "run", "{\"bucket-size\": 4096, \"timeout\": 0.5}"));
  ASSERT_EQ(c.bucket_size, 4096);
  ASSERT_TRUE(c.timeout == 0.5);
  ASSERT_OK(parse_config(&c, "run", "{}"));
  ASSERT_EQ(c.rollout_dtype, RF_ROLLOUT_DTYPE_MODEL);
  ASSERT_OK(parse_config(&c, "plan", "{\"rollout_dtype\": \"fp8\"}"));
  ASSERT_EQ(c.rollout_dtype, RF_FORMAT_FP8);
  ASSERT_OK(parse_config(&c, "run", "{\"rollout-dtype\": [\"model\", \"fp8\"]}"));
  ASSERT_EQ(c.sweep.axis_count, 1);
  ASSERT_STR_EQ(c.sweep.axes[0].name, "rollout-dtype");
  ASSERT_STR_EQ(c.sweep.axes[0].values[1], "fp8");
  expect_config_error("checkpoint", "{\"rollout_dtype\": \"fp8\"}",
                      "1:2: key 'rollout_dtype' does not apply to 'refit checkpoint'");
  ASSERT_OK(parse_config(&c, "run", "{\"config\": \"elsewhere.json\"}")); /* not followed */

  expect_config_error("run", "{\n  \"mode\": \"fused\",\n    \"xyz\": 1\n}\n",
                      "3:5: unknown key 'xyz'; see refit run --help");
  /* The same text inside a string value is not the key. */
  expect_config_error("run", "{\"output\": \"\\\"xyz\\\": \", \"xyz\": 2}",
                      "1:25: unknown key 'xyz'; see refit run --help");
  expect_config_error("run", "{\"json\": true}", "1:2: key 'json' does not apply to 'refit run'");
  /* Sweeps: a list of modes is one job; lists of other sweepable keys become axes. */
  ASSERT_OK(parse_config(&c, "run",
                         "{\"mode\": [\"fused\", \"grouped\"], \"plan\": [\"star\", "
                         "\"p2p\"], \"bucket_size\": [65536, \"1MiB\"], \"model\": [\"tiny\"]}"));
  ASSERT_MODES(c, "fused,grouped");
  ASSERT_EQ(c.plan, RF_PLAN_STAR);
  ASSERT_EQ(c.bucket_size, 65536);
  ASSERT_EQ(c.sweep.axis_count, 2);
  ASSERT_STR_EQ(c.sweep.axes[1].name, "bucket-size");
  ASSERT_STR_EQ(c.sweep.axes[1].values[1], "1MiB");
  expect_config_error("run", "{\n\"seed\": [1, 2]}",
                      "2:1: key 'seed' holds a list; only mode, plan, transport, trainer, rollout, "
                      "rollout_dtype, placement, bucket_size and model can be swept, by refit "
                      "run");
  expect_config_error(
      "run", "{\"plan\": [\"p2p\", \"ring\"]}",
      "1:2: key 'plan', value 2: 'ring' is not one of p2p|star|fanout|hierarchical|auto");
  expect_config_error("run", "{\"bucket-size\": \"12XB\"}",
                      "1:2: key 'bucket-size': '12XB' is not a size (use e.g. 64MiB, 1GiB or a "
                      "byte count)");
  expect_config_error("run", "{\"bucket_size\": -1}",
                      "1:2: key 'bucket_size': '-1' is negative; a size is 0 or more bytes");
  expect_config_error("run", "{\"bucket_size\": 1.5}",
                      "1:2: key 'bucket_size': expected a byte count or a size string such as "
                      "\"64MiB\", not a real number");
  expect_config_error("run", "{\"iters\": 2.0}",
                      "1:2: key 'iters': expected an integer, not a real number");
  expect_config_error("run", "{\"iters\": \"2\"}",
                      "1:2: key 'iters': expected an integer, not a string");
  expect_config_error("run", "{\"iters\": 0}", "1:2: key 'iters': '0' is out of range 1..1000000");
  expect_config_error("run", "{\"timeout\": \"60\"}",
                      "1:2: key 'timeout': expected a number, not a string");
  expect_config_error("run", "{\"timeout\": 0}",
                      "1:2: key 'timeout': '0' is out of range (0, 86400]");
  expect_config_error("run", "{\"mode\": \"fast\"}",
                      "1:2: key 'mode': 'fast' is not one of unfused|grouped|fused, or a "
                      "comma-separated list of them");
  expect_config_error("run", "{\"mode\": null}", "1:2: key 'mode': expected a string, not null");
  expect_config_error("plan", "{\"json\": 1}",
                      "1:2: key 'json': expected true or false, not an "
                      "integer");
  expect_config_error("run", "{\"seed\": 1, \"seed\": 2}",
                      "1:18: duplicate object key near '\"seed\"'");
  expect_config_error("run", "{\"bucket-size\": 1, \"bucket_size\": 2}",
                      "1:20: key 'bucket_size' repeats 'bucket-size'");
  expect_config_error("run", "\n  [1, 2]",
                      "2:3: the file must hold one object of option names, "
                      "not a list");
  /* Syntax errors carry jansson's own text after the position. */
  rf_config d;
  ASSERT_STATUS(parse_config(&d, "run", "{\n  \"seed\": 1,\n}"), RF_ERR_USAGE);
  char want[512];
  snprintf(want, sizeof want, "refit: error: %s:3:", cfg_path);
  ASSERT_TRUE(strncmp(err, want, strlen(want)) == 0);
  ASSERT_TRUE(strchr(err, '\n') == NULL);
  EXPECT_ERROR("refit: error: /nonexistent/x.json: cannot read the config file: No such file or "
               "directory",
               "run", "--config", "/nonexistent/x.json");
}

/* Every applicable key is printed once, in both forms, and the JSON form read back as a
 * config file gives the same configuration. */
static void test_print_config(void) {
  rf_config c;
  ASSERT_OK(PARSE(&c, "run", "--output", "a b.h5", "--timeout", "0.1", "--bucket-size", "1.5GiB",
                  "--model", "it's"));
  ASSERT_STR_EQ(c.command_line, "refit run --output 'a b.h5' --timeout 0.1 --bucket-size "
                                "1.5GiB --model 'it'\\''s'");
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  rf_cli_print_config(&c, mem, "# ");
  fclose(mem);
  ASSERT_TRUE(strstr(text, "# bucket-size = 1610612736 (1.50 GiB)\n") != NULL);
  ASSERT_TRUE(strstr(text, "# timeout = 0.1 s\n") != NULL);
  ASSERT_TRUE(strstr(text, "# output = a b.h5\n") != NULL);
  ASSERT_TRUE(strstr(text, "# config = (none)\n") != NULL);
  ASSERT_TRUE(strstr(text, "# json") == NULL);
  char *json = rf_cli_config_json(&c);
  ASSERT_TRUE(json != NULL);
  json_error_t jerr;
  json_t *root = json_loads(json, 0, &jerr);
  ASSERT_TRUE(root != NULL && json_is_object(root));
  size_t applicable = 0;
  for (size_t i = 0; i < rf_cli_option_count; i++) {
    const rf_cli_option *o = &rf_cli_options[i];
    char line[128];
    snprintf(line, sizeof line, "# %s = ", o->name);
    json_t *v = json_object_get(root, o->name);
    if (!(o->commands & RF_CMD_RUN)) {
      ASSERT_TRUE(v == NULL);
      continue;
    }
    applicable++;
    ASSERT_TRUE(strstr(text, line) != NULL);
    ASSERT_TRUE(v != NULL);
    if (o->type == RF_OPT_INT || o->type == RF_OPT_SIZE)
      ASSERT_TRUE(json_is_integer(v));
    else if (o->type == RF_OPT_DOUBLE)
      ASSERT_TRUE(json_is_real(v));
    else if (o->type == RF_OPT_FLAG)
      ASSERT_TRUE(json_is_boolean(v));
    else
      ASSERT_TRUE(json_is_string(v));
  }
  ASSERT_EQ(json_object_size(root), (int64_t)applicable);
  ASSERT_EQ(json_integer_value(json_object_get(root, "bucket-size")), INT64_C(1610612736));
  ASSERT_TRUE(json_real_value(json_object_get(root, "timeout")) == 0.1);
  ASSERT_TRUE(strstr(json, "\"timeout\":0.1,") != NULL); /* 15 digits, not 0.10000000000000001 */
  /* Compact, with the keys in sorted order: each key's quote comes after the previous one's. */
  ASSERT_TRUE(strchr(json, ' ') == NULL || strstr(json, "\": ") == NULL);
  const char *prev = NULL;
  for (const char *k = json + 1; (k = strchr(k, '"')) != NULL;) {
    const char *end = strchr(k + 1, '"');
    if (end[1] == ':') {
      if (prev)
        ASSERT_LT(strncmp(prev, k, (size_t)(end - k)), 0);
      prev = k;
    }
    k = end + 1;
  }
  json_decref(root);

  rf_config back;
  ASSERT_OK(parse_config(&back, "run", json));
  back.config[0] = '\0'; /* the one difference: this run named a config file */
  char *json2 = rf_cli_config_json(&back);
  ASSERT_STR_EQ(json2, json);
  free(json2);
  free(json);
  free(text);

  ASSERT_OK(PARSE(&c, "plan", "--json"));
  json = rf_cli_config_json(&c);
  ASSERT_TRUE(strstr(json, "\"json\":true") != NULL);
  ASSERT_TRUE(strstr(json, "\"mode\"") == NULL);
  free(json);
}

/* The axis `i` of c's sweep is option `name` with the values `texts` (NULL-terminated). */
static void expect_axis(const rf_config *c, int i, const char *name, const char *const *texts) {
  ASSERT_LT(i, c->sweep.axis_count);
  ASSERT_STR_EQ(c->sweep.axes[i].name, name);
  int n = 0;
  for (; texts[n]; n++)
    ASSERT_STR_EQ(c->sweep.axes[i].values[n], texts[n]);
  ASSERT_EQ(c->sweep.axes[i].count, n);
}
#define EXPECT_AXIS(c, i, name, ...)                                                               \
  expect_axis(c, i, name, (const char *const[]){__VA_ARGS__, NULL})

/* A list on refit run's command line is a sweep axis like a config file's list: ',' between
 * values, ';' between layouts (whose text holds commas). */
static void test_command_line_sweeps(void) {
  rf_config c;
  ASSERT_OK(PARSE(&c, "run", "--plan", "star,p2p"));
  ASSERT_EQ(c.plan, RF_PLAN_STAR); /* the field holds the first value */
  ASSERT_EQ(c.sweep.axis_count, 1);
  EXPECT_AXIS(&c, 0, "plan", "star", "p2p");

  ASSERT_OK(PARSE(&c, "run", "--trainer", "fsdp=2;fsdp=4,tp=2", "--rollout=tp=2;tp=4,dp=1",
                  "--mode", "fused,grouped", "--bucket-size", "64MiB,0", "--transport", "mpi,nccl",
                  "--placement", "colocated,disaggregated", "--model", "tiny,gemma-2b"));
  ASSERT_STR_EQ(c.trainer, "fsdp=2");
  ASSERT_STR_EQ(c.rollout, "tp=2");
  ASSERT_EQ(c.bucket_size, 64 << 20);
  ASSERT_EQ(c.placement, RF_PLACEMENT_COLOCATED);
  ASSERT_MODES(c, "fused,grouped"); /* modes stay one job */
  ASSERT_EQ(c.sweep.axis_count, 6);
  EXPECT_AXIS(&c, 0, "trainer", "fsdp=2", "fsdp=4,tp=2");
  EXPECT_AXIS(&c, 1, "rollout", "tp=2", "tp=4,dp=1");
  EXPECT_AXIS(&c, 2, "bucket-size", "64MiB", "0");
  EXPECT_AXIS(&c, 3, "transport", "mpi", "nccl");
  EXPECT_AXIS(&c, 4, "placement", "colocated", "disaggregated");
  EXPECT_AXIS(&c, 5, "model", "tiny", "gemma-2b");
  /* A layout's commas are its own; a single value is no sweep. */
  ASSERT_OK(PARSE(&c, "run", "--trainer", "fsdp=2,tp=2", "--plan", "star"));
  ASSERT_STR_EQ(c.trainer, "fsdp=2,tp=2");
  ASSERT_EQ(c.sweep.axis_count, 0);
  /* The last value given wins, as for any option. */
  ASSERT_OK(PARSE(&c, "run", "--plan", "star,p2p", "--plan", "p2p"));
  ASSERT_EQ(c.plan, RF_PLAN_P2P);
  ASSERT_EQ(c.sweep.axis_count, 0);
  /* The command line replaces a file's list, and its lists follow the file's. */
  ASSERT_OK(
      parse_config(&c, "run", "{\"plan\": [\"star\", \"p2p\"], \"bucket_size\": [65536, 0]}"));
  ASSERT_EQ(c.sweep.axis_count, 2);
  write_temp(cfg_path, sizeof cfg_path,
             "{\"plan\": [\"star\", \"p2p\"], \"bucket_size\": [65536, 0]}");
  ASSERT_OK(PARSE(&c, "run", "--plan", "p2p,star", "--config", cfg_path));
  ASSERT_EQ(c.sweep.axis_count, 2);
  EXPECT_AXIS(&c, 0, "bucket-size", "65536", "0");
  EXPECT_AXIS(&c, 1, "plan", "p2p", "star");
  ASSERT_OK(PARSE(&c, "run", "--config", cfg_path, "--plan", "star"));
  ASSERT_EQ(c.sweep.axis_count, 1);
  EXPECT_AXIS(&c, 0, "bucket-size", "65536", "0");
  ASSERT_EQ(c.plan, RF_PLAN_STAR);
  unlink(cfg_path);
  /* Other commands take the text as one value. */
  ASSERT_OK(PARSE(&c, "plan", "--trainer", "fsdp=2;fsdp=4"));
  ASSERT_STR_EQ(c.trainer, "fsdp=2;fsdp=4");
  ASSERT_EQ(c.sweep.axis_count, 0);

  EXPECT_ERROR(
      "refit: error: option --plan: 'ring' is not one of p2p|star|fanout|hierarchical|auto", "run",
      "--plan", "star,ring");
  EXPECT_ERROR("refit: error: option --placement: 'colo' is not one of disaggregated|colocated",
               "run", "--placement=disaggregated,colo");
  EXPECT_ERROR("refit: error: option --plan: 'star,' has an empty value; separate the values "
               "with ','",
               "run", "--plan", "star,");
  EXPECT_ERROR("refit: error: option --trainer: 'fsdp=2;;fsdp=4' has an empty value; separate "
               "the values with ';'",
               "run", "--trainer", "fsdp=2;;fsdp=4");
  EXPECT_ERROR("refit: error: option --bucket-size: '12XB' is not a size (use e.g. 64MiB, 1GiB "
               "or a byte count)",
               "run", "--bucket-size", "64MiB,12XB");
  EXPECT_ERROR("refit: error: option --mode: 'fused,fast' is not one of unfused|grouped|fused, or "
               "a comma-separated list of them",
               "run", "--mode", "fused,fast");
  EXPECT_ERROR("refit: error: option --plan: 'p2p,p2p,p2p,p2p,p2p,p2p,p2p,p2p,p2p,p2p,...' holds "
               "more than 16 values or a value longer than 255 characters",
               "run", "--plan",
               "p2p,p2p,p2p,p2p,p2p,p2p,p2p,p2p,p2p,p2p,p2p,p2p,p2p,p2p,p2p,p2p,p2p");
}

/* --update is checked by its own parser on the command line and in a config file; --delta is
 * a list like --mode (the driver refuses all but off, see tests/cli/versions_cli.sh). */
static void test_update_and_delta(void) {
  rf_config c;
  ASSERT_OK(PARSE(&c, "run"));
  ASSERT_STR_EQ(c.update, "none");
  ASSERT_EQ(c.delta.count, 1);
  ASSERT_EQ(c.delta.items[0], RF_DELTA_CHOICE_OFF);
  ASSERT_OK(PARSE(&c, "run", "--update", "sparse:1e-6", "--delta", "off,auto,bitmask"));
  ASSERT_STR_EQ(c.update, "sparse:1e-6");
  ASSERT_EQ(c.delta.count, 3);
  ASSERT_EQ(c.delta.items[2], RF_DELTA_CHOICE_BITMASK);
  ASSERT_OK(PARSE(&c, "run", "--update=adam:0.001"));
  ASSERT_STR_EQ(c.update, "adam:0.001");
  EXPECT_ERROR("refit: error: option --update: 'sparse:1.5' is not none, full, sparse:F with 0 <= "
               "F <= 1, or adam:LR with 0 < LR <= 1",
               "run", "--update", "sparse:1.5");
  EXPECT_ERROR("refit: error: option --delta: 'off,dense' is not one of off|auto|sparse|bitmask, "
               "or a comma-separated list of them",
               "run", "--delta", "off,dense");
  EXPECT_ERROR("refit: error: option '--update' does not apply to 'refit plan'; see refit plan "
               "--help",
               "plan", "--update", "full");
  ASSERT_OK(parse_config(&c, "run", "{\"update\": \"full\", \"delta\": \"sparse\"}"));
  ASSERT_STR_EQ(c.update, "full");
  ASSERT_EQ(c.delta.items[0], RF_DELTA_CHOICE_SPARSE);
  expect_config_error("run", "{\"update\": \"adam\"}",
                      "1:2: key 'update': 'adam' is not none, full, sparse:F with 0 <= F <= 1, or "
                      "adam:LR with 0 < LR <= 1");
}

int main(void) {
  test_table();
  test_update_and_delta();
  test_defaults();
  test_sizes();
  test_ints_and_doubles();
  test_command_line_errors();
  test_command_line_sweeps();
  test_help_and_version();
  test_config_file();
  test_print_config();
  printf("test_cli: all passed\n");
  return 0;
}
