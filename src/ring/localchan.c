/* The in-process ring: one producer and the threads of its members' receivers share it without a
 * lock between them. Its producer is a channel's receive mode (a publisher of this process, the
 * puller of a shared ring, a TCP window's I/O thread), its receivers subscribers; the ring reaches
 * them only through the callbacks they set (localchan.h), so what follows says producer and
 * receiver.
 *
 * The producer (holding its own lock, which no receiver takes on this path) fills the entry for
 * message msg_id % lsn, sets its count of holders and then publishes `published` = msg_id + 1.
 * Each member takes the ids [next, published) in order, under its own receiver's lock (which no
 * producer takes on this path either). A release drops the entry's holder count; the last one
 * stores the release time first. The producer reads that count when it needs the entry again
 * (for a publisher: pub/pubwait.c), so a release costs no lock and no wake-up unless the producer
 * sleeps for exactly that entry (pub_wants; ezi_lring_ops.freed says).
 *
 * Sleeping on either side is announced first and then checked again (store, then load, both
 * sequentially consistent, against the other side's store then load), so one of the two always
 * sees the other: the producer wakes a receiver that set want_signal, a receiver wakes a producer
 * whose pub_wants names the freed entry. Both wakes go through the sleeper's own lock. */
#include "ring/localchan.h"
#include "base/futex.h"

#include <stdlib.h>
#include <string.h>

#define SEQ __ATOMIC_SEQ_CST

int ezi_lchan_ring_init(ezi_lring *r, uint32_t nbuf, const ezi_lring_ops *ops, void *owner,
                        const char *pub_id) {
  lslot *ls = aligned_alloc(_Alignof(lslot), nbuf * sizeof *ls);
  if (!ls) return EZ_ENOMEM;
  memset(ls, 0, nbuf * sizeof *ls);
  r->ls = ls;
  r->lsn = nbuf;
  r->ops = ops;
  r->owner = owner;
  r->pub_id = pub_id;
  return 0;
}

void ezi_lchan_ring_free(ezi_lring *r) {
  free(r->ls);
  free(r->lsubs);
  r->ls = NULL;
  r->lsubs = NULL;
  r->n_lsubs = 0;
}

/* ---- producer side (its membership lock held) ------------------------------------------------ */

void ezi_lchan_start(ezi_lring *r, uint64_t next_id) {
  __atomic_store_n(&r->published, next_id, __ATOMIC_RELAXED);
}

void ezi_lchan_unjoin(ezi_lring *r, size_t from) {
  while (r->n_lsubs > from) {
    chan_sub *cs = r->lsubs[--r->n_lsubs];
    ezi_lrecv *s = cs->rv;
    pthread_mutex_lock(s->mu);
    ezi_lchan_wake_word(s);
    for (size_t j = 0; j < s->n_locals; j++)
      if (s->locals[j] == cs) s->locals[j] = s->locals[--s->n_locals];
    if (s->max_queue) __atomic_store_n(&r->n_leaky, r->n_leaky - 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(s->mu);
  }
}

int ezi_lchan_add(ezi_lring *r, chan_sub *cs) {
  chan_sub **v = realloc(r->lsubs, (r->n_lsubs + 1) * sizeof *v);
  if (!v) return EZ_ENOMEM;
  r->lsubs = v;
  ezi_lrecv *s = cs->rv;
  pthread_mutex_lock(s->mu);
  chan_sub **w = realloc(s->locals, (s->n_locals + 1) * sizeof *w);
  if (w) {
    s->locals = w;
    s->locals[s->n_locals++] = cs;
    cs->lr = r;
    cs->next = cs->seen = __atomic_load_n(&r->published, __ATOMIC_RELAXED);
    cs->end = UINT64_MAX;
    /* A receiver asleep already (or its fd) must hear of this channel's first message too. */
    if (s->ops->waited(s)) {
      __atomic_store_n(&s->want_signal, 1, SEQ);
      if (r->ops->arm) r->ops->arm(r);
    }
  }
  pthread_mutex_unlock(s->mu);
  if (!w) return EZ_ENOMEM;
  r->lsubs[r->n_lsubs++] = cs;
  if (s->max_queue) {
    __atomic_store_n(&r->n_leaky, r->n_leaky + 1, __ATOMIC_RELAXED);
    if (r->ops->arm) r->ops->arm(r); /* ezi_lchan_trim_members */
  }
  return 0;
}

/* The lock that orders membership changes against puts (ezi_lring_ops). I/O thread. */
static pthread_mutex_t *memb_mu(ezi_lring *r) { return r->ops->memb_mu(r); }

static void memb_unlock(ezi_lring *r, pthread_mutex_t *mu) {
  if (!mu) return;
  if (r->ops->memb_unlock)
    r->ops->memb_unlock(r);
  else
    pthread_mutex_unlock(mu);
}

int ezi_lchan_join(ezi_lring *r, chan_sub *cs) {
  pthread_mutex_t *mu = memb_mu(r);
  if (mu) pthread_mutex_lock(mu);
  int rc = ezi_lchan_add(r, cs);
  memb_unlock(r, mu);
  return rc;
}

/* Wakes a receiver that announced it waits (or whose fd must become readable). The condition
 * variable is signalled after s->mu is dropped: signalled under it, the receiver woke into the
 * held lock and slept again on it, two switches more per message (the caller's lock on the
 * members keeps s alive). */
void ezi_lchan_signal(ezi_lrecv *s) {
  bool wake = false;
  pthread_mutex_lock(s->mu);
  if (__atomic_load_n(&s->want_signal, __ATOMIC_RELAXED)) {
    __atomic_store_n(&s->want_signal, 0, __ATOMIC_RELAXED);
    wake = s->ops->mark_ready(s);
  }
  pthread_mutex_unlock(s->mu);
  if (wake) pthread_cond_signal(s->cv);
}

bool ezi_lchan_fill(ezi_lring *r, uint64_t msg_id, const uint8_t *data, size_t len, uint64_t now,
                    ezi_seg *seg) {
  size_t n = r->n_lsubs;
  if (n) {
    lslot *l = &r->ls[msg_id % r->lsn];
    l->msg_id = msg_id;
    l->data = data;
    l->len = len;
    l->t0 = now;
    l->freed_at = 0;
    l->seg = seg;
    if (seg) ezi_seg_ref(seg);
    __atomic_store_n(&l->refs, (uint32_t)n, __ATOMIC_RELAXED);
  }
  return n != 0;
}

bool ezi_lchan_put(ezi_lring *r, uint64_t msg_id, const uint8_t *data, size_t len, uint64_t now,
                   ezi_seg *seg, ezi_lrecv *self) {
  bool any = ezi_lchan_fill(r, msg_id, data, len, now, seg);
  size_t n = r->n_lsubs;
  __atomic_store_n(&r->published, msg_id + 1, SEQ);
  if (EZI_UNLIKELY(r->n_leaky) && r->ops->producer_trims) /* (holding the membership lock) */
    for (size_t i = 0; i < n; i++) {
      ezi_lrecv *s = r->lsubs[i]->rv;
      if (!s->max_queue) continue;
      ezi_ldrops d = {0};
      pthread_mutex_lock(s->mu); /* (lock order: the producer's, then a receiver's) */
      ezi_lchan_trim(r->lsubs[i], true, &d);
      pthread_mutex_unlock(s->mu);
      ezi_lchan_trim_done(&d);
    }
  bool delegate = false;
  for (size_t i = 0; i < n; i++) {
    ezi_lrecv *s = r->lsubs[i]->rv;
    if (!__atomic_load_n(&s->want_signal, SEQ)) continue;
    if (s == self) { /* its lock is held: signal it in place. The puller need not be its
                      * receiving thread (the I/O thread looks too, when a channel leaves). */
      __atomic_store_n(&s->want_signal, 0, __ATOMIC_RELAXED);
      s->ops->signal_ready(s);
    } else if (self) { /* a receiver pulls, holding its own lock: not another's */
      delegate = true;
    } else {
      ezi_lchan_signal(s);
    }
  }
  if (delegate) r->ops->resignal(r);
  return any;
}

void ezi_lchan_signal_all(ezi_lring *r) {
  for (size_t i = 0; i < r->n_lsubs; i++)
    if (__atomic_load_n(&r->lsubs[i]->rv->want_signal, SEQ)) ezi_lchan_signal(r->lsubs[i]->rv);
}

/* ---- receiver side ------------------------------------------------------------------------- */

static bool done_with(ezi_lrecv *s, chan_sub *cs);

/* Set once the kernel was found not to sleep on several words at once (ezi_futex_waitv): a
 * receiver of several rings then sleeps its own way. */
static int multi_words_off;

bool ezi_lchan_arm_words(ezi_lrecv *s, ezi_lwords *w) {
  size_t n = s->n_locals;
  if (!n || n > EZI_LCHAN_WORDS || (n > 1 && __atomic_load_n(&multi_words_off, __ATOMIC_RELAXED)))
    return false;
  for (size_t i = 0; i < n; i++) { /* all or none: asked for nothing before that is known */
    const chan_sub *cs = s->locals[i];
    if (cs->gone || cs->cut || cs->no_word || !cs->lr->ops->arm_word) return false;
  }
  for (size_t i = 0; i < n; i++) {
    chan_sub *cs = s->locals[i];
    w->cs[i] = cs;
    w->word[i] = cs->lr->ops->arm_word(cs->lr, &w->val[i]);
    if (!w->word[i]) return false;
  }
  w->n = w->n_words = n;
  if (n > 1) { /* what else wakes this thread wakes its own word (ezi_lchan_wake_word) */
    w->word[n] = &s->own_word;
    w->val[n] = __atomic_load_n(&s->own_word, __ATOMIC_SEQ_CST);
    w->n_words = n + 1;
  }
  return true;
}

/* The longest a receiver sleeps on a producer's word before it looks again (ezi_lchan_sleep). */
#define WORD_SLICE_NS 1000000000ull

/* A sleep on w's words failed for an unmapped word (the memberships still marked asleep, so their
 * words stay): the memberships whose own word fails alone wait their receiver's way from now on,
 * or all of them if none does (rather than try the same sleep again and again). A wait for a value
 * the word does not hold returns at once, unless the word cannot be read. */
static void unmapped_words(ezi_lwords *w) {
  size_t bad = 0;
  for (size_t i = 0; i < w->n && w->n > 1; i++)
    if (ezi_futex_wait(w->word[i], w->val[i] + 1, ezi_now_ns() + 1000000u) == EZ_ESYS) {
      w->cs[i]->no_word = true;
      bad++;
    }
  for (size_t i = 0; i < w->n && !bad; i++)
    w->cs[i]->no_word = true;
}

int ezi_lchan_sleep(ezi_lrecv *s, ezi_lwords *w, uint64_t deadline) {
  for (size_t i = 0; i < w->n; i++)
    w->cs[i]->sleeping = true; /* (cs, its channel and so the word stay: done_with) */
  __atomic_store_n(&s->sleep_word, w->word[w->n_words - 1], __ATOMIC_RELAXED);
  pthread_mutex_unlock(s->mu);
  uint64_t slice = ezi_now_ns() + WORD_SLICE_NS;
  if (slice > deadline) slice = deadline;
  int rc = w->n_words == 1 ? ezi_futex_wait(w->word[0], w->val[0], slice)
                           : ezi_futex_waitv(w->word, w->val, w->n_words, slice);
  pthread_mutex_lock(s->mu);
  __atomic_store_n(&s->sleep_word, NULL, __ATOMIC_RELAXED);
  if (rc == EZ_ENOTSUP) __atomic_store_n(&multi_words_off, 1, __ATOMIC_RELAXED);
  if (rc == EZ_ESYS) unmapped_words(w);
  if (rc == EZ_ESYS || rc == EZ_ENOTSUP || (rc == EZ_ETIMEDOUT && ezi_now_ns() < deadline))
    rc = 0; /* it looks again (only the slice passed, or it waits its own way from now on) */
  /* One by one: a membership still marked asleep is freed by nobody while the lock is dropped
   * for another's end. */
  for (size_t i = 0; i < w->n; i++) {
    chan_sub *cs = w->cs[i];
    cs->sleeping = false;
    if (done_with(s, cs)) { /* it left meanwhile, and waited for this thread to let go */
      pthread_mutex_unlock(s->mu);
      cs->done(cs);
      pthread_mutex_lock(s->mu);
    }
  }
  return rc;
}

void ezi_lchan_wake_word(ezi_lrecv *s) {
  if (!s->sleep_word) return;
  ezi_futex_wake(s->sleep_word);
  /* once is enough: the thread looks at everything when it wakes */
  __atomic_store_n(&s->sleep_word, NULL, __ATOMIC_RELAXED);
}

/* The first id cs may not take yet (s->mu held). `published` only grows, so while cs has not
 * taken all it saw last time, that is still a lower bound: the line is read again only when cs
 * would otherwise find nothing, as in Lamport's queue with cached indices. */
static uint64_t avail_end(chan_sub *cs) {
  uint64_t p = cs->seen;
  if (cs->next >= p) p = cs->seen = __atomic_load_n(&cs->lr->published, __ATOMIC_ACQUIRE);
  return p < cs->end ? p : cs->end;
}

bool ezi_lchan_ready(ezi_lrecv *s) {
  for (size_t i = 0; i < s->n_locals; i++) {
    chan_sub *cs = s->locals[i];
    if (cs->next < avail_end(cs)) return true;
    const ezi_lring_ops *ops = cs->lr->ops;
    if (ops->pull && ops->pull(cs->lr, s, false) && cs->next < avail_end(cs)) return true;
  }
  return false;
}

void ezi_lchan_arm(ezi_lrecv *s) {
  for (size_t i = 0; i < s->n_locals; i++) {
    ezi_lring *r = s->locals[i]->lr;
    if (r->ops->arm) r->ops->arm(r);
  }
}

/* A member that left, or whose link was cut, and still has messages to take (s->mu held), or
 * NULL. */
static chan_sub *draining(ezi_lrecv *s) {
  for (size_t i = 0; i < s->n_locals; i++) {
    chan_sub *cs = s->locals[i];
    if ((cs->gone || cs->cut) && cs->next < avail_end(cs)) return cs;
  }
  return NULL;
}

void ezi_lchan_cut(chan_sub *cs) {
  pthread_mutex_lock(cs->rv->mu);
  cs->cut = true;
  ezi_lchan_wake_word(cs->rv);
  pthread_mutex_unlock(cs->rv->mu);
}

bool ezi_lchan_draining(ezi_lrecv *s) { return draining(s) != NULL; }

/* The member whose message ez_recv takes next (s->mu held), or NULL: one that left or was cut
 * drains what it had queued first (a TCP ring's; a later channel to the same publisher brings
 * later messages), then round robin. */
static chan_sub *next_member(ezi_lrecv *s) {
  chan_sub *d = draining(s);
  if (d) return d;
  /* Every 32 takes, the next ring channel in turn is pulled: a busy receiver only pulls the
   * first ring it finds empty (ezi_lchan_ready stops at the first member with messages), so with
   * several rings it could leave one's publisher blocked for as long as the others keep it busy
   * (fan-in of 8 over shm: 40-120 ms at worst). */
  if (EZI_UNLIKELY(!(++s->ltakes & 31)) && s->n_locals > 1)
    for (size_t k = 0; k < s->n_locals; k++) {
      size_t i = (s->lpull + k) % s->n_locals;
      ezi_lring *r = s->locals[i]->lr;
      if (!r->ops->pull) continue;
      s->lpull = i + 1;
      r->ops->pull(r, s, false);
      break;
    }
  for (size_t k = 0; k < s->n_locals; k++) {
    size_t i = (s->lrr + k) % s->n_locals;
    if (s->locals[i]->next < avail_end(s->locals[i])) {
      s->lrr = i + 1;
      return s->locals[i];
    }
  }
  return NULL;
}

bool ezi_lchan_take(ezi_lrecv *s, ez_msg *m, ezi_ldrops *d) {
  chan_sub *cs = next_member(s);
  if (cs) {
    if (EZI_UNLIKELY(s->max_queue)) ezi_lchan_trim(cs, false, d); /* (leaves max_queue) */
    ezi_lring *r = cs->lr;
    uint64_t id = cs->next++;
    uint32_t idx = (uint32_t)(id % r->lsn);
    const lslot *l = &r->ls[idx];
    cs->t0[idx] = l->t0 ? l->t0 : 1; /* nonzero: held */
    cs->held++;
    /* ez_recv polls for the next message of a ring (subscriber.c): a TCP ring's too, measured
     * 1.03-1.07x at 64 B (pairs against not polling for it) */
    s->local_recent = true;
    *m = (ez_msg){.data = l->data, .len = l->len, .msg_id = id, .pub_id = r->pub_id, .ref_ = cs};
    return true;
  }
  return false;
}

/* Drops one holder of ring entry idx; the last one stores the release time first and gives the
 * entry back to its producer (ezi_lring_ops.freed). Returns true when the release must also wake
 * the producer, which needs r and locks no receiver's lock may be held over (slot_wake). *seg gets
 * the entry's segment reference to drop, if this was the last holder. */
static bool slot_drop(ezi_lring *r, uint32_t idx, uint64_t now, bool more, uint64_t *msg_id,
                      ezi_seg **seg) {
  lslot *l = &r->ls[idx];
  *msg_id = l->msg_id; /* read while still held: the entry is rewritten once free */
  *seg = NULL;
  ezi_seg *sg = l->seg;
  uint32_t n = __atomic_load_n(&l->refs, __ATOMIC_RELAXED);
  do {
    if (n == 1) l->freed_at = now; /* only the last holder gets here: nobody else writes it */
  } while (!__atomic_compare_exchange_n(&l->refs, &n, n - 1, true, SEQ, __ATOMIC_RELAXED));
  if (n != 1) return false;
  *seg = sg;
  return r->ops->freed(r, idx, *msg_id, now, more);
}

static void slot_wake(ezi_lring *r, uint64_t msg_id) { r->ops->wake(r, msg_id); }

/* Drops one holder of entry idx and wakes the producer if it waits for it (no lock held). */
static void slot_unref(ezi_lring *r, uint32_t idx, uint64_t now) {
  uint64_t msg_id;
  ezi_seg *seg;
  bool wake = slot_drop(r, idx, now, false, &msg_id, &seg);
  ezi_seg_unref(seg);
  if (wake) slot_wake(r, msg_id);
}

/* Takes cs out of its receiver's rings (s->mu held). */
static void unlist(ezi_lrecv *s, chan_sub *cs) {
  for (size_t i = 0; i < s->n_locals; i++)
    if (s->locals[i] == cs) s->locals[i] = s->locals[--s->n_locals];
}

/* Whether cs, which left, is done with (s->mu held): it holds nothing, and has nothing left to
 * take (a TCP ring's member drains what it had queued); then it is unlisted too. */
static bool done_with(ezi_lrecv *s, chan_sub *cs) {
  if (!cs->gone || cs->leaving || cs->sleeping || cs->held || cs->next < cs->end) return false;
  unlist(s, cs);
  return true;
}

/* Frees cs (its owner's cs->done) once it left and holds nothing (s->mu not held). */
static void maybe_free(chan_sub *cs, bool free_it) {
  if (free_it) cs->done(cs);
}

/* ---- leaky members (ez_sub_opts.leaky) ----------------------------------------------------- */

void ezi_lchan_trim(chan_sub *cs, bool publisher, ezi_ldrops *d) {
  ezi_lrecv *s = cs->rv;
  if (!s->max_queue || cs->gone || cs->cut) return;
  cs->seen = 0; /* (avail_end's cache is a lower bound: the count must be what is published) */
  uint64_t end = avail_end(cs), now = 0;
  while (end - cs->next > s->max_queue && d->n < EZI_LDROPS_MAX) {
    ezi_lring *r = cs->lr;
    uint64_t id = cs->next++, msg_id;
    if (!now) now = ezi_tel_now();
    ezi_seg *seg;
    bool wake = slot_drop(r, (uint32_t)(id % r->lsn), now, cs->next < end, &msg_id, &seg);
    /* A producer that trims as it puts holds its own lock: nobody to wake. A wake-up to come
     * keeps cs (and its channel) alive until it is done, as a release's does. */
    wake = wake && !publisher;
    if (wake) cs->held++;
    d->v[d->n++] = (ezi_ldrop){cs, msg_id, seg, wake};
    __atomic_store_n(&s->dropped, s->dropped + 1, __ATOMIC_RELAXED);
  }
}

void ezi_lchan_trim_done(ezi_ldrops *d) {
  for (size_t i = 0; i < d->n; i++) {
    ezi_ldrop *x = &d->v[i];
    ezi_seg_unref(x->seg);
    if (!x->wake) continue;
    slot_wake(x->cs->lr, x->msg_id);
    ezi_lrecv *s = x->cs->rv;
    pthread_mutex_lock(s->mu);
    x->cs->held--;
    bool free_it = done_with(s, x->cs);
    pthread_mutex_unlock(s->mu);
    maybe_free(x->cs, free_it);
  }
  d->n = 0;
}

/* The leaky members of c: trimmed, each under its own subscriber's lock, by the I/O thread that
 * just published for them (a TCP ring's read, a shared ring's pull; no lock held). A shared
 * ring's publisher is asked to notify every message while there are any (rx_sleep), so that this
 * thread pulls, and so trims, at once: a leaky subscriber busy elsewhere never pulls itself. */
void ezi_lchan_trim_members(ezi_lring *r) {
  if (!__atomic_load_n(&r->n_leaky, __ATOMIC_RELAXED)) return;
  chan_sub *v[64];
  size_t n = 0;
  pthread_mutex_t *mu = memb_mu(r);
  if (mu) pthread_mutex_lock(mu);
  for (size_t i = 0; i < r->n_lsubs && n < 64; i++)
    if (r->lsubs[i]->rv->max_queue) v[n++] = r->lsubs[i];
  if (n && r->ops->arm) r->ops->arm(r);
  memb_unlock(r, mu);
  for (size_t i = 0; i < n; i++) { /* (members join and leave on this thread only) */
    ezi_ldrops d = {0};
    pthread_mutex_lock(v[i]->rv->mu);
    ezi_lchan_trim(v[i], false, &d);
    pthread_mutex_unlock(v[i]->rv->mu);
    ezi_lchan_trim_done(&d);
  }
}

void ezi_lchan_release(chan_sub *cs, uint64_t msg_id) {
  ezi_lring *r = cs->lr;
  ezi_lrecv *s = cs->rv;
  uint32_t idx = (uint32_t)(msg_id % r->lsn);
  pthread_mutex_lock(s->mu);
  uint64_t t0 = cs->t0[idx];
  if (!t0) { /* not held: a second release of the same view */
    pthread_mutex_unlock(s->mu);
    return;
  }
  /* A message its publisher did not stamp is not timed here either (telclock.h). */
  uint64_t now = t0 == EZI_UNSTAMPED ? EZI_UNSTAMPED : ezi_tel_now();
  ezi_window_span(cs->proc, t0, now);
  cs->t0[idx] = 0;
  /* The entry is dropped under s->mu, while cs still counts it: once cs holds nothing, a leave
   * on another thread may free cs and with it the last reference to c. A wake-up that needs c
   * after the unlock keeps the count until it is done. */
  uint64_t id;
  ezi_seg *seg;
  bool wake = slot_drop(r, idx, now, cs->next < avail_end(cs), &id, &seg);
  if (!wake) cs->held--;
  bool free_it = !wake && done_with(s, cs);
  pthread_mutex_unlock(s->mu);
  ezi_seg_unref(seg);
  if (wake) {
    slot_wake(r, id);
    pthread_mutex_lock(s->mu);
    cs->held--;
    free_it = done_with(s, cs);
    pthread_mutex_unlock(s->mu);
  }
  maybe_free(cs, free_it);
}

void ezi_lchan_leave(chan_sub *cs, bool release_viewed) {
  ezi_lring *r = cs->lr;
  ezi_lrecv *s = cs->rv;
  /* A TCP ring's messages live in the channel's buffers, valid until released: what a member
   * had queued is still delivered after it left (as on a channel with slots), unless its
   * subscriber is being destroyed. A local or shared-memory ring's are the publisher's. */
  bool drain = r->ops->drains && !release_viewed;
  pthread_mutex_t *mu = memb_mu(r);
  if (mu) pthread_mutex_lock(mu);
  for (size_t i = 0; i < r->n_lsubs; i++)
    if (r->lsubs[i] == cs) {
      r->lsubs[i] = r->lsubs[--r->n_lsubs];
      if (s->max_queue) __atomic_store_n(&r->n_leaky, r->n_leaky - 1, __ATOMIC_RELAXED);
      break;
    }
  uint64_t end = __atomic_load_n(&r->published, __ATOMIC_RELAXED);
  memb_unlock(r, mu);
  pthread_mutex_lock(s->mu);
  if (!drain) unlist(s, cs);
  uint64_t from = cs->next, stop = cs->end < end ? cs->end : end; /* end 0: never a member */
  cs->end = stop;
  if (!drain) cs->next = stop;
  cs->gone = cs->leaving = true;
  ezi_lchan_wake_word(s); /* a thread asleep on its producer's word looks again */
  pthread_mutex_unlock(s->mu);
  uint64_t now = ezi_tel_now();
  for (uint64_t id = from; !drain && id < stop; id++) /* what it had not taken yet */
    slot_unref(r, (uint32_t)(id % r->lsn), now);
  if (release_viewed) /* the subscriber is being destroyed: its views end now */
    for (uint32_t i = 0; i < r->lsn; i++) {
      pthread_mutex_lock(s->mu);
      bool held = cs->t0[i] != 0;
      pthread_mutex_unlock(s->mu);
      if (held) ezi_lchan_release(cs, i); /* any id with this slot index names it */
    }
  pthread_mutex_lock(s->mu);
  cs->leaving = false;
  bool free_it = done_with(s, cs);
  pthread_mutex_unlock(s->mu);
  maybe_free(cs, free_it);
}

void ezi_lchan_purge(ezi_lrecv *s) {
  for (;;) {
    chan_sub *cs = NULL;
    pthread_mutex_lock(s->mu);
    for (size_t i = 0; i < s->n_locals && !cs; i++)
      if (s->locals[i]->gone && !s->locals[i]->leaving) cs = s->locals[i];
    pthread_mutex_unlock(s->mu);
    if (!cs) return;
    ezi_lchan_leave(cs, true);
  }
}

bool ezi_lchan_idle(chan_sub *cs) {
  pthread_mutex_lock(cs->rv->mu);
  bool idle = cs->held == 0 && cs->next >= avail_end(cs);
  pthread_mutex_unlock(cs->rv->mu);
  return idle;
}

uint64_t ezi_lchan_in_flight(chan_sub *cs) {
  cs->seen = 0; /* the count is what is published now, not what cs saw last */
  uint64_t e = avail_end(cs);
  return cs->held + (cs->next < e ? e - cs->next : 0);
}
