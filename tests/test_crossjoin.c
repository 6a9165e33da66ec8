/* Two processes that subscribe to each other's topics at the same moment must both connect: their
 * channel handshakes are answered by each other's I/O threads, so neither may block on the other
 * (a regression: each used to wait out a 5 s handshake timeout and stay unconnected). */
#include "harness.h"

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

static void test_cross_subscribe(void **state) {
  (void)state;
  char addr[64];
  th_free_address(addr, sizeof addr);
  pid_t srv = th_start_server(addr);
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
  assert_int_equal(th_stop(srv, SIGTERM, 5000), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_cross_subscribe)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
