/* The tick that expires sampled stamps (telclock.h): a timer of the context's I/O loop clears the
 * mask of every attached stamper each EZI_TICK_NS while stampers use it, and stops when a whole
 * period went by without a sampled stamp.
 *
 * Why a stamp is always expired by a later advance: the stamper stores its mask, then sets `used`
 * (or finds it set), then makes sure the timer is armed; the timer clears `used` before it clears
 * the masks. All of these are sequentially consistent, so either the timer's next clearing of
 * `used` comes after the stamper's store or load of it and its clear of the mask after the
 * stamper's store, or the timer, about to stop, sees `used` after its `armed = 0` and carries on,
 * or the stamper sees `armed == 0` and starts it (Dekker's pattern on used / armed). */
#include "base/telclock.h"
#include "base/internal.h"
#include "base/loop.h"

#include <stdlib.h>

#define SEQ __ATOMIC_SEQ_CST

ezi_tick *ezi_tick_new(struct ezi_loop *loop) {
  ezi_tick *k = calloc(1, sizeof *k);
  if (!k) return NULL;
  k->loop = loop;
  ezi_mutex_init(&k->mu);
  return k;
}

void ezi_tick_free(ezi_tick *k) {
  if (!k) return;
  pthread_mutex_destroy(&k->mu);
  free(k);
}

void ezi_stamper_attach(ezi_stamper *st, ezi_tick *k) {
  pthread_mutex_lock(&k->mu);
  st->tick = k;
  st->prev = NULL;
  st->next = k->first;
  if (k->first) k->first->prev = st;
  k->first = st;
  pthread_mutex_unlock(&k->mu);
}

void ezi_stamper_detach(ezi_stamper *st) {
  ezi_tick *k = st->tick;
  if (!k) return;
  pthread_mutex_lock(&k->mu);
  if (st->prev)
    st->prev->next = st->next;
  else
    k->first = st->next;
  if (st->next) st->next->prev = st->prev;
  pthread_mutex_unlock(&k->mu);
  st->tick = NULL;
  st->prev = st->next = NULL;
}

void ezi_tick_advance(ezi_tick *k) {
  pthread_mutex_lock(&k->mu);
  for (ezi_stamper *st = k->first; st; st = st->next)
    __atomic_store_n(&st->mask, 0, SEQ);
  pthread_mutex_unlock(&k->mu);
  __atomic_add_fetch(&k->n, 1, SEQ);
}

static void schedule(ezi_tick *k);

/* Loop thread: one period went by. */
static void fire(void *arg) {
  ezi_tick *k = arg;
  if (__atomic_exchange_n(&k->used, 0, SEQ)) { /* stamps to expire */
    ezi_tick_advance(k);
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
