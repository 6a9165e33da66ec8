/* Internal helpers shared by every source file: logging, time, small utilities. Not installed. */
#ifndef EZI_INTERNAL_H
#define EZI_INTERNAL_H

#include "ezmsg/ezmsg.h"

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#if defined(__GNUC__)
#define EZI_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define EZI_LIKELY(x) __builtin_expect(!!(x), 1)
#define EZI_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define EZI_PRINTF(a, b)
#define EZI_LIKELY(x) (x)
#define EZI_UNLIKELY(x) (x)
#endif

/* Logs one line through the application's hook (see ez_set_log_hook). Any thread. */
void ezi_log(int level, const char *fmt, ...) EZI_PRINTF(2, 3);
#define EZI_DEBUG(...) ezi_log(EZ_LOG_DEBUG, __VA_ARGS__)
#define EZI_INFO(...) ezi_log(EZ_LOG_INFO, __VA_ARGS__)
#define EZI_WARN(...) ezi_log(EZ_LOG_WARN, __VA_ARGS__)
#define EZI_ERROR(...) ezi_log(EZ_LOG_ERROR, __VA_ARGS__)
/* True if a message at `level` would be emitted (to skip building expensive log lines). */
int ezi_log_enabled(int level);

/* Rate limits for lines a peer can trigger at will (a peer that reconnects 20 times a second
 * must not make us print 40 lines a second): each call site prints at most EZI_RL_BURST lines
 * per EZI_RL_WINDOW_NS; the first line it prints after suppressing some says how many. */
#define EZI_RL_BURST 5
#define EZI_RL_WINDOW_NS 10000000000ull
typedef struct ezi_ratelimit {
  uint64_t start;      /* the current window's start (0: none yet) */
  uint32_t printed;    /* lines printed in it */
  uint32_t suppressed; /* lines dropped since the last one printed */
} ezi_ratelimit;
/* Whether a line at time `now` (ns) passes rl; if it does, *suppressed gets the count of lines
 * dropped before it (and the count starts again). Pure: the caller serialises calls on one rl
 * (ezi_log_rl does). */
bool ezi_ratelimit_pass(ezi_ratelimit *rl, uint64_t now, uint32_t *suppressed);
/* ezi_log through rl (a static of the call site): any thread. */
void ezi_log_rl(ezi_ratelimit *rl, int level, const char *fmt, ...) EZI_PRINTF(3, 4);
#define EZI_WARN_RL(...)                                                                           \
  do {                                                                                             \
    static ezi_ratelimit ezi_rl_;                                                                  \
    ezi_log_rl(&ezi_rl_, EZ_LOG_WARN, __VA_ARGS__);                                                \
  } while (0)
#define EZI_INFO_RL(...)                                                                           \
  do {                                                                                             \
    static ezi_ratelimit ezi_rl_;                                                                  \
    ezi_log_rl(&ezi_rl_, EZ_LOG_INFO, __VA_ARGS__);                                                \
  } while (0)

/* ezi_now_ns (the monotonic clock) and ezi_tel_now (the message path's time stamps). */
#include "base/telclock.h"

/* Deadline helpers: a negative timeout means "never". */
static inline uint64_t ezi_deadline(int timeout_ms) {
  return timeout_ms < 0 ? UINT64_MAX : ezi_now_ns() + (uint64_t)timeout_ms * 1000000u;
}
/* Milliseconds left until `deadline` (rounded up), -1 for never, 0 if passed. */
int ezi_ms_left(uint64_t deadline);

/* Generates a version-1 style (time-based) UUID string, 36 chars + NUL, as the reference does. */
void ezi_uuid(char out[37]);

#include <pthread.h>
/* A mutex of the message path: adaptive (it spins a little before it sleeps), since the
 * critical sections are short and a futex sleep and wake-up per contended lock cost more than the
 * wait (tcp 64 B made 15x fewer futex calls with the outboxes' locks adaptive). */
void ezi_mutex_init(pthread_mutex_t *mu);
/* Condition variables on the monotonic clock: init, and wait until `deadline` (ezi_deadline).
 * Returns 0 when signalled (or spuriously), EZ_ETIMEDOUT once the deadline has passed. */
void ezi_cond_init(pthread_cond_t *cv);
int ezi_cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t deadline);

/* strdup that returns NULL on NULL. */
char *ezi_strdup(const char *s);

/* A spin-wait hint to the CPU. */
static inline void ezi_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* Polling before sleeping (loop.c, ez_recv) goes on while it finds work at least this often:
 * spin_score (a moving average of successes, 0..1024) >= SPIN_WORTH, i.e. 3 polls in 4. */
#define SPIN_WORTH 768

#endif
