/* The graph view (graphview.h): endpoints, topics and processes from one profile document and one
 * topic graph. The bottleneck rules and the JSON form are in gvjudge.c and gvjson.c. */
#include "graphview.h"

#include "gvbuild.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void gv_now_iso(char out[40]) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  size_t n = strftime(out, 40, "%Y-%m-%dT%H:%M:%S", &tm);
  int ms = (int)((unsigned long)ts.tv_nsec / 1000000u % 1000u);
  snprintf(out + n, 40 - n, ".%03dZ", ms);
}

/* ---- reading the document ------------------------------------------------------------------ */

static char *dup_str(gvb *b, const json_t *obj, const char *key) {
  const json_t *v = json_object_get(obj, key);
  if (!json_is_string(v)) return NULL;
  char *s = strdup(json_string_value(v));
  if (!s) b->err = EZ_ENOMEM;
  return s;
}

static const char *str_of(const json_t *obj, const char *key) {
  const json_t *v = json_object_get(obj, key);
  return json_is_string(v) ? json_string_value(v) : NULL;
}

double gvb_num(const json_t *obj, const char *key) {
  const json_t *v = json_object_get(obj, key);
  double d = json_is_number(v) ? json_number_value(v) : 0;
  return d == d && d > -1e300 && d < 1e300 ? d : 0;
}

uint64_t gvb_u64(const json_t *obj, const char *key) {
  double d = gvb_num(obj, key);
  if (json_is_integer(json_object_get(obj, key))) {
    json_int_t i = json_integer_value(json_object_get(obj, key));
    return i > 0 ? (uint64_t)i : 0;
  }
  return d > 0 && d < 1.8e19 ? (uint64_t)d : 0;
}

static int64_t i64_of(const json_t *obj, const char *key) {
  const json_t *v = json_object_get(obj, key);
  if (json_is_integer(v)) return (int64_t)json_integer_value(v);
  double d = gvb_num(obj, key);
  return d > -9e18 && d < 9e18 ? (int64_t)d : 0;
}

static void latency(const json_t *o, ez_latency *l) {
  l->avg_ms = gvb_num(o, "avg_ms");
  l->max_ms = gvb_num(o, "max_ms");
  l->p50_ms = gvb_num(o, "p50_ms");
  l->p99_ms = gvb_num(o, "p99_ms");
  l->samples = gvb_u64(o, "samples");
  l->timed_samples = json_object_get(o, "timed_samples") ? gvb_u64(o, "timed_samples") : l->samples;
  l->in_flight = gvb_u64(o, "in_flight");
}

static bool array_of_objects(const json_t *a) {
  if (!json_is_array(a)) return false;
  for (size_t i = 0; i < json_array_size(a); i++)
    if (!json_is_object(json_array_get(a, i))) return false;
  return true;
}

static void read_pubs(gvb *b, const json_t *doc) {
  const json_t *pubs = json_object_get(doc, "publishers");
  const json_t *reg = json_object_get(json_object_get(doc, "registry"), "publishers");
  size_t np = json_array_size(pubs), nr = array_of_objects(reg) ? json_array_size(reg) : 0;
  gv *v = b->v;
  v->pubs = calloc(np + nr + 1, sizeof *v->pubs);
  if (!v->pubs) {
    b->err = EZ_ENOMEM;
    return;
  }
  for (size_t i = 0; i < np; i++) {
    const json_t *o = json_array_get(pubs, i);
    gv_pub *p = &v->pubs[v->n_pubs++];
    p->answered = true;
    p->id = dup_str(b, o, "id");
    p->topic = dup_str(b, o, "topic");
    p->host = dup_str(b, o, "host");
    p->pid = i64_of(o, "pid");
    p->num_buffers = gvb_u64(o, "num_buffers");
    p->num_channels = gvb_u64(o, "num_channels");
    p->rate_hz = gvb_num(o, "message_rate_hz");
    p->bytes_per_s = gvb_num(o, "byte_rate_per_s");
    p->messages_total = gvb_u64(json_object_get(o, "messages"), "total");
    p->bytes_total = gvb_u64(json_object_get(o, "bytes"), "total");
    latency(json_object_get(o, "backpressure"), &p->bp);
  }
  /* Registered publishers that did not answer. */
  for (size_t i = 0; i < nr; i++) {
    const json_t *o = json_array_get(reg, i);
    const char *id = str_of(o, "id");
    bool seen = false;
    for (size_t k = 0; id && k < np && !seen; k++)
      seen = v->pubs[k].id && !strcmp(v->pubs[k].id, id);
    if (seen || !id) continue;
    gv_pub *p = &v->pubs[v->n_pubs++];
    p->id = dup_str(b, o, "id");
    p->topic = dup_str(b, o, "topic");
    p->host = dup_str(b, o, "host");
  }
}

/* A subscriber entry of a channel, or a registered subscriber, before merging by id. */
typedef struct rec {
  const char *id;
  const json_t *o;
  size_t chan; /* GV_NONE: from the registry */
} rec;

static int cmp_rec(const void *a, const void *b) {
  const rec *x = a, *y = b;
  int r = strcmp(x->id, y->id);
  if (r) return r;
  return (x->chan == GV_NONE) - (y->chan == GV_NONE); /* channel entries first */
}

static void read_chans_and_subs(gvb *b, const json_t *doc) {
  gv *v = b->v;
  const json_t *chans = json_object_get(doc, "channels");
  const json_t *reg = json_object_get(json_object_get(doc, "registry"), "subscribers");
  size_t nc = json_array_size(chans), nr = array_of_objects(reg) ? json_array_size(reg) : 0;
  v->chans = calloc(nc + 1, sizeof *v->chans);
  size_t nrec = nr;
  for (size_t i = 0; i < nc; i++) {
    const json_t *subs = json_object_get(json_array_get(chans, i), "subscribers");
    nrec += array_of_objects(subs) ? json_array_size(subs) : 0;
  }
  rec *r = calloc(nrec + 1, sizeof *r);
  if (!v->chans || !r) {
    free(r);
    b->err = EZ_ENOMEM;
    return;
  }
  size_t n = 0;
  for (size_t i = 0; i < nc; i++) {
    const json_t *o = json_array_get(chans, i);
    gv_chan *c = &v->chans[v->n_chans++];
    c->id = dup_str(b, o, "channel_id");
    c->pub_id = dup_str(b, o, "pub_id");
    c->topic = dup_str(b, o, "topic");
    c->mode = dup_str(b, o, "mode");
    c->host = dup_str(b, o, "host");
    c->pid = i64_of(o, "pid");
    c->num_buffers = gvb_u64(o, "num_buffers");
    c->in_flight = gvb_u64(o, "in_flight");
    c->pub_ix = GV_NONE;
    for (size_t k = 0; c->pub_id && k < v->n_pubs; k++)
      if (v->pubs[k].answered && v->pubs[k].id && !strcmp(v->pubs[k].id, c->pub_id)) c->pub_ix = k;
    if (!c->topic && c->pub_ix != GV_NONE && v->pubs[c->pub_ix].topic) {
      c->topic = strdup(v->pubs[c->pub_ix].topic);
      if (!c->topic) b->err = EZ_ENOMEM;
    }
    const json_t *subs = json_object_get(o, "subscribers");
    if (!array_of_objects(subs)) continue;
    for (size_t j = 0; j < json_array_size(subs); j++) {
      const json_t *so = json_array_get(subs, j);
      const char *id = str_of(so, "subscriber_id");
      if (id) r[n++] = (rec){id, so, v->n_chans - 1};
    }
  }
  for (size_t i = 0; i < nr; i++) {
    const json_t *o = json_array_get(reg, i);
    if (str_of(o, "id")) r[n++] = (rec){str_of(o, "id"), o, GV_NONE};
  }
  qsort(r, n, sizeof *r, cmp_rec);
  /* Group: one subscriber per id. */
  v->subs = calloc(n + 1, sizeof *v->subs);
  if (!v->subs) {
    free(r);
    b->err = EZ_ENOMEM;
    return;
  }
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && !strcmp(r[j].id, r[i].id))
      j++;
    gv_sub *s = &v->subs[v->n_subs++];
    s->id = strdup(r[i].id);
    if (!s->id) b->err = EZ_ENOMEM;
    double wsum = 0;
    for (size_t k = i; k < j; k++) {
      const json_t *o = r[k].o;
      if (r[k].chan == GV_NONE) { /* the registry: topic, host, and pid / handle if announced */
        free(s->topic);
        s->topic = dup_str(b, o, "topic");
        if (!s->handle) s->handle = dup_str(b, o, "handle");
        if (!s->host) s->host = dup_str(b, o, "host");
        if (!s->pid) s->pid = i64_of(o, "pid");
        continue;
      }
      gv_chan *c = &v->chans[r[k].chan];
      ez_latency l;
      latency(o, &l);
      if (!s->handle) s->handle = dup_str(b, o, "handle");
      if (!s->topic && c->topic) {
        s->topic = strdup(c->topic);
        if (!s->topic) b->err = EZ_ENOMEM;
      }
      if (!s->host && c->host) {
        s->host = strdup(c->host);
        if (!s->host) b->err = EZ_ENOMEM;
      }
      s->pid = c->pid;
      s->rate_hz += gvb_num(o, "message_rate_hz");
      wsum += (double)l.samples * l.avg_ms;
      s->proc.samples += l.samples;
      s->proc.timed_samples += l.timed_samples;
      s->proc.in_flight += l.in_flight;
      if (l.max_ms > s->proc.max_ms) s->proc.max_ms = l.max_ms;
      if (l.p99_ms > s->proc.p99_ms) s->proc.p99_ms = l.p99_ms;
      if (l.p50_ms > s->proc.p50_ms) s->proc.p50_ms = l.p50_ms;
      if (c->num_buffers > s->num_buffers) s->num_buffers = c->num_buffers;
      const char *m = c->mode ? c->mode : "unknown";
      if (!s->mode)
        s->mode = m;
      else if (strcmp(s->mode, m))
        s->mode = "mixed";
      s->n_chans++;
      size_t *cs = realloc(c->subs, (c->n_subs + 1) * sizeof *cs);
      if (!cs) {
        b->err = EZ_ENOMEM;
        continue;
      }
      c->subs = cs;
      c->subs[c->n_subs++] = v->n_subs - 1;
    }
    s->proc.avg_ms = s->proc.samples ? wsum / (double)s->proc.samples : 0;
    if (!s->n_chans) s->mode = "idle";
    i = j;
  }
  free(r);
}

/* ---- the whole view ------------------------------------------------------------------------ */

int gv_build(const char *profile_json, const ez_graph *dag, gv *out) {
  memset(out, 0, sizeof *out);
  gv_now_iso(out->timestamp);
  gvb b = {.v = out};
  json_t *doc = NULL;
  if (profile_json) {
    json_error_t jerr;
    doc = json_loads(profile_json, 0, &jerr);
    if (!doc || !json_is_object(doc) || !array_of_objects(json_object_get(doc, "publishers")) ||
        !array_of_objects(json_object_get(doc, "channels"))) {
      json_decref(doc);
      return doc || json_error_code(&jerr) != json_error_out_of_memory ? EZ_EPROTO : EZ_ENOMEM;
    }
    out->has_profile = true;
    out->has_registry = json_is_object(json_object_get(doc, "registry"));
    out->window_s = gvb_num(doc, "window_s");
    read_pubs(&b, doc);
    if (!b.err) read_chans_and_subs(&b, doc);
  }
  if (!b.err) gvb_sort(&b);
  if (!b.err) gvb_topics(&b, dag);
  if (!b.err) gvb_rates(&b);
  if (!b.err) gvb_procs(&b);
  if (!b.err) gvb_judge(&b);
  json_decref(doc);
  if (b.err) gv_free(out);
  return b.err;
}

void gv_free(gv *v) {
  if (!v) return;
  for (size_t i = 0; i < v->n_pubs; i++) {
    free(v->pubs[i].id);
    free(v->pubs[i].topic);
    free(v->pubs[i].host);
  }
  for (size_t i = 0; i < v->n_chans; i++) {
    gv_chan *c = &v->chans[i];
    free(c->id);
    free(c->pub_id);
    free(c->topic);
    free(c->mode);
    free(c->host);
    free(c->subs);
  }
  for (size_t i = 0; i < v->n_subs; i++) {
    free(v->subs[i].id);
    free(v->subs[i].handle);
    free(v->subs[i].topic);
    free(v->subs[i].host);
  }
  for (size_t i = 0; i < v->n_topics; i++) {
    free(v->topics[i].name);
    free(v->topics[i].to);
  }
  for (size_t i = 0; i < v->n_procs; i++)
    free(v->procs[i].host);
  free(v->pubs);
  free(v->chans);
  free(v->subs);
  free(v->topics);
  free(v->procs);
  memset(v, 0, sizeof *v);
}

int gv_fetch(const char *address, double window_s, int timeout_ms, gv *out) {
  memset(out, 0, sizeof *out);
  ez_graph g = {0};
  int rc = ez_graph_dag(address, &g, timeout_ms);
  if (rc) return rc;
  char *json = NULL;
  int prc = ez_profile(address, window_s, &json, timeout_ms);
  /* The topic graph's connection, just closed, may still count against a server's client limit
   * for a moment: a refusal right after it is worth a few more tries. */
  for (int i = 0; prc == EZ_EREFUSED && i < 25; i++) {
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
    prc = ez_profile(address, window_s, &json, timeout_ms);
  }
  /* A server without profiling (3.7, 3.8: EZ_ENOTSUP; others hang up or answer something
   * else): the topic graph alone. */
  if (prc && prc != EZ_ENOTSUP && prc != EZ_ECONNLOST && prc != EZ_EPROTO) {
    ez_graph_free(&g);
    return prc;
  }
  rc = gv_build(prc ? NULL : json, &g, out);
  free(json);
  ez_graph_free(&g);
  return rc;
}

const gv_topic *gv_find_topic(const gv *v, const char *name) {
  size_t lo = 0, hi = v->n_topics;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int r = strcmp(v->topics[mid].name, name);
    if (r == 0) return &v->topics[mid];
    if (r < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}
