/* The dashboard's bounded history (history.h). Endpoints live in one array sorted by id, so a
 * tick's lookups are binary searches; a tick adds the new ones and drops the long-gone ones in one
 * pass. Every slot of a ring is indexed by tick number modulo HIST_SAMPLES, and a ring slot the
 * endpoint was absent for holds NaN. */
#include "history.h"

#include "jsonout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct history {
  hist_endpoint **eps; /* sorted by id */
  size_t n, cap;
  uint64_t tick; /* ticks so far */
  int64_t t_ms[HIST_SAMPLES];
  uint64_t refused;
};

history *hist_new(void) { return calloc(1, sizeof(history)); }

void hist_free(history *h) {
  if (!h) return;
  for (size_t i = 0; i < h->n; i++)
    free(h->eps[i]);
  free(h->eps);
  free(h);
}

static int cmp_ep(const void *a, const void *b) {
  return strcmp((*(hist_endpoint *const *)a)->id, (*(hist_endpoint *const *)b)->id);
}

/* bsearch: an id against an endpoint. */
static int cmp_key(const void *key, const void *elem) {
  return strcmp(key, (*(hist_endpoint *const *)elem)->id);
}

static hist_endpoint *find(const history *h, const char *id) {
  size_t lo = 0, hi = h->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int r = strcmp(h->eps[mid]->id, id);
    if (!r) return h->eps[mid];
    if (r < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

/* The endpoint for id, created (unsorted, at the end) if new; NULL past the cap or without
 * memory. */
static hist_endpoint *get(history *h, const char *id, bool is_pub, size_t sorted_n, int *err) {
  if (!id || strlen(id) >= sizeof((hist_endpoint *)0)->id) return NULL;
  hist_endpoint **found = sorted_n ? bsearch(id, h->eps, sorted_n, sizeof *h->eps, cmp_key) : NULL;
  if (found) return *found;
  for (size_t i = sorted_n; i < h->n; i++) /* added earlier this tick */
    if (!strcmp(h->eps[i]->id, id)) return h->eps[i];
  if (h->n >= HIST_MAX_ENDPOINTS) {
    h->refused++;
    return NULL;
  }
  if (h->n == h->cap) {
    size_t cap = h->cap ? h->cap * 2 : 64;
    hist_endpoint **v = realloc(h->eps, cap * sizeof *v);
    if (!v) {
      *err = EZ_ENOMEM;
      return NULL;
    }
    h->eps = v;
    h->cap = cap;
  }
  hist_endpoint *e = malloc(sizeof *e);
  if (!e) {
    *err = EZ_ENOMEM;
    return NULL;
  }
  memset(e->id, 0, sizeof e->id);
  snprintf(e->id, sizeof e->id, "%s", id);
  e->is_pub = is_pub;
  e->first_tick = h->tick;
  e->last_tick = h->tick;
  for (int f = 0; f < H_FIGURES; f++)
    for (size_t k = 0; k < HIST_SAMPLES; k++)
      e->v[f][k] = NAN;
  h->eps[h->n++] = e;
  return e;
}

static void put(hist_endpoint *e, uint64_t tick, const float fig[H_FIGURES]) {
  size_t slot = (size_t)(tick % HIST_SAMPLES);
  for (int f = 0; f < H_FIGURES; f++)
    e->v[f][slot] = fig[f];
  e->last_tick = tick;
}

int hist_add(history *h, const gv *v, int64_t t_ms) {
  uint64_t tick = h->tick;
  size_t slot = (size_t)(tick % HIST_SAMPLES);
  h->t_ms[slot] = t_ms;
  size_t sorted_n = h->n;
  int err = 0;
  for (size_t i = 0; i < v->n_pubs; i++) {
    const gv_pub *p = &v->pubs[i];
    if (!p->answered) continue;
    hist_endpoint *e = get(h, p->id, true, sorted_n, &err);
    if (!e) continue;
    float fig[H_FIGURES] = {(float)p->rate_hz,   (float)p->bytes_per_s, (float)p->bp.avg_ms,
                            (float)p->bp.p99_ms, (float)p->bp.max_ms,   (float)p->bp.in_flight};
    put(e, tick, fig);
  }
  for (size_t i = 0; i < v->n_subs; i++) {
    const gv_sub *s = &v->subs[i];
    hist_endpoint *e = get(h, s->id, false, sorted_n, &err);
    if (!e) continue;
    float fig[H_FIGURES] = {(float)s->rate_hz,     0,
                            (float)s->proc.avg_ms, (float)s->proc.p99_ms,
                            (float)s->proc.max_ms, (float)s->proc.in_flight};
    put(e, tick, fig);
  }
  /* The absent ones get a gap (NaN) in this tick's slot. */
  for (size_t i = 0; i < h->n; i++)
    if (h->eps[i]->last_tick != tick)
      for (int f = 0; f < H_FIGURES; f++)
        h->eps[i]->v[f][slot] = NAN;
  /* Forget endpoints absent for a whole ring (that keeps the order), then sort in the new ones. */
  bool added = h->n > sorted_n;
  size_t k = 0;
  for (size_t i = 0; i < h->n; i++) {
    if (tick - h->eps[i]->last_tick >= HIST_SAMPLES)
      free(h->eps[i]);
    else
      h->eps[k++] = h->eps[i];
  }
  h->n = k;
  if (added) qsort(h->eps, h->n, sizeof *h->eps, cmp_ep);
  h->tick++;
  return err;
}

static json_t *num_or_null(float f) { return isnan(f) ? json_null() : jo_real(f); }

json_t *hist_json(const history *h, const char *id) {
  const hist_endpoint *e = id ? find(h, id) : NULL;
  if (!e) return NULL;
  static const char *names[H_FIGURES] = {"rate_hz", "bytes_per_s", "avg_ms",
                                         "p99_ms",  "max_ms",      "in_flight"};
  json_t *doc = json_object(), *t = json_array(), *arr[H_FIGURES];
  json_object_set_new(doc, "id", json_string(e->id));
  json_object_set_new(doc, "kind", json_string(e->is_pub ? "publisher" : "subscriber"));
  for (int f = 0; f < H_FIGURES; f++)
    arr[f] = json_array();
  uint64_t n = h->tick - e->first_tick;
  if (n > HIST_SAMPLES) n = HIST_SAMPLES;
  for (uint64_t k = h->tick - n; k < h->tick; k++) {
    size_t slot = (size_t)(k % HIST_SAMPLES);
    json_array_append_new(t, json_integer((json_int_t)h->t_ms[slot]));
    for (int f = 0; f < H_FIGURES; f++)
      json_array_append_new(arr[f], num_or_null(e->v[f][slot]));
  }
  json_object_set_new(doc, "t_ms", t);
  for (int f = 0; f < H_FIGURES; f++)
    json_object_set_new(doc, names[f], arr[f]);
  return doc;
}

size_t hist_bytes(const history *h) {
  return sizeof *h + h->cap * sizeof *h->eps + h->n * sizeof(hist_endpoint);
}

size_t hist_endpoints(const history *h) { return h->n; }

uint64_t hist_refused(const history *h) { return h->refused; }
