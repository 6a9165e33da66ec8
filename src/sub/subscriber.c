/* Subscribers: the queue of notices that recv takes from, recv itself, and creation and
 * destruction. The queue is bounded by the channels' slots (backpressure), so it never grows past
 * the sum of their num_buffers. The graph link (UPDATEs, channels) is in sublink.c. */
#include "graph/graphio.h"
#include "proto/gsregistry.h"
#include "sub/subscriber.h"
#include "sub/sublink.h"
#include "chan/channel.h"
#include "chan/notices.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
const char *ez_sub_id(const ez_sub *s) { return s->id; }
const char *ez_sub_topic(const ez_sub *s) { return s->topic; }
const char *ezi_sub_handle(const ez_sub *s) { return s->handle; }

ezi_trace **ezi_sub_trace_of(ez_sub *s, const char **topic, const char **id) {
  *topic = s->topic;
  *id = s->id;
  return &s->trace;
}

json_t *ezi_sub_member_json(const ez_sub *s, const ezi_window *proc, uint64_t in_flight,
                            uint64_t now, double window_s) {
  json_t *j = ezi_sub_tel_json(proc, s->id, s->handle, in_flight, now, window_s);
  if (j && s->lr.max_queue) { /* a leaky subscriber: what it dropped (in all, all channels) */
    json_object_set_new(j, "max_queue", json_integer(s->lr.max_queue));
    json_object_set_new(
        j, "dropped", json_integer((json_int_t)__atomic_load_n(&s->lr.dropped, __ATOMIC_RELAXED)));
  }
  return j;
}

/* ---- queue --------------------------------------------------------------------------------- */

bool ezi_sub_mark_ready(ez_sub *s) { /* s->mu held; the queue just became non-empty */
  ezi_lchan_wake_word(&s->lr);
  if (s->efd >= 0 && !s->efd_set) {
    uint64_t one = 1;
    if (write(s->efd, &one, sizeof one) == sizeof one) s->efd_set = true;
  }
  return s->waiters != 0;
}

void ezi_sub_signal_ready(ez_sub *s) {
  if (ezi_sub_mark_ready(s)) pthread_cond_signal(&s->cv);
}

bool ezi_sub_push(ez_sub *s, chan_sub *cs, uint64_t msg_id, bool defer_wake, note *dropped) {
  pthread_mutex_lock(&s->mu);
  dropped->cs = NULL;
  if (s->lr.max_queue && s->n >= s->lr.max_queue) { /* leaky and full: the oldest goes */
    *dropped = s->q[s->head];
    s->head = (s->head + 1) % s->cap;
    s->n--;
    __atomic_store_n(&s->lr.dropped, s->lr.dropped + 1, __ATOMIC_RELAXED);
  }
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
  /* Written only under s->mu, so a store will do (no locked read-modify-write per message). */
  __atomic_store_n(&s->pushed, __atomic_load_n(&s->pushed, __ATOMIC_RELAXED) + 1, __ATOMIC_RELEASE);
  bool wake = s->n == 1 && s->waiters;
  if (wake) ezi_lchan_wake_word(&s->lr); /* (a sleeper on a ring's word: woken under s->mu) */
  if (s->n == 1 && s->efd >= 0 && !s->efd_set) ezi_sub_signal_ready(s);
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
  if (wake) ezi_lchan_wake_word(&s->lr);
  pthread_mutex_unlock(&s->mu);
  if (wake) pthread_cond_signal(&s->cv);
}

/* The queue and the local channels are empty (s->mu held): the fd stops being readable, and the
 * local publishers are asked to make it readable again with their next message. */
static void now_empty(ez_sub *s) {
  if (s->efd_set) {
    uint64_t v;
    if (read(s->efd, &v, sizeof v) == sizeof v || errno == EAGAIN) s->efd_set = false;
  }
  if (s->efd >= 0 && s->lr.n_locals) {
    __atomic_store_n(&s->lr.want_signal, 1, __ATOMIC_SEQ_CST);
    ezi_lchan_arm(&s->lr);
    if (ezi_lchan_ready(&s->lr)) { /* one came meanwhile */
      __atomic_store_n(&s->lr.want_signal, 0, __ATOMIC_RELAXED);
      ezi_sub_signal_ready(s);
    }
  }
}

static void maybe_empty(ez_sub *s) {
  if (!s->n && !ezi_lchan_ready(&s->lr)) now_empty(s);
}

void ezi_sub_purge_all(ez_sub *s) {
  note batch[64];
  size_t n;
  do {
    pthread_mutex_lock(&s->mu);
    n = s->n < 64 ? s->n : 64;
    for (size_t i = 0; i < n; i++)
      batch[i] = s->q[(s->head + i) % s->cap];
    if (n) s->head = (s->head + n) % s->cap;
    s->n -= n;
    pthread_mutex_unlock(&s->mu);
    for (size_t i = 0; i < n; i++)
      ezi_chan_release(batch[i].cs, batch[i].msg_id);
  } while (n);
}

size_t ezi_sub_take_if(ez_sub *s, chan_sub *cs, bool (*drop)(chan_sub *, uint64_t, void *),
                       void *arg, uint64_t *ids, size_t cap) {
  size_t nid = 0, kept = 0;
  pthread_mutex_lock(&s->mu);
  for (size_t i = 0; i < s->n; i++) { /* compacted in place: what stays keeps its order */
    note x = s->q[(s->head + i) % s->cap];
    if (x.cs == cs && nid < cap && drop(cs, x.msg_id, arg))
      ids[nid++] = x.msg_id;
    else
      s->q[(s->head + kept++) % s->cap] = x;
  }
  s->n = kept;
  if (!s->n) maybe_empty(s);
  pthread_mutex_unlock(&s->mu);
  return nid;
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
    if (!s->n) maybe_empty(s);
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
  if (!budget || !s->lr.local_recent || (s->spin_score < SPIN_WORTH && ++s->since_probe < 32))
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
    if (!(k & 7)) { /* the local channels can change under us: look with the lock */
      pthread_mutex_lock(&s->mu);
      got = ezi_lchan_ready(&s->lr);
      pthread_mutex_unlock(&s->mu);
      if (got) break;
    }
    ezi_cpu_relax();
    if (!(k & 63) && ezi_now_ns() - t0 >= budget) break;
    if (!(k & 255)) sched_yield();
  }
  pthread_mutex_lock(&s->mu);
  s->spin_score = s->spin_score - s->spin_score / 8 + (got ? 128 : 0);
  return got;
}

/* ez_recv gives m out: counted, and timed while a tool traces lease times (trace.h). */
static inline void given(ez_sub *s, ez_msg *m) {
  __atomic_store_n(&s->received, s->received + 1, __ATOMIC_RELAXED);
  ezi_trace *t = __atomic_load_n(&s->trace, __ATOMIC_ACQUIRE);
  m->trace_t_ = 0;
  if (EZI_UNLIKELY(t != NULL) && (__atomic_load_n(&t->on, __ATOMIC_RELAXED) & EZI_TM_LEASE_TIME) &&
      ezi_trace_pick(t))
    m->trace_t_ = ezi_now_ns();
}

/* A traced message is released: its lease time, from ez_recv's return until now. */
static void lease_sample(chan_sub *cs, const ez_msg *m) {
  ezi_trace *t = __atomic_load_n(&cs->sub->trace, __ATOMIC_ACQUIRE);
  if (!t) return;
  uint64_t now = ezi_now_ns();
  ezi_trace_add(t, EZI_TM_LEASE_TIME, now, (double)(now - m->trace_t_), m->msg_id,
                (int8_t)ezi_chan_sub_kind(cs));
}

int ez_recv(ez_sub *s, ez_msg *m, int timeout_ms) {
  if (!s || !m) return EZ_EINVAL;
  uint64_t deadline = 0; /* read from the clock only if recv has to wait */
  bool polled = false;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    while (!s->n && !ezi_lchan_ready(&s->lr) && !rc) {
      if (s->closing) {
        rc = EZ_ECLOSED;
      } else if (s->lost) {
        rc = EZ_ECONNLOST;
      } else if (timeout_ms == 0) {
        now_empty(s); /* a stale readable fd is cleared; what just came is taken */
        if (!s->n && !ezi_lchan_ready(&s->lr)) rc = EZ_EAGAIN;
      } else {
        if (!deadline) deadline = ezi_deadline(timeout_ms);
        if (!polled) {
          polled = true;
          if (poll_local(s)) continue;
        }
        s->waiters++;
        /* Announce the sleep to local publishers, then look again (localchan.c). With shared
         * rings alone to wait for, sleep on their words, which their publishers wake. */
        ezi_lwords words;
        bool on_words = false;
        if (s->lr.n_locals) {
          __atomic_store_n(&s->lr.want_signal, 1, __ATOMIC_SEQ_CST);
          if (s->efd < 0 && !s->lr.max_queue) on_words = ezi_lchan_arm_words(&s->lr, &words);
          if (!on_words) ezi_lchan_arm(&s->lr);
        }
        if (ezi_lchan_ready(&s->lr))
          ;
        else if (on_words)
          rc = ezi_lchan_sleep(&s->lr, &words, deadline);
        else
          rc = ezi_cond_wait(&s->cv, &s->mu, deadline);
        s->waiters--;
        if (s->efd < 0) __atomic_store_n(&s->lr.want_signal, 0, __ATOMIC_RELAXED);
      }
    }
    if (rc) {
      pthread_mutex_unlock(&s->mu);
      return rc;
    }
    /* Alternate between the two sources while both have messages; a TCP ring's member that
     * left drains first (a later channel to its publisher queues later messages). */
    bool local = s->lr.n_locals && (!s->n || ezi_lchan_draining(&s->lr) || (s->rr = !s->rr));
    ezi_ldrops drops;
    drops.n = 0;
    if (local && ezi_lchan_take(&s->lr, m, &drops)) { /* (it sets local_recent) */
      if (s->efd >= 0) maybe_empty(s);
      pthread_mutex_unlock(&s->mu);
      if (EZI_UNLIKELY(drops.n)) ezi_lchan_trim_done(&drops); /* a leaky one's oldest */
      given(s, m);
      return 0;
    }
    note x = s->q[s->head];
    s->lr.local_recent = false;
    s->head = (s->head + 1) % s->cap;
    if (--s->n == 0) maybe_empty(s);
    pthread_mutex_unlock(&s->mu);
    if (ezi_chan_view(x.cs, x.msg_id, m) == 0) {
      given(s, m);
      return 0;
    }
  }
}

void ez_msg_release(ez_msg *m) {
  if (!m || !m->ref_) return;
  chan_sub *cs = m->ref_;
  m->ref_ = NULL;
  if (EZI_UNLIKELY(m->trace_t_ != 0)) lease_sample(cs, m);
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
    if (s->efd >= 0 && (s->n || s->lost || ezi_lchan_ready(&s->lr)))
      ezi_sub_signal_ready(s);
    else if (s->efd >= 0)
      now_empty(s);
  }
  int fd = s->efd;
  pthread_mutex_unlock(&s->mu);
  return fd;
}

/* ---- create / destroy ---------------------------------------------------------------------- */

static void sub_free(ez_sub *s) {
  ezi_trace_free(s->trace);
  free(s->topic);
  free(s->handle);
  free(s->q);
  free(s->links);
  free(s->lr.locals);
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
  ezi_sub_on_graph(&s->gw, EPOLLIN); /* the UPDATE may already be buffered */
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
  ezi_sub_links_close(s);
}

/* Tells the graph server this subscriber's process and handle (X_SUB_INFO, gsregistry.h), after
 * the answer to its first UPDATE, so that the server can list it while no publisher feeds it. */
static void announce(ez_sub *s) {
  ezi_buf b = {0};
  if (ezi_subinfo_encode(&b, s->ctx->pid, s->handle) == 0)
    ezi_outbox_put(s->ctx, &s->gout, b.data, b.len);
  ezi_buf_free(&b);
}

/* ---- the receiver of ring messages (ring/localchan.h) ---------------------------------------- */

static ez_sub *of_receiver(ezi_lrecv *rv) { return (ez_sub *)((char *)rv - offsetof(ez_sub, lr)); }

static bool rv_waited(ezi_lrecv *rv) {
  ez_sub *s = of_receiver(rv);
  return s->efd >= 0 || s->waiters;
}

static bool rv_mark_ready(ezi_lrecv *rv) { return ezi_sub_mark_ready(of_receiver(rv)); }

static void rv_signal_ready(ezi_lrecv *rv) { ezi_sub_signal_ready(of_receiver(rv)); }

static const ezi_lrecv_ops receiver_ops = {
    .waited = rv_waited,
    .mark_ready = rv_mark_ready,
    .signal_ready = rv_signal_ready,
};

int ez_sub_create(ez_context *ctx, const char *topic, const ez_sub_opts *opts, ez_sub **out) {
  if (!ctx || !topic || !out || strlen(topic) > EZ_MAX_CONTROL_STR) return EZ_EINVAL;
  ez_sub *s = calloc(1, sizeof *s);
  if (!s) return EZ_ENOMEM;
  s->ctx = ctx;
  s->efd = -1;
  s->gw.fd = -1;
  ezi_mutex_init(&s->mu);
  ezi_cond_init(&s->cv);
  s->lr.ops = &receiver_ops;
  s->lr.mu = &s->mu;
  s->lr.cv = &s->cv;
  s->topic = strdup(topic);
  s->handle = strdup(opts && opts->handle ? opts->handle : topic);
  if (opts && opts->leaky) s->lr.max_queue = opts->max_queue ? opts->max_queue : 1;
  if (!s->topic || !s->handle) {
    sub_free(s);
    return EZ_ENOMEM;
  }
  uint64_t deadline = ezi_deadline(2 * EZ_DEFAULT_TIMEOUT_MS);
  int fd = ezi_graph_open(ctx->server_addr, deadline, NULL, 0);
  if (fd < 0) {
    sub_free(s);
    return fd;
  }
  ezi_buf b = {0};
  ezi_buf_put_u8(&b, EZI_SUBSCRIBE);
  ezi_buf_put_cstr(&b, topic);
  ezi_buf_put_u8(&b, EZI_X_CLIENT); /* "an ezmsg-c subscriber" (wire.h) */
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
  s->gw = (ezi_watch){.fd = fd, .fn = ezi_sub_on_graph, .arg = s};
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
  announce(s);
  *out = s;
  return 0;
}

void ez_sub_destroy(ez_sub *s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->closing = true;
  ezi_lchan_wake_word(&s->lr);
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  ezi_ctx_call(s->ctx, detach_on_loop, s);
  sub_free(s);
}
