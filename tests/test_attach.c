/* A graph server slow to answer SHM_ATTACH stalls only the channel that waits for it. One I/O
 * thread serves every publisher and channel of a context; it used to attach a publisher's segment
 * with a blocking request of up to 5 s, and everything else in the process waited meanwhile.
 *
 * Context B reaches the graph server through a proxy (a thread of this test) that forwards every
 * connection, except that it holds back the request of one that begins with SHM_ATTACH until the
 * test releases it, or answers it itself with bytes the test chose. Context A talks to the server
 * directly. */
#include "harness.h"

#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CMD_SHM_ATTACH 16 /* protocol.md */
#define MAX_CONNS 64

typedef struct {
  int client, server;
  int first;     /* the client's first byte, -1 before it came */
  bool answered; /* a held SHM_ATTACH got px.answer */
} conn;

static struct {
  int lfd, stop_fd[2];
  int port;
  pthread_t thread;
  conn c[MAX_CONNS];
  int n;
  int held;     /* atomic: SHM_ATTACH requests being held back now */
  int released; /* atomic: forward them */
  int gave_up;  /* atomic: clients that closed a held request */
  /* If set (before the connection comes), a held SHM_ATTACH request gets these bytes as its
   * answer instead of the server's, and is held on after that. */
  const uint8_t *answer;
  size_t answer_len;
} px;

static int refused_logged; /* atomic: "segment ... not attached (...)" lines but for timeouts */

/* The log hook: counts the channel's notes of an attach that failed on the answer it got
 * (EZ_EPROTO, or EZ_EMSGSIZE for a string longer than the reader takes), not on a timeout. */
static void on_log(void *user, int level, const char *msg) {
  (void)user;
  if (strstr(msg, "not attached (") && !strstr(msg, ez_strerror(EZ_ETIMEDOUT)))
    __atomic_add_fetch(&refused_logged, 1, __ATOMIC_SEQ_CST);
  if (level >= EZ_LOG_WARN || strstr(msg, "not attached (")) fprintf(stderr, "%s\n", msg);
}

static int connect_server(void) {
  const char *colon = strrchr(th_addr, ':');
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a)) {
    close(fd);
    fd = -1;
  }
  return fd;
}

/* Copies what is readable from `from` to `to`; false when `from` is done. */
static bool pump(int from, int to) {
  char buf[65536];
  ssize_t n = read(from, buf, sizeof buf);
  if (n <= 0) return false;
  for (ssize_t off = 0; off < n;) {
    ssize_t w = write(to, buf + off, (size_t)(n - off));
    if (w <= 0) return false;
    off += w;
  }
  return true;
}

static bool held(const conn *c) {
  return c->first == CMD_SHM_ATTACH && !__atomic_load_n(&px.released, __ATOMIC_SEQ_CST);
}

static void drop_conn(int i) {
  if (px.c[i].first == CMD_SHM_ATTACH && !__atomic_load_n(&px.released, __ATOMIC_SEQ_CST))
    __atomic_add_fetch(&px.gave_up, 1, __ATOMIC_SEQ_CST);
  close(px.c[i].client);
  close(px.c[i].server);
  px.c[i] = px.c[--px.n];
}

static void *proxy(void *arg) {
  (void)arg;
  for (;;) {
    struct pollfd p[2 + 2 * MAX_CONNS];
    p[0] = (struct pollfd){.fd = px.lfd, .events = POLLIN};
    p[1] = (struct pollfd){.fd = px.stop_fd[0], .events = POLLIN};
    int nheld = 0;
    for (int i = 0; i < px.n; i++) {
      nheld += held(&px.c[i]);
      /* A held request is not read, but a client that hangs up is still seen (POLLRDHUP). */
      p[2 + 2 * i] =
          (struct pollfd){.fd = px.c[i].client, .events = held(&px.c[i]) ? POLLRDHUP : POLLIN};
      p[3 + 2 * i] = (struct pollfd){.fd = px.c[i].server, .events = POLLIN};
    }
    __atomic_store_n(&px.held, nheld, __ATOMIC_SEQ_CST);
    if (poll(p, (nfds_t)(2 + 2 * px.n), 20) < 0) continue;
    if (p[1].revents) break;
    for (int i = px.n - 1; i >= 0; i--) {
      conn *c = &px.c[i];
      short rc = p[2 + 2 * i].revents, rs = p[3 + 2 * i].revents;
      if (held(c)) {
        if (px.answer && !c->answered) {
          c->answered = true;
          if (write(c->client, px.answer, px.answer_len) != (ssize_t)px.answer_len) drop_conn(i);
          continue;
        }
        if (rc & (POLLRDHUP | POLLHUP | POLLERR))
          drop_conn(i);
        else if (rs && !pump(c->server, c->client))
          drop_conn(i); /* the greeting */
        continue;
      }
      if (rc && c->first < 0) { /* classify by the first byte, then forward it */
        unsigned char b;
        if (recv(c->client, &b, 1, MSG_PEEK) != 1) {
          drop_conn(i);
          continue;
        }
        c->first = b;
        if (held(c)) continue;
      }
      if ((rc && !pump(c->client, c->server)) || (rs && !pump(c->server, c->client))) drop_conn(i);
    }
    if ((p[0].revents & POLLIN) && px.n < MAX_CONNS) {
      int cfd = accept4(px.lfd, NULL, NULL, SOCK_CLOEXEC);
      int sfd = cfd >= 0 ? connect_server() : -1;
      if (sfd >= 0)
        px.c[px.n++] = (conn){cfd, sfd, -1, false};
      else if (cfd >= 0)
        close(cfd);
    }
  }
  while (px.n)
    drop_conn(px.n - 1);
  return NULL;
}

static int setup(void **state) {
  if (th_setup(state)) return -1;
  memset(&px, 0, sizeof px);
  px.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (px.lfd < 0 || bind(px.lfd, (struct sockaddr *)&a, sizeof a) || listen(px.lfd, 16) ||
      getsockname(px.lfd, (struct sockaddr *)&a, &len) || pipe(px.stop_fd))
    return -1;
  px.port = ntohs(a.sin_port);
  return pthread_create(&px.thread, NULL, proxy, NULL) ? -1 : 0;
}

static int teardown(void **state) {
  if (write(px.stop_fd[1], "x", 1) != 1) return -1;
  pthread_join(px.thread, NULL);
  close(px.lfd);
  close(px.stop_fd[0]);
  close(px.stop_fd[1]);
  return th_teardown(state);
}

typedef struct {
  ez_context *ctx;
  const char *topic;
  ez_sub *sub;
  int rc;
} sub_arg;

static void *subscribe(void *arg) {
  sub_arg *s = arg;
  s->rc = ez_sub_create(s->ctx, s->topic, NULL, &s->sub);
  return NULL;
}

static void wait_held(int n) {
  for (int i = 0; i < 10000 && __atomic_load_n(&px.held, __ATOMIC_SEQ_CST) != n; i++)
    th_sleep_ms(1);
  assert_int_equal(__atomic_load_n(&px.held, __ATOMIC_SEQ_CST), n);
}

/* Context A talks to the graph server directly, context B through the proxy. */
static void open_contexts(ez_context **a, ez_context **b) {
  char paddr[64];
  snprintf(paddr, sizeof paddr, "127.0.0.1:%d", px.port);
  assert_int_equal(ez_context_open(th_addr, a), 0);
  assert_int_equal(ez_context_open(paddr, b), 0);
}

/* Publishes one message on p and receives it on s. */
static void exchange(ez_pub *p, ez_sub *s, uint64_t k) {
  assert_int_equal(ez_publish(p, &k, sizeof k, 10000), 0);
  uint64_t got = 0;
  size_t n = 0;
  assert_int_equal(ez_recv_copy(s, &got, sizeof got, &n, 10000), 0);
  assert_int_equal(n, sizeof got);
  assert_true(got == k);
}

/* While B's channel waits for its SHM_ATTACH, B's I/O thread still answers another channel's
 * handshake and sends that channel its messages; once the answer comes, the waiting channel
 * maps the segment and receives. */
static void test_slow_attach_stalls_nothing_else(void **state) {
  (void)state;
  ez_context *a, *b;
  open_contexts(&a, &b);
  ez_pub *slow_pub, *fast_pub;
  assert_int_equal(ez_pub_create(a, "/attach/slow", NULL, &slow_pub), 0);
  assert_int_equal(ez_pub_create(b, "/attach/fast", NULL, &fast_pub), 0);

  sub_arg slow = {.ctx = b, .topic = "/attach/slow"};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, subscribe, &slow), 0);
  wait_held(1); /* B's channel to slow_pub waits for the server */

  ez_sub *fast_sub;
  assert_int_equal(ez_sub_create(a, "/attach/fast", NULL, &fast_sub), 0);
  exchange(fast_pub, fast_sub, 7);
  /* All that ran through B's I/O thread while its attach was pending, not after giving up. */
  assert_int_equal(__atomic_load_n(&px.held, __ATOMIC_SEQ_CST), 1);
  assert_int_equal(__atomic_load_n(&px.gave_up, __ATOMIC_SEQ_CST), 0);

  __atomic_store_n(&px.released, 1, __ATOMIC_SEQ_CST);
  pthread_join(t, NULL);
  assert_int_equal(slow.rc, 0);
  exchange(slow_pub, slow.sub, 8);

  ez_sub_destroy(slow.sub);
  ez_sub_destroy(fast_sub);
  ez_pub_destroy(slow_pub);
  ez_pub_destroy(fast_pub);
  ez_context_close(b);
  ez_context_close(a);
}

/* A server that never answers SHM_ATTACH: the channel gives up on shared memory within the
 * handshake's time, answers SHM_ATTACH_FAILED, and the publisher sends over TCP. */
static void test_attach_never_answered(void **state) {
  (void)state;
  ez_context *a, *b;
  open_contexts(&a, &b);
  ez_pub *p;
  assert_int_equal(ez_pub_create(a, "/attach/never", NULL, &p), 0);
  ez_sub *s;
  assert_int_equal(ez_sub_create(b, "/attach/never", NULL, &s), 0);
  for (int i = 0; i < 5000 && !__atomic_load_n(&px.gave_up, __ATOMIC_SEQ_CST); i++)
    th_sleep_ms(1); /* (the proxy sees the hang-up within its next poll) */
  assert_int_equal(__atomic_load_n(&px.gave_up, __ATOMIC_SEQ_CST), 1);
  for (uint64_t k = 0; k < 50; k++)
    exchange(p, s, k);
  ez_sub_destroy(s);
  ez_pub_destroy(p);
  ez_context_close(b);
  ez_context_close(a);
}

static size_t put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
  return 8;
}

/* A str of the protocol: a u64 length, then the bytes. */
static size_t put_str(uint8_t *p, const char *s, size_t n) {
  size_t k = put_u64(p, n);
  memcpy(p + k, s, n);
  return k + n;
}

/* Answers to SHM_ATTACH that are not a segment's name: the channel gives up on shared memory at
 * once (a protocol error, not the 2 s timeout: the proxy keeps each connection open), answers
 * SHM_ATTACH_FAILED, and the publisher sends over TCP.
 *
 * The server's greeting (str version) reaches the client through the proxy before or after the
 * proxy's answer, as it happens: each answer is wrong either way and never reads as a prefix of
 * something longer (which would leave the client waiting for its timeout). In the comments, "G+A"
 * is the greeting first, "A+G" the answer first; COMPLETE is 0. */
static void test_attach_bad_answers(void **state) {
  (void)state;
  static uint8_t bad[5][600];
  size_t len[5], k;
  char big[400];
  memset(big, 'x', sizeof big);
  /* 0: G+A: another command than COMPLETE; A+G: a version of 0x57f bytes */
  bad[0][0] = 0x7f;
  len[0] = 1;
  /* 1: G+A: COMPLETE and an empty name; A+G: an empty version, COMPLETE, a name of 0x57f bytes */
  k = 0;
  bad[1][k++] = 0;
  k += put_u64(bad[1] + k, 0);
  bad[1][k++] = 0x7f;
  len[1] = k;
  /* 2: G+A: COMPLETE and a name of 400 bytes; A+G: a version of 0x19000 bytes */
  k = 0;
  bad[2][k++] = 0;
  len[2] = k + put_str(bad[2] + k, big, sizeof big);
  /* 3: A+G: a version of 400 bytes; G+A: command 0x90 */
  len[3] = put_str(bad[3], big, sizeof big);
  /* 4: A+G: a version of 2^63 bytes; G+A: COMPLETE and a name of 2^55 bytes */
  len[4] = put_u64(bad[4], 1ull << 63);
  len[4] += put_u64(bad[4] + len[4], 1ull << 63);

  ez_context *a, *b;
  open_contexts(&a, &b);
  for (int i = 0; i < 5; i++) {
    px.answer = bad[i];
    px.answer_len = len[i];
    char topic[32];
    snprintf(topic, sizeof topic, "/attach/bad%d", i);
    int before = __atomic_load_n(&refused_logged, __ATOMIC_SEQ_CST);
    ez_pub *p;
    assert_int_equal(ez_pub_create(a, topic, NULL, &p), 0);
    ez_sub *s;
    assert_int_equal(ez_sub_create(b, topic, NULL, &s), 0);
    for (uint64_t m = 0; m < 20; m++)
      exchange(p, s, m);
    assert_int_equal(__atomic_load_n(&refused_logged, __ATOMIC_SEQ_CST), before + 1);
    ez_sub_destroy(s);
    ez_pub_destroy(p);
  }
  ez_context_close(b);
  ez_context_close(a);
}

int main(void) {
  ez_set_log_hook(on_log, NULL, EZ_LOG_DEBUG); /* before any library thread runs */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_slow_attach_stalls_nothing_else, setup, teardown),
      cmocka_unit_test_setup_teardown(test_attach_never_answered, setup, teardown),
      cmocka_unit_test_setup_teardown(test_attach_bad_answers, setup, teardown)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
