/* `ezmsg dashboard`: a live web page of the graph (docs/dashboard.md).
 *
 * The main thread samples the graph every --interval seconds (the graph view, graphview.h: one
 * profile and one topic graph request), records the sample in the bounded history (history.h)
 * and publishes it as the current view: one JSON text shared by every event stream. HTTP
 * (http.h) runs on its own threads: the page and its scripts (assets.h), /events (server-sent
 * events: the view, each time it changes), /api/view, /api/history?id=ENDPOINT and /metrics. */
#include "assets.h"
#include "cli.h"
#include "graphview.h"
#include "history.h"
#include "http.h"
#include "jsonout.h"
#include "metrics.h"
#include "watch.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_LISTEN "127.0.0.1:25900"

enum { OPT_LISTEN = 3200, OPT_INTERVAL, OPT_WINDOW };

static const struct option dash_opts[] = {
    {"listen", required_argument, NULL, OPT_LISTEN},
    {"interval", required_argument, NULL, OPT_INTERVAL},
    {"window", required_argument, NULL, OPT_WINDOW},
    {0},
};

static const cli_spec dash_spec = {
    .name = "dashboard",
    .args = "",
    .about = "Serves a live web page of the graph: the topic graph with its processes,\n"
             "publishers, channels and subscribers, plots of every endpoint's rate, bytes/s,\n"
             "backpressure or processing times and in-flight messages over the last minutes,\n"
             "and the bottleneck marked; it updates every second. Also /metrics (Prometheus).\n"
             "It listens on loopback unless --listen names another address: the page shows\n"
             "the graph's topics, handles, process ids and host addresses to whoever reaches\n"
             "it, without authentication (README.md). Runs until SIGINT / SIGTERM.",
    .max_args = 0,
    .timeout_ms = 3000,
    .opts = dash_opts,
    .opts_help =
        "      --listen H:P   serve on H:P (default " DEFAULT_LISTEN "; port 0 picks one)\n"
        "      --interval S   sample the graph every S seconds (default 1)\n"
        "      --window S     each sample's profile window (default 2; at most 10)\n",
};

typedef struct snap { /* one published view: "data: <json>\n\n" */
  atomic_int refs;
  size_t len;
  char text[];
} snap;

typedef struct dash {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stopping;
  uint64_t seq;    /* views published */
  snap *cur;       /* the current view's event */
  char *view_json; /* the current view, for /api/view */
  gv view;         /* the current view, for /metrics */
  bool have_view;
  double fetch_s; /* how long the last sample took */
  history *hist;
  atomic_int streams; /* open event streams */
  uint64_t samples;   /* taken so far (the sampling thread only) */
} dash;

static void snap_unref(snap *s) {
  if (s && atomic_fetch_sub(&s->refs, 1) == 1) free(s);
}

/* ---- event streams ------------------------------------------------------------------------- */

typedef struct stream {
  dash *d;
  uint64_t seen;
  snap *s; /* being sent */
  size_t off;
} stream;

/* Sends the current view whenever there is a new one; a comment line every second otherwise (so
 * a peer that went away is noticed). Ends when the dashboard stops. */
static ssize_t stream_next(void *arg, char *buf, size_t max) {
  stream *st = arg;
  dash *d = st->d;
  if (!st->s) {
    pthread_mutex_lock(&d->mu);
    if (!d->stopping && d->seq == st->seen) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_sec += 1;
      pthread_cond_timedwait(&d->cv, &d->mu, &ts);
    }
    bool stopping = d->stopping, fresh = d->seq != st->seen && d->cur;
    if (fresh) {
      st->s = d->cur;
      atomic_fetch_add(&st->s->refs, 1);
      st->seen = d->seq;
      st->off = 0;
    }
    pthread_mutex_unlock(&d->mu);
    if (stopping) return -1;
    if (!fresh) {
      static const char ping[] = ": ping\n\n";
      if (max < sizeof ping - 1) return 0;
      memcpy(buf, ping, sizeof ping - 1);
      return (ssize_t)(sizeof ping - 1);
    }
  }
  size_t n = st->s->len - st->off < max ? st->s->len - st->off : max;
  memcpy(buf, st->s->text + st->off, n);
  st->off += n;
  if (st->off == st->s->len) {
    snap_unref(st->s);
    st->s = NULL;
  }
  return (ssize_t)n;
}

static void stream_free(void *arg) {
  stream *st = arg;
  snap_unref(st->s);
  atomic_fetch_sub(&st->d->streams, 1);
  free(st);
}

/* ---- HTTP ---------------------------------------------------------------------------------- */

static void text_body(http_resp *out, int status, const char *text) {
  out->status = status;
  out->body = text;
  out->len = strlen(text);
}

static void json_body(http_resp *out, json_t *doc) {
  char *text = doc ? jo_dumps(doc, false) : NULL;
  json_decref(doc);
  if (!text) return text_body(out, 503, "out of memory\n");
  out->type = "application/json";
  out->body = text;
  out->len = strlen(text);
  out->owned = true;
}

static void handle(void *user, const char *path, http_req *req, http_resp *out) {
  dash *d = user;
  asset a;
  if (asset_find(path, &a)) {
    out->type = a.type;
    out->body = a.data;
    out->len = a.len;
    return;
  }
  if (!strcmp(path, "/events")) {
    if (atomic_fetch_add(&d->streams, 1) >= HTTP_MAX_CONNS / 2) { /* leave room for the rest */
      atomic_fetch_sub(&d->streams, 1);
      return text_body(out, 503, "too many event streams\n");
    }
    stream *st = calloc(1, sizeof *st);
    if (!st) {
      atomic_fetch_sub(&d->streams, 1);
      return text_body(out, 503, "out of memory\n");
    }
    st->d = d;
    out->type = "text/event-stream";
    out->stream = stream_next;
    out->stream_arg = st;
    out->stream_free = stream_free;
    return;
  }
  if (!strcmp(path, "/api/view")) {
    pthread_mutex_lock(&d->mu);
    char *copy = d->view_json ? strdup(d->view_json) : NULL;
    pthread_mutex_unlock(&d->mu);
    if (!copy) return text_body(out, 503, "no view yet\n");
    out->type = "application/json";
    out->body = copy;
    out->len = strlen(copy);
    out->owned = true;
    return;
  }
  if (!strcmp(path, "/api/history")) {
    const char *id = http_arg(req, "id");
    if (!id) return text_body(out, 400, "want /api/history?id=ENDPOINT\n");
    pthread_mutex_lock(&d->mu);
    json_t *doc = hist_json(d->hist, id);
    pthread_mutex_unlock(&d->mu);
    if (!doc) return text_body(out, 404, "no such endpoint in the history\n");
    return json_body(out, doc);
  }
  if (!strcmp(path, "/metrics")) {
    pthread_mutex_lock(&d->mu);
    size_t len = 0;
    char *text = metrics_text(d->have_view ? &d->view : NULL, d->have_view, d->fetch_s, &len);
    pthread_mutex_unlock(&d->mu);
    if (!text) return text_body(out, 503, "out of memory\n");
    out->type = "text/plain; version=0.0.4; charset=utf-8";
    out->body = text;
    out->len = len;
    out->owned = true;
    return;
  }
  text_body(out, 404, "not found\n");
}

/* ---- sampling ------------------------------------------------------------------------------ */

/* Publishes doc (consumed) as the current view; keeps v (consumed, may be NULL) for /metrics. */
static void publish(dash *d, json_t *doc, gv *v, double fetch_s) {
  char *text = doc ? jo_dumps(doc, false) : NULL;
  json_decref(doc);
  snap *s = text ? malloc(sizeof *s + strlen(text) + 9) : NULL;
  if (s) {
    atomic_init(&s->refs, 1);
    s->len = (size_t)sprintf(s->text, "data: %s\n\n", text);
  }
  pthread_mutex_lock(&d->mu);
  if (v) {
    if (d->have_view) gv_free(&d->view);
    d->view = *v;
    d->have_view = true;
  } else if (d->have_view) {
    gv_free(&d->view);
    d->have_view = false;
  }
  d->fetch_s = fetch_s;
  if (text) {
    free(d->view_json);
    d->view_json = text;
    text = NULL;
  }
  if (s) {
    snap_unref(d->cur);
    d->cur = s;
    d->seq++;
    pthread_cond_broadcast(&d->cv);
  }
  pthread_mutex_unlock(&d->mu);
  free(text);
}

static void sample(dash *d, const cli_ctx *ctx, double window_s) {
  struct timespec t0 = watch_now(), wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  gv v;
  int rc = gv_fetch(ctx->address, window_s, ctx->timeout_ms, &v);
  struct timespec t1 = watch_now();
  double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  json_t *doc;
  if (rc) {
    char ts[40];
    gv_now_iso(ts);
    doc = json_object();
    json_object_set_new(doc, "timestamp", json_string(ts));
    json_object_set_new(doc, "error",
                        json_string(rc == EZ_ENOSERVER ? "no graph server" : ez_strerror(rc)));
  } else {
    doc = gv_json(&v);
    pthread_mutex_lock(&d->mu);
    int hrc = hist_add(d->hist, &v, (int64_t)wall.tv_sec * 1000 + wall.tv_nsec / 1000000);
    size_t hb = hist_bytes(d->hist), he = hist_endpoints(d->hist);
    pthread_mutex_unlock(&d->mu);
    if (doc) {
      json_object_set_new(doc, "history_bytes", json_integer((json_int_t)hb));
      json_object_set_new(doc, "history_endpoints", json_integer((json_int_t)he));
      if (hrc) json_object_set_new(doc, "history_error", json_string(ez_strerror(hrc)));
    }
  }
  if (doc) {
    json_object_set_new(doc, "server", json_string(ctx->shown));
    json_object_set_new(doc, "sample", json_integer((json_int_t)++d->samples));
  }
  publish(d, doc, rc ? NULL : &v, took);
}

static int parse_pos(const char *s, double max, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v > 0) || v > max) return -1;
  *out = v;
  return 0;
}

typedef struct dash_args {
  const char *listen;
  double interval_s, window_s;
} dash_args;

static int dash_opt(int opt, const char *arg, void *user) {
  dash_args *a = user;
  switch (opt) {
  case OPT_LISTEN: a->listen = arg; return 0;
  case OPT_INTERVAL:
    if (!parse_pos(arg, 3600, &a->interval_s)) return 0;
    cli_opt_error("bad --interval '%s' (seconds, more than 0)", arg);
    return -1;
  case OPT_WINDOW:
    if (!parse_pos(arg, EZ_PROFILE_MAX_WINDOW_S, &a->window_s)) return 0;
    cli_opt_error("bad --window '%s' (seconds, more than 0, at most %g)", arg,
                  EZ_PROFILE_MAX_WINDOW_S);
    return -1;
  default: return -1;
  }
}

int cmd_dashboard(int argc, char **argv) {
  dash_args a = {.listen = DEFAULT_LISTEN, .interval_s = 1, .window_s = EZ_PROFILE_WINDOW_S};
  cli_ctx ctx;
  int rc = cli_parse(&dash_spec, argc, argv, &ctx, dash_opt, &a);
  if (rc >= 0) return rc;
  char listen[300];
  if (cli_check_address(a.listen, true, listen))
    return cli_usage_error(&dash_spec, "bad --listen '%s' (want HOST:PORT)", a.listen);
  sigset_t stop;
  watch_begin(&stop); /* before any thread starts: they all inherit the mask */
  dash d = {.hist = hist_new()};
  pthread_mutex_init(&d.mu, NULL);
  pthread_cond_init(&d.cv, NULL);
  char err[400];
  http_server *http = d.hist ? http_start(listen, handle, &d, err, sizeof err) : NULL;
  if (!http) {
    fprintf(stderr, "ezmsg dashboard: %s\n", d.hist ? err : "out of memory");
    hist_free(d.hist);
    return 1;
  }
  fprintf(stderr, "dashboard on http://%s/ (graph server %s)%s\n", http_address(http), ctx.shown,
          http_loopback(http) ? "" : "; NOT loopback: anyone who reaches it sees the graph");
  for (;;) {
    struct timespec t0 = watch_now();
    sample(&d, &ctx, a.window_s);
    if (!watch_sleep(&stop, t0, a.interval_s)) break;
  }
  pthread_mutex_lock(&d.mu);
  d.stopping = true;
  pthread_cond_broadcast(&d.cv);
  pthread_mutex_unlock(&d.mu);
  http_stop(http);
  snap_unref(d.cur);
  free(d.view_json);
  if (d.have_view) gv_free(&d.view);
  hist_free(d.hist);
  pthread_cond_destroy(&d.cv);
  pthread_mutex_destroy(&d.mu);
  return 0;
}
