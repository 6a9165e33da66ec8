/* Sliding windows and the telemetry JSON snapshots, with an injected clock (every call is given
 * its now_ns). Built with EZ_NO_TELEMETRY, checks that everything reports zeros instead. */
#include "harness.h"
#include "base/internal.h"
#include "base/telemetry.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define MS 1000000ull
#define SEC 1000000000ull
#define T0 (1000 * SEC) /* a bucket-aligned base time */
#define HALF (EZI_WINDOW_BUCKET_NS / 2)
#define PCT_ERR 0.0906                 /* 2^(1/8) - 1, rounded up */
#define UNUSED __attribute__((unused)) /* helpers the EZ_NO_TELEMETRY build does not need */

UNUSED static int setup_window(void **state) {
  ezi_window *w = malloc(sizeof *w);
  if (!w) return -1;
  ezi_window_init(w);
  *state = w;
  return 0;
}

UNUSED static int teardown_window(void **state) {
  free(*state);
  return 0;
}

static ezi_window_stats query(const ezi_window *w, uint64_t now, double window_s) {
  ezi_window_stats s;
  memset(&s, 0xa5, sizeof s); /* the query must fill every field */
  ezi_window_query(w, now, window_s, &s);
  return s;
}

UNUSED static void assert_near(double got, double want, double tol) {
  if (!(fabs(got - want) <= tol)) fail_msg("got %.17g, want %.17g (+- %g)", got, want, tol);
}

/* A percentile estimate against the true value: within the stated relative error. */
UNUSED static void assert_pct(double est, double truth) {
  if (truth == 0) {
    assert_true(est == 0);
    return;
  }
  if (!(fabs(est - truth) <= PCT_ERR * truth))
    fail_msg("estimate %.17g vs true %.17g: %.2f%% off", est, truth,
             100 * fabs(est - truth) / truth);
}

static void assert_zero_stats(const ezi_window_stats *s) {
  assert_true(s->count == 0);
  assert_true(s->sum == 0 && s->avg == 0 && s->max == 0 && s->p50 == 0 && s->p99 == 0);
}

/* Deterministic pseudo-random numbers (xorshift64*). */
static uint64_t rng_state = 88172645463325252ull;
UNUSED static uint64_t rnd(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ull;
}
UNUSED static uint64_t rnd_below(uint64_t n) { return rnd() % n; }

UNUSED static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* ---- JSON helpers --------------------------------------------------------------------------- */

/* obj has exactly these keys. */
static void assert_keys(const json_t *obj, const char *const *keys, size_t n) {
  assert_true(json_is_object(obj));
  for (size_t i = 0; i < n; i++)
    if (!json_object_get(obj, keys[i])) fail_msg("missing key \"%s\"", keys[i]);
  assert_int_equal(json_object_size(obj), n);
}

static double jnum(const json_t *obj, const char *key) {
  const json_t *v = json_object_get(obj, key);
  if (!json_is_number(v)) fail_msg("\"%s\" is not a number", key);
  return json_number_value(v);
}

static json_int_t jint(const json_t *obj, const char *key) {
  const json_t *v = json_object_get(obj, key);
  if (!json_is_integer(v)) fail_msg("\"%s\" is not an integer", key);
  return json_integer_value(v);
}

/* Serialises and parses back, as a consumer would see it. */
static json_t *roundtrip(json_t *j) {
  assert_non_null(j);
  char *text = json_dumps(j, JSON_COMPACT);
  assert_non_null(text);
  json_decref(j);
  json_error_t err;
  json_t *back = json_loads(text, 0, &err);
  free(text);
  assert_non_null(back);
  return back;
}

static const char *const latency_keys[] = {"avg_ms", "max_ms",  "p50_ms",
                                           "p99_ms", "samples", "timed_samples"};
static const char *const pub_keys[] = {"window_s", "message_rate_hz", "byte_rate_per_s",
                                       "messages", "bytes",           "backpressure"};
UNUSED static const char *const total_window_keys[] = {"total", "window"};
UNUSED static const char *const bp_keys[] = {"avg_ms",  "max_ms",        "p50_ms",   "p99_ms",
                                             "samples", "timed_samples", "in_flight"};
static const char *const sub_keys[] = {"subscriber_id",   "handle",   "avg_ms",  "max_ms",
                                       "p50_ms",          "p99_ms",   "samples", "timed_samples",
                                       "message_rate_hz", "in_flight"};
#define NKEYS(a) (sizeof(a) / sizeof(a[0]))

/* ---- common to both builds ------------------------------------------------------------------ */

static void test_clamp(void **state) {
  (void)state;
  assert_true(ezi_clamp_window(-1) == 0);
  assert_true(ezi_clamp_window(-INFINITY) == 0);
  assert_true(ezi_clamp_window(NAN) == 0);
  assert_true(ezi_clamp_window(0) == 0);
  assert_true(ezi_clamp_window(2.5) == 2.5);
  assert_true(ezi_clamp_window(10) == 10);
  assert_true(ezi_clamp_window(11) == 10);
  assert_true(ezi_clamp_window(INFINITY) == 10);
  assert_true(ezi_clamp_window(1e-9) == 1e-9);
}

#ifndef EZ_NO_TELEMETRY

/* ---- window basics -------------------------------------------------------------------------- */

static void test_empty(void **state) {
  ezi_window *w = *state;
  ezi_window_stats s = query(w, T0, 2.0);
  assert_zero_stats(&s);
  assert_true(s.window_s == 2.0);
  s = query(NULL, T0, 2.0); /* NULL reads as empty */
  assert_zero_stats(&s);
  assert_true(s.window_s == 2.0);
  s = query(w, 0, 10.0); /* time 0 is fine too */
  assert_zero_stats(&s);
}

static void test_count_sum_max_avg(void **state) {
  ezi_window *w = *state;
  ezi_window_add(w, T0 + 10 * MS, 10);
  ezi_window_add(w, T0 + 300 * MS, 20);
  ezi_window_add(w, T0 + 600 * MS, 30);
  ezi_window_add(w, T0 + 900 * MS, 40);
  ezi_window_stats s = query(w, T0 + 1 * SEC, 2.0);
  assert_int_equal(s.count, 4);
  assert_true(s.sum == 100 && s.avg == 25 && s.max == 40);
  assert_true(s.window_s == 2.0);

  /* (T0 + 0.5 s, T0 + 1 s]: the 600 ms and 900 ms events. */
  s = query(w, T0 + 1 * SEC, 0.5);
  assert_int_equal(s.count, 2);
  assert_true(s.sum == 70 && s.avg == 35 && s.max == 40);
  assert_true(s.window_s == 0.5);
}

/* Unstamped events (sampled stamps, telclock.h): counted in a pending counter until the next
 * timed event or a query folds them into the newest stamped event's bucket; they time nothing:
 * durations, their avg, max and percentiles come from the timed ones. */
static void test_tally_and_span(void **state) {
  ezi_window *w = *state;
  for (uint64_t i = 1; i <= 4; i++) /* 10, 20, 30, 40 ms, stamped at T0 + 1 s */
    ezi_window_span(w, T0 + SEC - i * 10 * MS, T0 + SEC);
  for (int i = 0; i < 12; i++) {
    ezi_window_span(w, EZI_UNSTAMPED, T0 + SEC + 5 * MS); /* unstamped start */
    ezi_window_span(w, T0, EZI_UNSTAMPED);                /* unstamped end */
  }
  assert_int_equal(w->pending, 24);
  assert_int_equal(query(w, T0 + SEC + 50 * MS, 2.0).count, 4); /* not folded in yet */
  /* A timed event folds them in first: into T0 + 1 s's bucket, then itself (0: two processes'
   * clocks that disagree). */
  ezi_window_span(w, T0 + 2 * SEC + 20 * MS, T0 + 2 * SEC + 10 * MS);
  assert_int_equal(w->pending, 0);
  for (int i = 0; i < 6; i++)
    ezi_window_span(w, EZI_UNSTAMPED, EZI_UNSTAMPED);
  ezi_window_fold(w); /* as a query does: into the newest bucket, T0 + 2 s */
  assert_int_equal(w->pending, 0);
  ezi_window_stats s = query(w, T0 + 2 * SEC + 50 * MS, 2.0);
  assert_int_equal(s.count, 4 + 24 + 1 + 6);
  assert_int_equal(s.timed, 5);
  assert_true(s.sum == 100.0 * MS);
  assert_true(s.avg == 20.0 * MS);
  assert_true(s.max == 40.0 * MS);
  assert_true(s.p50 >= 20.0 * MS / (1 + PCT_ERR) && s.p50 <= 20.0 * MS * (1 + PCT_ERR));
  /* The 24 went into the bucket of T0 + 1 s, the 6 into T0 + 2 s's: a window of the last
   * 0.5 s holds only the latter and the timed event there. */
  assert_int_equal(query(w, T0 + 2 * SEC + 50 * MS, 0.5).count, 7);
  /* The JSON says how many were timed. */
  json_t *j = ezi_latency_json(&s);
  assert_non_null(j);
  assert_int_equal(jint(j, "samples"), 35);
  assert_int_equal(jint(j, "timed_samples"), 5);
  json_decref(j);
}

/* ezi_window_tally_n: messages and bytes of unstamped messages, next to stamped ones. */
static void test_tally_sum(void **state) {
  ezi_window *w = *state;
  ezi_window_count(w, T0 + 10 * MS, 100);
  ezi_window_tally_n(w, 15, 1500);
  ezi_window_stats s = query(w, T0 + 20 * MS, 1.0);
  assert_int_equal(s.count, 16);
  assert_true(s.sum == 1600);
  assert_int_equal(s.timed, 0);
}

/* ezi_window_count keeps the count and sum of ezi_window_add, over the same buckets and edges,
 * and times nothing. */
static void test_count_only(void **state) {
  ezi_window *w = *state, *full = malloc(sizeof *full);
  assert_non_null(full);
  ezi_window_init(full);
  for (uint64_t i = 0; i < 300; i++) { /* 30 s of events, 10 per second */
    ezi_window_count(w, T0 + i * 100 * MS + 7, i);
    ezi_window_add(full, T0 + i * 100 * MS + 7, i);
  }
  ezi_window_count(w, T0, 5); /* older than the ring: dropped by both */
  ezi_window_add(full, T0, 5);
  for (double win = 0; win <= 10.0; win += 0.25) {
    ezi_window_stats c = query(w, T0 + 30 * SEC, win), f = query(full, T0 + 30 * SEC, win);
    assert_int_equal(c.count, f.count);
    assert_int_equal(f.timed, f.count);
    assert_int_equal(c.timed, 0);
    assert_true(c.sum == f.sum && c.avg == 0 && c.max == 0);
  }
  ezi_window_stats c = query(w, T0 + 30 * SEC, 2.0);
  assert_int_equal(c.count, 20);
  assert_true(c.sum == (280 + 299) * 20 / 2);
  free(full);
}

static void test_single_values(void **state) {
  ezi_window *w = *state;
  static const uint64_t vals[] = {0,         1,          2,           3,          4,
                                  5,         7,          9,           15,         17,
                                  100,       1000,       12345,       999999,     1000000,
                                  123456789, 1000000000, 10000000000, 1ull << 40, (1ull << 47) - 1,
                                  1ull << 47};
  uint64_t t = T0;
  for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
    t += 20 * SEC; /* each value alone in the window */
    ezi_window_add(w, t, vals[i]);
    ezi_window_stats s = query(w, t, 1.0);
    assert_int_equal(s.count, 1);
    assert_true(s.max == (double)vals[i] && s.sum == (double)vals[i]);
    assert_pct(s.p50, (double)vals[i]);
    assert_pct(s.p99, (double)vals[i]);
    assert_true(s.p50 <= s.max && s.p99 <= s.max);
  }
}

static void test_percentiles_uniform(void **state) {
  ezi_window *w = *state;
  const uint64_t n = 100000;
  for (uint64_t i = 1; i <= n; i++)
    ezi_window_add(w, T0 + (i * SEC) / (n + 1), i);
  ezi_window_stats s = query(w, T0 + SEC, 2.0);
  assert_int_equal(s.count, n);
  assert_true(s.sum == (double)(n * (n + 1) / 2));
  assert_true(s.max == (double)n);
  assert_near(s.avg, (double)(n + 1) / 2, 1e-9);
  assert_pct(s.p50, 50000); /* nearest rank: the 50000th smallest */
  assert_pct(s.p99, 99000);
}

static void test_percentiles_bimodal(void **state) {
  ezi_window *w = *state;
  /* 90% fast (1 us), 10% slow (5 ms), interleaved over one second. */
  for (int i = 0; i < 1000; i++)
    ezi_window_add(w, T0 + (uint64_t)i * MS, i % 10 == 9 ? 5 * MS : 1000);
  ezi_window_stats s = query(w, T0 + SEC, 2.0);
  assert_int_equal(s.count, 1000);
  assert_pct(s.p50, 1000);
  assert_pct(s.p99, 5 * MS);
  assert_true(s.max == 5 * MS);
  assert_near(s.avg, (900 * 1000.0 + 100 * 5e6) / 1000, 1e-6);

  /* Exactly half and half: the nearest-rank median is the 500th value, still the low mode. */
  ezi_window_init(w);
  for (int i = 0; i < 1000; i++)
    ezi_window_add(w, T0 + (uint64_t)i * MS, i % 2 ? 1000000 : 100);
  s = query(w, T0 + SEC, 2.0);
  assert_pct(s.p50, 100);
  assert_pct(s.p99, 1000000);
  /* One more high value tips it. */
  ezi_window_add(w, T0 + SEC, 1000000);
  ezi_window_add(w, T0 + SEC, 1000000);
  s = query(w, T0 + SEC, 2.0);
  assert_pct(s.p50, 1000000);
}

/* Random distributions spread over many buckets, against the exact nearest-rank percentiles. */
static void test_percentiles_random(void **state) {
  ezi_window *w = *state;
  enum { MAXN = 5000 };
  static uint64_t vals[MAXN];
  for (int trial = 0; trial < 60; trial++) {
    ezi_window_init(w);
    uint64_t n = 1 + rnd_below(MAXN);
    unsigned bits = 1 + (unsigned)rnd_below(40); /* values up to 2^bits, log-uniform-ish */
    uint64_t now = T0 + rnd_below(100 * SEC);
    for (uint64_t i = 0; i < n; i++) {
      unsigned b = (unsigned)rnd_below(bits + 1);
      vals[i] = b ? rnd() >> (64 - b) : 0;
      /* anywhere in the last 9.9 s (well inside a 10 s window) */
      ezi_window_add(w, now - rnd_below(9900 * MS), vals[i]);
    }
    ezi_window_stats s = query(w, now, 10.0);
    qsort(vals, n, sizeof vals[0], cmp_u64);
    double sum = 0;
    for (uint64_t i = 0; i < n; i++)
      sum += (double)vals[i];
    assert_int_equal(s.count, n);
    assert_near(s.sum, sum, sum * 1e-12);
    assert_true(s.max == (double)vals[n - 1]);
    assert_pct(s.p50, (double)vals[(n + 1) / 2 - 1]);
    assert_pct(s.p99, (double)vals[(99 * n + 99) / 100 - 1]);
  }
}

/* ---- window edges and expiry ---------------------------------------------------------------- */

/* The documented rule, checked at random: an event more than half a bucket inside the window is
 * counted, one more than half a bucket outside is not. */
static void test_window_edges_random(void **state) {
  ezi_window *w = *state;
  for (int trial = 0; trial < 5000; trial++) {
    ezi_window_init(w);
    uint64_t t = T0 + rnd_below(1000 * SEC);
    double win = 0.01 + (double)rnd_below(9990) / 1000.0; /* 10 ms .. 10 s */
    uint64_t span = (uint64_t)(win * 1e9 + 0.5);
    uint64_t age = rnd_below(span + 2 * EZI_WINDOW_BUCKET_NS);
    ezi_window_add(w, t, 7);
    ezi_window_stats s = query(w, t + age, win);
    if (age + HALF < span) assert_int_equal(s.count, 1);
    if (age > span + HALF && span >= HALF) assert_int_equal(s.count, 0);
    /* Below half a bucket, the window is the current bucket. */
    int same_bucket = (t + age) / EZI_WINDOW_BUCKET_NS == t / EZI_WINDOW_BUCKET_NS;
    if (span < HALF) assert_int_equal(s.count, same_bucket);
    /* The current bucket always counts, however short the window. */
    if (age < EZI_WINDOW_BUCKET_NS && (t + age) / EZI_WINDOW_BUCKET_NS == t / EZI_WINDOW_BUCKET_NS)
      assert_int_equal(s.count, 1);
  }
}

static void test_window_edges_exact(void **state) {
  ezi_window *w = *state;
  /* One event at the start of bucket T0 + 500 ms; its bucket's midpoint is T0 + 550 ms. */
  ezi_window_add(w, T0 + 500 * MS, 3);
  /* 10 s window: counted while now - 10 s < T0 + 550 ms. */
  assert_int_equal(query(w, T0 + 10 * SEC + 549 * MS, 10.0).count, 1);
  assert_int_equal(query(w, T0 + 10 * SEC + 550 * MS - 1, 10.0).count, 1);
  assert_int_equal(query(w, T0 + 10 * SEC + 550 * MS, 10.0).count, 0);
  assert_int_equal(query(w, T0 + 11 * SEC, 10.0).count, 0);
  /* 1 s window, likewise. */
  assert_int_equal(query(w, T0 + 1550 * MS - 1, 1.0).count, 1);
  assert_int_equal(query(w, T0 + 1550 * MS, 1.0).count, 0);
  /* A tiny window still sees the current bucket, and only it. */
  ezi_window_add(w, T0 + 450 * MS, 3);
  assert_int_equal(query(w, T0 + 599 * MS, 0.001).count, 1);
  assert_int_equal(query(w, T0 + 600 * MS, 0.001).count, 0);
  /* An event exactly at now counts. */
  ezi_window_add(w, T0 + 2 * SEC, 4);
  assert_int_equal(query(w, T0 + 2 * SEC, 0.001).count, 1);
}

static void test_expiry_after_10s(void **state) {
  ezi_window *w = *state;
  for (int i = 0; i < 100; i++)
    ezi_window_add(w, T0 + (uint64_t)i * 10 * MS, 1000); /* [T0, T0+1s) */
  assert_int_equal(query(w, T0 + SEC, 10.0).count, 100);
  assert_int_equal(query(w, T0 + 10 * SEC, 10.0).count, 100);
  assert_int_equal(query(w, T0 + 11 * SEC + HALF, 10.0).count, 0);
  assert_int_equal(query(w, T0 + 20 * SEC, 10.0).count, 0);
  /* The first bucket's slot, reused exactly one ring later, holds only the new event; the other
   * nine buckets of the first second are still in the window. */
  const uint64_t ring = EZI_WINDOW_BUCKETS * EZI_WINDOW_BUCKET_NS;
  ezi_window_add(w, T0 + ring, 5);
  ezi_window_stats s = query(w, T0 + ring, 0.05);
  assert_int_equal(s.count, 1);
  assert_true(s.sum == 5 && s.max == 5);
  assert_pct(s.p50, 5);
  s = query(w, T0 + ring, 10.0);
  assert_int_equal(s.count, 91);
  assert_true(s.sum == 90 * 1000 + 5 && s.max == 1000);
}

static void test_long_idle_gap(void **state) {
  ezi_window *w = *state;
  /* Fill every bucket of the ring. */
  for (uint64_t t = T0; t < T0 + 11 * SEC; t += 7 * MS)
    ezi_window_add(w, t, 1000000);
  assert_true(query(w, T0 + 11 * SEC, 10.0).count > 1000);

  /* One hour later nothing is left. */
  uint64_t later = T0 + 3600 * SEC;
  ezi_window_stats s = query(w, later, 10.0);
  assert_zero_stats(&s);
  ezi_window_add(w, later, 5);
  s = query(w, later, 10.0);
  assert_int_equal(s.count, 1);
  assert_true(s.sum == 5 && s.max == 5);
  assert_pct(s.p50, 5);
  assert_pct(s.p99, 5);

  /* A gap of a whole number of rings lands on the very same slots. */
  ezi_window_init(w);
  for (uint64_t t = T0; t < T0 + 11 * SEC; t += 7 * MS)
    ezi_window_add(w, t, 1000000);
  later = T0 + 1000ull * EZI_WINDOW_BUCKETS * EZI_WINDOW_BUCKET_NS;
  s = query(w, later, 10.0);
  assert_zero_stats(&s);
  ezi_window_add(w, later, 9);
  s = query(w, later, 10.0);
  assert_int_equal(s.count, 1);
  assert_true(s.max == 9);
}

static void test_older_now(void **state) {
  ezi_window *w = *state;
  const uint64_t now = T0 + 5 * SEC + 50 * MS; /* mid-bucket */
  ezi_window_add(w, now, 10);
  ezi_window_add(w, now - 100 * MS, 20); /* the previous bucket */
  ezi_window_add(w, now - 1 * MS, 30);   /* the current bucket, slightly older */
  ezi_window_stats s = query(w, now, 10.0);
  assert_int_equal(s.count, 3);
  assert_true(s.sum == 60 && s.max == 30);

  /* Older than the ring, on a slot holding newer data: dropped. */
  ezi_window_add(w, now - EZI_WINDOW_BUCKETS * EZI_WINDOW_BUCKET_NS, 1000);
  /* Older than the ring, on a never-used slot: filed under its own (long gone) epoch. */
  ezi_window_add(w, now - 15 * SEC, 2000);
  s = query(w, now, 10.0);
  assert_int_equal(s.count, 3);
  assert_true(s.sum == 60 && s.max == 30);

  /* That slot is reused normally by a newer event. */
  ezi_window_add(w, now - 15 * SEC + EZI_WINDOW_BUCKETS * EZI_WINDOW_BUCKET_NS, 7);
  s = query(w, now, 10.0);
  assert_int_equal(s.count, 4);
  assert_true(s.sum == 67 && s.max == 30);

  /* A query with an older clock ignores newer buckets. */
  s = query(w, now - 60 * MS, 10.0);
  assert_int_equal(s.count, 2); /* 20 and 7 */
  assert_true(s.sum == 27 && s.max == 20);

  /* After all those older events, the current bucket is still the one a new event goes to. */
  ezi_window_add(w, now + 10 * MS, 5);
  s = query(w, now + 10 * MS, 0.01); /* just the current bucket */
  assert_int_equal(s.count, 3);      /* 10, 30, 5 */
  assert_true(s.sum == 45 && s.max == 30);
  ezi_window_add(w, now + 60 * MS, 1); /* the next bucket */
  s = query(w, now + 60 * MS, 0.01);
  assert_int_equal(s.count, 1);
}

/* ---- clamping, zero window, extremes -------------------------------------------------------- */

static void test_query_clamping(void **state) {
  ezi_window *w = *state;
  ezi_window_add(w, T0, 1);
  ezi_window_add(w, T0 + 10500 * MS, 2);
  ezi_window_stats s = query(w, T0 + 10500 * MS, 11.0);
  assert_true(s.window_s == 10.0);
  assert_int_equal(s.count, 1); /* T0 is 10.5 s old: outside even the longest window */
  s = query(w, T0 + 10500 * MS, INFINITY);
  assert_true(s.window_s == 10.0);
  s = query(w, T0 + 10500 * MS, -1.0);
  assert_true(s.window_s == 0);
  assert_zero_stats(&s);
  s = query(w, T0 + 10500 * MS, NAN);
  assert_true(s.window_s == 0);
  assert_zero_stats(&s);
}

static void test_zero_window(void **state) {
  ezi_window *w = *state;
  for (int i = 0; i < 10; i++)
    ezi_window_add(w, T0 + (uint64_t)i * MS, 100);
  ezi_window_stats s = query(w, T0 + 10 * MS, 0.0);
  assert_zero_stats(&s);
  assert_true(s.window_s == 0);
  assert_true(isfinite(s.avg) && isfinite(s.p50) && isfinite(s.p99));
  s = query(w, T0 + 10 * MS, 1e-12); /* rounds to 0 ns */
  assert_zero_stats(&s);

  json_t *j = roundtrip(ezi_pub_tel_json(w, w, 10, 1000, 1, T0 + 10 * MS, 0.0));
  assert_true(jnum(j, "window_s") == 0 && jnum(j, "message_rate_hz") == 0 &&
              jnum(j, "byte_rate_per_s") == 0);
  assert_int_equal(jint(json_object_get(j, "messages"), "window"), 0);
  assert_int_equal(jint(json_object_get(j, "messages"), "total"), 10);
  assert_int_equal(jint(json_object_get(j, "backpressure"), "samples"), 0);
  json_decref(j);
  j = roundtrip(ezi_sub_tel_json(w, "id", "h", 0, T0 + 10 * MS, 0.0));
  assert_true(jnum(j, "message_rate_hz") == 0 && jnum(j, "avg_ms") == 0);
  json_decref(j);
}

static void test_extreme_values(void **state) {
  ezi_window *w = *state;
  ezi_window_add(w, T0, UINT64_MAX);
  ezi_window_add(w, T0, UINT64_MAX);
  ezi_window_add(w, T0, 0);
  ezi_window_stats s = query(w, T0, 1.0);
  assert_int_equal(s.count, 3);
  assert_true(s.sum == (double)UINT64_MAX); /* saturated */
  assert_true(s.max == (double)UINT64_MAX);
  assert_true(s.p50 == (double)UINT64_MAX && s.p99 == (double)UINT64_MAX); /* top bin: the max */

  /* Beyond the histogram's range, percentiles never exceed the max. */
  ezi_window_init(w);
  ezi_window_add(w, T0, 1ull << 50);
  ezi_window_add(w, T0, 1ull << 52);
  s = query(w, T0, 1.0);
  assert_true(s.p99 == (double)(1ull << 52));
  assert_true(s.p50 <= s.max);

  /* All zeros. */
  ezi_window_init(w);
  for (int i = 0; i < 100; i++)
    ezi_window_add(w, T0, 0);
  s = query(w, T0, 1.0);
  assert_int_equal(s.count, 100);
  assert_true(s.sum == 0 && s.avg == 0 && s.max == 0 && s.p50 == 0 && s.p99 == 0);
}

/* ---- constant memory and time --------------------------------------------------------------- */

static void test_constant_memory_and_speed(void **state) {
  ezi_window *w = *state;
  /* Fixed size whatever the load: buckets x (header + histogram), which one is current, and the
   * count of events not folded in yet. */
  assert_int_equal(sizeof(ezi_window),
                   offsetof(ezi_window, buckets) + EZI_WINDOW_BUCKETS * sizeof(ezi_window_bucket));
  assert_true(offsetof(ezi_window, buckets) <= 24);
  assert_int_equal(sizeof(ezi_window_bucket), 808);
  assert_true(sizeof(ezi_window) <= 96 * 1024);
  assert_int_equal(EZI_WINDOW_BUCKET_NS * (EZI_WINDOW_BUCKETS - 1), 10 * SEC);

  /* A million events over 100 s (10 kHz), timed. */
  const uint64_t n = 1000000, step = 100 * 1000; /* 100 us */
  uint64_t start = ezi_now_ns();
  for (uint64_t i = 0; i < n; i++)
    ezi_window_add(w, T0 + i * step, 1000 + (i & 1023));
  uint64_t elapsed = ezi_now_ns() - start;
  print_message("1e6 adds: %.1f ns each\n", (double)elapsed / (double)n);
  assert_true(elapsed < 2 * SEC); /* tens of ms normally; generous for sanitizers and slow CI */

  /* The last 10 s hold ~100000 of them (+- half a bucket: 500 events). */
  uint64_t now = T0 + (n - 1) * step;
  ezi_window_stats s = query(w, now, 10.0);
  assert_true(s.count >= 99500 && s.count <= 100500);
  assert_true(s.max == 1000 + 1023);
  assert_pct(s.p50, 1000 + 512);

  /* Queries are bounded too. */
  start = ezi_now_ns();
  for (int i = 0; i < 100; i++)
    query(w, now, 10.0);
  elapsed = ezi_now_ns() - start;
  print_message("query: %.1f us each\n", (double)elapsed / 100 / 1000);
  assert_true(elapsed < 2 * SEC);
}

/* ---- JSON ----------------------------------------------------------------------------------- */

static void test_latency_json(void **state) {
  ezi_window *w = *state;
  json_t *j = roundtrip(ezi_latency_json(NULL));
  assert_keys(j, latency_keys, NKEYS(latency_keys));
  for (size_t i = 0; i < 4; i++)
    assert_true(jnum(j, latency_keys[i]) == 0);
  assert_int_equal(jint(j, "samples"), 0);
  json_decref(j);

  ezi_window_stats s = query(w, T0, 2.0); /* empty */
  j = roundtrip(ezi_latency_json(&s));
  assert_keys(j, latency_keys, NKEYS(latency_keys));
  assert_true(jnum(j, "avg_ms") == 0 && jnum(j, "p99_ms") == 0);
  json_decref(j);

  for (int i = 0; i < 3; i++)
    ezi_window_add(w, T0 + (uint64_t)i * MS, 1 * MS);
  ezi_window_add(w, T0 + 3 * MS, 3 * MS);
  s = query(w, T0 + 10 * MS, 2.0);
  j = roundtrip(ezi_latency_json(&s));
  assert_keys(j, latency_keys, NKEYS(latency_keys));
  assert_near(jnum(j, "avg_ms"), 1.5, 1e-9);
  assert_near(jnum(j, "max_ms"), 3.0, 1e-9);
  assert_pct(jnum(j, "p50_ms"), 1.0);
  assert_pct(jnum(j, "p99_ms"), 3.0);
  assert_int_equal(jint(j, "samples"), 4);
  json_decref(j);
}

static void test_pub_json(void **state) {
  ezi_window *msgs = *state, *bp = malloc(sizeof *bp);
  assert_non_null(bp);
  ezi_window_init(bp);
  for (int i = 0; i < 10; i++) {
    ezi_window_count(msgs, T0 + (uint64_t)i * 90 * MS, 100);
    ezi_window_add(bp, T0 + (uint64_t)i * 90 * MS + MS, 2 * MS);
  }
  json_t *j = roundtrip(ezi_pub_tel_json(msgs, bp, 1000, 123456, 3, T0 + SEC, 2.0));
  assert_keys(j, pub_keys, NKEYS(pub_keys));
  assert_true(jnum(j, "window_s") == 2.0);
  assert_near(jnum(j, "message_rate_hz"), 5.0, 1e-9);
  assert_near(jnum(j, "byte_rate_per_s"), 500.0, 1e-9);
  const json_t *m = json_object_get(j, "messages"), *b = json_object_get(j, "bytes"),
               *p = json_object_get(j, "backpressure");
  assert_keys(m, total_window_keys, 2);
  assert_int_equal(jint(m, "total"), 1000);
  assert_int_equal(jint(m, "window"), 10);
  assert_keys(b, total_window_keys, 2);
  assert_int_equal(jint(b, "total"), 123456);
  assert_int_equal(jint(b, "window"), 1000);
  assert_keys(p, bp_keys, NKEYS(bp_keys));
  assert_near(jnum(p, "avg_ms"), 2.0, 1e-9);
  assert_near(jnum(p, "max_ms"), 2.0, 1e-9);
  assert_pct(jnum(p, "p50_ms"), 2.0);
  assert_pct(jnum(p, "p99_ms"), 2.0);
  assert_int_equal(jint(p, "samples"), 10);
  assert_int_equal(jint(p, "in_flight"), 3);
  json_decref(j);

  /* The window is clamped and reported; NULL windows are empty; huge totals are capped. */
  j = roundtrip(ezi_pub_tel_json(NULL, NULL, UINT64_MAX, UINT64_MAX, UINT64_MAX, T0, 60.0));
  assert_true(jnum(j, "window_s") == 10.0);
  assert_true(jnum(j, "message_rate_hz") == 0);
  assert_int_equal(jint(json_object_get(j, "messages"), "total"), INT64_MAX);
  assert_int_equal(jint(json_object_get(j, "bytes"), "total"), INT64_MAX);
  assert_int_equal(jint(json_object_get(j, "bytes"), "window"), 0);
  assert_int_equal(jint(json_object_get(j, "backpressure"), "in_flight"), INT64_MAX);
  json_decref(j);
  free(bp);
}

static void test_sub_json(void **state) {
  ezi_window *w = *state;
  for (int i = 0; i < 40; i++)
    ezi_window_add(w, T0 + (uint64_t)i * 25 * MS, 500 * 1000); /* 0.5 ms */
  json_t *j = roundtrip(ezi_sub_tel_json(w, "a-b-c", "my handle", 2, T0 + SEC, 4.0));
  assert_keys(j, sub_keys, NKEYS(sub_keys));
  assert_string_equal(json_string_value(json_object_get(j, "subscriber_id")), "a-b-c");
  assert_string_equal(json_string_value(json_object_get(j, "handle")), "my handle");
  assert_near(jnum(j, "avg_ms"), 0.5, 1e-9);
  assert_near(jnum(j, "max_ms"), 0.5, 1e-9);
  assert_pct(jnum(j, "p50_ms"), 0.5);
  assert_pct(jnum(j, "p99_ms"), 0.5);
  assert_int_equal(jint(j, "samples"), 40);
  assert_near(jnum(j, "message_rate_hz"), 10.0, 1e-9);
  assert_int_equal(jint(j, "in_flight"), 2);
  json_decref(j);

  /* NULL strings become null; labels that are not UTF-8 are made printable, not refused. */
  j = roundtrip(ezi_sub_tel_json(NULL, NULL, NULL, 0, T0, 2.0));
  assert_keys(j, sub_keys, NKEYS(sub_keys));
  assert_true(json_is_null(json_object_get(j, "subscriber_id")));
  assert_true(json_is_null(json_object_get(j, "handle")));
  assert_int_equal(jint(j, "samples"), 0);
  json_decref(j);
  j = roundtrip(ezi_sub_tel_json(NULL, "id",
                                 "\xff\xfe"
                                 "abc",
                                 0, T0, 2.0));
  assert_string_equal(json_string_value(json_object_get(j, "handle")), "??abc");
  json_decref(j);
}

/* jansson allocation failures: every builder returns NULL (and leaks nothing, under ASan) until
 * there is enough memory. */
static int alloc_budget = -1; /* allocations left before failing; -1: unlimited */
static void *failing_malloc(size_t n) {
  if (alloc_budget == 0) return NULL;
  if (alloc_budget > 0) alloc_budget--;
  return malloc(n);
}

static void test_json_out_of_memory(void **state) {
  ezi_window *w = *state;
  ezi_window_add(w, T0, 1000);
  json_set_alloc_funcs(failing_malloc, free);
  for (int which = 0; which < 3; which++) {
    int budget = 0;
    json_t *j = NULL;
    for (; budget < 1000 && !j; budget++) {
      alloc_budget = budget;
      ezi_window_stats s = query(w, T0, 2.0);
      switch (which) {
      case 0: j = ezi_latency_json(&s); break;
      case 1: j = ezi_pub_tel_json(w, w, 1, 2, 3, T0, 2.0); break;
      default: j = ezi_sub_tel_json(w, "id", "\xff", 1, T0, 2.0); break;
      }
    }
    alloc_budget = -1;
    assert_non_null(j);
    assert_true(budget > 1); /* at least one failure was exercised */
    json_decref(j);
  }
  json_set_alloc_funcs(malloc, free);
}

#else /* EZ_NO_TELEMETRY */

static void test_compiled_out(void **state) {
  (void)state;
  ezi_window w;
  assert_true(sizeof w <= 8);
  ezi_window_init(&w);
  for (int i = 0; i < 1000; i++) {
    ezi_window_add(&w, T0 + (uint64_t)i * MS, 1000);
    ezi_window_count(&w, T0 + (uint64_t)i * MS, 1000);
  }
  ezi_window_stats s = query(&w, T0 + SEC, 2.0);
  assert_zero_stats(&s);
  assert_true(s.window_s == 2.0);
  s = query(&w, T0 + SEC, 42.0);
  assert_true(s.window_s == 10.0);

  json_t *j = roundtrip(ezi_pub_tel_json(&w, &w, 5, 6, 7, T0 + SEC, 2.0));
  assert_keys(j, pub_keys, NKEYS(pub_keys));
  assert_true(jnum(j, "window_s") == 2.0 && jnum(j, "message_rate_hz") == 0);
  assert_int_equal(jint(json_object_get(j, "messages"), "total"), 5);
  assert_int_equal(jint(json_object_get(j, "messages"), "window"), 0);
  json_decref(j);
  j = roundtrip(ezi_sub_tel_json(&w, "id", NULL, 1, T0 + SEC, 2.0));
  assert_keys(j, sub_keys, NKEYS(sub_keys));
  assert_int_equal(jint(j, "samples"), 0);
  json_decref(j);
  j = roundtrip(ezi_latency_json(&s));
  assert_keys(j, latency_keys, NKEYS(latency_keys));
  json_decref(j);
}

#endif /* EZ_NO_TELEMETRY */

#define WT(f) cmocka_unit_test_setup_teardown(f, setup_window, teardown_window)

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_clamp),
#ifndef EZ_NO_TELEMETRY
      WT(test_empty),
      WT(test_count_sum_max_avg),
      WT(test_count_only),
      WT(test_tally_and_span),
      WT(test_tally_sum),
      WT(test_single_values),
      WT(test_percentiles_uniform),
      WT(test_percentiles_bimodal),
      WT(test_percentiles_random),
      WT(test_window_edges_random),
      WT(test_window_edges_exact),
      WT(test_expiry_after_10s),
      WT(test_long_idle_gap),
      WT(test_older_now),
      WT(test_query_clamping),
      WT(test_zero_window),
      WT(test_extreme_values),
      WT(test_constant_memory_and_speed),
      WT(test_latency_json),
      WT(test_pub_json),
      WT(test_sub_json),
      WT(test_json_out_of_memory),
#else
      cmocka_unit_test(test_compiled_out),
#endif
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
