/* The telemetry clock's slow path: whether the time-stamp counter may be used, its calibration
 * against CLOCK_MONOTONIC and the periodic re-anchoring; and a sampled stamper's slow path. See
 * telclock.h. */
#include "base/telclock.h"

#if defined(__x86_64__) && !defined(EZ_NO_TELEMETRY)

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

ezi_tsc_map ezi_tsc;

#define CAL_NS 10000000ull  /* the rate is measured over at least 10 ms */
#define SPAN_NS 50000000ull /* a mapping serves 50 ms */
#define PAIR_NS 2000u       /* an anchor's two clock reads at most 2 us apart */

static int usable;        /* 0: not known yet, 1: the kernel uses the TSC, -1: it does not */
static uint64_t prev_tsc; /* the last anchor (written under the seq lock) ... */
static uint64_t prev_ns;  /* ... (read without it, to wait for calibration cheaply) */
static const char *clocksource = "/sys/devices/system/clocksource/clocksource0/current_clocksource";

static bool kernel_uses_tsc(void) {
  FILE *f = fopen(clocksource, "re");
  char buf[32] = {0};
  bool yes = f && fgets(buf, sizeof buf, f) && strcmp(buf, "tsc\n") == 0;
  if (f) fclose(f);
  return yes;
}

/* A counter value and the monotonic time it stands for: the best of four reads between two clock
 * reads. False if none was tight enough (the thread was preempted every time). */
static bool take_anchor(uint64_t *tsc, uint64_t *ns) {
  uint64_t best = UINT64_MAX;
  for (int i = 0; i < 4; i++) {
    uint64_t a = ezi_now_ns(), t = __builtin_ia32_rdtsc(), b = ezi_now_ns();
    if (b - a < best) {
      best = b - a;
      *tsc = t;
      *ns = a + (b - a) / 2;
    }
  }
  return best < PAIR_NS;
}

uint64_t ezi_tel_now_slow(void) {
  int u = __atomic_load_n(&usable, __ATOMIC_ACQUIRE);
  if (u == 0) {
    u = kernel_uses_tsc() ? 1 : -1;
    __atomic_store_n(&usable, u, __ATOMIC_RELEASE);
  }
  if (u < 0) return ezi_now_ns();
  uint64_t last = __atomic_load_n(&prev_ns, __ATOMIC_RELAXED);
  if (last && !__atomic_load_n(&ezi_tsc.span, __ATOMIC_RELAXED)) { /* calibrating */
    uint64_t now = ezi_now_ns();
    if (now - last < CAL_NS) return now;
  }
  uint64_t s = __atomic_load_n(&ezi_tsc.seq, __ATOMIC_RELAXED);
  if ((s & 1) || !__atomic_compare_exchange_n(&ezi_tsc.seq, &s, s + 1, false, __ATOMIC_ACQUIRE,
                                              __ATOMIC_RELAXED))
    return ezi_now_ns();                   /* another thread is re-anchoring */
  __atomic_thread_fence(__ATOMIC_RELEASE); /* readers see seq odd before any new field */

  uint64_t tsc = 0, ns = 0;
  bool ok = take_anchor(&tsc, &ns);
  uint64_t pns = __atomic_load_n(&prev_ns, __ATOMIC_RELAXED);
  if (ok && (!pns || tsc <= prev_tsc)) { /* the first anchor (or a counter gone backwards) */
    prev_tsc = tsc;
    __atomic_store_n(&prev_ns, ns, __ATOMIC_RELAXED);
    __atomic_store_n(&ezi_tsc.span, 0, __ATOMIC_RELAXED);
  } else if (ok && ns - pns >= CAL_NS) {
    uint64_t mult =
        (uint64_t)(((unsigned __int128)(ns - pns) << 32) / (unsigned __int128)(tsc - prev_tsc));
    /* Sanity: between 10 MHz and 100 GHz (ns per tick 100 .. 0.01); else never use the TSC. */
    if (mult > (100ull << 32) || mult < (1ull << 32) / 100) {
      __atomic_store_n(&usable, -1, __ATOMIC_RELEASE);
      __atomic_store_n(&ezi_tsc.span, 0, __ATOMIC_RELAXED);
    } else {
      __atomic_store_n(&ezi_tsc.tsc, tsc, __ATOMIC_RELAXED);
      __atomic_store_n(&ezi_tsc.ns, ns, __ATOMIC_RELAXED);
      __atomic_store_n(&ezi_tsc.mult, mult, __ATOMIC_RELAXED);
      __atomic_store_n(&ezi_tsc.span, (SPAN_NS << 32) / mult, __ATOMIC_RELAXED);
      prev_tsc = tsc;
      __atomic_store_n(&prev_ns, ns, __ATOMIC_RELAXED);
    }
  }
  __atomic_store_n(&ezi_tsc.seq, s + 2, __ATOMIC_RELEASE);
  return ok ? ns : ezi_now_ns();
}

#endif

#if !defined(EZ_NO_TELEMETRY)

/* The mask is stored sequentially consistent, before the tick is noted: a tick whose advance
 * counts this stamp (its exchange of `used` comes after our store or our load of `used` in that
 * order) clears the mask after this store (stamptick.c). A tick's clear just before this store is
 * lost, but then the stamp is newer than that tick, and the next one expires it. */
uint64_t ezi_stamp_take(ezi_stamper *st, uint64_t id) {
  uint64_t now = ezi_tel_now();
  ezi_stamper_took(st, now, id);
  __atomic_store_n(&st->mask, (uint64_t)st->every - 1, __ATOMIC_SEQ_CST);
  if (st->tick && st->every > 1) ezi_tick_note(st->tick);
  return now;
}

#else

/* Nothing to do: no clock at all (telclock.h). An ISO C translation unit must not be empty. */
typedef int ezi_telclock_unused;

#endif
