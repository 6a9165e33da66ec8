/* The tick that expires sampled stamps (telclock.h): a timer of the context's I/O loop advances
 * it every EZI_TICK_NS while stampers use it, and stops when a whole period went by without a
 * sampled stamp.
 *
 * Why a stamp taken after reading n = k is always expired by a later advance: the stamper reads
 * n, then sets `used` (or finds it set), then makes sure the timer is armed; the timer clears
 * `used` before it advances n. All of these are sequentially consistent, so either the timer's
 * next clearing sees this `used` and advances n after the stamper read it, or the timer, about to
 * stop, sees `used` after its `armed = 0` and carries on, or the stamper sees `armed == 0` and
 * starts it (Dekker's pattern on used / armed). */
#include "telclock.h"
#include "internal.h"
#include "loop.h"

#include <stdlib.h>

#define SEQ __ATOMIC_SEQ_CST

ezi_tick *ezi_tick_new(struct ezi_loop *loop) {
  ezi_tick *k = aligned_alloc(64, 64); /* a cache line of its own: read by every publish */
  if (!k) return NULL;
  *k = (ezi_tick){.loop = loop};
  return k;
}

void ezi_tick_free(ezi_tick *k) { free(k); }

static void schedule(ezi_tick *k);

/* Loop thread: one period went by. */
static void fire(void *arg) {
  ezi_tick *k = arg;
  if (__atomic_exchange_n(&k->used, 0, SEQ)) { /* stamps to expire */
    __atomic_add_fetch(&k->n, 1, SEQ);
    schedule(k);
    return;
  }
  __atomic_store_n(&k->armed, 0, SEQ); /* idle: stop, unless a stamp came meanwhile */
  if (__atomic_load_n(&k->used, SEQ) && !__atomic_exchange_n(&k->armed, 1, SEQ)) schedule(k);
}

static void schedule(ezi_tick *k) {
  if (!ezi_loop_timer(k->loop, ezi_now_ns() + EZI_TICK_NS, fire, k)) {
    /* Out of memory: stopped; the next sampled stamp tries again. */
    __atomic_store_n(&k->armed, 0, SEQ);
    EZI_WARN("out of memory: sampled telemetry stamps may go stale");
  }
}

static void start(void *arg) { schedule(arg); }

void ezi_tick_note(ezi_tick *k) {
  if (!__atomic_load_n(&k->used, SEQ)) __atomic_store_n(&k->used, 1, SEQ);
  if (__atomic_load_n(&k->armed, SEQ) || __atomic_exchange_n(&k->armed, 1, SEQ)) return;
  if (ezi_loop_post(k->loop, start, k)) __atomic_store_n(&k->armed, 0, SEQ); /* ENOMEM: retried */
}
