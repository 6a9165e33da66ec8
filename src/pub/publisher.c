/* Publishers: creation through the graph server, publish into a ring of slots of a shared-memory
 * segment, backpressure, segment growth. The I/O-thread half lives in pubserve.c. */
#include "pub/publisher.h"
#include "graph/graphio.h"
#include "base/shmguard.h"
#include "base/idlecpu.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void ez_pub_opts_init(ez_pub_opts *o) {
  memset(o, 0, sizeof *o);
  o->num_buffers = 32;
  o->buf_size = 65536;
  o->host = "127.0.0.1";
}

const char *ez_pub_id(const ez_pub *p) { return p->id; }
const char *ez_pub_topic(const ez_pub *p) { return p->topic; }
uint32_t ezi_pub_num_buffers(const ez_pub *p) { return p->nbuf; }

/* Ready channels, the local one included. p->mu held. */
static size_t count_channels(const ez_pub *p) {
  size_t n = p->local != NULL;
  for (size_t i = 0; i < p->n_chans; i++)
    n += p->chans[i]->state == PC_READY;
  return n;
}

size_t ez_pub_num_channels(ez_pub *p) {
  pthread_mutex_lock(&p->mu);
  size_t n = count_channels(p);
  pthread_mutex_unlock(&p->mu);
  return n;
}

static void harvest_all(ez_pub *p);

int ezi_pub_set_local(ez_pub *p, chan *c) {
  pthread_mutex_lock(&p->mu);
  int rc = 0;
  if (c) {
    rc = ezi_lchan_attach(c, p->next_id);
    if (!rc) p->local = c;
  } else if (p->local) { /* the local channel leaves (its members released everything) */
    harvest_all(p);
    for (uint32_t i = 0; i < p->nbuf; i++)
      if (p->local_t0[i]) { /* cannot happen: a member still held it */
        p->local_t0[i] = 0;
        p->in_flight--;
      }
    p->local = NULL;
    ezi_pub_hot_reset(p);
    ezi_pub_check_sync(p);
    if (p->waiters) pthread_cond_broadcast(&p->cv);
  }
  pthread_mutex_unlock(&p->mu);
  return rc;
}

void ezi_pub_hand_over(ez_pub *p, ezi_seg **seg, ezi_seg_chain **retired, uint8_t **hot) {
  pthread_mutex_lock(&p->mu);
  ezi_seg_ref(p->seg);
  *seg = p->seg;
  *retired = p->retired;
  p->retired = NULL;
  ezi_pub_hot_hand_over(p, hot);
  pthread_mutex_unlock(&p->mu);
}

/* How long a publisher that lost its graph connection waits for the server's hang-up on its
 * segment's lease: a server that died closes both at once; one that is alive keeps the lease. */
#define LEASE_HANGUP_WAIT_MS 100

void ezi_pub_graph_gone(ez_pub *p) {
  pthread_mutex_lock(&p->mu);
  ezi_seg *s = p->seg;
  if (s) ezi_seg_ref(s);
  pthread_mutex_unlock(&p->mu);
  bool gone = s && ezi_seg_server_gone(s, LEASE_HANGUP_WAIT_MS);
  ezi_seg_unref(s);
  if (!gone) return;
  pthread_mutex_lock(&p->mu);
  ezi_seg_orphaned(p->seg);
  for (ezi_seg_chain *c = p->retired; c; c = c->next)
    ezi_seg_orphaned(c->seg);
  pthread_mutex_unlock(&p->mu);
}

/* ---- creation ------------------------------------------------------------------------------ */

static int listen_socket(const ez_pub_opts *o, int *fd_out) {
  const char *host = o->host ? o->host : "127.0.0.1";
  if (o->port) {
    int fd = ezi_tcp_listen(host, o->port, 128);
    if (fd < 0) return fd;
    *fd_out = fd;
    return 0;
  }
  const char *e = getenv(EZ_PUB_PORT_ENV);
  long start = e ? strtol(e, NULL, 10) : EZ_PUB_PORT_DEFAULT;
  if (start <= 0 || start > 65535) start = EZ_PUB_PORT_DEFAULT;
  for (long p = start; p <= 65535; p++) {
    int fd = ezi_tcp_listen(host, (uint16_t)p, 128);
    if (fd >= 0) {
      *fd_out = fd;
      return 0;
    }
  }
  int fd = ezi_tcp_listen(host, 0, 128); /* every port above start taken: any free one */
  if (fd < 0) return fd;
  *fd_out = fd;
  return 0;
}

static void pub_free(ez_pub *p) {
  ezi_trace_free(p->trace);
  free(p->topic);
  free(p->leases);
  free(p->slot_msg);
  free(p->local_t0);
  free(p->chans);
  ezi_seg_unref(p->seg);
  ezi_seg_chain_free(p->retired);
  ezi_pub_hot_free(p);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  ezi_window_free(p->tel_msgs);
  ezi_window_free(p->tel_bp);
  ezi_stamper_detach(&p->stamps);
  free(p);
}

static void add_to_ctx(void *arg) {
  ez_pub *p = arg;
  ez_context *ctx = p->ctx;
  pthread_mutex_lock(&ctx->mu);
  ez_pub **v = realloc(ctx->pubs, (ctx->n_pubs + 1) * sizeof *v);
  if (v) {
    ctx->pubs = v;
    ctx->pubs[ctx->n_pubs++] = p;
  }
  pthread_mutex_unlock(&ctx->mu);
}

typedef struct {
  ez_pub *pub;
  int graph_fd, listen_fd, rc;
} serve_call;

static void start_serving(void *arg) {
  serve_call *sc = arg;
  sc->rc = ezi_pub_serve_start(sc->pub, sc->graph_fd, sc->listen_fd);
  if (!sc->rc) add_to_ctx(sc->pub);
}

int ez_pub_create(ez_context *ctx, const char *topic, const ez_pub_opts *opts, ez_pub **out) {
  if (!ctx || !topic || !out || strlen(topic) > EZ_MAX_CONTROL_STR) return EZ_EINVAL;
  ez_pub_opts o;
  if (opts)
    o = *opts;
  else
    ez_pub_opts_init(&o);
  if (o.num_buffers < 1 || o.num_buffers > EZI_SHM_MAX_BUFFERS || o.buf_size < 1 ||
      o.buf_size > EZI_SHM_MAX_BUF_SIZE)
    return EZ_EINVAL;
  ez_pub *p = calloc(1, sizeof *p);
  if (!p) return EZ_ENOMEM;
  p->ctx = ctx;
  ezi_stamper_attach(&p->stamps, ctx->tick);
  p->opts = o;
  p->opts.host = NULL; /* not kept: the caller owns the string */
  p->nbuf = o.num_buffers;
  p->running = !o.start_paused;
  ezi_mutex_init(&p->mu);
  ezi_cond_init(&p->cv);
  p->tel_msgs = ezi_window_new();
  p->tel_bp = ezi_window_new();
  p->topic = strdup(topic);
  p->leases = calloc(p->nbuf, sizeof *p->leases);
  p->slot_msg = calloc(p->nbuf, sizeof *p->slot_msg);
  p->local_t0 = calloc(p->nbuf, sizeof *p->local_t0);
  if (!p->tel_msgs || !p->tel_bp || !p->topic || !p->leases || !p->slot_msg || !p->local_t0) {
    pub_free(p);
    return EZ_ENOMEM;
  }

  /* The segment: the server's, mapped here; if it cannot be mapped (server on another host),
   * private memory in the same layout and TCP for everyone. */
  uint64_t deadline = ezi_deadline(EZ_DEFAULT_TIMEOUT_MS);
  int rc = ezi_seg_create(ctx->server_addr, p->nbuf, o.buf_size, &p->seg, ezi_ms_left(deadline));
  if (rc == 0) {
    p->shm_real = true;
  } else if (rc == EZ_ENOENT || rc == EZ_ESYS || rc == EZ_EPROTO || rc == EZ_EINVAL) {
    /* EZ_EINVAL: the server refused to create it (its limits, EZMSG_SHM_SEGMENT_MB ...). */
    if (rc == EZ_EINVAL)
      EZI_WARN("publisher %s: the graph server refused a segment of %u x %llu bytes; using TCP",
               topic, (unsigned)p->nbuf, (unsigned long long)o.buf_size);
    else
      EZI_INFO("publisher %s: cannot map the server's segment (%s); using TCP", topic,
               ez_strerror(rc));
    rc = ezi_seg_private("", p->nbuf, o.buf_size, &p->seg);
  }
  if (rc) {
    pub_free(p);
    return rc;
  }

  int lfd = -1;
  rc = listen_socket(&o, &lfd);
  if (rc) {
    pub_free(p);
    return rc;
  }
  p->port = ezi_sock_port(lfd);

  int gfd = ezi_graph_open(ctx->server_addr, deadline, NULL, 0);
  if (gfd < 0) {
    close(lfd);
    pub_free(p);
    return gfd;
  }
  ezi_buf b = {0};
  ezi_buf_put_u8(&b, EZI_PUBLISH);
  ezi_buf_put_cstr(&b, topic);
  rc = b.data ? ezi_io_write(gfd, b.data, b.len, deadline) : EZ_ENOMEM;
  ezi_buf_free(&b);
  char *id = NULL;
  size_t idlen = 0;
  if (!rc) rc = ezi_io_read_str(gfd, &id, &idlen, 64, deadline);
  if (!rc && !ezi_is_uuid(id, idlen)) rc = EZ_EPROTO;
  if (!rc) memcpy(p->id, id, 37);
  free(id);
  if (rc) {
    close(gfd);
    close(lfd);
    pub_free(p);
    return rc;
  }

  /* Serve channels before announcing the address: subscribers in this very process may connect
   * while the server waits for their UPDATE answers. */
  serve_call sc = {p, gfd, lfd, 0};
  ezi_ctx_call(ctx, start_serving, &sc);
  if (sc.rc) {
    close(gfd);
    close(lfd);
    pub_free(p);
    return sc.rc;
  }
  char addr[300];
  snprintf(addr, sizeof addr, "%s:%u", o.host ? o.host : "127.0.0.1", p->port);
  /* The graph link now belongs to the I/O thread: send through its outbox and let it read the
   * COMPLETE (it wakes us through `registered`). */
  ezi_buf_put_cstr(&b, addr);
  ezi_buf_put_u8(&b, EZI_X_CLIENT); /* after the address: "an ezmsg-c publisher" (wire.h) */
  ezi_outbox_put(ctx, &p->gout, b.data, b.len);
  ezi_buf_free(&b);
  pthread_mutex_lock(&p->mu);
  while (!p->registered && !p->graph_lost)
    if (ezi_cond_wait(&p->cv, &p->mu, deadline) == EZ_ETIMEDOUT) break;
  bool ok = p->registered;
  pthread_mutex_unlock(&p->mu);
  if (!ok) {
    ez_pub_destroy(p);
    return EZ_ETIMEDOUT;
  }
  *out = p;
  return 0;
}

/* ---- destruction --------------------------------------------------------------------------- */

static void remove_on_loop(void *arg) {
  ez_pub *p = arg;
  ez_context *ctx = p->ctx;
  pthread_mutex_lock(&ctx->mu);
  for (size_t i = 0; i < ctx->n_pubs; i++) {
    if (ctx->pubs[i] == p) {
      ctx->pubs[i] = ctx->pubs[--ctx->n_pubs];
      break;
    }
  }
  pthread_mutex_unlock(&ctx->mu);
  ezi_pub_serve_stop(p);
}

void ez_pub_destroy(ez_pub *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->closing = true;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  ezi_ctx_call(p->ctx, remove_on_loop, p);
  pub_free(p);
}

/* ---- backpressure ------------------------------------------------------------------------- */

static void release_retired(ez_pub *p);

/* True if the local channel still holds slot idx; if its members released it, records the
 * lease's duration and forgets it (p->mu held). */
static bool local_held(ez_pub *p, uint32_t idx) {
  if (!p->local_t0[idx]) return false;
  uint64_t freed;
  if (!p->local || !ezi_lchan_slot_free(p->local, idx, &freed)) return p->local != NULL;
  uint64_t t0 = p->local_t0[idx];
  ezi_window_span(p->tel_bp, t0, freed);
  p->local_t0[idx] = 0;
  p->in_flight--;
  return false;
}

/* As local_held, for the ring of channel pc. */
static bool ring_held(ez_pub *p, pub_chan *pc, uint32_t idx) {
  if (pc->mode != EZI_SEND_RING || !pc->t0[idx]) return false;
  ezi_ring_entry *e = &pc->ring.e[idx];
  if (__atomic_load_n(&e->refs, __ATOMIC_SEQ_CST)) return true;
  uint64_t t0 = pc->t0[idx], freed = __atomic_load_n(&e->freed_at, __ATOMIC_RELAXED);
  ezi_window_span(p->tel_bp, t0, freed);
  pc->t0[idx] = 0;
  pc->held--;
  p->in_flight--;
  return false;
}

static bool rings_held(ez_pub *p, uint32_t idx) {
  bool held = false;
  for (size_t i = 0; i < p->n_chans; i++)
    held |= ring_held(p, p->chans[i], idx);
  return held;
}

static bool slot_busy(ez_pub *p, uint32_t idx) {
  return p->leases[idx] | local_held(p, idx) | rings_held(p, idx);
}

/* A channel asked for a ring or a TCP window but still holds messages sent the old way: new
 * messages wait until it has released them, so that none is notified both ways and a window
 * starts empty (p->mu held). */
static bool ring_switch_waits(ez_pub *p) {
  for (size_t i = 0; i < p->n_chans; i++)
    if (p->chans[i]->wanted != EZI_SEND_FRAMES && p->chans[i]->held) return true;
  return false;
}

/* Collects every slot the local channel and the rings released (p->mu held). */
static void harvest_all(ez_pub *p) {
  for (uint32_t i = 0; i < p->nbuf; i++) {
    local_held(p, i);
    rings_held(p, i);
  }
  if (p->retired) release_retired(p);
  ezi_win_collect(p);
}

/* Tells the local channel's receivers what a releaser must wake the publisher for: a pending
 * SYNC or flush waits for every slot, a publish for its next one. Then the caller checks again
 * before it sleeps (p->mu held). */
static void set_wants(ez_pub *p) {
  uint32_t w = 0;
  if (p->sync_pending || (p->waiters && p->want < 0))
    w = EZI_LWANT_ANY;
  else if (p->waiters)
    w = (uint32_t)p->want + 1;
  if (p->local) ezi_lchan_set_wants(p->local, w);
  for (size_t i = 0; i < p->n_chans; i++)
    if (p->chans[i]->mode == EZI_SEND_RING)
      __atomic_store_n(&p->chans[i]->ring.h->pub_wants, w, __ATOMIC_SEQ_CST);
}

void ezi_pub_check_sync(ez_pub *p) {
  if (!p->sync_pending) return;
  set_wants(p); /* before looking: a release from now on wakes us */
  for (uint32_t i = 0; i < p->nbuf; i++)
    if (slot_busy(p, i)) return;
  if (ezi_win_busy(p)) return;
  p->sync_pending = false;
  set_wants(p);
  uint8_t c = EZI_COMPLETE;
  ezi_outbox_put(p->ctx, &p->gout, &c, 1);
}

void ezi_pub_free_locked(ez_pub *p, pub_chan *pc, uint64_t msg_id, uint64_t now) {
  if (pc->mode == EZI_SEND_RING) { /* a ring's RX_ACK only says that a slot we sleep for is free */
    ezi_pub_ring_wake(p);
    return;
  }
  if (pc->mode == EZI_SEND_WINDOW) {
    ezi_win_ack(p, pc, msg_id, now);
    return;
  }
  uint32_t idx = (uint32_t)(msg_id % p->nbuf);
  uint64_t *t0 = &pc->t0[idx];
  if (!*t0 || p->slot_msg[idx] != msg_id) return; /* stale or duplicate ack */
  ezi_window_span(p->tel_bp, *t0, now);
  *t0 = 0;
  p->in_flight--;
  if (--pc->held == 0 && pc->wanted != EZI_SEND_FRAMES && p->waiters)
    pthread_cond_broadcast(&p->cv);
  if (--p->leases[idx] == 0) {
    if (p->retired) release_retired(p);
    /* Wake the publisher only for the slot it waits for (or when it waits for everything). */
    if (p->waiters && (p->want < 0 || (uint32_t)p->want == idx)) pthread_cond_broadcast(&p->cv);
    ezi_pub_check_sync(p);
  }
}

void ezi_pub_ring_wake(ez_pub *p) {
  /* Whoever waits collects what it waits for when it wakes (wait_slot's slot_blocked, the loop
   * of ez_pub_flush), and a pending SYNC walks every slot (ezi_pub_check_sync). Only segments a
   * grow retired have nobody else to look for them. This runs on the releaser's thread for
   * local channels: a full walk (every slot of every channel) on each wake would slow down the
   * side that is already the slower one. */
  if (p->retired) harvest_all(p);
  ezi_pub_check_sync(p);
  if (p->waiters) pthread_cond_broadcast(&p->cv);
}

void ezi_pub_local_wake(ez_pub *p) {
  pthread_mutex_lock(&p->mu);
  ezi_pub_ring_wake(p);
  pthread_mutex_unlock(&p->mu);
}

void ezi_pub_ring_close(ez_pub *p, pub_chan *pc, uint64_t now) {
  if (pc->mode != EZI_SEND_RING) {
    if (pc->ring_name[0]) ezi_shm_unlink(pc->ring_name);
    return;
  }
  for (uint32_t i = 0; i < p->nbuf; i++) {
    if (!pc->t0[i]) continue;
    ezi_window_span(p->tel_bp, pc->t0[i], now);
    pc->t0[i] = 0;
    p->in_flight--;
  }
  pc->held = 0;
  pc->mode = EZI_SEND_FRAMES;
  ezi_ring_detach(&pc->ring);
  ezi_shm_unlink(pc->ring_name); /* in case the channel never mapped it */
  ezi_pub_ring_wake(p);
}

/* True once slot idx is free as far as the local channel and the rings can tell without a lock
 * of theirs (p->mu held; remote leases are checked by the caller). */
static bool slot_free_atomics(ez_pub *p, uint32_t idx) {
  uint64_t freed;
  if (p->local_t0[idx] && p->local && !ezi_lchan_slot_free(p->local, idx, &freed)) return false;
  for (size_t i = 0; i < p->n_chans; i++) {
    pub_chan *pc = p->chans[i];
    if (pc->mode == EZI_SEND_RING && pc->t0[idx] &&
        __atomic_load_n(&pc->ring.e[idx].refs, __ATOMIC_ACQUIRE))
      return false;
  }
  return true;
}

/* Before sleeping for slot idx that only the local channel holds, polls it for a while (p->mu
 * held: the receivers' releases do not need it), as long as polling pays. True if it came free. */
static bool poll_slot(ez_pub *p, uint32_t idx) {
  uint64_t budget = p->ctx->spin_ns;
  if (!budget || p->leases[idx] || ring_switch_waits(p)) return false;
  if ((p->spin_score < SPIN_WORTH && ++p->since_probe < 32) || !ezi_cpu_spare()) return false;
  p->since_probe = 0;
  bool got = false;
  uint64_t t0 = ezi_now_ns();
  for (unsigned k = 1; !(got = slot_free_atomics(p, idx)); k++) {
    ezi_cpu_relax();
    if (!(k & 63) && ezi_now_ns() - t0 >= budget) break;
    if (!(k & 255)) sched_yield();
  }
  p->spin_score = p->spin_score - p->spin_score / 8 + (got ? 128 : 0);
  return got;
}

/* What wait_slot's loop asks, in one pass over the channels: whether slot idx is held (every
 * holder is asked, so that each release is collected), a channel switching to a ring or a window
 * holds messages, a window keeps `bytes` back, or a channel's socket is that far behind that its
 * outbox is full (context.h; p->mu held). */
static bool slot_blocked(ez_pub *p, uint32_t idx, uint64_t bytes) {
  bool b = p->leases[idx] | local_held(p, idx);
  for (size_t i = 0; i < p->n_chans; i++) {
    pub_chan *pc = p->chans[i];
    b |= ring_held(p, pc, idx);
    b |= pc->wanted != EZI_SEND_FRAMES && pc->held;
    b |= pc->mode == EZI_SEND_WINDOW && ezi_win_chan_full(p, pc, bytes);
    b |=
        pc->mode != EZI_SEND_RING && ezi_outbox_full(&pc->out); /* (a ring's carries no messages) */
  }
  return b;
}

/* Arms the drain wake-up of every full outbox: true if any is still to be waited for (p->mu held,
 * which the I/O thread's wake-up takes before it signals). */
static bool outbox_waits(ez_pub *p) {
  bool w = false;
  for (size_t i = 0; i < p->n_chans; i++)
    if (p->chans[i]->mode != EZI_SEND_RING && ezi_outbox_full(&p->chans[i]->out))
      w |= ezi_outbox_wait_drain(&p->chans[i]->out);
  return w;
}

static void rings_tripped(ez_pub *p);

/* Waits (p->mu held) until the next slot is free and the publisher runs. The deadline is read
 * from the clock only when there is something to wait for (*deadline 0: not yet). */
static int wait_slot(ez_pub *p, uint64_t bytes, int timeout_ms, uint64_t *deadline) {
  uint32_t idx = (uint32_t)(p->next_id % p->nbuf);
  bool polled = false;
  while (!p->closing && (!p->running || slot_blocked(p, idx, bytes))) {
    if (!*deadline) *deadline = ezi_deadline(timeout_ms);
    if (!polled && p->running) {
      polled = true;
      if (poll_slot(p, idx)) continue;
    }
    p->waiters++;
    bool win = p->running && ezi_win_full(p, bytes);
    if (win) { /* an ack that makes room wakes us */
      p->win_waiters++;
      p->win_need = bytes;
      p->win_kicked = false;
    }
    /* (Waiting for a window only, the slot is free: no local release need wake us for it.) */
    p->want = p->running && !ring_switch_waits(p) ? (int64_t)idx : -1;
    set_wants(p);
    rings_tripped(p); /* before sleeping for a slot that a truncated ring holds forever */
    int rc = 0;
    if (!p->running || slot_busy(p, idx) || ring_switch_waits(p) || win ||
        outbox_waits(p)) { /* releasers (or the I/O thread) know */
      rc = ezi_cond_wait(&p->cv, &p->mu, *deadline);
      ezi_stamper_reset(&p->stamps); /* the rate seen so far says nothing about the next one */
    }
    p->waiters--;
    if (win) p->win_waiters--;
    set_wants(p);
    if (rc) return rc;
  }
  return p->closing ? EZ_ECLOSED : 0;
}

/* Replaces the segment by one of buf_size `size` (shm.h), copying the held slots over (Python
 * channels re-read their cached messages from the new segment). p->mu held; dropped meanwhile. */
static int replace_seg(ez_pub *p, uint64_t size) {
  ezi_seg *ns = NULL;
  bool real = false;
  pthread_mutex_unlock(&p->mu);
  int rc = EZ_ENOENT;
  if (p->shm_real)
    rc = ezi_seg_create(p->ctx->server_addr, p->nbuf, size, &ns, EZ_DEFAULT_TIMEOUT_MS);
  if (rc == 0)
    real = true;
  else
    rc = ezi_seg_private(p->seg->shm.name, p->nbuf, size, &ns);
  pthread_mutex_lock(&p->mu);
  if (rc) return rc;
  uint64_t room = ezi_seg_room(p->seg);
  ezi_seg *old = p->seg;
  ezi_seg_chain *r = NULL;
  /* Channels may still have to attach the old one for messages in flight, and local views point
   * into it: it is kept until they are released. */
  if (p->next_id && !(r = malloc(sizeof *r))) {
    ezi_seg_unref(ns);
    return EZ_ENOMEM;
  }
  harvest_all(p);
  for (uint32_t i = 0; i < p->nbuf; i++)
    if (p->leases[i] || p->local_t0[i] || rings_held(p, i))
      memcpy(ezi_seg_data(ns, i), ezi_seg_data(old, i), room);
  if (r) {
    *r = (ezi_seg_chain){old, p->next_id - 1, p->retired};
    p->retired = r;
    old = NULL;
  }
  p->seg = ns;
  p->seg_gen++;
  if (!real && p->shm_real)
    EZI_WARN("publisher %s: segment grow failed at the server; using TCP", p->topic);
  p->shm_real = real;
  ezi_seg_unref(old); /* nothing was sent in it (messages still viewed hold their own refs) */
  return 0;
}

/* Replaces the segment by one whose slots hold `need` bytes (twice that). p->mu held. */
static int grow(ez_pub *p, uint64_t need) { return replace_seg(p, need * 2); }

/* Another process truncated our segment, so a copy into it faulted and the mapping became private
 * memory (shmguard.h): channels can no longer read what we write there. A new segment of the
 * same layout takes its place, announced as after a grow; the old one is kept, as after a grow,
 * until what was sent in it is released. p->mu held. */
static __attribute__((noinline)) int seg_tripped(ez_pub *p) {
  const ezi_seg *s = p->seg;
  EZI_WARN_RL("publisher %s: its shared memory %s was truncated by another process; moving to a "
              "new segment",
              p->topic, s->shm.name);
  return replace_seg(p, s->shm.stride - 16 * (uint64_t)p->nbuf);
}

/* A channel's ring was truncated under us: its entries are private memory now and the channel
 * cannot release them; its connection is shut down (the I/O thread then closes it, which frees
 * what it held, and the channel joins again). p->mu held: pc's descriptor is still open. */
static __attribute__((noinline)) void rings_tripped(ez_pub *p) {
  for (size_t i = 0; i < p->n_chans; i++) {
    pub_chan *pc = p->chans[i];
    if (pc->mode != EZI_SEND_RING || !ezi_guard_tripped(&pc->ring.tripped) || pc->ring_cut)
      continue;
    pc->ring_cut = true;
    EZI_WARN_RL("publisher %s: the shared ring of channel %s (pid %llu) was truncated; closing it",
                p->topic, pc->id, (unsigned long long)pc->pid);
    shutdown(pc->w.fd, SHUT_RDWR);
  }
}

/* Drops retired segments no message in flight can still refer to (p->mu held). */
static void release_retired(ez_pub *p) {
  uint64_t oldest = UINT64_MAX; /* the oldest message still held somewhere */
  for (uint32_t i = 0; i < p->nbuf; i++)
    if ((p->leases[i] || p->local_t0[i] || rings_held(p, i)) && p->slot_msg[i] < oldest)
      oldest = p->slot_msg[i];
  for (ezi_seg_chain **rp = &p->retired; *rp;) {
    ezi_seg_chain *r = *rp;
    if (oldest != UINT64_MAX && oldest <= r->last_id) {
      rp = &r->next;
      continue;
    }
    *rp = r->next;
    ezi_seg_unref(r->seg);
    free(r);
  }
}

/* Queues a frame for channel pc: cmd, u64 id, str name. False if the channel is gone. */
static bool put_named(ez_pub *p, pub_chan *pc, uint8_t cmd, uint64_t id, const char *name) {
  uint8_t hdr[1 + 8 + 8 + EZI_SHM_NAME_MAX];
  size_t nl = strlen(name);
  hdr[0] = cmd;
  ezi_put_u64le(hdr + 1, id);
  ezi_put_u64le(hdr + 9, nl);
  memcpy(hdr + 17, name, nl);
  return ezi_outbox_put_now(p->ctx, &pc->out, hdr, 17 + nl);
}

/* Channel pc asked for a ring (X_HELLO) and holds nothing: from the next message on, its notices
 * go through a new ring, announced by X_RING. If the ring cannot be made, it stays on TX_SHM. */
static void ring_start(ez_pub *p, pub_chan *pc, bool shm) {
  if (pc->held) return; /* not yet (ring_switch_waits holds new messages back meanwhile) */
  pc->wanted = EZI_SEND_FRAMES;
  if (!shm || ezi_ring_create(p->nbuf, &pc->ring, pc->ring_name)) return;
  pc->ring.h->start_gen = p->seg_gen;
  pc->ring_gen = UINT32_MAX; /* the first message's TX_SHM names the segment */
  __atomic_store_n(&pc->ring.h->published, p->next_id, __ATOMIC_RELEASE);
  if (!put_named(p, pc, EZI_X_RING, p->next_id, pc->ring_name)) {
    ezi_ring_detach(&pc->ring);
    ezi_shm_unlink(pc->ring_name);
    return;
  }
  pc->mode = EZI_SEND_RING;
  set_wants(p);
}

/* The notice of message id for ring channel pc: its entry, then `published`. A TX_SHM frame goes
 * too when the channel sleeps (it wakes it) or the segment changed since the last one (it names
 * the new segment). If a grow fell back to private memory, the name is the old segment's: the
 * channel finds a slot that does not hold the announced message, drops the link, and joins again
 * (over TCP). */
static void ring_put(ez_pub *p, pub_chan *pc, uint64_t id, uint64_t now) {
  uint32_t idx = (uint32_t)(id % p->nbuf);
  ezi_ring_entry *e = &pc->ring.e[idx];
  e->msg_id = id;
  e->t0 = now;
  e->freed_at = 0;
  e->gen = p->seg_gen;
  __atomic_store_n(&e->refs, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&pc->ring.h->published, id + 1, __ATOMIC_SEQ_CST);
  pc->t0[idx] = now;
  pc->held++;
  p->in_flight++;
  /* One exchange, not a load and a store: a receiver that arms rx_sleep again between the two
   * would have its announcement overwritten and sleep through the next messages. The load is a
   * plain one first, so that a receiver that is awake costs no write to the shared line. */
  bool wake = __atomic_load_n(&pc->ring.h->rx_sleep, __ATOMIC_SEQ_CST) &&
              __atomic_exchange_n(&pc->ring.h->rx_sleep, 0, __ATOMIC_SEQ_CST);
  if (wake || pc->ring_gen != p->seg_gen) {
    pc->ring_gen = p->seg_gen;
    put_named(p, pc, EZI_TX_SHM, id, p->seg->shm.name);
  }
}

/* Whether nobody will read the next message's slot (p->mu held): no local channel, and every
 * channel that gets it takes X_TCP frames in its window, copied from the caller's buffer (no
 * switch to a ring or a window pending either, whose first message could read the slot). */
static bool slot_unread(const ez_pub *p, size_t len) {
  if (p->local || len > UINT32_MAX) return false;
  for (size_t i = 0; i < p->n_chans; i++) {
    const pub_chan *pc = p->chans[i];
    if (pc->state == PC_READY &&
        (pc->mode != EZI_SEND_WINDOW || !pc->x_tcp || pc->wanted != EZI_SEND_FRAMES))
      return false;
  }
  return true;
}

/* Puts a frame (hdr, then body) in pc's outbox; false if its connection is dead (p->mu held). */
static inline bool put_frame(ez_pub *p, pub_chan *pc, const uint8_t *hdr, size_t hl,
                             const uint8_t *body, size_t body_len) {
  pthread_mutex_lock(&pc->out.mu);
  bool kick = ezi_outbox_put_locked(&pc->out, hdr, hl, body, body_len);
  bool dead = pc->out.dead;
  pthread_mutex_unlock(&pc->out.mu);
  if (kick) ezi_outbox_kick(p->ctx, &pc->out);
  return !dead;
}

/* Switches pc to the mode it asked for, once it holds nothing (p->mu held). shm: whether its
 * messages would go through shared memory. */
static void switch_mode(ez_pub *p, pub_chan *pc, bool shm) {
  if (pc->wanted == EZI_SEND_RING)
    ring_start(p, pc, shm);
  else if (pc->wanted == EZI_SEND_WINDOW && (shm || pc->mode == EZI_SEND_RING))
    pc->wanted = EZI_SEND_FRAMES; /* a window is for TCP only */
  else if (pc->wanted == EZI_SEND_WINDOW)
    ezi_win_start(p, pc);
}

/* Message id (total bytes in `slot`, its payload at `direct` if set) as a TX_SHM or TX_TCP frame
 * on pc's socket, which then holds the slot until its RX_ACK (EZI_SEND_FRAMES; p->mu held). */
static void send_frame(ez_pub *p, pub_chan *pc, bool shm, uint64_t id, uint64_t now,
                       const uint8_t *slot, size_t total) {
  uint8_t hdr[1 + 8 + 8 + EZI_SHM_NAME_MAX];
  size_t hl = 17;
  hdr[0] = shm ? EZI_TX_SHM : EZI_TX_TCP;
  ezi_put_u64le(hdr + 1, id);
  if (shm) {
    size_t nl = strlen(p->seg->shm.name);
    ezi_put_u64le(hdr + 9, nl);
    memcpy(hdr + 17, p->seg->shm.name, nl);
    hl += nl;
  } else {
    ezi_put_u64le(hdr + 9, total);
  }
  if (!put_frame(p, pc, hdr, hl, slot, shm ? 0 : total)) return;
  uint32_t idx = (uint32_t)(id % p->nbuf);
  pc->t0[idx] = now;
  p->leases[idx]++;
  pc->held++;
  p->in_flight++;
}

/* The same in pc's TCP window (EZI_SEND_WINDOW): as an X_TCP frame (the payload alone, wire.h)
 * if pc asked for those, else TX_TCP; it holds an entry of the window, not the slot. */
static void send_window(ez_pub *p, pub_chan *pc, uint64_t id, uint64_t now, const uint8_t *slot,
                        size_t len, const uint8_t *direct) {
  size_t total = EZI_MARSHAL_BYTES_HDR + len;
  uint8_t hdr[17];
  bool sent;
  if (pc->x_tcp && len <= UINT32_MAX) {
    hdr[0] = EZI_X_TCP;
    ezi_put_u32le(hdr + 1, (uint32_t)len);
    sent = put_frame(p, pc, hdr, 5, direct ? direct : slot + EZI_MARSHAL_BYTES_HDR, len);
  } else {
    hdr[0] = EZI_TX_TCP;
    ezi_put_u64le(hdr + 1, id);
    ezi_put_u64le(hdr + 9, total);
    sent = put_frame(p, pc, hdr, 17, slot, total);
  }
  if (sent) ezi_win_sent(p, pc, id, total, now);
}

/* Sends the message in the next slot (its payload of len bytes there, or, for the local channel
 * alone, at `local_data`: a hot buffer, pubhot.c). If `direct` is set, the payload is there
 * instead and the slot is left unwritten (slot_unread). p->mu held. */
static void send_slot(ez_pub *p, size_t len, const uint8_t *local_data, const uint8_t *direct) {
  uint64_t id = p->next_id, now = ezi_stamp(&p->stamps, id);
  uint32_t idx = (uint32_t)(id % p->nbuf);
  uint8_t *slot = ezi_seg_data(p->seg, idx);
  if (!direct) ezi_marshal_bytes_header(slot, id, len);
  p->slot_msg[idx] = id;
  const uint8_t *ld = local_data ? local_data : slot + EZI_MARSHAL_BYTES_HDR;
  if (p->local && ezi_lchan_put(p->local, id, ld, len, now, NULL, NULL)) {
    p->local_t0[idx] = now;
    p->in_flight++;
  }
  for (size_t i = 0; i < p->n_chans; i++) {
    pub_chan *pc = p->chans[i];
    if (pc->state != PC_READY) continue;
    bool shm = p->shm_real && pc->shm_ok && !p->opts.force_tcp && pc->mode != EZI_SEND_WINDOW;
    if (EZI_UNLIKELY(pc->wanted != EZI_SEND_FRAMES)) switch_mode(p, pc, shm);
    switch (pc->mode) {
    case EZI_SEND_RING: ring_put(p, pc, id, now); break;
    case EZI_SEND_WINDOW: send_window(p, pc, id, now, slot, len, direct); break;
    case EZI_SEND_FRAMES: send_frame(p, pc, shm, id, now, slot, EZI_MARSHAL_BYTES_HDR + len); break;
    }
  }
  p->total_msgs++;
  p->total_bytes += len;
  if (now != EZI_UNSTAMPED) { /* the unstamped ones since the last stamp were only in the totals */
    ezi_window_tally_n(p->tel_msgs, p->total_msgs - 1 - p->msgs_seen,
                       p->total_bytes - len - p->bytes_seen);
    ezi_window_count(p->tel_msgs, now, len);
    p->msgs_seen = p->total_msgs;
    p->bytes_seen = p->total_bytes;
  }
  p->next_id++;
}

/* ---- traces (trace.h): while a tool asks for them, and only then ---------------------------- */

/* Whether p is traced now (one load of a field of p's while it is not). */
static inline uint32_t traced(const ez_pub *p) {
  ezi_trace *t = __atomic_load_n(&p->trace, __ATOMIC_ACQUIRE); /* (a plain load on x86) */
  return EZI_UNLIKELY(t != NULL) ? __atomic_load_n(&t->on, __ATOMIC_RELAXED) : 0;
}

/* Message id was sent (p->mu held): the time since the previous one, and how long this one
 * waited for its slot (wait_from: when it began to, 0 if it did not). */
static __attribute__((noinline)) void trace_sent(ez_pub *p, uint64_t id, uint64_t wait_from) {
  ezi_trace *t = __atomic_load_n(&p->trace, __ATOMIC_ACQUIRE);
  uint32_t on = __atomic_load_n(&t->on, __ATOMIC_RELAXED);
  uint64_t now = ezi_now_ns();
  uint64_t last = t->last_ns;
  t->last_ns = now;
  if (!ezi_trace_pick(t)) return;
  if (on & EZI_TM_PUBLISH_DELTA)
    ezi_trace_add(t, EZI_TM_PUBLISH_DELTA, now, last ? (double)(now - last) : 0, id, -1);
  if ((on & EZI_TM_BACKPRESSURE_WAIT) && wait_from)
    ezi_trace_add(t, EZI_TM_BACKPRESSURE_WAIT, now, (double)(now - wait_from), id, -1);
}

/* Takes the next slot with room for len payload bytes (p->mu held on success). *wait_from gets
 * when it began to wait for it, while p is traced (else, and if it did not wait, 0). */
static int take_slot(ez_pub *p, size_t len, int timeout_ms, uint64_t *wait_from) {
  if (p->loaned) return EZ_EINVAL;
  uint64_t deadline = 0;
  *wait_from = traced(p) ? ezi_now_ns() : 0;
  pthread_mutex_lock(&p->mu);
  uint64_t bytes = (uint64_t)len + EZI_MARSHAL_BYTES_HDR;
  int rc = wait_slot(p, bytes, timeout_ms, &deadline);
  if (!rc && EZI_UNLIKELY(__atomic_load_n(&p->seg->shm.tripped, __ATOMIC_RELAXED)) &&
      !(rc = seg_tripped(p)))
    rc = wait_slot(p, bytes, timeout_ms, &deadline); /* the lock was dropped */
  /* Python's reader wants the message strictly smaller than the data block. */
  if (!rc && bytes >= ezi_seg_room(p->seg)) {
    rc = grow(p, bytes + 1);
    if (!rc) rc = wait_slot(p, bytes, timeout_ms, &deadline); /* grow dropped the lock */
  }
  if (rc) pthread_mutex_unlock(&p->mu);
  if (!deadline) *wait_from = 0; /* (it never waited: the deadline is read only then) */
  return rc;
}

int ez_publish(ez_pub *p, const void *data, size_t len, int timeout_ms) {
  if (!p || (!data && len)) return EZ_EINVAL;
  uint64_t wait_from;
  int rc = take_slot(p, len, timeout_ms, &wait_from);
  if (rc) return rc;
  uint8_t *hot = ezi_pub_hot_take(p, p->next_id, len); /* only this process reads it */
  /* Only X_TCP frames read it: they copy from the caller's buffer, one copy fewer. */
  const uint8_t *direct = !hot && len && slot_unread(p, len) ? data : NULL;
  uint8_t *slot = ezi_seg_data(p->seg, p->next_id % p->nbuf);
  if (len && !direct) memcpy(hot ? hot : slot + EZI_MARSHAL_BYTES_HDR, data, len);
  send_slot(p, len, hot, direct);
  if (EZI_UNLIKELY(traced(p))) trace_sent(p, p->next_id - 1, wait_from);
  pthread_mutex_unlock(&p->mu);
  return 0;
}

int ez_pub_loan(ez_pub *p, size_t len, void **buf, int timeout_ms) {
  if (!p || !buf) return EZ_EINVAL;
  uint64_t wait_from;
  int rc = take_slot(p, len, timeout_ms, &wait_from);
  if (rc) return rc;
  p->loan_wait_from = wait_from;
  *buf = ezi_seg_data(p->seg, p->next_id % p->nbuf) + EZI_MARSHAL_BYTES_HDR;
  p->loaned = true;
  p->loan_len = len;
  pthread_mutex_unlock(&p->mu);
  return 0;
}

int ez_pub_commit(ez_pub *p, size_t len) {
  if (!p || !p->loaned || len > p->loan_len) return EZ_EINVAL;
  pthread_mutex_lock(&p->mu);
  p->loaned = false;
  if (p->closing) {
    pthread_mutex_unlock(&p->mu);
    return EZ_ECLOSED;
  }
  send_slot(p, len, NULL, NULL);
  if (EZI_UNLIKELY(traced(p))) trace_sent(p, p->next_id - 1, p->loan_wait_from);
  pthread_mutex_unlock(&p->mu);
  return 0;
}

void ez_pub_cancel(ez_pub *p) {
  if (p) p->loaned = false;
}

int ez_pub_flush(ez_pub *p, int timeout_ms) {
  if (!p) return EZ_EINVAL;
  uint64_t deadline = ezi_deadline(timeout_ms);
  pthread_mutex_lock(&p->mu);
  int rc = 0;
  harvest_all(p);
  while (!rc && p->in_flight && !p->closing) {
    p->waiters++;
    p->want = -1;
    set_wants(p);
    harvest_all(p); /* again, now that releasers know */
    if (p->in_flight) rc = ezi_cond_wait(&p->cv, &p->mu, deadline);
    p->waiters--;
    set_wants(p);
  }
  pthread_mutex_unlock(&p->mu);
  return rc;
}

/* ---- profile ------------------------------------------------------------------------------- */

static json_t *lease_json(const char *id, uint64_t pid, const char *mode, uint64_t n) {
  json_t *o = json_object();
  json_object_set_new(o, "channel_id", json_string(id));
  json_object_set_new(o, "pid", json_integer((json_int_t)pid));
  json_object_set_new(o, "mode", json_string(mode));
  json_object_set_new(o, "in_flight", json_integer((json_int_t)n));
  return o;
}

/* What each ready channel holds now, and whose it is (p->mu held, after harvest_all): a channel
 * that never acknowledges holds the publisher (lossless backpressure, as the protocol has it), and
 * this is how the profile names it even when it sends no profile of its own. */
static json_t *leases_json(ez_pub *p) {
  json_t *a = json_array();
  if (!a) return NULL;
  if (p->local) {
    uint64_t n = 0;
    for (uint32_t i = 0; i < p->nbuf; i++)
      n += p->local_t0[i] != 0;
    json_array_append_new(a, lease_json(ezi_chan_id(p->local), (uint64_t)p->ctx->pid, "local", n));
  }
  for (size_t i = 0; i < p->n_chans; i++) {
    const pub_chan *pc = p->chans[i];
    if (pc->state != PC_READY) continue;
    bool shm = pc->mode == EZI_SEND_RING ||
               (pc->mode == EZI_SEND_FRAMES && p->shm_real && pc->shm_ok && !p->opts.force_tcp);
    uint64_t n = pc->held + (pc->mode == EZI_SEND_WINDOW ? pc->win_next - pc->win_first : 0);
    json_array_append_new(a, lease_json(pc->id, pc->pid, shm ? "shm" : "tcp", n));
  }
  return a;
}

json_t *ezi_pub_profile(ez_pub *p, double window_s) {
  uint64_t now = ezi_now_ns();
  pthread_mutex_lock(&p->mu);
  harvest_all(p);
  ezi_window_tally_n(p->tel_msgs, p->total_msgs - p->msgs_seen, p->total_bytes - p->bytes_seen);
  p->msgs_seen = p->total_msgs;
  p->bytes_seen = p->total_bytes;
  ezi_window_fold(p->tel_bp);
  json_t *j = ezi_pub_tel_json(p->tel_msgs, p->tel_bp, p->total_msgs, p->total_bytes, p->in_flight,
                               now, window_s);
  size_t nch = count_channels(p);
  json_t *leases = leases_json(p);
  pthread_mutex_unlock(&p->mu);
  if (!j) {
    json_decref(leases);
    return NULL;
  }
  json_object_set_new(j, "type", json_string("publisher"));
  json_object_set_new(j, "id", json_string(p->id));
  json_object_set_new(j, "topic", json_string(p->topic));
  json_object_set_new(j, "pid", json_integer(p->ctx->pid));
  json_object_set_new(j, "num_buffers", json_integer(p->nbuf));
  json_object_set_new(j, "host", json_string(p->ctx->host));
  json_object_set_new(j, "num_channels", json_integer((json_int_t)nch));
  /* Beyond the reference: which channel holds the leases of backpressure.in_flight */
  if (leases) json_object_set_new(j, "leases", leases);
  return j;
}
