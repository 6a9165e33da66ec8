/* A process's profiling trace samples in the graph server (gs_traces.h): a ring that doubles up
 * to TRACE_SAMPLES entries, each sample's three strings in one allocation of its own. */
#include "graph/gs_traces.h"

#include <stdlib.h>
#include <string.h>

typedef struct gs_sample {
  int64_t seq;
  ezi_m39_trace_sample s; /* its strings in `strs` */
  char *strs;
  size_t bytes;
} gs_sample;

struct gs_traces {
  gs_sample *samples; /* a ring of cap */
  size_t head, n, cap, bytes;
  int64_t seq; /* the last sample's */
  int64_t pid;
  const char *host;
};

gs_traces *ezi_gs_traces_new(void) {
  gs_traces *t = calloc(1, sizeof *t);
  if (t) ezi_gs_traces_owner(t, -1, NULL);
  return t;
}

static void drop_oldest(gs_traces *t) {
  gs_sample *x = &t->samples[t->head];
  t->bytes -= x->bytes;
  free(x->strs);
  t->head = (t->head + 1) % t->cap;
  t->n--;
}

void ezi_gs_traces_free(gs_traces *t) {
  if (!t) return;
  while (t->n)
    drop_oldest(t);
  free(t->samples);
  free(t);
}

void ezi_gs_traces_owner(gs_traces *t, int64_t pid, const char *host) {
  t->pid = pid;
  t->host = host ? host : "";
}

void ezi_gs_traces_add(gs_traces *t, const ezi_m39_trace_sample *s) {
  size_t ne = strlen(s->endpoint_id) + 1, nt = strlen(s->topic) + 1, nm = strlen(s->metric) + 1;
  size_t bytes = sizeof(gs_sample) + ne + nt + nm;
  if (bytes > TRACE_BYTES) return;
  while (t->n && (t->n == TRACE_SAMPLES || t->bytes + bytes > TRACE_BYTES))
    drop_oldest(t);
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 256;
    if (cap > TRACE_SAMPLES) cap = TRACE_SAMPLES;
    gs_sample *v = malloc(cap * sizeof *v);
    if (!v) return;
    for (size_t i = 0; i < t->n; i++)
      v[i] = t->samples[(t->head + i) % t->cap];
    free(t->samples);
    t->samples = v;
    t->cap = cap;
    t->head = 0;
  }
  char *strs = malloc(ne + nt + nm);
  if (!strs) return;
  memcpy(strs, s->endpoint_id, ne);
  memcpy(strs + ne, s->topic, nt);
  memcpy(strs + ne + nt, s->metric, nm);
  gs_sample *x = &t->samples[(t->head + t->n++) % t->cap];
  *x = (gs_sample){.seq = ++t->seq, .s = *s, .strs = strs, .bytes = bytes};
  t->bytes += bytes;
  x->s.endpoint_id = strs;
  x->s.topic = strs + ne;
  x->s.metric = strs + ne + nt;
}

int ezi_gs_traces_batch(const gs_traces *t, const char *process_id, int64_t after, size_t max,
                        ezi_m39_trace_batch *b, int64_t *upto, uint64_t *lost) {
  *b = (ezi_m39_trace_batch){.pid = t->pid, .host = t->host};
  b->process_id.has = true;
  memcpy(b->process_id.s, process_id, 37);
  *upto = after;
  *lost = 0;
  size_t first = 0; /* the first kept sample after `after` (seq is consecutive in the ring) */
  int64_t oldest = t->n ? t->samples[t->head].seq : t->seq + 1;
  if (after >= oldest)
    first = (size_t)(after - oldest + 1);
  else if (after > 0) { /* what this reader had not taken went to make room */
    *lost = (uint64_t)(oldest - 1 - after);
    *upto = oldest - 1;
  }
  if (first >= t->n) return 0;
  size_t k = t->n - first < max ? t->n - first : max;
  b->samples = malloc(k * sizeof *b->samples);
  if (!b->samples) return EZ_ENOMEM;
  for (size_t i = 0; i < k; i++)
    b->samples[i] = t->samples[(t->head + first + i) % t->cap].s;
  b->n_samples = k;
  *upto = t->samples[(t->head + first + k - 1) % t->cap].seq;
  return 0;
}
