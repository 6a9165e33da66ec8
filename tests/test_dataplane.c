/* The data plane end to end, part 1: every transport with sizes from 0 B to 4 MiB, zero copy,
 * fan-out, fan-in and relays, routing. Real processes, real sockets, real shared memory; the kit
 * and its conventions are in dataplane.h. */
#include "dataplane.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- tests: transports ---------------------------------------------------------------------- */

#define SIZES_EDGE "0,1,65536,4194304"

/* local: publisher and subscriber in this process; messages of 0 B, 1 B, 64 KiB and 4 MiB (the
 * segment grows twice), twice over. */
static void test_local_sizes(void **state) {
  (void)state;
  sizes z = parse_sizes(SIZES_EDGE);
  ez_context *ctx = open_ctx();
  ez_sub *s = make_sub(ctx, "/dp/local");
  ez_pub *p = make_pub(ctx, "/dp/local", 4, false);
  tracker t = {0};
  for (uint64_t k = 0; k < 8; k++) {
    publish_k(p, &z, k);
    recv_check(s, &t, &z, 1);
  }
  assert_mode(ctx, ez_pub_id(p), "local");
  /* More messages than slots while the receiver lags by three: slots are reused correctly. */
  for (uint64_t k = 8; k < 11; k++)
    publish_k(p, &z, k);
  for (uint64_t k = 11; k < 40; k++) {
    publish_k(p, &z, k);
    recv_check(s, &t, &z, 1);
  }
  recv_check(s, &t, &z, 3);
  assert_int_equal(ez_pub_flush(p, TMO), 0);
  assert_quiet(s);
  note_own_segments();
  ez_context_close(ctx);
  assert_segments_gone();
}

/* shm / tcp: the publisher in another process (started after the subscriber), this process
 * receives. */
static void remote_sizes(bool tcp) {
  const char *topic = tcp ? "/dp/tcp" : "/dp/shm";
  sizes z = parse_sizes(SIZES_EDGE);
  ez_context *ctx = open_ctx();
  ez_sub *s = make_sub(ctx, topic);
  child *pub =
      child_start("pub %s %s count=16 sizes=%s nbuf=4 tcp=%d", g_addr, topic, SIZES_EDGE, tcp);
  tracker t = {0};
  recv_check(s, &t, &z, 15);
  ez_msg last; /* held: the publisher waits for it (ez_pub_flush), so its channel stays */
  assert_int_equal(ez_recv(s, &last, TMO), 0);
  assert_int_equal(t.n, 1);
  assert_mode(ctx, t.ids[0], tcp ? "tcp" : "shm");
  char why[256];
  int rc = check_msg(&t, &last, &z, why, sizeof why);
  ez_msg_release(&last);
  if (rc) fail_msg("%s", why);
  note_own_segments();
  child_done(pub);
  assert_quiet(s);
  ez_context_close(ctx);
  assert_segments_gone();
}

static void test_shm_sizes(void **state) {
  (void)state;
  remote_sizes(false);
}

static void test_tcp_sizes(void **state) {
  (void)state;
  remote_sizes(true);
}

/* The other direction: this process publishes, a subscriber in another process checks. */
static void test_remote_subscriber(void **state) {
  (void)state;
  sizes z = parse_sizes(SIZES_EDGE);
  for (int tcp = 0; tcp <= 1; tcp++) {
    const char *topic = tcp ? "/dp/rsub/tcp" : "/dp/rsub/shm";
    child *sub = child_start("sub %s %s count=12 sizes=%s mode=%s", g_addr, topic, SIZES_EDGE,
                             tcp ? "tcp" : "shm");
    child_expect(sub, "ready");
    ez_context *ctx = open_ctx();
    ez_pub *p = make_pub(ctx, topic, 4, tcp);
    assert_int_equal(ez_pub_num_channels(p), 1); /* connected before ez_pub_create returned */
    for (uint64_t k = 0; k < 12; k++)
      publish_k(p, &z, k);
    assert_int_equal(ez_pub_flush(p, TMO), 0);
    note_own_segments();
    child_done(sub);
    ez_context_close(ctx);
  }
  assert_segments_gone();
}

/* After a burst that made the I/O thread poll (EZMSG_SPIN_US, on by default), an idle second
 * costs this process next to no CPU time: polling stops with the traffic, and nothing else of the
 * library's busy-loops while a link is idle. */
static void test_idle_costs_nothing(void **state) {
  (void)state;
  sizes z = parse_sizes("64");
  child *sub = child_start("sub %s /dp/idle count=3000 sizes=64 mode=shm", g_addr);
  child_expect(sub, "ready");
  ez_context *ctx = open_ctx();
  ez_pub *p = make_pub(ctx, "/dp/idle", 32, false);
  for (uint64_t k = 0; k < 3000; k++)
    publish_k(p, &z, k);
  assert_int_equal(ez_pub_flush(p, TMO), 0);
  struct timespec c0, c1;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
  th_sleep_ms(1000); /* nothing published: the subscriber is connected and idle too */
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
  double cpu_ms = (double)(c1.tv_sec - c0.tv_sec) * 1e3 + (double)(c1.tv_nsec - c0.tv_nsec) / 1e6;
  print_message("idle second after 3000 messages: %.2f ms of CPU\n", cpu_ms);
  assert_true(cpu_ms < 50.0); /* a thread polling all along would take ~1000 ms */
  note_own_segments();
  child_done(sub);
  ez_context_close(ctx);
  assert_segments_gone();
}

/* ---- zero copy ------------------------------------------------------------------------------ */

/* Loan a slot, fill it in place, commit (possibly fewer bytes); cancel gives the slot back.
 * Received views point straight into the publisher's slot (local) or the mapped segment (shm). */
static void test_zero_copy_local(void **state) {
  (void)state;
  ez_context *ctx = open_ctx();
  ez_sub *s = make_sub(ctx, "/dp/zc");
  ez_pub *p = make_pub(ctx, "/dp/zc", 4, false);
  sizes z = parse_sizes("1000");
  tracker t = {0};
  for (uint64_t k = 0; k < 10; k++) {
    void *buf = NULL;
    assert_int_equal(ez_pub_loan(p, 4000, &buf, TMO), 0);
    assert_non_null(buf);
    /* another publish while loaned is refused */
    assert_int_equal(ez_publish(p, "x", 1, 0), EZ_EINVAL);
    if (k % 3 == 2) { /* give it back unused: the next loan gets the same message id */
      ez_pub_cancel(p);
      assert_int_equal(ez_pub_loan(p, 4000, &buf, TMO), 0);
    }
    fill(buf, 1000, k);
    assert_int_equal(ez_pub_commit(p, 1000), 0);
    assert_int_equal(ez_pub_commit(p, 1000), EZ_EINVAL); /* nothing loaned any more */
    ez_msg m;
    assert_int_equal(ez_recv(s, &m, TMO), 0);
    assert_ptr_equal(m.data, buf); /* the very bytes we wrote: no copy on either side */
    char why[256];
    int rc = check_msg(&t, &m, &z, why, sizeof why);
    ez_msg_release(&m);
    if (rc) fail_msg("%s", why);
  }
  /* commit more than loaned: refused, the loan stays */
  void *buf = NULL;
  assert_int_equal(ez_pub_loan(p, 16, &buf, TMO), 0);
  assert_int_equal(ez_pub_commit(p, 17), EZ_EINVAL);
  ez_pub_cancel(p);
  /* copying receive: a too-small buffer gets EZ_EMSGSIZE, the message is consumed */
  send_line(p, "0123456789");
  char small[4];
  size_t len = 0;
  assert_int_equal(ez_recv_copy(s, small, sizeof small, &len, TMO), EZ_EMSGSIZE);
  assert_int_equal(len, 10);
  send_line(p, "abc");
  char big[16] = {0};
  assert_int_equal(ez_recv_copy(s, big, sizeof big, &len, TMO), 0);
  assert_int_equal(len, 3);
  assert_memory_equal(big, "abc", 3);
  assert_quiet(s);
  note_own_segments();
  ez_context_close(ctx);
  assert_segments_gone();
}

/* A loaning publisher in another process; views over shm point into the mapped segment. */
static void test_zero_copy_remote(void **state) {
  (void)state;
  sizes z = parse_sizes("0,100,70000");
  for (int tcp = 0; tcp <= 1; tcp++) {
    const char *topic = tcp ? "/dp/zcr/tcp" : "/dp/zcr/shm";
    ez_context *ctx = open_ctx();
    ez_sub *s = make_sub(ctx, topic);
    child *pub = child_start("pub %s %s count=30 sizes=0,100,70000 nbuf=4 loan=1 tcp=%d", g_addr,
                             topic, tcp);
    tracker t = {0};
    char why[256];
    for (int i = 0; i < 30; i++) {
      ez_msg m;
      assert_int_equal(ez_recv(s, &m, TMO), 0);
      bool shm = m.len > 0 && addr_in_shm(m.data);
      int rc = check_msg(&t, &m, &z, why, sizeof why);
      ez_msg_release(&m);
      if (rc) fail_msg("%s", why);
      if (m.len > 0 && shm == (bool)tcp)
        fail_msg("message %d (%s): the view %s in a shared-memory segment", i, topic,
                 shm ? "lies" : "does not lie");
    }
    note_own_segments();
    child_done(pub);
    ez_context_close(ctx);
  }
  assert_segments_gone();
}

/* ---- fan-out, fan-in, relays ---------------------------------------------------------------- */

/* One publisher, four subscribers in two processes (two each), mixed sizes. */
static void test_fan_out(void **state) {
  (void)state;
  const char *sz = "1,64,65536,1000";
  child *a = child_start("sub %s /dp/fanout nsubs=2 count=200 sizes=%s", g_addr, sz);
  child *b = child_start("sub %s /dp/fanout nsubs=2 count=200 sizes=%s", g_addr, sz);
  child_expect(a, "ready");
  child_expect(b, "ready");
  child *p = child_start("pub %s /dp/fanout count=200 sizes=%s nbuf=8 wait=2", g_addr, sz);
  child_done(p);
  child_done(a);
  child_done(b);
  assert_segments_gone();
}

/* Four publishers (two over shm, two over TCP) into one subscriber: each in its own order. */
static void test_fan_in(void **state) {
  (void)state;
  const char *sz = "10,20000,3";
  sizes z = parse_sizes(sz);
  ez_context *ctx = open_ctx();
  ez_sub *s = make_sub(ctx, "/dp/fanin");
  child *p[4];
  for (int i = 0; i < 4; i++)
    p[i] = child_start("pub %s /dp/fanin count=150 sizes=%s nbuf=%d tcp=%d", g_addr, sz, 2 + 2 * i,
                       i & 1);
  tracker t = {0};
  recv_check(s, &t, &z, 600);
  assert_int_equal(t.n, 4);
  for (int i = 0; i < 4; i++)
    assert_int_equal(t.next[i], 150);
  note_own_segments();
  for (int i = 0; i < 4; i++)
    child_done(p[i]);
  assert_quiet(s);
  ez_context_close(ctx);
  assert_segments_gone();
}

/* pub -> relay (shm out) -> relay (tcp out) -> this process: content and order survive. */
static void test_relay_chain(void **state) {
  (void)state;
  const char *sz = "5,65536,0,300000";
  sizes z = parse_sizes(sz);
  ez_context *ctx = open_ctx();
  ez_sub *s = make_sub(ctx, "/dp/relay/c");
  child *r2 = child_start("relay %s /dp/relay/b /dp/relay/c count=60 tcp=1", g_addr);
  child_expect(r2, "ready");
  child *r1 = child_start("relay %s /dp/relay/a /dp/relay/b count=60 tcp=0", g_addr);
  child_expect(r1, "ready");
  child *p = child_start("pub %s /dp/relay/a count=60 sizes=%s nbuf=4", g_addr, sz);
  tracker t = {0};
  recv_check(s, &t, &z, 60);
  note_own_segments();
  child_done(p);
  child_done(r1);
  child_done(r2);
  assert_quiet(s);
  ez_context_close(ctx);
  assert_segments_gone();
}

/* ---- routing -------------------------------------------------------------------------------- */

/* A publisher on /a reaches subscribers of /b through the edge /a -> /b, whether they subscribed
 * before or after the edge was made; DISCONNECT stops it. */
static void test_routing_edges(void **state) {
  (void)state;
  ez_context *ctx = open_ctx();
  ez_pub *pa = make_pub(ctx, "/rt/a", 0, false);
  ez_pub *pb = make_pub(ctx, "/rt/b", 0, false);
  ez_sub *before = make_sub(ctx, "/rt/b");
  ez_sub *on_a = make_sub(ctx, "/rt/a");
  assert_int_equal(ez_graph_connect(g_addr, "/rt/a", "/rt/b", TMO), 0);
  ez_sub *after = make_sub(ctx, "/rt/b");
  send_line(pa, "via edge");
  expect_line(before, "via edge", ez_pub_id(pa));
  expect_line(after, "via edge", ez_pub_id(pa));
  expect_line(on_a, "via edge", ez_pub_id(pa));
  send_line(pb, "direct");
  expect_line(before, "direct", ez_pub_id(pb));
  expect_line(after, "direct", ez_pub_id(pb));
  assert_quiet(on_a); /* /b is downstream of /a, not upstream */

  assert_int_equal(ez_graph_disconnect(g_addr, "/rt/a", "/rt/b", TMO), 0);
  send_line(pa, "after disconnect");
  send_line(pb, "marker");
  expect_line(before, "marker", ez_pub_id(pb));
  expect_line(after, "marker", ez_pub_id(pb));
  expect_line(on_a, "after disconnect", ez_pub_id(pa));
  assert_quiet(before);
  assert_quiet(after);
  note_own_segments();
  ez_context_close(ctx);
  assert_segments_gone();
}

/* The same across processes: a publisher in another process on /x, the edge /x -> /y, this
 * process subscribes to /y after the edge exists; DISCONNECT drops the channel (the publisher sees
 * its channel count fall to 0). */
static void test_routing_remote(void **state) {
  (void)state;
  sizes z = parse_sizes("32");
  assert_int_equal(ez_graph_connect(g_addr, "/rt/x", "/rt/y", TMO), 0);
  child *p = child_start("pub %s /rt/x count=20 sizes=32 wait=1 unwait=1", g_addr);
  child_expect(p, "ready");
  ez_context *ctx = open_ctx();
  ez_sub *s = make_sub(ctx, "/rt/y");
  tracker t = {0};
  recv_check(s, &t, &z, 20);
  child_expect(p, "sent");
  assert_int_equal(ez_graph_disconnect(g_addr, "/rt/x", "/rt/y", TMO), 0);
  child_expect(p, "unconnected"); /* it saw its channel go */
  note_own_segments();
  child_done(p);
  assert_quiet(s);
  ez_context_close(ctx);
  assert_segments_gone();
}

/* Subscribers created before and after their publisher, in this process and in another. */
static void test_sub_before_after_pub(void **state) {
  (void)state;
  sizes z = parse_sizes("8");
  ez_context *ctx = open_ctx();
  ez_sub *early = make_sub(ctx, "/dp/ba");
  child *sub_early = child_start("sub %s /dp/ba count=10 sizes=8", g_addr);
  child_expect(sub_early, "ready");
  ez_pub *p = make_pub(ctx, "/dp/ba", 0, false);
  ez_sub *late = make_sub(ctx, "/dp/ba");
  child *sub_late = child_start("sub %s /dp/ba count=10 sizes=8", g_addr);
  child_expect(sub_late, "ready");
  assert_int_equal(ez_pub_num_channels(p), 3); /* local + two processes */
  for (uint64_t k = 0; k < 10; k++)
    publish_k(p, &z, k);
  tracker t1 = {0}, t2 = {0};
  recv_check(early, &t1, &z, 10);
  recv_check(late, &t2, &z, 10);
  assert_int_equal(ez_pub_flush(p, TMO), 0);
  note_own_segments();
  child_done(sub_early);
  child_done(sub_late);
  ez_context_close(ctx);
  assert_segments_gone();
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_local_sizes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_shm_sizes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_tcp_sizes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_remote_subscriber, setup, teardown),
      cmocka_unit_test_setup_teardown(test_idle_costs_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_zero_copy_local, setup, teardown),
      cmocka_unit_test_setup_teardown(test_zero_copy_remote, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fan_out, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fan_in, setup, teardown),
      cmocka_unit_test_setup_teardown(test_relay_chain, setup, teardown),
      cmocka_unit_test_setup_teardown(test_routing_edges, setup, teardown),
      cmocka_unit_test_setup_teardown(test_routing_remote, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sub_before_after_pub, setup, teardown),
  };
  return dp_main(argc, argv, tests, sizeof tests / sizeof tests[0]);
}
