/* What a publisher waits for, in words: for a publish that timed out, so that a test (or whoever
 * debugs a stuck graph) can tell which holder kept the slot and whether a wake-up was owed. */
#include "chan/channel.h"
#include "pub/pubdebug.h"

#include <stdarg.h>
#include <stdio.h>

typedef struct {
  char *buf;
  size_t cap, len;
} out;

/* Appends to o's fixed buffer, no allocation (this runs when something is stuck), cutting short
 * what does not fit. */
static const char *mode_name(ezi_send_mode m) {
  return m == EZI_SEND_RING ? "ring" : m == EZI_SEND_WINDOW ? "window" : "frames";
}

static void put(out *o, const char *fmt, ...) EZI_PRINTF(2, 3);
static void put(out *o, const char *fmt, ...) {
  if (o->len + 1 >= o->cap) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
  va_end(ap);
  if (n > 0) o->len += (size_t)n < o->cap - o->len ? (size_t)n : o->cap - o->len - 1;
}

#define U(x) ((unsigned long long)(x))

size_t ezi_pub_describe(ez_pub *p, char *buf, size_t cap) {
  out o = {buf, cap, 0};
  if (!cap) return 0;
  buf[0] = '\0';
  pthread_mutex_lock(&p->mu);
  uint32_t idx = (uint32_t)(p->next_id % p->nbuf);
  put(&o, "pub %s on %s: next_id %llu (slot %u), running %d closing %d waiters %d want %lld, ",
      p->id, p->topic, U(p->next_id), idx, p->running, p->closing, p->waiters, (long long)p->want);
  put(&o, "in_flight %llu, slot %u: lease %u msg %llu local_t0 %llu; %zu channel(s)\n",
      U(p->in_flight), idx, p->leases[idx], U(p->slot_msg[idx]), U(p->local_t0[idx]), p->n_chans);
  if (p->local)
    put(&o, "  local channel: published %llu, pub_wants %u\n",
        U(ezi_lchan_published(&p->local->lr)), ezi_lchan_wants(&p->local->lr));
  for (size_t i = 0; i < p->n_chans; i++) {
    pub_chan *pc = p->chans[i];
    pthread_mutex_lock(&pc->out.mu);
    bool queued = pc->out.queued, dead = pc->out.dead;
    pthread_mutex_unlock(&pc->out.mu);
    put(&o,
        "  channel %s (pid %llu): state %d held %u t0 %llu, mode %s wanted %s, outbox queued "
        "%d dead %d unsent %llu",
        pc->id, U(pc->pid), pc->state, pc->held, U(pc->t0[idx]), mode_name(pc->mode),
        mode_name(pc->wanted), queued, dead, U(ezi_outbox_unsent(&pc->out)));
    if (pc->mode == EZI_SEND_RING) {
      const ezi_ring_entry *e = &pc->ring.e[idx];
      put(&o, "; ring published %llu pub_wants %u rx_sleep %u, entry msg %llu refs %u",
          U(__atomic_load_n(&pc->ring.h->published, __ATOMIC_SEQ_CST)),
          __atomic_load_n(&pc->ring.h->pub_wants, __ATOMIC_SEQ_CST),
          __atomic_load_n(&pc->ring.h->rx_sleep, __ATOMIC_SEQ_CST), U(e->msg_id),
          __atomic_load_n(&e->refs, __ATOMIC_SEQ_CST));
    }
    put(&o, "\n");
  }
  pthread_mutex_unlock(&p->mu);
  return o.len;
}
