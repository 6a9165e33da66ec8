/* A broken or hostile graph server against our client library. The server here is a thread of
 * this test speaking the protocol by hand: it answers a subscriber's SUBSCRIBE properly (its id,
 * an UPDATE naming one publisher, COMPLETE), then answers every CHANNEL registration the
 * subscriber's channel makes with the bytes of the scenario. The library must treat each bad
 * answer as a failed join (logged, retried), never crash or hang, and keep the subscriber usable.
 * (fuzz_client cannot reach this reader: its fake server refuses CHANNEL, so that no address from
 * the input is ever resolved.) */
#include "harness.h"
#include "rawproto.h"
#include "base/wire.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TMO 5000
enum { COMPLETE = 0, SUBSCRIBE = 2, UPDATE = 9, CHANNEL = 18 };

#define PUB_ID "0b6ad1a4-0000-4000-8000-000000000001"
#define SUB_ID "0b6ad1a4-0000-4000-8000-000000000002"
#define CHAN_ID "0b6ad1a4-0000-4000-8000-000000000003"

static struct {
  int lfd;
  char addr[64];
  pthread_t thread;
  atomic_bool stop;
  atomic_int channels;   /* CHANNEL requests seen in the current scenario */
  const uint8_t *answer; /* the current scenario's answer to CHANNEL (after the greeting) */
  size_t answer_len;
  bool no_greeting; /* the answer replaces the version string too */
  pthread_mutex_t mu;
  int keep[16]; /* subscribers' graph connections, kept open */
  int n_keep;
  atomic_int bad;  /* what the server threads saw that they did not expect */
  atomic_int live; /* server threads running */
} g;

static void put_str(uint8_t *b, size_t *n, const char *s) {
  uint64_t len = strlen(s);
  memcpy(b + *n, &len, 8); /* little-endian host (x86-64, aarch64) */
  memcpy(b + *n + 8, s, len);
  *n += 8 + len;
}

/* Reads exactly n bytes (the server threads must not use cmocka's asserts). */
static bool rd(int fd, void *p, size_t n) { return rp_rd_exact(fd, p, n, 3 * TMO) == 0; }

static bool rd_str(int fd, char *out, size_t cap) {
  uint64_t len = 0;
  if (!rd(fd, &len, 8) || len >= cap || !rd(fd, out, (size_t)len)) return false;
  out[len] = 0;
  return true;
}

static void wr(int fd, const void *p, size_t n) {
  if (send(fd, p, n, MSG_NOSIGNAL) != (ssize_t)n) atomic_fetch_add(&g.bad, 1);
}

static void send_str(int fd, const char *s) {
  uint8_t b[512];
  size_t n = 0;
  put_str(b, &n, s);
  wr(fd, b, n);
}

/* One connection, on its own thread. */
static void *serve_one(void *arg) {
  int fd = (int)(intptr_t)arg;
  pthread_mutex_lock(&g.mu);
  bool no_greeting = g.no_greeting;
  pthread_mutex_unlock(&g.mu);
  uint8_t cmd = 0xff;
  char s[256];
  if (no_greeting) { /* only for a channel's registration, which does not wait for it */
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 300) != 1) {
      no_greeting = false; /* a client waiting for the greeting (SUBSCRIBE, ping) */
      send_str(fd, "3.8.0");
    }
  } else {
    send_str(fd, "3.8.0"); /* released, without sessions: no process link */
  }
  if (!rd(fd, &cmd, 1)) goto done; /* a ping, or a client that gave up */
  if (!rd_str(fd, s, sizeof s)) {  /* the topic, or the publisher's id */
    atomic_fetch_add(&g.bad, 1);
    goto done;
  }
  if (cmd == SUBSCRIBE) {
    send_str(fd, SUB_ID);
    uint8_t u = UPDATE;
    wr(fd, &u, 1);
    send_str(fd, PUB_ID);
    /* The UPDATE's answer (after the one-byte extensions of ours a server skips: EZI_X_CLIENT) */
    while (rd(fd, &u, 1) && u >= EZI_X_ASK_MIN) {
    }
    if (u != COMPLETE) atomic_fetch_add(&g.bad, 1);
    u = COMPLETE;
    wr(fd, &u, 1); /* initialized */
    pthread_mutex_lock(&g.mu);
    bool kept = g.n_keep < 16;
    if (kept) g.keep[g.n_keep++] = fd;
    pthread_mutex_unlock(&g.mu);
    if (kept) fd = -1;
    goto done;
  }
  if (cmd != CHANNEL || strcmp(s, PUB_ID) != 0) {
    atomic_fetch_add(&g.bad, 1);
    goto done;
  }
  pthread_mutex_lock(&g.mu);
  if (g.answer_len) wr(fd, g.answer, g.answer_len);
  pthread_mutex_unlock(&g.mu);
  atomic_fetch_add(&g.channels, 1);
  shutdown(fd, SHUT_WR);
  char sink[64];
  while (recv(fd, sink, sizeof sink, 0) > 0) { /* until the client hangs up */
  }
done:
  if (fd >= 0) close(fd);
  atomic_fetch_sub(&g.live, 1);
  return NULL;
}

static void *server_main(void *arg) {
  (void)arg;
  while (!atomic_load(&g.stop)) {
    struct pollfd p = {.fd = g.lfd, .events = POLLIN};
    if (poll(&p, 1, 50) != 1) continue;
    int fd = accept4(g.lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) continue;
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    atomic_fetch_add(&g.live, 1);
    if (pthread_create(&t, &a, serve_one, (void *)(intptr_t)fd)) {
      atomic_fetch_sub(&g.live, 1);
      close(fd);
    }
    pthread_attr_destroy(&a);
  }
  return NULL;
}

static int setup(void **state) {
  (void)state;
  pthread_mutex_init(&g.mu, NULL);
  g.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (bind(g.lfd, (struct sockaddr *)&a, sizeof a) || listen(g.lfd, 16)) return -1;
  socklen_t len = sizeof a;
  getsockname(g.lfd, (struct sockaddr *)&a, &len);
  snprintf(g.addr, sizeof g.addr, "127.0.0.1:%u", ntohs(a.sin_port));
  return pthread_create(&g.thread, NULL, server_main, NULL) ? -1 : 0;
}

static int teardown(void **state) {
  (void)state;
  atomic_store(&g.stop, true);
  pthread_join(g.thread, NULL);
  close(g.lfd);
  for (int i = 0; i < g.n_keep; i++)
    close(g.keep[i]);
  for (int i = 0; i < 500 && atomic_load(&g.live); i++) /* connection threads finish */
    th_sleep_ms(10);
  return atomic_load(&g.live) || atomic_load(&g.bad) ? -1 : 0;
}

/* One scenario: a subscriber whose channel registration gets `answer`; the join fails, is
 * retried (a second CHANNEL arrives), and the subscriber stays usable. */
static void scenario(ez_context *ctx, const char *what, const uint8_t *answer, size_t len,
                     bool no_greeting) {
  pthread_mutex_lock(&g.mu);
  g.answer = answer;
  g.answer_len = len;
  g.no_greeting = no_greeting;
  pthread_mutex_unlock(&g.mu);
  atomic_store(&g.channels, 0);
  ez_sub *s = NULL;
  int64_t t0 = th_now_ms();
  assert_int_equal(ez_sub_create(ctx, "/hostile/server", NULL, &s), 0);
  while (atomic_load(&g.channels) < 2 && th_now_ms() - t0 < 3 * TMO)
    th_sleep_ms(10);
  print_message("%s: %d CHANNEL requests in %lld ms\n", what, atomic_load(&g.channels),
                (long long)(th_now_ms() - t0));
  assert_true(atomic_load(&g.channels) >= 2); /* failed, then joined again: no crash, no hang */
  ez_msg m;
  assert_int_equal(ez_recv(s, &m, 0), EZ_EAGAIN); /* usable, and nothing from nowhere */
  ez_sub_destroy(s);
}

static void test_bad_channel_answers(void **state) {
  (void)state;
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(g.addr, &ctx), 0);
  uint8_t b[512];
  size_t n;

  n = 0; /* not COMPLETE: the byte that once passed as "not read yet" */
  b[n++] = 0xff;
  scenario(ctx, "0xff instead of COMPLETE", b, n, false);

  n = 0;
  b[n++] = COMPLETE;
  put_str(b, &n, "not-a-uuid-at-all-but-36-bytes-long!");
  scenario(ctx, "a channel id that is not a UUID", b, n, false);

  n = 0;
  b[n++] = COMPLETE;
  put_str(b, &n, CHAN_ID);
  put_str(b, &n, "no port here");
  scenario(ctx, "an address without a port", b, n, false);

  n = 0;
  b[n++] = COMPLETE;
  put_str(b, &n, CHAN_ID);
  put_str(b, &n, "127.0.0.1:1");
  scenario(ctx, "a publisher address nobody listens on", b, n, false);

  n = 0;
  b[n++] = COMPLETE;
  uint64_t huge = (uint64_t)1 << 63;
  memcpy(b + n, &huge, 8);
  n += 8;
  scenario(ctx, "a 2^63 length prefix for the channel id", b, n, false);

  n = 0;
  memcpy(b + n, &huge, 8);
  n += 8;
  scenario(ctx, "a 2^63 length prefix instead of the greeting", b, n, true);

  n = 0;
  b[n++] = COMPLETE;
  put_str(b, &n, CHAN_ID);
  b[n++] = 0x05; /* then the server hangs up mid-string */
  scenario(ctx, "a hang-up in the middle of the address", b, n, false);

  ez_context_close(ctx);
  assert_int_equal(atomic_load(&g.bad), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_bad_channel_answers, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
