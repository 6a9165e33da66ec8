/* Helpers shared by the fuzz targets: quiet logging, input splitting, bounded blocking socket I/O
 * on 127.0.0.1. Every helper has a timeout; nothing here may hang. */
#ifndef EZ_FUZZ_COMMON_H
#define EZ_FUZZ_COMMON_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ezmsg/ezmsg.h"

/* The libFuzzer entry point, and the teardown every target defines (the replay driver calls it
 * before exiting so that LeakSanitizer sees a clean process). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
void fuzz_teardown(void);

/* Separator between the parts of a structured input (connections, chunks). */
#define FZ_SEP "\xfe\xed\xfa\xce"
#define FZ_SEP_LEN 4

/* Wire command bytes (the protocol's values; see /work/shared/protocol.md). */
enum {
  FZ_COMPLETE = 0,
  FZ_PUBLISH = 1,
  FZ_SUBSCRIBE = 2,
  FZ_UPDATE = 9,
  FZ_TX_SHM = 12,
  FZ_TX_TCP = 13,
  FZ_RX_ACK = 14,
  FZ_CHANNEL = 18,
  FZ_SHM_OK = 19,
  FZ_SHM_ATTACH_FAILED = 20,
};

/* The last library log lines (all levels), kept in memory and printed when a harness fails. */
#define FZ_LOG_LINES 256
typedef struct fz_log_ring {
  pthread_mutex_t mu;
  unsigned n;
  char line[FZ_LOG_LINES][240];
} fz_log_ring;

static inline fz_log_ring *fz_ring(void) {
  static fz_log_ring r = {.mu = PTHREAD_MUTEX_INITIALIZER};
  return &r;
}

static inline void fz_log_keep(void *user, int level, const char *msg) {
  (void)user;
  static const char lv[] = "DIWE";
  fz_log_ring *r = fz_ring();
  pthread_mutex_lock(&r->mu);
  snprintf(r->line[r->n++ % FZ_LOG_LINES], sizeof r->line[0], "%c %s",
           level >= 0 && level < 4 ? lv[level] : '?', msg);
  pthread_mutex_unlock(&r->mu);
}

static inline void fz_dump_log(void) {
  fz_log_ring *r = fz_ring();
  pthread_mutex_lock(&r->mu);
  unsigned first = r->n > FZ_LOG_LINES ? r->n - FZ_LOG_LINES : 0;
  if (r->n) fprintf(stderr, "---- the last %u library log lines ----\n", r->n - first);
  for (unsigned i = first; i < r->n; i++)
    fprintf(stderr, "%s\n", r->line[i % FZ_LOG_LINES]);
  pthread_mutex_unlock(&r->mu);
}

/* Run before a harness failure aborts (and registered with atexit by the harness that sets it):
 * releases what other processes would otherwise keep, such as a segment name in /dev/shm. */
static void (*fz_cleanup)(void);

static inline void fz_die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FUZZ HARNESS FAILURE: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  fz_dump_log();
  if (fz_cleanup) fz_cleanup();
  abort();
}

/* True if $EZ_FUZZ_KNOWN (a comma-separated list) names `bug`: a harness then works around that
 * already-reported bug instead of failing on it, so that fuzzing can go past it. */
static inline bool fz_known(const char *bug) {
  const char *k = getenv("EZ_FUZZ_KNOWN");
  size_t n = strlen(bug);
  for (const char *p = k; p && (p = strstr(p, bug)); p += n)
    if ((p == k || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return true;
  return false;
}

/* For a hang: prints every thread's stack (through gdb, if there is one and $EZ_FUZZ_GDB is not
 * "0"), then fails as fz_die. */
static inline void fz_hang(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FUZZ HARNESS FAILURE (hang): ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  const char *g = getenv("EZ_FUZZ_GDB");
  if (!g || strcmp(g, "0") != 0) {
    char cmd[256];
    snprintf(cmd, sizeof cmd,
             "gdb -p %d -batch -nx -ex 'thread apply all bt' </dev/null 1>&2 2>/dev/null",
             (int)getpid());
    if (system(cmd) != 0) fprintf(stderr, "(no thread dump: gdb failed)\n");
  }
  fz_dump_log();
  if (fz_cleanup) fz_cleanup();
  abort();
}

static inline int64_t fz_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void fz_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Once per process: SIGPIPE ignored, and every log line formatted (debug level, so the logging
 * paths are exercised too) into an in-memory ring that a failing harness prints (fz_die,
 * fz_hang), unless $EZ_FUZZ_LOG is set (then the default stderr sink applies). */
static inline void fz_quiet(void) {
  static bool done;
  if (done) return;
  done = true;
  signal(SIGPIPE, SIG_IGN);
  if (!getenv("EZ_FUZZ_LOG")) ez_set_log_hook(fz_log_keep, NULL, EZ_LOG_DEBUG);
}

typedef struct fz_chunk {
  const uint8_t *p;
  size_t n;
} fz_chunk;

/* Splits d[0, n) at FZ_SEP into at most `max` chunks (the last one keeps any further
 * separators). Returns the number of chunks (>= 1). */
static inline size_t fz_split(const uint8_t *d, size_t n, fz_chunk *out, size_t max) {
  size_t k = 0, start = 0;
  for (size_t i = 0; k + 1 < max && i + FZ_SEP_LEN <= n;) {
    if (memcmp(d + i, FZ_SEP, FZ_SEP_LEN) == 0) {
      out[k++] = (fz_chunk){d + start, i - start};
      i += FZ_SEP_LEN;
      start = i;
    } else {
      i++;
    }
  }
  out[k++] = (fz_chunk){d + start, n - start};
  return k;
}

/* ---- sockets (127.0.0.1 only) ----------------------------------------------------------------
 * All fds returned are non-blocking with TCP_NODELAY; the blocking helpers poll with a timeout. */

static inline void fz_sock_setup(int fd) {
  int one = 1;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* A listening socket on 127.0.0.1:0; its port into *port. -1 on failure. */
static inline int fz_listen(uint16_t *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
    close(fd);
    return -1;
  }
  fz_sock_setup(fd);
  *port = ntohs(a.sin_port);
  return fd;
}

/* A port that was free a moment ago (bound to port 0, then released). Never 0: a machine out of
 * ports (see fz_throttle) is waited out, up to 10 s. */
static inline uint16_t fz_free_port(void) {
  for (int attempt = 0; attempt < 200; attempt++) {
    uint16_t port = 0;
    int fd = fz_listen(&port);
    if (fd >= 0) {
      close(fd);
      if (port) return port;
    }
    fz_sleep_ms(50);
  }
  fz_die("no free local port for 10 s");
  return 0;
}

/* ez_server_start on 127.0.0.1:0, retried for up to 10 s (a machine out of ports); dies after. */
static inline ez_server *fz_server_start(void) {
  for (int attempt = 0; attempt < 200; attempt++) {
    ez_server *srv = NULL;
    if (ez_server_start("127.0.0.1:0", &srv) == 0) return srv;
    fz_sleep_ms(50);
  }
  fz_die("cannot start a graph server for 10 s");
  return NULL;
}

/* Waits up to timeout_ms for a connection on the listening socket. -1 on timeout or error. */
static inline int fz_accept(int lfd, int timeout_ms) {
  struct pollfd p = {.fd = lfd, .events = POLLIN};
  int64_t deadline = fz_now_ms() + timeout_ms;
  for (;;) {
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd >= 0) {
      fz_sock_setup(fd);
      return fd;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    int64_t left = deadline - fz_now_ms();
    if (left <= 0) return -1;
    poll(&p, 1, (int)left);
  }
}

/* Accepts and closes every connection waiting on lfd right now. */
static inline void fz_accept_drop(int lfd) {
  int fd;
  while ((fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0)
    close(fd);
}

/* Connects to 127.0.0.1:port. -1 on failure (errno set). A lack of local ports (EADDRNOTAVAIL:
 * the machine's, not the library's fault) is waited out for up to 10 s, with a note. */
static inline int fz_connect(uint16_t port) {
  for (int attempt = 0;; attempt++) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
      fz_sock_setup(fd);
      return fd;
    }
    int e = errno;
    close(fd);
    errno = e;
    if (e != EADDRNOTAVAIL || attempt == 100) return -1;
    if (attempt == 0) fprintf(stderr, "fuzz: out of local ports; waiting\n");
    fz_sleep_ms(100);
  }
}

/* The port of a "host:port" address (0 if unparsable). */
static inline uint16_t fz_addr_port(const char *addr) {
  const char *c = addr ? strrchr(addr, ':') : NULL;
  long p = c ? strtol(c + 1, NULL, 10) : 0;
  return p > 0 && p < 65536 ? (uint16_t)p : 0;
}

static inline bool fz_wait(int fd, short events, int64_t deadline) {
  struct pollfd p = {.fd = fd, .events = events};
  for (;;) {
    int64_t left = deadline - fz_now_ms();
    if (left < 0) left = 0;
    int r = poll(&p, 1, (int)left);
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

/* Writes all n bytes within timeout_ms. 0, or -1 (peer gone, timeout). */
static inline int fz_write(int fd, const void *p, size_t n, int timeout_ms) {
  const uint8_t *b = p;
  int64_t deadline = fz_now_ms() + timeout_ms;
  while (n) {
    ssize_t w = send(fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      b += w;
      n -= (size_t)w;
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!fz_wait(fd, POLLOUT, deadline)) return -1;
    } else if (!(w < 0 && errno == EINTR)) {
      return -1;
    }
  }
  return 0;
}

static inline int fz_write_u8(int fd, uint8_t v, int timeout_ms) {
  return fz_write(fd, &v, 1, timeout_ms);
}

static inline int fz_write_u64(int fd, uint64_t v, int timeout_ms) {
  uint8_t b[8];
  for (int i = 0; i < 8; i++)
    b[i] = (uint8_t)(v >> (8 * i));
  return fz_write(fd, b, 8, timeout_ms);
}

/* u64 length, then the bytes. */
static inline int fz_write_str(int fd, const char *s, int timeout_ms) {
  size_t n = strlen(s);
  if (fz_write_u64(fd, n, timeout_ms)) return -1;
  return fz_write(fd, s, n, timeout_ms);
}

/* Reads exactly n bytes within timeout_ms. 0, or -1 (EOF, error, timeout). */
static inline int fz_read(int fd, void *p, size_t n, int timeout_ms) {
  uint8_t *b = p;
  int64_t deadline = fz_now_ms() + timeout_ms;
  while (n) {
    ssize_t r = recv(fd, b, n, MSG_DONTWAIT);
    if (r > 0) {
      b += r;
      n -= (size_t)r;
    } else if (r == 0) {
      return -1;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!fz_wait(fd, POLLIN, deadline)) return -1;
    } else if (errno != EINTR) {
      return -1;
    }
  }
  return 0;
}

static inline int fz_read_u64(int fd, uint64_t *v, int timeout_ms) {
  uint8_t b[8];
  if (fz_read(fd, b, 8, timeout_ms)) return -1;
  uint64_t x = 0;
  for (int i = 7; i >= 0; i--)
    x = (x << 8) | b[i];
  *v = x;
  return 0;
}

/* Reads a str of at most cap - 1 bytes into out (NUL-terminated). -1 if longer, EOF, timeout. */
static inline int fz_read_str(int fd, char *out, size_t cap, int timeout_ms) {
  uint64_t n;
  if (fz_read_u64(fd, &n, timeout_ms) || n >= cap) return -1;
  if (fz_read(fd, out, (size_t)n, timeout_ms)) return -1;
  out[n] = 0;
  return 0;
}

/* Closes with a reset (SO_LINGER 0) instead of a FIN: for sockets the harness closes first, so
 * that they leave no TIME_WAIT entry behind (see fz_throttle). */
static inline void fz_close_rst(int fd) {
  struct linger l = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  close(fd);
}

/* Every TCP connection closed first by a client leaves a TIME_WAIT entry for 60 s, and those
 * entries keep their local ports from being bound with port 0 (by anyone on the machine). The
 * network targets close many connections per input (the library closes its own first), so before
 * each input they call this: it waits while the machine has more than $EZ_FUZZ_MAX_TW (default
 * 14000, half the usual ephemeral port range; 0: no limit) TIME_WAIT sockets (/proc/net/sockstat),
 * up to 6 s (then it goes on). The wait counts in the input's time, so it stays below libFuzzer's
 * slow-unit threshold (10 s): the "slow units" of 14-20 s that `channel` and `pubacks` reported
 * in earlier sessions were this wait, when it was 20 s. A wait of a second or more is logged. */
static inline void fz_throttle(void) {
  static int64_t next_check;
  static long max_tw = -1;
  if (max_tw < 0) {
    const char *e = getenv("EZ_FUZZ_MAX_TW");
    max_tw = e && *e ? strtol(e, NULL, 10) : 14000;
  }
  int64_t now = fz_now_ms();
  if (max_tw <= 0 || now < next_check) return;
  next_check = now + 20;
  for (int i = 0; i < 120; i++) {
    FILE *f = fopen("/proc/net/sockstat", "r");
    if (!f) return;
    char line[256];
    long tw = 0;
    while (fgets(line, sizeof line, f)) {
      const char *p = strncmp(line, "TCP:", 4) == 0 ? strstr(line, " tw ") : NULL;
      if (p) tw = strtol(p + 4, NULL, 10);
    }
    fclose(f);
    if (tw <= max_tw || i == 119) {
      if (i >= 20)
        fprintf(stderr, "fz_throttle: waited %d ms for TIME_WAIT sockets (%ld, limit %ld)\n",
                i * 50, tw, max_tw);
      return;
    }
    fz_sleep_ms(50);
  }
}

/* Reads and discards what is readable now. Returns -1 once the peer has closed, else 0. */
static inline int fz_read_avail(int fd) {
  uint8_t buf[4096];
  for (;;) {
    ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (r > 0) continue;
    if (r == 0) return -1;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
  }
}

/* Reads and discards until the peer closes (true) or timeout_ms passes (false). */
static inline bool fz_drain(int fd, int timeout_ms) {
  int64_t deadline = fz_now_ms() + timeout_ms;
  for (;;) {
    if (fz_read_avail(fd) < 0) return true;
    if (!fz_wait(fd, POLLIN, deadline)) return false;
  }
}

/* Reads the graph server's version string on a fresh connection. */
static inline int fz_read_version(int fd, int timeout_ms) {
  char v[300];
  return fz_read_str(fd, v, sizeof v, timeout_ms);
}

#endif
