/* Per-message trace samples of an endpoint (3.9.0's profiling traces): while a tool asks for
 * them, a publisher records publish_delta_ns (the time since its previous message) and
 * backpressure_wait_ns (how long a publish waited for a slot), a subscriber lease_time_ns (from
 * ez_recv's return to ez_msg_release), each with the message's sequence number.
 *
 * Cost. An endpoint that was never traced has a NULL trace; one that is not traced now has
 * `on` 0: the message path reads one field it already has in cache and moves on. While on, a
 * sample costs a clock read and a short lock (the recording thread's only; the reader, the I/O
 * thread, takes it once per batch).
 *
 * Bounds. At most EZI_TRACE_MAX samples wait per endpoint (3.9.0's default); past that the
 * oldest go first and are counted as dropped. Tracing switches itself off once its deadline
 * passes (a tool that asked and went away), checked by the I/O thread's tick. */
#ifndef EZI_TRACE_H
#define EZI_TRACE_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EZI_TRACE_MAX 10000

enum {
  EZI_TM_PUBLISH_DELTA = 1,     /* "publish_delta_ns" */
  EZI_TM_BACKPRESSURE_WAIT = 2, /* "backpressure_wait_ns" */
  EZI_TM_LEASE_TIME = 4,        /* "lease_time_ns" */
};

typedef struct ezi_trace_sample {
  uint64_t t_ns; /* monotonic ns (what 3.9's PROFILE_TIME gives) */
  double value;  /* ns */
  uint64_t seq;  /* the message's number */
  uint8_t metric;
  int8_t kind; /* a subscriber's channel kind (ezi_m39_channel), or -1 */
} ezi_trace_sample;

typedef struct ezi_trace {
  uint32_t on;      /* atomic: metrics recorded now (EZI_TM_* bits; 0: none) */
  uint32_t mod;     /* atomic: record one message in mod (>= 1) */
  uint32_t counter; /* the recording thread's */
  uint64_t last_ns; /* the recording thread's: the previous publish */
  pthread_mutex_t mu;
  ezi_trace_sample *ring; /* EZI_TRACE_MAX, allocated at the first enable */
  size_t head, n;
  uint64_t dropped;  /* samples the oldest-first rule took away, in all */
  uint64_t until_ns; /* tracing stops here (0: no deadline); the I/O thread's (tracectl.c) */
  char *topic, *eid; /* the endpoint's topic, and its 3.9 endpoint id "topic:id" */
} ezi_trace;

/* The trace of an endpoint (topic, id), made at its first enable (NULL when out of memory). The
 * pointer is published once (atomically) and lives as long as the endpoint: ezi_trace_free then. */
ezi_trace *ezi_trace_get(ezi_trace **slot, const char *topic, const char *id);
void ezi_trace_free(ezi_trace *t);

/* Turns metrics (EZI_TM_* bits; 0: off) on with one message in mod recorded. Any thread. */
void ezi_trace_set(ezi_trace *t, uint32_t metrics, uint32_t mod);

/* Records a sample (the recording thread). The caller checked t and t->on. */
void ezi_trace_add(ezi_trace *t, uint8_t metric, uint64_t now_ns, double value, uint64_t seq,
                   int8_t kind);
/* Whether this message is one of the `mod` to record (the recording thread). */
static inline bool ezi_trace_pick(ezi_trace *t) {
  uint32_t mod = __atomic_load_n(&t->mod, __ATOMIC_RELAXED);
  if (mod <= 1) return true;
  return ++t->counter % mod == 0;
}

/* Takes up to max samples, oldest first, into out (returns how many). *dropped (may be NULL)
 * gets how many were dropped since the last take. Any thread. */
size_t ezi_trace_take(ezi_trace *t, ezi_trace_sample *out, size_t max, uint64_t *dropped);

/* The name of a metric bit ("publish_delta_ns", ...), and the bit of a name (0: unknown). */
const char *ezi_trace_metric_name(uint8_t metric);
/* The samples of t as {"samples": [{"t_ns", "endpoint_id", "topic", "metric", "value", "seq"}...],
 * "dropped": n}, taking them (a new reference); NULL if it has none and dropped none, or t is
 * NULL. */
json_t *ezi_trace_json(ezi_trace *t);
uint8_t ezi_trace_metric_bit(const char *name);

/* A PROFILE whose window_ms is at least this is `ezmsg profile --trace` polling (its window is
 * window_ms - EZI_TRACE_POLL_MS): the endpoint traces every metric for EZI_TRACE_POLL_TTL_NS more
 * and adds its samples to the answer. feature/profiling's Python reads such a window as about
 * eleven days, which its telemetry clamps to what it has: harmless. */
#define EZI_TRACE_POLL_MS 1000000000ull
#define EZI_TRACE_POLL_TTL_NS 3000000000ull

#endif
