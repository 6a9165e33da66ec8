/* The data plane end to end, part 2: backpressure, pause / resume / sync, peers that are killed,
 * the subscriber's fd, a graph server that dies. Real processes, real sockets, real shared
 * memory; the kit and its conventions are in dataplane.h. */
#include "dataplane.h"
#include "pub/pubdebug.h" /* ezi_pub_describe */

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- backpressure --------------------------------------------------------------------------- */

/* A slow subscriber in another process: publish waits, nothing is dropped (with 1 and 2 slots,
 * over shm and TCP). */
static void test_backpressure_slow(void **state) {
  (void)state;
  sizes z = parse_sizes("100,2000");
  for (int v = 0; v < 4; v++) {
    int nbuf = 1 + (v & 1), tcp = v >> 1;
    char topic[64];
    snprintf(topic, sizeof topic, "/dp/slow/%d", v);
    child *sub = child_start("sub %s %s count=60 sizes=100,2000 delay=3", g_addr, topic);
    child_expect(sub, "ready");
    ez_context *ctx = open_ctx();
    ez_pub *p = make_pub(ctx, topic, (uint32_t)nbuf, tcp);
    for (uint64_t k = 0; k < 60; k++)
      publish_k(p, &z, k);
    assert_int_equal(ez_pub_flush(p, TMO), 0);
    note_own_segments();
    child_done(sub);
    ez_context_close(ctx);
  }
  assert_segments_gone();
}

/* Slots held by a subscriber: publish with a timeout returns EZ_ETIMEDOUT (nothing sent), and
 * succeeds once they are released. In this process, then with the holder in another process. */
static void test_publish_timeout_when_held(void **state) {
  (void)state;
  sizes z = parse_sizes("16");
  ez_context *ctx = open_ctx();
  ez_sub *s = make_sub(ctx, "/dp/held");
  ez_pub *p = make_pub(ctx, "/dp/held", 2, false);
  for (uint64_t k = 0; k < 2; k++)
    publish_k(p, &z, k);
  ez_msg m0, m1;
  assert_int_equal(ez_recv(s, &m0, TMO), 0);
  assert_int_equal(ez_recv(s, &m1, TMO), 0);
  uint8_t b[16];
  fill(b, 16, 2);
  assert_int_equal(ez_publish(p, b, 16, 0), EZ_ETIMEDOUT);
  assert_int_equal(ez_publish(p, b, 16, 100), EZ_ETIMEDOUT);
  void *buf;
  assert_int_equal(ez_pub_loan(p, 16, &buf, 50), EZ_ETIMEDOUT);
  assert_int_equal(ez_pub_flush(p, 50), EZ_ETIMEDOUT);
  ez_msg_release(&m0); /* frees slot 0: message 2 goes there */
  assert_int_equal(ez_publish(p, b, 16, TMO), 0);
  assert_int_equal(ez_publish(p, b, 16, 50), EZ_ETIMEDOUT); /* slot 1 still held */
  ez_msg_release(&m1);
  tracker t = {.n = 1, .next = {2}};
  snprintf(t.ids[0], 37, "%s", ez_pub_id(p));
  recv_check(s, &t, &z, 1); /* message 2, exactly once: the timed-out attempts sent nothing */
  assert_quiet(s);
  assert_int_equal(ez_pub_flush(p, TMO), 0);
  note_own_segments();
  ez_context_close(ctx);

  /* Holder in another process. */
  child *sub = child_start("sub %s /dp/held2 count=10 sizes=16 hold=3", g_addr);
  child_expect(sub, "ready");
  ctx = open_ctx();
  p = make_pub(ctx, "/dp/held2", 3, false);
  for (uint64_t k = 0; k < 3; k++)
    publish_k(p, &z, k);
  child_expect(sub, "held");
  fill(b, 16, 3);
  assert_int_equal(ez_publish(p, b, 16, 200), EZ_ETIMEDOUT);
  /* What it waited for, in words: slot 0, which the other process's channel holds (as a lease
   * of TX_SHM, or in the shared ring once the channel switched to one). */
  char why[4096];
  assert_true(ezi_pub_describe(p, why, sizeof why) > 0);
  print_message("%s", why);
  assert_non_null(strstr(why, "next_id 3 (slot 0)"));
  assert_true(strstr(why, "slot 0: lease 1") || strstr(why, "refs 1"));
  assert_non_null(strstr(why, "channel "));
  char small[16]; /* cut short, still terminated */
  assert_int_equal(ezi_pub_describe(p, small, sizeof small), sizeof small - 1);
  assert_int_equal(strlen(small), sizeof small - 1);
  assert_memory_equal(small, why, sizeof small - 1);
  child_say(sub, "release\n");
  for (uint64_t k = 3; k < 10; k++)
    publish_k(p, &z, k);
  assert_int_equal(ez_pub_flush(p, TMO), 0);
  note_own_segments();
  child_done(sub);
  ez_context_close(ctx);
  assert_segments_gone();
}

/* The publisher grows its segment while subscribers still view messages in the old one: those
 * views stay intact until released, and what follows arrives from the new segment. */
static void test_grow_while_held(void **state) {
  (void)state;
  const char *sz = "100,100,200000,5";
  sizes z = parse_sizes(sz);
  /* in this process */
  ez_context *ctx = open_ctx();
  ez_sub *s = make_sub(ctx, "/dp/grow");
  ez_pub *p = make_pub(ctx, "/dp/grow", 4, false);
  publish_k(p, &z, 0);
  publish_k(p, &z, 1);
  ez_msg m0, m1;
  assert_int_equal(ez_recv(s, &m0, TMO), 0);
  assert_int_equal(ez_recv(s, &m1, TMO), 0);
  publish_k(p, &z, 2); /* grows */
  publish_k(p, &z, 3);
  char why[256];
  if (check_bytes(&m0, 0, &z, why, sizeof why) || check_bytes(&m1, 1, &z, why, sizeof why))
    fail_msg("held across the grow: %s", why);
  ez_msg_release(&m0);
  ez_msg_release(&m1);
  tracker t = {.n = 1, .next = {2}};
  snprintf(t.ids[0], 37, "%s", ez_pub_id(p));
  recv_check(s, &t, &z, 2);
  for (uint64_t k = 4; k < 12; k++) {
    publish_k(p, &z, k);
    recv_check(s, &t, &z, 1);
  }
  note_own_segments();
  ez_context_close(ctx);

  /* a subscriber in another process holds messages 0 and 1 (over shm, then TCP) */
  for (int tcp = 0; tcp <= 1; tcp++) {
    const char *topic = tcp ? "/dp/grow/tcp" : "/dp/grow/shm";
    child *c = child_start("sub %s %s count=12 sizes=%s hold=2", g_addr, topic, sz);
    child_expect(c, "ready");
    ctx = open_ctx();
    p = make_pub(ctx, topic, 4, tcp);
    publish_k(p, &z, 0);
    publish_k(p, &z, 1);
    child_expect(c, "held");
    publish_k(p, &z, 2); /* grows while 0 and 1 are held */
    publish_k(p, &z, 3);
    note_own_segments();
    child_say(c, "release\n");
    for (uint64_t k = 4; k < 12; k++)
      publish_k(p, &z, k);
    assert_int_equal(ez_pub_flush(p, TMO), 0);
    note_own_segments();
    child_done(c);
    ez_context_close(ctx);
  }
  assert_segments_gone();
}

/* A subscriber destroyed while it views and has queued messages gives their slots back. */
static void test_sub_destroy_releases(void **state) {
  (void)state;
  sizes z = parse_sizes("10");
  ez_context *ctx = open_ctx();
  ez_sub *keep = make_sub(ctx, "/dp/destroy");
  ez_sub *s = make_sub(ctx, "/dp/destroy");
  ez_pub *p = make_pub(ctx, "/dp/destroy", 3, false);
  for (uint64_t k = 0; k < 3; k++)
    publish_k(p, &z, k);
  tracker t = {0};
  recv_check(keep, &t, &z, 3);
  ez_msg m;
  assert_int_equal(ez_recv(s, &m, TMO), 0); /* viewed; two more queued */
  assert_int_equal(ez_publish(p, "x", 1, 50), EZ_ETIMEDOUT);
  ez_sub_destroy(s);
  assert_int_equal(ez_pub_flush(p, TMO), 0);
  for (uint64_t k = 3; k < 10; k++) {
    publish_k(p, &z, k);
    recv_check(keep, &t, &z, 1);
  }
  assert_quiet(keep);

  /* More queued than the purge's batch (64): every one of them is released. */
  ez_sub *many = make_sub(ctx, "/dp/destroy/many");
  ez_pub *wide = make_pub(ctx, "/dp/destroy/many", 200, false);
  for (uint64_t k = 0; k < 200; k++)
    publish_k(wide, &z, k);
  assert_int_equal(ez_publish(wide, "x", 1, 50), EZ_ETIMEDOUT); /* all 200 slots held */
  ez_sub_destroy(many);
  assert_int_equal(ez_pub_flush(wide, TMO), 0);

  /* the same with the subscriber in another process that exits while holding */
  child *c = child_start("sub %s /dp/destroy2 count=5 sizes=10 hold=2 quit_held=1", g_addr);
  child_expect(c, "ready");
  ez_pub *q = make_pub(ctx, "/dp/destroy2", 2, false);
  publish_k(q, &z, 0);
  publish_k(q, &z, 1);
  child_expect(c, "held");
  child_say(c, "quit\n");
  child_done(c); /* it destroyed its subscriber and context while holding */
  assert_int_equal(ez_pub_flush(q, TMO), 0);
  publish_k(q, &z, 2);
  note_own_segments();
  ez_context_close(ctx);
  assert_segments_gone();
}

/* ---- pause / resume / sync ------------------------------------------------------------------- */

typedef struct bg_publish {
  ez_pub *p;
  const sizes *z;
  uint64_t k;
  int rc;
  atomic_bool done;
} bg_publish;

static void *bg_publish_fn(void *arg) {
  bg_publish *b = arg;
  size_t len = size_of(b->z, b->k);
  uint8_t buf[64];
  fill(buf, len, b->k);
  b->rc = ez_publish(b->p, buf, len, TMO);
  atomic_store(&b->done, true);
  return NULL;
}

/* A PROFILE round trip reaches every publisher after any PAUSE / RESUME sent before it (same
 * link, in order): when it returns, they have taken effect. */
static void graph_barrier(void) {
  char *json = NULL;
  assert_int_equal(ez_profile(g_addr, 1.0, &json, TMO), 0);
  free(json);
}

static void test_pause_resume_sync(void **state) {
  (void)state;
  sizes z = parse_sizes("40");
  child *sub = child_start("sub %s /dp/pause count=27 sizes=40 delay=10", g_addr);
  child_expect(sub, "ready");
  ez_context *ctx = open_ctx();
  ez_pub *p = make_pub(ctx, "/dp/pause", 32, false);
  uint64_t k = 0;
  for (; k < 5; k++)
    publish_k(p, &z, k);

  /* PAUSE: publish waits (and times out, sending nothing) */
  assert_int_equal(ez_graph_pause(g_addr, TMO), 0);
  graph_barrier();
  uint8_t b[40];
  fill(b, 40, k);
  assert_int_equal(ez_publish(p, b, 40, 200), EZ_ETIMEDOUT);
  /* a publish blocked by the pause goes out on RESUME */
  bg_publish bp = {.p = p, .z = &z, .k = k};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, bg_publish_fn, &bp), 0);
  th_sleep_ms(100);
  assert_false(atomic_load(&bp.done));
  assert_int_equal(ez_graph_resume(g_addr, TMO), 0);
  pthread_join(th, NULL);
  assert_int_equal(bp.rc, 0);
  k++;

  /* SYNC: returns once every buffer is released; publishers stay paused */
  for (int i = 0; i < 20; i++, k++)
    publish_k(p, &z, k);
  assert_int_equal(ez_graph_sync(g_addr, TMO), 0);
  assert_int_equal(ez_pub_flush(p, 0), 0); /* nothing in flight any more */
  fill(b, 40, k);
  assert_int_equal(ez_publish(p, b, 40, 200), EZ_ETIMEDOUT);
  assert_int_equal(ez_graph_resume(g_addr, TMO), 0);
  publish_k(p, &z, k++);
  assert_int_equal(k, 27);
  assert_int_equal(ez_pub_flush(p, TMO), 0);

  /* start_paused: nothing goes out before RESUME */
  ez_pub_opts o;
  ez_pub_opts_init(&o);
  o.start_paused = true;
  ez_pub *q = NULL;
  assert_int_equal(ez_pub_create(ctx, "/dp/pause2", &o, &q), 0);
  assert_int_equal(ez_publish(q, "x", 1, 100), EZ_ETIMEDOUT);
  assert_int_equal(ez_graph_resume(g_addr, TMO), 0);
  assert_int_equal(ez_publish(q, "x", 1, TMO), 0);

  note_own_segments();
  child_done(sub);
  ez_context_close(ctx);
  assert_segments_gone();
}

/* ---- failures ------------------------------------------------------------------------------- */

/* A subscriber process holding slots is SIGKILLed: the publisher gets its slots back and carries
 * on; the other subscriber receives everything. */
static void test_kill_subscriber(void **state) {
  (void)state;
  sizes z = parse_sizes("200,5000");
  child *good = child_start("sub %s /dp/kill/sub count=100 sizes=200,5000", g_addr);
  child *holder = child_start("sub %s /dp/kill/sub count=100 sizes=200,5000 hold=2", g_addr);
  child_expect(good, "ready");
  child_expect(holder, "ready");
  child *holder2 = child_start("sub %s /dp/kill/sub count=100 sizes=200,5000 delay=50", g_addr);
  child_expect(holder2, "ready");
  ez_context *ctx = open_ctx();
  ez_pub *p = make_pub(ctx, "/dp/kill/sub", 4, false);
  uint64_t k = 0;
  for (; k < 4; k++)
    publish_k(p, &z, k);
  child_expect(holder, "held");
  scan_maps(holder->pid, note_cb, NULL);
  scan_maps(holder2->pid, note_cb, NULL);
  child_kill(holder);    /* holding messages 0 and 1 */
  publish_k(p, &z, k++); /* slot 0 again: waits for the dead holder's channel to go */
  child_kill(holder2);   /* mid-stream, slow */
  for (; k < 100; k++)
    publish_k(p, &z, k);
  assert_int_equal(ez_pub_flush(p, TMO), 0);
  assert_true(ez_pub_num_channels(p) <= 1); /* the dead are gone ("good" may be done, too) */
  note_own_segments();
  child_done(good);
  ez_context_close(ctx);
  assert_segments_gone();
}

/* A publisher process is SIGKILLed mid-stream: what it had sent arrives in order (or not at
 * all), nothing hangs, and another publisher on the topic is received in full afterwards. */
static void test_kill_publisher(void **state) {
  (void)state;
  sizes z = parse_sizes("64,70000");
  ez_context *ctx = open_ctx();
  ez_sub *s = make_sub(ctx, "/dp/kill/pub");
  child *p1 = child_start("pub %s /dp/kill/pub count=1000000000 sizes=64,70000 nbuf=4", g_addr);
  child *p2 =
      child_start("pub %s /dp/kill/pub count=1000000000 sizes=64,70000 nbuf=4 tcp=1", g_addr);
  tracker t = {0};
  recv_check(s, &t, &z, 40);
  note_own_segments();
  child_kill(p1);
  recv_check(s, &t, &z, 40);
  child_kill(p2);
  /* drain whatever was already delivered: still in order and intact */
  char why[256];
  ez_msg m;
  int rc;
  while ((rc = ez_recv(s, &m, QUIET_MS)) == 0) {
    rc = check_msg(&t, &m, &z, why, sizeof why);
    ez_msg_release(&m);
    if (rc) fail_msg("after the kill: %s", why);
  }
  assert_int_equal(rc, EZ_ETIMEDOUT);
  child *p3 = child_start("pub %s /dp/kill/pub count=50 sizes=64,70000 nbuf=4", g_addr);
  size_t before = t.n;
  recv_check(s, &t, &z, 50);
  assert_int_equal(t.n, before + 1);
  assert_int_equal(t.next[t.n - 1], 50);
  note_own_segments();
  child_done(p3);
  ez_context_close(ctx);
  assert_segments_gone(); /* the dead publishers' segments too, once nobody leases them */
}

/* ---- fd, lost server ------------------------------------------------------------------------ */

/* ez_sub_fd polls readable exactly while a message waits. */
static void test_sub_fd(void **state) {
  (void)state;
  ez_context *ctx = open_ctx();
  ez_sub *s = make_sub(ctx, "/dp/fd");
  int fd = ez_sub_fd(s);
  assert_true(fd >= 0);
  assert_int_equal(ez_sub_fd(s), fd);
  struct pollfd pfd = {fd, POLLIN, 0};
  assert_int_equal(poll(&pfd, 1, 0), 0);
  ez_pub *p = make_pub(ctx, "/dp/fd", 0, false);
  send_line(p, "one");
  send_line(p, "two");
  assert_int_equal(poll(&pfd, 1, TMO), 1);
  ez_msg m;
  assert_int_equal(ez_recv(s, &m, 0), 0);
  ez_msg_release(&m);
  assert_int_equal(poll(&pfd, 1, 0), 1); /* "two" still waits */
  assert_int_equal(ez_recv(s, &m, 0), 0);
  ez_msg_release(&m);
  pfd.revents = 0;
  assert_int_equal(poll(&pfd, 1, 0), 0);
  assert_int_equal(ez_recv(s, &m, 0), EZ_EAGAIN);

  /* from another process: over shared memory, then over TCP (an ezmsg-c publisher: the TCP
   * ring, whose I/O thread wakes the fd once per read) */
  for (int tcp = 0; tcp < 2; tcp++) {
    child *c = child_start(
        tcp ? "pub %s /dp/fd count=3 sizes=7 tcp=1" : "pub %s /dp/fd count=3 sizes=7", g_addr);
    sizes z = parse_sizes("7");
    tracker t = {0};
    for (int i = 0; i < 3; i++) {
      pfd.revents = 0;
      assert_int_equal(poll(&pfd, 1, TMO), 1);
      assert_true(pfd.revents & POLLIN);
      assert_int_equal(ez_recv(s, &m, 0), 0);
      char why[256];
      int rc = check_msg(&t, &m, &z, why, sizeof why);
      ez_msg_release(&m);
      if (rc) fail_msg("%s", why);
    }
    pfd.revents = 0;
    assert_int_equal(poll(&pfd, 1, 0), 0); /* all taken: not readable */
    note_own_segments();
    child_done(c);
  }
  ez_context_close(ctx);
  assert_segments_gone();
}

/* SIGKILL the graph server: ez_recv returns EZ_ECONNLOST, `ezmsg sub` exits 1, and the
 * segments of this process's publisher are still removed when it closes. */
static void test_server_killed(void **state) {
  (void)state;
  ez_context *ctx = open_ctx();
  ez_sub *s = make_sub(ctx, "/dp/lost");
  ez_pub *p = make_pub(ctx, "/dp/lost/pub", 2, false); /* its segment must not outlive us */
  send_line(p, "before");
  note_own_segments();
  assert_true(g_nsegs > 0);
  char ready[128];
  snprintf(ready, sizeof ready, "/tmp/ez_dp_ready.%d", (int)getpid());
  unlink(ready);
  pid_t cli = spawn_cli(SIGKILL, (const char *const[]){"sub", "/dp/lost", "--address", g_addr,
                                                       "--ready-file", ready, NULL});
  for (int i = 0; i < TMO / 10 && access(ready, F_OK) != 0; i++)
    th_sleep_ms(10);
  assert_int_equal(access(ready, F_OK), 0);
  unlink(ready);
  assert_int_equal(th_stop(g_server, SIGKILL, TMO), 128 + SIGKILL);
  g_server = 0;
  ez_msg m;
  assert_int_equal(ez_recv(s, &m, TMO), EZ_ECONNLOST);
  assert_int_equal(ez_recv(s, &m, 0), EZ_ECONNLOST); /* and stays so */
  assert_int_equal(th_wait_exit(cli, TMO), 1);
  ez_context_close(ctx);
  assert_segments_gone(); /* nobody is left to unlink them but the processes that used them */
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_backpressure_slow, setup, teardown),
      cmocka_unit_test_setup_teardown(test_publish_timeout_when_held, setup, teardown),
      cmocka_unit_test_setup_teardown(test_grow_while_held, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sub_destroy_releases, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pause_resume_sync, setup, teardown),
      cmocka_unit_test_setup_teardown(test_kill_subscriber, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sub_fd, setup, teardown),
      cmocka_unit_test_setup_teardown(test_server_killed, setup, teardown),
      /* last: a library crash here would end the run */
      cmocka_unit_test_setup_teardown(test_kill_publisher, setup, teardown),
  };
  return dp_main(argc, argv, tests, sizeof tests / sizeof tests[0]);
}
