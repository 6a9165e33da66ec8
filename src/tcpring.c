/* A TCP ring: the channel of a remote ezmsg-c publisher that granted a TCP window (X_WIN, see
 * pubwin.c) works as an in-process channel (localchan.c) whose publisher is its own I/O thread.
 *
 * The I/O thread copies each TX_TCP message into a buffer of its own, fills the entry
 * msg_id % lsn of the channel's ring, and publishes a read's messages at once: receivers take
 * and release them without a lock of the channel's, as from a local publisher. Acknowledgements
 * go the other way in order: the I/O thread acknowledges the messages from the first
 * unacknowledged one (wack), whose entry no member holds any more, up to the first still held,
 * with one RX_ACK for the last of them (in a window, an ack is for every message up to it). While
 * the stream goes on it does so in batches (ezi_tcpring_read_done); when it pauses, from the loop's
 * idle hook (ezi_tcpring_idle); and a release wakes the I/O thread for it only if that sleeps
 * (ezi_tcpring_ask). No lock is shared with the receivers per message.
 *
 * The window's rules are checked here as the publisher keeps them (pubwin.c): messages come in
 * order, each to an entry acknowledged already, and beyond nbuf in flight they take at most
 * win_bytes. A publisher that breaks them loses the link. A message's buffer lives until it is
 * acknowledged, or until the channel goes (a message still held or queued after the link is lost
 * stays valid); acknowledged ones are kept for the next messages (buf_put). */
#include "channel.h"
#include "txframe.h"

#include <stdlib.h>
#include <string.h>

#define SEQ __ATOMIC_SEQ_CST

int ezi_chan_win_start(chan *c, uint64_t start_id, uint64_t msgs, uint64_t bytes) {
  if (c->ls || msgs < c->nbuf || msgs > EZI_WIN_MAX_MSGS || bytes > EZI_WIN_MAX_BYTES)
    return EZ_EPROTO;
  lslot *ls = ezi_lchan_ring_new((uint32_t)msgs);
  struct ezi_wbuf *wb = calloc((size_t)msgs, sizeof *wb);
  struct ezi_wbuf *spare = calloc((size_t)msgs, sizeof *spare);
  uint64_t **t0s = calloc(c->n_subs + 1, sizeof *t0s);
  int rc = ls && wb && spare && t0s ? 0 : EZ_ENOMEM;
  for (size_t i = 0; !rc && i < c->n_subs; i++)
    if (!(t0s[i] = calloc((size_t)msgs, sizeof **t0s))) rc = EZ_ENOMEM;
  pthread_mutex_lock(&c->mu);
  for (uint32_t i = 0; !rc && i < c->nslot; i++)
    if (c->slots[i].live) rc = EZ_EPROTO; /* it did not wait until we held nothing */
  if (!rc) { /* subscribers join on this thread only: c->subs is the list t0s was made for */
    for (size_t i = 0; i < c->n_subs; i++) {
      free(c->subs[i]->t0);
      c->subs[i]->t0 = t0s[i];
      t0s[i] = NULL;
    }
    free(c->slots);
    c->slots = NULL;
    c->nslot = 0;
    c->ls = ls;
    c->lsn = (uint32_t)msgs;
    c->wbuf = wb;
    c->wspare = spare;
    ls = NULL;
    wb = NULL;
    spare = NULL;
    c->win_bytes = bytes;
    c->wack = c->wnext = c->wscan = start_id;
    c->tcp_ring = true;
    c->mode = "tcp";
  }
  pthread_mutex_unlock(&c->mu);
  if (!rc) { /* nobody puts yet, but joins and leaves order themselves by pull_mu */
    pthread_mutex_lock(&c->pull_mu);
    rc = ezi_lchan_attach(c, start_id);
    pthread_mutex_unlock(&c->pull_mu);
  }
  for (size_t i = 0; t0s && i < c->n_subs; i++)
    free(t0s[i]);
  free(t0s);
  free(wb);
  free(spare);
  free(ls);
  if (!rc)
    EZI_DEBUG("channel %s: up to %llu messages from publisher %s in flight from %llu on", c->id,
              (unsigned long long)msgs, c->pub_id, (unsigned long long)start_id);
  return rc;
}

/* Buffers of acknowledged messages, kept for the next ones (wspare, this thread's alone): a stack,
 * so that the buffer an ack freed last, still warm in this thread's cache, carries the next
 * message. A window's worth at most (a malloc and a free per message beyond a smaller stack made
 * glibc trim and madvise its arena hundreds of times a second), within its byte budget. */
static uint8_t *buf_get(chan *c, size_t n, size_t *cap) {
  if (c->n_wspare) {
    struct ezi_wbuf *top = &c->wspare[--c->n_wspare];
    c->wkept -= top->cap;
    if (top->cap >= n) {
      *cap = top->cap;
      return top->p;
    }
    free(top->p); /* too small for this one */
  }
  *cap = n < 256 ? 256 : n;
  return malloc(*cap);
}

static void buf_put(chan *c, uint8_t *p, size_t cap) {
  if (!p) return;
  if (c->n_wspare == c->lsn || c->wkept + cap > c->win_bytes) {
    free(p);
    return;
  }
  c->wspare[c->n_wspare++] = (struct ezi_wbuf){.p = p, .cap = cap};
  c->wkept += cap;
}

int ezi_tcpring_frame(chan *c, const ezi_tx_frame *f, uint64_t now) {
  uint64_t id = f->msg_id, size = f->size;
  if (f->cmd != EZI_TX_TCP || id != c->wnext) return EZ_EPROTO; /* not the next message */
  if (id - c->wack >= c->lsn) return EZ_EPROTO; /* its entry is not acknowledged yet */
  if (id - c->wack >= c->nbuf && c->live_bytes + size > c->win_bytes) return EZ_EPROTO;
  uint32_t idx = (uint32_t)(id % c->lsn);
  struct ezi_wbuf *b = &c->wbuf[idx];
  /* Parsed where it arrived, before the copy: loads from the buffer just written would wait for
   * its stores, which miss (the buffer was last read by a receiver, on another CPU). */
  ezi_unmarshalled um;
  if (ezi_unmarshal(f->body, (size_t)size, &um) || um.size != size || um.msg_id != id ||
      um.raw_pickle) /* an ezmsg-c publisher sends bytes */
    return EZ_EPROTO;
  if (!(b->p = buf_get(c, (size_t)size, &b->cap))) return EZ_ENOMEM;
  memcpy(b->p, f->body, (size_t)size);
  um.payload = b->p + (um.payload - f->body);
  b->bytes = size;
  c->live_bytes += size;
  uint64_t t0 = ezi_stamp_pick(&c->stamps, now); /* at high rates, only some are timed */
  /* Members join and leave on this thread: they stay the same until the read is published. */
  ezi_lchan_fill(c, id, um.payload, um.payload_len, t0, NULL); /* nobody: acked at the scan */
  c->wnext = id + 1;
  return 0;
}

/* Acknowledges, in order, the messages no member holds any more, in one RX_ACK: if there are at
 * least min_n of them, or they take at least min_bytes. Entries [wack, wscan) are known to be
 * free already (a free entry stays so until it is acknowledged and reused). */
static void scan(chan *c, uint64_t min_n, uint64_t min_bytes) {
  uint64_t end = __atomic_load_n(&c->published, __ATOMIC_RELAXED);
  while (c->wscan < end) {
    uint32_t idx = (uint32_t)(c->wscan % c->lsn);
    if (__atomic_load_n(&c->ls[idx].refs, __ATOMIC_ACQUIRE)) break; /* pairs with slot_drop */
    c->wfree_bytes += c->wbuf[idx].bytes;
    c->wscan++;
  }
  uint64_t n = c->wscan - c->wack;
  if (!n || (n < min_n && c->wfree_bytes < min_bytes)) return;
  for (uint64_t i = 0; i < n; i++) {
    struct ezi_wbuf *b = &c->wbuf[c->wack++ % c->lsn];
    buf_put(c, b->p, b->cap);
    *b = (struct ezi_wbuf){0};
  }
  c->live_bytes -= c->wfree_bytes;
  c->wfree_bytes = 0;
  uint8_t ack[9] = {EZI_RX_ACK}; /* in a window, for this message and all before it */
  ezi_put_u64le(ack + 1, c->wack - 1);
  ezi_outbox_put_now(c->ctx, &c->acks, ack, sizeof ack); /* a closed link's outbox drops it */
}

void ezi_tcpring_read_done(chan *c) {
  c->wread = true;
  if (c->wnext == __atomic_load_n(&c->published, __ATOMIC_RELAXED))
    return; /* a part of a message: nothing to tell, and nothing freed meanwhile counts yet */
  pthread_mutex_lock(&c->pull_mu);
  __atomic_store_n(&c->published, c->wnext, SEQ); /* the read's messages, at once */
  ezi_lchan_signal_all(c);
  pthread_mutex_unlock(&c->pull_mu);
  /* While the stream goes on, acks go in batches of a quarter of the window's messages, or of
   * 512 KiB (a 16th of its byte budget: large messages are acked one by one, which was faster
   * at 1 MiB than by the quarter): the publisher's window stays open, and an ack costs the
   * sending TCP stack (and the publisher's I/O thread) a system call each. The rest go when the
   * stream pauses (ezi_tcpring_idle). */
  scan(c, c->lsn / 4, c->win_bytes / 16);
}

bool ezi_tcpring_ask(chan *c, uint64_t msg_id, bool more) {
  if (more && (msg_id & 63) != 63) return false;        /* it releases again soon */
  if (__atomic_load_n(&c->ack_want, SEQ)) return false; /* asked already */
  /* An I/O thread that is awake scans before it sleeps: only a sleeping one is woken. (SEQ:
   * after the release's drop, against the loop's announcement before its idle scan.) */
  return ezi_loop_sleeping(c->ctx->loop);
}

void ezi_tcpring_released(chan *c) {
  ez_context *ctx = c->ctx;
  __atomic_store_n(&c->ack_want, 1, SEQ);
  if (!__atomic_exchange_n(&ctx->acks_posted, 1, SEQ)) ezi_loop_wake(ctx->loop);
}

void ezi_tcpring_acks(ez_context *ctx) {
  if (!__atomic_exchange_n(&ctx->acks_posted, 0, SEQ)) return;
  /* Channels are created and destroyed on this thread only: the list is stable here. */
  for (size_t i = 0; i < ctx->n_chans; i++) {
    chan *c = ctx->chans[i];
    if (c->tcp_ring && __atomic_exchange_n(&c->ack_want, 0, SEQ)) scan(c, 1, 0);
  }
}

void ezi_tcpring_idle(void *arg, bool sleep) {
  ez_context *ctx = arg;
  for (size_t i = 0; i < ctx->n_chans; i++) {
    chan *c = ctx->chans[i];
    if (!c->tcp_ring || c->state != CH_READY) continue;
    /* A round that read this channel is not a pause of its stream; a round that did not, or the
     * loop going to sleep, is. */
    bool read = c->wread;
    c->wread = false;
    if (sleep || !read) scan(c, 1, 0);
  }
}

void ezi_tcpring_free(chan *c) {
  for (uint32_t i = 0; c->wbuf && i < c->lsn; i++)
    free(c->wbuf[i].p);
  for (uint32_t i = 0; i < c->n_wspare; i++)
    free(c->wspare[i].p);
  free(c->wbuf);
  free(c->wspare);
  c->wbuf = c->wspare = NULL;
  c->n_wspare = 0;
}
