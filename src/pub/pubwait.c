/* A publisher's backpressure: which slots its channels still hold (leases of TCP and TX_SHM
 * channels, the local channel's and the shared rings' entries), waiting for the next one, waking
 * for releases and SYNC, and growing or replacing the segment. p->mu is held throughout. */
#include "chan/channel.h"
#include "pub/pubwait.h"
#include "pub/pubwin.h"
#include "base/shmguard.h"
#include "graph/graphio.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* ---- backpressure ------------------------------------------------------------------------- */

static void release_retired(ez_pub *p);

/* True if the local channel still holds slot idx; if its members released it, records the
 * lease's duration and forgets it (p->mu held). */
static bool local_held(ez_pub *p, uint32_t idx) {
  if (!p->local_t0[idx]) return false;
  uint64_t freed;
  if (!p->local || !ezi_lchan_slot_free(&p->local->lr, idx, &freed)) return p->local != NULL;
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
void ezi_pub_harvest_all(ez_pub *p) {
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
void ezi_pub_set_wants(ez_pub *p) {
  uint32_t w = 0;
  if (p->sync_pending || (p->waiters && p->want < 0))
    w = EZI_LWANT_ANY;
  else if (p->waiters)
    w = (uint32_t)p->want + 1;
  if (p->local) ezi_lchan_set_wants(&p->local->lr, w);
  for (size_t i = 0; i < p->n_chans; i++)
    if (p->chans[i]->mode == EZI_SEND_RING)
      __atomic_store_n(&p->chans[i]->ring.h->pub_wants, w, __ATOMIC_SEQ_CST);
}

void ezi_pub_check_sync(ez_pub *p) {
  if (!p->sync_pending) return;
  ezi_pub_set_wants(p); /* before looking: a release from now on wakes us */
  for (uint32_t i = 0; i < p->nbuf; i++)
    if (slot_busy(p, i)) return;
  if (ezi_win_busy(p)) return;
  p->sync_pending = false;
  ezi_pub_set_wants(p);
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
  if (--pc->held == 0 && pc->wanted != EZI_SEND_FRAMES && p->waiters) ezi_pub_broadcast(p);
  if (--p->leases[idx] == 0) {
    if (p->retired) release_retired(p);
    /* Wake the publisher only for the slot it waits for (or when it waits for everything). */
    if (p->waiters && (p->want < 0 || (uint32_t)p->want == idx)) ezi_pub_broadcast(p);
    ezi_pub_check_sync(p);
  }
}

void ezi_pub_ring_wake(ez_pub *p) {
  /* Whoever waits collects what it waits for when it wakes (ezi_pub_wait_slot's slot_blocked, the
   * loop of ez_pub_flush), and a pending SYNC walks every slot (ezi_pub_check_sync). Only segments
   * a grow retired have nobody else to look for them. This runs on the releaser's thread for local
   * channels: a full walk (every slot of every channel) on each wake would slow down the side that
   * is already the slower one. */
  if (p->retired) ezi_pub_harvest_all(p);
  ezi_pub_check_sync(p);
  if (p->waiters) ezi_pub_broadcast(p);
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
  pc->mode = EZI_SEND_FRAMES;    /* (its mapping goes with pc: ezi_pub_chan_free) */
  ezi_shm_unlink(pc->ring_name); /* in case the channel never mapped it */
  ezi_pub_ring_wake(p);
}

/* pc's ring mapping and memory. */
static void chan_free(pub_chan *pc) {
  ezi_ring_detach(&pc->ring);
  free(pc->t0);
  free(pc);
}

void ezi_pub_chan_free(ez_pub *p, pub_chan *pc) {
  if (p->sleep_pc == pc)
    pc->orphan = true; /* word_sleep frees it when it wakes */
  else
    chan_free(pc);
}

/* True once slot idx is free as far as the local channel and the rings can tell without a lock
 * of theirs (p->mu held; remote leases are checked by the caller). */
static bool slot_free_atomics(ez_pub *p, uint32_t idx) {
  uint64_t freed;
  if (p->local_t0[idx] && p->local && !ezi_lchan_slot_free(&p->local->lr, idx, &freed))
    return false;
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
  if (p->spin_score < SPIN_WORTH && ++p->since_probe < 32) return false;
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

/* What ezi_pub_wait_slot's loop asks, in one pass over the channels: whether slot idx is held
 * (every holder is asked, so that each release is collected), a channel switching to a ring or a
 * window holds messages, a window keeps `bytes` back, or a channel's socket is that far behind that
 * its outbox is full (context.h; p->mu held). */
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

/* The ring channel whose word the publisher may sleep on while it waits for slot idx (p->mu
 * held): the first that holds idx, when nothing but rings is waited for (no lease, no local
 * member, no switch, no window, no full outbox, no SYNC). NULL: it sleeps on p->cv. */
static pub_chan *word_chan(ez_pub *p, uint32_t idx, bool win) {
  if (!p->ctx->ring_wake || !p->running || win || p->sync_pending || p->leases[idx] ||
      local_held(p, idx) || ring_switch_waits(p))
    return NULL;
  pub_chan *w = NULL;
  for (size_t i = 0; i < p->n_chans; i++) {
    pub_chan *pc = p->chans[i];
    if (pc->mode != EZI_SEND_RING) {
      if (ezi_outbox_full(&pc->out)) return NULL;
    } else if (!w && !pc->ring_cut && !pc->word_bad && !ezi_guard_tripped(&pc->ring.tripped) &&
               ring_held(p, pc, idx)) {
      w = pc;
    }
  }
  return w;
}

/* The longest a publisher sleeps on a ring's word before it looks again: a word in a ring
 * truncated under it is woken by nobody (the next look finds the ring tripped). */
#define WORD_SLICE_NS 100000000ull

/* Sleeps on pc's word (p->mu held, dropped meanwhile) until the release of slot idx there wakes
 * it, whoever would signal p->cv does (ezi_pub_broadcast), a slice passes, or the deadline
 * (EZ_ETIMEDOUT; else 0). Only pc's channel is asked to wake it: the others' releases of idx are
 * collected at the next look. */
static int word_sleep(ez_pub *p, pub_chan *pc, uint32_t idx, uint64_t deadline) {
  if (p->local) ezi_lchan_set_wants(&p->local->lr, 0);
  for (size_t i = 0; i < p->n_chans; i++)
    if (p->chans[i]->mode == EZI_SEND_RING && p->chans[i] != pc)
      __atomic_store_n(&p->chans[i]->ring.h->pub_wants, 0, __ATOMIC_SEQ_CST);
  ezi_ring_hdr *h = pc->ring.h;
  __atomic_store_n(&h->pub_wants, idx + 1, __ATOMIC_SEQ_CST);
  __atomic_store_n(&h->pub_sleep, 1, __ATOMIC_SEQ_CST);
  uint32_t val = __atomic_load_n(&h->pub_word, __ATOMIC_SEQ_CST);
  int rc = 0;
  if (__atomic_load_n(&pc->ring.e[idx].refs, __ATOMIC_SEQ_CST)) { /* still held: the channel
                                                                   * will see pub_sleep */
    p->sleep_word = &h->pub_word;
    p->sleep_pc = pc;
    pthread_mutex_unlock(&p->mu);
    uint64_t slice = ezi_now_ns() + WORD_SLICE_NS;
    rc = ezi_futex_wait(&h->pub_word, val, slice < deadline ? slice : deadline);
    pthread_mutex_lock(&p->mu);
    p->sleep_word = NULL;
    p->sleep_pc = NULL;       /* (the ring may go now) */
    bool bad = rc == EZ_ESYS; /* (an unmapped word: this ring's channel wakes it no more) */
    if (bad || (rc == EZ_ETIMEDOUT && ezi_now_ns() < deadline)) rc = 0;
    if (pc->orphan) { /* its channel closed meanwhile and left it to this thread */
      chan_free(pc);
      return rc;
    }
    if (bad) pc->word_bad = true;
    __atomic_store_n(&h->pub_sleep, 0, __ATOMIC_SEQ_CST);
  } else {
    __atomic_store_n(&h->pub_sleep, 0, __ATOMIC_SEQ_CST);
  }
  return rc;
}

/* Waits (p->mu held) until the next slot is free and the publisher runs. The deadline is read
 * from the clock only when there is something to wait for (*deadline 0: not yet). */
int ezi_pub_wait_slot(ez_pub *p, uint64_t bytes, int timeout_ms, uint64_t *deadline) {
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
    ezi_pub_set_wants(p);
    rings_tripped(p); /* before sleeping for a slot that a truncated ring holds forever */
    int rc = 0;
    pub_chan *wc = word_chan(p, idx, win);
    if (wc) { /* only rings hold it: sleep on one's word, which its channel wakes directly */
      rc = word_sleep(p, wc, idx, *deadline);
      /* What the I/O thread does for a release that came as an RX_ACK (ezi_pub_ring_wake): a
       * release that woke the word instead may be the one a SYNC waits for. */
      ezi_pub_ring_wake(p);
      ezi_stamper_reset(&p->stamps);
    } else if (!p->running || slot_busy(p, idx) || ring_switch_waits(p) || win ||
               outbox_waits(p)) { /* releasers (or the I/O thread) know */
      rc = ezi_cond_wait(&p->cv, &p->mu, *deadline);
      ezi_stamper_reset(&p->stamps); /* the rate seen so far says nothing about the next one */
    }
    p->waiters--;
    if (win) p->win_waiters--;
    ezi_pub_set_wants(p);
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
  ezi_pub_harvest_all(p);
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
int ezi_pub_grow(ez_pub *p, uint64_t need) { return replace_seg(p, need * 2); }

/* Another process truncated our segment, so a copy into it faulted and the mapping became private
 * memory (shmguard.h): channels can no longer read what we write there. A new segment of the
 * same layout takes its place, announced as after a grow; the old one is kept, as after a grow,
 * until what was sent in it is released. p->mu held. */
__attribute__((noinline)) int ezi_pub_seg_tripped(ez_pub *p) {
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
