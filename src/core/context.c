/* A process's membership of a graph: the I/O thread, the registries of publishers, subscribers and
 * channels, the outboxes the I/O thread writes for everyone, and the embedded graph server. */
#include "core/context.h"
#include "base/acceptor.h"
#include "graph/graphio.h"
#include "graph/graphserver.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- I/O thread and calls onto it ---------------------------------------------------------- */

typedef struct call {
  void (*fn)(void *);
  void *arg;
  bool done;
  pthread_mutex_t mu;
  pthread_cond_t cv;
} call;

static void run_call(void *arg) {
  call *c = arg;
  c->fn(c->arg);
  pthread_mutex_lock(&c->mu);
  c->done = true;
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

void ezi_ctx_call(ez_context *ctx, void (*fn)(void *), void *arg) {
  if (ezi_loop_on_thread(ctx->loop)) {
    fn(arg);
    return;
  }
  call c = {.fn = fn, .arg = arg};
  pthread_mutex_init(&c.mu, NULL);
  pthread_cond_init(&c.cv, NULL);
  while (ezi_loop_post(ctx->loop, run_call, &c))
    usleep(1000); /* ENOMEM: retry */
  pthread_mutex_lock(&c.mu);
  while (!c.done)
    pthread_cond_wait(&c.cv, &c.mu);
  pthread_mutex_unlock(&c.mu);
  pthread_mutex_destroy(&c.mu);
  pthread_cond_destroy(&c.cv);
}

/* ---- outboxes ------------------------------------------------------------------------------ */

#define DIRECT_SEND_MIN 16384

void ezi_outbox_init(ezi_outbox *ob, ezi_watch *w, uint32_t base_events) {
  memset(ob, 0, sizeof *ob);
  ezi_mutex_init(&ob->mu);
  ob->w = w;
  ob->base_events = base_events;
}

/* A batch is pending (ob->mu held): the calling thread writes it if the I/O thread is not writing
 * (io_busy) and nobody waits for a drain (whose wake-up is the I/O thread's to give: see
 * `wrote`). Under load the I/O thread, which takes turns with the publishing thread for a CPU,
 * found 1-2 KiB at a time (64 B: 27 messages a system call, ZeroMQ's 86); written here it is
 * one call for at least EZI_OUTBOX_BATCH bytes (everything pending, as far as the socket takes
 * it), with bytes still in this core's cache. A socket error kills the outbox (no append after
 * it tries again), and the I/O thread's next flush reports the link lost. */
static bool write_batch(ezi_outbox *ob) {
  if (ob->io_busy || ob->dead || __atomic_load_n(&ob->drain_wait, __ATOMIC_SEQ_CST)) return false;
  size_t before = ezi_buf_pending(&ob->pending);
  bool lost = ezi_buf_flush(&ob->pending, ob->w->fd) != 0;
  __atomic_fetch_add(&ob->written, before - ezi_buf_pending(&ob->pending), __ATOMIC_SEQ_CST);
  /* As for a frame that could not be queued: appends stop, and the flush reports the link lost. */
  if (lost) ob->dead = true;
  /* A drain waiter that armed after the first look may have counted the bytes as unsent: then
   * the I/O thread must look (its flush ends in `wrote`, which wakes it). */
  return __atomic_load_n(&ob->drain_wait, __ATOMIC_SEQ_CST) != 0;
}

bool ezi_outbox_put_locked(ezi_outbox *ob, const void *p1, size_t n1, const void *p2, size_t n2) {
  if (ob->dead) return false;
  size_t sent = 0;
  if (!ob->queued && n1 + n2 >= DIRECT_SEND_MIN) {
    /* A large write on an idle link: nobody else writes this socket now, so write from this
     * thread and spare the copy into the outbox; what the socket does not take is left for the
     * I/O thread. Small frames take the outbox: many of them then share one system call. */
    struct iovec iov[2] = {{(void *)p1, n1}, {(void *)p2, n2}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = n2 ? 2 : 1};
    ssize_t w = sendmsg(ob->w->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) sent = (size_t)w;
    if (sent == n1 + n2) return false;
  }
  size_t s1 = sent < n1 ? sent : n1, s2 = sent - s1; /* what was sent of each part */
  const uint8_t *r1 = s1 < n1 ? (const uint8_t *)p1 + s1 : NULL;
  const uint8_t *r2 = s2 < n2 ? (const uint8_t *)p2 + s2 : NULL;
  /* One writer at a time (ob->mu): a plain store, no locked add on every frame. */
  __atomic_store_n(&ob->appended, __atomic_load_n(&ob->appended, __ATOMIC_RELAXED) + n1 + n2 - sent,
                   __ATOMIC_RELEASE);
  if (ezi_buf_put2(&ob->pending, r1, n1 - s1, r2, n2 - s2)) {
    /* Out of memory: this frame, or the rest of it, is lost, so the stream is broken. The outbox
     * dies; the I/O thread's next flush reports the link lost and its owner closes it (the peer
     * joins again). */
    EZI_WARN("out of memory queueing %zu bytes for a socket; dropping the link", n1 + n2 - sent);
    ob->dead = true;
  }
  bool look = ezi_buf_pending(&ob->pending) >= EZI_OUTBOX_BATCH && write_batch(ob);
  /* The I/O thread runs a flush for what is pending, for a drain waiter, and for a dead outbox
   * (it reports the link lost). */
  if (ob->queued || (!ezi_buf_pending(&ob->pending) && !look && !ob->dead)) return false;
  ob->queued = true;
  return true;
}

bool ezi_outbox_put_now(ez_context *ctx, ezi_outbox *ob, const void *p, size_t n) {
  pthread_mutex_lock(&ob->mu);
  bool ok = !ob->dead, kick = false;
  if (ok && !ob->queued) { /* idle: write it from this thread, now */
    ssize_t w = send(ob->w->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    size_t sent = w > 0 ? (size_t)w : 0;
    if (sent < n) kick = ezi_outbox_put_locked(ob, (const uint8_t *)p + sent, n - sent, NULL, 0);
  } else if (ok) {
    kick = ezi_outbox_put_locked(ob, p, n, NULL, 0);
  }
  pthread_mutex_unlock(&ob->mu);
  if (kick) ezi_outbox_kick(ctx, ob);
  return ok;
}

void ezi_outbox_kick(ez_context *ctx, ezi_outbox *ob) {
  pthread_mutex_lock(&ctx->dirty_mu);
  bool was_empty = ctx->dirty == NULL;
  ob->next_dirty = ctx->dirty;
  ctx->dirty = ob;
  pthread_mutex_unlock(&ctx->dirty_mu);
  if (was_empty) ezi_loop_wake(ctx->loop);
}

bool ezi_outbox_put(ez_context *ctx, ezi_outbox *ob, const void *p, size_t n) {
  pthread_mutex_lock(&ob->mu);
  bool dead = ob->dead;
  bool kick = ezi_outbox_put_locked(ob, p, n, NULL, 0);
  pthread_mutex_unlock(&ob->mu);
  if (kick) ezi_outbox_kick(ctx, ob);
  return !dead;
}

void ezi_outbox_put_profile(ez_context *ctx, ezi_outbox *ob, json_t *j) {
  char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  ezi_buf b = {0};
  ezi_buf_put_u8(&b, EZI_PROFILE_DATA);
  ezi_buf_put_cstr(&b, text ? text : "{}");
  free(text);
  if (b.data) ezi_outbox_put(ctx, ob, b.data, b.len);
  ezi_buf_free(&b);
}

/* The I/O thread wrote n bytes of ob: wakes a drain waiter once it is down to the low mark. */
static void wrote(ezi_outbox *ob, size_t n) {
  uint64_t written = __atomic_add_fetch(&ob->written, n, __ATOMIC_SEQ_CST); /* (drain_wait's) */
  uint64_t left = __atomic_load_n(&ob->appended, __ATOMIC_SEQ_CST) - written;
  if (left <= EZI_OUTBOX_HIGH / 2 && __atomic_load_n(&ob->drain_wait, __ATOMIC_SEQ_CST) &&
      __atomic_exchange_n(&ob->drain_wait, 0, __ATOMIC_SEQ_CST) && ob->on_drain)
    ob->on_drain(ob->drain_arg);
}

bool ezi_outbox_wait_drain(ezi_outbox *ob) {
  __atomic_store_n(&ob->drain_wait, 1, __ATOMIC_SEQ_CST);
  if (ezi_outbox_unsent(ob) > EZI_OUTBOX_HIGH / 2) return true;
  __atomic_store_n(&ob->drain_wait, 0, __ATOMIC_SEQ_CST); /* drained meanwhile */
  return false;
}

int ezi_outbox_flush(ezi_outbox *ob) {
  for (;;) {
    if (ezi_buf_pending(&ob->io)) {
      size_t before = ezi_buf_pending(&ob->io);
      int rc = ezi_buf_flush(&ob->io, ob->w->fd);
      wrote(ob, before - ezi_buf_pending(&ob->io));
      if (rc) return EZ_ECONNLOST;
      if (ezi_buf_pending(&ob->io)) { /* socket full: wait for EPOLLOUT */
        ezi_loop_mod(ob->w, ob->base_events | EPOLLOUT);
        return 0;
      }
    }
    pthread_mutex_lock(&ob->mu);
    ob->io_busy = false; /* (io is empty here) */
    if (ob->dead) {      /* a frame could not be queued (ezi_outbox_put_locked) */
      pthread_mutex_unlock(&ob->mu);
      return EZ_ECONNLOST;
    }
    if (!ezi_buf_pending(&ob->pending)) {
      ob->queued = false;
      pthread_mutex_unlock(&ob->mu);
      ezi_loop_mod(ob->w, ob->base_events);
      wrote(ob, 0); /* what appending threads wrote themselves may have drained it (write_batch) */
      return 0;
    }
    ezi_buf t = ob->io; /* swap: take everything appended so far in one go */
    ob->io = ob->pending;
    ob->pending = t;
    ezi_buf_reset(&ob->pending);
    ob->io_busy = true;
    pthread_mutex_unlock(&ob->mu);
  }
}

void ezi_outbox_set_events(ezi_outbox *ob, uint32_t base_events) {
  ob->base_events = base_events;
  ezi_loop_mod(ob->w, base_events | (ezi_buf_pending(&ob->io) ? EPOLLOUT : 0));
}

void ezi_outbox_close(ez_context *ctx, ezi_outbox *ob) {
  pthread_mutex_lock(&ctx->dirty_mu);
  for (ezi_outbox **p = &ctx->dirty; *p; p = &(*p)->next_dirty) {
    if (*p == ob) {
      *p = ob->next_dirty;
      break;
    }
  }
  pthread_mutex_unlock(&ctx->dirty_mu);
  pthread_mutex_lock(&ob->mu);
  ob->dead = true;
  ob->queued = true; /* never queue again */
  ezi_buf_free(&ob->pending);
  ezi_buf_free(&ob->io);
  uint64_t unsent = ezi_outbox_unsent(ob); /* (dead: nothing is appended any more) */
  pthread_mutex_unlock(&ob->mu);
  wrote(ob, unsent); /* gone with the socket: nobody waits for them any more */
}

/* Wake hook: write every outbox that got bytes since the last turn. A failed socket is noticed by
 * its owner's read side (EPOLLHUP / EOF), which closes it. */
static void flush_dirty(void *arg) {
  ez_context *ctx = arg;
  if (ctx->rx_acks) ctx->rx_acks(ctx); /* the acknowledgements releases asked for */
  pthread_mutex_lock(&ctx->dirty_mu);
  ezi_outbox *list = ctx->dirty;
  ctx->dirty = NULL;
  pthread_mutex_unlock(&ctx->dirty_mu);
  while (list) {
    ezi_outbox *ob = list;
    list = ob->next_dirty;
    ob->next_dirty = NULL;
    if (ezi_outbox_flush(ob)) shutdown(ob->w->fd, SHUT_RDWR);
  }
}

/* ---- registry ------------------------------------------------------------------------------ */

/* $EZMSG_SPIN_US, or the default. */
static uint64_t spin_us(void) {
  const char *e = getenv(EZ_SPIN_ENV);
  if (!e || !*e) return EZ_SPIN_DEFAULT_US;
  char *end;
  errno = 0;
  long v = strtol(e, &end, 10);
  if (errno || *end || v < 0 || v > 1000) {
    EZI_WARN("%s=%s: not a number of microseconds in 0..1000; using %d", EZ_SPIN_ENV, e,
             EZ_SPIN_DEFAULT_US);
    return EZ_SPIN_DEFAULT_US;
  }
  return (uint64_t)v;
}

/* A switch that is on unless $name is "0". $EZMSG_SHM_RING: the shared-memory ring with other
 * ezmsg-c processes; $EZMSG_SHM_WAKE: its receivers woken directly by the publisher. */
static bool env_on(const char *name) {
  const char *e = getenv(name);
  if (!e || !*e || !strcmp(e, "1")) return true;
  if (strcmp(e, "0")) EZI_WARN("%s=%s: not 0 or 1; it stays on", name, e);
  return strcmp(e, "0") != 0;
}

/* $EZMSG_TCP_WINDOW, or the default. */
static uint32_t tcp_window(void) {
  const char *e = getenv(EZ_TCP_WINDOW_ENV);
  if (!e || !*e) return EZ_TCP_WINDOW_DEFAULT;
  char *end;
  errno = 0;
  long v = strtol(e, &end, 10);
  if (errno || *end || v < 0 || v > EZI_WIN_MAX_MSGS) {
    EZI_WARN("%s=%s: not a number of messages in 0..%d; using %d", EZ_TCP_WINDOW_ENV, e,
             EZI_WIN_MAX_MSGS, EZ_TCP_WINDOW_DEFAULT);
    return EZ_TCP_WINDOW_DEFAULT;
  }
  return (uint32_t)v;
}

/* ---- open / close -------------------------------------------------------------------------- */

static void *io_thread(void *arg) {
  ez_context *ctx = arg;
  ezi_loop_run(ctx->loop);
  return NULL;
}

int ezi_ctx_new(const char *address, ez_context **out) {
  ezi_raise_fd_limit(); /* a descriptor per link and per publisher's channel (acceptor.h) */
  ez_context *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return EZ_ENOMEM;
  ezi_uuid(ctx->id);
  ezi_addr_resolve(address, ctx->address);
  char host[256];
  uint16_t port;
  if (ezi_addr_parse(ctx->address, host, &port)) {
    free(ctx);
    return EZ_EADDR;
  }
  int rc = EZ_OK;
  char greeting[64] = "";
  int fd = ezi_graph_open(ctx->address, ezi_deadline(2000), greeting, sizeof greeting);
  /* The I/O thread connects to the server by a numeric address, so that it never waits for a
   * name lookup (every endpoint of the process would wait with it): the one just reached. */
  snprintf(ctx->server_addr, sizeof ctx->server_addr, "%s", ctx->address);
  if (fd >= 0) {
    /* Our own address as the graph server sees us: the `host` of our profile entries. */
    ezi_sock_local_host(fd, ctx->host);
    char peer[64];
    ezi_sock_peer_host(fd, peer);
    if (peer[0]) snprintf(ctx->server_addr, sizeof ctx->server_addr, "%s:%u", peer, port);
    close(fd);
  } else {
    rc = fd;
  }
  bool may_embed = (!address || !*address) && !getenv(EZ_ADDR_ENV);
  if (rc == EZ_ENOSERVER && may_embed) {
    rc = ez_server_start(ctx->address, &ctx->server);
    if (rc == EZ_EADDR) rc = ez_graph_ping(ctx->address, NULL, 0, 2000); /* lost a race: use it */
  }
  if (rc) {
    free(ctx);
    return rc;
  }
  ctx->pid = (int)getpid();
  if (ctx->server) snprintf(greeting, sizeof greeting, "%s", ezi_server_greeting(ctx->server));
  ctx->server_peer = ezi_dialect_of_greeting(greeting, strlen(greeting));
  EZI_DEBUG("graph server %s greets as ezmsg %s: %s dialect%s", ctx->address, greeting,
            ezi_dialect_name(ctx->server_peer.dialect),
            ctx->server_peer.sessions ? ", with sessions" : "");
  if (!ctx->host[0]) snprintf(ctx->host, sizeof ctx->host, "%.63s", host); /* embedded server */
  pthread_mutex_init(&ctx->mu, NULL);
  pthread_mutex_init(&ctx->dirty_mu, NULL);
  rc = ezi_loop_new(&ctx->loop);
  if (!rc && !(ctx->tick = ezi_tick_new(ctx->loop))) rc = EZ_ENOMEM;
  if (!rc) {
    ctx->spin_ns = spin_us() * 1000u;
    ctx->ring_ok = env_on(EZ_SHM_RING_ENV);
    ctx->ring_wake = env_on(EZ_SHM_WAKE_ENV);
    ctx->tcp_window = tcp_window();
    ezi_loop_set_spin(ctx->loop, ctx->spin_ns);
    ezi_loop_set_wake_hook(ctx->loop, flush_dirty, ctx);
    if (pthread_create(&ctx->thread, NULL, io_thread, ctx)) rc = EZ_ESYS;
  }
  if (rc) {
    if (ctx->loop) ezi_loop_free(ctx->loop);
    ezi_tick_free(ctx->tick);
    ez_server_stop(ctx->server);
    free(ctx);
    return rc;
  }
  *out = ctx;
  return 0;
}

const char *ez_context_address(const ez_context *ctx) { return ctx->address; }
bool ez_context_owns_server(const ez_context *ctx) { return ctx->server != NULL; }

void ezi_ctx_free(ez_context *ctx) {
  ezi_loop_stop(ctx->loop);
  pthread_join(ctx->thread, NULL);
  ezi_loop_free(ctx->loop);
  ezi_tick_free(ctx->tick); /* after the loop: a timer of the loop points to it */
  ez_server_stop(ctx->server);
  free(ctx->pubs);
  free(ctx->subs);
  free(ctx->chans);
  pthread_mutex_destroy(&ctx->mu);
  pthread_mutex_destroy(&ctx->dirty_mu);
  free(ctx);
}
