/* Per-message traces (ez_trace, trace.h, tracectl.c, traceclient.c) in both dialects: a real
 * publisher and subscriber in a child process, traced from this one through our graph server,
 * started once in the released dialect (3.9's SET_PROFILING_TRACE and trace stream) and once in
 * the profiling dialect (PROFILE polls). The samples must name the traced topic only, carry the
 * three metrics, in order of their sequence numbers, and stop once the trace ends. */
#include "harness.h"
#include "rawproto.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TMO 5000

static char g_addr[64];

/* The child: a publisher on /tr/a at ~200 Hz and one on /tr/b, and a subscriber on /tr/a that
 * holds each message ~1 ms, until killed. */
static void child(void) {
  prctl(PR_SET_PDEATHSIG, SIGKILL); /* (a failed assertion leaves trace_once without stopping it) */
  ez_context *ctx;
  if (ez_context_open(g_addr, &ctx)) _exit(2);
  ez_sub *s;
  ez_pub *a, *b;
  if (ez_sub_create(ctx, "/tr/a", NULL, &s) || ez_pub_create(ctx, "/tr/a", NULL, &a) ||
      ez_pub_create(ctx, "/tr/b", NULL, &b))
    _exit(3);
  for (uint64_t i = 0;; i++) {
    ez_publish(a, &i, sizeof i, 1000);
    ez_publish(b, &i, sizeof i, 1000);
    ez_msg m;
    if (ez_recv(s, &m, 100) == 0) {
      th_sleep_ms(1);
      ez_msg_release(&m);
    }
    th_sleep_ms(4);
  }
}

typedef struct seen {
  int pub_delta, bp, lease, other_topic, bad;
  int64_t last_seq[2];
  int n;
} seen;

static int on_sample(void *user, const ez_trace_sample *x) {
  seen *v = user;
  if (x->dropped) return 0;
  if (strcmp(x->topic, "/tr/a")) {
    v->other_topic++;
    return 0;
  }
  int k = !strcmp(x->metric, "lease_time_ns");
  if (!strcmp(x->metric, "publish_delta_ns"))
    v->pub_delta++;
  else if (!strcmp(x->metric, "backpressure_wait_ns"))
    v->bp++;
  else if (k)
    v->lease++;
  else
    v->bad++;
  if (!(x->value >= 0) || x->pid <= 0 || !x->endpoint_id || !strstr(x->endpoint_id, "/tr/a:"))
    v->bad++;
  if (x->seq >= 0 && x->seq < v->last_seq[k] && strcmp(x->metric, "backpressure_wait_ns"))
    v->bad++; /* each endpoint's samples come in order */
  if (x->seq >= 0) v->last_seq[k] = x->seq;
  return ++v->n >= 400; /* enough */
}

/* A second reader's samples: none taken before it started (the server still holds the first
 * trace's, and hands them to every new reader of its stream). */
typedef struct fresh {
  double since;
  int n, stale;
} fresh;

static int on_fresh(void *user, const ez_trace_sample *x) {
  fresh *f = user;
  if (x->dropped) return 0;
  if (x->time < f->since) f->stale++;
  return ++f->n >= 50;
}

static double wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void trace_once(int dialect) {
  th_free_address(g_addr, sizeof g_addr);
  pid_t srv = th_spawn_cli(-1, "serve", "--address", g_addr, "--dialect",
                           dialect == EZ_DIALECT_PROFILING ? "profiling" : "released", NULL);
  for (int i = 0; i < 500 && ez_graph_ping(g_addr, NULL, 0, 200); i++)
    th_sleep_ms(10);
  pid_t kid = fork();
  assert_true(kid >= 0);
  if (kid == 0) child();
  th_sleep_ms(500); /* its endpoints registered */
  const char *topics[] = {"/tr/a"};
  seen v = {.last_seq = {-1, -1}};
  int rc = ez_trace(g_addr, topics, 1, on_sample, &v, NULL, 20000);
  print_message("    %s: %d samples (%d publish_delta, %d backpressure_wait, %d lease_time)\n",
                dialect == EZ_DIALECT_PROFILING ? "profiling" : "released", v.n, v.pub_delta, v.bp,
                v.lease);
  assert_int_equal(rc, 0);
  assert_int_equal(v.n, 400);
  assert_true(v.pub_delta > 50);
  assert_true(v.lease > 50);
  assert_int_equal(v.other_topic, 0);
  assert_int_equal(v.bad, 0);
  /* A later reader gets only what was taken since it started. */
  fresh f = {.since = wall_s() - 0.005}; /* (to_wall's rounding) */
  assert_int_equal(ez_trace(g_addr, topics, 1, on_fresh, &f, NULL, 20000), 0);
  print_message("    a later reader: %d samples, %d stale\n", f.n, f.stale);
  assert_int_equal(f.n, 50);
  assert_int_equal(f.stale, 0);
  /* The trace ended: the endpoints stop by themselves (ttl) and a profile still works. */
  char *json = NULL;
  assert_int_equal(ez_profile(g_addr, 1.0, &json, TMO), 0);
  assert_non_null(strstr(json, "/tr/a"));
  free(json);
  th_stop(kid, SIGKILL, TMO);
  th_stop(srv, SIGTERM, TMO);
}

static void test_trace_released(void **state) {
  (void)state;
  trace_once(EZ_DIALECT_RELEASED);
}

static void test_trace_profiling(void **state) {
  (void)state;
  trace_once(EZ_DIALECT_PROFILING);
}

/* 3.7 / 3.8 have no profiling: EZ_ENOTSUP, with nothing sent that they would misread. */
static void test_trace_unsupported(void **state) {
  (void)state;
  seen v = {0};
  /* (a server in the profiling dialect answers PROFILE; one greeting as 3.8 does not exist among
   * ours, so play one by hand) */
  char addr[64];
  int lfd = rp_listen(addr, 4);
  pid_t kid = fork();
  if (kid == 0) {
    for (;;) {
      int fd = accept(lfd, NULL, NULL);
      if (fd < 0) _exit(0);
      static const uint8_t greet[] = {5, 0, 0, 0, 0, 0, 0, 0, '3', '.', '8', '.', '0'};
      if (write(fd, greet, sizeof greet) < 0) _exit(1);
      uint8_t b;
      if (read(fd, &b, 1) > 0) _exit(4); /* nothing may be sent to it */
      close(fd);
    }
  }
  close(lfd);
  assert_int_equal(ez_trace(addr, NULL, 0, on_sample, &v, NULL, 1000), EZ_ENOTSUP);
  char *json = NULL;
  assert_int_equal(ez_profile(addr, 1.0, &json, TMO), EZ_ENOTSUP);
  kill(kid, SIGKILL);
  int st;
  waitpid(kid, &st, 0);
  assert_true(WIFSIGNALED(st)); /* (not exit 4: it never got a byte) */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_trace_released),
      cmocka_unit_test(test_trace_profiling),
      cmocka_unit_test(test_trace_unsupported),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
