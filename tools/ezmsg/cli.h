/* The `ezmsg` command-line tool: the subcommand table and the helpers every subcommand shares.
 *
 * Adding a subcommand takes one declaration and one table entry below, plus a file
 * tools/ezmsg/cmd_<name>.c defining it (the build globs every .c file in tools/ezmsg):
 *
 *   int cmd_pub(int argc, char **argv);
 *   ...
 *   {"pub", cmd_pub, "publish lines from stdin to a topic"},
 *
 * A subcommand gets argv[0] = its own name and returns the process exit code: 0 success, 1 a
 * runtime failure (one line on stderr), 2 a usage error (usage on stderr). `--help` prints usage
 * on stdout and exits 0. cli_parse() below does all of that for the common options (--address,
 * --timeout, --help) and any extra options a command declares. */
#ifndef EZ_CLI_H
#define EZ_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

#include "ezmsg/ezmsg.h"

int cmd_serve(int argc, char **argv);
int cmd_start(int argc, char **argv);
int cmd_shutdown(int argc, char **argv);
int cmd_connect(int argc, char **argv);
int cmd_disconnect(int argc, char **argv);
int cmd_graphviz(int argc, char **argv);
int cmd_mermaid(int argc, char **argv);
int cmd_sync(int argc, char **argv);
int cmd_pause(int argc, char **argv);
int cmd_resume(int argc, char **argv);
int cmd_pub(int argc, char **argv);
int cmd_sub(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_perf(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_hz(int argc, char **argv);
int cmd_bw(int argc, char **argv);
int cmd_dashboard(int argc, char **argv);

typedef struct cli_command {
  const char *name;
  int (*fn)(int argc, char **argv);
  const char *summary; /* one line for `ezmsg --help` */
} cli_command;

/* The table; only main.c instantiates it (it defines EZ_CLI_TABLE before including this file). */
#ifdef EZ_CLI_TABLE
static const cli_command cli_commands[] = {
    {"serve", cmd_serve, "run a graph server in the foreground (until SIGINT/SIGTERM/shutdown)"},
    {"start", cmd_start, "start a graph server in the background; print its pid"},
    {"shutdown", cmd_shutdown, "ask the graph server to stop"},
    {"connect", cmd_connect, "add the edge FROM -> TO to the topic graph"},
    {"disconnect", cmd_disconnect, "remove the edge FROM -> TO from the topic graph"},
    {"graphviz", cmd_graphviz, "print the topic graph in Graphviz dot"},
    {"mermaid", cmd_mermaid, "print the topic graph as a Mermaid flowchart"},
    {"sync", cmd_sync, "wait until every publisher has drained its buffers (they stay paused)"},
    {"pause", cmd_pause, "pause every publisher"},
    {"resume", cmd_resume, "resume every publisher"},
    {"pub", cmd_pub, "publish stdin lines, or N messages, to a topic"},
    {"sub", cmd_sub, "print the messages of a topic, one a line"},
    {"profile", cmd_profile, "print the graph's profile (rates, backpressure, processing times)"},
    {"list", cmd_list, "list topics with their publishers and subscribers (idle ones too)"},
    {"info", cmd_info, "describe one topic: its endpoints, rates and latencies"},
    {"hz", cmd_hz, "print the message rate of topics, live"},
    {"bw", cmd_bw, "print the bandwidth of topics, live"},
    {"dashboard", cmd_dashboard, "serve a live web page of the graph, with plots, and /metrics"},
    {"perf", cmd_perf, "measure throughput and latency (fanout, fanin, relay, pingpong)"},
};
#endif

/* ---- shared helpers (main.c) ---------------------------------------------------------------- */

/* Describes a subcommand's command line, for cli_parse and its usage text. */
typedef struct cli_spec {
  const char *name;       /* "connect" */
  const char *args;       /* positional synopsis, e.g. "FROM TO" ("" for none) */
  const char *about;      /* one paragraph (may contain newlines) */
  int min_args, max_args; /* positional argument count bounds (max < 0: unbounded) */
  bool listen;            /* a server address to listen on: port 0 allowed, no --timeout */
  int timeout_ms;         /* default --timeout (0: EZ_DEFAULT_TIMEOUT_MS) */
  /* Extra options (zero-terminated; `val` must not be 'a', 'h', 't' or 1000..1010) and their
   * help lines ("  -n, --count N    ...\n"). */
  const struct option *opts;
  const char *opts_short; /* getopt short-option string for the extra options, e.g. "n:" */
  const char *opts_help;
} cli_spec;

/* What cli_parse found. */
typedef struct cli_ctx {
  const cli_spec *spec;
  const char *address; /* as given (NULL: the library default, i.e. env or 127.0.0.1:25978) */
  char shown[300];     /* the address in effect, for messages */
  int timeout_ms;
  int argc; /* positional arguments */
  char **argv;
} cli_ctx;

/* Handles one extra option: returns 0, or -1 for a bad value. cli_parse then reports a usage
 * error in one line: the reason the handler gave with cli_opt_error, else "bad value 'V' for
 * --NAME". Handlers print nothing themselves. */
typedef int (*cli_opt_fn)(int opt, const char *arg, void *user);

/* Parses argv (argv[0] = the command name). Returns -1 to go on, or the exit code to return now
 * (0 after --help, 2 after a usage error). */
int cli_parse(const cli_spec *spec, int argc, char **argv, cli_ctx *ctx, cli_opt_fn fn, void *user);

/* From an option handler: the one-line reason its value is bad (without "ezmsg CMD: "). */
void cli_opt_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints the command's usage (to stdout for --help, stderr for errors). */
void cli_usage(const cli_spec *spec, FILE *f);

/* "ezmsg NAME: <message>" then the usage, on stderr. Returns 2. */
int cli_usage_error(const cli_spec *spec, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Reports a library error as one line on stderr and returns 1. EZ_ENOSERVER becomes
 * "ezmsg: no graph server at ADDR"; anything else "ezmsg: <what>: <ez_strerror> (graph server
 * ADDR)". */
int cli_fail(const cli_ctx *ctx, int rc, const char *what_fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The name of names[0..n) closest to a mistyped `word` (a small edit distance, or word a prefix of
 * it), for "did you mean"; NULL if none is close. */
const char *cli_closest(const char *word, const char *const *names, size_t n);

/* Checks a "host:port" address (resolved from NULL as the library does) and copies it into out.
 * Returns 0 or EZ_EADDR. */
int cli_check_address(const char *addr, bool allow_port0, char out[300]);

#endif
