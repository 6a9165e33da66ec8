/* Leaky subscribers (ez_sub_opts.leaky / max_queue, 3.9.0's): a subscriber that does not take its
 * messages never holds its publisher back. Each transport is checked: in the same process (the
 * local ring), and from a publisher in a child process over the shared-memory ring, shared-memory
 * notices (no ring), TCP with the window and TCP without. Every message is accounted for: the
 * publisher sends N without waiting, and what the subscriber takes plus what it dropped is N,
 * with the newest kept (the last one taken is the last one sent). */
#include "harness.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define TMO 5000
#define N 2000

static ez_sub *leaky_sub(ez_context *ctx, const char *topic, uint32_t max_queue) {
  ez_sub_opts o = {.leaky = true, .max_queue = max_queue};
  ez_sub *s = NULL;
  assert_int_equal(ez_sub_create(ctx, topic, &o, &s), 0);
  return s;
}

/* "dropped" of the (only) subscriber entry of this process's profile, -1 if absent. */
static long long dropped_of(ez_context *ctx) {
  char *json = NULL;
  assert_int_equal(ez_context_profile(ctx, 1.0, &json), 0);
  const char *p = strstr(json, "\"dropped\":");
  long long v = p ? strtoll(p + 10, NULL, 10) : -1;
  free(json);
  return v;
}

/* Takes what waits (within a short quiet time), checking the numbers grow; returns how many and
 * the last number seen. */
static size_t drain(ez_sub *s, uint64_t *last) {
  size_t n = 0;
  ez_msg m;
  while (ez_recv(s, &m, 300) == 0) {
    uint64_t v;
    assert_int_equal(m.len, sizeof v);
    memcpy(&v, m.data, sizeof v);
    if (n) assert_true(v > *last);
    *last = v;
    n++;
    ez_msg_release(&m);
  }
  return n;
}

/* Same process: the publisher fills the local ring; the leaky member keeps only max_queue. */
static void test_leaky_local(void **state) {
  (void)state;
  ez_context *ctx;
  assert_int_equal(ez_context_open(th_addr, &ctx), 0);
  ez_sub *s = leaky_sub(ctx, "/leaky/local", 3);
  ez_pub_opts po;
  ez_pub_opts_init(&po);
  po.num_buffers = 8; /* far fewer than N: a held-back publisher would time out at once */
  ez_pub *p;
  assert_int_equal(ez_pub_create(ctx, "/leaky/local", &po, &p), 0);
  for (uint64_t i = 0; i < N; i++)
    assert_int_equal(ez_publish(p, &i, sizeof i, 0), 0); /* never waits */
  uint64_t last = 0;
  size_t got = drain(s, &last);
  assert_int_equal(got, 3); /* exactly max_queue waited */
  assert_int_equal(last, N - 1);
  assert_int_equal(dropped_of(ctx), N - 3);
  assert_int_equal(ez_pub_flush(p, TMO), 0); /* nothing is held */
  ez_context_close(ctx);
}

static char g_mode[16];
static int g_done[2], g_drained[2]; /* child -> parent: sent all; parent -> child: took them */

/* The child: once the parent's subscriber has joined, N messages on `topic` as fast as it can,
 * each publish bounded by 2 s (a held-back publisher fails); then, once the parent took what
 * waits, a flush (everything released, taken or dropped) before it exits 0. It is forked before
 * the parent opens a context: a child of a process with threads may find a lock held forever. */
static void child(const char *topic, pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(8); /* (it died before the line above) */
  close(g_done[0]);
  close(g_drained[1]);
  if (!strcmp(g_mode, "notice")) setenv(EZ_SHM_RING_ENV, "0", 1);
  if (!strcmp(g_mode, "tcp")) setenv(EZ_TCP_WINDOW_ENV, "0", 1);
  ez_context *ctx;
  if (ez_context_open(th_addr, &ctx)) _exit(2);
  ez_pub_opts po;
  ez_pub_opts_init(&po);
  po.num_buffers = 8;
  po.force_tcp = !strncmp(g_mode, "tcp", 3);
  ez_pub *p;
  if (ez_pub_create(ctx, topic, &po, &p)) _exit(3);
  for (int i = 0; ez_pub_num_channels(p) < 1; i++) {
    if (i == 6000) _exit(7); /* no subscriber joined in 30 s */
    th_sleep_ms(5);
  }
  for (uint64_t i = 0; i < N; i++)
    if (ez_publish(p, &i, sizeof i, 2000)) _exit(4);
  char b = 1;
  if (write(g_done[1], &b, 1) != 1 || read(g_drained[0], &b, 1) != 1) _exit(6);
  if (ez_pub_flush(p, 10000)) _exit(5);
  ez_context_close(ctx);
  _exit(0);
}

/* Waits up to ms for a byte (or the end) on fd: 1 a byte, 0 the end or the time out. */
static int wait_byte(int fd, int ms) {
  struct pollfd pf = {.fd = fd, .events = POLLIN};
  char b;
  return poll(&pf, 1, ms) == 1 && read(fd, &b, 1) == 1;
}

static void remote(const char *mode) {
  snprintf(g_mode, sizeof g_mode, "%s", mode);
  char topic[64];
  snprintf(topic, sizeof topic, "/leaky/%s", mode);
  assert_int_equal(pipe(g_done), 0);
  assert_int_equal(pipe(g_drained), 0);
  fflush(stdout);
  fflush(stderr);
  pid_t parent = getpid(), kid = fork();
  assert_true(kid >= 0);
  if (kid == 0) child(topic, parent);
  close(g_done[1]);
  close(g_drained[0]);
  if (!strcmp(mode, "notice")) setenv(EZ_SHM_RING_ENV, "0", 1);
  if (!strcmp(mode, "tcp")) setenv(EZ_TCP_WINDOW_ENV, "0", 1);
  ez_context *ctx;
  assert_int_equal(ez_context_open(th_addr, &ctx), 0);
  unsetenv(EZ_SHM_RING_ENV);
  unsetenv(EZ_TCP_WINDOW_ENV);
  ez_sub *s = leaky_sub(ctx, topic, 2);
  /* Take nothing while the child sends: it must not be held back (its publishes time out at
   * 2 s, with 8 buffers, if it were). Its exit, or 60 s, ends the wait too. */
  int sent = wait_byte(g_done[0], 60000);
  uint64_t last = 0;
  size_t got = drain(s, &last);
  long long dropped = dropped_of(ctx); /* (while its channel is there: the child is alive) */
  char b = 1;
  if (sent) assert_int_equal(write(g_drained[1], &b, 1), 1);
  int st = th_wait_exit(kid, 60000);
  close(g_done[0]);
  close(g_drained[1]);
  assert_int_equal(st, 0);
  print_message("    %s: took %zu, dropped %lld of %d\n", mode, got, dropped, N);
  assert_int_equal((long long)got + dropped, N); /* every message: taken or dropped */
  assert_true(got >= 1); /* what waited, and what was still on its way when it had sent all */
  assert_int_equal(last, N - 1); /* the newest is kept */
  ez_context_close(ctx);
}

static void test_leaky_shm_ring(void **state) {
  (void)state;
  remote("ring");
}
static void test_leaky_shm_notice(void **state) {
  (void)state;
  remote("notice");
}
static void test_leaky_tcp_window(void **state) {
  (void)state;
  remote("tcpwin");
}
static void test_leaky_tcp(void **state) {
  (void)state;
  remote("tcp");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_leaky_local, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_leaky_shm_ring, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_leaky_shm_notice, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_leaky_tcp_window, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_leaky_tcp, th_setup, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
