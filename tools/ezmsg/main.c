/* `ezmsg`: the command-line tool. Dispatches to the subcommands of cli.h and implements the option
 * parsing and error reporting they share. */
#define EZ_CLI_TABLE
#include "cli.h"

#include "base/wire.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define N_COMMANDS (sizeof cli_commands / sizeof cli_commands[0])

enum { OPT_ADDRESS = 1000, OPT_TIMEOUT, OPT_HELP };

static void main_usage(FILE *f) {
  fprintf(f, "usage: ezmsg COMMAND [options] [args]\n\n"
             "The ezmsg command-line tool: run a graph server, edit and inspect its graph.\n\n"
             "commands:\n");
  for (size_t i = 0; i < N_COMMANDS; i++)
    fprintf(f, "  %-12s %s\n", cli_commands[i].name, cli_commands[i].summary);
  fprintf(f,
          "\nEvery command takes --address H:P (default: $%s, else %s) and --help.\n"
          "`ezmsg --version` prints the version.\n"
          "Run `ezmsg COMMAND --help` for a command's usage.\n",
          EZ_ADDR_ENV, EZ_DEFAULT_ADDRESS);
}

void cli_usage(const cli_spec *spec, FILE *f) {
  fprintf(f, "usage: ezmsg %s [options]%s%s\n\n%s\n\noptions:\n", spec->name,
          spec->args && *spec->args ? " " : "", spec->args ? spec->args : "", spec->about);
  fprintf(f, "  -a, --address H:P  graph server address (default: $%s, else %s)\n", EZ_ADDR_ENV,
          EZ_DEFAULT_ADDRESS);
  if (!spec->listen) {
    int ms = spec->timeout_ms ? spec->timeout_ms : EZ_DEFAULT_TIMEOUT_MS;
    if (ms < 0)
      fprintf(f, "  -t, --timeout S    give up after S seconds (default: never; -1: never)\n");
    else
      fprintf(f, "  -t, --timeout S    give up after S seconds (default %g; -1: never)\n",
              ms / 1000.0);
  }
  if (spec->opts_help) fputs(spec->opts_help, f);
  fprintf(f, "  -h, --help         show this help\n");
}

/* What is wrong on one line, then the command's synopsis (its options are a --help away). */
int cli_usage_error(const cli_spec *spec, const char *fmt, ...) {
  fprintf(stderr, "ezmsg %s: ", spec->name);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  fprintf(stderr, "usage: ezmsg %s [options]%s%s (ezmsg %s --help lists them)\n", spec->name,
          spec->args && *spec->args ? " " : "", spec->args ? spec->args : "", spec->name);
  return 2;
}

/* The option closest to an unknown "--name[=value]", or NULL. */
static const char *closest_option(const struct option *opts, const char *arg) {
  if (strncmp(arg, "--", 2)) return NULL;
  char word[64];
  snprintf(word, sizeof word, "%s", arg + 2);
  word[strcspn(word, "=")] = 0;
  const char *names[32];
  size_t n = 0;
  for (const struct option *o = opts; o->name && n < 32; o++)
    names[n++] = o->name;
  return cli_closest(word, names, n);
}

int cli_fail(const cli_ctx *ctx, int rc, const char *what_fmt, ...) {
  if (rc == EZ_ENOSERVER) {
    fprintf(stderr, "ezmsg: no graph server at %s\n", ctx->shown);
    return 1;
  }
  char what[512];
  va_list ap;
  va_start(ap, what_fmt);
  vsnprintf(what, sizeof what, what_fmt, ap);
  va_end(ap);
  fprintf(stderr, "ezmsg: %s: %s (graph server %s)\n", what, ez_strerror(rc), ctx->shown);
  return 1;
}

int cli_check_address(const char *addr, bool allow_port0, char out[300]) {
  char host[256];
  uint16_t port;
  if (addr && (!*addr || strlen(addr) >= 300)) return EZ_EADDR; /* "" is not "the default" */
  ezi_addr_resolve(addr, out);
  if (ezi_addr_parse(out, host, &port)) return EZ_EADDR;
  if (!allow_port0 && port == 0) return EZ_EADDR;
  const char *p = strrchr(out, ':') + 1; /* digits only: no sign, no spaces */
  for (; *p; p++)
    if (!isdigit((unsigned char)*p)) return EZ_EADDR;
  for (const char *h = host; *h; h++)
    if (isspace((unsigned char)*h) || !isprint((unsigned char)*h)) return EZ_EADDR;
  return 0;
}

/* --timeout S: seconds (a decimal number from 0 to 2,000,000, about 23 days) or -1 (never), into
 * milliseconds, rounded to the nearest; a positive time below 1 ms counts as 1 ms. 0 or -1. */
static int parse_timeout_s(const char *s, int *ms) {
  if (!strcmp(s, "-1")) {
    *ms = -1;
    return 0;
  }
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= 0 && v <= 2e6)) return -1;
  long long r = (long long)(v * 1000.0 + 0.5); /* v >= 0: rounds to the nearest */
  *ms = (int)(r == 0 && v > 0 ? 1 : r);
  return 0;
}

static char g_opt_error[512]; /* set by cli_opt_error during one option handler */

void cli_opt_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_opt_error, sizeof g_opt_error, fmt, ap);
  va_end(ap);
}

/* "--name" of an extra option (by its value), else "-c". */
static void option_name(const cli_spec *spec, int c, char out[64]) {
  for (const struct option *o = spec->opts; o && o->name; o++) {
    if (o->val == c) {
      snprintf(out, 64, "--%s", o->name);
      return;
    }
  }
  snprintf(out, 64, "-%c", c > 32 && c < 127 ? c : '?');
}

int cli_parse(const cli_spec *spec, int argc, char **argv, cli_ctx *ctx, cli_opt_fn fn,
              void *user) {
  *ctx = (cli_ctx){.spec = spec,
                   .timeout_ms = spec->timeout_ms ? spec->timeout_ms : EZ_DEFAULT_TIMEOUT_MS};
  struct option opts[32];
  size_t n = 0;
  opts[n++] = (struct option){"address", required_argument, NULL, OPT_ADDRESS};
  if (!spec->listen) opts[n++] = (struct option){"timeout", required_argument, NULL, OPT_TIMEOUT};
  opts[n++] = (struct option){"help", no_argument, NULL, OPT_HELP};
  for (const struct option *o = spec->opts; o && o->name && n < 31; o++)
    opts[n++] = *o;
  opts[n] = (struct option){0};
  char shorts[64];
  /* Options may come anywhere; "--" ends them (for a topic that starts with '-'). */
  snprintf(shorts, sizeof shorts, ":a:h%s%s",
           spec->listen ? "" : "t:", spec->opts_short ? spec->opts_short : "");

  optind = 0; /* glibc: full re-initialisation */
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, shorts, opts, NULL)) != -1) {
    switch (c) {
    case 'a':
    case OPT_ADDRESS: ctx->address = optarg; break;
    case 't':
    case OPT_TIMEOUT:
      if (parse_timeout_s(optarg, &ctx->timeout_ms))
        return cli_usage_error(spec, "bad --timeout '%s' (seconds, such as 2 or 0.5; or -1)",
                               optarg);
      break;
    case 'h':
    case OPT_HELP: cli_usage(spec, stdout); return 0;
    case ':': return cli_usage_error(spec, "option '%s' needs a value", argv[optind - 1]);
    case '?': {
      if (optopt && optopt < 256 && isprint(optopt))
        return cli_usage_error(spec, "unknown option '-%c'", optopt);
      const char *near = closest_option(opts, argv[optind - 1]);
      if (near)
        return cli_usage_error(spec, "unknown option '%s' (did you mean --%s?)", argv[optind - 1],
                               near);
      return cli_usage_error(spec, "unknown option '%s'", argv[optind - 1]);
    }
    default:
      g_opt_error[0] = 0;
      if (!fn || fn(c, optarg, user) != 0) {
        /* One line: the handler's reason, or the option and its value. */
        if (g_opt_error[0]) return cli_usage_error(spec, "%s", g_opt_error);
        char name[64];
        option_name(spec, c, name);
        if (!optarg) return cli_usage_error(spec, "bad option %s", name);
        return cli_usage_error(spec, "bad value '%s' for %s", optarg, name);
      }
      break;
    }
  }
  if (cli_check_address(ctx->address, spec->listen, ctx->shown)) {
    if (ctx->address)
      return cli_usage_error(spec, "bad --address '%s' (want HOST:PORT)", ctx->address);
    return cli_usage_error(spec, "bad address in $%s: '%s' (want HOST:PORT)", EZ_ADDR_ENV,
                           getenv(EZ_ADDR_ENV) ? getenv(EZ_ADDR_ENV) : "");
  }
  ctx->argc = argc - optind;
  ctx->argv = argv + optind;
  if (ctx->argc < spec->min_args)
    return cli_usage_error(spec, "missing arguments (want %s)", spec->args);
  if (spec->max_args >= 0 && ctx->argc > spec->max_args)
    return cli_usage_error(spec, "too many arguments");
  return -1;
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc < 2) {
    main_usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V") || !strcmp(cmd, "version")) {
    printf("ezmsg %s (ezmsg-c; speaks ezmsg %s, and %s of the profiling branch)\n", ez_version(),
           EZ_VERSION, EZ_VERSION_PROFILING);
    return fflush(stdout) == 0 ? 0 : 1;
  }
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    main_usage(stdout);
    return 0;
  }
  for (size_t i = 0; i < N_COMMANDS; i++) {
    if (strcmp(cmd, cli_commands[i].name) == 0) {
      int rc = cli_commands[i].fn(argc - 1, argv + 1);
      if (fflush(stdout) != 0 && rc == 0) rc = 1; /* e.g. stdout is a closed pipe */
      return rc;
    }
  }
  const char *names[N_COMMANDS + 1];
  for (size_t i = 0; i < N_COMMANDS; i++)
    names[i] = cli_commands[i].name;
  const char *near = cli_closest(cmd, names, N_COMMANDS);
  if (near)
    fprintf(stderr, "ezmsg: unknown command '%s' (did you mean '%s'?)\n", cmd, near);
  else
    fprintf(stderr, "ezmsg: unknown command '%s'\n", cmd);
  fprintf(stderr, "usage: ezmsg COMMAND [options] [args] (ezmsg --help lists the commands)\n");
  return 2;
}
