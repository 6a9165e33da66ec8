/* An ezmsg-c context as a 3.9.0 backend process (procclient.c): it registers a unit of its own
 * with our graph server in the released dialect, and answers what 3.9's tools route to it,
 * checked from a fake 3.9 session (tests/fake39.c) byte by byte: PING, GET_PROCESS_STATS,
 * GET_PROFILING_SNAPSHOT with the counts of its real publisher and subscriber, bad and unknown
 * requests; a second context of the process gets a unit of its own; $EZMSG_REGISTER_PROCESS=0
 * keeps a context out of the process list. */
#include "fake39.h"
#include "harness.h"
#include "proto/meta39.h"
#include "proc/procclient.h"
#include "rawproto.h"
#include "base/wire.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TMO 5000

/* How many processes of this pid the server lists; the unit of the first into unit. */
static int ours_listed(int s, char *unit, size_t cap) {
  ezi_pk_doc *d;
  ezi_m39_graph_snapshot gs;
  f39_snapshot(s, &d, &gs);
  int n = 0;
  for (size_t i = 0; i < gs.n_processes; i++) {
    const ezi_m39_snapshot_process *x = &gs.processes[i];
    if (!x->pid.has || x->pid.v != getpid()) continue;
    if (n++ == 0 && unit) snprintf(unit, cap, "%s", x->units.n ? x->units.v[0] : "");
  }
  ezi_pk_doc_free(d);
  return n;
}

/* Waits (up to 10 s: the registration is in the background) until `want` are listed. */
static void wait_listed(int s, int want, char *unit, size_t cap) {
  int n = -1;
  for (int64_t end = th_now_ms() + 10000; th_now_ms() < end; th_sleep_ms(20))
    if ((n = ours_listed(s, unit, cap)) == want) return;
  fail_msg("%d processes of ours listed, not %d", n, want);
}

/* Routes op to unit and reads the process's ProcessControlResponse (its document into *d). */
static void ask(int s, const char *unit, const char *op, const void *pl, size_t n, ezi_pk_doc **d,
                ezi_m39_control_response *r) {
  f39_route(s, unit, op, "5.0", pl, n);
  f39_rd_answer(s, &EZI_M39_PROCESS_CONTROL_RESPONSE, d, r);
}

static void expect_unit(const char *unit, const char *suffix) {
  char host[256] = {0}, want[400];
  assert_int_equal(gethostname(host, sizeof host - 1), 0);
  snprintf(want, sizeof want, EZI_PROC_UNIT_PREFIX "%s/%d%s", host, (int)getpid(), suffix);
  assert_string_equal(unit, want);
}

/* The context registers as a process on the graph, with its pid, host and unit, and leaves the
 * list when it closes. */
static void test_registers(void **state) {
  (void)state;
  char sid[64], unit[400];
  int s = f39_session(sid);
  assert_int_equal(ours_listed(s, NULL, 0), 0);
  ez_context *ctx;
  assert_int_equal(ez_context_open(th_addr, &ctx), 0);
  wait_listed(s, 1, unit, sizeof unit);
  expect_unit(unit, "");
  ez_context_close(ctx);
  wait_listed(s, 0, NULL, 0);
  close(s);
}

/* A context with a subscriber and a publisher on `topic`, once its unit is listed (into unit). */
static void pair_up(int s, const char *topic, ez_context **ctx, ez_pub **pub, ez_sub **sub,
                    char *unit, size_t cap) {
  assert_int_equal(ez_context_open(th_addr, ctx), 0);
  assert_int_equal(ez_sub_create(*ctx, topic, NULL, sub), 0);
  assert_int_equal(ez_pub_create(*ctx, topic, NULL, pub), 0);
  wait_listed(s, 1, unit, cap);
}

/* k messages published and each taken. */
static void move(ez_pub *pub, ez_sub *sub, int k) {
  for (int i = 0; i < k; i++) {
    assert_int_equal(ez_publish(pub, &i, sizeof i, TMO), 0);
    ez_msg m;
    assert_int_equal(ez_recv(sub, &m, TMO), 0);
    ez_msg_release(&m);
  }
}

/* What a 3.9 tool asks, routed to the context's unit: the answers come from this process, and
 * the profiling snapshot counts what its publisher and subscriber really moved. */
static void test_answers(void **state) {
  (void)state;
  char sid[64], unit[400];
  int s = f39_session(sid);
  ez_context *ctx;
  ez_pub *pub;
  ez_sub *sub;
  pair_up(s, "/pc/t", &ctx, &pub, &sub, unit, sizeof unit);
  move(pub, sub, 10);

  ezi_pk_doc *d, *pd;
  ezi_m39_control_response r;
  ask(s, unit, "PING", NULL, 0, &d, &r);
  assert_true(r.ok);
  assert_true(r.payload.has);
  ezi_m39_ping ping;
  assert_int_equal(
      ezi_m39_load(&EZI_M39_PROCESS_PING, r.payload.p, r.payload.len, &pd, &ping, NULL), 0);
  assert_int_equal(ping.pid, getpid());
  assert_true(ping.timestamp > 1e9); /* wall clock, as 3.9's */
  ezi_pk_doc_free(pd);
  ezi_pk_doc_free(d);

  ask(s, unit, "GET_PROCESS_STATS", NULL, 0, &d, &r);
  assert_true(r.ok);
  ezi_m39_stats st;
  assert_int_equal(ezi_m39_load(&EZI_M39_PROCESS_STATS, r.payload.p, r.payload.len, &pd, &st, NULL),
                   0);
  assert_int_equal(st.owned_units.n, 1);
  assert_string_equal(st.owned_units.v[0], unit);
  ezi_pk_doc_free(pd);
  ezi_pk_doc_free(d);

  ask(s, unit, "GET_PROFILING_SNAPSHOT", NULL, 0, &d, &r);
  assert_true(r.ok);
  ezi_m39_profiling_snapshot sn;
  assert_int_equal(
      ezi_m39_load(&EZI_M39_PROCESS_PROFILING_SNAPSHOT, r.payload.p, r.payload.len, &pd, &sn, NULL),
      0);
  assert_int_equal(sn.pid, getpid());
  assert_int_equal(sn.n_publishers, 1);
  assert_string_equal(sn.publishers[0].topic, "/pc/t");
  assert_int_equal(sn.publishers[0].messages_published_total, 10);
  assert_int_equal(sn.n_subscribers, 1);
  assert_string_equal(sn.subscribers[0].topic, "/pc/t");
  assert_int_equal(sn.subscribers[0].messages_received_total, 10);
  assert_int_equal(sn.subscribers[0].channel_kind_last, EZI_M39_CH_LOCAL);
  ezi_pk_doc_free(pd);
  /* ... and our own profile of the process, for ez_profile, which 3.9's unpickling ignores. */
  const ezi_pk *root;
  assert_int_equal(ezi_pk_load(r.payload.p, r.payload.len, NULL, &pd, &root, NULL), 0);
  const char *text = ezi_pk_str_of(ezi_pk_attr(root, EZI_PROC_PROFILE_ATTR), NULL);
  assert_non_null(text);
  ez_profile_data pf;
  assert_int_equal(ez_profile_parse(text, &pf), 0);
  assert_int_equal(pf.n_publishers, 1);
  assert_int_equal(pf.publishers[0].messages_total, 10);
  ez_profile_data_free(&pf);
  ezi_pk_doc_free(pd);
  ezi_pk_doc_free(d);

  /* Unknown and malformed requests get an error answer, and the link goes on. */
  ask(s, unit, "REBOOT_THE_WORLD", NULL, 0, &d, &r);
  assert_false(r.ok);
  assert_int_equal(r.error_code, EZI_M39_ERR_UNSUPPORTED_OPERATION);
  ezi_pk_doc_free(d);
  ask(s, unit, "SET_PROFILING_TRACE", NULL, 0, &d, &r);
  assert_false(r.ok);
  ezi_pk_doc_free(d);
  ask(s, unit, "SET_PROFILING_TRACE", "\x80\x04\x95garbage", 11, &d, &r);
  assert_false(r.ok);
  ezi_pk_doc_free(d);
  ask(s, unit, "GET_PROFILING_TRACE_BATCH", "\x80\x04K\x05.", 5, &d, &r);
  assert_true(r.ok); /* no trace on: an empty batch */
  ezi_m39_trace_batch tb;
  assert_int_equal(ezi_m39_load(&EZI_M39_PROCESS_PROFILING_TRACE_BATCH, r.payload.p, r.payload.len,
                                &pd, &tb, NULL),
                   0);
  assert_int_equal(tb.n_samples, 0);
  ezi_pk_doc_free(pd);
  ezi_pk_doc_free(d);
  ask(s, unit, "PING", NULL, 0, &d, &r);
  assert_true(r.ok);
  ezi_pk_doc_free(d);

  ez_pub_destroy(pub);
  ez_sub_destroy(sub);
  ez_context_close(ctx);
  close(s);
}

/* One snapshot of the unit, parsed; our own profile's window into *ours_w. */
static void snap(int s, const char *unit, const char *payload, ezi_pk_doc **pd,
                 ezi_m39_profiling_snapshot *sn, double *ours_w) {
  ezi_pk_doc *d;
  ezi_m39_control_response r;
  ask(s, unit, "GET_PROFILING_SNAPSHOT", payload, payload ? strlen(payload) : 0, &d, &r);
  assert_true(r.ok);
  assert_int_equal(
      ezi_m39_load(&EZI_M39_PROCESS_PROFILING_SNAPSHOT, r.payload.p, r.payload.len, pd, sn, NULL),
      0);
  ezi_pk_doc *od;
  const ezi_pk *root;
  assert_int_equal(ezi_pk_load(r.payload.p, r.payload.len, NULL, &od, &root, NULL), 0);
  ez_profile_data pf;
  assert_int_equal(
      ez_profile_parse(ezi_pk_str_of(ezi_pk_attr(root, EZI_PROC_PROFILE_ATTR), NULL), &pf), 0);
  *ours_w = pf.window_s;
  ez_profile_data_free(&pf);
  ezi_pk_doc_free(od);
  ezi_pk_doc_free(d);
}

/* As 3.9's processes, a snapshot's window counts exactly what moved since the previous snapshot
 * (whoever asked for it) over the time since: not our telemetry's 100 ms buckets, so snapshots
 * taken close together (two tools polling) still give true rates. Our own profile comes over the
 * window an ezmsg-c asker names (EZI_PROC_WINDOW_ASK), however recent the last snapshot. */
static void test_snapshot_windows(void **state) {
  (void)state;
  char sid[64], unit[400];
  int s = f39_session(sid);
  ez_context *ctx;
  ez_pub *pub;
  ez_sub *sub;
  pair_up(s, "/pc/w", &ctx, &pub, &sub, unit, sizeof unit);
  ezi_pk_doc *pd;
  ezi_m39_profiling_snapshot sn;
  double ours_w;
  snap(s, unit, NULL, &pd, &sn, &ours_w); /* the first: our last 2 s */
  assert_true(sn.window_seconds == EZ_PROFILE_WINDOW_S);
  ezi_pk_doc_free(pd);
  for (int round = 0; round < 3; round++) {
    int k = 3 + round * 4;
    int64_t t0 = th_now_ms();
    move(pub, sub, k);
    snap(s, unit, NULL, &pd, &sn, &ours_w);
    double took = (double)(th_now_ms() - t0) / 1e3;
    assert_int_equal(sn.n_publishers, 1);
    assert_int_equal(sn.publishers[0].messages_published_window, k);
    assert_int_equal(sn.n_subscribers, 1);
    assert_int_equal(sn.subscribers[0].messages_received_window, k);
    assert_true(sn.window_seconds > 0 && sn.window_seconds < took + 5.0);
    assert_true(fabs(sn.publishers[0].publish_rate_hz_window - k / sn.window_seconds) < 1e-6);
    ezi_pk_doc_free(pd);
  }
  snap(s, unit, NULL, &pd, &sn, &ours_w); /* nothing moved since */
  assert_int_equal(sn.publishers[0].messages_published_window, 0);
  assert_int_equal(sn.subscribers[0].messages_received_window, 0);
  ezi_pk_doc_free(pd);
  snap(s, unit, EZI_PROC_WINDOW_ASK "5", &pd, &sn, &ours_w); /* a window asked for */
  assert_true(ours_w == 5.0);
  ezi_pk_doc_free(pd);
  snap(s, unit, EZI_PROC_WINDOW_ASK "junk", &pd, &sn, &ours_w); /* not a number: ignored */
  assert_true(ours_w < 5.0);
  ezi_pk_doc_free(pd);
  ez_pub_destroy(pub);
  ez_sub_destroy(sub);
  ez_context_close(ctx);
  close(s);
}

/* A second context of the process on the same graph is a process of its own, with a unit of its
 * own, and a context reopened gets its old unit back; one opened with $EZMSG_REGISTER_PROCESS=0
 * is not listed at all. */
static void test_second_context_and_opt_out(void **state) {
  (void)state;
  char sid[64], unit[400];
  int s = f39_session(sid);
  ez_context *a, *b, *c;
  assert_int_equal(ez_context_open(th_addr, &a), 0);
  wait_listed(s, 1, unit, sizeof unit);
  expect_unit(unit, "");
  setenv("EZMSG_REGISTER_PROCESS", "0", 1);
  assert_int_equal(ez_context_open(th_addr, &c), 0);
  unsetenv("EZMSG_REGISTER_PROCESS");
  assert_int_equal(ez_context_open(th_addr, &b), 0);
  wait_listed(s, 2, NULL, 0);
  /* c's link, had it one, would have started before b's: with b's registered and some time
   * more, it would be listed by now. */
  th_sleep_ms(300);
  assert_int_equal(ours_listed(s, NULL, 0), 2);
  ezi_pk_doc *d;
  ezi_m39_graph_snapshot gs;
  f39_snapshot(s, &d, &gs);
  int second = 0;
  for (size_t i = 0; i < gs.n_processes; i++) {
    const ezi_m39_snapshot_process *x = &gs.processes[i];
    if (!x->pid.has || x->pid.v != getpid() || x->units.n != 1 || !strcmp(x->units.v[0], unit))
      continue;
    expect_unit(x->units.v[0], "/2");
    second++;
  }
  ezi_pk_doc_free(d);
  assert_int_equal(second, 1);
  ezi_m39_control_response r;
  ask(s, unit, "PING", NULL, 0, &d, &r);
  assert_true(r.ok);
  ezi_pk_doc_free(d);
  ez_context_close(c);
  ez_context_close(a);
  wait_listed(s, 1, NULL, 0);
  /* a's unit is free again: a new context takes it. */
  assert_int_equal(ez_context_open(th_addr, &a), 0);
  wait_listed(s, 2, NULL, 0);
  char units[2][400];
  f39_snapshot(s, &d, &gs);
  int k = 0;
  for (size_t i = 0; i < gs.n_processes && k < 2; i++)
    if (gs.processes[i].pid.has && gs.processes[i].pid.v == getpid())
      snprintf(units[k++], 400, "%s", gs.processes[i].units.v[0]);
  ezi_pk_doc_free(d);
  assert_true(!strcmp(units[0], unit) || !strcmp(units[1], unit));
  ez_context_close(a);
  ez_context_close(b);
  wait_listed(s, 0, NULL, 0);
  close(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_registers, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_answers, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_snapshot_windows, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_second_context_and_opt_out, th_setup, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
