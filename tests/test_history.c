/* The dashboard's history (tools/ezmsg/history.c): samples come back oldest first with gaps as
 * null; an hour of one-a-second ticks over 2 000 endpoints holds the same bytes as five minutes
 * (the figure docs/dashboard.md gives); endpoints gone for a whole ring are forgotten; the cap
 * on endpoints holds. */
#include "harness.h"

#include "../tools/ezmsg/history.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A view of n publishers and n subscribers with ids "<prefix>p<i>" / "<prefix>s<i>"; figures
 * derived from `tick`. */
typedef struct fake {
  gv v;
  char (*ids)[40];
} fake;

static void fake_init(fake *f, size_t n, const char *prefix) {
  memset(f, 0, sizeof *f);
  f->ids = calloc(2 * n, sizeof *f->ids);
  f->v.pubs = calloc(n, sizeof *f->v.pubs);
  f->v.subs = calloc(n, sizeof *f->v.subs);
  f->v.n_pubs = f->v.n_subs = n;
  for (size_t i = 0; i < n; i++) {
    snprintf(f->ids[i], 40, "%sp%zu", prefix, i);
    snprintf(f->ids[n + i], 40, "%ss%zu", prefix, i);
    f->v.pubs[i].id = f->ids[i];
    f->v.pubs[i].answered = true;
    f->v.subs[i].id = f->ids[n + i];
  }
}

static void fake_tick(fake *f, uint64_t tick) {
  for (size_t i = 0; i < f->v.n_pubs; i++) {
    f->v.pubs[i].rate_hz = (double)tick;
    f->v.pubs[i].bp.max_ms = (double)i;
    f->v.subs[i].rate_hz = (double)tick + 0.5;
  }
}

static void fake_free(fake *f) {
  free(f->ids);
  free(f->v.pubs);
  free(f->v.subs);
}

static void test_samples_and_gaps(void **state) {
  (void)state;
  history *h = hist_new();
  fake f;
  fake_init(&f, 2, "");
  for (uint64_t t = 0; t < 5; t++) {
    fake_tick(&f, t);
    f.v.n_subs = t == 2 ? 0 : 2; /* the subscribers miss tick 2 */
    assert_int_equal(hist_add(h, &f.v, 1000 * (int64_t)t), 0);
  }
  json_t *j = hist_json(h, "p1");
  assert_non_null(j);
  assert_string_equal(json_string_value(json_object_get(j, "kind")), "publisher");
  json_t *r = json_object_get(j, "rate_hz"), *t = json_object_get(j, "t_ms");
  assert_int_equal(json_array_size(r), 5);
  for (size_t k = 0; k < 5; k++) {
    assert_true(json_real_value(json_array_get(r, k)) == (double)k);
    assert_int_equal(json_integer_value(json_array_get(t, k)), 1000 * (json_int_t)k);
  }
  assert_true(json_real_value(json_array_get(json_object_get(j, "max_ms"), 0)) == 1.0);
  json_decref(j);
  j = hist_json(h, "s0");
  r = json_object_get(j, "rate_hz");
  assert_true(json_is_null(json_array_get(r, 2))); /* the gap */
  assert_true(json_real_value(json_array_get(r, 3)) == 3.5);
  json_decref(j);
  assert_null(hist_json(h, "nope"));
  fake_free(&f);
  hist_free(h);
}

static size_t heap_in_use(void) {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

static void test_an_hour_of_2000_endpoints(void **state) {
  (void)state;
  history *h = hist_new();
  fake f;
  fake_init(&f, 1000, "");
  size_t bytes_5min = 0, heap_5min = 0;
  for (uint64_t t = 0; t < 3600; t++) {
    fake_tick(&f, t);
    assert_int_equal(hist_add(h, &f.v, (int64_t)t * 1000), 0);
    if (t == HIST_SAMPLES) {
      bytes_5min = hist_bytes(h);
      heap_5min = heap_in_use();
    }
  }
  assert_int_equal(hist_endpoints(h), 2000);
  size_t bytes = hist_bytes(h), heap = heap_in_use();
  assert_int_equal(bytes, bytes_5min); /* no growth after the ring is full */
  assert_true(bytes <= 2000 * HIST_ENDPOINT_BYTES + 2000 * 16 + 1024);
  /* The heap (jansson and malloc's own included) grew by less than a page per endpoint. */
  assert_true(heap <= heap_5min + 2000 * 64);
  print_message("history of 2000 endpoints after 3600 ticks: %zu bytes (%zu per endpoint); "
                "heap %zu kB\n",
                bytes, (size_t)HIST_ENDPOINT_BYTES, heap / 1024);
  /* The ring holds the last HIST_SAMPLES ticks. */
  json_t *j = hist_json(h, "p7");
  json_t *r = json_object_get(j, "rate_hz");
  assert_int_equal(json_array_size(r), HIST_SAMPLES);
  assert_true(json_real_value(json_array_get(r, HIST_SAMPLES - 1)) == 3599.0);
  assert_true(json_real_value(json_array_get(r, 0)) == 3600.0 - HIST_SAMPLES);
  json_decref(j);
  fake_free(&f);
  hist_free(h);
}

static void test_churn_and_cap(void **state) {
  (void)state;
  history *h = hist_new();
  /* New endpoints every tick: the old ones go once absent for a whole ring. */
  for (uint64_t t = 0; t < 3 * HIST_SAMPLES; t++) {
    fake f;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "t%llu-", (unsigned long long)t);
    fake_init(&f, 5, prefix);
    assert_int_equal(hist_add(h, &f.v, (int64_t)t), 0);
    fake_free(&f);
  }
  assert_true(hist_endpoints(h) <= 10 * HIST_SAMPLES);
  hist_free(h);
  /* More endpoints than the cap: the rest are refused, counted. */
  h = hist_new();
  fake f;
  fake_init(&f, HIST_MAX_ENDPOINTS / 2 + 100, "");
  assert_int_equal(hist_add(h, &f.v, 0), 0);
  assert_int_equal(hist_endpoints(h), HIST_MAX_ENDPOINTS);
  assert_int_equal(hist_refused(h), 200);
  fake_free(&f);
  hist_free(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_samples_and_gaps),
      cmocka_unit_test(test_an_hour_of_2000_endpoints),
      cmocka_unit_test(test_churn_and_cap),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
