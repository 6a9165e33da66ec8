/* Channels: one per (process, publisher), shared by that process's subscribers. A channel receives
 * each message once (in place from the publisher's segment when local or over shared memory, or
 * as TX_TCP bytes), notifies its subscribers, and acks the publisher when the last one releases
 * it. The I/O thread runs its links; user threads view and release messages. */
#include "chan/channel.h"
#include "sub/subscriber.h"
#include "proto/meta39.h"
#include "base/rxbudget.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

const char *ezi_chan_pub_id(const chan *c) { return c->pub_id; }

const char *ezi_chan_id(const chan *c) { return c->id; }

bool ezi_chan_failed(const chan *c) { return c->state == CH_FAILED; }

/* ezi_sub_take_if's test (c->mu held, then the subscriber's): not a message this channel owns. */
static bool not_owned(chan_sub *cs, uint64_t msg_id, void *arg) {
  chan *c = arg;
  (void)cs;
  const slot *sl = c->slots && c->nslot ? &c->slots[msg_id % c->nslot] : NULL;
  return !(sl && sl->live && sl->msg_id == msg_id && sl->owned);
}

void ezi_chan_drop_unowned(chan_sub *cs) {
  chan *c = cs->ch;
  uint64_t ids[64];
  size_t n;
  do { /* in place, under both locks: a receiver never sees the queue reordered */
    pthread_mutex_lock(&c->mu);
    n = ezi_sub_take_if(cs->sub, cs, not_owned, c, ids, sizeof ids / sizeof ids[0]);
    pthread_mutex_unlock(&c->mu);
    for (size_t i = 0; i < n; i++)
      ezi_chan_release(cs, ids[i]);
  } while (n == sizeof ids / sizeof ids[0]);
}

ez_sub *ezi_chan_sub_owner(const chan_sub *cs) { return cs->sub; }

int ezi_chan_sub_kind(const chan_sub *cs) {
  pthread_mutex_lock(&cs->ch->mu); /* (only while a tool traces: once per traced message) */
  const char *m = cs->ch->mode;
  pthread_mutex_unlock(&cs->ch->mu);
  return !m                    ? EZI_M39_CH_UNKNOWN
         : !strcmp(m, "local") ? EZI_M39_CH_LOCAL
         : !strcmp(m, "shm")   ? EZI_M39_CH_SHM
         : !strcmp(m, "tcp")   ? EZI_M39_CH_TCP
                               : EZI_M39_CH_UNKNOWN;
}

void ezi_chan_sub_cut(chan_sub *cs) {
  if (cs->ch->ls) ezi_lchan_cut(cs);
}

bool ezi_chan_sub_idle(chan_sub *cs) {
  if (cs->ch->ls) return ezi_lchan_idle(cs);
  pthread_mutex_lock(&cs->ch->mu);
  bool idle = cs->in_flight == 0;
  pthread_mutex_unlock(&cs->ch->mu);
  return idle;
}

/* ---- slots --------------------------------------------------------------------------------- */

uint8_t *ezi_chan_buf_take(chan *c, size_t n, size_t *cap, int *err) {
  *err = EZ_ENOMEM;
  if (n > EZI_CHAN_SPARE_MAX) {
    pthread_mutex_lock(&c->mu);
    uint8_t *p = c->big_spare;
    size_t have = c->big_spare_cap;
    c->big_spare = NULL;
    pthread_mutex_unlock(&c->mu);
    if (p && have >= n) {
      *cap = have;
      return p;
    }
    ezi_chan_buf_free(c, p, have); /* too small for this one */
  } else {
    uint32_t h = c->spare_head, t = __atomic_load_n(&c->spare_tail, __ATOMIC_ACQUIRE);
    if (h != t) {
      uint8_t *p = c->spare[h % EZI_CHAN_SPARES].p;
      size_t have = c->spare[h % EZI_CHAN_SPARES].cap;
      __atomic_store_n(&c->spare_head, h + 1, __ATOMIC_RELEASE);
      if (have >= n) {
        *cap = have;
        return p;
      }
      ezi_chan_buf_free(c, p, have); /* too small for this one */
    }
    if (n < 256) n = 256;
  }
  if (ezi_rx_take(&c->rx_bytes, n)) {
    *err = EZ_EMSGSIZE;
    return NULL;
  }
  uint8_t *p = malloc(n);
  if (!p) {
    ezi_rx_give(&c->rx_bytes, n);
    return NULL;
  }
  *cap = n;
  return p;
}

void ezi_chan_buf_free(chan *c, uint8_t *p, size_t cap) {
  if (!p) return;
  free(p);
  ezi_rx_give(&c->rx_bytes, cap);
}

/* Gives a TX_TCP buffer back for ezi_chan_buf_take (c->mu held, or c no longer shared): kept
 * while there is room and it is small, else freed. */
static void buf_give(chan *c, uint8_t *p, size_t cap) {
  if (!p) return;
  if (cap > EZI_CHAN_SPARE_MAX) { /* the last one is kept */
    ezi_chan_buf_free(c, c->big_spare, c->big_spare_cap);
    c->big_spare = p;
    c->big_spare_cap = cap;
    return;
  }
  uint32_t t = c->spare_tail, h = __atomic_load_n(&c->spare_head, __ATOMIC_ACQUIRE);
  if (t - h >= EZI_CHAN_SPARES) {
    ezi_chan_buf_free(c, p, cap);
    return;
  }
  c->spare[t % EZI_CHAN_SPARES].p = p;
  c->spare[t % EZI_CHAN_SPARES].cap = cap;
  __atomic_store_n(&c->spare_tail, t + 1, __ATOMIC_RELEASE);
}

/* Empties a slot (c->mu held, or c no longer shared). */
static void slot_clear(chan *c, slot *s) {
  buf_give(c, s->owned, s->owned_cap);
  free(s->iov);
  ezi_seg_unref(s->seg);
  *s = (slot){0};
}

void ezi_chan_wake_subs(chan *c) {
  pthread_mutex_lock(&c->mu);
  for (size_t i = 0; i < c->n_subs; i++)
    ezi_sub_wake(c->subs[i]->sub);
  pthread_mutex_unlock(&c->mu);
}

void ezi_chan_ack(chan *c, uint64_t msg_id) {
  if (!c->remote) return;
  uint8_t b[9] = {EZI_RX_ACK}; /* a closed link's outbox drops it */
  ezi_put_u64le(b + 1, msg_id);
  ezi_outbox_put(c->ctx, &c->acks, b, 9);
}

/* A leaky subscriber's oldest notice, dropped to make room (c->mu held): released by
 * ezi_chan_release_drops once the deliverer (the I/O thread) holds no channel lock. */
static void drop_later(chan *c, const note *d) {
  if (c->n_drops == c->cap_drops) {
    size_t cap = c->cap_drops ? c->cap_drops * 2 : 8;
    note *v = realloc(c->drops, cap * sizeof *v);
    if (!v) { /* (rare) the message stays held until its subscriber is destroyed */
      EZI_ERROR("channel %s: out of memory dropping a leaky subscriber's message", c->id);
      return;
    }
    c->drops = v;
    c->cap_drops = cap;
  }
  c->drops[c->n_drops++] = *d;
}

void ezi_chan_release_drops(chan *c) {
  while (c->n_drops) { /* (I/O thread; c->mu not held) */
    note d = c->drops[--c->n_drops];
    ezi_chan_release(d.cs, d.msg_id);
  }
}

int ezi_chan_deliver(chan *c, uint64_t msg_id, const ezi_unmarshalled *um, uint8_t *owned,
                     size_t owned_cap, ezi_seg *seg, uint64_t now) {
  slot *s = &c->slots[msg_id % c->nslot];
  if (s->live) { /* the publisher broke backpressure: refuse, keep what subscribers hold */
    EZI_WARN_RL("channel %s: publisher reused the slot of message %llu before it was released",
                c->id, (unsigned long long)s->msg_id);
    buf_give(c, owned, owned_cap);
    return -1;
  }
  size_t holders = 0;
  for (size_t i = 0; i < c->n_subs; i++)
    holders += !c->subs[i]->gone;
  if (!holders) {
    buf_give(c, owned, owned_cap);
    return 0;
  }
  s->msg_id = msg_id;
  s->live = true;
  s->um = *um;
  s->owned = owned;
  s->owned_cap = owned_cap;
  s->seg = seg;
  if (seg) ezi_seg_ref(seg);
  /* All buffers in one pass (a walk per buffer made a message of 100 000 of them cost seconds),
   * each length read once: in shared memory the publisher may have changed them meanwhile. */
  if (um->raw_pickle && (s->iov = calloc((size_t)um->nbuf, sizeof *s->iov)) &&
      ezi_unmarshal_bufs(um, s->iov)) {
    EZI_WARN_RL("channel %s: the buffers of message %llu changed while it was read", c->id,
                (unsigned long long)msg_id);
    slot_clear(c, s);
    return -1;
  }
  uint64_t t0 = ezi_stamp_pick(&c->stamps, now); /* at high rates, only some are timed */
  for (size_t i = 0; i < c->n_subs; i++) {
    chan_sub *cs = c->subs[i];
    if (cs->gone) continue;
    note dropped;
    bool queued = ezi_sub_push(cs->sub, cs, msg_id, c->remote, &dropped);
    if (dropped.cs) drop_later(c, &dropped);
    if (!queued) continue; /* it does not hold it */
    cs->t0[msg_id % c->nslot] = t0;
    cs->in_flight++;
    s->refs++;
  }
  if (!s->refs) { /* nobody could take it after all */
    slot_clear(c, s);
    return 0;
  }
  return 1;
}

int ezi_chan_view(chan_sub *cs, uint64_t msg_id, ez_msg *m) {
  chan *c = cs->ch;
  pthread_mutex_lock(&c->mu);
  slot *s = &c->slots[msg_id % c->nslot];
  int rc = s->live && s->msg_id == msg_id ? 0 : EZ_ENOENT;
  if (!rc) {
    m->data = s->um.payload;
    m->len = s->um.payload_len;
    m->msg_id = msg_id;
    m->pub_id = c->pub_id;
    m->flags = s->um.raw_pickle ? EZ_MSG_RAW_PICKLE : 0;
    m->nbufs = s->iov ? (size_t)s->um.nbuf : 0;
    m->bufs = s->iov;
    m->ref_ = cs;
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

static void chan_destroy(chan *c);

static void destroy_task(void *arg) { chan_destroy(arg); }

void ezi_chan_sub_free(chan_sub *cs) {
  if (!cs) return;
  free(cs->t0);
  ezi_window_free(cs->proc);
  free(cs);
}

void ezi_chan_unref(chan *c) {
  pthread_mutex_lock(&c->mu);
  int left = --c->refs;
  pthread_mutex_unlock(&c->mu);
  if (left > 0) return;
  if (ezi_loop_on_thread(c->ctx->loop))
    chan_destroy(c);
  else
    ezi_loop_post(c->ctx->loop, destroy_task, c);
}

/* ezi_chan_release for a channel with slots (TCP, or TX_SHM notices). Out of line, so that the
 * call for a ring or local channel, one per message there, stays a check and a jump. */
static __attribute__((noinline)) void slot_release(chan_sub *cs, uint64_t msg_id) {
  chan *c = cs->ch;
  bool free_cs = false;
  pthread_mutex_lock(&c->mu);
  uint32_t idx = (uint32_t)(msg_id % c->nslot);
  slot *s = &c->slots[idx];
  if (cs->t0[idx] && s->live && s->msg_id == msg_id) {
    uint64_t t0 = cs->t0[idx], now = t0 == EZI_UNSTAMPED ? EZI_UNSTAMPED : ezi_tel_now();
    ezi_window_span(cs->proc, t0, now);
    cs->t0[idx] = 0;
    cs->in_flight--;
    if (--s->refs == 0) {
      slot_clear(c, s);
      /* Under c->mu: once it is unlocked, a leave on another thread may free cs and with it
       * the last reference to c. (The outbox only takes its own lock.) */
      ezi_chan_ack(c, msg_id);
    }
  }
  free_cs = cs->gone && !cs->leaving && cs->in_flight == 0;
  pthread_mutex_unlock(&c->mu);
  if (free_cs) {
    ezi_chan_sub_free(cs);
    ezi_chan_unref(c);
  }
}

void ezi_chan_release(chan_sub *cs, uint64_t msg_id) {
  if (cs->ch->ls)
    ezi_lchan_release(cs, msg_id);
  else
    slot_release(cs, msg_id);
}

/* ---- graph link ---------------------------------------------------------------------------- */

json_t *ezi_chan_profile(chan *c, double window_s) {
  uint64_t now = ezi_now_ns();
  window_s = ezi_clamp_window(window_s);
  json_t *j = json_object(), *subs = json_array();
  uint64_t in_flight = 0;
  pthread_mutex_lock(&c->mu);
  for (size_t i = 0; i < c->n_subs; i++) {
    chan_sub *cs = c->subs[i];
    uint64_t n = cs->in_flight;
    if (!c->ls) ezi_window_fold(cs->proc); /* (local: under its sub's lock) */
    json_t *sj = c->ls ? ezi_lchan_sub_json(cs, now, window_s, &n)
                       : ezi_sub_tel_json(cs->proc, ez_sub_id(cs->sub), ezi_sub_handle(cs->sub),
                                          cs->in_flight, now, window_s);
    ez_sub *sub = cs->sub;
    if (sj && sub->max_queue) { /* a leaky subscriber: what it dropped (in all, all channels) */
      json_object_set_new(sj, "max_queue", json_integer(sub->max_queue));
      json_object_set_new(
          sj, "dropped",
          json_integer((json_int_t)__atomic_load_n(&sub->dropped, __ATOMIC_RELAXED)));
    }
    json_array_append_new(subs, sj);
    in_flight += n;
  }
  const char *mode = c->mode;
  uint32_t window = c->tcp_ring ? c->lsn : 0;
  pthread_mutex_unlock(&c->mu);
  json_object_set_new(j, "type", json_string("channel"));
  json_object_set_new(j, "channel_id", json_string(c->id));
  json_object_set_new(j, "pub_id", json_string(c->pub_id));
  json_object_set_new(j, "pid", json_integer(c->ctx->pid));
  json_object_set_new(j, "num_buffers", json_integer(c->nbuf));
  json_object_set_new(j, "mode", json_string(mode));
  /* Beyond the reference: notices from an ezmsg-c publisher come through a shared ring */
  json_object_set_new(j, "shm_ring", json_boolean(c->ring_on));
  /* ... and TCP messages beyond num_buffers may be in flight (0: the protocol's window) */
  json_object_set_new(j, "tcp_window", json_integer(window));
  json_object_set_new(j, "window_s", json_real(window_s));
  json_object_set_new(j, "in_flight", json_integer((json_int_t)in_flight));
  json_object_set_new(j, "subscribers", subs);
  json_object_set_new(j, "host", json_string(c->ctx->host));
  return j;
}

/* ---- creation and destruction (I/O thread) ------------------------------------------------- */

static void chan_register(ez_context *ctx, chan *c) {
  pthread_mutex_lock(&ctx->mu);
  chan **v = realloc(ctx->chans, (ctx->n_chans + 1) * sizeof *v);
  if (v) {
    ctx->chans = v;
    ctx->chans[ctx->n_chans++] = c;
  }
  pthread_mutex_unlock(&ctx->mu);
}

/* Starts registering a channel for pub_id at the graph server; it becomes ready (or fails) later,
 * through ezi_chan_link_done. Fails at once only if the server cannot be reached at all. */
static int chan_create(ez_context *ctx, const char *pub_id, chan **out) {
  chan *c = calloc(1, sizeof *c);
  if (!c) return EZ_ENOMEM;
  c->ctx = ctx;
  snprintf(c->pub_id, sizeof c->pub_id, "%s", pub_id);
  c->mode = "unknown";
  c->pw.fd = c->gw.fd = -1;
  c->state = CH_REGISTERING;
  ezi_mutex_init(&c->mu);
  ezi_mutex_init(&c->pull_mu);
  pthread_cond_init(&c->cv, NULL);
  int rc = ezi_chan_reg_start(c);
  if (rc) {
    pthread_mutex_destroy(&c->pull_mu);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
    return rc;
  }
  chan_register(ctx, c);
  *out = c;
  return 0;
}

int ezi_chan_link_done(chan *c, int rc) {
  pthread_mutex_lock(&c->mu);
  size_t n = c->n_subs;
  chan_sub **waiting = malloc((n ? n : 1) * sizeof *waiting);
  if (!rc && !waiting) rc = EZ_ENOMEM;
  /* A remote publisher's notices fill slots; a local channel has its ring (ls) instead. */
  if (!rc && c->local_pub)
    c->ls = ezi_lchan_ring_new(c->lsn = c->nbuf);
  else if (!rc)
    c->slots = calloc(c->nslot = c->nbuf, sizeof *c->slots);
  if (!rc && !c->ls && !c->slots) rc = EZ_ENOMEM;
  for (size_t i = 0; i < n && !rc; i++)
    if (!(c->subs[i]->t0 = calloc(c->nbuf, sizeof(uint64_t)))) rc = EZ_ENOMEM;
  c->state = rc ? CH_FAILED : CH_READY;
  if (waiting) memcpy(waiting, c->subs, n * sizeof *waiting);
  c->refs++; /* ours while the subscribers hear of it: they may leave, and UPDATEs follow */
  pthread_mutex_unlock(&c->mu);
  /* A local channel starts taking messages before its subscribers hear it is ready: a message
   * published once their creation returned must reach them. */
  if (!rc && c->local_pub && (rc = ezi_pub_set_local(c->local_pub, c))) {
    pthread_mutex_lock(&c->mu);
    c->state = CH_FAILED;
    c->local_pub = NULL;
    pthread_mutex_unlock(&c->mu);
  }
  if (rc) ezi_chan_link_close(c);
  /* Tell each waiting subscriber; on failure they leave. */
  for (size_t i = 0; waiting && i < n; i++)
    ezi_sub_join_done(waiting[i]->sub, waiting[i], rc);
  free(waiting);
  pthread_mutex_lock(&c->mu);
  int left = --c->refs;
  pthread_mutex_unlock(&c->mu);
  if (left == 0) { /* every subscriber left meanwhile */
    chan_destroy(c);
    return rc ? rc : EZ_ECLOSED;
  }
  return rc;
}

void ezi_chan_link_lost(chan *c) {
  pthread_mutex_lock(&c->mu);
  if (c->state != CH_READY) {
    pthread_mutex_unlock(&c->mu);
    return;
  }
  c->state = CH_FAILED; /* no new subscriber joins it; a new channel is made for them */
  size_t n = c->n_subs;
  chan_sub **subs = n ? malloc(n * sizeof *subs) : NULL;
  if (subs) memcpy(subs, c->subs, n * sizeof *subs);
  pthread_mutex_unlock(&c->mu);
  if (n && !subs) {
    EZI_ERROR("channel %s: out of memory; its subscribers stay on the dead link", c->id);
    return;
  }
  /* Each leaves (the last one frees the channel) and joins the publisher again later. */
  for (size_t i = 0; i < n; i++)
    ezi_sub_chan_lost(subs[i]->sub, subs[i]);
  free(subs);
}

void ezi_chan_pub_gone(chan *c) {
  pthread_mutex_lock(&c->mu);
  ez_pub *pub = c->local_pub;
  c->local_pub = NULL;
  while (c->pub_users)
    pthread_cond_wait(&c->cv, &c->mu); /* wake-ups in progress finish first */
  pthread_mutex_unlock(&c->mu);
  if (pub && c->ls) ezi_pub_hand_over(pub, &c->kept_seg, &c->kept_retired, c->kept_hot);
}

static void chan_destroy(chan *c) {
  ez_context *ctx = c->ctx;
  pthread_mutex_lock(&ctx->mu);
  for (size_t i = 0; i < ctx->n_chans; i++) {
    if (ctx->chans[i] == c) {
      ctx->chans[i] = ctx->chans[--ctx->n_chans];
      break;
    }
  }
  pthread_mutex_unlock(&ctx->mu);
  pthread_mutex_lock(&c->mu);
  ez_pub *pub = c->local_pub;
  pthread_mutex_unlock(&c->mu);
  if (pub) {
    ezi_pub_set_local(pub, NULL);
    ezi_chan_pub_gone(c);
  }
  ezi_chan_link_close(c);
  ezi_chan_graph_close(c);
  for (uint32_t i = 0; c->slots && i < c->nslot; i++)
    slot_clear(c, &c->slots[i]);
  for (uint32_t h = c->spare_head; h != c->spare_tail; h++)
    ezi_chan_buf_free(c, c->spare[h % EZI_CHAN_SPARES].p, c->spare[h % EZI_CHAN_SPARES].cap);
  ezi_chan_buf_free(c, c->big_spare, c->big_spare_cap);
  ezi_lchan_ring_free(c);
  ezi_tcpring_free(c);
  ezi_seg_unref(c->seg);
  ezi_seg_unref(c->kept_seg);
  free(c->kept_hot[0]);
  free(c->kept_hot[1]);
  ezi_seg_chain_free(c->kept_retired);
  free(c->slots);
  free(c->drops);
  free(c->ls);
  free(c->lsubs);
  free(c->subs);
  pthread_mutex_destroy(&c->pull_mu);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
}

int ezi_chan_join(ez_context *ctx, const char *pub_id, ez_sub *sub, chan_sub **out, bool *pending) {
  pthread_mutex_lock(&ctx->mu);
  chan *c = ezi_ctx_find_chan(ctx, pub_id); /* a live one: failed channels are skipped */
  pthread_mutex_unlock(&ctx->mu);
  bool fresh = false;
  if (!c) {
    int rc = chan_create(ctx, pub_id, &c);
    if (rc) return rc;
    fresh = true;
  }
  chan_sub *cs = calloc(1, sizeof *cs);
  if (cs) cs->proc = ezi_window_new();
  if (cs && c->state == CH_READY) cs->t0 = calloc(c->ls ? c->lsn : c->nslot, sizeof *cs->t0);
  chan_sub **v = cs && cs->proc && (cs->t0 || c->state != CH_READY)
                     ? realloc(c->subs, (c->n_subs + 1) * sizeof *v)
                     : NULL;
  if (!v) {
    ezi_chan_sub_free(cs);
    if (fresh) chan_destroy(c);
    return EZ_ENOMEM;
  }
  cs->ch = c;
  cs->sub = sub;
  pthread_mutex_lock(&c->mu);
  c->subs = v;
  c->subs[c->n_subs++] = cs;
  c->refs++;
  *pending = c->state == CH_REGISTERING || c->state == CH_CONNECTING;
  bool local = c->ls != NULL;
  pthread_mutex_unlock(&c->mu);
  if (local && ezi_lchan_join(c, cs)) {
    ezi_chan_leave(cs, false);
    return EZ_ENOMEM;
  }
  *out = cs;
  return 0;
}

void ezi_chan_leave(chan_sub *cs, bool release_viewed) {
  chan *c = cs->ch;
  pthread_mutex_lock(&c->mu);
  for (size_t i = 0; i < c->n_subs; i++) {
    if (c->subs[i] == cs) {
      c->subs[i] = c->subs[--c->n_subs];
      break;
    }
  }
  bool local = c->ls != NULL;
  if (!local) cs->gone = cs->leaving = true;
  pthread_mutex_unlock(&c->mu);
  if (local) {
    ezi_lchan_leave(cs, release_viewed);
    return;
  }
  /* The subscriber stays: what it has queued is still delivered (in order, before anything a
   * later channel to the same publisher brings), and cs goes once all is released. */
  if (release_viewed) { /* the subscriber is being destroyed: its queue and views end now */
    ezi_sub_purge(cs->sub, cs, ezi_chan_release);
    for (uint32_t i = 0; cs->t0 && i < c->nslot; i++) {
      pthread_mutex_lock(&c->mu);
      uint64_t id = c->slots[i].msg_id;
      bool held = cs->t0[i] != 0;
      pthread_mutex_unlock(&c->mu);
      if (held) ezi_chan_release(cs, id);
    }
  }
  pthread_mutex_lock(&c->mu);
  cs->leaving = false;
  bool free_now = cs->in_flight == 0;
  pthread_mutex_unlock(&c->mu);
  if (free_now) {
    ezi_chan_sub_free(cs);
    ezi_chan_unref(c);
  }
}
