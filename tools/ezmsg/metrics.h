/* Prometheus export of the graph view (metrics.c; names in docs/dashboard.md, "Metrics"), and a
 * stand-alone /metrics server for `ezmsg serve --metrics` (metrics_http.c). */
#ifndef EZ_METRICS_H
#define EZ_METRICS_H

#include "graphview.h"

#include <stdbool.h>
#include <stddef.h>

/* The exposition text (caller frees; *len its length): ezmsg_up and the scrape's duration, then,
 * if up, every endpoint's and topic's series. NULL without memory. */
char *metrics_text(const gv *v, bool up, double scrape_s, size_t *len);

typedef struct metrics_server metrics_server;

/* Serves GET /metrics on listen_addr for the graph server at graph_addr: each scrape asks that
 * server for a profile and the topic graph (at most one request at a time; a scrape within
 * 250 ms of the last one gets the same answer), bounded by a few seconds. NULL on failure, with a
 * one-line reason in err. */
metrics_server *metrics_start(const char *listen_addr, const char *graph_addr, char *err,
                              size_t errcap);
const char *metrics_address(const metrics_server *m);
/* Whether it listens on a loopback address only. */
bool metrics_loopback(const metrics_server *m);
void metrics_stop(metrics_server *m);

#endif
