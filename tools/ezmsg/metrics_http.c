/* `ezmsg serve --metrics H:P`: /metrics from the serve process (metrics.h). */
#include "http.h"
#include "metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CACHE_NS 250000000ll
#define FETCH_TIMEOUT_MS 3000

struct metrics_server {
  http_server *http;
  char graph[300];
  pthread_mutex_t mu; /* one scrape's requests at a time; the cache */
  char *text;
  size_t len;
  int64_t at_ns;
};

static int64_t mono_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000ll + t.tv_nsec;
}

static void handle(void *user, const char *path, http_req *req, http_resp *out) {
  (void)req;
  metrics_server *m = user;
  if (strcmp(path, "/metrics")) {
    out->status = 404;
    out->body = "not found: this server has /metrics only\n";
    out->len = strlen(out->body);
    return;
  }
  pthread_mutex_lock(&m->mu);
  int64_t now = mono_ns();
  if (!m->text || now - m->at_ns > CACHE_NS) {
    gv v;
    int rc = gv_fetch(m->graph, EZ_PROFILE_WINDOW_S, FETCH_TIMEOUT_MS, &v);
    double took = (double)(mono_ns() - now) / 1e9;
    size_t len = 0;
    char *text = metrics_text(rc ? NULL : &v, rc == 0, took, &len);
    if (!rc) gv_free(&v);
    if (text) {
      free(m->text);
      m->text = text;
      m->len = len;
      m->at_ns = mono_ns();
    }
  }
  char *copy = m->text ? malloc(m->len + 1) : NULL;
  if (copy) memcpy(copy, m->text, m->len);
  size_t len = m->len;
  pthread_mutex_unlock(&m->mu);
  if (!copy) {
    out->status = 503;
    out->body = "out of memory\n";
    out->len = strlen(out->body);
    return;
  }
  out->type = "text/plain; version=0.0.4; charset=utf-8";
  out->body = copy;
  out->len = len;
  out->owned = true;
}

metrics_server *metrics_start(const char *listen_addr, const char *graph_addr, char *err,
                              size_t errcap) {
  metrics_server *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  snprintf(m->graph, sizeof m->graph, "%s", graph_addr);
  pthread_mutex_init(&m->mu, NULL);
  m->http = http_start(listen_addr, handle, m, err, errcap);
  if (!m->http) {
    pthread_mutex_destroy(&m->mu);
    free(m);
    return NULL;
  }
  return m;
}

const char *metrics_address(const metrics_server *m) { return http_address(m->http); }
bool metrics_loopback(const metrics_server *m) { return http_loopback(m->http); }

void metrics_stop(metrics_server *m) {
  if (!m) return;
  http_stop(m->http);
  pthread_mutex_destroy(&m->mu);
  free(m->text);
  free(m);
}
