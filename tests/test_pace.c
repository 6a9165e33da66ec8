/* `ezmsg pub --rate` pacing (tools/ezmsg/pace.c) with a made-up clock: no burst after a stall of
 * any length (no span carries more than HZ messages a second plus two), jitter below a period
 * costs nothing, and the first message goes at once. */
#include "harness.h"

#include "../tools/ezmsg/pace.h"

#include <stdlib.h>

#define NS 1000000000ull

/* Sends n messages as soon as allowed, the clock advancing by `lateness(k)` ns after each wait;
 * writes the send times into t. */
static void run(pace *p, uint64_t start, size_t n, uint64_t *t, uint64_t (*lateness)(size_t)) {
  uint64_t now = start;
  for (size_t k = 0; k < n; k++) {
    uint64_t due = pace_due(p, now);
    assert_true(due >= now);
    now = due + lateness(k);
    t[k] = now;
    pace_sent(p);
  }
}

/* Most messages sent in any window of `span` ns. */
static size_t most_in(const uint64_t *t, size_t n, uint64_t span) {
  size_t best = 0, lo = 0;
  for (size_t hi = 0; hi < n; hi++) {
    while (t[hi] - t[lo] >= span)
      lo++;
    if (hi - lo + 1 > best) best = hi - lo + 1;
  }
  return best;
}

static uint64_t on_time(size_t k) {
  (void)k;
  return 0;
}

static uint64_t stall_at_100(size_t k) { return k == 100 ? 3 * NS : 0; } /* a 3 s stall */

static uint64_t jitter(size_t k) { return (k * 7919u) % 900000u; } /* up to 0.9 ms at 1 kHz */

static void test_steady(void **state) {
  (void)state;
  pace p = pace_new(1000);
  uint64_t *t = malloc(5000 * sizeof *t);
  run(&p, 12345, 5000, t, on_time);
  assert_int_equal(t[0], 12345);                       /* the first goes at once */
  assert_int_equal(t[4999] - t[0], 4999 * 1000000ull); /* exactly 1 kHz */
  assert_true(most_in(t, 5000, NS) <= 1000);
  free(t);
}

static void test_no_burst_after_stall(void **state) {
  (void)state;
  pace p = pace_new(1000);
  uint64_t *t = malloc(3000 * sizeof *t);
  run(&p, 0, 3000, t, stall_at_100);
  /* Before the fix, the 3000 messages owed after the stall went at once. */
  assert_true(most_in(t, 3000, NS) <= 1002);
  assert_true(most_in(t, 3000, NS / 10) <= 102);
  /* After the stall: one message a period again, at most one of them early. */
  assert_true(t[102] - t[101] <= 1000000ull);
  for (size_t k = 103; k < 3000; k++)
    assert_int_equal(t[k] - t[k - 1], 1000000ull);
  free(t);
}

static void test_jitter_keeps_the_rate(void **state) {
  (void)state;
  pace p = pace_new(1000);
  uint64_t *t = malloc(10000 * sizeof *t);
  run(&p, 0, 10000, t, jitter);
  /* Late by less than a period each time: the schedule holds, 10 s for 10000 messages. */
  uint64_t span = t[9999] - t[0];
  assert_true(span >= 9999 * 1000000ull && span < 10000 * 1000000ull);
  assert_true(most_in(t, 10000, NS) <= 1002);
  free(t);
}

static void test_unpaced(void **state) {
  (void)state;
  pace p = pace_new(0);
  assert_int_equal(pace_due(&p, 77), 77);
  pace_sent(&p);
  assert_int_equal(pace_due(&p, 78), 78);
  p = pace_new(-5);
  assert_int_equal(pace_due(&p, 5), 5);
  p = pace_new(1e12); /* faster than a nanosecond: one per nanosecond */
  assert_int_equal(p.period_ns, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_steady),
      cmocka_unit_test(test_no_burst_after_stall),
      cmocka_unit_test(test_jitter_keeps_the_rate),
      cmocka_unit_test(test_unpaced),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
