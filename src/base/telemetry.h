/* Sliding-window telemetry: the constant-time, constant-memory counterpart of the reference's
 * SlidingWindow (which keeps every event in a deque), plus the JSON snapshots built from it.
 *
 * A window is a ring of EZI_WINDOW_BUCKETS time buckets of EZI_WINDOW_BUCKET_NS each, covering
 * the last EZ_PROFILE_MAX_WINDOW_S seconds (plus one bucket of slack). Every bucket keeps the
 * count, the (saturating) sum and the maximum of the values recorded in its time span, and a
 * log-scale histogram of them (EZI_WINDOW_SUBBINS bins per power of two) from which percentiles
 * are estimated. A bucket remembers which time span ("epoch" = now_ns / bucket width) it holds,
 * so stale buckets are recognised by their epoch and reused lazily: nothing is ever swept, an idle
 * gap of any length costs nothing, and no old data survives it.
 *
 * Values are non-negative integers: durations in ns, or byte counts. An event may also come
 * without a value (ezi_window_tally: a message whose time was not stamped, telclock.h): it counts
 * in `count` and nowhere else, so averages and percentiles are over the `timed` events only.
 *
 * Accuracy
 * - Time: a query over (now - W, now] counts the bucket holding `now` plus every older bucket
 *   whose midpoint lies inside the window (start + width/2 > now - W). So for W >= width/2 an
 *   event more than half a bucket width (50 ms) inside the window is always counted and one more
 *   than half a bucket width outside never is; in between it depends on where the bucket boundary
 *   falls. The span summarised is W +- width/2. For W < width/2 it is just the current bucket
 *   (events up to one width old).
 * - count, sum, max and avg are exact over the buckets counted (sums saturate at UINT64_MAX).
 * - p50 / p99 are nearest-rank percentiles (the ceil(p*n)-th smallest value). The estimate is
 *   the geometric midpoint of the value's histogram bin, capped at the exact max, so its relative
 *   error is at most 2^(1/8) - 1 (about 9.1%) for values below 2^47.75 (~2.5e14: about 2.9 days
 *   in ns, 250 TB in bytes); 0 is exact; larger values all share the top bin, reported as the max.
 *
 * Thread safety: none. A window is plain data; its owner serialises add and query (holds its own
 * lock, or uses it from a single thread).
 *
 * With EZ_NO_TELEMETRY defined, ezi_window is an empty shell, ezi_window_init/ezi_window_add are
 * inline no-ops (the hot path pays nothing) and queries / JSON snapshots report zeros.
 */
#ifndef EZI_TELEMETRY_H
#define EZI_TELEMETRY_H

#include "ezmsg/ezmsg.h"
#include "base/telclock.h"

#include <jansson.h>
#include <stdint.h>
#include <string.h>

/* Bucket width and count: 101 buckets of 100 ms cover 10 s plus the partly filled current one. */
#define EZI_WINDOW_BUCKET_NS 100000000ull
#define EZI_WINDOW_BUCKETS 101u
/* Histogram shape: bin 0 holds zeros; then EZI_WINDOW_SUBBINS bins per power of two for values in
 * [1, 2^EZI_WINDOW_OCTAVES); the last bin also takes everything larger. */
#define EZI_WINDOW_SUBBINS 4u
#define EZI_WINDOW_OCTAVES 48u
#define EZI_WINDOW_BINS (1u + EZI_WINDOW_SUBBINS * EZI_WINDOW_OCTAVES)

/* The summary of one window query. Durations stay in the unit they were recorded in (ns). */
typedef struct ezi_window_stats {
  uint64_t count;  /* events in the window, tallies included */
  uint64_t timed;  /* those recorded with a value (ezi_window_add) */
  double sum;      /* the sum of the values recorded (add and count, not tally) */
  double avg;      /* sum / timed (0 if nothing was timed) */
  double max;      /* largest value timed (0 if none) */
  double p50, p99; /* nearest-rank percentile estimates over the timed values (see Accuracy) */
  double window_s; /* the window actually asked for, after ezi_clamp_window */
} ezi_window_stats;

#ifndef EZ_NO_TELEMETRY

/* One time bucket: 808 bytes. */
typedef struct ezi_window_bucket {
  uint64_t epoch; /* which bucket-width time span this holds (now_ns / EZI_WINDOW_BUCKET_NS) */
  uint64_t sum;   /* saturating */
  uint64_t max;
  uint32_t count; /* events */
  uint32_t timed; /* events with a value in sum, max and hist */
  uint32_t hist[EZI_WINDOW_BINS];
} ezi_window_bucket;

/* A sliding window: fixed size (EZI_WINDOW_BUCKETS * 808 bytes, about 80 KiB), no heap memory,
 * may be embedded in other structs. All-zero bytes is a valid empty window. */
typedef struct ezi_window {
  uint64_t cur_start; /* the newest bucket's span starts here (ns) ... */
  uint32_t cur;       /* ... and this is its index: updates within it skip the arithmetic */
  uint64_t pending;   /* events counted by ezi_window_span without a time, not folded in yet */
  ezi_window_bucket buckets[EZI_WINDOW_BUCKETS];
} ezi_window;

/* Empties the window (equivalent to zero-filling it). */
void ezi_window_init(ezi_window *w);

/* A new empty window on the heap (the caller frees it with ezi_window_free), or NULL when out of
 * memory. Publishers and channels keep their windows apart from their own structs: 80 KiB
 * embedded would make those structs page-aligned mmap blocks, laid out differently in the builds
 * with and without telemetry. The allocation starts and ends on a cache-line boundary, so the
 * counter an unstamped event increments (`pending`) shares its line with nothing another thread
 * writes: the owner's structs are then laid out alike with telemetry compiled in and out. */
ezi_window *ezi_window_new(void);
void ezi_window_free(ezi_window *w);

/* The recording half is inline: it runs a few times per message. */

/* x >= T[j] (x normalised so its top bit is set) <=> x / 2^63 >= 2^(j/4); rounded up, so the
 * comparison is exact for integers. */
#define EZI_T1 0x9837f0518db8a970ull
#define EZI_T2 0xb504f333f9de6485ull
#define EZI_T3 0xd744fccad69d6af5ull

_Static_assert(EZI_WINDOW_SUBBINS == 4, "ezi_window_bin() is written for 4 bins per power of two");

/* The histogram bin of a value: 0 for 0, else 1 + 4*floor(log2 v) + floor(4*frac(log2 v)),
 * capped at the last bin. */
static inline unsigned ezi_window_bin(uint64_t v) {
  if (v == 0) return 0;
  unsigned k = 63u - (unsigned)__builtin_clzll(v);
  if (k >= EZI_WINDOW_OCTAVES) return EZI_WINDOW_BINS - 1;
  uint64_t x = v << (63u - k);
  unsigned sub = (unsigned)(x >= EZI_T1) + (unsigned)(x >= EZI_T2) + (unsigned)(x >= EZI_T3);
  return 1u + k * EZI_WINDOW_SUBBINS + sub;
}

/* The bucket for time now_ns, emptied first if it held an older span; NULL if now_ns is older
 * than the ring. */
static inline ezi_window_bucket *ezi_window_bucket_at(ezi_window *w, uint64_t now_ns) {
  if (__builtin_expect(now_ns - w->cur_start < EZI_WINDOW_BUCKET_NS, 1)) /* (unsigned: not older) */
    return &w->buckets[w->cur];
  uint64_t epoch = now_ns / EZI_WINDOW_BUCKET_NS;
  uint32_t i = (uint32_t)(epoch % EZI_WINDOW_BUCKETS);
  ezi_window_bucket *b = &w->buckets[i];
  if (b->epoch != epoch) {
    if (b->epoch > epoch) return NULL; /* older than the ring: its slot holds newer data */
    memset(b, 0, sizeof *b);           /* a stale bucket (any age): reuse it */
    b->epoch = epoch;
  }
  if (now_ns >= w->cur_start) { /* the newest bucket now */
    w->cur_start = epoch * EZI_WINDOW_BUCKET_NS;
    w->cur = i;
  }
  return b;
}

/* As ezi_window_add for a window queried only for its count and sum (no max, no percentiles):
 * half the work, for the publisher's per-message count of messages and bytes. */
static inline void ezi_window_count(ezi_window *w, uint64_t now_ns, uint64_t value) {
  ezi_window_bucket *b = ezi_window_bucket_at(w, now_ns);
  if (!b) return;
  b->count++;
  if (__builtin_add_overflow(b->sum, value, &b->sum)) b->sum = UINT64_MAX;
}

/* Records one event of `value` at monotonic time now_ns. O(1): at most one bucket is reset. An
 * event older than the current bucket is still filed in its own bucket; one older than the ring
 * holds (by more than ~10 s) is dropped. Neither corrupts anything. */
static inline void ezi_window_add(ezi_window *w, uint64_t now_ns, uint64_t value) {
  ezi_window_bucket *b = ezi_window_bucket_at(w, now_ns);
  if (!b) return;
  b->count++;
  b->timed++;
  if (__builtin_add_overflow(b->sum, value, &b->sum)) b->sum = UINT64_MAX;
  if (value > b->max) b->max = value;
  b->hist[ezi_window_bin(value)]++;
}

/* Counts n events without a value or a time of their own (events whose time was not stamped,
 * see EZI_UNSTAMPED; their owner counted them in a plain counter meanwhile, which costs less per
 * event than a window): they go into the bucket of the window's newest stamped event. At rates
 * where stamps are sampled that bucket is microseconds old, except for the few events after a
 * pause, before the next stamp (at most EZI_STAMP_MAX_EVERY - 1 of them). With a sum of their
 * values (messages and their bytes), or without. */
static inline void ezi_window_tally_n(ezi_window *w, uint64_t n, uint64_t sum) {
  ezi_window_bucket *b = &w->buckets[w->cur];
  b->count += (uint32_t)n;
  if (__builtin_add_overflow(b->sum, sum, &b->sum)) b->sum = UINT64_MAX;
}

/* Moves the events counted in *pending into the window (before a query, or before a stamped
 * event is added). */
static inline void ezi_window_fold(ezi_window *w) {
  if (w->pending) ezi_window_tally_n(w, w->pending, 0);
  w->pending = 0;
}

/* n durations without a time (as ezi_window_span with EZI_UNSTAMPED, n times). */
static inline void ezi_window_pend(ezi_window *w, uint64_t n) { w->pending += n; }

/* A duration from stamp t0 to stamp t1. If either is EZI_UNSTAMPED the event is only counted, in
 * w->pending, until the next timed one or a query folds it in; t1 < t0 (stamps of two processes)
 * counts as 0. */
static inline void ezi_window_span(ezi_window *w, uint64_t t0, uint64_t t1) {
  if (t0 == EZI_UNSTAMPED || t1 == EZI_UNSTAMPED) {
    w->pending++;
    return;
  }
  ezi_window_fold(w);
  ezi_window_add(w, t1, t1 > t0 ? t1 - t0 : 0);
}

#else /* EZ_NO_TELEMETRY */

typedef struct ezi_window {
  char unused;
} ezi_window;

/* Compiled out: no-ops, and a window of one byte. */
static inline void ezi_window_init(ezi_window *w) { (void)w; }
ezi_window *ezi_window_new(void);
void ezi_window_free(ezi_window *w);
static inline void ezi_window_add(ezi_window *w, uint64_t now_ns, uint64_t value) {
  (void)w;
  (void)now_ns;
  (void)value;
}
static inline void ezi_window_count(ezi_window *w, uint64_t now_ns, uint64_t value) {
  (void)w;
  (void)now_ns;
  (void)value;
}
static inline void ezi_window_tally_n(ezi_window *w, uint64_t n, uint64_t sum) {
  (void)w;
  (void)n;
  (void)sum;
}
static inline void ezi_window_fold(ezi_window *w) { (void)w; }
static inline void ezi_window_pend(ezi_window *w, uint64_t n) {
  (void)w;
  (void)n;
}
static inline void ezi_window_span(ezi_window *w, uint64_t t0, uint64_t t1) {
  (void)w;
  (void)t0;
  (void)t1;
}

#endif /* EZ_NO_TELEMETRY */

/* Clamps a requested window to [0, EZ_PROFILE_MAX_WINDOW_S]: NaN and negatives give 0, anything
 * above 10 (including +inf) gives 10. */
double ezi_clamp_window(double window_s);

/* Summarises the events of the window (now_ns - window_s, now_ns] into *out (see Accuracy above
 * for which buckets count). window_s is clamped first and stored in out->window_s; a zero window
 * gives all-zero stats. Data newer than now_ns's bucket (a query with an older clock) is ignored.
 * O(EZI_WINDOW_BUCKETS * EZI_WINDOW_BINS). w may be NULL (an empty window). With
 * EZ_NO_TELEMETRY: all statistics zero, window_s still the clamped window. */
void ezi_window_query(const ezi_window *w, uint64_t now_ns, double window_s, ezi_window_stats *out);

/* JSON snapshots. Field names are the reference's (protocol.md, "Profiling"); p50_ms and p99_ms
 * are our additions beside every avg_ms / max_ms. Counts above INT64_MAX are written as
 * INT64_MAX. Each returns a new reference (the caller owns it) or NULL when out of memory. */

/* {"avg_ms", "max_ms", "p50_ms", "p99_ms", "samples"} from the stats of a window of ns
 * durations; s NULL or without samples gives zeros. */
json_t *ezi_latency_json(const ezi_window_stats *s);

/* A publisher's telemetry part:
 * {"window_s", "message_rate_hz", "byte_rate_per_s", "messages": {"total", "window"},
 *  "bytes": {"total", "window"},
 *  "backpressure": {"avg_ms", "max_ms", "p50_ms", "p99_ms", "samples", "in_flight"}}.
 * `msgs` holds one event per message whose value is its payload size in bytes (window count =
 * messages, window sum = bytes); `bp` holds buffer lease durations in ns. Either may be NULL
 * (empty). window_s is clamped; rates are the window's count (byte sum) / window_s, 0 for a zero
 * window. The caller adds "type", "id", "topic", "pid", "num_buffers" and the like. */
json_t *ezi_pub_tel_json(const ezi_window *msgs, const ezi_window *bp, uint64_t total_msgs,
                         uint64_t total_bytes, uint64_t bp_in_flight, uint64_t now_ns,
                         double window_s);

/* One entry of a channel's "subscribers":
 * {"subscriber_id", "handle", "avg_ms", "max_ms", "p50_ms", "p99_ms", "samples",
 *  "message_rate_hz", "in_flight"} from `proc`, a window of processing durations in ns (NULL:
 * empty). A NULL subscriber_id or handle is written as JSON null. window_s is clamped; the rate
 * is samples / window_s, 0 for a zero window. */
json_t *ezi_sub_tel_json(const ezi_window *proc, const char *subscriber_id, const char *handle,
                         uint64_t in_flight, uint64_t now_ns, double window_s);

#endif
