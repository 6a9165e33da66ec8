/* The notices mode (rxmode.h): the protocol's own way for a remote publisher. Its TX_SHM frames
 * name a message in its segment and TX_TCP frames carry one; either fills the channel's slot
 * msg_id % nbuf and queues a notice to each subscriber (subscriber.c), and the slot is acked to
 * the publisher once every subscriber released it. One link may send both: a publisher sends over
 * TCP what a channel cannot map. TX_TCP bytes live in buffers the channel reuses. */
#include "chan/notices.h"
#include "base/rxbudget.h"
#include "base/shmguard.h"

#include <stdlib.h>
#include <string.h>

/* take_if's test (c->mu held, then the subscriber's): not a message this channel owns. */
static bool not_owned(chan_sub *cs, uint64_t msg_id, void *arg) {
  chan *c = arg;
  (void)cs;
  const chan_slot *sl = c->slots && c->nslot ? &c->slots[msg_id % c->nslot] : NULL;
  return !(sl && sl->live && sl->msg_id == msg_id && sl->owned);
}

void ezi_chan_drop_unowned(chan_sub *cs) {
  chan *c = cs->ch;
  uint64_t ids[64];
  size_t n;
  do { /* in place, under both locks: a receiver never sees the queue reordered */
    pthread_mutex_lock(&c->mu);
    n = cs->ops->take_if(cs->sub, cs, not_owned, c, ids, sizeof ids / sizeof ids[0]);
    pthread_mutex_unlock(&c->mu);
    for (size_t i = 0; i < n; i++)
      ezi_chan_release(cs, ids[i]);
  } while (n == sizeof ids / sizeof ids[0]);
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
static void slot_clear(chan *c, chan_slot *s) {
  buf_give(c, s->owned, s->owned_cap);
  free(s->iov);
  ezi_seg_unref(s->seg);
  *s = (chan_slot){0};
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
  chan_slot *s = &c->slots[msg_id % c->nslot];
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
    bool queued = cs->ops->push(cs->sub, cs, msg_id, c->remote, &dropped);
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
  chan_slot *s = &c->slots[msg_id % c->nslot];
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

/* rxmode.h release: the slot is acked once its last holder released it. */
static void slot_release(chan_sub *cs, uint64_t msg_id) {
  chan *c = cs->ch;
  bool free_cs = false;
  pthread_mutex_lock(&c->mu);
  uint32_t idx = (uint32_t)(msg_id % c->nslot);
  chan_slot *s = &c->slots[idx];
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
  if (free_cs) ezi_chan_sub_done(cs);
}

int ezi_notices_tcp(chan *c, uint64_t msg_id, uint64_t size, uint8_t *owned, size_t cap,
                    uint64_t now) {
  ezi_unmarshalled um;
  if (ezi_unmarshal(owned, (size_t)size, &um) || um.size != size || um.msg_id != msg_id) {
    ezi_chan_buf_free(c, owned, cap);
    return EZ_EPROTO;
  }
  pthread_mutex_lock(&c->mu);
  c->mode = "tcp";
  int took = ezi_chan_deliver(c, msg_id, &um, owned, cap, NULL, now);
  pthread_mutex_unlock(&c->mu);
  ezi_chan_release_drops(c);
  if (took < 0) return EZ_EPROTO;
  if (!took) ezi_chan_ack(c, msg_id);
  return 0;
}

/* rxmode.h frame: a TX_TCP message, copied out of the link's buffer, or a TX_SHM notice of a
 * message in the publisher's segment (mapped first if it names another one). */
static long notices_frame(chan *c, const ezi_tx_frame *f, uint64_t now) {
  if (f->cmd == EZI_X_TCP) return EZ_EPROTO; /* only in a window */
  if (f->cmd == EZI_TX_TCP) {
    size_t cap;
    int err;
    uint8_t *owned = ezi_chan_buf_take(c, f->size ? (size_t)f->size : 1, &cap, &err);
    if (!owned) return err;
    memcpy(owned, f->body, (size_t)f->size);
    int rc = ezi_notices_tcp(c, f->msg_id, f->size, owned, cap, now);
    return rc ? rc : (long)f->used;
  }
  ezi_seg *seg = c->seg; /* (the link mapped the segment the notice names) */
  ezi_unmarshalled um;
  const uint8_t *d = ezi_seg_data(seg, f->msg_id % c->nbuf);
  if (ezi_unmarshal(d, ezi_seg_room(seg), &um) || um.msg_id != f->msg_id) return EZ_EPROTO;
  if (EZI_UNLIKELY(ezi_guard_tripped(&seg->shm.tripped))) return EZ_EPROTO; /* zeros, or less */
  pthread_mutex_lock(&c->mu);
  c->mode = "shm";
  int took = ezi_chan_deliver(c, f->msg_id, &um, NULL, 0, seg, now);
  pthread_mutex_unlock(&c->mu);
  ezi_chan_release_drops(c);
  if (took < 0) return EZ_EPROTO;
  if (!took) ezi_chan_ack(c, f->msg_id);
  return (long)f->used;
}

/* rxmode.h leave: cs is marked gone (its channel no longer lists it). */
static void notices_leave(chan_sub *cs, bool release_viewed) {
  chan *c = cs->ch;
  pthread_mutex_lock(&c->mu);
  cs->gone = cs->leaving = true;
  pthread_mutex_unlock(&c->mu);
  /* The subscriber stays: what it has queued is still delivered (in order, before anything a
   * later channel to the same publisher brings), and cs goes once all is released. */
  if (release_viewed) { /* the subscriber is being destroyed: its queue and views end now */
    cs->ops->purge(cs->sub, cs, ezi_chan_release);
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
  if (free_now) ezi_chan_sub_done(cs);
}

static bool notices_idle(chan_sub *cs) {
  pthread_mutex_lock(&cs->ch->mu);
  bool idle = cs->in_flight == 0;
  pthread_mutex_unlock(&cs->ch->mu);
  return idle;
}

static json_t *notices_member_json(chan_sub *cs, uint64_t now, double window_s,
                                   uint64_t *in_flight) {
  *in_flight = cs->in_flight;
  ezi_window_fold(cs->proc);
  return cs->ops->profile(cs->sub, cs->proc, cs->in_flight, now, window_s);
}

void ezi_notices_free(chan *c) {
  for (uint32_t i = 0; c->slots && i < c->nslot; i++)
    slot_clear(c, &c->slots[i]);
  for (uint32_t h = c->spare_head; h != c->spare_tail; h++)
    ezi_chan_buf_free(c, c->spare[h % EZI_CHAN_SPARES].p, c->spare[h % EZI_CHAN_SPARES].cap);
  c->spare_head = c->spare_tail;
  ezi_chan_buf_free(c, c->big_spare, c->big_spare_cap);
  c->big_spare = NULL;
  c->big_spare_cap = 0;
}

const ezi_rx_mode ezi_rx_notices = {
    .shm_frames = true,
    .frame = notices_frame,
    .read_done = ezi_chan_wake_subs,
    .leave = notices_leave,
    .release = slot_release,
    .idle = notices_idle,
    .member_json = notices_member_json,
};
