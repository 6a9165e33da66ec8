/* The memory peers make a process hold for TCP messages (rxbudget.h). */
#include "base/rxbudget.h"
#include "base/internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

static uint64_t g_held; /* atomic: bytes counted for all links */
static uint64_t g_link_max, g_proc_max, g_frame_ns;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* $name as a positive integer no larger than max, else def (logged if set but bad). */
static uint64_t env_u64(const char *name, uint64_t def, uint64_t max) {
  const char *e = getenv(name);
  if (!e || !*e) return def;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(e, &end, 10);
  if (errno || *end || !v || v > max) {
    EZI_WARN("%s=%s: not a number in 1..%llu; using %llu", name, e, (unsigned long long)max,
             (unsigned long long)def);
    return def;
  }
  return v;
}

static void read_env(void) {
  g_link_max = env_u64(EZ_RX_LINK_ENV, EZ_RX_LINK_DEFAULT_MB, 1u << 24) << 20;
  g_proc_max = env_u64(EZ_RX_PROCESS_ENV, EZ_RX_PROCESS_DEFAULT_MB, 1u << 24) << 20;
  g_frame_ns = env_u64(EZ_FRAME_TIMEOUT_ENV, EZ_FRAME_TIMEOUT_DEFAULT_MS, 86400000u) * 1000000u;
}

uint64_t ezi_rx_link_max(void) {
  pthread_once(&g_once, read_env);
  return g_link_max;
}

uint64_t ezi_rx_process_max(void) {
  pthread_once(&g_once, read_env);
  return g_proc_max;
}

uint64_t ezi_frame_timeout_ns(void) {
  pthread_once(&g_once, read_env);
  return g_frame_ns;
}

uint64_t ezi_rx_process_held(void) { return __atomic_load_n(&g_held, __ATOMIC_RELAXED); }

int ezi_rx_take(uint64_t *link, size_t n) {
  pthread_once(&g_once, read_env);
  uint64_t l = __atomic_load_n(link, __ATOMIC_RELAXED);
  if (n > g_link_max || l > g_link_max - n) return EZ_EMSGSIZE;
  uint64_t h = __atomic_load_n(&g_held, __ATOMIC_RELAXED);
  do {
    if (n > g_proc_max || h > g_proc_max - n) return EZ_EMSGSIZE;
  } while (
      !__atomic_compare_exchange_n(&g_held, &h, h + n, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  /* One thread takes for a link (its I/O thread); others only give back. */
  __atomic_add_fetch(link, n, __ATOMIC_RELAXED);
  return 0;
}

void ezi_rx_give(uint64_t *link, size_t n) {
  if (!n) return;
  __atomic_sub_fetch(link, n, __ATOMIC_RELAXED);
  __atomic_sub_fetch(&g_held, n, __ATOMIC_RELAXED);
}

int ezi_rx_resize(uint64_t *link, size_t had, size_t now) {
  if (now >= had) return ezi_rx_take(link, now - had);
  ezi_rx_give(link, had - now);
  return 0;
}
