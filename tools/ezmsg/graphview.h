/* The graph view: one picture of a graph (its topics, processes, publishers, channels,
 * subscribers, edges, rates and the bottleneck) from one profile document and one topic graph.
 * The topic tools (list, info, hz, bw), graphviz / mermaid, the dashboard and /metrics all read
 * the graph through it.
 *
 * Its input is the profile document as text (ez_profile's JSON: ours or the Python reference's)
 * and an ez_graph (ez_graph_dag), so it does not care which server dialect produced them. What it
 * reads from the document:
 * - "publishers" and "channels" (docs/profiling.md): every endpoint that answered;
 * - "registry" (ours, gsregistry.h): every registered publisher and subscriber, so a subscriber
 *   no publisher feeds, and a publisher that did not answer in time, are listed too. Without it
 *   (a Python server), a subscriber is known only through its channels, and its topic is taken to
 *   be its channel's (its publisher's) topic.
 *
 * Subscribers are merged over their channels (a subscriber fed by two publishers has two channel
 * entries): rates add up, processing averages are weighted by samples, max and p99 are the
 * largest. A topic's rate is what a subscriber of it receives: the rates of every publisher whose
 * topic reaches it in the topic graph (itself included). Not thread-safe; one owner. */
#ifndef EZ_GRAPHVIEW_H
#define EZ_GRAPHVIEW_H

#include "ezmsg/ezmsg.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GV_NONE ((size_t)-1)

typedef struct gv_pub {
  char *id, *topic, *host;
  int64_t pid;
  uint64_t num_buffers, num_channels, messages_total, bytes_total;
  double rate_hz, bytes_per_s;
  ez_latency bp;       /* backpressure */
  bool answered;       /* false: registered, but no profile entry (it did not answer in time) */
  size_t topic_ix;     /* into topics */
  char bottleneck[96]; /* why this publisher bounds its rate ("" if it does not) */
} gv_pub;

typedef struct gv_chan {
  char *id, *pub_id, *topic, *mode, *host;
  int64_t pid; /* the subscribing process */
  uint64_t num_buffers, in_flight;
  size_t pub_ix; /* into pubs, GV_NONE if its publisher did not answer */
  size_t n_subs;
  size_t *subs; /* the subscribers it feeds (indices) */
} gv_chan;

typedef struct gv_sub {
  char *id, *handle, *topic, *host;
  int64_t pid;          /* 0: unknown */
  double rate_hz;       /* messages released per second, over its channels */
  ez_latency proc;      /* processing */
  const char *mode;     /* transport of its channel(s): "local", "shm", "tcp", "mixed", "unknown";
                         * "idle" when no channel feeds it */
  size_t n_chans;       /* channels feeding it */
  uint64_t num_buffers; /* of its channels' publishers (the largest) */
  size_t topic_ix;
  char bottleneck[96];
} gv_sub;

typedef struct gv_topic {
  char *name;
  size_t n_pubs, n_subs;
  double rate_hz, bytes_per_s; /* what a subscriber of it receives */
  size_t n_to;
  size_t *to; /* downstream topics (indices), from the topic graph */
} gv_topic;

typedef struct gv_proc {
  int64_t pid; /* 0: endpoints of unknown process */
  char *host;
  size_t n_pubs, n_subs;
} gv_proc;

typedef struct gv {
  double window_s;
  char timestamp[40]; /* ISO-8601, UTC, when the view was built */
  bool has_registry;  /* the server listed its clients */
  bool has_profile;   /* a profile was read (false: the topic graph only) */
  size_t n_pubs, n_chans, n_subs, n_topics, n_procs;
  gv_pub *pubs;
  gv_chan *chans;
  gv_sub *subs;
  gv_topic *topics; /* sorted by name */
  gv_proc *procs;   /* sorted by pid */
} gv;

/* Builds a view from a profile document (NULL: none, the topic graph only) and a topic graph
 * (NULL: none). Returns 0, EZ_EPROTO if the document is not a profile, or EZ_ENOMEM. On success
 * the caller owns *out and frees it with gv_free. */
int gv_build(const char *profile_json, const ez_graph *dag, gv *out);
void gv_free(gv *v);

/* Fetches a profile over window_s and the topic graph from the server at address and builds the
 * view. A server that does not answer PROFILE (one without profiling) gives a view of the topic
 * graph alone. Returns 0 or the library error. */
int gv_fetch(const char *address, double window_s, int timeout_ms, gv *out);

/* The topic named `name`, or NULL. */
const gv_topic *gv_find_topic(const gv *v, const char *name);

/* The whole view as JSON (docs/dashboard.md, "The view"); NULL without memory. */
json_t *gv_json(const gv *v);

/* Writes the current time (UTC) as ISO-8601 with milliseconds into out (40 bytes). */
void gv_now_iso(char out[40]);

#endif
