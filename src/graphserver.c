/* The graph server: one thread, one event loop, every client a state machine over its connection.
 *
 * Nothing here ever waits on one client while the rest wait: requests that need answers from other
 * clients (UPDATE -> COMPLETE from subscribers, SYNC -> COMPLETE and PROFILE -> PROFILE_DATA from
 * publishers and channels) become an `op` that counts the answers still due and finishes when the
 * last arrives, its client leaves, or its timer fires. Each client keeps a FIFO of the ops it owes
 * an answer to, one FIFO per kind of answer, since clients answer each kind in order. */
#include "dag.h"
#include "gsparse.h"
#include "gsregistry.h"
#include "internal.h"
#include "loop.h"
#include "shm.h"
#include "wire.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define IN_LIMIT (2 * (size_t)EZ_MAX_CONTROL_STR + 64) /* the largest request: two strings */
#define OUT_LIMIT ((size_t)16 << 20) /* a client that lets more pile up is dropped */
#define MAX_CONNS 4096               /* default client limit */
#define MAX_SEGMENTS 4096
#define PROFILE_TIMEOUT_NS 1000000000ull
#define UPDATE_TIMEOUT_NS 30000000000ull
#define LINGER_NS 2000000000ull

typedef enum {
  C_NEW,      /* version sent, waiting for a command */
  C_PUB_ADDR, /* PUBLISH answered with an id; waiting for the channel server address */
  C_PUB,      /* registered publisher */
  C_SUB,      /* registered subscriber */
  C_CHAN,     /* registered channel */
  C_LEASE,    /* holds a shared-memory segment until it closes */
  C_WAIT,     /* a one-shot request waiting for its op */
  C_CLOSING,  /* answer sent (or being sent); waiting for the peer to hang up */
} cstate;

typedef struct ez_server server;
typedef struct op op;
typedef struct conn conn;

typedef struct waiter {
  op *op;
  size_t slot;
} waiter;

typedef struct wqueue { /* FIFO ring of waiters */
  waiter *w;
  size_t head, n, cap;
} wqueue;

typedef enum { OP_SUBSCRIBE, OP_PUBLISH, OP_EDGE, OP_SYNC, OP_PROFILE, OP_NOTIFY } opkind;

struct op {
  opkind kind;
  int refs;
  size_t remaining;
  bool done;
  conn *req; /* who gets the answer (NULL: none, or it left) */
  uint64_t timer;
  server *srv;
  /* OP_PROFILE */
  uint64_t window_ms;
  size_t n_results;
  json_t **results;
  bool *is_channel;
};

typedef struct segment {
  char name[64];
  int hold_fd; /* keeps the name ours while we live (ezi_shm_sweep) */
  int leases;
  struct segment *next;
} segment;

struct conn {
  ezi_watch w;
  server *srv;
  cstate st;
  ezi_buf in, out;
  size_t need; /* don't re-parse until this many bytes are buffered */
  bool shut_wr;
  char id[37];     /* publisher / subscriber / channel id */
  char *topic;     /* publisher / subscriber topic */
  char peer[64];   /* publisher: host its graph connection came from */
  uint16_t port;   /* publisher: its channel server port */
  char pub_id[37]; /* channel: its publisher */
  int64_t pid;     /* subscriber: from X_SUB_INFO (0: unknown) */
  char *handle;    /* subscriber: from X_SUB_INFO */
  segment *lease;  /* C_LEASE */
  wqueue complete_q, profile_q;
  op *req_op; /* the op this connection waits on as a requester */
  uint64_t linger_timer;
  bool dead; /* closed; freed once the current callback is over */
  conn *prev, *next;
};

struct ez_server {
  ezi_loop *loop;
  ezi_watch listen;
  conn *conns;
  size_t n_conns;
  size_t max_conns; /* client limit */
  ezi_dag *dag;
  segment *segs;
  size_t n_segs;
  conn *graveyard; /* closed connections waiting to be freed */
  uint64_t reap_timer;
  char address[300];
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stopped;
};

static void conn_close(conn *c);
static void conn_send(conn *c, const ezi_buf *b);
static void conn_finish(conn *c);

/* ---- waiter queues ------------------------------------------------------------------------- */

static int wq_push(wqueue *q, op *o, size_t slot) {
  if (q->n == q->cap) {
    size_t cap = q->cap ? q->cap * 2 : 4;
    waiter *w = malloc(cap * sizeof *w);
    if (!w) return EZ_ENOMEM;
    for (size_t i = 0; i < q->n; i++)
      w[i] = q->w[(q->head + i) % q->cap];
    free(q->w);
    q->w = w;
    q->cap = cap;
    q->head = 0;
  }
  q->w[(q->head + q->n++) % q->cap] = (waiter){o, slot};
  o->refs++;
  return 0;
}

static bool wq_pop(wqueue *q, waiter *out) {
  if (!q->n) return false;
  *out = q->w[q->head];
  q->head = (q->head + 1) % q->cap;
  q->n--;
  return true;
}

/* ---- ops ----------------------------------------------------------------------------------- */

static void op_unref(op *o) {
  if (--o->refs > 0) return;
  for (size_t i = 0; i < o->n_results; i++)
    json_decref(o->results[i]);
  free(o->results);
  free(o->is_channel);
  free(o);
}

static op *op_new(server *s, opkind kind, conn *req) {
  op *o = calloc(1, sizeof *o);
  if (!o) return NULL;
  o->kind = kind;
  o->refs = 1; /* held until the op finishes */
  o->srv = s;
  o->req = req;
  if (req) req->req_op = o;
  return o;
}

/* Ours: every registered publisher and subscriber, as "registry" (gsregistry.h). */
static void registry_add(server *s, json_t *doc) {
  ezi_gs_client *v = calloc(s->n_conns ? s->n_conns : 1, sizeof *v);
  size_t n = 0;
  for (conn *c = s->conns; v && c && n < s->n_conns; c = c->next)
    if (c->st == C_PUB || c->st == C_SUB)
      v[n++] =
          (ezi_gs_client){c->st == C_PUB, c->id, c->topic, c->peer, c->port, c->pid, c->handle};
  json_t *reg = v ? ezi_gs_registry_json(v, n) : NULL;
  if (reg) json_object_set_new(doc, "registry", reg);
  free(v);
}

static void reply_profile(op *o) {
  json_t *doc = json_object(), *pubs = json_array(), *chans = json_array();
  json_object_set_new(doc, "window_s", json_real((double)o->window_ms / 1000.0));
  for (size_t i = 0; i < o->n_results; i++) {
    if (!o->results[i]) continue;
    json_array_append(o->is_channel[i] ? chans : pubs, o->results[i]);
  }
  json_object_set_new(doc, "publishers", pubs);
  json_object_set_new(doc, "channels", chans);
  registry_add(o->srv, doc);
  char *text = json_dumps(doc, JSON_COMPACT);
  json_decref(doc);
  ezi_buf b = {0};
  ezi_buf_put_u8(&b, EZI_PROFILE_DATA);
  ezi_buf_put_cstr(&b, text ? text : "{}");
  ezi_buf_put_u8(&b, EZI_COMPLETE);
  free(text);
  conn_send(o->req, &b);
  ezi_buf_free(&b);
  conn_finish(o->req);
}

static void op_finish(op *o) {
  if (o->done) return;
  o->done = true;
  if (o->timer) ezi_loop_cancel(o->srv->loop, o->timer);
  o->timer = 0;
  conn *r = o->req;
  if (r) {
    r->req_op = NULL;
    uint8_t complete = EZI_COMPLETE;
    ezi_buf b = {.data = &complete, .len = 1, .cap = 1};
    switch (o->kind) {
    case OP_SUBSCRIBE:
    case OP_PUBLISH: conn_send(r, &b); break;
    case OP_EDGE:
    case OP_SYNC:
      conn_send(r, &b);
      conn_finish(r);
      break;
    case OP_PROFILE: reply_profile(o); break;
    case OP_NOTIFY: break;
    }
  }
  o->req = NULL;
  op_unref(o);
}

static void op_timeout(void *arg) {
  op *o = arg;
  o->timer = 0;
  if (o->kind != OP_PROFILE)
    EZI_WARN("graph server: gave up waiting for %zu client answer(s)", o->remaining);
  op_finish(o);
}

/* One expected answer arrived (or its client left). */
static void op_answer(op *o) {
  if (o->remaining > 0) o->remaining--;
  if (o->remaining == 0) op_finish(o);
}

/* Called once every request of the op is sent: finishes at once if nothing is due. */
static void op_launch(op *o, uint64_t timeout_ns) {
  if (o->remaining == 0) {
    op_finish(o);
    return;
  }
  if (timeout_ns) o->timer = ezi_loop_timer(o->srv->loop, ezi_now_ns() + timeout_ns, op_timeout, o);
}

/* ---- topology ------------------------------------------------------------------------------ */

/* Sends UPDATE to subscriber `sub` listing every publisher upstream of its topic; o waits for it.
 */
static void notify_subscriber(server *s, conn *sub, op *o) {
  ezi_buf ids = {0}, b = {0};
  for (conn *p = s->conns; p; p = p->next) {
    if (p->st != C_PUB || !ezi_dag_reaches(s->dag, p->topic, sub->topic)) continue;
    if (ids.len) ezi_buf_put_u8(&ids, ',');
    ezi_buf_put(&ids, p->id, 36);
  }
  ezi_buf_put_u8(&b, EZI_UPDATE);
  ezi_buf_put_str(&b, ids.len ? (const char *)ids.data : "", ids.len);
  ezi_buf_free(&ids);
  if (o && wq_push(&sub->complete_q, o, 0) == 0) o->remaining++;
  conn_send(sub, &b);
  ezi_buf_free(&b);
}

/* UPDATE to every subscriber downstream of `topic`. */
static void notify_downstream(server *s, const char *topic, op *o) {
  for (conn *c = s->conns, *n; c; c = n) {
    n = c->next;
    if (c->st == C_SUB && ezi_dag_reaches(s->dag, topic, c->topic)) notify_subscriber(s, c, o);
  }
}

static conn *find_client(server *s, const char *id, size_t n, cstate st) {
  if (n != 36) return NULL;
  for (conn *c = s->conns; c; c = c->next)
    if (c->st == st && memcmp(c->id, id, 36) == 0) return c;
  return NULL;
}

/* ---- segments ------------------------------------------------------------------------------ */

static void seg_release(server *s, segment *g) {
  if (--g->leases > 0) return;
  ezi_shm_unlink(g->name);
  close(g->hold_fd); /* after the unlink: a sweep never finds the name unheld */
  EZI_DEBUG("graph server: unlinked %s", g->name);
  for (segment **p = &s->segs; *p; p = &(*p)->next) {
    if (*p == g) {
      *p = g->next;
      break;
    }
  }
  s->n_segs--;
  free(g);
}

static segment *seg_find(server *s, const char *name, size_t n) {
  for (segment *g = s->segs; g; g = g->next)
    if (strlen(g->name) == n && memcmp(g->name, name, n) == 0) return g;
  return NULL;
}

/* ---- connection I/O ------------------------------------------------------------------------ */

static void update_events(conn *c) {
  uint32_t ev = EPOLLIN | EPOLLRDHUP;
  if (ezi_buf_pending(&c->out)) ev |= EPOLLOUT;
  ezi_loop_mod(&c->w, ev);
}

static void try_shutdown(conn *c) {
  if (c->st == C_CLOSING && !c->shut_wr && !ezi_buf_pending(&c->out)) {
    shutdown(c->w.fd, SHUT_WR);
    c->shut_wr = true;
  }
}

/* Queues bytes to a client and writes what the socket takes now. A client past OUT_LIMIT is
 * dropped (closed on the next loop turn, so callers iterating clients stay safe). */
static void conn_send(conn *c, const ezi_buf *b) {
  if (c->dead || (c->st == C_CLOSING && c->shut_wr)) return;
  if (ezi_buf_pending(&c->out) + ezi_buf_pending(b) > OUT_LIMIT ||
      ezi_buf_put(&c->out, ezi_buf_head(b), ezi_buf_pending(b))) {
    EZI_WARN("graph server: client %s does not read its answers; dropping it",
             c->id[0] ? c->id : "?");
    shutdown(c->w.fd, SHUT_RDWR); /* EPOLLHUP closes it from the loop */
    return;
  }
  if (ezi_buf_flush(&c->out, c->w.fd)) {
    shutdown(c->w.fd, SHUT_RDWR);
    return;
  }
  try_shutdown(c);
  update_events(c);
}

static void linger_timeout(void *arg) {
  conn *c = arg;
  c->linger_timer = 0;
  conn_close(c);
}

/* The one-shot request is answered: hang up once the answer is out and the peer has closed. */
static void conn_finish(conn *c) {
  c->st = C_CLOSING;
  try_shutdown(c);
  if (!c->linger_timer)
    c->linger_timer = ezi_loop_timer(c->srv->loop, ezi_now_ns() + LINGER_NS, linger_timeout, c);
}

static void drain_waiters(conn *c) {
  waiter w;
  while (wq_pop(&c->complete_q, &w)) {
    if (!w.op->done) op_answer(w.op);
    op_unref(w.op);
  }
  while (wq_pop(&c->profile_q, &w)) {
    if (!w.op->done) op_answer(w.op);
    op_unref(w.op);
  }
  free(c->complete_q.w);
  free(c->profile_q.w);
  c->complete_q = c->profile_q = (wqueue){0};
}

static void reap(void *arg) {
  server *s = arg;
  s->reap_timer = 0;
  while (s->graveyard) {
    conn *c = s->graveyard;
    s->graveyard = c->next;
    free(c->topic);
    free(c->handle);
    ezi_buf_free(&c->in);
    ezi_buf_free(&c->out);
    free(c);
  }
}

/* Closes a connection and unregisters its client. The struct stays readable (c->dead) until the
 * current callback returns, so callers up the stack may still look at it. */
static void conn_close(conn *c) {
  server *s = c->srv;
  if (c->dead) return;
  c->dead = true;
  cstate was = c->st;
  ezi_loop_del(&c->w);
  close(c->w.fd);
  if (c->linger_timer) ezi_loop_cancel(s->loop, c->linger_timer);
  if (c->req_op) c->req_op->req = NULL;
  if (c->prev)
    c->prev->next = c->next;
  else
    s->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  s->n_conns--;
  drain_waiters(c);
  if (c->lease) seg_release(s, c->lease);
  if (was == C_PUB) {
    /* Beyond the reference: tell the subscribers downstream that this publisher is gone. */
    op *o = op_new(s, OP_NOTIFY, NULL);
    if (o) {
      notify_downstream(s, c->topic, o);
      op_launch(o, UPDATE_TIMEOUT_NS);
    }
  }
  if (was == C_PUB || was == C_SUB || was == C_CHAN)
    EZI_DEBUG("graph server: client %s left", c->id);
  c->next = s->graveyard;
  s->graveyard = c;
  if (!s->reap_timer) s->reap_timer = ezi_loop_timer(s->loop, 0, reap, s);
}

static void protocol_error(conn *c, const char *what) {
  char peer[64];
  ezi_sock_peer_host(c->w.fd, peer);
  EZI_WARN("graph server: protocol error from %s (%s); closing that connection", peer, what);
  conn_close(c);
}

/* ---- requests ------------------------------------------------------------------------------ */

static void handle_profile(server *s, conn *c, uint64_t window_ms) {
  op *o = op_new(s, OP_PROFILE, c);
  if (!o) return conn_close(c);
  o->window_ms = window_ms;
  size_t n = 0;
  for (conn *k = s->conns; k; k = k->next)
    n += k->st == C_PUB || k->st == C_CHAN;
  o->results = calloc(n ? n : 1, sizeof *o->results);
  o->is_channel = calloc(n ? n : 1, sizeof *o->is_channel);
  if (!o->results || !o->is_channel) {
    c->req_op = NULL;
    o->req = NULL;
    op_finish(o);
    return conn_close(c);
  }
  o->n_results = n;
  c->st = C_WAIT;
  ezi_buf b = {0};
  ezi_buf_put_u8(&b, EZI_PROFILE);
  ezi_buf_put_u64(&b, window_ms);
  size_t slot = 0;
  for (conn *k = s->conns; k && slot < n; k = k->next) {
    if (k->st != C_PUB && k->st != C_CHAN) continue;
    o->is_channel[slot] = k->st == C_CHAN;
    if (wq_push(&k->profile_q, o, slot) == 0) {
      o->remaining++;
      conn_send(k, &b);
    }
    slot++;
  }
  ezi_buf_free(&b);
  op_launch(o, PROFILE_TIMEOUT_NS);
}

static void on_profile_data(server *s, conn *c, const char *json, size_t n) {
  waiter w;
  if (!wq_pop(&c->profile_q, &w)) return; /* unsolicited: ignore */
  op *o = w.op;
  if (!o->done) {
    json_error_t err;
    json_t *doc = json_loadb(json, n, 0, &err);
    const char *want = o->is_channel[w.slot] ? "channel" : "publisher";
    json_t *type = doc ? json_object_get(doc, "type") : NULL;
    if (doc && json_is_object(doc) && json_is_string(type) &&
        !strcmp(json_string_value(type), want)) {
      if (o->is_channel[w.slot] && !json_object_get(doc, "topic")) {
        json_t *pid = json_object_get(doc, "pub_id");
        const char *ps = json_is_string(pid) ? json_string_value(pid) : "";
        conn *pub = find_client(s, ps, strlen(ps), C_PUB);
        if (pub) json_object_set_new(doc, "topic", json_string(pub->topic));
      }
      o->results[w.slot] = doc;
    } else {
      json_decref(doc);
      EZI_WARN("graph server: client %s sent an unusable profile", c->id);
    }
    op_answer(o);
  }
  op_unref(o);
}

static void handle_register(server *s, conn *c, uint8_t cmd, const char *topic, size_t n) {
  if (!ezi_utf8_valid(topic, n) || memchr(topic, 0, n))
    return protocol_error(c, "topic is not valid UTF-8");
  c->topic = ezi_strndup(topic, n);
  if (!c->topic) return conn_close(c);
  ezi_uuid(c->id);
  ezi_buf b = {0};
  ezi_buf_put_str(&b, c->id, 36);
  conn_send(c, &b);
  ezi_buf_free(&b);
  if (cmd == EZI_PUBLISH) {
    c->st = C_PUB_ADDR;
    return;
  }
  c->st = C_SUB;
  ezi_sock_peer_host(c->w.fd, c->peer);
  op *o = op_new(s, OP_SUBSCRIBE, c);
  if (!o) return conn_close(c);
  notify_subscriber(s, c, o);
  op_launch(o, UPDATE_TIMEOUT_NS);
}

static void handle_pub_address(server *s, conn *c, const char *addr, size_t n) {
  char buf[300], host[256];
  uint16_t port;
  if (n >= sizeof buf) return protocol_error(c, "publisher address too long");
  memcpy(buf, addr, n);
  buf[n] = 0;
  if (ezi_addr_parse(buf, host, &port)) return protocol_error(c, "bad publisher address");
  c->port = port;
  ezi_sock_peer_host(c->w.fd, c->peer);
  c->st = C_PUB;
  op *o = op_new(s, OP_PUBLISH, c);
  if (!o) return conn_close(c);
  notify_downstream(s, c->topic, o);
  op_launch(o, UPDATE_TIMEOUT_NS);
}

static void handle_channel(server *s, conn *c, const char *pub_id, size_t n) {
  conn *pub = find_client(s, pub_id, n, C_PUB);
  if (!pub) {
    EZI_INFO("graph server: CHANNEL for unknown publisher %.*s", (int)(n > 40 ? 40 : n), pub_id);
    return conn_close(c);
  }
  ezi_uuid(c->id);
  memcpy(c->pub_id, pub->id, 37);
  char addr[128];
  snprintf(addr, sizeof addr, "%s:%u", pub->peer, pub->port);
  ezi_buf b = {0};
  ezi_buf_put_u8(&b, EZI_COMPLETE);
  ezi_buf_put_str(&b, c->id, 36);
  ezi_buf_put_cstr(&b, addr);
  c->st = C_CHAN;
  conn_send(c, &b);
  ezi_buf_free(&b);
}

static void handle_shm(server *s, conn *c, uint8_t cmd, uint64_t nbuf, uint64_t size,
                       const char *name, size_t n) {
  segment *g = NULL;
  if (cmd == EZI_SHM_CREATE) {
    ezi_shm shm;
    int hold = -1;
    int rc = s->n_segs >= MAX_SEGMENTS ? EZ_EMSGSIZE : ezi_shm_create(nbuf, size, &shm, &hold);
    if (rc) {
      EZI_WARN("graph server: cannot create segment (%llu x %llu): %s", (unsigned long long)nbuf,
               (unsigned long long)size, ez_strerror(rc));
      return conn_close(c);
    }
    g = calloc(1, sizeof *g);
    if (!g) {
      ezi_shm_unlink(shm.name);
      ezi_shm_detach(&shm);
      close(hold);
      return conn_close(c);
    }
    snprintf(g->name, sizeof g->name, "%s", shm.name);
    g->hold_fd = hold;
    ezi_shm_detach(&shm); /* the server only names it; clients map it */
    g->next = s->segs;
    s->segs = g;
    s->n_segs++;
  } else {
    g = seg_find(s, name, n);
    if (!g) {
      EZI_INFO("graph server: SHM_ATTACH of unknown segment");
      return conn_close(c);
    }
  }
  g->leases++;
  c->lease = g;
  c->st = C_LEASE;
  ezi_buf b = {0};
  ezi_buf_put_u8(&b, EZI_COMPLETE);
  ezi_buf_put_cstr(&b, g->name);
  conn_send(c, &b);
  ezi_buf_free(&b);
}

static void handle_edge(server *s, conn *c, uint8_t cmd, const char *from, size_t nf,
                        const char *to, size_t nt) {
  /* Topics go into the DAG pickle, which Python must be able to load: UTF-8 only. */
  if (!ezi_utf8_valid(from, nf) || !ezi_utf8_valid(to, nt) || memchr(from, 0, nf) ||
      memchr(to, 0, nt))
    return protocol_error(c, "topic is not valid UTF-8");
  char *f = ezi_strndup(from, nf), *t = ezi_strndup(to, nt);
  int rc = !f || !t             ? EZ_ENOMEM
           : cmd == EZI_CONNECT ? ezi_dag_add_edge(s->dag, f, t)
                                : ezi_dag_remove_edge(s->dag, f, t);
  if (rc == EZ_ECYCLIC) {
    uint8_t cy = EZI_CYCLIC;
    ezi_buf b = {.data = &cy, .len = 1, .cap = 1};
    conn_send(c, &b);
    conn_finish(c);
  } else if (rc) {
    conn_close(c);
  } else {
    op *o = op_new(s, OP_EDGE, c);
    if (!o) {
      conn_close(c);
    } else {
      c->st = C_WAIT;
      notify_downstream(s, t, o);
      op_launch(o, UPDATE_TIMEOUT_NS);
    }
  }
  free(f);
  free(t);
}

static void handle_dag(server *s, conn *c) {
  uint8_t *pk = NULL;
  size_t n = 0;
  if (ezi_dag_pickle(s->dag, &pk, &n)) return conn_close(c);
  ezi_buf b = {0};
  ezi_buf_put_u8(&b, EZI_DAG);
  ezi_buf_put_u64(&b, n);
  ezi_buf_put(&b, pk, n);
  ezi_buf_put_u8(&b, EZI_COMPLETE);
  free(pk);
  conn_send(c, &b);
  ezi_buf_free(&b);
  conn_finish(c);
}

static void broadcast_pubs(server *s, uint8_t cmd, op *o) {
  ezi_buf b = {.data = &cmd, .len = 1, .cap = 1};
  for (conn *p = s->conns, *n; p; p = n) {
    n = p->next;
    if (p->st != C_PUB) continue;
    if (o) {
      if (wq_push(&p->complete_q, o, 0)) continue;
      o->remaining++;
    }
    conn_send(p, &b);
  }
}

/* Parses one frame from c->in. Returns bytes consumed (> 0), 0 if more bytes are needed, or -1 if
 * the connection was closed. */
static long parse_one(server *s, conn *c) {
  if (c->st == C_LEASE || c->st == C_WAIT || c->st == C_CLOSING)
    return (long)ezi_buf_pending(&c->in); /* nothing more is expected: discard */
  ezi_gs_phase phase = c->st == C_PUB_ADDR                                   ? EZI_GS_PUB_ADDR
                       : c->st == C_PUB || c->st == C_SUB || c->st == C_CHAN ? EZI_GS_CLIENT
                                                                             : EZI_GS_COMMAND;
  ezi_gs_req q;
  int st = ezi_gs_parse(phase, ezi_buf_head(&c->in), ezi_buf_pending(&c->in), &q);
  if (st < 0) {
    protocol_error(c, "string beyond the 1 MiB limit");
    return -1;
  }
  if (st == 0) {
    c->need = q.need;
    return 0;
  }
  c->need = 0;
  long used = (long)q.used;
  uint8_t cmd = q.cmd;
  const char *a = q.a, *b = q.b;
  size_t na = q.na, nb = q.nb;
  uint64_t u1 = q.u1, u2 = q.u2;

  switch (c->st) {
  case C_PUB_ADDR: handle_pub_address(s, c, a, na); return c->dead ? -1 : used;
  case C_PUB:
  case C_SUB:
  case C_CHAN:
    if (cmd == EZI_COMPLETE) {
      waiter w;
      if (wq_pop(&c->complete_q, &w)) {
        if (!w.op->done) op_answer(w.op);
        op_unref(w.op);
      }
    } else if (cmd == EZI_PROFILE_DATA) {
      on_profile_data(s, c, a, na);
    } else if (cmd == EZI_X_SUB_INFO && c->st == C_SUB) {
      if (!ezi_subinfo_decode(a, na, &c->pid, &c->handle)) EZI_INFO("graph server: bad X_SUB_INFO");
    } else {
      protocol_error(c, "unexpected command from a client");
      return -1;
    }
    return c->dead ? -1 : used;
  default: break;
  }

  switch (cmd) { /* C_NEW */
  case EZI_SHUTDOWN:
    EZI_INFO("graph server: shutdown requested");
    ezi_loop_stop(s->loop);
    conn_finish(c);
    break;
  case EZI_PUBLISH:
  case EZI_SUBSCRIBE: handle_register(s, c, cmd, a, na); break;
  case EZI_CHANNEL: handle_channel(s, c, a, na); break;
  case EZI_SHM_CREATE:
  case EZI_SHM_ATTACH: handle_shm(s, c, cmd, u1, u2, a, na); break;
  case EZI_CONNECT:
  case EZI_DISCONNECT: handle_edge(s, c, cmd, a, na, b, nb); break;
  case EZI_SYNC: {
    op *o = op_new(s, OP_SYNC, c);
    if (!o) {
      conn_close(c);
      break;
    }
    c->st = C_WAIT;
    broadcast_pubs(s, EZI_SYNC, o);
    op_launch(o, 0);
    break;
  }
  case EZI_PAUSE:
  case EZI_RESUME:
    broadcast_pubs(s, cmd, NULL);
    conn_finish(c);
    break;
  case EZI_DAG: handle_dag(s, c); break;
  case EZI_PROFILE: handle_profile(s, c, u1); break;
  default: {
    char what[64];
    snprintf(what, sizeof what, "unknown command %u", cmd);
    protocol_error(c, what);
    break;
  }
  }
  return c->dead ? -1 : used;
}

static void on_conn(ezi_watch *w, uint32_t ev) {
  conn *c = w->arg;
  server *s = c->srv;
  if (c->dead) return;
  if (ev & EPOLLOUT) {
    if (ezi_buf_flush(&c->out, c->w.fd)) return conn_close(c);
    try_shutdown(c);
    update_events(c);
  }
  if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
    for (;;) {
      long n = ezi_buf_fill(&c->in, c->w.fd, IN_LIMIT);
      if (n < 0) return conn_close(c); /* EOF or error: the client left */
      if (n == 0) break;
      if (c->need > ezi_buf_pending(&c->in)) continue;
      for (;;) {
        long used = parse_one(s, c);
        if (used < 0) return;
        if (used == 0) break;
        ezi_buf_consume(&c->in, (size_t)used);
        if (!ezi_buf_pending(&c->in)) break;
      }
      if (ezi_buf_pending(&c->in) >= IN_LIMIT) return protocol_error(c, "request too large");
    }
    if (ev & (EPOLLHUP | EPOLLERR)) return conn_close(c);
  }
}

static void on_accept(ezi_watch *w, uint32_t ev) {
  server *s = w->arg;
  (void)ev;
  for (;;) {
    int fd = accept4(w->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        EZI_WARN("graph server: accept: %s", strerror(errno));
      return;
    }
    if (s->n_conns >= s->max_conns) {
      EZI_WARN("graph server: %zu clients already (the limit); refusing another", s->max_conns);
      close(fd);
      continue;
    }
    ezi_sock_setup(fd);
    conn *c = calloc(1, sizeof *c);
    if (!c) {
      close(fd);
      continue;
    }
    c->srv = s;
    c->w = (ezi_watch){.fd = fd, .fn = on_conn, .arg = c};
    if (ezi_loop_add(s->loop, &c->w, EPOLLIN | EPOLLRDHUP)) {
      close(fd);
      free(c);
      continue;
    }
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    s->n_conns++;
    ezi_buf b = {0};
    ezi_buf_put_cstr(&b, EZ_VERSION);
    conn_send(c, &b);
    ezi_buf_free(&b);
  }
}

/* ---- lifecycle ----------------------------------------------------------------------------- */

static void *server_thread(void *arg) {
  server *s = arg;
  ezi_loop_run(s->loop);
  /* Registered clients first (their leaving notifies others), then everything else. */
  while (s->conns)
    conn_close(s->conns);
  reap(s);
  while (s->segs) {
    s->segs->leases = 1;
    seg_release(s, s->segs);
  }
  pthread_mutex_lock(&s->mu);
  s->stopped = true;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

int ez_server_start(const char *address, ez_server **out) {
  return ez_server_start_opts(address, NULL, out);
}

int ez_server_start_opts(const char *address, const ez_server_opts *opts, ez_server **out) {
  char addr[300], host[256];
  uint16_t port;
  if (opts && opts->max_clients < 0) return EZ_EINVAL;
  ezi_addr_resolve(address, addr);
  if (!out || ezi_addr_parse(addr, host, &port)) return EZ_EADDR;
  ezi_shm_sweep(EZI_SHM_STALE_S); /* what servers SIGKILLed with their publishers left */
  server *s = calloc(1, sizeof *s);
  if (!s) return EZ_ENOMEM;
  s->max_conns = opts && opts->max_clients ? (size_t)opts->max_clients : MAX_CONNS;
  int rc = ezi_loop_new(&s->loop);
  if (rc) {
    free(s);
    return rc;
  }
  s->dag = ezi_dag_new();
  int fd = ezi_tcp_listen(host, port, 512);
  if (fd < 0 || !s->dag) {
    ezi_dag_free(s->dag);
    ezi_loop_free(s->loop);
    free(s);
    return fd < 0 ? fd : EZ_ENOMEM;
  }
  snprintf(s->address, sizeof s->address, "%s:%u", host, ezi_sock_port(fd));
  s->listen = (ezi_watch){.fd = fd, .fn = on_accept, .arg = s};
  ezi_loop_add(s->loop, &s->listen, EPOLLIN);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  if (pthread_create(&s->thread, NULL, server_thread, s)) {
    ezi_loop_del(&s->listen);
    close(fd);
    ezi_dag_free(s->dag);
    ezi_loop_free(s->loop);
    free(s);
    return EZ_ESYS;
  }
  EZI_INFO("graph server listening on %s", s->address);
  *out = s;
  return 0;
}

const char *ez_server_address(const ez_server *s) { return s ? s->address : NULL; }

int ez_server_wait(ez_server *s, int timeout_ms) {
  uint64_t deadline = ezi_deadline(timeout_ms);
  pthread_mutex_lock(&s->mu);
  while (!s->stopped) {
    int left = ezi_ms_left(deadline);
    if (left == 0) break;
    if (left < 0) {
      pthread_cond_wait(&s->cv, &s->mu);
    } else {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)(left > 100 ? 100 : left) * 1000000u;
      ts.tv_sec += (time_t)(ns / 1000000000u);
      ts.tv_nsec = (long)(ns % 1000000000u);
      pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
  }
  bool stopped = s->stopped;
  pthread_mutex_unlock(&s->mu);
  return stopped ? 0 : EZ_ETIMEDOUT;
}

void ez_server_stop(ez_server *s) {
  if (!s) return;
  ezi_loop_stop(s->loop);
  pthread_join(s->thread, NULL);
  ezi_loop_del(&s->listen);
  close(s->listen.fd);
  ezi_dag_free(s->dag);
  ezi_loop_free(s->loop);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}
