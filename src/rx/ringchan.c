/* Ring mode: the channel of a remote ezmsg-c publisher that notifies through a shared ring
 * (shmring.h, docs/architecture.md). The channel then works as an in-process one (localchan.c)
 * whose "publisher" is whoever pulls the ring's new entries into the channel's own ring: a
 * receiver that finds nothing (trylock; it must not wait while holding its subscriber's lock), or
 * the I/O thread when a TX_SHM frame wakes it. Whatever the ring says is checked before use. */
#include "rx/ringchan.h"
#include "base/shmguard.h"
#include "base/futex.h"

#include <stdlib.h>
#include <string.h>

#define SEQ __ATOMIC_SEQ_CST

static const ezi_lring_ops ring_producer;

/* I/O thread: signals the waiting members of every ring channel (a receiver that pulled could
 * not). Channels are created and destroyed on this thread only, so the list is stable here. */
static void resignal_task(void *arg) {
  ez_context *ctx = arg;
  __atomic_store_n(&ctx->resignal_posted, 0, SEQ);
  for (size_t i = 0; i < ctx->n_chans; i++) {
    chan *c = ctx->chans[i];
    if (c->rx != &ezi_rx_shm_ring) continue;
    pthread_mutex_lock(&c->pull_mu);
    ezi_lchan_signal_all(&c->lr);
    ezi_ringchan_unlock(c);
  }
}

static void ring_resignal(ezi_lring *r) {
  ez_context *ctx = ((chan *)r->owner)->ctx;
  if (__atomic_exchange_n(&ctx->resignal_posted, 1, SEQ)) return; /* one is on its way */
  if (ezi_loop_post(ctx->loop, resignal_task, ctx)) {
    __atomic_store_n(&ctx->resignal_posted, 0, SEQ);
    EZI_ERROR("out of memory: a subscriber waits for a message it was not told of");
  }
}

/* Whether ring channel c broke the rules (its link is to be dropped). Any thread. */
static inline bool ring_bad(const chan *c) {
  return __atomic_load_n(&c->ring_bad, __ATOMIC_RELAXED);
}

/* Gives ring entry idx back to the publisher: whether it sleeps for it and must be woken
 * (ring_wake, an RX_ACK). */
static bool ring_drop(chan *c, uint32_t idx, uint64_t now) {
  ezi_ring_entry *e = &c->ring.e[idx];
  __atomic_store_n(&e->freed_at, now, __ATOMIC_RELAXED);
  __atomic_store_n(&e->refs, 0, SEQ);
  uint32_t w = __atomic_load_n(&c->ring.h->pub_wants, SEQ);
  return w == EZI_LWANT_ANY || w == idx + 1;
}

static void ring_ack(chan *c, uint64_t msg_id) {
  uint8_t b[9] = {EZI_RX_ACK};
  ezi_put_u64le(b + 1, msg_id);
  ezi_outbox_put_now(c->ctx, &c->acks, b, sizeof b);
}

/* Wakes the publisher that sleeps for a slot we freed: on the ring's word if it sleeps there,
 * else (or if it is older) with an RX_ACK, which its I/O thread reads. */
static void ring_wake_pub(chan *c, uint64_t msg_id) {
  ezi_ring_hdr *h = c->ring.h;
  if (__atomic_load_n(&h->pub_sleep, SEQ))
    ezi_futex_wake(&h->pub_word);
  else
    ring_ack(c, msg_id);
}

static void ring_free_entry(chan *c, uint32_t idx, uint64_t msg_id, uint64_t now) {
  if (ring_drop(c, idx, now)) ring_wake_pub(c, msg_id);
}

/* The producer's freed (ezi_lring_ops): the entry goes back to the publisher through the shared
 * ring. */
static bool ring_freed(ezi_lring *r, uint32_t idx, uint64_t msg_id, uint64_t now, bool more) {
  (void)msg_id;
  (void)more;
  return ring_drop(r->owner, idx, now);
}

static void ring_wake(ezi_lring *r, uint64_t msg_id) { ring_wake_pub(r->owner, msg_id); }

static ezi_seg *gseg_find(chan *c, uint32_t gen) {
  for (size_t i = 0; i < sizeof c->gseg / sizeof c->gseg[0]; i++)
    if (c->gseg[i].seg && c->gseg[i].gen == gen) return c->gseg[i].seg;
  return NULL;
}

/* Maps generation gen to seg (pull_mu held), replacing the oldest generation if all are taken
 * (messages still held keep their own references). */
static void gseg_add(chan *c, uint32_t gen, ezi_seg *seg) {
  if (gseg_find(c, gen)) return;
  size_t k = 0;
  for (size_t i = 1; i < sizeof c->gseg / sizeof c->gseg[0]; i++)
    if (!c->gseg[i].seg || (c->gseg[k].seg && c->gseg[i].gen < c->gseg[k].gen)) k = i;
  ezi_seg_unref(c->gseg[k].seg);
  ezi_seg_ref(seg);
  c->gseg[k].gen = gen;
  c->gseg[k].seg = seg;
}

static void ring_broken(chan *c, const char *why) {
  if (!ring_bad(c))
    EZI_WARN_RL("channel %s: the shared ring of publisher %s %s; dropping the link", c->id,
                c->pub_id, why);
  __atomic_store_n(&c->ring_bad, true, __ATOMIC_RELAXED);
}

/* One pass (pull_mu held): true if it brought anything; *stuck if a message waits for its
 * segment to be attached. */
static bool pull_locked(chan *c, ezi_lrecv *self, bool *stuck) {
  bool any = false;
  uint64_t p = __atomic_load_n(&c->ring.h->published, __ATOMIC_ACQUIRE);
  uint64_t id = ezi_lchan_published(&c->lr), now = 0;
  if (ezi_guard_tripped(&c->ring.tripped))
    ring_broken(c, "was truncated under this process");
  else if (p < id || p - id > c->nbuf)
    ring_broken(c, "announced messages out of its range");
  for (; id < p && !ring_bad(c); id++) {
    uint32_t idx = (uint32_t)(id % c->nbuf);
    const ezi_ring_entry *e = &c->ring.e[idx];
    /* The publisher's memory: each word read once (a plain load), then only that is used. */
    uint32_t gen = __atomic_load_n(&e->gen, __ATOMIC_RELAXED);
    uint64_t eid = __atomic_load_n(&e->msg_id, __ATOMIC_RELAXED);
    uint64_t t0 = __atomic_load_n(&e->t0, __ATOMIC_RELAXED);
    ezi_seg *seg = gseg_find(c, gen);
    if (!seg) { /* a new segment: the I/O thread attaches it when its TX_SHM comes */
      *stuck = true;
      break;
    }
    uint64_t freed_at;
    if (!ezi_lchan_slot_free(&c->lr, idx, &freed_at)) { /* pairs with slot_drop */
      ring_broken(c, "reused a slot this process still holds");
      break;
    }
    ezi_unmarshalled um;
    if (eid != id || ezi_unmarshal(ezi_seg_data(seg, idx), ezi_seg_room(seg), &um) ||
        um.msg_id != id || um.raw_pickle) {
      ring_broken(c, ezi_guard_tripped(&seg->shm.tripped)
                         ? "names a segment that was truncated under this process"
                         : "holds a message that is not the one announced");
      break;
    }
    if (!ezi_lchan_put(&c->lr, id, um.payload, um.payload_len, t0, seg, self)) {
      if (!now) now = ezi_tel_now();
      ring_free_entry(c, idx, id, now); /* nobody to take it */
    }
    any = true;
  }
  return any;
}

static bool ring_pull(ezi_lring *r, ezi_lrecv *self, bool block) {
  chan *c = r->owner;
  bool any = false;
  for (;;) {
    if (block) {
      pthread_mutex_lock(&c->pull_mu);
    } else if (pthread_mutex_trylock(&c->pull_mu)) {
      /* Someone holds it: a puller looks again after unlocking (below), anyone else pulls then
       * because of this flag (ezi_ringchan_unlock). Tried once more after the flag is set: the
       * holder may have unlocked, and looked at it, just before. */
      __atomic_store_n(&c->pull_missed, 1, SEQ);
      if (pthread_mutex_trylock(&c->pull_mu)) return any;
    }
    if (__atomic_load_n(&c->pull_missed, SEQ)) /* this pull brings what was missed */
      __atomic_store_n(&c->pull_missed, 0, SEQ);
    bool stuck = false;
    any |= pull_locked(c, self, &stuck);
    pthread_mutex_unlock(&c->pull_mu);
    /* A receiver that found the lock taken went to sleep counting on the holder: look again
     * for what was put meanwhile (the publisher did not wake anyone for it). */
    __atomic_thread_fence(SEQ);
    if (stuck || ring_bad(c) ||
        __atomic_load_n(&c->ring.h->published, SEQ) == ezi_lchan_published(&c->lr))
      return any;
  }
}

void ezi_ringchan_unlock(chan *c) {
  pthread_mutex_unlock(&c->pull_mu);
  if (__atomic_load_n(&c->pull_missed, SEQ) && !ring_bad(c)) ring_pull(&c->lr, NULL, true);
}

/* The publisher's segment for message msg_id is now c->seg. */
static void ring_seg(chan *c, uint64_t msg_id) {
  pthread_mutex_lock(&c->pull_mu);
  const ezi_ring_entry *e = &c->ring.e[msg_id % c->nbuf];
  uint64_t eid = __atomic_load_n(&e->msg_id, __ATOMIC_RELAXED);
  uint32_t gen = __atomic_load_n(&e->gen, __ATOMIC_RELAXED);
  if (eid == msg_id && c->seg) gseg_add(c, gen, c->seg);
  pthread_mutex_unlock(&c->pull_mu); /* (its caller pulls next) */
}

int ezi_ringchan_start(chan *c, const char *name, size_t n, uint64_t start_id) {
  if (c->rx->ring || c->local_pub || !c->seg) return EZ_EPROTO;
  int rc = ezi_ring_attach(name, n, c->nbuf, &c->ring);
  if (rc) return rc;
  if (ezi_lchan_ring_init(&c->lr, c->nbuf, &ring_producer, c, c->pub_id)) {
    ezi_ring_detach(&c->ring);
    return EZ_ENOMEM;
  }
  pthread_mutex_lock(&c->pull_mu);
  c->mode = "shm";
  c->rx = &ezi_rx_shm_ring; /* (c->mu not needed: no member takes yet, nor leaves meanwhile) */
  rc = ezi_chan_ring_attach(c, start_id); /* nothing is held: the publisher waited for that */
  pthread_mutex_unlock(&c->pull_mu);
  if (rc) return rc;
  ring_pull(&c->lr, NULL, true); /* what came already */
  return 0;
}

static void ring_free(chan *c) {
  for (size_t i = 0; i < sizeof c->gseg / sizeof c->gseg[0]; i++)
    ezi_seg_unref(c->gseg[i].seg);
  ezi_ring_detach(&c->ring);
}

static void ring_arm(ezi_lring *r);

/* Asks the publisher again, at its next put, for what the members that wait asked for, and pulls
 * what came meanwhile (I/O thread): a frame for one that waits by frame, the word for one asleep
 * on the word (a publisher of ours that took its request with a put woke the word too, but an
 * older one answers any request with a frame, this one, which wakes nobody). */
static void ring_rearm(chan *c) {
  bool frames = false, words = false;
  pthread_mutex_lock(&c->pull_mu); /* (the membership lock) */
  for (size_t i = 0; i < c->lr.n_lsubs; i++) {
    const ezi_lrecv *rv = c->lr.lsubs[i]->rv;
    if (!__atomic_load_n(&rv->want_signal, SEQ)) continue;
    if (ezi_lchan_word_sleeper(rv))
      words = true;
    else
      frames = true;
  }
  pthread_mutex_unlock(&c->pull_mu);
  if (!frames && !words) return;
  if (words) __atomic_fetch_or(&c->ring.h->rx_sleep, EZI_RING_WANT_WORD, SEQ);
  if (frames) ring_arm(&c->lr);
  ring_pull(&c->lr, NULL, true); /* (its puts signal the members that wait) */
}

/* A TX_SHM wakes us up, or names the segment of a message in the ring. I/O thread. */
static long ring_frame(chan *c, const ezi_tx_frame *f, uint64_t now) {
  (void)now;
  if (f->cmd != EZI_TX_SHM || ring_bad(c)) return EZ_EPROTO;
  ring_seg(c, f->msg_id); /* (the link mapped the segment it names: c->seg) */
  bool got = ring_pull(&c->lr, NULL, true);
  /* The publisher may have consumed a newer sleep request with this frame (it stored
   * `published`, the receiver took that message itself and armed rx_sleep again, then the
   * publisher cleared it): a pull that finds nothing new would wake nobody, and the receiver
   * would sleep through every message after it. Then the request is made again for whoever
   * still waits, and the ring looked at once more: the next put is either seen here or sends a
   * frame. (Waking them instead made a subscriber's fd readable with nothing to take. A pull
   * that found messages woke every member waiting for them.) */
  if (!got) ring_rearm(c);
  ezi_lchan_trim_members(&c->lr); /* leaky subscribers' oldest go at once */
  return ring_bad(c) ? EZ_EPROTO : (long)f->used;
}

static pthread_mutex_t *ring_memb_mu(ezi_lring *r) { return &((chan *)r->owner)->pull_mu; }
static void ring_memb_unlock(ezi_lring *r) { ezi_ringchan_unlock(r->owner); }

/* A receiver goes to sleep, or a leaky member joined: the publisher is asked to send a TX_SHM for
 * its next message. */
static void ring_arm(ezi_lring *r) {
  __atomic_fetch_or(&((chan *)r->owner)->ring.h->rx_sleep, EZI_RING_WANT_FRAME, SEQ);
}

/* A receiver with this ring alone goes to sleep: the publisher is asked to wake it through the
 * ring's word at its next message (shmring.h), with no frame and no I/O thread in between. */
static uint32_t *ring_arm_word(ezi_lring *r, uint32_t *val) {
  chan *c = r->owner;
  if (!c->ctx->ring_wake || ring_bad(c) || ezi_guard_tripped(&c->ring.tripped)) return NULL;
  ezi_ring_hdr *h = c->ring.h;
  /* The word first, then the request: a put that takes this request bumps the word after *val
   * was read. (The other way round, a late put, of a message the receiver took already, could
   * take the new request and bump the word in between: the sleep would start from the bumped
   * value with no request left.) */
  *val = __atomic_load_n(&h->rx_word, SEQ);
  __atomic_fetch_or(&h->rx_sleep, EZI_RING_WANT_WORD, SEQ);
  return &h->rx_word;
}

static const ezi_lring_ops ring_producer = {
    .freed = ring_freed,
    .wake = ring_wake,
    .memb_mu = ring_memb_mu,
    .memb_unlock = ring_memb_unlock,
    .arm = ring_arm,
    .arm_word = ring_arm_word,
    .pull = ring_pull,
    .resignal = ring_resignal,
};

const ezi_rx_mode ezi_rx_shm_ring = {
    .ring = true,
    .shared_ring = true,
    .shm_frames = true,
    .frame = ring_frame,
    .read_done = ezi_chan_wake_subs,
    .free = ring_free,
    EZI_RING_MEMBER_OPS,
    .producer = &ring_producer,
};
