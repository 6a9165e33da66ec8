/* The telemetry clock: the time stamps of the message path (lease, notice, release and ack
 * times), in CLOCK_MONOTONIC nanoseconds, read from the CPU's time-stamp counter where that is
 * safe, because the vDSO's clock_gettime is the largest single cost of telemetry at millions of
 * messages per second (27 ns a read here, against 10 ns for a plain RDTSC that the CPU can
 * overlap with other work).
 *
 * When it is used: x86-64, and the kernel's own clocksource is "tsc" (the kernel checked that the
 * counter is invariant and synchronised across CPUs; a VM whose counter is not trusted runs on
 * kvm-clock or the like, and we fall back). Otherwise, and until the first calibration is done
 * (the first 10 ms after the first stamp), ezi_tel_now is clock_gettime(CLOCK_MONOTONIC).
 *
 * How: ns = anchor_ns + (tsc - anchor_tsc) * mult / 2^32. An anchor is a TSC value read between
 * two clock_gettime calls less than 2 us apart; mult comes from the previous anchor, at least
 * 10 ms earlier. A stamp more than 50 ms after the anchor takes a new one (one thread at a time;
 * the others meanwhile read clock_gettime). So a stamp is CLOCK_MONOTONIC to within about a
 * microsecond (anchor error plus the rate error over 50 ms; NTP slewing the monotonic clock at
 * its 500 ppm maximum would make it 25 us). Stamps from different processes are comparable to
 * the same bound, which the shared-memory ring relies on (a publisher's lease time, a receiver's
 * release time). Not strictly monotonic across a re-anchoring: users clamp negative durations to
 * zero, as they do for stamps from two processes.
 *
 * Thread safety: any thread; the mapping is a seqlock of atomics.
 *
 * With EZ_NO_TELEMETRY there is no clock read at all: ezi_tel_now returns 1, a nonzero mark (the
 * message path uses a stamp's presence to mean "held"). */
#ifndef EZI_TELCLOCK_H
#define EZI_TELCLOCK_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* Monotonic clock in nanoseconds. */
static inline uint64_t ezi_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The stamp of an event whose time was not read (sampled out, or telemetry compiled out). It is
 * nonzero, so "stamped" still means "held" on the message path. */
#define EZI_UNSTAMPED 1u

#if defined(EZ_NO_TELEMETRY)

static inline uint64_t ezi_tel_now(void) { return EZI_UNSTAMPED; }

#elif defined(__x86_64__)

/* The current mapping; written by telclock.c only. `seq` is odd while it changes; `span` 0 means
 * "no mapping" (the TSC is not used, or not calibrated yet). */
typedef struct ezi_tsc_map {
  uint64_t seq;
  uint64_t tsc, ns; /* the anchor */
  uint64_t mult;    /* ns per tick, times 2^32 */
  uint64_t span;    /* ticks after the anchor the mapping may be used for */
} ezi_tsc_map;
extern ezi_tsc_map ezi_tsc;

/* Re-anchors, calibrates or falls back (telclock.c). */
uint64_t ezi_tel_now_slow(void);

static inline uint64_t ezi_tel_now(void) {
  uint64_t t = __builtin_ia32_rdtsc();
  uint64_t s = __atomic_load_n(&ezi_tsc.seq, __ATOMIC_ACQUIRE);
  uint64_t t0 = __atomic_load_n(&ezi_tsc.tsc, __ATOMIC_RELAXED);
  uint64_t n0 = __atomic_load_n(&ezi_tsc.ns, __ATOMIC_RELAXED);
  uint64_t m = __atomic_load_n(&ezi_tsc.mult, __ATOMIC_RELAXED);
  uint64_t span = __atomic_load_n(&ezi_tsc.span, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  uint64_t d = t - t0; /* (a counter read before the anchor wraps to a huge d: the slow path) */
  if (__builtin_expect(!(s & 1) && d < span && __atomic_load_n(&ezi_tsc.seq, __ATOMIC_RELAXED) == s,
                       1))
    return n0 + (uint64_t)(((unsigned __int128)d * m) >> 32);
  return ezi_tel_now_slow();
}

#else

static inline uint64_t ezi_tel_now(void) { return ezi_now_ns(); }

#endif

/* Sampled stamps, for a publisher's messages. Up to about 16 k messages/s every message is
 * stamped. Faster, only the messages whose id is a multiple of `every` (a power of two up to
 * EZI_STAMP_MAX_EVERY) are, so that stamps come every EZI_STAMP_SPAN_NS / 2 to EZI_STAMP_SPAN_NS;
 * the others get EZI_UNSTAMPED, and with them their whole journey (the receivers take no stamp
 * when they release them), so they are counted but not timed. Durations (backpressure,
 * processing) are then averages, maxima and percentiles over the stamped messages (still some
 * 8 k a second); counts and rates stay exact. The choice is made at each stamp from the rate
 * since the previous one; ezi_stamper_reset (after the publisher waited) stamps the next one.
 *
 * An unstamped message is counted in the window bucket of the last stamp before it. So that this
 * stays true to within a fraction of a bucket when the rate drops (a publisher that slows from
 * millions a second to a few hertz without ever waiting would otherwise leave up to `every` - 1
 * messages, seconds of them, in an old bucket), a stamp also expires with its context's tick
 * (ezi_tick, below): the first message after a tick is stamped whatever `every` says.
 *
 * The choice costs a message one load and one test of its id (ezi_stamp): a stamp's expiry is the
 * tick clearing the mask, not a check per message. */
#define EZI_STAMP_MAX_EVERY 512u
#define EZI_STAMP_SPAN_NS 128000u
/* A read's stamp (ezi_stamp_pick) is taken anyway once the last one is this old. */
#define EZI_STAMP_STALE_NS 1000000u

/* A coarse clock for stamp expiry: every EZI_TICK_NS it clears the mask of the stampers attached
 * to it and advances `n`, but only while they use it (a sampled stamp was taken since the last
 * advance), so an idle process does not wake for it. One per context, driven by a timer of its
 * I/O loop (stamptick.c). */
#define EZI_TICK_NS 50000000ull
struct ezi_loop;
struct ezi_stamper;
typedef struct ezi_tick {
  uint32_t n;     /* atomic: how many times it advanced */
  uint32_t used;  /* atomic: a sampled stamp was taken since the last advance */
  uint32_t armed; /* atomic: the timer runs, or its start is posted */
  struct ezi_loop *loop;
  pthread_mutex_t mu;        /* guards the list of attached stampers */
  struct ezi_stamper *first; /* that list */
} ezi_tick;

/* A tick driven by loop's timers (the caller frees it with ezi_tick_free after the loop stopped
 * and every stamper was detached), or NULL when out of memory. loop may be NULL if the tick is
 * only ever advanced by hand (tests). */
ezi_tick *ezi_tick_new(struct ezi_loop *loop);
void ezi_tick_free(ezi_tick *k);
/* A sampled stamp was taken (its mask stored): makes sure that the tick advances within 2 *
 * EZI_TICK_NS (starting the timer if it is stopped). Any thread; a system call at most once per
 * stop of the timer. */
void ezi_tick_note(ezi_tick *k);
/* Expires the stamps of every attached stamper (their next call is stamped) and advances n: what
 * the timer does each period while stampers use the tick. Any thread. */
void ezi_tick_advance(ezi_tick *k);

typedef struct ezi_stamper {
  uint64_t mask;    /* atomic: ids with (id & mask) != 0 are not stamped (0: the next one is) */
  uint64_t last;    /* the last stamp (0: none yet) */
  uint64_t last_id; /* the id it was taken for */
  uint32_t every;   /* mask + 1 */
  uint32_t left;    /* ezi_stamp_pick's: calls until the next stamp (<= 1: this one) */
  uint64_t picks;   /* ezi_stamp_pick's calls */
  ezi_tick *tick;   /* the tick its stamps expire with (NULL: none) */
  struct ezi_stamper *prev, *next; /* in tick's list (k->mu) */
} ezi_stamper;

/* Attaches st to tick k: its stamps expire with k's advances from now on. st must be detached
 * (ezi_stamper_detach) before it is freed. Any thread. */
void ezi_stamper_attach(ezi_stamper *st, ezi_tick *k);
/* Detaches st from its tick, if any: no advance touches it after this returns. Any thread. */
void ezi_stamper_detach(ezi_stamper *st);

/* A stamp was taken at `now` for message `id` (ezi_stamp's; ezi_stamp_pick's count their calls):
 * sets `every` from the rate since the last. */
static inline void ezi_stamper_took(ezi_stamper *st, uint64_t now, uint64_t id) {
  uint32_t every = 1;
  if (st->last && now >= st->last && id > st->last_id) {
    uint64_t per = (now - st->last) / (id - st->last_id); /* ns per message */
    while (every < EZI_STAMP_MAX_EVERY && per * every * 2 <= EZI_STAMP_SPAN_NS)
      every *= 2;
  }
  st->last = now;
  st->last_id = id;
  st->every = every;
}

/* ezi_stamp's slow path (telclock.c): reads the clock and chooses the next stamps. */
uint64_t ezi_stamp_take(ezi_stamper *st, uint64_t id);

/* Message id's stamp: the clock, or EZI_UNSTAMPED. Ids must grow by one per call. Inline is only
 * the common case, which runs for every message published: one load and a test. Owner thread. */
static inline uint64_t ezi_stamp(ezi_stamper *st, uint64_t id) {
#ifdef EZ_NO_TELEMETRY
  (void)st;
  (void)id;
  return EZI_UNSTAMPED;
#else
  if (__builtin_expect((id & __atomic_load_n(&st->mask, __ATOMIC_RELAXED)) != 0, 1))
    return EZI_UNSTAMPED;
  return ezi_stamp_take(st, id);
#endif
}

/* Whether ezi_stamp would leave message id unstamped (tests). */
static inline bool ezi_stamper_skips(const ezi_stamper *st, uint64_t id) {
  return (id & __atomic_load_n(&st->mask, __ATOMIC_RELAXED)) != 0;
}

/* The same choice where a stamp `now` was read anyway (one per batch of frames read from a
 * socket): `now` for the messages to time, EZI_UNSTAMPED for the others. The frames of one read
 * share `now`: only the first of them may be stamped, since two stamps at the same time would
 * read as an infinite rate (and, at 200 messages/s, leave the next `every` - 1 unstamped and
 * counted in a bucket seconds old). A stamp more than EZI_STAMP_STALE_NS old is renewed whatever
 * `every` says: after the rate drops, unstamped messages are not counted in a bucket long gone by.
 */
static inline uint64_t ezi_stamp_pick(ezi_stamper *st, uint64_t now) {
  st->picks++;
  bool stale = now > st->last && now - st->last > EZI_STAMP_STALE_NS;
  if (now == EZI_UNSTAMPED || now == st->last || (st->left > 1 && !stale)) {
    if (st->left > 1) st->left--;
    return EZI_UNSTAMPED;
  }
  ezi_stamper_took(st, now, st->picks);
  st->left = st->every;
  return now;
}

/* The next message is stamped (ezi_stamp's and ezi_stamp_pick's). Owner thread. */
static inline void ezi_stamper_reset(ezi_stamper *st) {
  __atomic_store_n(&st->mask, 0, __ATOMIC_RELAXED);
  st->left = 0;
}

#endif
