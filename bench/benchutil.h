/* Small helpers the graph benchmarks share (bench/graphsize.c, bench/profile/profile_latency.c):
 * the monotonic clock in seconds, a sleep that an interrupting signal does not cut short (unless
 * *stop is set), and an ascending order of doubles for qsort. Header-only: each bench is one
 * program. */
#ifndef EZ_BENCHUTIL_H
#define EZ_BENCHUTIL_H

#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <time.h>

static inline double bu_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Sleeps s seconds; a signal resumes the sleep unless stop (may be NULL) is set by then. */
static inline void bu_sleep_s(double s, volatile sig_atomic_t *stop) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !(stop && *stop)) {
  }
}

static inline int bu_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

#endif
