/* The reactor (src/base/loop.c) on its own: posts and wake-ups from other threads, timers, and the idle
 * hook the TCP ring's acknowledgements rely on (called after a round of events with sleep false,
 * and before the loop sleeps with sleep true, ezi_loop_sleeping() being true from then until it
 * wakes). Real threads, a real eventfd and epoll; no sleep decides an outcome: every wait is for
 * a condition, bounded by a generous deadline. */
#include "harness.h"
#include "base/loop.h"
#include "base/telclock.h"

#include <pthread.h>
#include <unistd.h>

#define TMO_MS 10000

typedef struct {
  ezi_loop *l;
  pthread_t th;
  int posts;       /* atomic: posted tasks run */
  int wakes;       /* atomic: wake-hook runs */
  int idle_rounds; /* atomic: idle hook with sleep false */
  int idle_sleeps; /* atomic: idle hook with sleep true */
  int sleeping_ok; /* atomic: ezi_loop_sleeping() was true in every sleep-true call ... */
  int awake_ok;    /* atomic: ... and false in every sleep-false call */
  int fired;       /* atomic: timer runs */
} fixture;

static void *run(void *arg) {
  ezi_loop_run(((fixture *)arg)->l);
  return NULL;
}

static void on_idle(void *arg, bool sleep) {
  fixture *f = arg;
  bool s = ezi_loop_sleeping(f->l);
  if (sleep) {
    __atomic_add_fetch(&f->idle_sleeps, 1, __ATOMIC_SEQ_CST);
    if (!s) __atomic_store_n(&f->sleeping_ok, 0, __ATOMIC_SEQ_CST);
  } else {
    __atomic_add_fetch(&f->idle_rounds, 1, __ATOMIC_SEQ_CST);
    if (s) __atomic_store_n(&f->awake_ok, 0, __ATOMIC_SEQ_CST);
  }
}

static void on_wake_hook(void *arg) {
  __atomic_add_fetch(&((fixture *)arg)->wakes, 1, __ATOMIC_SEQ_CST);
}

static void count_post(void *arg) {
  __atomic_add_fetch(&((fixture *)arg)->posts, 1, __ATOMIC_SEQ_CST);
}

static void on_timer(void *arg) {
  __atomic_add_fetch(&((fixture *)arg)->fired, 1, __ATOMIC_SEQ_CST);
}

static void start(fixture *f, uint64_t spin_ns) {
  *f = (fixture){.sleeping_ok = 1, .awake_ok = 1};
  assert_int_equal(ezi_loop_new(&f->l), 0);
  ezi_loop_set_wake_hook(f->l, on_wake_hook, f);
  ezi_loop_set_idle_hook(f->l, on_idle, f);
  ezi_loop_set_spin(f->l, spin_ns);
  assert_int_equal(pthread_create(&f->th, NULL, run, f), 0);
}

static void stop(fixture *f) {
  ezi_loop_stop(f->l);
  pthread_join(f->th, NULL);
  ezi_loop_free(f->l);
}

/* Waits until *v >= want (an atomic counter), at most TMO_MS. */
static bool reach(int *v, int want) {
  int64_t end = th_now_ms() + TMO_MS;
  while (__atomic_load_n(v, __ATOMIC_SEQ_CST) < want) {
    if (th_now_ms() > end) return false;
    th_sleep_ms(1);
  }
  return true;
}

/* An idle loop goes to sleep announcing it: the idle hook runs with sleep true, and the loop
 * reports sleeping (it has nothing to do, so it stays asleep). */
static void test_sleep_is_announced(void **state) {
  (void)state;
  fixture f;
  start(&f, 0);
  assert_true(reach(&f.idle_sleeps, 1));
  int64_t end = th_now_ms() + TMO_MS;
  while (!ezi_loop_sleeping(f.l) && th_now_ms() < end)
    th_sleep_ms(1);
  assert_true(ezi_loop_sleeping(f.l));
  stop(&f);
  assert_int_equal(f.sleeping_ok, 1);
}

/* Posts from other threads all run, each wake-up runs the wake hook, and a round of events (the
 * wake-up's) is followed by the idle hook with sleep false, in which the loop is not sleeping. */
static void test_posts_wake_and_rounds(void **state) {
  (void)state;
  fixture f;
  start(&f, 0);
  assert_true(reach(&f.idle_sleeps, 1));
  for (int i = 0; i < 100; i++)
    assert_int_equal(ezi_loop_post(f.l, count_post, &f), 0);
  assert_true(reach(&f.posts, 100));
  assert_true(reach(&f.wakes, 1));
  assert_true(reach(&f.idle_rounds, 1));
  int before = __atomic_load_n(&f.wakes, __ATOMIC_SEQ_CST);
  ezi_loop_wake(f.l); /* nothing posted: the wake hook still runs */
  assert_true(reach(&f.wakes, before + 1));
  stop(&f);
  assert_int_equal(f.posts, 100);
  assert_int_equal(f.sleeping_ok, 1);
  assert_int_equal(f.awake_ok, 1);
}

/* The same with polling before each sleep (EZMSG_SPIN_US): wake-ups that come while the loop
 * polls are not lost, and the hooks keep their meaning. */
static void test_with_polling(void **state) {
  (void)state;
  fixture f;
  start(&f, 200000); /* 200 us */
  for (int round = 0; round < 200; round++) {
    assert_int_equal(ezi_loop_post(f.l, count_post, &f), 0);
    assert_true(reach(&f.posts, round + 1));
  }
  stop(&f);
  assert_int_equal(f.sleeping_ok, 1);
  assert_int_equal(f.awake_ok, 1);
}

/* A timer set from the loop thread (through a post) fires once its time has passed; a cancelled
 * one never does. */
typedef struct {
  fixture *f;
  uint64_t keep, cancel;
} timers;

static void set_timers(void *arg) {
  timers *t = arg;
  uint64_t now = ezi_now_ns();
  t->keep = ezi_loop_timer(t->f->l, now + 20000000u, on_timer, t->f);
  t->cancel = ezi_loop_timer(t->f->l, now + 10000000u, on_timer, t->f);
  ezi_loop_cancel(t->f->l, t->cancel);
  count_post(t->f);
}

static void test_timers(void **state) {
  (void)state;
  fixture f;
  start(&f, 0);
  timers t = {.f = &f};
  assert_int_equal(ezi_loop_post(f.l, set_timers, &t), 0);
  assert_true(reach(&f.posts, 1));
  assert_true(t.keep != 0);
  assert_true(reach(&f.fired, 1));
  th_sleep_ms(50); /* the cancelled one was due 40 ms ago */
  stop(&f);
  assert_int_equal(f.fired, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sleep_is_announced),
      cmocka_unit_test(test_posts_wake_and_rounds),
      cmocka_unit_test(test_with_polling),
      cmocka_unit_test(test_timers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
