/* Subscribers: a graph link that follows UPDATEs (joining and leaving channels), and a queue of
 * notices that recv takes from. The queue is bounded by the channels' slots (backpressure), so it
 * never grows past the sum of their num_buffers.
 *
 * Links are supervised: a publisher listed by the graph server that cannot be reached, or whose
 * connection is cut, is joined again after a backoff (50 ms doubling to 2 s) for as long as it
 * stays listed, so a transient failure never leaves a subscriber deaf to a live publisher. */
#include "context.h"
#include "graphclient.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

typedef struct note {
  chan_sub *cs;
  uint64_t msg_id;
} note;

typedef struct link {
  char pub_id[37];
  chan_sub *cs;      /* NULL while waiting to join again */
  uint64_t retry_at; /* with cs NULL: when to join again (0: not scheduled, the server said the
                      * publisher is unknown; the next UPDATE listing it retries) */
  unsigned failures; /* in a row; reset by a join that completes */
  bool retry_join;   /* cs is a retry's join, still shaking hands (not counted in joins_pending) */
  chan_sub **dead;   /* memberships of cut channels whose messages the user still views */
  size_t n_dead;
} pub_link;

#define RETRY_FIRST_MS 50
#define RETRY_MAX_MS 2000

struct ez_sub {
  ez_context *ctx;
  char id[37];
  char *topic, *handle;
  /* graph link (I/O thread) */
  ezi_watch gw;
  ezi_buf gin;
  ezi_outbox gout;
  pub_link *links;
  size_t n_links;
  size_t joins_pending; /* channels of the current UPDATE still shaking hands */
  uint64_t retry_timer; /* the loop timer that joins failed links again (0: none) */
  /* queue (mu) */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int waiters;
  note *q;
  size_t head, n, cap;
  int efd;
  bool efd_set, initialized, lost, closing;
  bool wake_pending; /* a batch is being queued: signal once it is all there */
  uint32_t pushed;   /* atomic: notices ever queued (what a polling receiver watches) */
  /* the receiving thread's own (one thread at a time per subscriber) */
  bool local_recent;    /* the last message came from a publisher in this process */
  uint32_t spin_score;  /* how often polling found a message: 0..1024, a moving average */
  uint32_t since_probe; /* waits since the last poll */
};

const char *ez_sub_id(const ez_sub *s) { return s->id; }
const char *ez_sub_topic(const ez_sub *s) { return s->topic; }
const char *ezi_sub_handle(const ez_sub *s) { return s->handle; }

/* ---- queue --------------------------------------------------------------------------------- */

static void signal_ready(ez_sub *s) { /* s->mu held; the queue just became non-empty */
  if (s->efd >= 0 && !s->efd_set) {
    uint64_t one = 1;
    if (write(s->efd, &one, sizeof one) == sizeof one) s->efd_set = true;
  }
  if (s->waiters) pthread_cond_signal(&s->cv);
}

bool ezi_sub_push(ez_sub *s, chan_sub *cs, uint64_t msg_id, bool defer_wake) {
  pthread_mutex_lock(&s->mu);
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    note *q = malloc(cap * sizeof *q);
    if (!q) {
      pthread_mutex_unlock(&s->mu);
      EZI_ERROR("subscriber %s: out of memory; it does not take a message", s->topic);
      return false;
    }
    for (size_t i = 0; i < s->n; i++)
      q[i] = s->q[(s->head + i) % s->cap];
    free(s->q);
    s->q = q;
    s->cap = cap;
    s->head = 0;
  }
  s->q[(s->head + s->n++) % s->cap] = (note){cs, msg_id};
  __atomic_fetch_add(&s->pushed, 1, __ATOMIC_RELEASE);
  bool wake = s->n == 1 && s->waiters;
  if (s->n == 1 && s->efd >= 0 && !s->efd_set) signal_ready(s);
  if (wake && defer_wake) {
    s->wake_pending = true; /* ezi_sub_wake, once the whole batch is queued */
    wake = false;
  }
  pthread_mutex_unlock(&s->mu);
  if (wake) pthread_cond_signal(&s->cv); /* after unlocking: the woken thread needs the lock */
  return true;
}

void ezi_sub_wake(ez_sub *s) {
  pthread_mutex_lock(&s->mu);
  bool wake = s->wake_pending;
  s->wake_pending = false;
  pthread_mutex_unlock(&s->mu);
  if (wake) pthread_cond_signal(&s->cv);
}

static void clear_ready(ez_sub *s) { /* s->mu held; the queue just became empty */
  if (s->efd_set) {
    uint64_t v;
    if (read(s->efd, &v, sizeof v) == sizeof v || errno == EAGAIN) s->efd_set = false;
  }
}

void ezi_sub_purge(ez_sub *s, chan_sub *cs, void (*fn)(chan_sub *, uint64_t)) {
  /* In batches through a stack buffer: nothing to allocate, so nothing is ever dropped unreleased
   * (fn runs unlocked: it takes the channel's lock, which comes before ours). Only the notices
   * queued when this starts: fn may queue some of them again, at the tail. */
  uint64_t ids[64];
  size_t left = SIZE_MAX, nid;
  do {
    nid = 0;
    pthread_mutex_lock(&s->mu);
    if (left == SIZE_MAX)
      for (size_t i = left = 0; i < s->n; i++)
        left += s->q[(s->head + i) % s->cap].cs == cs;
    size_t kept = 0;
    for (size_t i = 0; i < s->n; i++) {
      note x = s->q[(s->head + i) % s->cap];
      if (x.cs == cs && nid < left && nid < sizeof ids / sizeof ids[0])
        ids[nid++] = x.msg_id;
      else
        s->q[(s->head + kept++) % s->cap] = x;
    }
    s->n = kept;
    if (!s->n) clear_ready(s);
    left -= nid;
    pthread_mutex_unlock(&s->mu);
    for (size_t i = 0; i < nid; i++)
      fn(cs, ids[i]);
  } while (left);
}

/* Before sleeping for a message from a publisher in this process, polls for one (s->mu held;
 * dropped meanwhile), as the I/O thread does (loop.c): a wake-up costs far more than a local
 * message. Only while polls find messages, and only for local publishers: for remote ones the I/O
 * thread polls already, and two pollers on two cores slow each other. True if one came. */
static bool poll_local(ez_sub *s) {
  uint64_t budget = s->ctx->spin_ns;
  if (!budget || !s->local_recent || (s->spin_score < SPIN_WORTH && ++s->since_probe < 32))
    return false;
  s->since_probe = 0;
  uint32_t seen = __atomic_load_n(&s->pushed, __ATOMIC_ACQUIRE);
  pthread_mutex_unlock(&s->mu);
  uint64_t t0 = ezi_now_ns();
  bool got = false;
  for (unsigned k = 1;; k++) {
    if (__atomic_load_n(&s->pushed, __ATOMIC_ACQUIRE) != seen) {
      got = true;
      break;
    }
    ezi_cpu_relax();
    if (!(k & 63) && ezi_now_ns() - t0 >= budget) break;
  }
  pthread_mutex_lock(&s->mu);
  s->spin_score = s->spin_score - s->spin_score / 8 + (got ? 128 : 0);
  return got;
}

int ez_recv(ez_sub *s, ez_msg *m, int timeout_ms) {
  if (!s || !m) return EZ_EINVAL;
  uint64_t deadline = 0; /* read from the clock only if recv has to wait */
  bool polled = false;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    while (!s->n && !rc) {
      if (s->closing)
        rc = EZ_ECLOSED;
      else if (s->lost)
        rc = EZ_ECONNLOST;
      else if (timeout_ms == 0)
        rc = EZ_EAGAIN;
      else {
        if (!deadline) deadline = ezi_deadline(timeout_ms);
        if (!polled) {
          polled = true;
          if (poll_local(s)) continue;
        }
        s->waiters++;
        rc = ezi_cond_wait(&s->cv, &s->mu, deadline);
        s->waiters--;
      }
    }
    if (rc) {
      pthread_mutex_unlock(&s->mu);
      return rc;
    }
    note x = s->q[s->head];
    s->local_recent = ezi_chan_local(x.cs);
    s->head = (s->head + 1) % s->cap;
    if (--s->n == 0) clear_ready(s);
    pthread_mutex_unlock(&s->mu);
    if (ezi_chan_view(x.cs, x.msg_id, m) == 0) return 0;
  }
}

void ez_msg_release(ez_msg *m) {
  if (!m || !m->ref_) return;
  chan_sub *cs = m->ref_;
  m->ref_ = NULL;
  ezi_chan_release(cs, m->msg_id);
}

int ez_recv_copy(ez_sub *s, void *buf, size_t cap, size_t *len, int timeout_ms) {
  ez_msg m;
  int rc = ez_recv(s, &m, timeout_ms);
  if (rc) return rc;
  if (len) *len = m.len;
  if (m.len <= cap) {
    if (m.len) memcpy(buf, m.data, m.len);
  } else {
    rc = EZ_EMSGSIZE;
  }
  ez_msg_release(&m);
  return rc;
}

int ez_sub_fd(const ez_sub *cs) {
  ez_sub *s = (ez_sub *)cs;
  pthread_mutex_lock(&s->mu);
  if (s->efd < 0) {
    s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->efd >= 0 && (s->n || s->lost)) signal_ready(s);
  }
  int fd = s->efd;
  pthread_mutex_unlock(&s->mu);
  return fd;
}

/* ---- graph link (I/O thread) --------------------------------------------------------------- */

static bool listed(const char *ids, size_t n, const char *id) {
  for (size_t i = 0; i + 36 <= n; i += 37)
    if (!memcmp(ids + i, id, 36)) return true;
  return false;
}

static pub_link *find_link(ez_sub *s, chan_sub *cs) {
  for (size_t i = 0; i < s->n_links; i++)
    if (s->links[i].cs == cs) return &s->links[i];
  return NULL;
}

static void retry_fire(void *arg);

/* Leaves the cut channels of l: all of them, or (only_idle) those whose messages were all
 * released. release_viewed as ezi_chan_leave. */
static void drop_dead(pub_link *l, bool release_viewed, bool only_idle) {
  for (size_t i = 0; i < l->n_dead;) {
    if (only_idle && !ezi_chan_sub_idle(l->dead[i])) {
      i++;
      continue;
    }
    chan_sub *cs = l->dead[i];
    l->dead[i] = l->dead[--l->n_dead];
    ezi_chan_leave(cs, release_viewed);
  }
  if (!l->n_dead) {
    free(l->dead);
    l->dead = NULL;
  }
}

/* Removes links[i] (its channels already left or to be left by the caller). */
static void remove_link_at(ez_sub *s, size_t i, bool release_viewed) {
  pub_link *l = &s->links[i];
  if (l->cs) ezi_chan_leave(l->cs, release_viewed);
  drop_dead(l, release_viewed, false);
  s->links[i] = s->links[--s->n_links];
}

/* Arms the retry timer for the earliest scheduled link (I/O thread). */
static void arm_retry(ez_sub *s) {
  uint64_t at = 0;
  for (size_t i = 0; i < s->n_links; i++)
    if (!s->links[i].cs && s->links[i].retry_at && (!at || s->links[i].retry_at < at))
      at = s->links[i].retry_at;
  if (s->retry_timer) ezi_loop_cancel(s->ctx->loop, s->retry_timer);
  s->retry_timer = at ? ezi_loop_timer(s->ctx->loop, at, retry_fire, s) : 0;
}

/* A join of l's publisher failed (rc), or its channel's link was cut: schedule another. */
static void link_failed(ez_sub *s, pub_link *l, int rc) {
  l->cs = NULL;
  l->retry_join = false;
  l->failures++;
  if (s->gw.fd < 0) { /* the graph server is gone: so is the subscriber (recv says so) */
    l->retry_at = 0;
    return;
  }
  if (rc == EZ_ENOENT) { /* the graph server no longer knows it: wait for an UPDATE */
    l->retry_at = 0;
    EZI_INFO("subscriber %s: publisher %s is gone", s->topic, l->pub_id);
    return;
  }
  unsigned shift = l->failures - 1 < 6 ? l->failures - 1 : 6;
  uint64_t ms = (uint64_t)RETRY_FIRST_MS << shift;
  if (ms > RETRY_MAX_MS) ms = RETRY_MAX_MS;
  l->retry_at = ezi_now_ns() + ms * 1000000u;
  if (l->failures == 1 || l->failures % 30 == 0)
    EZI_WARN("subscriber %s: publisher %s: %s (%u failure%s in a row); joining again in %u ms",
             s->topic, l->pub_id, ez_strerror(rc), l->failures, l->failures == 1 ? "" : "s",
             (unsigned)ms);
  arm_retry(s);
}

/* Joins l's publisher; with pending, the join finishes in ezi_sub_join_done. */
static int link_join(ez_sub *s, pub_link *l, bool *pending) {
  chan_sub *cs = NULL;
  *pending = false;
  int rc = ezi_chan_join(s->ctx, l->pub_id, s, &cs, pending);
  if (rc) return rc;
  l->cs = cs;
  l->retry_at = 0;
  if (!*pending) l->failures = 0;
  drop_dead(l, false, true);
  return 0;
}

static void retry_fire(void *arg) {
  ez_sub *s = arg;
  s->retry_timer = 0;
  uint64_t now = ezi_now_ns();
  for (size_t i = 0; i < s->n_links; i++) {
    pub_link *l = &s->links[i];
    if (l->cs || !l->retry_at || l->retry_at > now) continue;
    bool pending;
    int rc = link_join(s, l, &pending);
    if (rc)
      link_failed(s, l, rc);
    else
      l->retry_join = pending;
  }
  arm_retry(s);
}

/* UPDATE: join channels of new publishers, leave those no longer listed. Joins that must shake
 * hands with a remote publisher finish later (ezi_sub_join_done); the UPDATE is answered when the
 * last one has. */
static void apply_update(ez_sub *s, const char *ids, size_t n) {
  for (size_t i = 0; i < s->n_links;) {
    pub_link *l = &s->links[i];
    if (listed(ids, n, l->pub_id)) {
      if (!l->cs && !l->retry_at) l->retry_at = ezi_now_ns(); /* listed again: try again now */
      i++;
      continue;
    }
    remove_link_at(s, i, false);
  }
  for (size_t i = 0; i + 36 <= n; i += 37) {
    if (!ezi_is_uuid(ids + i, 36) || (i + 36 < n && ids[i + 36] != ',')) {
      EZI_WARN("subscriber %s: malformed UPDATE", s->topic);
      break;
    }
    char id[37];
    memcpy(id, ids + i, 36);
    id[36] = 0;
    bool have = false;
    for (size_t k = 0; k < s->n_links && !have; k++)
      have = !strcmp(s->links[k].pub_id, id);
    if (have) continue;
    pub_link *v = realloc(s->links, (s->n_links + 1) * sizeof *v);
    if (!v) continue;
    s->links = v;
    pub_link *l = &s->links[s->n_links++];
    *l = (pub_link){0};
    memcpy(l->pub_id, id, 37);
    bool pending;
    int rc = link_join(s, l, &pending);
    if (rc)
      link_failed(s, l, rc);
    else
      s->joins_pending += pending;
  }
  arm_retry(s);
}

static void graph_close(ez_sub *s) {
  if (s->gw.fd < 0) return;
  ezi_loop_del(&s->gw);
  ezi_outbox_close(s->ctx, &s->gout);
  close(s->gw.fd);
  s->gw.fd = -1;
  ezi_buf_free(&s->gin);
}

static void lost(ez_sub *s) {
  graph_close(s);
  pthread_mutex_lock(&s->mu);
  s->lost = true;
  signal_ready(s);
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

static void answer_update(ez_sub *s) {
  uint8_t c = EZI_COMPLETE;
  ezi_outbox_put(s->ctx, &s->gout, &c, 1);
}

/* Handles buffered graph messages, one UPDATE at a time. Returns false on a protocol error. */
static bool process(ez_sub *s) {
  while (!s->joins_pending) {
    ezi_rd r;
    ezi_rd_init(&r, ezi_buf_head(&s->gin), ezi_buf_pending(&s->gin), EZ_MAX_CONTROL_STR);
    uint8_t cmd;
    const char *ids = NULL;
    size_t nid = 0;
    if (ezi_rd_u8(&r, &cmd) && cmd == EZI_UPDATE) ezi_rd_str(&r, &ids, &nid);
    int st = ezi_rd_status(&r);
    if (st == 0) return true;
    if (st < 0 || (cmd != EZI_UPDATE && cmd != EZI_COMPLETE)) {
      EZI_WARN("subscriber %s: protocol error from the graph server", s->topic);
      return false;
    }
    if (cmd == EZI_UPDATE) {
      apply_update(s, ids, nid);
      if (!s->joins_pending) answer_update(s);
    } else {
      pthread_mutex_lock(&s->mu);
      s->initialized = true;
      pthread_cond_broadcast(&s->cv);
      pthread_mutex_unlock(&s->mu);
    }
    ezi_buf_consume(&s->gin, r.pos);
  }
  return true;
}

#define GRAPH_IN_LIMIT (EZ_MAX_CONTROL_STR + 16)

static void on_graph(ezi_watch *w, uint32_t ev) {
  ez_sub *s = w->arg;
  if (ev & EPOLLOUT) ezi_outbox_flush(&s->gout);
  if (!(ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))) return;
  long n;
  while ((n = ezi_buf_fill(&s->gin, w->fd, GRAPH_IN_LIMIT)) > 0)
    if (!process(s)) return lost(s);
  if (n < 0) return lost(s);
  if (s->joins_pending && ezi_buf_pending(&s->gin) >= GRAPH_IN_LIMIT) {
    /* Full while an UPDATE waits for its channels: stop reading until it is answered. */
    s->gout.base_events = EPOLLRDHUP;
    ezi_loop_mod(&s->gw, EPOLLRDHUP | (w->events & EPOLLOUT));
  }
}

void ezi_sub_join_done(ez_sub *s, chan_sub *cs, int rc) {
  pub_link *l = find_link(s, cs);
  bool retry = l && l->retry_join;
  if (l) l->retry_join = false;
  if (rc) {
    ezi_chan_leave(cs, false);
    if (l) link_failed(s, l, rc);
  } else if (l) {
    l->failures = 0;
    drop_dead(l, false, true);
  }
  if (retry || !s->joins_pending || --s->joins_pending) return;
  answer_update(s);
  if (s->gw.fd < 0) return;
  if (!(s->gout.base_events & EPOLLIN)) {
    s->gout.base_events = EPOLLIN | EPOLLRDHUP;
    ezi_loop_mod(&s->gw, EPOLLIN | EPOLLRDHUP | (s->gw.events & EPOLLOUT));
  }
  if (!process(s)) lost(s);
}

/* ---- create / destroy ---------------------------------------------------------------------- */

static void sub_free(ez_sub *s) {
  free(s->topic);
  free(s->handle);
  free(s->q);
  free(s->links);
  if (s->efd >= 0) close(s->efd);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}

static void attach_on_loop(void *arg) {
  ez_sub *s = arg;
  ez_context *ctx = s->ctx;
  pthread_mutex_lock(&ctx->mu);
  ez_sub **v = realloc(ctx->subs, (ctx->n_subs + 1) * sizeof *v);
  if (v) {
    ctx->subs = v;
    ctx->subs[ctx->n_subs++] = s;
  }
  pthread_mutex_unlock(&ctx->mu);
  ezi_outbox_init(&s->gout, &s->gw, EPOLLIN | EPOLLRDHUP);
  if (!v || ezi_loop_add(ctx->loop, &s->gw, EPOLLIN | EPOLLRDHUP)) {
    s->lost = true;
    return;
  }
  on_graph(&s->gw, EPOLLIN); /* the UPDATE may already be buffered */
}

static void detach_on_loop(void *arg) {
  ez_sub *s = arg;
  ez_context *ctx = s->ctx;
  pthread_mutex_lock(&ctx->mu);
  for (size_t i = 0; i < ctx->n_subs; i++) {
    if (ctx->subs[i] == s) {
      ctx->subs[i] = ctx->subs[--ctx->n_subs];
      break;
    }
  }
  pthread_mutex_unlock(&ctx->mu);
  graph_close(s);
  if (s->retry_timer) ezi_loop_cancel(ctx->loop, s->retry_timer);
  s->retry_timer = 0;
  while (s->n_links)
    remove_link_at(s, s->n_links - 1, true);
}

/* ezi_sub_purge's callback for a cut channel: queues again what the channel owns (in order),
 * releases the rest. */
static void requeue_owned(chan_sub *cs, uint64_t msg_id) {
  if (ezi_chan_msg_owned(cs, msg_id) && ezi_sub_push(ezi_chan_sub_owner(cs), cs, msg_id, false))
    return;
  ezi_chan_release(cs, msg_id);
}

void ezi_sub_chan_lost(ez_sub *s, chan_sub *cs) {
  pub_link *l = find_link(s, cs);
  /* Queued messages in the publisher's shared memory are dropped (their slots may be overwritten
   * now); those that came whole over TCP stay queued. What the user views or still has queued
   * stays valid until released, or until the subscriber goes (ez_sub_destroy ends views), so a
   * membership that holds messages is kept until then. */
  ezi_sub_purge(s, cs, requeue_owned);
  chan_sub **v = l && !ezi_chan_sub_idle(cs) ? realloc(l->dead, (l->n_dead + 1) * sizeof *v) : NULL;
  if (v) {
    l->dead = v;
    l->dead[l->n_dead++] = cs;
  } else {
    ezi_chan_leave(cs, false);
  }
  if (l) link_failed(s, l, EZ_ECONNLOST);
}

int ez_sub_create(ez_context *ctx, const char *topic, const ez_sub_opts *opts, ez_sub **out) {
  if (!ctx || !topic || !out || strlen(topic) > EZ_MAX_CONTROL_STR) return EZ_EINVAL;
  ez_sub *s = calloc(1, sizeof *s);
  if (!s) return EZ_ENOMEM;
  s->ctx = ctx;
  s->efd = -1;
  s->gw.fd = -1;
  pthread_mutex_init(&s->mu, NULL);
  ezi_cond_init(&s->cv);
  s->topic = strdup(topic);
  s->handle = strdup(opts && opts->handle ? opts->handle : topic);
  if (!s->topic || !s->handle) {
    sub_free(s);
    return EZ_ENOMEM;
  }
  uint64_t deadline = ezi_deadline(2 * EZ_DEFAULT_TIMEOUT_MS);
  int fd = ezi_graph_open(ctx->address, deadline, NULL, 0);
  if (fd < 0) {
    sub_free(s);
    return fd;
  }
  ezi_buf b = {0};
  ezi_buf_put_u8(&b, EZI_SUBSCRIBE);
  ezi_buf_put_cstr(&b, topic);
  int rc = b.data ? ezi_io_write(fd, b.data, b.len, deadline) : EZ_ENOMEM;
  ezi_buf_free(&b);
  char *id = NULL;
  size_t n = 0;
  if (!rc) rc = ezi_io_read_str(fd, &id, &n, 64, deadline);
  if (!rc && !ezi_is_uuid(id, n)) rc = EZ_EPROTO;
  if (!rc) memcpy(s->id, id, 37);
  free(id);
  if (rc) {
    close(fd);
    sub_free(s);
    return rc;
  }
  s->gw = (ezi_watch){.fd = fd, .fn = on_graph, .arg = s};
  ezi_ctx_call(ctx, attach_on_loop, s);
  pthread_mutex_lock(&s->mu);
  while (!s->initialized && !s->lost && !rc)
    rc = ezi_cond_wait(&s->cv, &s->mu, deadline);
  if (!rc && !s->initialized) rc = EZ_ECONNLOST;
  pthread_mutex_unlock(&s->mu);
  if (rc) {
    ez_sub_destroy(s);
    return rc;
  }
  *out = s;
  return 0;
}

void ez_sub_destroy(ez_sub *s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->closing = true;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  ezi_ctx_call(s->ctx, detach_on_loop, s);
  sub_free(s);
}
