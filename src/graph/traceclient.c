/* ez_trace: the per-message trace samples of a graph's endpoints, as they come (ezmsg.h).
 *
 * - The profiling dialect (or our own server in either): PROFILE polls every POLL_MS whose window
 *   says "trace" (tracectl.h); each ezmsg-c endpoint traces itself a while more and sends what it
 *   recorded with its answer. feature/profiling's Python endpoints have no traces.
 * - The released dialect with sessions (3.9): every process is asked to trace the topics
 *   (SET_PROFILING_TRACE with a ttl, renewed while the stream lasts), and the server's trace
 *   stream (SESSION_PROFILING_SUBSCRIBE) brings their samples, ezmsg-c's and 3.9's alike. At the
 *   end each process is told to stop (and would stop by itself at the ttl). */
#include "proto/dialect.h"
#include "graph/graphclient.h"
#include "graph/graphio.h"
#include "base/internal.h"
#include "base/trace.h"
#include "proto/meta39.h"
#include "graph/sessclient.h"
#include "base/wire.h"

#include <jansson.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define POLL_MS 100            /* how often the profiling dialect is polled */
#define RENEW_NS 2000000000ull /* how often 3.9 processes are asked again (their ttl: 3x that) */
#define TTL_S 6.0

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A process's monotonic ns as wall-clock seconds: right for a process on this host (the clock is
 * the machine's), an estimate elsewhere. */
static double to_wall(double t_ns) {
  struct timespec m;
  clock_gettime(CLOCK_MONOTONIC, &m);
  double now_ns = (double)m.tv_sec * 1e9 + (double)m.tv_nsec;
  return wall_now() - (now_ns - t_ns) / 1e9;
}

static bool wanted(const char *topic, const char *const *topics, size_t n) {
  if (!n) return true;
  for (size_t i = 0; i < n; i++)
    if (!strcmp(topics[i], topic)) return true;
  return false;
}

static bool stopped(volatile int *stop, uint64_t end) {
  return (stop && *stop) || (end && ezi_now_ns() >= end);
}

/* ---- the profiling dialect ------------------------------------------------------------------ */

/* The samples of one profile entry's "trace"; returns nonzero if fn said stop. */
static int entry_samples(const json_t *e, const char *const *topics, size_t n, ez_trace_fn fn,
                         void *user, uint64_t *dropped) {
  const json_t *tr = json_object_get(e, "trace");
  if (!json_is_object(tr)) return 0;
  json_int_t d = json_integer_value(json_object_get(tr, "dropped"));
  if (d > 0) *dropped += (uint64_t)d;
  size_t i;
  const json_t *s;
  json_array_foreach(json_object_get(tr, "samples"), i, s) {
    const char *topic = json_string_value(json_object_get(s, "topic"));
    const char *eid = json_string_value(json_object_get(s, "endpoint_id"));
    const char *metric = json_string_value(json_object_get(s, "metric"));
    if (!topic || !eid || !metric || !wanted(topic, topics, n)) continue;
    ez_trace_sample x = {
        .time = to_wall((double)json_integer_value(json_object_get(s, "t_ns"))),
        .endpoint_id = eid,
        .topic = topic,
        .metric = metric,
        .value = json_number_value(json_object_get(s, "value")),
        .seq = json_integer_value(json_object_get(s, "seq")),
        .pid = json_integer_value(json_object_get(e, "pid")),
        .dialect = "profiling",
    };
    if (fn(user, &x)) return 1;
  }
  return 0;
}

static int trace_profiling(const char *address, const char *const *topics, size_t n, ez_trace_fn fn,
                           void *user, volatile int *stop, uint64_t end) {
  uint64_t dropped = 0;
  /* The first poll's samples are left out: an endpoint still tracing for an earlier reader (it
   * goes on EZI_TRACE_POLL_TTL_NS after a poll) recorded them before this reader started; one
   * that was not recorded none. So a trace begins with its first poll, on any host's clock. */
  bool first = true;
  while (!stopped(stop, end)) {
    uint64_t t0 = ezi_now_ns();
    char *text = NULL;
    int rc = ezi_profile_request(address, (double)(EZI_TRACE_POLL_MS + POLL_MS) / 1000.0, &text,
                                 ezi_deadline(EZ_DEFAULT_TIMEOUT_MS));
    if (rc) return rc;
    json_t *doc = json_loads(text, 0, NULL);
    free(text);
    int quit = 0;
    const char *keys[2] = {"publishers", "channels"};
    for (int k = 0; k < 2 && !quit; k++) {
      size_t i;
      json_t *e;
      json_array_foreach(json_object_get(doc, keys[k]), i, e) if (!quit && !first) quit =
          entry_samples(e, topics, n, fn, user, &dropped);
    }
    json_decref(doc);
    first = false;
    if (quit) return 0;
    if (dropped) {
      ez_trace_sample x = {.time = wall_now(), .dropped = dropped, .dialect = "profiling"};
      if (fn(user, &x)) return 0;
      dropped = 0;
    }
    uint64_t took = ezi_now_ns() - t0;
    if (took < POLL_MS * 1000000ull) {
      struct timespec ts = {0, (long)(POLL_MS * 1000000ull - took)};
      nanosleep(&ts, NULL);
    }
  }
  return 0;
}

/* ---- the released dialect ------------------------------------------------------------------- */

/* Asks every process of the graph to trace the topics (or, with enable false, to stop). */
static void control_all(const char *address, const char *const *topics, size_t n, bool enable) {
  ezi_sess s;
  if (ezi_sess_open(address, ezi_deadline(EZ_DEFAULT_TIMEOUT_MS), &s)) return;
  ezi_pk_doc *sd = NULL;
  ezi_m39_graph_snapshot gs;
  if (ezi_sess_snapshot(&s, ezi_deadline(EZ_DEFAULT_TIMEOUT_MS), &sd, &gs, NULL)) {
    ezi_sess_close(&s);
    return;
  }
  ezi_m39_strs list = {.has = n > 0, .n = n, .v = (const char **)topics};
  ezi_m39_trace_control c = {.enabled = enable,
                             .sample_mod = 1,
                             .publisher_topics = list,
                             .subscriber_topics = list,
                             .ttl_seconds = {enable, TTL_S}};
  uint8_t *pk = NULL;
  size_t len = 0;
  if (ezi_m39_dump(&EZI_M39_PROFILING_TRACE_CONTROL, &c, &pk, &len, NULL) == 0)
    for (size_t i = 0; i < gs.n_processes; i++) {
      if (!gs.processes[i].units.n) continue;
      ezi_pk_doc *d = NULL;
      ezi_m39_control_response r;
      if (ezi_sess_request(&s, gs.processes[i].units.v[0], "SET_PROFILING_TRACE", 0.5, pk, len,
                           ezi_deadline(2000), &d, &r) == 0 &&
          !r.ok)
        EZI_DEBUG("trace: a process would not trace: %s", r.error ? r.error : "?");
      ezi_pk_doc_free(d);
    }
  free(pk);
  ezi_pk_doc_free(sd);
  ezi_sess_close(&s);
}

/* Opens the server's trace stream: the connection (reading batches), or an error. */
static int open_stream(const char *address) {
  uint64_t deadline = ezi_deadline(EZ_DEFAULT_TIMEOUT_MS);
  int fd = ezi_graph_open(address, deadline, NULL, 0);
  if (fd < 0) return fd;
  ezi_m39_stream_control ctl = {.interval = 0.05, .max_samples = 5000};
  uint8_t *pk = NULL;
  size_t n = 0;
  int rc = ezi_m39_dump(&EZI_M39_PROFILING_STREAM_CONTROL, &ctl, &pk, &n, NULL);
  ezi_buf b = {0};
  if (!rc) {
    ezi_buf_put_u8(&b, EZI_SESSION_PROFILING_SUBSCRIBE);
    ezi_buf_put_u64(&b, n);
    ezi_buf_put(&b, pk, n);
    rc = b.data ? ezi_io_write(fd, b.data, b.len, deadline) : EZ_ENOMEM;
  }
  free(pk);
  ezi_buf_free(&b);
  char *id = NULL;
  uint8_t done = 0;
  if (!rc) rc = ezi_io_read_str(fd, &id, NULL, 64, deadline);
  if (!rc) rc = ezi_io_read(fd, &done, 1, deadline);
  if (!rc && done != EZI_COMPLETE) rc = EZ_EPROTO;
  free(id);
  if (rc) {
    close(fd);
    return rc;
  }
  return fd;
}

static int trace_released(const char *address, const char *const *topics, size_t n, ez_trace_fn fn,
                          void *user, volatile int *stop, uint64_t end) {
  /* The server hands a new reader the samples it still holds, from traces before this one: a
   * process on this host (its monotonic clock is ours) gives only those taken since we started. */
  struct timespec m;
  clock_gettime(CLOCK_MONOTONIC, &m);
  double since_ns = (double)m.tv_sec * 1e9 + (double)m.tv_nsec;
  char here[256] = {0};
  if (gethostname(here, sizeof here - 1)) here[0] = 0;
  int fd = open_stream(address);
  if (fd < 0) return fd;
  control_all(address, topics, n, true);
  uint64_t renew = ezi_now_ns() + RENEW_NS;
  int rc = 0;
  bool quit = false;
  while (!rc && !quit && !stopped(stop, end)) {
    if (ezi_now_ns() >= renew) { /* new processes, and the ttl */
      control_all(address, topics, n, true);
      renew = ezi_now_ns() + RENEW_NS;
    }
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r = poll(&p, 1, 100);
    if (r <= 0) continue;
    uint64_t len = 0;
    rc = ezi_io_read_u64(fd, &len, ezi_deadline(EZ_DEFAULT_TIMEOUT_MS));
    if (!rc && len > ((uint64_t)64 << 20)) rc = EZ_EPROTO;
    uint8_t *pk = rc ? NULL : malloc(len ? (size_t)len : 1);
    if (!rc && !pk) rc = EZ_ENOMEM;
    if (!rc) rc = ezi_io_read(fd, pk, (size_t)len, ezi_deadline(EZ_DEFAULT_TIMEOUT_MS));
    ezi_pk_doc *d = NULL;
    ezi_m39_trace_stream_batch sb = {0};
    const ezi_pk *root = NULL;
    if (!rc) rc = ezi_pk_load(pk, (size_t)len, NULL, &d, &root, NULL);
    if (!rc) rc = ezi_m39_parse(d, &EZI_M39_PROFILING_TRACE_STREAM_BATCH, root, &sb, NULL);
    free(pk);
    int64_t lost = 0; /* our server says how many this reader was too slow to take */
    if (!rc && !ezi_pk_int_of(ezi_pk_dict_get(root->u.o.state, EZI_M39_DROPPED_ATTR), &lost) &&
        lost > 0) {
      ez_trace_sample x = {.time = wall_now(), .dropped = (uint64_t)lost, .dialect = "released"};
      quit = fn(user, &x) != 0;
    }
    for (size_t i = 0; !rc && !quit && i < sb.n_batches; i++) {
      const ezi_m39_trace_batch *b = &sb.batches[i];
      bool local = here[0] && b->host && !strcmp(b->host, here);
      for (size_t j = 0; j < b->n_samples; j++) {
        const ezi_m39_trace_sample *t = &b->samples[j];
        if (!wanted(t->topic, topics, n) || (local && t->timestamp < since_ns)) continue;
        ez_trace_sample x = {.time = to_wall(t->timestamp),
                             .endpoint_id = t->endpoint_id,
                             .topic = t->topic,
                             .metric = t->metric,
                             .value = t->value,
                             .seq = t->sample_seq.has ? t->sample_seq.v : -1,
                             .pid = b->pid,
                             .dialect = "released"};
        if ((quit = fn(user, &x) != 0)) break;
      }
    }
    ezi_pk_doc_free(d);
  }
  close(fd);
  control_all(address, topics, n, false);
  return rc;
}

int ez_trace(const char *address, const char *const *topics, size_t n_topics, ez_trace_fn fn,
             void *user, volatile int *stop, int duration_ms) {
  if (!fn || (n_topics && !topics)) return EZ_EINVAL;
  uint64_t end = duration_ms < 0 ? 0 : ezi_deadline(duration_ms);
  char ver[64] = "";
  int fd = ezi_graph_open(address, ezi_deadline(EZ_DEFAULT_TIMEOUT_MS), ver, sizeof ver);
  if (fd < 0) return fd;
  close(fd);
  ezi_peer_version pv = ezi_dialect_of_greeting(ver, strlen(ver));
  if (pv.dialect == EZ_DIALECT_PROFILING)
    return trace_profiling(address, topics, n_topics, fn, user, stop, end);
  if (!pv.sessions) return EZ_ENOTSUP;
  return trace_released(address, topics, n_topics, fn, user, stop, end);
}
