/* The context's process link in a released-dialect graph (procclient.h): a state machine on the
 * I/O thread over one connection to the graph server, never blocking it. */
#include "proc/procclient.h"
#include "core/context.h"
#include "proto/meta39.h"
#include "sub/subscriber.h"
#include "proc/tracectl.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define IN_MAX ((size_t)8 << 20) /* a route request's pickle, at most */
#define PUSH_NS 20000000ull      /* as 3.9.0's EZMSG_PROFILE_TRACE_PUSH_INTERVAL_S */
#define PUSH_MAX 5000            /* ... and EZMSG_PROFILE_TRACE_PUSH_MAX_SAMPLES */

enum { P_CONNECTING, P_GREETING, P_ID, P_REGISTERING, P_READY };

/* An endpoint's message total at the last snapshot answer: 3.9 counts a snapshot's window as the
 * difference of totals since the previous one (whoever asked for it), exactly. */
typedef struct {
  char id[37];
  int64_t total;
} ezi_total;

struct ezi_proc {
  ez_context *ctx;
  ezi_watch w;
  ezi_outbox out;
  ezi_buf in;
  int state;
  char id[37];
  char unit[300];
  char host[256];
  uint64_t last_snapshot_ns; /* of our last snapshot answer (0: none yet) */
  ezi_total *last;           /* each endpoint's total at that answer, sorted by id */
  size_t n_last;
  uint64_t push_timer; /* pushing trace samples (0: not armed) */
  unsigned slot;       /* its number among the process's links (slot_take) */
};

/* A unit is owned by one process link, and the process may have several contexts on a graph:
 * each link takes the lowest free number, and names its unit by it (slot 0: "<host>/<pid>", then
 * "<host>/<pid>/2", ...), so a context reopened gets its old name back. Past 64 at once, numbers
 * are not reused. */
static pthread_mutex_t slot_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t slot_used;
static unsigned slot_next = 64;

static unsigned slot_take(void) {
  pthread_mutex_lock(&slot_mu);
  unsigned n = 0;
  while (n < 64 && (slot_used >> n & 1))
    n++;
  if (n < 64)
    slot_used |= 1ull << n;
  else
    n = slot_next++;
  pthread_mutex_unlock(&slot_mu);
  return n;
}

static void slot_give(unsigned n) {
  if (n >= 64) return;
  pthread_mutex_lock(&slot_mu);
  slot_used &= ~(1ull << n);
  pthread_mutex_unlock(&slot_mu);
}

static void push_arm(ezi_proc *p);
static int trace_batch(ezi_proc *p, size_t max, uint8_t **out, size_t *len, size_t *taken);

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void close_link(ezi_proc *p) {
  if (p->w.fd < 0) return;
  ezi_loop_del(&p->w);
  ezi_outbox_close(p->ctx, &p->out);
  close(p->w.fd);
  p->w.fd = -1;
  ezi_buf_free(&p->in);
}

static void fail(ezi_proc *p, const char *what) {
  if (p->state == P_READY)
    EZI_INFO("process link: %s; the graph's profiling tools no longer see this process", what);
  else
    EZI_INFO("process link: %s; this process is not registered with the graph server", what);
  close_link(p);
}

/* Sends a command with a pickled payload (u64 size, bytes). */
static void send_payload(ezi_proc *p, uint8_t cmd, const uint8_t *pk, size_t n) {
  ezi_buf b = {0};
  ezi_buf_put_u8(&b, cmd);
  ezi_buf_put_u64(&b, n);
  ezi_buf_put(&b, pk, n);
  if (b.data) ezi_outbox_put(p->ctx, &p->out, b.data, b.len);
  ezi_buf_free(&b);
}

/* ---- answers -------------------------------------------------------------------------------- */

static json_int_t jint_of(const json_t *o, const char *k1, const char *k2) {
  const json_t *v = json_object_get(o, k1);
  if (k2) v = json_object_get(v, k2);
  return json_is_integer(v) ? json_integer_value(v) : 0;
}

static double jnum_of(const json_t *o, const char *k1, const char *k2) {
  const json_t *v = json_object_get(o, k1);
  if (k2) v = json_object_get(v, k2);
  return json_is_number(v) ? json_number_value(v) : 0;
}

static const char *jstr_of(const json_t *o, const char *k) {
  const char *s = json_string_value(json_object_get(o, k));
  return s ? s : "";
}

static int kind_of(const char *mode) {
  return !strcmp(mode, "local") ? EZI_M39_CH_LOCAL
         : !strcmp(mode, "shm") ? EZI_M39_CH_SHM
         : !strcmp(mode, "tcp") ? EZI_M39_CH_TCP
                                : EZI_M39_CH_UNKNOWN;
}

/* An attribute beyond 3.9.0's fields (see docs/profiling.md, "In a 3.9 graph"). */
static int extra(ezi_pk_doc *d, ezi_pk *obj, const char *name, double v) {
  return ezi_pk_attr_set(obj, name, ezi_pk_float(d, v));
}
static int extra_int(ezi_pk_doc *d, ezi_pk *obj, const char *name, int64_t v) {
  return ezi_pk_attr_set(obj, name, ezi_pk_int(d, v));
}

static int total_cmp(const void *a, const void *b) {
  return strcmp(((const ezi_total *)a)->id, ((const ezi_total *)b)->id);
}

/* Messages of endpoint `id` since the last snapshot answer (all of them if it is new since), and
 * its total noted in `next` for the next one. */
static int64_t since_last(const ezi_proc *p, ezi_total *next, size_t *n_next, const char *id,
                          int64_t total) {
  ezi_total key = {.total = 0};
  snprintf(key.id, sizeof key.id, "%s", id);
  const ezi_total *was = p->n_last ? bsearch(&key, p->last, p->n_last, sizeof key, total_cmp) : 0;
  if (next) {
    key.total = total;
    next[(*n_next)++] = key;
  }
  int64_t d = total - (was ? was->total : 0);
  return d > 0 ? d : 0;
}

/* The ProcessProfilingSnapshot of this process, pickled. As 3.9's processes count it, its window
 * is the time since the last snapshot answer (whoever asked), and its counts are the differences
 * of the totals over that time, exactly; the first answer gives our telemetry's last 2 s. Our own
 * profile goes with it (EZI_PROC_PROFILE_ATTR), over `want_s` when the asker named a window
 * (ezmsg-c's `ezmsg profile` does: EZI_PROC_WINDOW_ASK), else over the snapshot's window (at
 * least 0.1 s, at most our windows' 10 s). */
static int snapshot(ezi_proc *p, double want_s, uint8_t **out, size_t *len) {
  ez_context *ctx = p->ctx;
  uint64_t now = ezi_now_ns();
  bool prev = p->last_snapshot_ns != 0;
  double elapsed = prev ? (double)(now - p->last_snapshot_ns) / 1e9 : 0;
  double w = want_s > 0 ? want_s : prev ? elapsed : EZ_PROFILE_WINDOW_S;
  if (w < 0.1) w = 0.1;
  if (w > EZ_PROFILE_MAX_WINDOW_S) w = EZ_PROFILE_MAX_WINDOW_S;
  double sw = prev ? elapsed : w; /* the snapshot's window: the first one's counts are our w's */
  p->last_snapshot_ns = now;
  char *text = NULL;
  int rc = ez_context_profile(ctx, w, &text);
  if (rc) return rc;
  json_t *doc = json_loads(text, 0, NULL);
  json_t *pubs = json_object_get(doc, "publishers"), *chans = json_object_get(doc, "channels");
  ezi_pk_doc *d = ezi_pk_doc_new();
  ezi_m39_profiling_snapshot sn = {
      .pid = ctx->pid, .host = p->host, .window_seconds = sw, .timestamp = (double)now};
  sn.process_id.has = true;
  memcpy(sn.process_id.s, p->id, 37);
  size_t np = json_array_size(pubs);
  pthread_mutex_lock(&ctx->mu);
  size_t ns = ctx->n_subs;
  sn.publisher_keys = d ? ezi_pk_alloc(d, (np + 1) * sizeof(char *)) : NULL;
  sn.publishers = d ? ezi_pk_alloc(d, (np + 1) * sizeof *sn.publishers) : NULL;
  sn.subscriber_keys = d ? ezi_pk_alloc(d, (ns + 1) * sizeof(char *)) : NULL;
  sn.subscribers = d ? ezi_pk_alloc(d, (ns + 1) * sizeof *sn.subscribers) : NULL;
  rc = !doc || !d || !sn.publishers || !sn.subscribers || !sn.publisher_keys || !sn.subscriber_keys
           ? EZ_ENOMEM
           : 0;
  double *lease_ns =
      calloc(ns + 1, sizeof *lease_ns); /* per subscriber: the mean processing time */
  ezi_total *next = calloc(np + ns + 1, sizeof *next);
  size_t n_next = 0;
  if (!lease_ns || !next) rc = EZ_ENOMEM;
  for (size_t i = 0; !rc && i < np; i++) {
    const json_t *j = json_array_get(pubs, i);
    ezi_m39_pub_profile *x = &sn.publishers[sn.n_publishers];
    char *eid = ezi_pk_alloc(d, strlen(jstr_of(j, "topic")) + 40);
    if (!eid) {
      rc = EZ_ENOMEM;
      break;
    }
    sprintf(eid, "%s:%s", jstr_of(j, "topic"), jstr_of(j, "id"));
    int64_t total = jint_of(j, "messages", "total");
    int64_t win = since_last(p, next, &n_next, jstr_of(j, "id"), total);
    if (!prev) win = jint_of(j, "messages", "window");
    *x = (ezi_m39_pub_profile){.endpoint_id = eid,
                               .topic = jstr_of(j, "topic"),
                               .messages_published_total = total,
                               .messages_published_window = win,
                               .publish_rate_hz_window = sw > 0 ? (double)win / sw : 0,
                               .inflight_messages_current = jint_of(j, "backpressure", "in_flight"),
                               .num_buffers = jint_of(j, "num_buffers", NULL),
                               .timestamp = (double)now};
    sn.publisher_keys[sn.n_publishers++] = eid;
  }
  for (size_t i = 0; !rc && i < ns; i++) {
    ez_sub *s = ctx->subs[i];
    ezi_m39_sub_profile *x = &sn.subscribers[sn.n_subscribers];
    char *eid = ezi_pk_alloc(d, strlen(s->topic) + 40);
    if (!eid) {
      rc = EZ_ENOMEM;
      break;
    }
    sprintf(eid, "%s:%s", s->topic, s->id);
    /* Its deliveries in our window, over every channel it is a member of (one per publisher):
     * the first answer's count. */
    int64_t win = 0;
    double busy = 0;
    const char *mode = "unknown";
    size_t k;
    json_t *c;
    json_array_foreach(chans, k, c) {
      size_t m;
      json_t *e;
      json_array_foreach(json_object_get(c, "subscribers"), m, e) {
        if (strcmp(jstr_of(e, "subscriber_id"), s->id)) continue;
        win += jint_of(e, "samples", NULL);
        busy += jnum_of(e, "avg_ms", NULL) * 1e6 * (double)jint_of(e, "timed_samples", NULL);
        mode = jstr_of(c, "mode");
      }
    }
    int64_t timed = 0;
    json_array_foreach(chans, k, c) {
      size_t m;
      json_t *e;
      json_array_foreach(json_object_get(c, "subscribers"), m,
                         e) if (!strcmp(jstr_of(e, "subscriber_id"), s->id)) timed +=
          jint_of(e, "timed_samples", NULL);
    }
    lease_ns[sn.n_subscribers] = timed ? busy / (double)timed : 0;
    int64_t total = (int64_t)__atomic_load_n(&s->received, __ATOMIC_RELAXED);
    int64_t since = since_last(p, next, &n_next, s->id, total);
    *x = (ezi_m39_sub_profile){.endpoint_id = eid,
                               .topic = ezi_pk_alloc(d, strlen(s->topic) + 1),
                               .messages_received_total = total,
                               .messages_received_window = prev ? since : win,
                               .channel_kind_last = kind_of(mode),
                               .timestamp = (double)now};
    if (!x->topic) {
      rc = EZ_ENOMEM;
      break;
    }
    strcpy((char *)x->topic, s->topic);
    sn.subscriber_keys[sn.n_subscribers++] = eid;
  }
  pthread_mutex_unlock(&ctx->mu);
  ezi_pk *root = NULL;
  if (!rc) rc = ezi_m39_build(d, &EZI_M39_PROCESS_PROFILING_SNAPSHOT, &sn, &root, NULL);
  /* Beyond 3.9.0's fields: what its own examples/profiling_tui.py reads (docs/profiling.md), and
   * our full profile of the process. */
  const ezi_pk *pubd = ezi_pk_attr(root, "publishers"), *subd = ezi_pk_attr(root, "subscribers");
  for (size_t i = 0; !rc && i < sn.n_publishers; i++) {
    ezi_pk *o = (ezi_pk *)ezi_pk_value(pubd, i);
    const json_t *j = json_array_get(pubs, i);
    double cnt = (double)sn.publishers[i].messages_published_window;
    rc |= extra(d, o, "publish_delta_ns_avg_window", cnt > 0 ? sw * 1e9 / cnt : 0);
    rc |= extra_int(d, o, "inflight_messages_peak_window",
                    sn.publishers[i].inflight_messages_current);
    rc |= extra(d, o, "backpressure_wait_ns_window",
                jnum_of(j, "backpressure", "avg_ms") * 1e6 *
                    (double)jint_of(j, "backpressure", "timed_samples"));
  }
  for (size_t i = 0; !rc && i < sn.n_subscribers; i++) {
    ezi_pk *o = (ezi_pk *)ezi_pk_value(subd, i);
    rc |= extra(d, o, "lease_time_ns_avg_window", lease_ns[i]);
    rc |= extra(d, o, "user_span_ns_avg_window", 0);
    rc |= extra(d, o, "attributable_backpressure_ns_window", 0);
    rc |= extra_int(d, o, "attributable_backpressure_events_total", 0);
  }
  if (!rc) rc = ezi_pk_attr_set(root, EZI_PROC_PROFILE_ATTR, ezi_pk_cstr(d, text));
  if (!rc) rc = ezi_pk_dump(root, 0, NULL, out, len, NULL);
  ezi_pk_doc_free(d);
  json_decref(doc);
  free(text);
  free(lease_ns);
  if (!rc) { /* the totals the next answer counts from */
    qsort(next, n_next, sizeof *next, total_cmp);
    free(p->last);
    p->last = next;
    p->n_last = n_next;
    next = NULL;
  }
  free(next);
  return rc ? (rc < 0 ? rc : EZ_ENOMEM) : 0;
}

/* The window an ezmsg-c asker named in a GET_PROFILING_SNAPSHOT's payload (EZI_PROC_WINDOW_ASK
 * and seconds, e.g. "ezmsg-c window 2"; 3.9's processes ignore the payload), or 0. */
static double window_asked(const ezi_m39_control_request *req) {
  size_t k = strlen(EZI_PROC_WINDOW_ASK);
  if (!req->payload.has || req->payload.len <= k || req->payload.len > k + 31 ||
      memcmp(req->payload.p, EZI_PROC_WINDOW_ASK, k))
    return 0;
  char num[32];
  memcpy(num, req->payload.p + k, req->payload.len - k);
  num[req->payload.len - k] = 0;
  char *end;
  double v = strtod(num, &end);
  return *end || !(v >= 0.1 && v <= EZ_PROFILE_MAX_WINDOW_S) ? 0 : v;
}

static int answer(ezi_proc *p, const ezi_m39_control_request *req, uint8_t **out, size_t *len) {
  ezi_m39_control_response r = {
      .request_id = req->request_id, .ok = true, .error_code = EZI_M39_NONE};
  r.process_id.has = true;
  memcpy(r.process_id.s, p->id, 37);
  uint8_t *pl = NULL;
  size_t npl = 0;
  int rc = 0;
  const char *op = req->operation;
  if (!strcmp(op, "PING")) {
    ezi_m39_ping ping = {
        .process_id = r.process_id, .pid = p->ctx->pid, .host = p->host, .timestamp = wall_now()};
    rc = ezi_m39_dump(&EZI_M39_PROCESS_PING, &ping, &pl, &npl, NULL);
  } else if (!strcmp(op, "GET_PROCESS_STATS")) {
    const char *units[1] = {p->unit};
    ezi_m39_stats st = {.process_id = r.process_id,
                        .pid = p->ctx->pid,
                        .host = p->host,
                        .owned_units = {.has = true, .n = 1, .v = units},
                        .timestamp = wall_now()};
    rc = ezi_m39_dump(&EZI_M39_PROCESS_STATS, &st, &pl, &npl, NULL);
  } else if (!strcmp(op, "GET_PROFILING_SNAPSHOT")) {
    rc = snapshot(p, window_asked(req), &pl, &npl);
  } else if (!strcmp(op, "SET_PROFILING_TRACE")) {
    ezi_pk_doc *d = NULL;
    ezi_m39_trace_control tc;
    if (!req->payload.has || ezi_m39_load(&EZI_M39_PROFILING_TRACE_CONTROL, req->payload.p,
                                          req->payload.len, &d, &tc, NULL)) {
      r.ok = false;
      r.error = "Invalid or missing profiling trace control payload";
      r.error_code = EZI_M39_ERR_INVALID_RESPONSE; /* (what 3.9.0's processes answer) */
    } else {
      ezi_tracectl_set(p->ctx, &tc);
      push_arm(p);
    }
    ezi_pk_doc_free(d);
  } else if (!strcmp(op, "GET_PROFILING_TRACE_BATCH")) {
    int64_t max = 1000;
    if (req->payload.has) {
      ezi_pk_doc *d = NULL;
      const ezi_pk *root;
      int64_t v;
      if (!ezi_pk_load(req->payload.p, req->payload.len, NULL, &d, &root, NULL) &&
          !ezi_pk_int_of(root, &v))
        max = v < 1 ? 1 : v;
      ezi_pk_doc_free(d);
    }
    rc = trace_batch(p, (size_t)(max > PUSH_MAX ? PUSH_MAX : max), &pl, &npl, NULL);
  } else {
    r.ok = false;
    r.error = "unsupported by this ezmsg-c process";
    r.error_code = EZI_M39_ERR_UNSUPPORTED_OPERATION;
  }
  if (rc) {
    r.ok = false;
    r.error = ez_strerror(rc);
    r.error_code = EZI_M39_ERR_HANDLER_ERROR;
  } else if (pl) {
    r.payload = (ezi_m39_bytes){.has = true, .p = pl, .len = npl};
  }
  rc = ezi_m39_dump(&EZI_M39_PROCESS_CONTROL_RESPONSE, &r, out, len, NULL);
  free(pl);
  return rc;
}

/* ---- traces --------------------------------------------------------------------------------- */

/* A ProcessProfilingTraceBatch of up to max of the process's samples, pickled (*taken, may be
 * NULL: how many it holds). */
static int trace_batch(ezi_proc *p, size_t max, uint8_t **out, size_t *len, size_t *taken) {
  ezi_m39_trace_batch b = {.pid = p->ctx->pid, .host = p->host, .timestamp = (double)ezi_now_ns()};
  b.process_id.has = true;
  memcpy(b.process_id.s, p->id, 37);
  b.samples = malloc((max ? max : 1) * sizeof *b.samples);
  if (!b.samples) return EZ_ENOMEM;
  b.n_samples = ezi_tracectl_take(p->ctx, b.samples, max);
  if (taken) *taken = b.n_samples;
  int rc = ezi_m39_dump(&EZI_M39_PROCESS_PROFILING_TRACE_BATCH, &b, out, len, NULL);
  free(b.samples);
  return rc;
}

/* While traced, samples go to the server every PUSH_NS (PROCESS_PROFILING_TRACE_UPDATE, at most
 * PUSH_MAX a batch), as 3.9.0's processes push them: its trace streams read them there. */
static void push(void *arg) {
  ezi_proc *p = arg;
  p->push_timer = 0;
  if (p->w.fd < 0 || p->state != P_READY) return;
  uint8_t *pk = NULL;
  size_t n = 0, taken = 0;
  /* (an empty batch is not sent: 3.9 sends only batches with samples) */
  if (trace_batch(p, PUSH_MAX, &pk, &n, &taken) == 0 && taken)
    send_payload(p, EZI_PROCESS_PROFILING_TRACE_UPDATE, pk, n);
  free(pk);
  push_arm(p);
}

static void push_arm(ezi_proc *p) {
  if (!p->push_timer && ezi_tracectl_active(p->ctx))
    p->push_timer = ezi_loop_timer(p->ctx->loop, ezi_now_ns() + PUSH_NS, push, p);
}

/* ---- the link ------------------------------------------------------------------------------- */

static void on_request(ezi_proc *p, const uint8_t *pk, size_t n) {
  ezi_pk_doc *d = NULL;
  ezi_m39_control_request req;
  ezi_pk_err err;
  if (ezi_m39_load(&EZI_M39_PROCESS_CONTROL_REQUEST, pk, n, &d, &req, &err)) {
    EZI_WARN("process link: a route request we cannot read (%s); ignored", err.msg);
    ezi_pk_doc_free(d);
    return;
  }
  uint8_t *out = NULL;
  size_t len = 0;
  if (answer(p, &req, &out, &len) == 0) send_payload(p, EZI_PROCESS_ROUTE_RESPONSE, out, len);
  free(out);
  ezi_pk_doc_free(d);
}

static void send_register(ezi_proc *p) {
  const char *units[1] = {p->unit};
  ezi_m39_process_registration reg = {
      .pid = p->ctx->pid, .host = p->host, .units = {.has = true, .n = 1, .v = units}};
  uint8_t *pk = NULL;
  size_t n = 0;
  if (ezi_m39_dump(&EZI_M39_PROCESS_REGISTRATION, &reg, &pk, &n, NULL)) return fail(p, "no memory");
  send_payload(p, EZI_PROCESS_REGISTER, pk, n);
  free(pk);
}

/* Parses what the server sent: bytes used, 0 for more, -1 if the link was closed. */
static long parse(ezi_proc *p) {
  ezi_rd r;
  ezi_rd_init(&r, ezi_buf_head(&p->in), ezi_buf_pending(&p->in), IN_MAX);
  const char *s = NULL;
  size_t n = 0;
  uint8_t cmd = 0;
  uint64_t len = 0;
  switch (p->state) {
  case P_GREETING:
    if (!ezi_rd_str(&r, &s, &n)) break;
    p->state = P_ID;
    return (long)r.pos;
  case P_ID:
    if (!ezi_rd_str(&r, &s, &n) || !ezi_rd_u8(&r, &cmd)) break;
    if (!ezi_is_uuid(s, n) || cmd != EZI_COMPLETE) return fail(p, "a bad answer to PROCESS"), -1;
    memcpy(p->id, s, 36);
    p->id[36] = 0;
    p->state = P_REGISTERING;
    send_register(p);
    return (long)r.pos;
  case P_REGISTERING:
    if (!ezi_rd_u8(&r, &cmd)) break;
    if (cmd != EZI_COMPLETE) return fail(p, "the graph server refused its registration"), -1;
    p->state = P_READY;
    EZI_DEBUG("process link: registered as %s (unit %s)", p->id, p->unit);
    return (long)r.pos;
  default: /* P_READY */
    if (!ezi_rd_u8(&r, &cmd)) break;
    if (cmd == EZI_COMPLETE || cmd == EZI_ERROR) return (long)r.pos; /* (nothing asked for) */
    if (cmd != EZI_PROCESS_ROUTE_REQUEST) return fail(p, "an unknown command"), -1;
    if (!ezi_rd_u64(&r, &len)) break;
    if (len > IN_MAX) return fail(p, "a route request too large"), -1;
    if (!ezi_rd_skip(&r, (size_t)len)) break;
    on_request(p, r.p + 9, (size_t)len);
    return p->w.fd < 0 ? -1 : (long)r.pos;
  }
  if (r.err) return fail(p, "a string too long"), -1;
  return 0;
}

static void on_io(ezi_watch *w, uint32_t ev) {
  ezi_proc *p = w->arg;
  if (p->state == P_CONNECTING) {
    if (!(ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
    int err = 0;
    socklen_t el = sizeof err;
    if (getsockopt(w->fd, SOL_SOCKET, SO_ERROR, &err, &el) || err)
      return fail(p, "cannot connect to the graph server");
    p->state = P_GREETING;
    ezi_outbox_set_events(&p->out, EPOLLIN | EPOLLRDHUP);
    uint8_t cmd = EZI_PROCESS;
    ezi_outbox_put(p->ctx, &p->out, &cmd, 1);
    return;
  }
  if ((ev & EPOLLOUT) && ezi_outbox_flush(&p->out)) return fail(p, "the graph server went away");
  if (!(ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))) return;
  long n;
  while ((n = ezi_buf_fill(&p->in, w->fd, IN_MAX + 64)) > 0) {
    for (;;) {
      long used = parse(p);
      if (used < 0) return;
      if (used == 0) break;
      ezi_buf_consume(&p->in, (size_t)used);
    }
  }
  if (n < 0) fail(p, "the graph server went away");
}

int ezi_proc_start(ez_context *ctx) {
  const char *e = getenv("EZMSG_REGISTER_PROCESS");
  if (!ctx->server_peer.sessions || (e && !strcmp(e, "0"))) return 0;
  ezi_proc *p = calloc(1, sizeof *p);
  if (!p) return EZ_ENOMEM;
  p->ctx = ctx;
  p->w.fd = -1;
  if (gethostname(p->host, sizeof p->host - 1)) snprintf(p->host, sizeof p->host, "%s", ctx->host);
  p->slot = slot_take();
  if (p->slot == 0)
    snprintf(p->unit, sizeof p->unit, EZI_PROC_UNIT_PREFIX "%s/%d", p->host, ctx->pid);
  else
    snprintf(p->unit, sizeof p->unit, EZI_PROC_UNIT_PREFIX "%s/%d/%u", p->host, ctx->pid,
             p->slot + 1);
  char host[256];
  uint16_t port;
  bool done = false;
  int fd = ezi_addr_parse(ctx->server_addr, host, &port) ? EZ_EADDR
                                                         : ezi_tcp_connect_start(host, port, &done);
  if (fd < 0) {
    EZI_INFO("process link: cannot connect to the graph server: %s", ez_strerror(fd));
    slot_give(p->slot);
    free(p);
    return 0;
  }
  p->w = (ezi_watch){.fd = fd, .fn = on_io, .arg = p};
  ezi_outbox_init(&p->out, &p->w, EPOLLOUT | EPOLLIN | EPOLLRDHUP);
  if (ezi_loop_add(ctx->loop, &p->w, EPOLLOUT | EPOLLIN | EPOLLRDHUP)) {
    close(fd);
    slot_give(p->slot);
    free(p);
    return 0;
  }
  ctx->proc = p;
  return 0;
}

void ezi_proc_stop(ez_context *ctx) {
  ezi_proc *p = ctx->proc;
  if (!p) return;
  if (p->push_timer) ezi_loop_cancel(ctx->loop, p->push_timer);
  close_link(p);
  slot_give(p->slot);
  free(p->last);
  free(p);
  ctx->proc = NULL;
}
