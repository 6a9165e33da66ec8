/* The in-process ring (localchan.c): a ring of message entries that one producer fills and its
 * members take from without a lock of each other's. The producer is whoever owns the ring (a
 * channel's receive mode: a publisher in this process, the puller of a shared ring, a TCP
 * window's I/O thread) and is reached through the callbacks it set (ezi_lring_ops); a member's
 * receiver (a subscriber) through the callbacks its owner set (ezi_lrecv_ops). The ring knows
 * neither channels, publishers nor subscribers: it holds their pointers for those callbacks. */
#ifndef EZI_LOCALCHAN_H
#define EZI_LOCALCHAN_H

#include "core/context.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* An entry of the ring: written by the producer before it publishes the message, read by
 * receivers after; `refs` (atomic) counts the receivers still holding it, and the last one stores
 * freed_at before it drops refs to zero. */
typedef struct lslot {
  _Alignas(64) uint64_t msg_id; /* a cache line each: neighbours are written by the other side */
  uint64_t t0, freed_at;
  const uint8_t *data;
  size_t len;
  ezi_seg *seg; /* the segment the message lives in (a reference), or NULL */
  uint32_t refs;
} lslot;

#define EZI_LWANT_ANY UINT32_MAX /* pub_wants: the producer sleeps until any entry is freed */

typedef struct ezi_lring ezi_lring;
typedef struct ezi_lrecv ezi_lrecv;

/* The ring's producer, as its owner set it (a channel's receive mode, ring/rxmode.h). */
typedef struct ezi_lring_ops {
  /* The last holder of entry idx (message msg_id) let it go at `now`; `more`: its receiver has
   * more to take at once. Whether the producer must hear of it through `wake`, which the ring
   * calls once no receiver's lock is held. Any receiver's thread, its lock held. */
  bool (*freed)(ezi_lring *r, uint32_t idx, uint64_t msg_id, uint64_t now, bool more);
  void (*wake)(ezi_lring *r, uint64_t msg_id);
  /* The lock that orders membership changes against puts, or NULL when nobody puts any more.
   * I/O thread. */
  pthread_mutex_t *(*memb_mu)(ezi_lring *r);
  /* Optional: unlocks memb_mu (else pthread_mutex_unlock), for a producer that must act on what
   * happened while it was held. I/O thread, no receiver's lock held. */
  void (*memb_unlock)(ezi_lring *r);
  /* Optional: a receiver is about to sleep, or a leaky member joined: the producer must tell of
   * its next message (a receiver's lock or the membership lock held). */
  void (*arm)(ezi_lring *r);
  /* Optional: brings what the producer put since the last pull into the ring (self: the receiver
   * that pulls, its lock held, or NULL; block: wait for another puller). True if it brought
   * anything. */
  bool (*pull)(ezi_lring *r, ezi_lrecv *self, bool block);
  /* Optional (with pull): a receiver that pulled could not signal the other members that wait
   * (it holds its own lock, not theirs): asks someone who can. Any thread. */
  void (*resignal)(ezi_lring *r);
  /* Optional: a receiver whose sources are all such rings may sleep on their producers' words,
   * which each producer wakes directly (base/futex.h), instead of on its condition variable.
   * Reads the word into *val, then asks the producer for that wake-up at its next message (in
   * that order: a wake-up after the read is never lost), and returns the word; NULL if the
   * producer cannot (a receiver's lock held). */
  uint32_t *(*arm_word)(ezi_lring *r, uint32_t *val);
  /* The producer puts holding the membership lock and trims leaky members itself as it puts; the
   * others' I/O thread trims after each batch (ezi_lchan_trim_members). */
  bool producer_trims;
  /* Messages live in the owner's buffers until released: a member that leaves still takes what
   * it had queued (a local or shared ring's messages are the publisher's). */
  bool drains;
} ezi_lring_ops;

/* The ring: set up by its owner (ezi_lchan_ring_init), which embeds it. */
struct ezi_lring {
  const ezi_lring_ops *ops;
  void *owner;        /* for the producer's callbacks (a channel) */
  const char *pub_id; /* the producer's id, given with each message taken */
  lslot *ls;          /* one entry per slot; set before any message */
  uint32_t lsn;       /* its entries */
  chan_sub **lsubs;   /* the members each new message counts (membership lock) */
  size_t n_lsubs;     /* (membership lock) */
  uint32_t n_leaky;   /* atomic, changed with lsubs: members whose receiver is leaky */
  /* Each on a cache line of its own: the producer writes `published` per message, receivers read
   * `pub_wants` per release. */
  char pad0_[64];
  uint64_t published; /* atomic: every id below has been put */
  char pad1_[64];
  uint32_t pub_wants; /* atomic: 0, the entry + 1 the producer sleeps for, or EZI_LWANT_ANY */
  char pad2_[64];
};

/* A receiver's callbacks, as its owner (a subscriber) set them. All with the receiver's lock
 * held. */
typedef struct ezi_lrecv_ops {
  /* Whether a thread sleeps for the receiver, or an fd must become readable: a new member's first
   * message must then wake it. */
  bool (*waited)(ezi_lrecv *rv);
  /* Marks the receiver ready (its fd); returns whether a thread sleeps on its condition variable,
   * to be signalled once the lock is dropped (so that it does not wake into a held lock). */
  bool (*mark_ready)(ezi_lrecv *rv);
  /* Marks it ready and signals its condition variable at once (the lock stays held). */
  void (*signal_ready)(ezi_lrecv *rv);
} ezi_lrecv_ops;

/* A receiver of ring members: a subscriber's part the ring reads and writes, under mu. */
struct ezi_lrecv {
  const ezi_lrecv_ops *ops;
  pthread_mutex_t *mu;  /* the subscriber's lock */
  pthread_cond_t *cv;   /* ... and condition variable */
  uint32_t max_queue;   /* leaky: at most this many messages wait (0: not leaky) */
  uint64_t dropped;     /* atomic, written under mu: messages a leaky receiver dropped */
  chan_sub **locals;    /* its memberships of rings */
  size_t n_locals, lrr; /* lrr: where the next take starts looking */
  size_t lpull;         /* the ring (an index of locals) the next forced pull starts at */
  uint32_t ltakes;      /* takes, counted for the forced pulls */
  bool local_recent;    /* the last message it took came from a ring */
  char pad0_[64];       /* producers read want_signal per message: a line of its own */
  uint32_t want_signal; /* atomic: a producer must signal it at its next message */
  char pad1_[64];
  /* The word whose wake-up wakes its thread asleep on producers' words (ezi_lchan_sleep): the
   * producer's with one ring, own_word with several; NULL once woken by us, or awake (atomic:
   * written under mu, read by the producer's side in ezi_lchan_word_sleeper). */
  uint32_t *sleep_word;
  uint32_t own_word; /* atomic: this receiver's own word, slept on with several rings' */
};

/* A membership of a channel: a ring's member, or a member of a channel with slots (chan/notices.c)
 * which uses the first fields only. Of a ring's member, t0, held, next, end, gone, leaving, cut
 * and proc are guarded by its receiver's lock (receivers never take a channel's lock per
 * message); of a slots member, by its channel's. */
struct chan_sub {
  chan *ch;                         /* its channel (the ring's owner) */
  ez_sub *sub;                      /* its subscriber (the receiver's owner) */
  const struct ezi_member_ops *ops; /* sub's callbacks (chan/channel.h; set at the join) */
  uint64_t *t0;                     /* notify time per slot (0: not held) */
  uint64_t in_flight;
  bool gone;     /* left its channel; freed once nothing it held is outstanding */
  bool leaving;  /* it is leaving now: the leave frees the struct itself */
  bool cut;      /* rings: its link was lost (ezi_lchan_cut); it drains, then leaves */
  bool sleeping; /* rings: its receiver's thread sleeps on its producer's word: not freed (nor
                  * its channel, nor the word) before it wakes */
  bool no_word;  /* rings: sleeping on that word failed; its receiver sleeps its own way */
  /* rings */
  ezi_lring *lr;    /* the ring it is a member of (set as it joins) */
  ezi_lrecv *rv;    /* its receiver (set at the join) */
  uint64_t next;    /* the next message id to take */
  uint64_t seen;    /* the ring's `published` when last read: the producer writes that line per
                     * message, so a receiver behind it reads it once per batch, not per message
                     * (localchan.c avail_end) */
  uint64_t end;     /* UINT64_MAX while a member; after leaving, the first id not counted for it */
  uint32_t held;    /* taken and not released yet */
  ezi_window *proc; /* processing times (telemetry.h; its own allocation, same guard) */
  /* Frees cs and its channel reference once it left and holds nothing (the owner's; no lock
   * held). */
  void (*done)(chan_sub *cs);
};

/* Sets up ring r of nbuf entries, each on a cache line of its own, for owner with producer ops
 * (0, or EZ_ENOMEM). Its entries are freed with ezi_lchan_ring_free. */
int ezi_lchan_ring_init(ezi_lring *r, uint32_t nbuf, const ezi_lring_ops *ops, void *owner,
                        const char *pub_id);
void ezi_lchan_ring_free(ezi_lring *r);

/* ---- the producer (its membership lock held: ezi_lring_ops.memb_mu) ------------------------ */
/* ezi_lchan_add: makes cs a member from the next message on (EZ_ENOMEM). ezi_lchan_start: the
 * producer starts with message next_id. */
int ezi_lchan_add(ezi_lring *r, chan_sub *cs);
void ezi_lchan_start(ezi_lring *r, uint64_t next_id);
/* ezi_lchan_add for a ring already running (takes the membership lock). I/O thread. */
int ezi_lchan_join(ezi_lring *r, chan_sub *cs);
/* Takes out of the membership the members that ezi_lchan_add put in after `from` (undoing a
 * failed start: nothing was put yet). */
void ezi_lchan_unjoin(ezi_lring *r, size_t from);
/* The producer wrote message msg_id (len payload bytes at data, in seg: the members hold a
 * reference each) into its entry; true if any member holds it now. Members waiting for a signal
 * get one: self (whose lock the caller holds: a receiver, or the I/O thread looking at a
 * subscriber) in place, others of a receiver's pull through the producer's resignal (a TCP
 * window's I/O thread signals them after the read instead, ezi_lchan_signal_all). */
bool ezi_lchan_put(ezi_lring *r, uint64_t msg_id, const uint8_t *data, size_t len, uint64_t now,
                   ezi_seg *seg, ezi_lrecv *self);
/* The first half of ezi_lchan_put: the entry is written for the members, not published yet (a TCP
 * window publishes a read's messages at once, tcpring.c). True if any member will hold it. */
bool ezi_lchan_fill(ezi_lring *r, uint64_t msg_id, const uint8_t *data, size_t len, uint64_t now,
                    ezi_seg *seg);
/* On the message path, so inline (the producer's and the receivers' hot loops call them per
 * message or per batch): */
/* Publishes every message below `end` at once (after ezi_lchan_fill). */
static inline void ezi_lchan_publish(ezi_lring *r, uint64_t end) {
  __atomic_store_n(&r->published, end, __ATOMIC_SEQ_CST);
}
/* Every id below this has been put. Any thread. */
static inline uint64_t ezi_lchan_published(const ezi_lring *r) {
  return __atomic_load_n(&r->published, __ATOMIC_SEQ_CST);
}
/* True (with the time of the last release) once no member holds entry idx. */
static inline bool ezi_lchan_slot_free(const ezi_lring *r, uint32_t idx, uint64_t *freed_at) {
  if (__atomic_load_n(&r->ls[idx].refs, __ATOMIC_SEQ_CST)) return false;
  *freed_at = r->ls[idx].freed_at;
  return true;
}
/* The message entry idx was last written for. */
static inline uint64_t ezi_lchan_msg_id(const ezi_lring *r, uint32_t idx) {
  return r->ls[idx].msg_id;
}
/* Announces what the producer is about to sleep for (0, entry + 1 or EZI_LWANT_ANY), which the
 * last release of that entry then asks it to be woken for (ezi_lring_ops.freed), and reads it. */
static inline void ezi_lchan_set_wants(ezi_lring *r, uint32_t wants) {
  __atomic_store_n(&r->pub_wants, wants, __ATOMIC_SEQ_CST);
}
static inline uint32_t ezi_lchan_wants(const ezi_lring *r) {
  return __atomic_load_n(&r->pub_wants, __ATOMIC_SEQ_CST);
}
/* Whether the producer asked to be woken for entry idx (ezi_lchan_set_wants). */
static inline bool ezi_lchan_wanted(const ezi_lring *r, uint32_t idx) {
  uint32_t w = ezi_lchan_wants(r);
  return w == EZI_LWANT_ANY || w == idx + 1;
}
/* Signals a receiver that asked for it (want_signal; takes its lock). */
void ezi_lchan_signal(ezi_lrecv *rv);
/* Signals every member that asked for it (the membership lock held). */
void ezi_lchan_signal_all(ezi_lring *r);

/* ---- leaky members ------------------------------------------------------------------------- */
/* ezi_lchan_trim drops what cs has waiting beyond its receiver's max_queue, oldest first, at most
 * EZI_LDROPS_MAX (its receiver's lock held; `publisher`: by a producer that trims as it puts,
 * holding its own lock, which needs no wake-up); the drops' segment references and wake-ups wait
 * in *d for ezi_lchan_trim_done, called with no lock held. ezi_lchan_trim_members trims every
 * leaky member (the I/O thread, after it published for them; no lock held). */
void ezi_lchan_trim(chan_sub *cs, bool publisher, ezi_ldrops *d);
void ezi_lchan_trim_done(ezi_ldrops *d);
void ezi_lchan_trim_members(ezi_lring *r);

/* ---- a member ------------------------------------------------------------------------------ */
/* cs leaves its ring: what it had not taken is released, and with release_viewed what it views
 * too. cs->done frees it once nothing is left. I/O thread. */
void ezi_lchan_leave(chan_sub *cs, bool release_viewed);
/* Releases a message taken by ezi_lchan_take. Any thread. */
void ezi_lchan_release(chan_sub *cs, uint64_t msg_id);
/* A member's link was lost (I/O thread): what it has queued is taken before anything else of its
 * receiver's (a later membership of the same producer brings later messages). */
void ezi_lchan_cut(chan_sub *cs);
/* True if a member holds nothing (none queued, none viewed). */
bool ezi_lchan_idle(chan_sub *cs);
/* What cs holds (taken and queued): its receiver's lock held. */
uint64_t ezi_lchan_in_flight(chan_sub *cs);

/* ---- the receiver (its lock held) ---------------------------------------------------------- */
/* True if a ring has a message for rv. */
bool ezi_lchan_ready(ezi_lrecv *rv);
/* Asks the producers of rv's rings for a wake-up at their next message. */
void ezi_lchan_arm(ezi_lrecv *rv);
/* A receiver's thread may sleep on its producers' words when every source it has is a ring with
 * a word (shared rings: rx/ringchan.c) and it has nothing else to wait for (the caller knows the
 * rest): on one word, or on up to EZI_LCHAN_WORDS at once (futex.h, ezi_futex_waitv).
 * ezi_lchan_arm_words asks each producer for that wake-up and fills *w with the memberships and
 * the words to sleep on; false if it cannot (the caller arms and waits its own way: producers
 * already asked wake a word nobody sleeps on once). The caller looks once more, then sleeps with
 * ezi_lchan_sleep, which drops rv's lock meanwhile and keeps each membership, its channel and its
 * word alive until it wakes: when a producer wakes its word, when ezi_lchan_wake_word does, after
 * at most a second (a word in a mapping that another process truncated is woken by nobody: the
 * receiver then looks again, and finds the ring broken), or at the deadline (EZ_ETIMEDOUT; else
 * 0). A word that cannot be slept on (unmapped) makes the memberships slept on with it wait their
 * receiver's own way from then on. With several rings the receiver's own word is slept on too, and
 * what else wakes it (ezi_lchan_wake_word) wakes that word, not a producer's: a ring truncated
 * under the sleep cannot swallow it, and the producer's other sleepers are not woken for it. */
#define EZI_LCHAN_WORDS 64
typedef struct {
  size_t n;       /* memberships: cs[0..n), their words word[0..n) */
  size_t n_words; /* words slept on: n, or n + 1 (word[n]: the receiver's own) */
  chan_sub *cs[EZI_LCHAN_WORDS];
  uint32_t *word[EZI_LCHAN_WORDS + 1];
  uint32_t val[EZI_LCHAN_WORDS + 1];
} ezi_lwords;
bool ezi_lchan_arm_words(ezi_lrecv *rv, ezi_lwords *w);
int ezi_lchan_sleep(ezi_lrecv *rv, ezi_lwords *w, uint64_t deadline);
/* Wakes rv's thread if it sleeps on a producer's word: whoever signals rv's condition variable
 * calls it too, holding rv's lock (which keeps the word alive). */
void ezi_lchan_wake_word(ezi_lrecv *rv);
/* Whether rv's thread sleeps on its producer's word now (any thread; a hint: it may just have
 * been woken, or be about to sleep). Such a receiver needs no other wake-up from the producer. */
static inline bool ezi_lchan_word_sleeper(const ezi_lrecv *rv) {
  return __atomic_load_n(&rv->sleep_word, __ATOMIC_RELAXED) != NULL;
}
/* Takes the next message into m (round robin over the rings). With a leaky receiver, what its
 * member has waiting beyond max_queue is dropped first, the oldest: *d gets what
 * ezi_lchan_trim_done must finish once the lock is dropped. */
bool ezi_lchan_take(ezi_lrecv *rv, ez_msg *m, ezi_ldrops *d);
/* True if a member that left or was cut still has messages to take. */
bool ezi_lchan_draining(ezi_lrecv *rv);
/* Ends the memberships rv left that still drain what they had queued (a TCP window's members keep
 * delivering that after they left): their messages and views are released. The receiver is being
 * destroyed; I/O thread, its lock not held. */
void ezi_lchan_purge(ezi_lrecv *rv);

#endif
