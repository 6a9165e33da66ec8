/* Fault injection with real processes, part 1: publishers, subscribers and graph servers SIGKILLed
 * or SIGSTOPped mid-stream.
 *
 *  - test_pub_killed_{shm,tcp}: a publisher process dies mid-stream; its subscriber process keeps
 *    running, never prints part of a message, and receives a new publisher's messages.
 *  - test_sub_stopped_{shm,tcp}: a subscriber process stops holding messages; our publisher (4
 *    buffers) blocks; once that process is killed it goes on, and the other subscriber process
 *    receives everything in order.
 *  - test_pub_stopped: a stopped publisher holds up neither a profile nor the graph.
 *  - test_server_killed: every client call fails within its timeout, a waiting ez_recv wakes up
 *    with EZ_ECONNLOST, `ezmsg sub` exits 1 with a message, the data plane itself goes on.
 *  - test_server_stopped: calls to a stopped server time out within their timeouts.
 *  - test_all_killed_server_first: the server, then the publisher and subscriber processes, all
 *    SIGKILLed: nothing is left in /dev/shm.
 *
 * The fixture, and what it checks at the end of each test, are in faults.h. */
#include "faults.h"
#include "proto/marshal.h"
#include "rawproto.h"
#include "base/wire.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- 1. a publisher process is SIGKILLed mid-stream ------------------------------------------ */

/* Text messages over shared memory: the subscriber process keeps running and receives every
 * message of a new publisher started on the same topic afterwards. */
static void test_pub_killed_shm(void **state) {
  fx *f = *state;
  pid_t sub = start_sub(f, "sub", "/faults/pubkill", NULL);
  pid_t p1 = fx_spawn(f, "p1", "pub", "/faults/pubkill", "--address", f->addr, "--message", "first",
                      "--count", "0", "--rate", "500", NULL);
  wait_lines(f, "sub.out", 20, sub, 20000);
  assert_int_equal(fx_kill(f, p1, SIGKILL), 128 + SIGKILL);
  th_sleep_ms(200);
  fx_assert_alive(f, sub, "sub");

  pid_t p2 = fx_spawn(f, "p2", "pub", "/faults/pubkill", "--address", f->addr, "--message",
                      "second", "--count", "50", NULL);
  assert_int_equal(fx_wait(f, p2, 30000), 0); /* exits once the subscriber released all 50 */
  fx_assert_alive(f, sub, "sub");
  assert_int_equal(fx_kill(f, sub, SIGTERM), 0);

  char p[256];
  size_t len;
  char *out = slurp(fx_path(f, "sub.out", p, sizeof p), &len);
  int firsts = 0, seconds = 0;
  for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
    if (!strcmp(line, "first")) {
      assert_int_equal(seconds, 0); /* nothing of the dead publisher after the new one's */
      firsts++;
    } else if (!strcmp(line, "second")) {
      seconds++;
    } else {
      fail_msg("unexpected line '%.40s'", line);
    }
  }
  free(out);
  assert_true(firsts >= 20);
  assert_int_equal(seconds, 50);
  fx_finish(f);
}

/* Large messages over TCP (a SIGKILL very likely cuts a frame): every line the subscriber prints
 * is a whole message, numbered 0, 1, 2, ..., and it then receives the new publisher's. */
static void test_pub_killed_tcp(void **state) {
  fx *f = *state;
  enum { SIZE = 262144 };
  pid_t sub = start_sub(f, "sub", "/faults/pubkill_tcp", NULL);
  pid_t p1 = fx_spawn(f, "p1", "pub", "/faults/pubkill_tcp", "--address", f->addr, "--size",
                      "262144", "--count", "0", "--force-tcp", "--num-buffers", "4", NULL);
  wait_lines(f, "sub.out", 3, sub, 20000);
  assert_int_equal(fx_kill(f, p1, SIGKILL), 128 + SIGKILL);
  th_sleep_ms(200);
  fx_assert_alive(f, sub, "sub");
  pid_t p2 = fx_spawn(f, "p2", "pub", "/faults/pubkill_tcp", "--address", f->addr, "--message",
                      "second", "--count", "20", "--force-tcp", NULL);
  assert_int_equal(fx_wait(f, p2, 30000), 0);
  assert_int_equal(fx_kill(f, sub, SIGTERM), 0);

  char p[256];
  size_t len;
  char *out = slurp(fx_path(f, "sub.out", p, sizeof p), &len);
  uint64_t next = 0;
  int seconds = 0;
  for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
    if (!strcmp(line, "second")) {
      seconds++;
      continue;
    }
    assert_int_equal(seconds, 0);
    assert_int_equal(strlen(line), 2 * SIZE); /* hex: a whole message, never part of one */
    uint64_t id = 0;
    for (int i = 7; i >= 0; i--) {
      unsigned b;
      assert_int_equal(sscanf(line + 2 * i, "%2x", &b), 1);
      id = (id << 8) | b;
    }
    assert_int_equal(id, next);
    next++;
    for (size_t i = 8; i < SIZE; i += 4099) { /* a sample of the body: byte i is i mod 256 */
      unsigned b;
      assert_int_equal(sscanf(line + 2 * i, "%2x", &b), 1);
      assert_int_equal(b, i % 256);
    }
  }
  free(out);
  assert_true(next >= 3);
  assert_int_equal(seconds, 20);
  fx_finish(f);
}

/* ---- 2. a subscriber process is SIGSTOPped, then SIGKILLed ------------------------------------
 */

/* A publisher here (4 buffers) feeds two subscriber processes; one of them is stopped while it
 * holds messages, so the publisher blocks (publish with a timeout, in a loop); once it is killed
 * the publisher goes on, and the other subscriber receives everything in order. */
static void sub_stopped(fx *f, bool force_tcp) {
  enum { N = 200, STOP_AT = 20 };
  const char *topic = force_tcp ? "/faults/stall_tcp" : "/faults/stall";
  pid_t a = start_sub(f, "a", topic, NULL);
  pid_t b = start_sub(f, "b", topic, "200");

  /* Over TCP the subscribers' channels ask for a window (src/pub/pubwin.c): a small one, so that
   * backpressure shows within 200 messages. */
  enum { WINDOW = 16 };
  setenv(EZ_TCP_WINDOW_ENV, "16", 1);
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(f->addr, &ctx), 0);
  unsetenv(EZ_TCP_WINDOW_ENV);
  ez_pub_opts o;
  ez_pub_opts_init(&o);
  o.num_buffers = 4;
  o.force_tcp = force_tcp;
  ez_pub *pub = NULL;
  assert_int_equal(ez_pub_create(ctx, topic, &o, &pub), 0);
  assert_int_equal(ez_pub_num_channels(pub), 2);

  bool stopped = false, killed = false;
  int consecutive = 0, timeouts = 0, blocked_at = -1;
  for (int i = 0; i < N;) {
    if (i == STOP_AT && !stopped) {
      stop_process(a);
      stopped = true;
    }
    char msg[32];
    int n = snprintf(msg, sizeof msg, "msg %04d", i);
    int rc = ez_publish(pub, msg, (size_t)n, 100);
    if (rc == EZ_ETIMEDOUT) {
      assert_true(stopped); /* nobody holds anything before the stop */
      assert_false(killed); /* and the kill releases the publisher for good */
      consecutive++;
      if (++timeouts > 600) fail_msg("publisher blocked for a minute at message %d", i);
      if (consecutive == 5) { /* blocked for good: now kill the stopped subscriber */
        blocked_at = i;
        assert_int_equal(fx_kill(f, a, SIGKILL), 128 + SIGKILL);
        killed = true;
      }
      continue;
    }
    assert_int_equal(rc, 0);
    if (killed && consecutive) /* the kill closed its channel: that is what freed the slot */
      assert_int_equal(ez_pub_num_channels(pub), 1);
    consecutive = 0;
    i++;
  }
  assert_true(killed);
  /* Blocked by backpressure, exactly where 4 buffers (or the TCP window) say: the stopped
   * subscriber had released at most what came before the stop. */
  assert_in_range(blocked_at, STOP_AT, STOP_AT + (force_tcp ? WINDOW : 4));
  assert_int_equal(ez_pub_flush(pub, 20000), 0);

  assert_int_equal(fx_wait(f, b, 30000), 0); /* --count 200 */
  char p[256];
  size_t len;
  char *out = slurp(fx_path(f, "b.out", p, sizeof p), &len);
  char *line = strtok(out, "\n");
  for (int i = 0; i < N; i++, line = strtok(NULL, "\n")) {
    char want[32];
    snprintf(want, sizeof want, "msg %04d", i);
    if (!line || strcmp(line, want))
      fail_msg("subscriber b: line %d is '%s', want '%s'", i, line ? line : "(none)", want);
  }
  assert_null(line);
  free(out);
  ez_pub_destroy(pub);
  ez_context_close(ctx);
  fx_finish(f);
}

static void test_sub_stopped_shm(void **state) { sub_stopped(*state, false); }
static void test_sub_stopped_tcp(void **state) { sub_stopped(*state, true); }

/* ---- 3. the graph server is SIGKILLed ------------------------------------------------------- */

typedef struct waiter {
  ez_sub *sub;
  int rc;
  atomic_bool done;
} waiter;

static void *recv_forever(void *arg) {
  waiter *w = arg;
  ez_msg m;
  w->rc = ez_recv(w->sub, &m, -1);
  if (w->rc == 0) ez_msg_release(&m);
  atomic_store(&w->done, true);
  return NULL;
}

/* Every outcome a dead server may give. */
static bool server_gone_err(int rc) {
  return rc == EZ_ENOSERVER || rc == EZ_ECONNLOST || rc == EZ_ETIMEDOUT;
}

#define ASSERT_FAILS_WITHIN(call, bound_ms)                                                        \
  do {                                                                                             \
    int64_t t0_ = th_now_ms();                                                                     \
    int rc_ = (call);                                                                              \
    int64_t dt_ = th_now_ms() - t0_;                                                               \
    if (!server_gone_err(rc_)) fail_msg("%s returned %d (%s)", #call, rc_, ez_strerror(rc_));      \
    if (dt_ > (bound_ms))                                                                          \
      fail_msg("%s took %lld ms (bound %d)", #call, (long long)dt_, (bound_ms));                   \
  } while (0)

static void test_server_killed(void **state) {
  fx *f = *state;
  /* A publisher process streaming, a CLI subscriber on a quiet topic, and here a subscriber on
   * the stream and one on a quiet topic blocked in ez_recv(-1). */
  pid_t quiet = start_sub(f, "quiet", "/faults/quiet", NULL);
  pid_t pub = fx_spawn(f, "pub", "pub", "/faults/live", "--address", f->addr, "--message", "live",
                       "--count", "0", "--rate", "200", NULL);
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(f->addr, &ctx), 0);
  ez_sub *live = NULL, *still = NULL;
  assert_int_equal(ez_sub_create(ctx, "/faults/live", NULL, &live), 0);
  assert_int_equal(ez_sub_create(ctx, "/faults/still", NULL, &still), 0);
  ez_msg m;
  int rc;
  int64_t t0 = th_now_ms();
  while ((rc = ez_recv(live, &m, 200)) == EZ_ETIMEDOUT && th_now_ms() - t0 < 20000) {
  } /* the publisher process may still be registering */
  assert_int_equal(rc, 0);
  assert_memory_equal(m.data, "live", 4);
  ez_msg_release(&m);

  waiter w = {.sub = still};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, recv_forever, &w), 0);
  th_sleep_ms(100);
  assert_false(atomic_load(&w.done));

  assert_int_equal(fx_kill(f, f->server, SIGKILL), 128 + SIGKILL);

  /* The waiting receiver wakes up with EZ_ECONNLOST. */
  t0 = th_now_ms();
  while (!atomic_load(&w.done) && th_now_ms() - t0 < 10000)
    th_sleep_ms(10);
  if (!atomic_load(&w.done)) fail_msg("ez_recv(-1) still waits 10 s after the server died");
  pthread_join(th, NULL);
  assert_int_equal(w.rc, EZ_ECONNLOST);
  assert_int_equal(ez_recv(still, &m, 0), EZ_ECONNLOST); /* and keeps saying so */

  /* The CLI subscriber exits 1 with a message. */
  assert_int_equal(fx_wait(f, quiet, 10000), 1);
  char p[256];
  char *err = slurp(fx_path(f, "quiet.err", p, sizeof p), NULL);
  if (!strstr(err, "lost the graph server")) fail_msg("ezmsg sub said: %s", err);
  free(err);

  /* Every client call fails within its timeout. */
  ez_graph g = {0};
  char *json = NULL;
  ez_context *ctx2 = NULL;
  ez_sub *s2 = NULL;
  ez_pub *p2 = NULL;
  ASSERT_FAILS_WITHIN(ez_graph_ping(f->addr, NULL, 0, 2000), 2000 + SLACK);
  ASSERT_FAILS_WITHIN(ez_graph_connect(f->addr, "/a", "/b", 2000), 2000 + SLACK);
  ASSERT_FAILS_WITHIN(ez_graph_disconnect(f->addr, "/a", "/b", 2000), 2000 + SLACK);
  ASSERT_FAILS_WITHIN(ez_graph_dag(f->addr, &g, 2000), 2000 + SLACK);
  ASSERT_FAILS_WITHIN(ez_profile(f->addr, 1.0, &json, 2000), 2000 + SLACK);
  ASSERT_FAILS_WITHIN(ez_graph_sync(f->addr, 2000), 2000 + SLACK);
  ASSERT_FAILS_WITHIN(ez_context_open(f->addr, &ctx2), 2000 + SLACK);
  ASSERT_FAILS_WITHIN(ez_sub_create(ctx, "/faults/late", NULL, &s2),
                      2 * EZ_DEFAULT_TIMEOUT_MS + SLACK);
  ASSERT_FAILS_WITHIN(ez_pub_create(ctx, "/faults/late", NULL, &p2), EZ_DEFAULT_TIMEOUT_MS + SLACK);
  assert_null(json);
  assert_null(ctx2);
  assert_null(s2);
  assert_null(p2);
  assert_int_equal(g.n_nodes, 0);

  /* The data plane does not need the server: the stream goes on until its publisher stops;
   * then the receiver drains what was queued and reports the lost server. */
  int got = 0;
  t0 = th_now_ms();
  while (th_now_ms() - t0 < 500) {
    if ((rc = ez_recv(live, &m, 100)) == 0) {
      got++;
      ez_msg_release(&m);
    }
  }
  int st = fx_kill(f, pub, SIGTERM);
  assert_true(st == 0 || st == 1); /* a clean exit, whatever it thinks of the lost server */
  t0 = th_now_ms();
  while ((rc = ez_recv(live, &m, 500)) == 0 && th_now_ms() - t0 < 10000)
    ez_msg_release(&m);
  assert_int_equal(rc, EZ_ECONNLOST);
  print_message("after the server died: %d message(s) arrived in 0.5 s from the live publisher\n",
                got);

  /* Nobody is left to unlink the publisher's segment but its own users: the checks below
   * (fx_finish) want it gone all the same. */
  ez_context_close(ctx);
  fx_finish(f);
}

/* How many of the segments this test's processes mapped still have their names. */
static int names_left(fx *f) {
  int n = 0;
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < f->nnames; i++) {
    char p[64];
    snprintf(p, sizeof p, "/dev/shm/%s", f->names[i]);
    n += access(p, F_OK) == 0;
  }
  pthread_mutex_unlock(&f->mu);
  return n;
}

/* The server dies first, then the publisher and subscriber processes, all by SIGKILL. Nobody is
 * left to remove the publisher's segment but the publisher, and it will not exit: it removes the
 * name as soon as it sees the server gone (mappings stay valid, and with the server gone nobody
 * can join the segment), so its SIGKILL afterwards leaves nothing behind. */
static void test_all_killed_server_first(void **state) {
  fx *f = *state;
  pid_t sub = start_sub(f, "sub", "/faults/allkill", NULL);
  pid_t pub = fx_spawn(f, "pub", "pub", "/faults/allkill", "--address", f->addr, "--message", "x",
                       "--count", "0", "--rate", "500", NULL);
  wait_lines(f, "sub.out", 20, sub, 20000); /* over shared memory: the segment is mapped */
  int64_t t0 = th_now_ms();
  while (names_left(f) == 0 && th_now_ms() - t0 < 10000)
    th_sleep_ms(10); /* the sampler has seen it */
  assert_true(names_left(f) > 0);

  assert_int_equal(fx_kill(f, f->server, SIGKILL), 128 + SIGKILL);
  t0 = th_now_ms();
  while (names_left(f) && th_now_ms() - t0 < 10000)
    th_sleep_ms(10);
  fx_assert_alive(f, pub, "pub");
  /* Whatever is still named now stays: fx_finish fails on it (and removes it). */
  assert_int_equal(fx_kill(f, pub, SIGKILL), 128 + SIGKILL);
  int st = fx_kill(f, sub, SIGKILL); /* (it may have left by itself: it lost the server) */
  assert_true(st == 128 + SIGKILL || st == 1);
  fx_finish(f);
}

/* The graph server is SIGSTOPped (alive but deaf): calls time out within their timeouts; after
 * SIGCONT everything works again. */
static void test_server_stopped(void **state) {
  fx *f = *state;
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(f->addr, &ctx), 0);
  stop_process(f->server);
  ez_graph g = {0};
  char *json = NULL;
  ez_pub *p = NULL;
  int64_t t0 = th_now_ms();
  int rc = ez_graph_dag(f->addr, &g, 500);
  assert_int_equal(rc, EZ_ETIMEDOUT);
  assert_true(th_now_ms() - t0 <= 500 + SLACK);
  t0 = th_now_ms();
  assert_int_equal(ez_profile(f->addr, 1.0, &json, 500), EZ_ETIMEDOUT);
  assert_true(th_now_ms() - t0 <= 500 + SLACK);
  t0 = th_now_ms();
  assert_int_equal(ez_graph_connect(f->addr, "/x", "/y", 500), EZ_ETIMEDOUT);
  assert_true(th_now_ms() - t0 <= 500 + SLACK);
  t0 = th_now_ms();
  rc = ez_pub_create(ctx, "/faults/deaf", NULL, &p);
  assert_int_equal(rc, EZ_ETIMEDOUT);
  assert_true(th_now_ms() - t0 <= EZ_DEFAULT_TIMEOUT_MS + SLACK);
  assert_int_equal(kill(f->server, SIGCONT), 0);

  /* Awake again: the same calls succeed. */
  assert_int_equal(ez_graph_dag(f->addr, &g, TMO), 0);
  ez_graph_free(&g);
  assert_int_equal(ez_pub_create(ctx, "/faults/deaf", NULL, &p), 0);
  ez_sub *s = NULL;
  assert_int_equal(ez_sub_create(ctx, "/faults/deaf", NULL, &s), 0);
  assert_int_equal(ez_publish(p, "awake", 5, TMO), 0);
  char buf[16];
  size_t len = 0;
  assert_int_equal(ez_recv_copy(s, buf, sizeof buf, &len, TMO), 0);
  assert_int_equal(len, 5);
  assert_memory_equal(buf, "awake", 5);
  ez_context_close(ctx);
  fx_finish(f);
}

/* A publisher process is SIGSTOPped (alive but deaf): the server does not wait on it for more than
 * its bound (a profile waits at most 1 s per client), the rest of the graph goes on, and once it
 * is SIGKILLed a new publisher reaches the same subscriber. */
static void test_pub_stopped(void **state) {
  fx *f = *state;
  pid_t sub = start_sub(f, "sub", "/faults/frozen", NULL);
  pid_t p1 = fx_spawn(f, "p1", "pub", "/faults/frozen", "--address", f->addr, "--message", "first",
                      "--count", "0", "--rate", "200", NULL);
  wait_lines(f, "sub.out", 5, sub, 20000);
  stop_process(p1);
  char *json = NULL;
  int64_t t0 = th_now_ms();
  assert_int_equal(ez_profile(f->addr, 1.0, &json, 20000), 0);
  int64_t dt = th_now_ms() - t0;
  if (dt > 1000 + SLACK)
    fail_msg("ez_profile took %lld ms with a stopped publisher", (long long)dt);
  ez_profile_data pd;
  assert_int_equal(ez_profile_parse(json, &pd), 0);
  free(json);
  assert_int_equal(pd.n_publishers, 0); /* it could not answer */
  assert_int_equal(pd.n_channels, 1);   /* the subscriber's channel did */
  assert_string_equal(pd.channels[0].topic, "/faults/frozen");
  ez_profile_data_free(&pd);
  ez_graph g = {0};
  assert_int_equal(ez_graph_dag(f->addr, &g, TMO), 0);
  ez_graph_free(&g);
  fx_assert_alive(f, sub, "sub");

  assert_int_equal(fx_kill(f, p1, SIGKILL), 128 + SIGKILL);
  pid_t p2 = fx_spawn(f, "p2", "pub", "/faults/frozen", "--address", f->addr, "--message", "second",
                      "--count", "10", NULL);
  assert_int_equal(fx_wait(f, p2, 30000), 0);
  assert_int_equal(fx_kill(f, sub, SIGTERM), 0);
  char p[256];
  char *out = slurp(fx_path(f, "sub.out", p, sizeof p), NULL);
  int seconds = 0;
  for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
    if (!strcmp(line, "second"))
      seconds++;
    else if (strcmp(line, "first") || seconds)
      fail_msg("unexpected line '%.40s'", line);
  }
  free(out);
  assert_int_equal(seconds, 10);
  fx_finish(f);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  if (getenv("EZ_FAULTS_FILTER")) cmocka_set_test_filter(getenv("EZ_FAULTS_FILTER"));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_pub_killed_shm, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pub_killed_tcp, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sub_stopped_shm, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sub_stopped_tcp, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pub_stopped, setup, teardown),
      cmocka_unit_test_setup_teardown(test_server_killed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_server_stopped, setup, teardown),
      cmocka_unit_test_setup_teardown(test_all_killed_server_first, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
