/* Futex waits and wake-ups on words that may be shared between processes (futex.h). */
#include "base/futex.h"
#include "base/internal.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The absolute timeout for a deadline (NULL: none), in *ts; false if it passed already. */
static bool abs_timeout(uint64_t deadline, struct timespec *ts, struct timespec **tp) {
  *tp = NULL;
  if (deadline == UINT64_MAX) return true;
  if (ezi_now_ns() >= deadline) return false;
  ts->tv_sec = (time_t)(deadline / 1000000000u);
  ts->tv_nsec = (long)(deadline % 1000000000u);
  *tp = ts;
  return true;
}

int ezi_futex_wait(uint32_t *word, uint32_t expect, uint64_t deadline) {
  struct timespec ts, *tp;
  if (!abs_timeout(deadline, &ts, &tp)) return EZ_ETIMEDOUT;
  /* FUTEX_WAIT_BITSET takes an absolute time on CLOCK_MONOTONIC (the clock of ezi_deadline). */
  long rc = syscall(SYS_futex, word, FUTEX_WAIT_BITSET, expect, tp, NULL, FUTEX_BITSET_MATCH_ANY);
  if (rc == 0 || errno == EAGAIN || errno == EINTR) return 0;
  if (errno == ETIMEDOUT) return EZ_ETIMEDOUT;
  return EZ_ESYS;
}

/* Set once futex_waitv was found missing (ENOSYS: a kernel before 5.16, or a tool such as an
 * emulator that does not know the call) or refused (EPERM: a seccomp filter). */
static int waitv_missing;

int ezi_futex_waitv(uint32_t *const *words, const uint32_t *expect, size_t n, uint64_t deadline) {
#ifdef SYS_futex_waitv
  if (!n || n > EZI_FUTEX_WAITV_MAX) return EZ_ESYS;
  if (__atomic_load_n(&waitv_missing, __ATOMIC_RELAXED)) return EZ_ENOTSUP;
  struct timespec ts, *tp;
  if (!abs_timeout(deadline, &ts, &tp)) return EZ_ETIMEDOUT;
  struct futex_waitv w[EZI_FUTEX_WAITV_MAX];
  for (size_t i = 0; i < n; i++) /* shared words: no FUTEX_PRIVATE_FLAG */
    w[i] = (struct futex_waitv){.val = expect[i], .uaddr = (uintptr_t)words[i], .flags = FUTEX_32};
  /* The timeout is absolute, on the clock named (CLOCK_MONOTONIC: ezi_deadline's). */
  long rc = syscall(SYS_futex_waitv, w, (unsigned)n, 0u, tp, CLOCK_MONOTONIC);
  if (rc >= 0 || errno == EAGAIN || errno == EINTR) return 0;
  if (errno == ETIMEDOUT) return EZ_ETIMEDOUT;
  /* Not there, or refused by a system-call filter that does not know it (EPERM); EINVAL from a
   * kernel that knows the call but not what we ask. Only an unmapped word (EFAULT) is the
   * words' own failure. */
  if (errno != ENOSYS && errno != EPERM && errno != EINVAL) return EZ_ESYS;
  __atomic_store_n(&waitv_missing, 1, __ATOMIC_RELAXED);
#else
  (void)words;
  (void)expect;
  (void)n;
  (void)deadline;
#endif
  return EZ_ENOTSUP;
}

int ezi_futex_wake(uint32_t *word) {
  __atomic_add_fetch(word, 1, __ATOMIC_SEQ_CST);
  return (int)syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}
