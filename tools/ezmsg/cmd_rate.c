/* `ezmsg hz TOPIC...` and `ezmsg bw TOPIC...`: the live message rate or bandwidth of topics, from
 * the telemetry (the graph view, graphview.h): what a subscriber of each topic receives, over the
 * last --window seconds, sampled every --interval seconds. On a terminal the lines are redrawn in
 * place; on a pipe every sample is a line per topic (with --json, one document per sample). */
#include "cli.h"
#include "graphview.h"
#include "jsonout.h"
#include "textfit.h"
#include "watch.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { OPT_JSON = 3100, OPT_INTERVAL, OPT_WINDOW, OPT_COUNT };

static const struct option rate_opts[] = {
    {"json", no_argument, NULL, OPT_JSON},
    {"interval", required_argument, NULL, OPT_INTERVAL},
    {"window", required_argument, NULL, OPT_WINDOW},
    {"count", required_argument, NULL, OPT_COUNT},
    {0},
};

#define RATE_OPTS_HELP                                                                             \
  "      --window S     average over the last S seconds (default 2; at most 10)\n"                 \
  "      --interval S   a sample every S seconds (default 1)\n"                                    \
  "      --count N      stop after N samples (default 0: until SIGINT / SIGTERM)\n"                \
  "      --json         one JSON document per sample, one a line\n"

static const cli_spec hz_spec = {
    .name = "hz",
    .args = "TOPIC...",
    .about = "Prints the message rate of each TOPIC: what a subscriber of it receives from every\n"
             "publisher upstream (its own and those connected to it), from the telemetry.",
    .min_args = 1,
    .max_args = -1,
    .opts = rate_opts,
    .opts_help = RATE_OPTS_HELP,
};

static const cli_spec bw_spec = {
    .name = "bw",
    .args = "TOPIC...",
    .about = "Prints the bandwidth of each TOPIC (payload bytes per second a subscriber of it\n"
             "receives) and the mean message size, from the telemetry.",
    .min_args = 1,
    .max_args = -1,
    .opts = rate_opts,
    .opts_help = RATE_OPTS_HELP,
};

typedef struct rate_args {
  bool json;
  double interval_s, window_s;
  unsigned long long count;
} rate_args;

static int parse_pos(const char *s, double max, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v > 0) || v > max) return -1;
  *out = v;
  return 0;
}

static int rate_opt(int opt, const char *arg, void *user) {
  rate_args *a = user;
  switch (opt) {
  case OPT_JSON: a->json = true; return 0;
  case OPT_INTERVAL:
    if (!parse_pos(arg, 86400, &a->interval_s)) return 0;
    cli_opt_error("bad --interval '%s' (seconds, more than 0)", arg);
    return -1;
  case OPT_WINDOW:
    if (!parse_pos(arg, 1e9, &a->window_s)) {
      if (a->window_s > EZ_PROFILE_MAX_WINDOW_S) a->window_s = EZ_PROFILE_MAX_WINDOW_S;
      return 0;
    }
    cli_opt_error("bad --window '%s' (seconds, more than 0, at most %g)", arg,
                  EZ_PROFILE_MAX_WINDOW_S);
    return -1;
  case OPT_COUNT: {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(arg, &end, 10);
    if (!errno && end != arg && !*end && *arg != '-') {
      a->count = v;
      return 0;
    }
    cli_opt_error("bad --count '%s' (a whole number)", arg);
    return -1;
  }
  default: return -1;
  }
}

/* One sample's line for a topic. */
static void line_for(bool bw, const gv *v, const char *name, char *out, size_t cap) {
  const gv_topic *t = gv_find_topic(v, name);
  char label[4 * 40 + 1];
  cli_fit(label, name, 40, true);
  if (!t) {
    snprintf(out, cap, "%s  (no such topic)", label);
  } else if (!bw) {
    snprintf(out, cap, "%s %10.1f msg/s  (%zu publisher%s)", label, t->rate_hz, t->n_pubs,
             t->n_pubs == 1 ? "" : "s");
  } else {
    double mean = t->rate_hz > 0 ? t->bytes_per_s / t->rate_hz : 0;
    snprintf(out, cap, "%s %12.3f MB/s  %10.0f B/msg  %10.1f msg/s", label, t->bytes_per_s / 1e6,
             mean, t->rate_hz);
  }
}

static json_t *sample_json(bool bw, const gv *v, int argc, char **argv) {
  json_t *doc = json_object(), *arr = json_array();
  json_object_set_new(doc, "timestamp", json_string(v->timestamp));
  json_object_set_new(doc, "window_s", jo_real(v->window_s));
  for (int i = 0; i < argc; i++) {
    const gv_topic *t = gv_find_topic(v, argv[i]);
    json_t *o = json_object();
    json_object_set_new(o, "topic", json_string(argv[i]));
    json_object_set_new(o, "known", json_boolean(t != NULL));
    json_object_set_new(o, "rate_hz", jo_real(t ? t->rate_hz : 0));
    if (bw) {
      double b = t ? t->bytes_per_s : 0, r = t ? t->rate_hz : 0;
      json_object_set_new(o, "bytes_per_s", jo_real(b));
      json_object_set_new(o, "mean_bytes", jo_real(r > 0 ? b / r : 0));
    }
    json_object_set_new(o, "publishers", json_integer(t ? (json_int_t)t->n_pubs : 0));
    json_array_append_new(arr, o);
  }
  json_object_set_new(doc, "topics", arr);
  return doc;
}

static int run(const cli_spec *spec, int argc, char **argv) {
  bool bw = spec == &bw_spec;
  rate_args a = {.interval_s = 1, .window_s = EZ_PROFILE_WINDOW_S};
  cli_ctx ctx;
  int rc = cli_parse(spec, argc, argv, &ctx, rate_opt, &a);
  if (rc >= 0) return rc;
  sigset_t stop;
  watch_begin(&stop);
  bool tty = isatty(STDOUT_FILENO) && !a.json;
  bool ever_ok = false;
  for (unsigned long long n = 0; a.count == 0 || n < a.count; n++) {
    struct timespec t0 = watch_now();
    gv v;
    rc = gv_fetch(ctx.address, a.window_s, ctx.timeout_ms, &v);
    if (rc && !ever_ok) return cli_fail(&ctx, rc, "%s", spec->name);
    if (tty && n > 0) printf("\033[%dA", ctx.argc); /* back over the previous sample's lines */
    for (int i = 0; i < ctx.argc && !a.json; i++) {
      char line[512];
      if (rc)
        snprintf(line, sizeof line, "(no sample: %s, graph server %s)",
                 rc == EZ_ENOSERVER ? "not running" : ez_strerror(rc), ctx.shown);
      else
        line_for(bw, &v, ctx.argv[i], line, sizeof line);
      if (tty)
        printf("\r%s\033[K\n", line);
      else
        printf("%s %s\n", rc ? "-" : v.timestamp, line);
    }
    if (a.json && !rc) {
      json_t *doc = sample_json(bw, &v, ctx.argc, ctx.argv);
      char *text = doc ? jo_dumps(doc, false) : NULL;
      if (text) puts(text);
      free(text);
      json_decref(doc);
    }
    if (!rc) gv_free(&v);
    ever_ok = ever_ok || !rc;
    if (fflush(stdout) != 0 || ferror(stdout)) return 1;
    if (a.count && n + 1 >= a.count) break;
    if (!watch_sleep(&stop, t0, a.interval_s)) break;
  }
  return 0;
}

int cmd_hz(int argc, char **argv) { return run(&hz_spec, argc, argv); }
int cmd_bw(int argc, char **argv) { return run(&bw_spec, argc, argv); }
