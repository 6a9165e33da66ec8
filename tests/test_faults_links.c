/* Fault injection, part 2: a publisher (played by hand over raw sockets) that cuts its channel's
 * connection, or cannot be reached; a subscriber that leaves with messages queued.
 *
 *  - test_channel_cut_mid_message: a publisher cuts the channel at ten points of a TX_TCP frame;
 *    no partial message is delivered, and the subscriber stays usable.
 *  - test_channel_rejoins: a channel closed in the handshake or cut after it is joined again;
 *    the publisher's messages arrive again, and one that arrived whole before the cut is kept.
 *  - test_rejoin_with_server_stopped: that join waits for a stopped graph server, but the
 *    process's other links keep delivering meanwhile.
 *  - test_vanished_publisher: a cut publisher that no longer listens is not asked for again.
 *  - test_unreachable_publisher: joining a publisher whose connect is never answered waits, but
 *    the process's other links keep delivering.
 *  - test_sub_leaves_with_queued_messages: a subscriber destroyed with messages in its queue.
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

/* ---- 4. a publisher (played here over raw sockets) cuts its channel mid-message ---------------
 */

typedef struct fake_pub {
  int graph, data, listener;
  char id[64];
} fake_pub;

/* Registers a publisher on topic at the server, announcing `addr` for its channels. */
static void fake_pub_announce(fx *f, fake_pub *fp, const char *topic, const char *addr) {
  fp->graph = rp_open(f->addr);
  char ver[64];
  rp_rd_str(fp->graph, ver, sizeof ver);
  uint8_t cmd = PUBLISH;
  rp_wr(fp->graph, &cmd, 1);
  rp_wr_str(fp->graph, topic);
  rp_rd_str(fp->graph, fp->id, sizeof fp->id);
  assert_int_equal(strlen(fp->id), 36);
  rp_wr_str(fp->graph, addr);
}

/* Registers a publisher on topic at the server, listening for channels itself. */
static void fake_pub_register(fx *f, fake_pub *fp, const char *topic) {
  fp->data = -1;
  char my_addr[64];
  fp->listener = rp_listen(my_addr, 4);

  fake_pub_announce(f, fp, topic, my_addr);
}

/* Accepts the next channel connection (knocks skipped) and reads its CHANNEL request (chan_id:
 * its id). */
static int fake_pub_accept(fake_pub *fp, char chan_id[64]) {
  int fd = rp_accept_talker(fp->listener, TMO);
  assert_true(fd >= 0);
  uint8_t cmd = 0;
  assert_int_equal(rp_rd_exact(fd, &cmd, 1, TMO), 0);
  assert_int_equal(cmd, CHANNEL);
  rp_rd_str(fd, chan_id, 64);
  assert_true(rp_is_uuid(chan_id));
  return fd;
}

/* Accepts a channel and completes its handshake (no segment: TCP) as fp->data. */
static void fake_pub_handshake(fake_pub *fp, uint64_t nbuf, char chan_id[64]) {
  fp->data = fake_pub_accept(fp, chan_id);
  rp_wr_str(fp->data, ""); /* no segment: TCP it is */
  uint8_t cmd = 0;
  assert_int_equal(rp_rd_exact(fp->data, &cmd, 1, TMO), 0);
  assert_int_equal(cmd, SHM_ATTACH_FAILED);
  assert_int_equal(rp_rd_u64(fp->data), (uint64_t)getpid());
  uint8_t done[9] = {COMPLETE};
  ezi_put_u64le(done + 1, nbuf);
  rp_wr(fp->data, done, 9);
  /* An ezmsg-c channel offers to hold a larger TCP window (src/pub/pubwin.c), with compact frames;
   * we play a publisher that keeps the protocol's. */
  assert_int_equal(rp_rd_exact(fp->data, &cmd, 1, TMO), 0);
  assert_int_equal(cmd, EZI_X_WIN_ASK);
  assert_int_equal(rp_rd_exact(fp->data, &cmd, 1, TMO), 0);
  assert_int_equal(cmd, EZI_X_TCP_ASK);
}

/* Registers a publisher on topic at the server and completes the channel handshake with the one
 * subscribing process (this one): its channel connects to our listener. */
static void fake_pub_start(fx *f, fake_pub *fp, const char *topic, uint64_t nbuf) {
  fake_pub_register(f, fp, topic);
  /* The server now sends the subscriber an UPDATE; its channel comes to us. */
  char chan_id[64];
  fake_pub_handshake(fp, nbuf, chan_id);
  /* ... and the server completes our registration once the subscriber answered its UPDATE. */
  uint8_t cmd = 0;
  assert_int_equal(rp_rd_exact(fp->graph, &cmd, 1, TMO), 0);
  assert_int_equal(cmd, COMPLETE);
}

/* A TX_TCP frame carrying a bytes payload; *len its size (caller frees). */
static uint8_t *tx_frame(uint64_t msg_id, const char *payload, size_t *len) {
  size_t pl = strlen(payload), ml = EZI_MARSHAL_BYTES_HDR + pl;
  uint8_t *b = malloc(17 + ml);
  assert_non_null(b);
  b[0] = TX_TCP;
  ezi_put_u64le(b + 1, msg_id);
  ezi_put_u64le(b + 9, ml);
  ezi_marshal_bytes_header(b + 17, msg_id, pl);
  memcpy(b + 17 + EZI_MARSHAL_BYTES_HDR, payload, pl);
  *len = 17 + ml;
  return b;
}

static void test_channel_cut_mid_message(void **state) {
  fx *f = *state;
  const char *topic = "/faults/cut";
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(f->addr, &ctx), 0);
  ez_sub *sub = NULL;
  assert_int_equal(ez_sub_create(ctx, topic, NULL, &sub), 0);
  const char *body = "the whole of message one, which never arrives in full";
  size_t full_len;
  uint8_t *probe = tx_frame(1, body, &full_len);
  free(probe);
  /* Where the cut falls: inside the frame header, inside the marshalled header, inside the
   * payload, and one byte short of the end. */
  const size_t cuts[] = {
      1, 5, 9, 16, 17, 18, 17 + 20, 17 + EZI_MARSHAL_BYTES_HDR, full_len / 2, full_len - 1};
  for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
    fake_pub fp;
    fake_pub_start(f, &fp, topic, 4);
    /* A whole message first: it arrives, and its release is acked to us. */
    char first[64];
    snprintf(first, sizeof first, "whole %zu", k);
    size_t n;
    uint8_t *fr = tx_frame(0, first, &n);
    rp_wr(fp.data, fr, n);
    free(fr);
    ez_msg m;
    assert_int_equal(ez_recv(sub, &m, TMO), 0);
    assert_int_equal(m.len, strlen(first));
    assert_memory_equal(m.data, first, m.len);
    assert_int_equal(m.msg_id, 0);
    assert_string_equal(m.pub_id, fp.id);
    ez_msg_release(&m);
    uint8_t ack[9];
    assert_int_equal(rp_rd_exact(fp.data, ack, 9, TMO), 0);
    assert_int_equal(ack[0], RX_ACK);
    assert_int_equal(ezi_get_u64le(ack + 1), 0);

    /* Then part of the next one, and the connection is cut. */
    fr = tx_frame(1, body, &n);
    assert_int_equal(n, full_len);
    rp_wr(fp.data, fr, cuts[k]);
    free(fr);
    th_sleep_ms(50); /* let the channel read the part */
    close(fp.data);
    assert_int_equal(ez_recv(sub, &m, 300), EZ_ETIMEDOUT);
    /* The publisher leaves too; the subscriber drops its channel. */
    close(fp.graph);
    close(fp.listener);
    assert_int_equal(ez_recv(sub, &m, 100), EZ_ETIMEDOUT);
  }

  /* The subscriber is still usable: a real publisher's messages arrive. */
  pid_t pub = fx_spawn(f, "pub", "pub", topic, "--address", f->addr, "--message", "after",
                       "--count", "3", NULL);
  for (int i = 0; i < 3; i++) {
    char buf[16];
    size_t len = 0;
    assert_int_equal(ez_recv_copy(sub, buf, sizeof buf, &len, 20000), 0);
    assert_int_equal(len, 5);
    assert_memory_equal(buf, "after", 5);
  }
  assert_int_equal(fx_wait(f, pub, 20000), 0);
  ez_sub_destroy(sub);
  ez_context_close(ctx);
  fx_finish(f);
}

/* Sends message msg_id over fp's channel, receives it, releases it and reads its ack. */
static void fake_pub_roundtrip(fake_pub *fp, ez_sub *sub, uint64_t msg_id, const char *text) {
  size_t n;
  uint8_t *fr = tx_frame(msg_id, text, &n);
  rp_wr(fp->data, fr, n);
  free(fr);
  ez_msg m;
  assert_int_equal(ez_recv(sub, &m, TMO), 0);
  assert_int_equal(m.msg_id, msg_id);
  assert_int_equal(m.len, strlen(text));
  assert_memory_equal(m.data, text, m.len);
  assert_string_equal(m.pub_id, fp->id);
  ez_msg_release(&m);
  uint8_t ack[9];
  assert_int_equal(rp_rd_exact(fp->data, ack, 9, TMO), 0);
  assert_int_equal(ack[0], RX_ACK);
  assert_int_equal(ezi_get_u64le(ack + 1), msg_id);
}

/* A publisher that is still registered but whose channel fails (closed during the handshake, or
 * cut after it) is joined again, with a new channel, and its messages arrive again; a message that
 * had arrived whole before the cut is not dropped. */
static void test_channel_rejoins(void **state) {
  fx *f = *state;
  const char *topic = "/faults/rejoin";
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(f->addr, &ctx), 0);
  ez_sub *sub = NULL;
  assert_int_equal(ez_sub_create(ctx, topic, NULL, &sub), 0);
  fake_pub fp;
  fake_pub_register(f, &fp, topic);

  /* 1. The first join fails: we hang up on the CHANNEL request. The subscriber still answers the
   * server's UPDATE, so our registration completes. */
  char id1[64], id2[64], id3[64];
  close(fake_pub_accept(&fp, id1));
  uint8_t cmd = 0xff;
  assert_int_equal(rp_rd_exact(fp.graph, &cmd, 1, TMO), 0);
  assert_int_equal(cmd, COMPLETE);

  /* 2. It comes back by itself with a new channel, and messages flow. */
  fake_pub_handshake(&fp, 4, id2);
  assert_string_not_equal(id1, id2);
  fake_pub_roundtrip(&fp, sub, 0, "after a failed join");

  /* 3. The connection is cut after the handshake, with a message that came whole over TCP still
   * queued: that message is still delivered, and the channel comes back again. */
  size_t n;
  uint8_t *fr = tx_frame(1, "queued at the cut", &n);
  rp_wr(fp.data, fr, n);
  free(fr);
  struct pollfd pf = {.fd = ez_sub_fd(sub), .events = POLLIN};
  assert_int_equal(poll(&pf, 1, TMO), 1); /* queued */
  close(fp.data);
  fake_pub_handshake(&fp, 4, id3);
  assert_string_not_equal(id2, id3);
  ez_msg m;
  assert_int_equal(ez_recv(sub, &m, TMO), 0);
  assert_int_equal(m.msg_id, 1);
  assert_int_equal(m.len, strlen("queued at the cut"));
  assert_memory_equal(m.data, "queued at the cut", m.len);
  ez_msg_release(&m);
  fake_pub_roundtrip(&fp, sub, 2, "after a cut");
  fake_pub_roundtrip(&fp, sub, 3, "and on");

  /* 4. The publisher leaves: no more joins (nobody connects to the listener any more). */
  close(fp.graph);
  th_sleep_ms(100); /* the server's UPDATE reaches the subscriber */
  close(fp.data);
  pf = (struct pollfd){.fd = fp.listener, .events = POLLIN};
  assert_int_equal(poll(&pf, 1, 400), 0);
  close(fp.listener);

  ez_sub_destroy(sub);
  ez_context_close(ctx);
  fx_finish(f); /* no fd, segment or process left */
}

/* What the library logged, for test_vanished_publisher (it runs on library threads). */
static struct {
  pthread_mutex_t mu;
  int gone, retries;
} g_log = {PTHREAD_MUTEX_INITIALIZER, 0, 0};

static void count_log(void *user, int level, const char *msg) {
  (void)user;
  (void)level;
  pthread_mutex_lock(&g_log.mu);
  g_log.gone += strstr(msg, "is gone (nothing listens at") != NULL;
  g_log.retries += strstr(msg, "joining again in") != NULL;
  pthread_mutex_unlock(&g_log.mu);
}

static int log_count(int *what) {
  pthread_mutex_lock(&g_log.mu);
  int n = *what;
  pthread_mutex_unlock(&g_log.mu);
  return n;
}

/* A publisher whose process is gone while the graph server still lists it (a released-dialect
 * server drops it without telling subscribers, and warns about every channel then requested for
 * it): the cut channel's subscriber knocks at the publisher's listener, finds nothing there for
 * ~3 s, takes it as gone, and does not ask the server for it. Played here by a publisher that
 * closes its listener and channel but keeps its registration, so that asking would be answered
 * (and fail, and be retried). An UPDATE that lists it again (another publisher joins the topic)
 * makes the subscriber ask again. */
static void test_vanished_publisher(void **state) {
  fx *f = *state;
  g_log.gone = g_log.retries = 0;
  ez_set_log_hook(count_log, NULL, EZ_LOG_INFO); /* before any library thread runs */
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(f->addr, &ctx), 0);
  ez_sub *sub = NULL;
  assert_int_equal(ez_sub_create(ctx, "/faults/vanished", NULL, &sub), 0);
  fake_pub fp;
  fake_pub_start(f, &fp, "/faults/vanished", 4);
  fake_pub_roundtrip(&fp, sub, 0, "before it vanished");

  close(fp.listener);
  close(fp.data);
  int64_t t0 = th_now_ms();
  while (!log_count(&g_log.gone) && th_now_ms() - t0 < 3 * TMO)
    th_sleep_ms(10);
  assert_int_equal(log_count(&g_log.gone), 1);
  th_sleep_ms(300); /* a join asked for it would fail and be retried within 100 ms */
  assert_int_equal(log_count(&g_log.gone), 1);
  assert_int_equal(log_count(&g_log.retries), 1); /* only the cut's own "joining again in 50 ms" */

  /* Listed again: asked for again (the server gives the dead address: the join fails, retried). */
  fake_pub other;
  fake_pub_start(f, &other, "/faults/vanished", 4);
  fake_pub_roundtrip(&other, sub, 0, "from another publisher");
  t0 = th_now_ms();
  while (log_count(&g_log.retries) < 2 && th_now_ms() - t0 < 3 * TMO)
    th_sleep_ms(10);
  assert_true(log_count(&g_log.retries) >= 2);

  close(fp.graph);
  close(other.graph);
  close(other.data);
  close(other.listener);
  ez_sub_destroy(sub);
  ez_context_close(ctx);
  ez_set_log_hook(NULL, NULL, -1); /* the default level again ($EZMSG_LOG_LEVEL) */
  fx_finish(f);
}

/* How many messages `live` receives in one second (a live link keeps delivering). */
static int count_for_1s(ez_sub *live) {
  char buf[16];
  size_t len = 0;
  int got = 0;
  int64_t t0 = th_now_ms();
  while (th_now_ms() - t0 < 1000) {
    int rc = ez_recv_copy(live, buf, sizeof buf, &len, 100);
    if (rc == 0)
      got++;
    else
      assert_int_equal(rc, EZ_ETIMEDOUT);
  }
  return got;
}

/* A 200 Hz `ezmsg pub` process on topic, whose first message has reached `live`: a link that keeps
 * delivering while the test disturbs another one. Returns the publisher's pid. */
static pid_t start_ticker(fx *f, ez_sub *live, const char *topic) {
  pid_t pub = fx_spawn(f, "tick", "pub", topic, "--address", f->addr, "--message", "tick",
                       "--count", "0", "--rate", "200", NULL);
  char buf[16];
  size_t len = 0;
  assert_int_equal(ez_recv_copy(live, buf, sizeof buf, &len, TMO), 0); /* flowing */
  return pub;
}

/* Joining again goes through the graph server (CHANNEL). With the server stopped, that join
 * waits, but on nothing else: the process's other links keep delivering meanwhile (the I/O thread
 * never blocks on the server), and once the server runs again the join completes. */
static void test_rejoin_with_server_stopped(void **state) {
  fx *f = *state;
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(f->addr, &ctx), 0);
  ez_sub *cut = NULL, *live = NULL;
  assert_int_equal(ez_sub_create(ctx, "/faults/frozen/a", NULL, &cut), 0);
  assert_int_equal(ez_sub_create(ctx, "/faults/frozen/b", NULL, &live), 0);
  fake_pub fp;
  fake_pub_start(f, &fp, "/faults/frozen/a", 4);
  pid_t pub = start_ticker(f, live, "/faults/frozen/b");

  stop_process(f->server);
  close(fp.data); /* cut: `cut` joins again, and its registration waits for the server */
  th_sleep_ms(100);
  int got = count_for_1s(live);
  print_message("server stopped: %d messages in 1 s on the other link\n", got);
  assert_true(got >= 20); /* 200 Hz: a blocked I/O thread would deliver none */
  assert_int_equal(kill(f->server, SIGCONT), 0);

  char id[64];
  fake_pub_handshake(&fp, 4, id); /* the join completes */
  fake_pub_roundtrip(&fp, cut, 0, "after the thaw");
  assert_int_equal(fx_kill(f, pub, SIGTERM), 0);
  close(fp.graph);
  close(fp.data);
  close(fp.listener);
  ez_context_close(ctx);
  fx_finish(f);
}

/* ez_sub_create on another thread (a join that waits must not block the test's own checks). */
struct sub_args {
  ez_context *ctx;
  ez_sub **out;
  int rc;
};
static void *sub_create_main(void *arg) {
  struct sub_args *a = arg;
  a->rc = ez_sub_create(a->ctx, "/faults/unreach/stuck", NULL, a->out);
  return NULL;
}

/* A publisher whose channel server never answers a connect (its accept queue is full, so the
 * kernel drops our SYNs): joining it waits, but on nothing else; the process's other links keep
 * delivering (the connect does not block the I/O thread). */
static void test_unreachable_publisher(void **state) {
  fx *f = *state;
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(f->addr, &ctx), 0);
  ez_sub *live = NULL, *stuck = NULL;
  assert_int_equal(ez_sub_create(ctx, "/faults/unreach/live", NULL, &live), 0);
  pid_t pub = start_ticker(f, live, "/faults/unreach/live");

  /* A listener with a full accept queue: connects to it hang in SYN_SENT. */
  fake_pub fp = {.data = -1};
  fp.listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(fp.listener, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t alen = sizeof a;
  getsockname(fp.listener, (struct sockaddr *)&a, &alen);
  assert_int_equal(listen(fp.listener, 0), 0);
  int fill[3];
  for (int i = 0; i < 3; i++) {
    fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    connect(fill[i], (struct sockaddr *)&a, sizeof a); /* EINPROGRESS; the queue fills */
  }
  th_sleep_ms(50);
  char stuck_addr[64];
  snprintf(stuck_addr, sizeof stuck_addr, "127.0.0.1:%u", ntohs(a.sin_port));
  fake_pub_announce(f, &fp, "/faults/unreach/stuck", stuck_addr);

  /* The subscriber joins it: its UPDATE is answered only once the join fails (the 5 s handshake
   * timer), so create it from another thread, and watch the live link meanwhile. */
  pthread_t t;
  struct sub_args sa = {ctx, &stuck, -1};
  assert_int_equal(pthread_create(&t, NULL, sub_create_main, &sa), 0);
  th_sleep_ms(200);
  int got = count_for_1s(live);
  print_message("joining an unreachable publisher: %d messages in 1 s on the other link\n", got);
  assert_true(got >= 60); /* 200 Hz; with the connect blocking the I/O thread: 10 (what was
                           * already queued) */
  pthread_join(t, NULL);
  assert_int_equal(sa.rc, 0); /* created; the unreachable publisher is retried in the background */

  close(fp.graph); /* the publisher leaves: the retries stop */
  for (int i = 0; i < 3; i++)
    close(fill[i]);
  close(fp.listener);
  assert_int_equal(fx_kill(f, pub, SIGTERM), 0);
  ez_context_close(ctx);
  fx_finish(f);
}

/* ---- 5. a subscriber that leaves while messages wait in its queue ------------------------------
 */

/* The scenario runs in a child process (a double free aborts it); the child exits 0 if all went
 * well. A subscriber with received-but-not-taken messages is destroyed: ezi_chan_leave marks its
 * chan_sub gone, then ezi_sub_purge releases the queued messages, and the last release frees the
 * chan_sub, which ezi_chan_leave then reads and frees again (heap-use-after-free at
 * channel.c:580 under ASan, "double free" abort without). `ezmsg sub` on a busy topic hits it on
 * SIGTERM or at the end of --count. */
static void test_sub_leaves_with_queued_messages(void **state) {
  fx *f = *state;
  fflush(NULL);
  pid_t parent = getpid();
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    int code = 0;
    for (int round = 0; round < 20 && !code; round++) {
      ez_context *ctx = NULL;
      ez_pub *pub = NULL;
      ez_sub *sub = NULL, *other = NULL;
      if (ez_context_open(f->addr, &ctx) || ez_pub_create(ctx, "/faults/queued", NULL, &pub) ||
          ez_sub_create(ctx, "/faults/queued", NULL, &sub) ||
          ez_sub_create(ctx, "/faults/queued", NULL, &other))
        _exit(10);
      for (int i = 0; i < 3; i++)
        if (ez_publish(pub, "queued", 6, TMO)) _exit(11);
      ez_sub_destroy(sub); /* three messages wait in its queue */
      char buf[8];
      size_t len;
      for (int i = 0; i < 3; i++) /* the other subscriber is unaffected */
        if (ez_recv_copy(other, buf, sizeof buf, &len, TMO) || len != 6) code = 12;
      if (!code && ez_pub_flush(pub, TMO)) code = 13; /* everything was released */
      ez_context_close(ctx);
    }
    _exit(code);
  }
  f->kids[f->nkids++] = pid;
  watch_add(f, pid);
  int st = fx_wait(f, pid, 60000);
  if (st != 0)
    fail_msg("the child exited with status %d (%s)", st,
             st > 128 ? "killed by a signal" : "an error");
  fx_finish(f);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  if (getenv("EZ_FAULTS_FILTER")) cmocka_set_test_filter(getenv("EZ_FAULTS_FILTER"));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_channel_cut_mid_message, setup, teardown),
      cmocka_unit_test_setup_teardown(test_channel_rejoins, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rejoin_with_server_stopped, setup, teardown),
      cmocka_unit_test_setup_teardown(test_vanished_publisher, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unreachable_publisher, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sub_leaves_with_queued_messages, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
