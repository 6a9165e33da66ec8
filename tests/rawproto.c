/* Raw graph-server protocol for the C tests (rawproto.h). */
#include "rawproto.h"

#include "harness.h"

#include "proto/dialect.h"
#include "base/wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* The commands these helpers speak (protocol.md). */
enum { COMPLETE = 0, PUBLISH = 1, SUBSCRIBE = 2, UPDATE = 9 };

int rp_open(const char *addr) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)atoi(strrchr(addr, ':') + 1)),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

int rp_connect(const char *addr) {
  int fd = rp_open(addr);
  rp_expect_str(fd, EZ_VERSION);
  return fd;
}

int rp_rd_exact(int fd, void *buf, size_t n, int timeout_ms) {
  uint8_t *p = buf;
  int64_t deadline = th_now_ms() + timeout_ms;
  while (n) {
    int left = (int)(deadline - th_now_ms());
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int r = poll(&pf, 1, left > 0 ? left : 0); /* 0: still look once */
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -3;
    if (r == 0) return -1;
    ssize_t k = recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0 || (k < 0 && errno == ECONNRESET)) return -2;
    if (k < 0) return -3;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

uint8_t rp_rd_u8(int fd) {
  uint8_t v = 0xff;
  assert_int_equal(rp_rd_exact(fd, &v, 1, RP_TMO), 0);
  return v;
}

uint64_t rp_rd_u64(int fd) {
  uint8_t b[8];
  assert_int_equal(rp_rd_exact(fd, b, 8, RP_TMO), 0);
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = (v << 8) | b[i];
  return v;
}

size_t rp_rd_str(int fd, char *out, size_t cap) {
  uint64_t n = rp_rd_u64(fd);
  assert_true(n < cap);
  assert_int_equal(rp_rd_exact(fd, out, (size_t)n, RP_TMO), 0);
  out[n] = 0;
  return (size_t)n;
}

void rp_expect_u8(int fd, uint8_t want) { assert_int_equal(rp_rd_u8(fd), want); }

void rp_expect_str(int fd, const char *want) {
  char buf[512];
  rp_rd_str(fd, buf, sizeof buf);
  assert_string_equal(buf, want);
}

bool rp_closed_silently(int fd, int timeout_ms) {
  uint8_t b;
  return rp_rd_exact(fd, &b, 1, timeout_ms) == -2;
}

bool rp_hung_up(int fd, int timeout_ms) {
  int64_t end = th_now_ms() + timeout_ms;
  uint8_t b[256];
  while (th_now_ms() < end) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 100) == 1 && recv(fd, b, sizeof b, 0) <= 0) return true;
  }
  return false;
}

int rp_accept_talker(int listener, int timeout_ms) {
  for (;;) {
    struct pollfd pf = {.fd = listener, .events = POLLIN};
    if (poll(&pf, 1, timeout_ms) != 1) return -1;
    int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) return -1;
    pf = (struct pollfd){.fd = fd, .events = POLLIN};
    uint8_t b;
    if (poll(&pf, 1, timeout_ms) == 1 && recv(fd, &b, 1, MSG_PEEK) == 1) return fd;
    close(fd); /* a knock (or a connection that said nothing in time) */
  }
}

int rp_listen(char addr[64], int backlog) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(fd, backlog), 0);
  socklen_t alen = sizeof a;
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
  snprintf(addr, 64, "127.0.0.1:%u", ntohs(a.sin_port));
  return fd;
}

bool rp_quiet_for(int fd, int ms) {
  uint8_t b;
  return rp_rd_exact(fd, &b, 1, ms) == -1;
}

void rp_wr(int fd, const void *p, size_t n) {
  const uint8_t *b = p;
  while (n) {
    ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    assert_true(k > 0);
    b += k;
    n -= (size_t)k;
  }
}

void rp_put_u64le(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

void rp_wr_u8(int fd, uint8_t v) { rp_wr(fd, &v, 1); }

void rp_wr_u64(int fd, uint64_t v) {
  uint8_t b[8];
  rp_put_u64le(b, v);
  rp_wr(fd, b, 8);
}

void rp_wr_str(int fd, const char *s) {
  rp_wr_u64(fd, strlen(s));
  rp_wr(fd, s, strlen(s));
}

void rp_wr_cmd(int fd, uint8_t cmd, const char *a, const char *b) {
  size_t na = a ? strlen(a) : 0, nb = b ? strlen(b) : 0, n = 1;
  uint8_t *m = malloc(1 + 16 + na + nb);
  assert_non_null(m);
  m[0] = cmd;
  if (a) {
    rp_put_u64le(m + n, na);
    memcpy(m + n + 8, a, na);
    n += 8 + na;
  }
  if (b) {
    rp_put_u64le(m + n, nb);
    memcpy(m + n + 8, b, nb);
    n += 8 + nb;
  }
  rp_wr(fd, m, n);
  free(m);
}

bool rp_is_uuid(const char *s) {
  if (strlen(s) != 36) return false;
  for (int i = 0; i < 36; i++) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? s[i] != '-' : !strchr("0123456789abcdef", s[i])) return false;
  }
  return true;
}

int rp_fake_sub(const char *addr, const char *topic, char id[37], char *ids, size_t cap) {
  int fd = rp_connect(addr);
  rp_wr_cmd(fd, SUBSCRIBE, topic, NULL);
  rp_rd_str(fd, id, 37);
  assert_true(rp_is_uuid(id));
  rp_expect_u8(fd, UPDATE);
  rp_rd_str(fd, ids, cap);
  rp_wr_u8(fd, COMPLETE);
  rp_expect_u8(fd, COMPLETE);
  return fd;
}

int rp_fake_pub_begin(const char *addr, const char *topic, const char *chan_addr, char id[37]) {
  int fd = rp_connect(addr);
  rp_wr_cmd(fd, PUBLISH, topic, NULL);
  rp_rd_str(fd, id, 37);
  assert_true(rp_is_uuid(id));
  rp_wr_str(fd, chan_addr);
  return fd;
}

int rp_fake_pub(const char *addr, const char *topic, char id[37]) {
  int fd = rp_fake_pub_begin(addr, topic, "127.0.0.1:45678", id);
  rp_expect_u8(fd, COMPLETE);
  return fd;
}

void rp_sub_update(int fd, char *ids, size_t cap) {
  rp_expect_u8(fd, UPDATE);
  rp_rd_str(fd, ids, cap);
  rp_wr_u8(fd, COMPLETE);
}

void rp_rd_pub_hello(int fd, char *name, size_t cap, char *topic, size_t tcap) {
  size_t n = rp_rd_str(fd, name, cap);
  if (topic && tcap) topic[0] = 0;
  if (ezi_dialect_is_segment_name(name, n)) return;
  if (topic && tcap) snprintf(topic, tcap, "%s", name);
  rp_rd_str(fd, name, cap);
}

void rp_mark_ezc(int fd) { rp_wr_u8(fd, EZI_X_CLIENT); }
