/* The released dialect's event streams (3.9.0): the server's history of settings and topology
 * events, the clients that subscribe to them (SESSION_SETTINGS_SUBSCRIBE,
 * SESSION_TOPOLOGY_SUBSCRIBE) and to the processes' profiling traces
 * (SESSION_PROFILING_SUBSCRIBE). A stream connection gets `str id, COMPLETE` and then frames of
 * `u64 size, pickle` until it hangs up; what the client sends is ignored, as 3.9 does.
 *
 * Bounds: EVENT_HISTORY events of each kind are kept (the oldest go first); a subscriber gets
 * what follows its `after_seq` of those, at most STREAM_QUEUE of them at once; one whose socket
 * holds STREAM_BACKLOG unsent is skipped until it reads, its events counted as dropped. A trace
 * reader that falls so far behind that a process's buffer drops samples it had not taken is told
 * how many in its next batch (EZI_M39_DROPPED_ATTR). */
#include "graph/gs_stream.h"
#include "graph/gs_conn.h"
#include "graph/gs_traces.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STREAM_QUEUE 1024 /* what a new subscriber gets of the history at most (3.9's queue) */

enum { EV_SETTINGS, EV_TOPOLOGY };

typedef struct gs_event {
  ezi_pk_doc *doc; /* owns the strings of the event and keeps the documents its value is in */
  union {
    ezi_m39_settings_event se;
    ezi_m39_topology_event te;
  } u;
} gs_event;

struct gs_events {
  int kind;
  int64_t seq; /* the last event's */
  gs_event *v; /* a ring of cap */
  size_t head, n, cap;
};

struct gs_stream {
  int kind; /* EV_SETTINGS, EV_TOPOLOGY, or STREAM_PROFILING */
  uint64_t dropped;
  /* profiling */
  ezi_m39_stream_control ctl;
  ezi_m39_uuid *filter; /* ctl.process_ids, copied */
  uint64_t timer;
  struct {
    char id[37];
    int64_t seq;
  } * last; /* per process: the last sample sequence number sent */
  size_t n_last;
};
#define STREAM_PROFILING 2

/* ---- the history ---------------------------------------------------------------------------- */

static gs_events *events_new(int kind) {
  gs_events *e = calloc(1, sizeof *e);
  if (e) e->kind = kind;
  return e;
}

void ezi_gs_events_free(gs_events *e) {
  if (!e) return;
  for (size_t i = 0; i < e->n; i++)
    ezi_pk_doc_free(e->v[(e->head + i) % e->cap].doc);
  free(e->v);
  free(e);
}

int ezi_gs_events_init(server *s) {
  s->settings_events = events_new(EV_SETTINGS);
  s->topology_events = events_new(EV_TOPOLOGY);
  return s->settings_events && s->topology_events ? 0 : EZ_ENOMEM;
}

static const ezi_m39_class *event_class(const gs_events *e) {
  return e->kind == EV_SETTINGS ? &EZI_M39_SETTINGS_CHANGED_EVENT : &EZI_M39_TOPOLOGY_CHANGED_EVENT;
}

/* A frame `u64 size, pickle` of one event, into out. 0 or an error. */
static int event_frame(const gs_events *e, const gs_event *ev, ezi_buf *out) {
  uint8_t *pk = NULL;
  size_t n = 0;
  int rc = ezi_m39_dump(event_class(e), &ev->u, &pk, &n, NULL);
  if (!rc) rc = ezi_buf_put_u64(out, n) || ezi_buf_put(out, pk, n) ? EZ_ENOMEM : 0;
  free(pk);
  return rc;
}

/* Sends a frame to a stream subscriber unless it is too far behind (counted). */
static void stream_send(conn *c, const ezi_buf *frame) {
  if (ezi_buf_pending(&c->out) >= STREAM_BACKLOG) {
    if (c->stream->dropped++ == 0)
      EZI_WARN("graph server: stream subscriber %s does not keep up; dropping its events", c->id);
    return;
  }
  ezi_gs_send(c, frame);
}

/* Appends an event (its doc taken) to the history and sends it to the subscribers of its kind. */
static void events_push(server *s, gs_events *e, gs_event *ev) {
  if (e->n == e->cap && e->cap < EVENT_HISTORY) {
    size_t cap = e->cap ? e->cap * 2 : 64;
    if (cap > EVENT_HISTORY) cap = EVENT_HISTORY;
    gs_event *v = malloc(cap * sizeof *v);
    if (v) {
      for (size_t i = 0; i < e->n; i++)
        v[i] = e->v[(e->head + i) % e->cap];
      free(e->v);
      e->v = v;
      e->cap = cap;
      e->head = 0;
    }
  }
  if (!e->cap) {               /* out of memory: not kept, but still sent */
  } else if (e->n == e->cap) { /* full: the oldest goes */
    ezi_pk_doc_free(e->v[e->head].doc);
    e->v[e->head] = *ev;
    e->head = (e->head + 1) % e->cap;
  } else {
    e->v[(e->head + e->n++) % e->cap] = *ev;
  }
  ezi_buf frame = {0};
  bool any = false;
  for (conn *c = s->conns; c; c = c->next)
    any |= c->st == C_STREAM && c->stream->kind == e->kind;
  if (any && event_frame(e, ev, &frame) == 0)
    for (conn *c = s->conns, *n; c; c = n) {
      n = c->next;
      if (c->st == C_STREAM && c->stream->kind == e->kind) stream_send(c, &frame);
    }
  ezi_buf_free(&frame);
  if (!e->cap) ezi_pk_doc_free(ev->doc);
}

/* A copy of s in ev's doc (NULL stays NULL; NULL also when out of memory). */
static const char *ev_str(ezi_pk_doc *d, const char *str) {
  if (!str) return NULL;
  size_t n = strlen(str);
  char *p = ezi_pk_alloc(d, n + 1);
  if (p) memcpy(p, str, n + 1);
  return p;
}

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int64_t ezi_gs_settings_event(server *s, int type, const char *address,
                              const ezi_m39_settings_value *value, ezi_pk_doc *value_doc,
                              const char *source_session, const char *source_process,
                              const double *timestamp) {
  gs_events *e = s->settings_events;
  gs_event ev = {.doc = ezi_pk_doc_new()};
  if (!ev.doc || ezi_pk_doc_keep(ev.doc, value_doc)) {
    ezi_pk_doc_free(ev.doc);
    return 0;
  }
  ezi_m39_settings_event *se = &ev.u.se;
  se->seq = ++e->seq;
  se->event_type = type;
  se->component_address = ev_str(ev.doc, address);
  se->timestamp = timestamp ? *timestamp : wall_now();
  se->source_session_id = ev_str(ev.doc, source_session);
  if (source_process) {
    se->source_process_id.has = true;
    memcpy(se->source_process_id.s, source_process, 37);
  }
  se->value = *value;
  events_push(s, e, &ev);
  return se->seq;
}

int64_t ezi_gs_topology_event(server *s, int type, const char *const *topics, size_t n,
                              const char *source_session, const char *source_process) {
  gs_events *e = s->topology_events;
  gs_event ev = {.doc = ezi_pk_doc_new()};
  if (!ev.doc) return 0;
  ezi_m39_topology_event *te = &ev.u.te;
  te->seq = ++e->seq;
  te->event_type = type;
  te->timestamp = wall_now();
  const char **v = ezi_pk_alloc(ev.doc, (n ? n : 1) * sizeof *v);
  size_t k = 0;
  for (size_t i = 0; v && i < n; i++) { /* sorted, unique (as 3.9's sorted(set(...))) */
    size_t j = k;
    while (j > 0 && strcmp(v[j - 1], topics[i]) > 0)
      j--;
    if (j > 0 && !strcmp(v[j - 1], topics[i])) continue;
    memmove(v + j + 1, v + j, (k - j) * sizeof *v);
    v[j] = ev_str(ev.doc, topics[i]);
    k++;
  }
  te->changed_topics = (ezi_m39_strs){.has = true, .n = v ? k : 0, .v = v};
  te->source_session_id = ev_str(ev.doc, source_session);
  if (source_process) {
    te->source_process_id.has = true;
    memcpy(te->source_process_id.s, source_process, 37);
  }
  events_push(s, e, &ev);
  return te->seq;
}

/* The history after `after` as a pickled list (SESSION_SETTINGS_EVENTS): 0 or an error. */
int ezi_gs_settings_events_after(server *s, int64_t after, uint8_t **out, size_t *len) {
  gs_events *e = s->settings_events;
  ezi_m39_settings_event *v = malloc((e->n ? e->n : 1) * sizeof *v);
  if (!v) return EZ_ENOMEM;
  size_t k = 0;
  for (size_t i = 0; i < e->n; i++) {
    const gs_event *ev = &e->v[(e->head + i) % e->cap];
    if (ev->u.se.seq > after) v[k++] = ev->u.se;
  }
  ezi_pk_doc *d = ezi_pk_doc_new();
  ezi_pk *list = NULL;
  int rc =
      d ? ezi_m39_build_list(d, &EZI_M39_SETTINGS_CHANGED_EVENT, v, k, &list, NULL) : EZ_ENOMEM;
  if (!rc) rc = ezi_pk_dump(list, 0, NULL, out, len, NULL);
  ezi_pk_doc_free(d);
  free(v);
  return rc;
}

/* ---- subscribers ---------------------------------------------------------------------------- */

bool ezi_gs_parse_seq(const char *p, size_t n, int64_t *out) {
  char buf[32];
  while (n && (*p == ' ' || *p == '\t' || *p == '\n')) /* int() allows surrounding space */
    p++, n--;
  while (n && (p[n - 1] == ' ' || p[n - 1] == '\t' || p[n - 1] == '\n'))
    n--;
  if (!n || n >= sizeof buf) return false;
  memcpy(buf, p, n);
  buf[n] = 0;
  char *end;
  errno = 0;
  long long v = strtoll(buf, &end, 10);
  if (errno || *end || end == buf) return false;
  *out = v;
  return true;
}

static void profiling_tick(void *arg);
static void stream_closed(conn *c);

static void stream_answer_id(conn *c) {
  ezi_uuid(c->id);
  ezi_buf b = {0};
  ezi_buf_put_cstr(&b, c->id);
  ezi_buf_put_u8(&b, EZI_COMPLETE);
  ezi_gs_send(c, &b);
  ezi_buf_free(&b);
}

void ezi_gs_stream_open(server *s, conn *c, const ezi_gs_req *q) {
  gs_stream *st = calloc(1, sizeof *st);
  if (!st) return ezi_gs_close(c);
  if (q->cmd == EZI_SESSION_PROFILING_SUBSCRIBE) {
    st->kind = STREAM_PROFILING;
    ezi_pk_doc *d = NULL;
    ezi_pk_err err;
    int rc = ezi_m39_load(&EZI_M39_PROFILING_STREAM_CONTROL, q->pl, q->npl, &d, &st->ctl, &err);
    if (!rc && st->ctl.process_ids.has) {
      st->filter = calloc(st->ctl.process_ids.n ? st->ctl.process_ids.n : 1, sizeof *st->filter);
      if (st->filter)
        memcpy(st->filter, st->ctl.process_ids.v, st->ctl.process_ids.n * sizeof *st->filter);
      else
        rc = EZ_ENOMEM;
    }
    st->ctl.process_ids.v = st->filter;
    ezi_pk_doc_free(d);
    if (rc) {
      free(st->filter);
      free(st);
      if (rc == EZ_ENOMEM) return ezi_gs_close(c);
      char what[200];
      snprintf(what, sizeof what, "bad ProfilingStreamControl: %s", err.msg);
      return ezi_gs_proto_error(c, what);
    }
    if (!(st->ctl.interval >= 0.01)) st->ctl.interval = 0.01; /* (NaN too) as 3.9: max(0.01, .) */
    if (st->ctl.interval > 3600) st->ctl.interval = 3600;
    if (st->ctl.max_samples < 1) st->ctl.max_samples = 1;
  } else {
    int64_t after;
    if (!ezi_gs_parse_seq(q->a, q->na, &after)) {
      free(st);
      return ezi_gs_proto_error(c, "after_seq is not an integer");
    }
    st->kind = q->cmd == EZI_SESSION_SETTINGS_SUBSCRIBE ? EV_SETTINGS : EV_TOPOLOGY;
    c->stream = st;
    c->closed = stream_closed;
    c->st = C_STREAM;
    stream_answer_id(c);
    gs_events *e = st->kind == EV_SETTINGS ? s->settings_events : s->topology_events;
    size_t first = e->n > STREAM_QUEUE ? e->n - STREAM_QUEUE : 0; /* the latest, as 3.9 */
    for (size_t i = first; i < e->n && !c->dead; i++) {
      const gs_event *ev = &e->v[(e->head + i) % e->cap];
      int64_t seq = st->kind == EV_SETTINGS ? ev->u.se.seq : ev->u.te.seq;
      if (seq <= after) continue;
      ezi_buf frame = {0};
      if (event_frame(e, ev, &frame) == 0) stream_send(c, &frame);
      ezi_buf_free(&frame);
    }
    return;
  }
  c->stream = st;
  c->closed = stream_closed;
  c->st = C_STREAM;
  stream_answer_id(c);
  st->timer =
      ezi_loop_timer(s->loop, ezi_now_ns() + (uint64_t)(st->ctl.interval * 1e9), profiling_tick, c);
}

/* The connection's `closed`. */
static void stream_closed(conn *c) {
  gs_stream *st = c->stream;
  if (!st) return;
  if (st->timer) ezi_loop_cancel(c->srv->loop, st->timer);
  free(st->filter);
  free(st->last);
  free(st);
  c->stream = NULL;
}

/* The sequence number this subscriber sent last for process id (a new entry: 0). */
static int64_t *last_seq(gs_stream *st, const char *id) {
  for (size_t i = 0; i < st->n_last; i++)
    if (!strcmp(st->last[i].id, id)) return &st->last[i].seq;
  void *v = realloc(st->last, (st->n_last + 1) * sizeof *st->last);
  if (!v) return NULL;
  st->last = v;
  memcpy(st->last[st->n_last].id, id, 37);
  st->last[st->n_last].seq = 0;
  return &st->last[st->n_last++].seq;
}

static bool wanted(const gs_stream *st, const char *id) {
  if (!st->ctl.process_ids.has) return true;
  for (size_t i = 0; i < st->ctl.process_ids.n; i++)
    if (!strcmp(st->filter[i].s, id)) return true;
  return false;
}

/* The pickle of sb, with EZI_M39_DROPPED_ATTR set when this reader lost samples. */
static int dump_batch(const ezi_m39_trace_stream_batch *sb, uint64_t lost, uint8_t **out,
                      size_t *n) {
  ezi_pk_doc *d = ezi_pk_doc_new();
  if (!d) return EZ_ENOMEM;
  ezi_pk *root = NULL;
  int rc = ezi_m39_build(d, &EZI_M39_PROFILING_TRACE_STREAM_BATCH, sb, &root, NULL);
  if (!rc && lost) {
    ezi_pk *k = ezi_pk_cstr(d, EZI_M39_DROPPED_ATTR), *v = ezi_pk_int(d, (int64_t)lost);
    rc = k && v ? ezi_pk_dict_add(root->u.o.state, k, v) : EZ_ENOMEM;
  }
  if (!rc) rc = ezi_pk_dump(root, 0, NULL, out, n, NULL);
  ezi_pk_doc_free(d);
  return rc;
}

static void profiling_tick(void *arg) {
  conn *c = arg;
  gs_stream *st = c->stream;
  server *s = c->srv;
  st->timer =
      ezi_loop_timer(s->loop, ezi_now_ns() + (uint64_t)(st->ctl.interval * 1e9), profiling_tick, c);
  if (ezi_buf_pending(&c->out) >= STREAM_BACKLOG) return; /* it has not read the last ones */
  ezi_m39_trace_stream_batch sb = {.timestamp = wall_now()};
  size_t np = 0;
  for (conn *k = s->conns; k; k = k->next)
    np += k->st == C_PROCESS;
  if (!np) return;
  sb.batch_keys = calloc(np, sizeof *sb.batch_keys);
  sb.batches = calloc(np, sizeof *sb.batches);
  int64_t **lasts = calloc(np, sizeof *lasts);
  int64_t *upto = calloc(np, sizeof *upto);
  uint64_t lost = 0; /* samples this reader was too slow to take, in all processes */
  if (sb.batch_keys && sb.batches && lasts && upto) {
    for (conn *k = s->conns; k; k = k->next) {
      if (k->st != C_PROCESS || !wanted(st, k->id)) continue;
      int64_t *last = last_seq(st, k->id);
      if (!last) continue;
      ezi_m39_trace_batch *b = &sb.batches[sb.n_batches];
      uint64_t gone = 0;
      if (ezi_gs_traces_batch(k->traces, k->id, *last, (size_t)st->ctl.max_samples, b,
                              &upto[sb.n_batches], &gone))
        continue;
      lost += gone;
      if (!b->n_samples && !gone && !st->ctl.include_empty_batches) {
        free(b->samples);
        continue;
      }
      b->timestamp = sb.timestamp;
      sb.batch_keys[sb.n_batches] = b->process_id;
      lasts[sb.n_batches] = last;
      sb.n_batches++;
    }
  }
  uint8_t *pk = NULL;
  size_t n = 0;
  if (sb.n_batches && dump_batch(&sb, lost, &pk, &n) == 0) {
    ezi_buf frame = {0};
    if (!ezi_buf_put_u64(&frame, n) && !ezi_buf_put(&frame, pk, n)) {
      ezi_gs_send(c, &frame);
      for (size_t i = 0; i < sb.n_batches; i++)
        *lasts[i] = upto[i];
    }
    ezi_buf_free(&frame);
  }
  free(pk);
  for (size_t i = 0; i < sb.n_batches; i++)
    free(sb.batches[i].samples);
  free(sb.batch_keys);
  free(sb.batches);
  free(lasts);
  free(upto);
}
