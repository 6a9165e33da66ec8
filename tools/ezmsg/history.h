/* The dashboard's history: for every publisher and subscriber, a ring of the last HIST_SAMPLES
 * samples (one per dashboard tick, by default a second: 5 minutes) of six figures. Memory is
 * fixed per endpoint (HIST_ENDPOINT_BYTES) and the number of endpoints is capped
 * (HIST_MAX_ENDPOINTS); an endpoint gone for a whole ring is forgotten. So the history holds at
 * most HIST_MAX_ENDPOINTS x HIST_ENDPOINT_BYTES however long the dashboard runs
 * (docs/dashboard.md gives the measured figures). Not thread-safe: the caller locks. */
#ifndef EZ_HISTORY_H
#define EZ_HISTORY_H

#include "graphview.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define HIST_SAMPLES 300
#define HIST_MAX_ENDPOINTS 10000

/* The figures kept. Publishers: message rate, bytes/s, backpressure avg / p99 / max (ms), leases
 * in flight. Subscribers: message rate, 0, processing avg / p99 / max (ms), messages in flight. */
enum { H_RATE, H_BYTES, H_AVG, H_P99, H_MAX, H_INFLIGHT, H_FIGURES };

typedef struct hist_endpoint {
  char id[40];
  bool is_pub;
  uint64_t first_tick, last_tick; /* ticks it was present in, first and last */
  float v[H_FIGURES][HIST_SAMPLES];
} hist_endpoint;

#define HIST_ENDPOINT_BYTES sizeof(hist_endpoint)

typedef struct history history;

history *hist_new(void);
void hist_free(history *h);

/* One tick: every endpoint of the view gets a sample at time t_ms (ms since the epoch); those
 * absent get none (a gap). Returns 0 or EZ_ENOMEM (the tick is then partly recorded). */
int hist_add(history *h, const gv *v, int64_t t_ms);

/* The endpoint's samples, oldest first: {"id", "kind": "publisher"|"subscriber", "t_ms": [...],
 * "rate_hz", "bytes_per_s", "avg_ms", "p99_ms", "max_ms", "in_flight": [...]} (null where it was
 * absent). NULL if unknown or without memory. */
json_t *hist_json(const history *h, const char *id);

/* Bytes the history holds (its endpoints and index), and how many endpoints it tracks / refused
 * for the cap. */
size_t hist_bytes(const history *h);
size_t hist_endpoints(const history *h);
uint64_t hist_refused(const history *h);

#endif
