/* Joining: two processes that subscribe to each other's topics at the same moment must both
 * connect: their channel handshakes are answered by each other's I/O threads, so neither may block
 * on the other (a regression: each used to wait out a 5 s handshake timeout and stay unconnected).
 * And subscribers that join a publisher while it publishes without pause get the handshake's
 * COMPLETE before any message (a regression: a message could come first, and the channel dropped
 * the link as bad data). */
#include "harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* One side: publish `mine`, meet the peer, subscribe to `theirs`, exchange one message. Exit code
 * 0 on success, else a step number. */
static int side(const char *addr, const char *mine, const char *theirs, int rd, int wr) {
  ez_context *ctx;
  ez_pub *p;
  ez_sub *s;
  char c = 1;
  if (ez_context_open(addr, &ctx) || ez_pub_create(ctx, mine, NULL, &p)) return 2;
  if (write(wr, &c, 1) != 1 || read(rd, &c, 1) != 1) return 3; /* both publishers exist */
  double t0 = now_s();
  if (ez_sub_create(ctx, theirs, NULL, &s)) return 4;
  if (now_s() - t0 > 4.0) return 5; /* it waited out the handshake timeout: deadlock */
  for (int i = 0; i < 4000 && ez_pub_num_channels(p) < 1; i++)
    usleep(1000);
  if (ez_pub_num_channels(p) < 1) return 6;
  if (write(wr, &c, 1) != 1 || read(rd, &c, 1) != 1) return 7; /* both subscribed */
  if (ez_publish(p, mine, strlen(mine), 5000)) return 8;
  char buf[16];
  size_t n = 0;
  if (ez_recv_copy(s, buf, sizeof buf, &n, 10000) || n != strlen(theirs) || memcmp(buf, theirs, n))
    return 9;
  if (write(wr, &c, 1) != 1 || read(rd, &c, 1) != 1) return 10; /* both received */
  ez_context_close(ctx);
  return 0;
}

/* Each test has a graph server of its own (th_setup), stopped by pid in the teardown even if the
 * test failed (a server left running, or killed, leaves its segments in /dev/shm). */
static int teardown(void **state) {
  ez_set_log_hook(NULL, NULL, EZ_LOG_WARN);
  return th_teardown(state);
}

static void test_cross_subscribe(void **state) {
  (void)state;
  const char *addr = th_addr;
  for (int round = 0; round < 3; round++) {
    int a[2], b[2];
    assert_int_equal(pipe(a), 0);
    assert_int_equal(pipe(b), 0);
    char x[32], y[32];
    snprintf(x, sizeof x, "/cross/x%d", round);
    snprintf(y, sizeof y, "/cross/y%d", round);
    pid_t k1 = fork();
    if (k1 == 0) _exit(side(addr, x, y, a[0], b[1]));
    pid_t k2 = fork();
    if (k2 == 0) _exit(side(addr, y, x, b[0], a[1]));
    close(a[0]), close(a[1]), close(b[0]), close(b[1]);
    assert_int_equal(th_wait_exit(k1, 30000), 0);
    assert_int_equal(th_wait_exit(k2, 30000), 0);
  }
}

static int g_dropped; /* atomic: links a channel dropped */

static void count_drops(void *user, int level, const char *msg) {
  (void)user;
  (void)level;
  if (strstr(msg, "dropping the link")) __atomic_add_fetch(&g_dropped, 1, __ATOMIC_SEQ_CST);
}

typedef struct {
  ez_pub *pub;
  int stop; /* atomic */
} pub_loop;

static void *publish_forever(void *arg) {
  pub_loop *pl = arg;
  for (uint64_t k = 0; !__atomic_load_n(&pl->stop, __ATOMIC_SEQ_CST); k++)
    ez_publish(pl->pub, &k, sizeof k, 100); /* times out while a subscriber holds everything */
  return NULL;
}

/* 30 subscribers of a second context (another process as far as the library knows: shared
 * memory or TCP) join one after the other a publisher that never pauses, each takes a message
 * and leaves. */
static void join_running(bool tcp) {
  const char *addr = th_addr;
  __atomic_store_n(&g_dropped, 0, __ATOMIC_SEQ_CST);
  ez_set_log_hook(count_drops, NULL, EZ_LOG_WARN);
  ez_context *a = NULL, *b = NULL;
  assert_int_equal(ez_context_open(addr, &a), 0);
  assert_int_equal(ez_context_open(addr, &b), 0);
  ez_pub_opts o;
  ez_pub_opts_init(&o);
  o.force_tcp = tcp;
  pub_loop pl = {0};
  assert_int_equal(ez_pub_create(a, "/join/running", &o, &pl.pub), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, publish_forever, &pl), 0);
  int rc = 0, i; /* no assertion until the thread is stopped: it uses pl */
  for (i = 0; i < 30 && !rc; i++) {
    ez_sub *s = NULL;
    if ((rc = ez_sub_create(b, "/join/running", NULL, &s))) break;
    uint64_t k;
    size_t n = 0;
    rc = ez_recv_copy(s, &k, sizeof k, &n, 10000);
    if (!rc && n != sizeof k) rc = EZ_EPROTO;
    ez_sub_destroy(s);
  }
  __atomic_store_n(&pl.stop, 1, __ATOMIC_SEQ_CST);
  pthread_join(t, NULL);
  ez_pub_destroy(pl.pub);
  ez_context_close(b);
  ez_context_close(a);
  ez_set_log_hook(NULL, NULL, EZ_LOG_WARN);
  if (rc) fail_msg("subscriber %d: %s", i, ez_strerror(rc));
  assert_int_equal(__atomic_load_n(&g_dropped, __ATOMIC_SEQ_CST), 0);
}

static void test_join_running_shm(void **state) {
  (void)state;
  join_running(false);
}

static void test_join_running_tcp(void **state) {
  (void)state;
  join_running(true);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_cross_subscribe, th_setup, teardown),
      cmocka_unit_test_setup_teardown(test_join_running_shm, th_setup, teardown),
      cmocka_unit_test_setup_teardown(test_join_running_tcp, th_setup, teardown)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
