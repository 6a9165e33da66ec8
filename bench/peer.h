/* What the peers of bench/ (zmq_bench.c, iox_bench.c) share: the 32-byte header every message
 * starts with (the same as `ezmsg perf`'s), what a side reports, and whole reads and writes with
 * a deadline on the pipe to the child process. Header only. */
#ifndef EZ_BENCH_PEER_H
#define EZ_BENCH_PEER_H

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "latency.h" /* now_ns, the histogram */

#define MAGIC 0x66707a65u
#define F_MEASURE 1u /* sent after the warm-up: counted */
#define F_END 2u     /* the last one */

typedef struct hdr {
  uint32_t magic, flags;
  uint64_t seq, t_ns; /* sequence number, CLOCK_MONOTONIC send time */
  uint32_t src, pad;
} hdr;

/* One side's outcome (the sink's goes back to the parent through the pipe). */
typedef struct result {
  int rc;
  char err[200];
  uint64_t count, t0, t1, lost, late, corrupt, sent;
  uint64_t hist[H_N];
} result;

/* Reads (wr false) or writes all n bytes of buf on fd before `deadline` (now_ns time): 0, or -1
 * on a deadline, an error or the end of the pipe. */
static inline int io_full(int fd, void *buf, size_t n, bool wr, uint64_t deadline) {
  uint8_t *p = buf;
  while (n) {
    if (now_ns() >= deadline) return -1;
    struct pollfd pfd = {fd, wr ? POLLOUT : POLLIN, 0};
    if (poll(&pfd, 1, 200) <= 0) continue;
    ssize_t k = wr ? write(fd, p, n) : read(fd, p, n);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* Reaps child pid, waiting at most 3 s for it to exit by itself, then SIGKILLs it. */
static inline void reap_child(pid_t pid) {
  uint64_t wait_until = now_ns() + 3000000000u;
  for (;;) {
    pid_t w = waitpid(pid, NULL, WNOHANG);
    if (w == pid || (w < 0 && errno != EINTR)) return;
    if (now_ns() > wait_until) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
      return;
    }
    usleep(2000);
  }
}

/* Ends a JSON result line: "null}" if ok, else the error as a JSON string (quotes, backslashes
 * and control characters escaped) and "}". */
static inline void json_error_end(bool ok, const char *err) {
  if (ok) {
    printf("null}\n");
    return;
  }
  putchar('"');
  for (const unsigned char *c = (const unsigned char *)err; *c; c++) {
    if (*c == '"' || *c == '\\')
      printf("\\%c", *c);
    else if (*c < 0x20)
      printf("\\u%04x", *c);
    else
      putchar(*c);
  }
  printf("\"}\n");
}

#endif
