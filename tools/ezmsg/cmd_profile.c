/* `ezmsg profile`: the graph's aggregated profile (ez_profile), as JSON or as a table, once or
 * redrawn every few seconds.
 *
 * The table is built from ez_profile_parse's structs (no JSON library here): one row per
 * publisher (its topic, message rate, MB/s, backpressure avg/p99/max and channel count), then one
 * row per subscriber of every channel fed by that publisher (channels are matched to publishers by
 * pub_id). Channels whose publisher did not answer, and 3.9 subscribers (which name no publisher),
 * are listed at the end under their topic. Rows
 * are at most TABLE_COLS columns: long topics and handles are cut with "...", and labels are
 * sanitised so a topic cannot send control sequences to the terminal. */
#include "cli.h"
#include "graphview.h"
#include "jsonout.h"
#include "textfit.h"
#include "watch.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TABLE_COLS 100
#define NAME_W 28 /* the topic / handle column */
#define LAST_W 10 /* the channel count / transport mode column */
/* A row: the name, " " + six numbers (10, 9, 9, 9, 9, 8 wide), "  " + the last column. */
_Static_assert(NAME_W + 6 + 10 + 4 * 9 + 8 + 2 + LAST_W <= TABLE_COLS, "rows must fit");

enum { OPT_WINDOW = 'w', OPT_FORMAT = 'f', OPT_WATCH = 1100, OPT_TRACE, OPT_COUNT };

typedef struct profile_opts {
  double window_s;
  bool table;
  double watch_s; /* 0: print once */
  bool trace;     /* --trace: the per-message samples instead */
  uint64_t count; /* --trace: stop after this many samples (0: never) */
} profile_opts;

static const struct option profile_long[] = {
    {"window", required_argument, NULL, OPT_WINDOW},
    {"format", required_argument, NULL, OPT_FORMAT},
    {"watch", required_argument, NULL, OPT_WATCH},
    {"trace", no_argument, NULL, OPT_TRACE},
    {"count", required_argument, NULL, OPT_COUNT},
    {0},
};

static const cli_spec profile_spec = {
    .name = "profile",
    .args = "[--trace [TOPIC...]]",
    .about = "Prints the graph's profile: every publisher's message and byte rates and\n"
             "backpressure (time from sending a message to its last release), and every\n"
             "channel's per-subscriber processing times and transport mode, over the last\n"
             "--window seconds. The graph server asks each publisher and channel and waits at\n"
             "most 1 s for each. See docs/profiling.md for the fields.\n"
             "With --trace, prints instead the per-message trace samples of the endpoints on\n"
             "TOPIC... (default: all) as they come, one JSON document a line (time, endpoint,\n"
             "topic, metric, value, seq, pid, dialect; {\"dropped\": n} when samples were lost),\n"
             "until Ctrl-C or --count: publish_delta_ns and backpressure_wait_ns of publishers,\n"
             "lease_time_ns of subscribers (3.9's metrics). The endpoints record them only\n"
             "while this runs.",
    .max_args = -1,
    .opts = profile_long,
    .opts_short = "w:f:",
    .opts_help = "  -w, --window S     profile the last S seconds (default 2.0; at most 10;\n"
                 "                     0 reports totals only)\n"
                 "  -f, --format F     json (default: the document, indented) or table\n"
                 "      --watch S      redraw every S seconds until interrupted (Ctrl-C)\n"
                 "      --trace        the trace samples of TOPIC... (see above)\n"
                 "      --count N      with --trace: stop after N samples\n",
};

/* A number (as strtod reads it: out-of-range values become +-inf or 0), nothing after it; NaN
 * refused. */
static int parse_seconds(const char *s, double *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || *end || isnan(v)) return -1;
  *out = v;
  return 0;
}

static int on_opt(int opt, const char *arg, void *user) {
  profile_opts *po = user;
  double v;
  switch (opt) {
  case OPT_WINDOW:
    if (parse_seconds(arg, &v) || v < 0) {
      cli_opt_error("bad --window '%s' (seconds, 0 to %g)", arg, EZ_PROFILE_MAX_WINDOW_S);
      return -1;
    }
    po->window_s = v > EZ_PROFILE_MAX_WINDOW_S ? EZ_PROFILE_MAX_WINDOW_S : v;
    return 0;
  case OPT_FORMAT:
    if (!strcmp(arg, "json") || !strcmp(arg, "table")) {
      po->table = !strcmp(arg, "table");
      return 0;
    }
    cli_opt_error("bad --format '%s' (json or table)", arg);
    return -1;
  case OPT_WATCH:
    if (parse_seconds(arg, &v) || !(v > 0) || v > 86400) {
      cli_opt_error("bad --watch '%s' (seconds, more than 0)", arg);
      return -1;
    }
    po->watch_s = v;
    return 0;
  case OPT_TRACE: po->trace = true; return 0;
  case OPT_COUNT: {
    char *end;
    errno = 0;
    unsigned long long n = strtoull(arg, &end, 10);
    if (errno || end == arg || *end || !n || arg[0] == '-') {
      cli_opt_error("bad --count '%s' (a number of samples, at least 1)", arg);
      return -1;
    }
    po->count = n;
    return 0;
  }
  default: return -1;
  }
}

/* ---- JSON output --------------------------------------------------------------------------------
 * The document with "timestamp" (ISO-8601, UTC) first and every real at 6 significant digits
 * (jsonout.h): indented by two spaces (as the reference CLI's json.dumps(indent=2)) when printed
 * once, one document per line when watching. */
static int json_out(const char *json, bool one_line, FILE *f) {
  json_error_t jerr;
  json_t *doc = json_loads(json, 0, &jerr);
  if (!json_is_object(doc)) {
    json_decref(doc);
    return doc || json_error_code(&jerr) != json_error_out_of_memory ? EZ_EPROTO : EZ_ENOMEM;
  }
  json_t *out = json_object();
  char ts[40];
  gv_now_iso(ts);
  json_object_set_new(out, "timestamp", json_string(ts));
  json_object_update(out, doc);
  json_decref(doc);
  jo_round_tree(out);
  char *text = jo_dumps(out, !one_line);
  json_decref(out);
  if (!text) return EZ_ENOMEM;
  fputs(text, f);
  fputc('\n', f);
  free(text);
  return 0;
}

/* ---- table output ---------------------------------------------------------------------------- */

/* A number right-aligned in exactly `width` columns: `dec` decimals if that fits, fewer if not,
 * then exponent form. */
static void num(char *out, size_t cap, double v, int width, int dec) {
  char tmp[64];
  if (!isfinite(v)) v = 0;
  for (int d = dec; d >= 0; d--) {
    snprintf(tmp, sizeof tmp, "%.*f", d, v);
    if ((int)strlen(tmp) <= width) {
      snprintf(out, cap, "%*s", width, tmp);
      return;
    }
  }
  snprintf(tmp, sizeof tmp, "%.*e", width >= 9 ? width - 7 : 1, v);
  snprintf(out, cap, "%*.*s", width, width, tmp);
}

/* One row: the name, six numeric columns (NULL: "-") and the last column. At most
 * NAME_W + 6 + 10 + 4 * 9 + 8 + 2 + LAST_W = 100 columns. */
static void row(FILE *f, const char *name, const double *vals[6], const char *last) {
  static const int w[6] = {10, 9, 9, 9, 9, 8}, dec[6] = {1, 3, 3, 3, 3, 0};
  char cell[4 * NAME_W + 1];
  cli_fit(cell, name, NAME_W, true);
  fputs(cell, f);
  for (int i = 0; i < 6; i++) {
    fputc(' ', f);
    if (vals[i])
      num(cell, sizeof cell, *vals[i], w[i], dec[i]);
    else
      snprintf(cell, sizeof cell, "%*s", w[i], "-");
    fputs(cell, f);
  }
  cli_fit(cell, last, LAST_W, false);
  fprintf(f, "  %s\n", cell);
}

/* The p99 of a latency, or NULL ("-") when the document has none: the reference does not send
 * p50_ms / p99_ms (they parse as 0), while ours is never 0 when there are nonzero samples; and
 * nothing timed in the window (a 3.9 process's snapshot times nothing) has no figures at all. */
static const double *p99_of(const ez_latency *l) {
  return !l->timed_samples || (l->p99_ms == 0 && l->max_ms > 0) ? NULL : &l->p99_ms;
}
/* Its mean or maximum, or NULL ("-") when nothing was timed in the window. */
static const double *timed(const ez_latency *l, const double *v) {
  return l->timed_samples ? v : NULL;
}

static void pub_row(FILE *f, const ez_profile_pub *p, size_t matched) {
  double mb = p->byte_rate_per_s / 1e6, pid = (double)p->pid;
  const double *v[6] = {&p->message_rate_hz,
                        &mb,
                        timed(&p->backpressure, &p->backpressure.avg_ms),
                        p99_of(&p->backpressure),
                        timed(&p->backpressure, &p->backpressure.max_ms),
                        &pid};
  char last[32];
  /* Ours count the channels themselves (num_channels); the reference's do not: then count the
   * channels of the document that name this publisher. */
  uint64_t nch = p->num_channels > matched ? p->num_channels : matched;
  snprintf(last, sizeof last, "%llu ch", (unsigned long long)nch);
  row(f, p->topic ? p->topic : p->id, v, last);
}

/* Under an ezmsg-c publisher with messages in flight: one row per channel holding some, named
 * by the channel's id (and pid) as the publisher knows it, whether or not that channel answers
 * the profile itself (a channel that never acknowledges holds the publisher up: docs/profiling.md).
 * The count is in the last column. */
static void lease_rows(FILE *f, const ez_profile_pub *p) {
  for (size_t i = 0; i < p->n_leases; i++) {
    const ez_profile_lease *l = &p->leases[i];
    if (!l->in_flight) continue;
    char name[4 * NAME_W + 1], last[48];
    snprintf(name, sizeof name, "  held by %.36s", l->channel_id ? l->channel_id : "?");
    double pid = (double)l->pid;
    const double *v[6] = {NULL, NULL, NULL, NULL, NULL, &pid};
    snprintf(last, sizeof last, "%llu %s", (unsigned long long)l->in_flight,
             l->mode ? l->mode : "?");
    row(f, name, v, last);
  }
}

static void sub_rows(FILE *f, const ez_profile_channel *c) {
  for (size_t j = 0; j < c->n_subscribers; j++) {
    const ez_profile_subscriber *s = &c->subscribers[j];
    const char *label = s->handle ? s->handle : s->subscriber_id ? s->subscriber_id : "?";
    char name[4 * NAME_W + 3];
    name[0] = name[1] = ' ';
    cli_fit(name + 2, label, NAME_W - 2, false);
    double pid = (double)c->pid;
    const double *v[6] = {&s->message_rate_hz,
                          NULL,
                          timed(&s->processing, &s->processing.avg_ms),
                          p99_of(&s->processing),
                          timed(&s->processing, &s->processing.max_ms),
                          &pid};
    row(f, name, v, c->mode ? c->mode : "?");
  }
}

static int cmp_pub(const void *a, const void *b) {
  const ez_profile_pub *x = *(const ez_profile_pub *const *)a,
                       *y = *(const ez_profile_pub *const *)b;
  int r = strcmp(x->topic ? x->topic : "", y->topic ? y->topic : "");
  if (r) return r;
  if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
  return strcmp(x->id ? x->id : "", y->id ? y->id : "");
}

static bool same(const char *a, const char *b) { return a && b && !strcmp(a, b); }

static void print_table(const ez_profile_data *d, const char *addr, FILE *f) {
  char head[4 * NAME_W + 1];
  cli_fit(head, addr, 40, false);
  fprintf(f, "graph server %s: window %.1f s, %zu publisher%s, %zu channel%s\n", head, d->window_s,
          d->n_publishers, d->n_publishers == 1 ? "" : "s", d->n_channels,
          d->n_channels == 1 ? "" : "s");
  cli_fit(head, "TOPIC / SUBSCRIBER", NAME_W, true);
  fprintf(f, "%s %10s %9s %9s %9s %9s %8s  %s\n", head, "MSG/S", "MB/S", "AVG MS", "P99 MS",
          "MAX MS", "PID", "CH / MODE");
  if (!d->n_publishers && !d->n_channels) {
    fputs("(no publishers or channels answered)\n", f);
    return;
  }
  const ez_profile_pub **order = calloc(d->n_publishers ? d->n_publishers : 1, sizeof *order);
  bool *shown = calloc(d->n_channels ? d->n_channels : 1, sizeof *shown);
  if (!order || !shown) {
    free(order);
    free(shown);
    fputs("(out of memory)\n", f);
    return;
  }
  for (size_t i = 0; i < d->n_publishers; i++)
    order[i] = &d->publishers[i];
  qsort(order, d->n_publishers, sizeof *order, cmp_pub);
  for (size_t i = 0; i < d->n_publishers; i++) {
    const ez_profile_pub *p = order[i];
    size_t matched = 0;
    for (size_t k = 0; k < d->n_channels; k++)
      matched += same(d->channels[k].pub_id, p->id);
    pub_row(f, p, matched);
    lease_rows(f, p);
    for (size_t k = 0; k < d->n_channels; k++) {
      if (shown[k] || !same(d->channels[k].pub_id, p->id)) continue;
      shown[k] = true;
      sub_rows(f, &d->channels[k]);
    }
  }
  /* Channels whose publisher is not in the document (it did not answer in time). */
  for (size_t k = 0; k < d->n_channels; k++) {
    if (shown[k]) continue;
    const ez_profile_channel *c = &d->channels[k];
    const double *v[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
    /* No pub_id: a 3.9 subscriber (3.9 does not say which publisher feeds it); otherwise its
     * publisher did not answer in time. */
    row(f,
        c->topic    ? c->topic
        : c->pub_id ? c->pub_id
                    : "?",
        v, c->pub_id ? "pub silent" : "sub (3.9)");
    for (size_t m = k; m < d->n_channels; m++) {
      if (shown[m] || !same(d->channels[m].pub_id, c->pub_id)) continue;
      shown[m] = true;
      sub_rows(f, &d->channels[m]);
    }
    if (!shown[k]) { /* no pub_id at all */
      shown[k] = true;
      sub_rows(f, c);
    }
  }
  free(order);
  free(shown);
  fputs("ms: publishers: backpressure (message sent -> released by every channel);\n"
        "    subscribers: processing (message handed over -> released);\n"
        "    held by: a channel (its id, pid) with that many messages of the publisher in flight\n",
        f);
}

/* ---- the command ----------------------------------------------------------------------------- */

/* Fetches one profile and renders it into a new string (*out, caller frees), so a redraw
 * replaces the old picture at once instead of clearing the screen for the length of a request.
 * Returns 0 or the library error. */
static int render(const cli_ctx *ctx, const profile_opts *po, char **out) {
  *out = NULL;
  char *json = NULL;
  int rc = ez_profile(ctx->address, po->window_s, &json, ctx->timeout_ms);
  if (rc) return rc;
  size_t len = 0;
  FILE *f = open_memstream(out, &len);
  if (!f) rc = EZ_ENOMEM;
  if (!rc && !po->table) rc = json_out(json, po->watch_s > 0, f);
  if (!rc && po->table) {
    ez_profile_data d;
    rc = ez_profile_parse(json, &d);
    if (!rc) print_table(&d, ctx->shown, f);
    ez_profile_data_free(&d);
  }
  if (f && fclose(f) != 0 && !rc) rc = EZ_ENOMEM;
  free(json);
  if (rc) {
    free(*out);
    *out = NULL;
  }
  return rc;
}

/* ---- --trace ------------------------------------------------------------------------------ */

static volatile int g_trace_stop;
static void on_stop(int sig) {
  (void)sig;
  g_trace_stop = 1;
}

typedef struct trace_out {
  uint64_t left; /* samples still to print (--count), or 0: no limit */
  bool limited;
} trace_out;

/* One sample as a JSON line; nonzero to stop (--count reached, or stdout gone). */
static int trace_line(void *user, const ez_trace_sample *x) {
  trace_out *t = user;
  time_t sec = (time_t)x->time;
  struct tm tm;
  gmtime_r(&sec, &tm);
  char ts[48];
  size_t n = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(ts + n, sizeof ts - n, ".%06dZ", (int)((x->time - (double)sec) * 1e6));
  json_t *j = x->dropped ? json_pack("{sssIss}", "time", ts, "dropped", (json_int_t)x->dropped,
                                     "dialect", x->dialect)
                         : json_pack("{sssssssssssfsIsIss}", "time", ts, "endpoint", x->endpoint_id,
                                     "topic", x->topic, "metric", x->metric, "unit", "ns", "value",
                                     x->value, "seq", (json_int_t)x->seq, "pid", (json_int_t)x->pid,
                                     "dialect", x->dialect);
  char *line = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  int bad = !line || puts(line) == EOF || fflush(stdout) != 0;
  free(line);
  if (bad) return 1;
  if (x->dropped || !t->limited) return 0;
  return --t->left == 0;
}

static int trace(cli_ctx *ctx, const profile_opts *po) {
  struct sigaction sa = {.sa_handler = on_stop};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  trace_out t = {.left = po->count, .limited = po->count > 0};
  int rc = ez_trace(ctx->address, (const char *const *)ctx->argv, (size_t)ctx->argc, trace_line, &t,
                    &g_trace_stop, -1);
  if (rc == EZ_ENOTSUP) {
    fprintf(stderr,
            "ezmsg profile: the graph server at %s speaks an ezmsg without profiling "
            "(3.7 or 3.8)\n",
            ctx->shown);
    return 1;
  }
  return rc ? cli_fail(ctx, rc, "trace") : 0;
}

int cmd_profile(int argc, char **argv) {
  profile_opts po = {.window_s = EZ_PROFILE_WINDOW_S};
  cli_ctx ctx;
  int rc = cli_parse(&profile_spec, argc, argv, &ctx, on_opt, &po);
  if (rc >= 0) return rc;
  if (po.trace) return trace(&ctx, &po);
  if (ctx.argc || po.count) {
    fprintf(stderr, "ezmsg profile: %s go%s with --trace only\n", ctx.argc ? "topics" : "--count",
            ctx.argc ? "" : "es");
    return 2;
  }
  char *text = NULL;
  if (po.watch_s <= 0) {
    rc = render(&ctx, &po, &text);
    if (rc) return cli_fail(&ctx, rc, "profile");
    fputs(text, stdout);
    free(text);
    return 0;
  }

  /* --watch: a stop signal is taken between redraws (watch.h), so the exit status is 0. JSON
   * goes one document per line, never clearing the screen (a log); a table is redrawn in place on
   * a terminal, and separated from the next by a blank line on a pipe. */
  sigset_t stop;
  watch_begin(&stop);
  bool tty = isatty(STDOUT_FILENO) && po.table;
  bool ever_ok = false;
  for (unsigned n = 0;; n++) {
    struct timespec t0 = watch_now();
    rc = render(&ctx, &po, &text);
    if (rc && !ever_ok) return cli_fail(&ctx, rc, "profile"); /* nothing to watch */
    if (tty)
      fputs("\033[H\033[2J", stdout);
    else if (n > 0 && po.table)
      fputc('\n', stdout);
    if (rc && !po.table) {
      /* Keep watching across a graph server restart: a line that says so, still JSON. */
      char ts[40];
      gv_now_iso(ts);
      printf("{\"timestamp\":\"%s\",\"error\":\"%s\"}\n", ts,
             rc == EZ_ENOSERVER ? "no graph server" : ez_strerror(rc));
    } else if (rc) {
      printf("(no profile: %s, graph server %s)\n",
             rc == EZ_ENOSERVER ? "not running" : ez_strerror(rc), ctx.shown);
    } else {
      fputs(text, stdout);
      free(text);
    }
    ever_ok = ever_ok || !rc;
    if (fflush(stdout) != 0 || ferror(stdout)) return 1;
    if (!watch_sleep(&stop, t0, po.watch_s)) return 0;
  }
}
