/* The telemetry clock (telclock.h): its stamps are CLOCK_MONOTONIC nanoseconds, from any thread,
 * across re-anchorings; where the kernel itself runs on the TSC, the TSC mapping is really in
 * use after calibration. With EZ_NO_TELEMETRY: no clock, the constant mark 1. */
#include "harness.h"
#include "base/internal.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define MS 1000000ull
/* A stamp may be off CLOCK_MONOTONIC by the anchor's error (< 2 us) plus the rate's over 50 ms
 * (well under 1 us, or 25 us if NTP slews at its maximum): 100 us leaves room, and is still far
 * below what a wrong scale would give (ms within the 300 ms checked). */
#define TOL_NS 100000ull

#ifndef EZ_NO_TELEMETRY

/* Stamps for `ms` milliseconds, each between two clock reads (give or take TOL_NS). Returns the
 * number of stamps checked; fails the test on the first one out of bounds. */
static uint64_t track(uint64_t ms) {
  uint64_t end = ezi_now_ns() + ms * MS, n = 0;
  for (;;) {
    uint64_t a = ezi_now_ns(), t = ezi_tel_now(), b = ezi_now_ns();
    if (t + TOL_NS < a || t > b + TOL_NS)
      fail_msg("stamp %llu outside [%llu, %llu] +- %llu ns", (unsigned long long)t,
               (unsigned long long)a, (unsigned long long)b, (unsigned long long)TOL_NS);
    n++;
    if (b >= end) return n;
  }
}

/* 300 ms: the calibration (10 ms), then about six 50 ms mappings. */
static void test_tracks_monotonic(void **state) {
  (void)state;
  assert_true(track(300) > 1000);
}

static void *tracker(void *arg) {
  *(uint64_t *)arg = track(200);
  return NULL;
}

/* Three threads stamping at once, through calibration and re-anchorings. */
static void test_threads(void **state) {
  (void)state;
  pthread_t th[3];
  uint64_t n[3] = {0};
  for (int i = 0; i < 3; i++)
    assert_int_equal(pthread_create(&th[i], NULL, tracker, &n[i]), 0);
  for (int i = 0; i < 3; i++) {
    pthread_join(th[i], NULL);
    assert_true(n[i] > 100);
  }
}

/* An idle gap longer than a mapping: the next stamp is still right. */
static void test_after_idle(void **state) {
  (void)state;
  track(20);
  struct timespec ts = {0, 120 * (long)MS};
  nanosleep(&ts, NULL);
  track(5);
}

/* Sampled stamps: slow callers get every one stamped; a tight loop (far above 16 k calls/s) gets
 * one in 4..EZI_STAMP_MAX_EVERY (the rate estimate can be disturbed by preemption, never raised
 * above the cap), at ids that are multiples of `every`; a reset stamps the next call. */
static void test_stamper(void **state) {
  (void)state;
  ezi_stamper st = {0};
  uint64_t id = 0;
  struct timespec gap = {0, 200000}; /* 200 us between calls: 5 k/s */
  for (int i = 0; i < 100; i++) {
    assert_true(ezi_stamp(&st, id++) != EZI_UNSTAMPED);
    nanosleep(&gap, NULL);
  }
  const int n = 1000000;
  int stamped = 0;
  for (int i = 0; i < n; i++, id++) {
    uint32_t every = st.every;
    bool s = ezi_stamp(&st, id) != EZI_UNSTAMPED;
    stamped += s;
    if (s) assert_int_equal(id % every, 0); /* no tick here: only the sampled ids */
  }
  print_message("    %d of %d calls in a tight loop stamped\n", stamped, n);
  assert_true(stamped >= n / (int)EZI_STAMP_MAX_EVERY);
  assert_true(stamped <= n / 4);
  ezi_stamper_reset(&st);
  assert_true(ezi_stamp(&st, id) != EZI_UNSTAMPED);
}

/* Calls ezi_stamp in a tight loop until the next id would be left unstamped. */
static void until_skips(ezi_stamper *st, uint64_t *id) {
  uint64_t end = *id + 100000000;
  while (!ezi_stamper_skips(st, *id) && *id < end)
    (void)ezi_stamp(st, (*id)++);
  assert_true(ezi_stamper_skips(st, *id));
}

/* A stamp expires with its tick: while the tick does not advance a sampling stamper leaves calls
 * unstamped; the first call after an advance is stamped, a sampled stamp marks the tick used, an
 * advance expires every attached stamper, and a detached one is no longer touched. (The tick is
 * armed and advanced by hand: no loop runs its timer here.) */
static void test_stamper_tick(void **state) {
  (void)state;
  ezi_tick *k = ezi_tick_new(NULL);
  assert_non_null(k);
  k->armed = 1;
  ezi_stamper st = {0}, other = {0};
  ezi_stamper_attach(&other, k);
  ezi_stamper_attach(&st, k);
  uint64_t id = 0;
  while (!(st.every >= 4 && ezi_stamper_skips(&st, id)) && id < 100000000) /* until it samples */
    (void)ezi_stamp(&st, id++);
  assert_true(st.every >= 4 && ezi_stamper_skips(&st, id));
  assert_int_equal(k->used, 1);
  k->used = 0;
  assert_int_equal(ezi_stamp(&st, id++), EZI_UNSTAMPED);
  until_skips(&st, &id); /* (past the next multiple of `every`) */
  ezi_tick_advance(k);
  assert_int_equal(k->n, 1);
  assert_true(ezi_stamp(&st, id++) != EZI_UNSTAMPED);
  /* Calls in a tight loop: the rate is still high, so it samples again at once, unless this
   * thread was kept off the CPU in between (a loaded machine); then it does so within a few more
   * calls, each stamped meanwhile (every 1). */
  while (st.every <= 1 && id < 100000000)
    assert_true(ezi_stamp(&st, id++) != EZI_UNSTAMPED);
  assert_true(st.every > 1);
  assert_int_equal(k->used, 1);
  until_skips(&st, &id);
  assert_int_equal(ezi_stamp(&st, id++), EZI_UNSTAMPED);
  /* Three attached, each sampling: an advance expires every one of them (not only the list's
   * head), and a detached one, here the middle of the list, is no longer touched. */
  ezi_stamper third = {0};
  ezi_stamper_attach(&third, k); /* the list: third, st, other */
  uint64_t oid = 0, tid = 0;
  until_skips(&other, &oid);
  until_skips(&third, &tid);
  until_skips(&st, &id);
  ezi_tick_advance(k);
  assert_false(ezi_stamper_skips(&other, oid));
  assert_false(ezi_stamper_skips(&st, id));
  assert_false(ezi_stamper_skips(&third, tid));
  ezi_stamper_detach(&st);
  until_skips(&other, &oid);
  until_skips(&third, &tid);
  until_skips(&st, &id);
  ezi_tick_advance(k);
  assert_true(ezi_stamper_skips(&st, id));
  assert_false(ezi_stamper_skips(&other, oid));
  assert_false(ezi_stamper_skips(&third, tid));
  ezi_stamper_detach(&other);
  ezi_stamper_detach(&third);
  assert_null(k->first);
  ezi_tick_free(k);
}

/* A read's stamps (ezi_stamp_pick, one clock read for all the frames of a socket read): frames
 * that share a read do not make the rate look infinite (a regression: at 200 messages/s, a read
 * of two frames sampled the next 63 out, and a profile counted them in a bucket 0.3 s old), and a
 * stamp is renewed once the last one is EZI_STAMP_STALE_NS old, whatever the rate was. */
static void test_stamp_pick(void **state) {
  (void)state;
  ezi_stamper st = {0};
  const uint64_t t0 = 1000000000000ull, gap = 5000000; /* 200 reads/s */
  for (uint64_t r = 0; r < 50; r++) {
    uint64_t now = t0 + r * gap;
    assert_true(ezi_stamp_pick(&st, now) == now); /* the first frame of each read is stamped */
    for (int k = 0; k < 3; k++)                   /* three more frames in the same read */
      assert_true(ezi_stamp_pick(&st, now) == EZI_UNSTAMPED);
  }
  assert_int_equal(st.every, 1);
  /* A fast stream: one read per 100 ns. Stamps get sparse ... */
  uint64_t now = t0 + 50 * gap;
  int stamped = 0;
  for (int i = 0; i < 10000; i++, now += 100)
    stamped += ezi_stamp_pick(&st, now) != EZI_UNSTAMPED;
  assert_true(stamped <= 10000 / 16 + 10);
  assert_true(st.every >= 16);
  /* ... and after a pause longer than EZI_STAMP_STALE_NS, the next read is stamped at once. */
  now += EZI_STAMP_STALE_NS + 1;
  assert_true(ezi_stamp_pick(&st, now) == now);
}

static bool kernel_on_tsc(void) {
  FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "re");
  char buf[32] = {0};
  bool yes = f && fgets(buf, sizeof buf, f) && strcmp(buf, "tsc\n") == 0;
  if (f) fclose(f);
  return yes;
}

/* Where the kernel uses the TSC, so do we, once calibrated: a mapping is in place. */
static void test_tsc_in_use(void **state) {
  (void)state;
#if defined(__x86_64__)
  track(30);
  bool mapped = __atomic_load_n(&ezi_tsc.span, __ATOMIC_RELAXED) != 0;
  if (kernel_on_tsc())
    assert_true(mapped);
  else
    assert_false(mapped);
#else
  skip();
#endif
}

#else

static void test_compiled_out(void **state) {
  (void)state;
  assert_int_equal(ezi_tel_now(), EZI_UNSTAMPED);
  ezi_stamper st = {0};
  assert_int_equal(ezi_stamp(&st, 0), EZI_UNSTAMPED);
}

#endif

int main(void) {
  const struct CMUnitTest tests[] = {
#ifndef EZ_NO_TELEMETRY
      cmocka_unit_test(test_tracks_monotonic), cmocka_unit_test(test_threads),
      cmocka_unit_test(test_after_idle),       cmocka_unit_test(test_tsc_in_use),
      cmocka_unit_test(test_stamper),          cmocka_unit_test(test_stamp_pick),
      cmocka_unit_test(test_stamper_tick),
#else
      cmocka_unit_test(test_compiled_out),
#endif
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
