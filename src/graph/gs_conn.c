/* The graph server's connections: their I/O and lifetime, the ops that wait for other clients'
 * answers, and the UPDATEs that tell subscribers of topology changes (gs_conn.h). */
#include "graph/gs_conn.h"
#include "base/strlist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- waiter queues ------------------------------------------------------------------------- */

int ezi_gs_wq_push(wqueue *q, op *o, size_t slot) {
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

const waiter *ezi_gs_wq_peek(const wqueue *q) { return q->n ? &q->w[q->head] : NULL; }

bool ezi_gs_wq_pop(wqueue *q, waiter *out) {
  if (!q->n) return false;
  *out = q->w[q->head];
  q->head = (q->head + 1) % q->cap;
  q->n--;
  return true;
}

/* ---- ops ----------------------------------------------------------------------------------- */

void ezi_gs_op_unref(op *o) {
  if (--o->refs > 0) return;
  ezi_buf_free(&o->pubs);
  ezi_buf_free(&o->chans);
  free(o->slot_kind);
  free(o->parts_left);
  free(o);
}

op *ezi_gs_op_new(server *s, opkind kind, conn *req) {
  op *o = calloc(1, sizeof *o);
  if (!o) return NULL;
  o->kind = kind;
  o->refs = 1; /* held until the op finishes */
  o->srv = s;
  o->req = req;
  if (req) req->req_op = o;
  return o;
}

void ezi_gs_op_finish(op *o) {
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
    case OP_PUBLISH: ezi_gs_send(r, &b); break;
    case OP_EDGE:
    case OP_SYNC:
      ezi_gs_send(r, &b);
      ezi_gs_finish(r);
      break;
    case OP_PROFILE:
    case OP_SESSION:
      if (o->answer) o->answer(o);
      break;
    case OP_NOTIFY: break;
    }
  }
  o->req = NULL;
  ezi_gs_op_unref(o);
}

static void op_timeout(void *arg) {
  op *o = arg;
  o->timer = 0;
  if (o->kind != OP_PROFILE)
    EZI_WARN("graph server: gave up waiting for %zu client answer(s)", o->remaining);
  ezi_gs_op_finish(o);
}

/* One expected answer arrived (or its client left). */
void ezi_gs_op_answer(op *o) {
  if (o->remaining > 0) o->remaining--;
  if (o->remaining == 0) ezi_gs_op_finish(o);
}

/* Called once every request of the op is sent: finishes at once if nothing is due. */
void ezi_gs_op_launch(op *o, uint64_t timeout_ns) {
  if (o->remaining == 0) {
    ezi_gs_op_finish(o);
    return;
  }
  if (timeout_ns) o->timer = ezi_loop_timer(o->srv->loop, ezi_now_ns() + timeout_ns, op_timeout, o);
}

/* ---- registered publishers and subscribers ------------------------------------------------ */

static size_t bucket_of(const char *s, size_t n, size_t cap) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return (size_t)(h ^ (h >> 32)) & (cap - 1);
}

static size_t id_bucket(const char *id, size_t cap) { return bucket_of(id, 36, cap); }
static size_t topic_bucket(const char *t, size_t cap) { return bucket_of(t, strlen(t), cap); }

/* Doubles the id index once publishers outnumber its buckets. Without memory for that, the
 * chains just grow longer. */
static void grow_ids(server *s) {
  size_t cap = s->pub_ids_cap ? s->pub_ids_cap * 2 : 64;
  conn **t = calloc(cap, sizeof *t), **tt = calloc(cap, sizeof *tt);
  if (!t || !tt) {
    free(t);
    free(tt);
    return;
  }
  for (conn *p = s->pubs; p; p = p->role_next) {
    size_t b = id_bucket(p->id, cap);
    p->id_next = t[b];
    t[b] = p;
    b = topic_bucket(p->topic, cap);
    p->topic_next = tt[b];
    tt[b] = p;
  }
  free(s->pub_ids);
  free(s->pub_topics);
  s->pub_ids = t;
  s->pub_topics = tt;
  s->pub_ids_cap = cap;
}

void ezi_gs_registered(server *s, conn *c) {
  if (c->st == C_PUB && s->n_pubs + 1 > s->pub_ids_cap) grow_ids(s); /* (before c is listed) */
  conn **head = c->st == C_PUB ? &s->pubs : &s->subs;
  c->role_prev = NULL;
  c->role_next = *head;
  if (*head) (*head)->role_prev = c;
  *head = c;
  if (c->st != C_PUB) return;
  s->n_pubs++;
  if (!s->pub_ids_cap) return; /* no memory: found by the list instead */
  size_t b = id_bucket(c->id, s->pub_ids_cap);
  c->id_next = s->pub_ids[b];
  s->pub_ids[b] = c;
  b = topic_bucket(c->topic, s->pub_ids_cap);
  c->topic_next = s->pub_topics[b];
  s->pub_topics[b] = c;
}

/* c, registered (was: its state), leaves the lists. */
static void unregister(server *s, conn *c, cstate was) {
  if (c->role_prev)
    c->role_prev->role_next = c->role_next;
  else if (was == C_PUB)
    s->pubs = c->role_next;
  else
    s->subs = c->role_next;
  if (c->role_next) c->role_next->role_prev = c->role_prev;
  if (was != C_PUB) return;
  s->n_pubs--;
  if (!s->pub_ids_cap) return;
  for (conn **p = &s->pub_ids[id_bucket(c->id, s->pub_ids_cap)]; *p; p = &(*p)->id_next)
    if (*p == c) {
      *p = c->id_next;
      break;
    }
  for (conn **p = &s->pub_topics[topic_bucket(c->topic, s->pub_ids_cap)]; *p; p = &(*p)->topic_next)
    if (*p == c) {
      *p = c->topic_next;
      break;
    }
}

conn *ezi_gs_find_pub(server *s, const char *id, size_t n) {
  if (n != 36) return NULL;
  if (!s->pub_ids_cap) {
    for (conn *p = s->pubs; p; p = p->role_next)
      if (memcmp(p->id, id, 36) == 0) return p;
    return NULL;
  }
  for (conn *p = s->pub_ids[id_bucket(id, s->pub_ids_cap)]; p; p = p->id_next)
    if (memcmp(p->id, id, 36) == 0) return p;
  return NULL;
}

/* ---- topology ------------------------------------------------------------------------------ */

/* The server and the id list an UPDATE's upstream walk fills (add_pubs_of). */
typedef struct upstream {
  server *s;
  ezi_buf *ids;
} upstream;

/* The publishers of `topic`, into the id list. */
static void add_pubs_of(void *arg, const char *topic) {
  upstream *u = arg;
  server *s = u->s;
  conn *p = s->pub_ids_cap ? s->pub_topics[topic_bucket(topic, s->pub_ids_cap)] : s->pubs;
  for (; p; p = s->pub_ids_cap ? p->topic_next : p->role_next) {
    if (strcmp(p->topic, topic) != 0) continue;
    if (u->ids->len) ezi_buf_put_u8(u->ids, ',');
    ezi_buf_put(u->ids, p->id, 36);
  }
}

/* Sends UPDATE to subscriber `sub` listing every publisher upstream of its topic (in the walk's
 * order: the reference's subscribers read the list as a set); o waits for it. */
void ezi_gs_notify_sub(server *s, conn *sub, op *o) {
  ezi_buf ids = {0}, b = {0};
  upstream u = {s, &ids};
  ezi_dag_upstream(s->dag, sub->topic, add_pubs_of, &u);
  ezi_buf_put_u8(&b, EZI_UPDATE);
  ezi_buf_put_str(&b, ids.len ? (const char *)ids.data : "", ids.len);
  ezi_buf_free(&ids);
  if (o && ezi_gs_wq_push(&sub->complete_q, o, 0) == 0) o->remaining++;
  ezi_gs_send(sub, &b);
  ezi_buf_free(&b);
}

/* UPDATE to every subscriber downstream of `topic`. */
/* ezi_dag_downstream's names live only during its walk: copied. */
static void add_downstream(void *arg, const char *topic) { ezi_strlist_add(arg, topic); }

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

void ezi_gs_notify_down(server *s, const char *topic, op *o, bool ezc_only) {
  /* One walk down from topic, then a lookup per subscriber: asking, per subscriber, whether
   * topic reaches its topic walked the graph once each (quadratic in a fan-out). */
  ezi_strlist d = {0};
  ezi_dag_downstream(s->dag, topic, add_downstream, &d);
  if (d.n) qsort(d.v, d.n, sizeof *d.v, cmp_str);
  for (conn *c = s->subs, *n; c; c = n) {
    n = c->role_next;
    if (!c->ezc && ezc_only) continue;
    bool down = d.nomem ? ezi_dag_reaches(s->dag, topic, c->topic)
                        : d.n && bsearch(&c->topic, d.v, d.n, sizeof *d.v, cmp_str);
    if (down) ezi_gs_notify_sub(s, c, o);
  }
  ezi_strlist_free(&d);
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
void ezi_gs_send(conn *c, const ezi_buf *b) {
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

bool ezi_gs_writable(conn *c) {
  if (ezi_buf_flush(&c->out, c->w.fd)) {
    ezi_gs_close(c);
    return true;
  }
  try_shutdown(c);
  update_events(c);
  return false;
}

static void linger_timeout(void *arg) {
  conn *c = arg;
  c->linger_timer = 0;
  ezi_gs_close(c);
}

/* The one-shot request is answered: hang up once the answer is out and the peer has closed. */
void ezi_gs_finish(conn *c) {
  c->st = C_CLOSING;
  try_shutdown(c);
  if (!c->linger_timer)
    c->linger_timer = ezi_loop_timer(c->srv->loop, ezi_now_ns() + LINGER_NS, linger_timeout, c);
}

static void resume(void *arg) {
  conn *c = arg;
  c->resume_timer = 0;
  c->srv->consume(c);
}

void ezi_gs_answered(conn *c) {
  if (c->dead) return;
  c->busy = false;
  if (!c->resume_timer) c->resume_timer = ezi_loop_timer(c->srv->loop, 0, resume, c);
}

static void drain_waiters(conn *c) {
  waiter w;
  while (ezi_gs_wq_pop(&c->complete_q, &w)) {
    if (!w.op->done) ezi_gs_op_answer(w.op);
    ezi_gs_op_unref(w.op);
  }
  while (ezi_gs_wq_pop(&c->profile_q, &w)) {
    if (!w.op->done) ezi_gs_op_answer(w.op);
    ezi_gs_op_unref(w.op);
  }
  free(c->complete_q.w);
  free(c->profile_q.w);
  c->complete_q = c->profile_q = (wqueue){0};
}

void ezi_gs_reap(void *arg) {
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
void ezi_gs_close(conn *c) {
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
  if (was == C_PUB || was == C_SUB) unregister(s, c, was);
  drain_waiters(c);
  s->in_total -= c->in_charged;
  if (c->sniff_timer) ezi_loop_cancel(s->loop, c->sniff_timer);
  if (c->resume_timer) ezi_loop_cancel(s->loop, c->resume_timer);
  c->sniff_timer = c->resume_timer = 0;
  if (c->closed) c->closed(c);
  if (was == C_PUB) {
    /* Beyond the reference: tell the ezmsg-c subscribers downstream that this publisher is
     * gone. Not Python ones: neither reference server sends them an UPDATE then, and 3.9.0's
     * subscribers, closing their channels at shutdown, can lose their cancellation to one
     * (examples/ezmsg_toy.py then hangs at exit). */
    op *o = ezi_gs_op_new(s, OP_NOTIFY, NULL);
    if (o) {
      ezi_gs_notify_down(s, c->topic, o, true);
      ezi_gs_op_launch(o, UPDATE_TIMEOUT_NS);
    }
  }
  if (was == C_PUB || was == C_SUB || was == C_CHAN)
    EZI_DEBUG("graph server: client %s left", c->id);
  c->next = s->graveyard;
  s->graveyard = c;
  if (!s->reap_timer) s->reap_timer = ezi_loop_timer(s->loop, 0, ezi_gs_reap, s);
}

void ezi_gs_proto_error(conn *c, const char *what) {
  char peer[64];
  ezi_sock_peer_host(c->w.fd, peer);
  EZI_WARN_RL("graph server: protocol error from %s (%s); closing that connection", peer, what);
  ezi_gs_close(c);
}
