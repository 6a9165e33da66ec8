/* Publishing: a message into the next slot of the segment, then to every channel in its send mode
 * (pubstate.h: a frame on its socket, an entry of its shared ring, or a frame in its TCP window)
 * and to the local channel; loans, flush, and the traces of publishing. */
#include "chan/channel.h"
#include "pub/pubwait.h"
#include "pub/pubhot.h"
#include "pub/pubwin.h"
#include "base/futex.h"

#include <string.h>

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
  ezi_pub_set_wants(p);
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
   * plain one first, so that a receiver that is awake costs no write to the shared line. A
   * receiver that sleeps on the ring's word is woken here directly (shmring.h); anything else
   * asked for gets a frame, which wakes the channel's I/O thread. */
  uint32_t want = __atomic_load_n(&pc->ring.h->rx_sleep, __ATOMIC_SEQ_CST);
  if (want) want = __atomic_exchange_n(&pc->ring.h->rx_sleep, 0, __ATOMIC_SEQ_CST);
  if (want & EZI_RING_WANT_WORD) {
    uint32_t *n = &pc->ring.h->pub_wakes;
    __atomic_store_n(n, __atomic_load_n(n, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
    ezi_futex_wake(&pc->ring.h->rx_word);
  }
  if ((want & ~EZI_RING_WANT_WORD) || pc->ring_gen != p->seg_gen) {
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
  if (p->local && ezi_lchan_put(&p->local->lr, id, ld, len, now, NULL, NULL)) {
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
  int rc = ezi_pub_wait_slot(p, bytes, timeout_ms, &deadline);
  if (!rc && EZI_UNLIKELY(__atomic_load_n(&p->seg->shm.tripped, __ATOMIC_RELAXED)) &&
      !(rc = ezi_pub_seg_tripped(p)))
    rc = ezi_pub_wait_slot(p, bytes, timeout_ms, &deadline); /* the lock was dropped */
  /* Python's reader wants the message strictly smaller than the data block. */
  if (!rc && bytes >= ezi_seg_room(p->seg)) {
    rc = ezi_pub_grow(p, bytes + 1);
    if (!rc)
      rc = ezi_pub_wait_slot(p, bytes, timeout_ms, &deadline); /* the grow dropped the lock */
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
  ezi_pub_harvest_all(p);
  while (!rc && p->in_flight && !p->closing) {
    p->waiters++;
    p->want = -1;
    ezi_pub_set_wants(p);
    ezi_pub_harvest_all(p); /* again, now that releasers know */
    if (p->in_flight) rc = ezi_cond_wait(&p->cv, &p->mu, deadline);
    p->waiters--;
    ezi_pub_set_wants(p);
  }
  pthread_mutex_unlock(&p->mu);
  return rc;
}
