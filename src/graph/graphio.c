/* Blocking exchanges with a graph server on a non-blocking socket, each bounded by a deadline:
 * reading and writing (the one-shot requests, the 3.9 sessions, the shm leases and the context
 * use them) and opening a connection, which reads the server's greeting. */
#include "base/internal.h"
#include "base/wire.h"
#include "graph/graphio.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static int wait_fd(int fd, short events, uint64_t deadline) {
  struct pollfd p = {.fd = fd, .events = events};
  for (;;) {
    int r = poll(&p, 1, ezi_ms_left(deadline));
    if (r > 0) return 0;
    if (r == 0) return EZ_ETIMEDOUT;
    if (errno != EINTR) return EZ_ESYS;
  }
}

int ezi_io_write(int fd, const void *p, size_t n, uint64_t deadline) {
  const uint8_t *b = p;
  while (n) {
    ssize_t w = send(fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      b += w;
      n -= (size_t)w;
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int rc = wait_fd(fd, POLLOUT, deadline);
      if (rc) return rc;
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else {
      return EZ_ECONNLOST;
    }
  }
  return 0;
}

int ezi_io_read(int fd, void *p, size_t n, uint64_t deadline) {
  uint8_t *b = p;
  while (n) {
    ssize_t r = recv(fd, b, n, MSG_DONTWAIT);
    if (r > 0) {
      b += r;
      n -= (size_t)r;
    } else if (r == 0) {
      return EZ_ECONNLOST;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      int rc = wait_fd(fd, POLLIN, deadline);
      if (rc) return rc;
    } else if (errno != EINTR) {
      return EZ_ECONNLOST;
    }
  }
  return 0;
}

int ezi_io_read_u64(int fd, uint64_t *v, uint64_t deadline) {
  uint8_t b[8];
  int rc = ezi_io_read(fd, b, 8, deadline);
  if (!rc) *v = ezi_get_u64le(b);
  return rc;
}

int ezi_io_read_str(int fd, char **out, size_t *len, uint64_t max, uint64_t deadline) {
  uint64_t n;
  int rc = ezi_io_read_u64(fd, &n, deadline);
  if (rc) return rc;
  if (n > max) return EZ_EPROTO;
  char *s = malloc((size_t)n + 1);
  if (!s) return EZ_ENOMEM;
  rc = ezi_io_read(fd, s, (size_t)n, deadline);
  if (rc) {
    free(s);
    return rc;
  }
  s[n] = 0;
  *out = s;
  if (len) *len = (size_t)n;
  return 0;
}

int ezi_graph_open(const char *address, uint64_t deadline, char *version, size_t cap) {
  char addr[300], host[256];
  uint16_t port;
  ezi_addr_resolve(address, addr);
  if (ezi_addr_parse(addr, host, &port)) return EZ_EADDR;
  int fd = ezi_tcp_connect(host, port, ezi_ms_left(deadline));
  if (fd < 0) return fd;
  char *ver = NULL;
  int rc = ezi_io_read_str(fd, &ver, NULL, 256, deadline);
  if (rc) {
    close(fd);
    /* Accepted, then closed before the greeting: a server at its client limit does that. */
    return rc == EZ_ECONNLOST ? EZ_EREFUSED : rc;
  }
  /* No warning for another version: a server's greeting names its dialect (dialect.h), and a
   * context says once, at debug level, which one it is (ez_context_open). */
  if (version && cap) snprintf(version, cap, "%s", ver);
  free(ver);
  return fd;
}
