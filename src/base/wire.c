/* Wire encoding, buffered non-blocking I/O, addresses and sockets. */
#include "base/wire.h"
#include "base/internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *const cmd_names[] = {"COMPLETE",   "PUBLISH",     "SUBSCRIBE",
                                        "CONNECT",    "DISCONNECT",  "CYCLIC",
                                        "PAUSE",      "SYNC",        "RESUME",
                                        "UPDATE",     "DAG",         "TX_LOCAL",
                                        "TX_SHM",     "TX_TCP",      "RX_ACK",
                                        "SHM_CREATE", "SHM_ATTACH",  "SHUTDOWN",
                                        "CHANNEL",    "SHM_OK",      "SHM_ATTACH_FAILED",
                                        "PROFILE",    "PROFILE_DATA"};

const char *ezi_cmd_name(unsigned cmd) {
  return cmd < sizeof cmd_names / sizeof cmd_names[0] ? cmd_names[cmd] : "?";
}

int ezi_buf_reserve(ezi_buf *b, size_t extra) {
  if (b->cap - b->len >= extra) return 0;
  if (b->off > 0 && b->off >= b->len / 2) { /* compact before growing */
    memmove(b->data, b->data + b->off, b->len - b->off);
    b->len -= b->off;
    b->off = 0;
    if (b->cap - b->len >= extra) return 0;
  }
  if (extra > SIZE_MAX / 2 - b->len) return EZ_ENOMEM;
  size_t want = b->len + extra, cap = b->cap ? b->cap : 256;
  while (cap < want)
    cap *= 2;
  uint8_t *d = realloc(b->data, cap);
  if (!d) return EZ_ENOMEM;
  b->data = d;
  b->cap = cap;
  return 0;
}

int ezi_buf_put(ezi_buf *b, const void *p, size_t n) {
  if (ezi_buf_reserve(b, n)) return EZ_ENOMEM;
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
  return 0;
}

int ezi_buf_put2(ezi_buf *b, const void *p1, size_t n1, const void *p2, size_t n2) {
  if (n1 > SIZE_MAX - n2 || ezi_buf_reserve(b, n1 + n2)) return EZ_ENOMEM;
  if (n1) memcpy(b->data + b->len, p1, n1);
  if (n2) memcpy(b->data + b->len + n1, p2, n2);
  b->len += n1 + n2;
  return 0;
}

int ezi_buf_put_u8(ezi_buf *b, uint8_t v) { return ezi_buf_put(b, &v, 1); }

int ezi_buf_put_u64(ezi_buf *b, uint64_t v) {
  uint8_t t[8];
  ezi_put_u64le(t, v);
  return ezi_buf_put(b, t, 8);
}

int ezi_buf_put_str(ezi_buf *b, const char *s, size_t n) {
  if (ezi_buf_reserve(b, 8 + n)) return EZ_ENOMEM;
  ezi_buf_put_u64(b, n);
  return ezi_buf_put(b, s, n);
}

void ezi_buf_consume(ezi_buf *b, size_t n) {
  b->off += n;
  if (b->off >= b->len) b->off = b->len = 0;
}

void ezi_buf_reset(ezi_buf *b) { b->off = b->len = 0; }

void ezi_buf_free(ezi_buf *b) {
  free(b->data);
  *b = (ezi_buf){0};
}

int ezi_buf_flush(ezi_buf *b, int fd) {
  while (ezi_buf_pending(b)) {
    ssize_t n = send(fd, ezi_buf_head(b), ezi_buf_pending(b), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      ezi_buf_consume(b, (size_t)n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    return EZ_ECONNLOST;
  }
  return 0;
}

long ezi_buf_fill(ezi_buf *b, int fd, size_t max_total) {
  size_t pend = ezi_buf_pending(b);
  if (pend >= max_total) return 0;
  size_t room = max_total - pend;
  if (room > 65536) room = 65536;
  if (ezi_buf_reserve(b, room)) return EZ_ENOMEM;
  long n = ezi_recv_some(fd, b->data + b->len, room);
  if (n > 0) b->len += (size_t)n;
  return n;
}

long ezi_recv_some(int fd, uint8_t *p, size_t room) {
  for (;;) {
    ssize_t n = recv(fd, p, room, MSG_DONTWAIT);
    if (n > 0) return (long)n;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    return EZ_ECONNLOST;
  }
}

char *ezi_strndup(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (!d) return NULL;
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}

bool ezi_is_uuid(const char *s, size_t n) {
  if (n != 36) return false;
  for (size_t i = 0; i < 36; i++) {
    char c = s[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return false;
    } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) {
      return false;
    }
  }
  return true;
}

int ezi_addr_parse(const char *addr, char host[256], uint16_t *port) {
  if (!addr) return EZ_EADDR;
  const char *colon = strrchr(addr, ':');
  if (!colon || colon == addr || (size_t)(colon - addr) >= 256) return EZ_EADDR;
  char *end;
  errno = 0;
  long p = strtol(colon + 1, &end, 10);
  if (errno || *end || end == colon + 1 || p < 0 || p > 65535) return EZ_EADDR;
  memcpy(host, addr, (size_t)(colon - addr));
  host[colon - addr] = 0;
  *port = (uint16_t)p;
  return 0;
}

void ezi_addr_resolve(const char *addr, char out[300]) {
  if (!addr || !*addr) addr = getenv(EZ_ADDR_ENV);
  if (!addr || !*addr) addr = EZ_DEFAULT_ADDRESS;
  snprintf(out, 300, "%s", addr);
}

void ezi_sock_setup(int fd) {
  int one = 1;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* A numeric host is parsed without a lookup (no resolver, no file, no network). The I/O threads
 * connect to numeric addresses: the graph server's as found at open (context.c), publishers' as
 * the graph server gives them (the address it sees each publisher at). */
static int resolve(const char *host, uint16_t port, struct sockaddr_storage *ss, socklen_t *len) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV},
                  *res = NULL;
  char ps[8];
  snprintf(ps, sizeof ps, "%u", port);
  if (getaddrinfo(host, ps, &hints, &res) != 0) {
    res = NULL;
    hints.ai_flags = AI_NUMERICSERV;
    if (getaddrinfo(host, ps, &hints, &res) != 0) res = NULL;
  }
  if (!res) return EZ_EADDR;
  memcpy(ss, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return 0;
}

int ezi_tcp_listen(const char *host, uint16_t port, int backlog) {
  struct sockaddr_storage ss;
  socklen_t len;
  if (resolve(host, port, &ss, &len)) return EZ_EADDR;
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return EZ_ESYS;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, backlog) != 0) {
    close(fd);
    return EZ_EADDR;
  }
  return fd;
}

uint16_t ezi_sock_port(int fd) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  return 0;
}

static void sock_host(int fd, bool peer, char out[64]) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  out[0] = 0;
  if ((peer ? getpeername : getsockname)(fd, (struct sockaddr *)&ss, &len) != 0) return;
  if (getnameinfo((struct sockaddr *)&ss, len, out, 64, NULL, 0, NI_NUMERICHOST) != 0) out[0] = 0;
}

void ezi_sock_peer_host(int fd, char out[64]) { sock_host(fd, true, out); }
void ezi_sock_local_host(int fd, char out[64]) { sock_host(fd, false, out); }

/* A non-blocking socket connecting to host:port (*err: 0 if connected at once, else connect's
 * errno; the fd is the caller's either way), or EZ_EADDR / EZ_ESYS. */
static int connect_nb(const char *host, uint16_t port, int *err) {
  struct sockaddr_storage ss;
  socklen_t len;
  if (resolve(host, port, &ss, &len)) return EZ_EADDR;
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return EZ_ESYS;
  *err = connect(fd, (struct sockaddr *)&ss, len) == 0 ? 0 : errno;
  return fd;
}

int ezi_tcp_connect_start(const char *host, uint16_t port, bool *done) {
  int err = 0, fd = connect_nb(host, port, &err);
  if (fd < 0) return fd;
  if (err && err != EINPROGRESS) {
    close(fd);
    return EZ_ENOSERVER;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  *done = err == 0;
  return fd;
}

int ezi_tcp_knock(const char *host, uint16_t port) {
  int err = 0, fd = connect_nb(host, port, &err);
  if (fd < 0) return -1;
  int r = -1;
  if (err == 0) {
    r = 1;
  } else if (err == ECONNREFUSED) {
    r = 0;
  } else if (err == EINPROGRESS) {
    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
    socklen_t elen = sizeof err; /* (err: now the connection's own outcome) */
    if (poll(&pfd, 1, 0) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) == 0)
      r = err == 0 ? 1 : err == ECONNREFUSED ? 0 : -1;
  }
  close(fd);
  return r;
}

int ezi_tcp_connect(const char *host, uint16_t port, int timeout_ms) {
  bool done;
  int fd = ezi_tcp_connect_start(host, port, &done);
  if (fd < 0 || done) return fd;
  struct pollfd pfd = {.fd = fd, .events = POLLOUT};
  int r;
  do
    r = poll(&pfd, 1, timeout_ms);
  while (r < 0 && errno == EINTR);
  if (r == 0) {
    close(fd);
    return EZ_ETIMEDOUT;
  }
  int err = 0;
  socklen_t elen = sizeof err;
  if (r < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err != 0) {
    close(fd);
    return EZ_ENOSERVER;
  }
  return fd;
}
