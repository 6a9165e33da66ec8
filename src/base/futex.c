/* Futex waits and wake-ups on words that may be shared between processes (futex.h). */
#include "base/futex.h"
#include "base/internal.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int ezi_futex_wait(uint32_t *word, uint32_t expect, uint64_t deadline) {
  struct timespec ts, *tp = NULL;
  if (deadline != UINT64_MAX) {
    if (ezi_now_ns() >= deadline) return EZ_ETIMEDOUT;
    ts.tv_sec = (time_t)(deadline / 1000000000u);
    ts.tv_nsec = (long)(deadline % 1000000000u);
    tp = &ts;
  }
  /* FUTEX_WAIT_BITSET takes an absolute time on CLOCK_MONOTONIC (the clock of ezi_deadline). */
  long rc = syscall(SYS_futex, word, FUTEX_WAIT_BITSET, expect, tp, NULL, FUTEX_BITSET_MATCH_ANY);
  if (rc == 0 || errno == EAGAIN || errno == EINTR) return 0;
  if (errno == ETIMEDOUT) return EZ_ETIMEDOUT;
  return EZ_ESYS;
}

int ezi_futex_wake(uint32_t *word) {
  __atomic_add_fetch(word, 1, __ATOMIC_SEQ_CST);
  return (int)syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}
