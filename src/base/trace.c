/* An endpoint's trace samples (trace.h). */
#include "base/trace.h"
#include "base/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t g_make_mu = PTHREAD_MUTEX_INITIALIZER;

ezi_trace *ezi_trace_get(ezi_trace **slot, const char *topic, const char *id) {
  ezi_trace *t = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (t) return t;
  pthread_mutex_lock(&g_make_mu); /* (two enables at once make one) */
  t = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (!t && (t = calloc(1, sizeof *t))) {
    t->ring = malloc(EZI_TRACE_MAX * sizeof *t->ring);
    t->topic = strdup(topic);
    t->eid = malloc(strlen(topic) + strlen(id) + 2);
    if (t->eid) sprintf(t->eid, "%s:%s", topic, id);
    if (!t->ring || !t->topic || !t->eid) {
      free(t->ring);
      free(t->topic);
      free(t->eid);
      free(t);
      t = NULL;
    } else {
      pthread_mutex_init(&t->mu, NULL);
      t->mod = 1;
      __atomic_store_n(slot, t, __ATOMIC_RELEASE);
    }
  }
  pthread_mutex_unlock(&g_make_mu);
  return t;
}

void ezi_trace_free(ezi_trace *t) {
  if (!t) return;
  pthread_mutex_destroy(&t->mu);
  free(t->ring);
  free(t->topic);
  free(t->eid);
  free(t);
}

void ezi_trace_set(ezi_trace *t, uint32_t metrics, uint32_t mod) {
  pthread_mutex_lock(&t->mu);
  __atomic_store_n(&t->mod, mod ? mod : 1, __ATOMIC_RELAXED);
  if (!metrics) t->n = t->head = 0; /* off: what waited goes (as 3.9 clears on a change) */
  pthread_mutex_unlock(&t->mu);
  __atomic_store_n(&t->on, metrics, __ATOMIC_RELEASE);
}

void ezi_trace_add(ezi_trace *t, uint8_t metric, uint64_t now_ns, double value, uint64_t seq,
                   int8_t kind) {
  pthread_mutex_lock(&t->mu);
  if (t->n == EZI_TRACE_MAX) { /* full: the oldest goes */
    t->head = (t->head + 1) % EZI_TRACE_MAX;
    t->n--;
    t->dropped++;
  }
  t->ring[(t->head + t->n++) % EZI_TRACE_MAX] = (ezi_trace_sample){
      .t_ns = now_ns, .value = value, .seq = seq, .metric = metric, .kind = kind};
  pthread_mutex_unlock(&t->mu);
}

size_t ezi_trace_take(ezi_trace *t, ezi_trace_sample *out, size_t max, uint64_t *dropped) {
  pthread_mutex_lock(&t->mu);
  size_t k = t->n < max ? t->n : max;
  for (size_t i = 0; i < k; i++)
    out[i] = t->ring[(t->head + i) % EZI_TRACE_MAX];
  t->head = (t->head + k) % EZI_TRACE_MAX;
  t->n -= k;
  if (dropped) *dropped = t->dropped;
  t->dropped = 0;
  pthread_mutex_unlock(&t->mu);
  return k;
}

static const struct {
  uint8_t bit;
  const char *name;
} g_metrics[] = {{EZI_TM_PUBLISH_DELTA, "publish_delta_ns"},
                 {EZI_TM_BACKPRESSURE_WAIT, "backpressure_wait_ns"},
                 {EZI_TM_LEASE_TIME, "lease_time_ns"}};

const char *ezi_trace_metric_name(uint8_t metric) {
  for (size_t i = 0; i < sizeof g_metrics / sizeof g_metrics[0]; i++)
    if (g_metrics[i].bit == metric) return g_metrics[i].name;
  return "?";
}

uint8_t ezi_trace_metric_bit(const char *name) {
  for (size_t i = 0; i < sizeof g_metrics / sizeof g_metrics[0]; i++)
    if (!strcmp(g_metrics[i].name, name)) return g_metrics[i].bit;
  return 0;
}

json_t *ezi_trace_json(ezi_trace *t) {
  if (!t) return NULL;
  ezi_trace_sample buf[256];
  uint64_t dropped = 0;
  json_t *arr = NULL;
  for (;;) {
    uint64_t d = 0;
    size_t n = ezi_trace_take(t, buf, 256, &d);
    dropped += d;
    if (!n) break;
    if (!arr && !(arr = json_array())) return NULL;
    for (size_t i = 0; i < n; i++)
      json_array_append_new(arr, json_pack("{sIsssssssfsI}", "t_ns", (json_int_t)buf[i].t_ns,
                                           "endpoint_id", t->eid, "topic", t->topic, "metric",
                                           ezi_trace_metric_name(buf[i].metric), "value",
                                           buf[i].value, "seq", (json_int_t)buf[i].seq));
    if (n < 256) break;
  }
  if (!arr && !dropped) return NULL;
  json_t *o =
      json_pack("{sosI}", "samples", arr ? arr : json_array(), "dropped", (json_int_t)dropped);
  return o;
}
