/* A TCP ring: the channel of a remote ezmsg-c publisher that granted a TCP window (X_WIN, see
 * pubwin.c) works as an in-process channel (localchan.c) whose publisher is its own I/O thread.
 *
 * The I/O thread reads the socket into chunks of its own and leaves each TX_TCP message where it
 * arrived: it fills the entry msg_id % lsn of the channel's ring with a view into the chunk, and
 * publishes a read's messages at once: receivers take and release them without a lock of the
 * channel's, as from a local publisher. A chunk is reused (or freed) once every message read into
 * it is acknowledged; when the frame being read does not fit in the rest of a chunk, its bytes so
 * far move to the next one. So a message costs no copy and no allocation of its own.
 *
 * Acknowledgements go the other way in order: the I/O thread acknowledges the messages from the
 * first unacknowledged one (wack), whose entry no member holds any more, up to the first still
 * held, with one RX_ACK for the last of them (in a window, an ack is for every message up to it).
 * While the stream goes on it does so in batches (tcpring_read_done); when it pauses, from the
 * loop's idle hook (tcpring_idle); and a release wakes the I/O thread for it only if that sleeps
 * (tcpring_freed). No lock is shared with the receivers per message.
 *
 * The window's rules are checked here as the publisher keeps them (pubwin.c): messages come in
 * order, each to an entry acknowledged already, and beyond nbuf in flight they take at most
 * win_bytes. A publisher that breaks them loses the link. A message stays valid until it is
 * acknowledged, or until the channel goes (a message still held or queued after the link is lost
 * stays valid), so chunks hold at most the unacknowledged messages' bytes, their frame headers
 * and the unused ends of two chunks; a chunk is reused once no member holds a message in it. */
#include "rx/tcpring.h"
#include "base/rxbudget.h"
#include "proto/txframe.h"

#include <stdlib.h>
#include <string.h>

#define SEQ __ATOMIC_SEQ_CST

static void tcpring_acks(ez_context *ctx);
static void tcpring_idle(void *arg, bool sleep);
static const ezi_lring_ops tcp_producer;

int ezi_tcpring_start(chan *c, uint64_t start_id, uint64_t msgs, uint64_t bytes) {
  if (c->rx->ring || msgs < c->nbuf || msgs > EZI_WIN_MAX_MSGS || bytes > EZI_WIN_MAX_BYTES)
    return EZ_EPROTO;
  /* (the channel's ring is unused in notices mode: nobody looks at it before the mode changes) */
  int rc = ezi_lchan_ring_init(&c->lr, (uint32_t)msgs, &tcp_producer, c, c->pub_id);
  uint64_t *wlen = calloc((size_t)msgs, sizeof *wlen);
  uint64_t **t0s = calloc(c->n_subs + 1, sizeof *t0s);
  if (!rc && !(wlen && t0s)) rc = EZ_ENOMEM;
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
    c->wlen = wlen;
    wlen = NULL;
    c->win_bytes = bytes;
    c->wack = c->wnext = c->wscan = start_id;
    c->mode = "tcp";
    c->rx = &ezi_rx_tcp_window;
  }
  pthread_mutex_unlock(&c->mu);
  if (!rc) { /* the I/O thread's hooks: acknowledgements, asked for and when the stream pauses */
    c->ctx->rx_acks = tcpring_acks;
    ezi_loop_set_idle_hook(c->ctx->loop, tcpring_idle, c->ctx);
  }
  if (!rc) { /* nobody puts yet, but joins and leaves order themselves by pull_mu */
    pthread_mutex_lock(&c->pull_mu);
    rc = ezi_chan_ring_attach(c, start_id);
    pthread_mutex_unlock(&c->pull_mu);
  }
  for (size_t i = 0; t0s && i < c->n_subs; i++)
    free(t0s[i]);
  free(t0s);
  free(wlen);
  if (c->rx != &ezi_rx_tcp_window) ezi_lchan_ring_free(&c->lr); /* it did not start */
  if (!rc)
    EZI_DEBUG("channel %s: up to %llu messages from publisher %s in flight from %llu on", c->id,
              (unsigned long long)msgs, c->pub_id, (unsigned long long)start_id);
  return rc;
}

/* ---- chunks ------------------------------------------------------------------------------ */

/* A read is worth a system call with at least this much room left in the chunk. */
#define MIN_READ ((size_t)16 << 10)
/* A frame larger than BIG_FRAME is read BIG_READ bytes at a time; other reads take what the
 * socket has, up to the chunk's end. Measured in pinned pairs against the copy out of a 64 KiB
 * read buffer that chunks replaced: 1 MiB messages 0.73x with reads up to the chunk's end, 0.82x
 * with 64 KiB reads, 0.88-0.96x with 16 KiB reads (reads straight into a chunk that left this
 * CPU's caches cost more than into a small buffer that stayed in them); 4 KiB messages 1.18x with
 * reads up to the chunk's end, 1.03x with 64 KiB ones. */
#define BIG_FRAME ((size_t)64 << 10)
#define BIG_READ ((size_t)16 << 10)

static uint8_t *chunk_data(struct ezi_chunk *k) { return (uint8_t *)(k + 1); }

/* Frees a chunk and uncounts it (rxbudget.h). */
static void chunk_free(chan *c, struct ezi_chunk *k) {
  ezi_rx_give(&c->rx_bytes, sizeof *k + k->cap);
  free(k);
}

/* A chunk for `need` bytes and a read after them, `have` of which arrived already: the spare one
 * freed last that is large enough (warm in this thread's cache), or a new one. A new one for a
 * frame larger than a chunk grows with what arrived (twice that, plus a chunk), so that a header
 * alone does not allocate the size it claims; the frame moves on as it grows. */
static struct ezi_chunk *chunk_new(chan *c, size_t need, size_t have) {
  size_t want = need + MIN_READ;
  for (struct ezi_chunk **p = &c->spare_chunks; *p; p = &(*p)->next) {
    struct ezi_chunk *k = *p;
    if (k->cap < want) continue;
    *p = k->next;
    c->spare_bytes -= k->cap;
    return k;
  }
  size_t cap = want <= EZI_CHUNK_BYTES ? EZI_CHUNK_BYTES : want;
  if (cap > 2 * have + EZI_CHUNK_BYTES) cap = 2 * have + EZI_CHUNK_BYTES;
  /* A step that would hold the whole frame gets the read's room after it as well: the next
   * frame of that size then reuses the chunk (chunk_next), where a chunk a few KiB short of that
   * made it grow a new one from scratch (test_channel_large_reuse saw 4 allocations where 3 are
   * the most, in 1 run of ~30, depending on how much each read had brought). */
  if (cap < want && cap >= need) cap = want;
  if (ezi_rx_take(&c->rx_bytes, sizeof(struct ezi_chunk) + cap)) {
    c->rx_refused = true; /* the caller's EZ_EMSGSIZE */
    return NULL;
  }
  struct ezi_chunk *k = malloc(sizeof *k + cap);
  if (k)
    k->cap = cap;
  else
    ezi_rx_give(&c->rx_bytes, sizeof *k + cap);
  return k;
}

/* Keeps chunk k for the next reads, up to the window's byte budget in all, or k alone if it is
 * larger than that (a malloc, page faults and a free per message made 1 MiB messages 0.78x
 * slower, and 8 MiB ones, larger than the budget, 7x slower than 4 MiB ones), else frees it.
 * Smaller spares make room for it first: kept standard chunks must not crowd out the large ones a
 * stream of large messages needs (they did, and every 1 MiB message allocated its chunk again).
 * So the spares hold at most the budget or the largest chunk recycled, whichever is larger. */
static void chunk_recycle(chan *c, struct ezi_chunk *k) {
  uint64_t limit = c->win_bytes > k->cap ? c->win_bytes : k->cap;
  for (struct ezi_chunk **p = &c->spare_chunks; *p && c->spare_bytes + k->cap > limit;) {
    struct ezi_chunk *s = *p;
    if (s->cap >= k->cap) {
      p = &s->next;
      continue;
    }
    *p = s->next;
    c->spare_bytes -= s->cap;
    chunk_free(c, s);
  }
  if (c->spare_bytes + k->cap > limit) {
    chunk_free(c, k);
    return;
  }
  k->next = c->spare_chunks;
  c->spare_chunks = k;
  c->spare_bytes += k->cap;
}

/* Retires the current chunk: it is reused once no member holds a message read into it (at once
 * if there is none and it has the standard size). */
static void chunk_retire(chan *c) {
  struct ezi_chunk *k = c->cur;
  c->cur = NULL;
  if (!k) return;
  if (c->wnext == c->cur_first) { /* none: a standard one is kept, a step of a growing frame not */
    if (k->cap == EZI_CHUNK_BYTES)
      chunk_recycle(c, k);
    else
      chunk_free(c, k);
    return;
  }
  k->last = c->wnext - 1;
  k->next = NULL;
  *c->retired_tail = k;
  c->retired_tail = &k->next;
}

/* Moves wscan past the messages no member holds any more (entries [wack, wscan) are known to be
 * free already: a free entry stays so until it is acknowledged and reused), and recycles the
 * retired chunks whose messages are all among them: a chunk is reused once nobody reads it, not
 * once its messages are acknowledged (with 1 MiB messages, waiting for the acks made 6% of the
 * reads allocate a new chunk). */
static void collect(chan *c) {
  uint64_t end = ezi_lchan_published(&c->lr), freed_at;
  while (c->wscan < end) {
    uint32_t idx = (uint32_t)(c->wscan % c->lr.lsn);
    if (!ezi_lchan_slot_free(&c->lr, idx, &freed_at)) break; /* pairs with slot_drop */
    c->wfree_bytes += c->wlen[idx];
    c->wscan++;
  }
  while (c->retired && c->retired->last < c->wscan) {
    struct ezi_chunk *k = c->retired;
    c->retired = k->next;
    if (!c->retired) c->retired_tail = &c->retired;
    chunk_recycle(c, k);
  }
}

/* Makes a chunk with room for `need` bytes from its start the current one, the pending bytes
 * (a frame read in part) moved to its start. For a frame larger than a standard chunk that is the
 * current chunk itself when no member holds a message in it any more and it is large enough: a
 * subscriber that keeps up hands each large message's chunk to the next (otherwise the chunk,
 * recycled only after this call, was missed: one allocation and a copy of up to 256 KiB more per
 * message, though 1 MiB throughput measured the same). For smaller frames another chunk measured
 * faster than reusing the current one (4 KiB: 0.88x). */
static int chunk_next(chan *c, size_t need) {
  ezi_buf *b = &c->pin;
  size_t pend = b->len - b->off;
  collect(c);
  struct ezi_chunk *cur = c->cur;
  if (cur && need > EZI_CHUNK_BYTES && c->wscan >= c->wnext && cur->cap >= need + MIN_READ) {
    memmove(chunk_data(cur), b->data + b->off, pend);
    c->cur_first = c->wnext;
    *b = (ezi_buf){.data = chunk_data(cur), .off = 0, .len = pend, .cap = cur->cap};
    return 0;
  }
  struct ezi_chunk *k = chunk_new(c, need, pend);
  if (!k) return c->rx_refused ? EZ_EMSGSIZE : EZ_ENOMEM;
  if (pend) memcpy(chunk_data(k), b->data + b->off, pend);
  chunk_retire(c);
  c->cur = k;
  c->cur_first = c->wnext;
  *b = (ezi_buf){.data = chunk_data(k), .off = 0, .len = pend, .cap = k->cap};
  return 0;
}

/* After the frame X_WIN was consumed: the bytes already read after it move to the first chunk,
 * and reads go to chunks from now on (tcpring_fill; a frame used is then consumed by advancing
 * c->pin.off alone). EZ_ENOMEM if it cannot be allocated. */
static int tcpring_begin_reads(chan *c) {
  size_t pend = ezi_buf_pending(&c->pin);
  struct ezi_chunk *k = chunk_new(c, pend, pend);
  if (!k) return c->rx_refused ? EZ_EMSGSIZE : EZ_ENOMEM;
  if (pend) memcpy(chunk_data(k), ezi_buf_head(&c->pin), pend);
  ezi_buf_free(&c->pin);
  ezi_rx_give(&c->rx_bytes, c->pin_acct); /* from now on the chunks are counted instead */
  c->pin_acct = 0;
  c->retired_tail = &c->retired;
  c->cur = k;
  c->cur_first = c->wnext;
  c->pin = (ezi_buf){.data = chunk_data(k), .len = pend, .cap = k->cap};
  return 0;
}

/* Reads from fd into the current chunk, moving to a new one when the frame being read does not
 * fit in it. As ezi_buf_fill: bytes read, 0 if none now, < 0 on error or EOF. */
static long tcpring_fill(chan *c, int fd) {
  ezi_buf *b = &c->pin;
  const uint8_t *h = b->data + b->off;
  size_t pend = b->len - b->off, need = EZI_TX_HDR_ROOM;
  size_t whole = ezi_tx_frame_len(h, pend); /* the frame read in part: its size (checked) */
  if (whole) need = whole;
  /* A frame that does not fit moves to a chunk of its own while it is small (off > 0: messages
   * before it in this chunk); alone in its chunk, it moves to a larger one only once that is
   * full, so that a large frame is copied a few times as it grows (chunk_new), not at every
   * read. */
  bool fits = need <= b->cap - b->off, full = b->cap - b->len < MIN_READ;
  if (full || (!fits && b->off > 0)) {
    int rc = chunk_next(c, need > pend ? need : pend);
    if (rc) return rc;
  }
  size_t room = b->cap - b->len;
  if (need > BIG_FRAME && room > BIG_READ) room = BIG_READ;
  long n = ezi_recv_some(fd, b->data + b->len, room);
  if (n > 0) b->len += (size_t)n;
  return n;
}

/* The link closes: the current chunk is retired with the rest (its messages may still be held),
 * and c->pin is left empty. */
static void tcpring_link_closed(chan *c) {
  chunk_retire(c);
  c->pin = (ezi_buf){0};
}

/* A TX_TCP frame (f, whole, in the current chunk, where it stays): checked against the window and
 * put for the members. Bytes used, or EZ_EPROTO (the publisher broke the window). */
static long tcpring_frame(chan *c, const ezi_tx_frame *f, uint64_t now) {
  /* An X_TCP frame is the next message, its payload alone: it counts as the TX_TCP frame it
   * stands for (the marshalled size), as the publisher's window counts it. */
  bool x = f->cmd == EZI_X_TCP;
  uint64_t id = x ? c->wnext : f->msg_id, size = x ? f->size + EZI_MARSHAL_BYTES_HDR : f->size;
  if ((!x && f->cmd != EZI_TX_TCP) || id != c->wnext) return EZ_EPROTO; /* not the next message */
  if (id - c->wack >= c->lr.lsn) return EZ_EPROTO; /* its entry is not acknowledged yet */
  if (id - c->wack >= c->nbuf && c->live_bytes + size > c->win_bytes) return EZ_EPROTO;
  ezi_unmarshalled um; /* in the chunk, where it stays */
  if (x) {
    um.payload = f->body;
    um.payload_len = (size_t)f->size;
  } else if (ezi_unmarshal(f->body, (size_t)size, &um) || um.size != size || um.msg_id != id ||
             um.raw_pickle) { /* an ezmsg-c publisher sends bytes */
    return EZ_EPROTO;
  }
  c->wlen[id % c->lr.lsn] = size;
  c->live_bytes += size;
  uint64_t t0 = ezi_stamp_pick(&c->stamps, now); /* at high rates, only some are timed */
  /* Members join and leave on this thread: they stay the same until the read is published. */
  ezi_lchan_fill(&c->lr, id, um.payload, um.payload_len, t0, NULL); /* nobody: acked at the scan */
  c->wnext = id + 1;
  return (long)f->used;
}

/* Acknowledges, in order, the messages no member holds any more, in one RX_ACK: if there are at
 * least min_n of them, or they take at least min_bytes. */
static void scan(chan *c, uint64_t min_n, uint64_t min_bytes) {
  collect(c);
  uint64_t n = c->wscan - c->wack;
  if (!n || (n < min_n && c->wfree_bytes < min_bytes)) return;
  c->wack = c->wscan;
  c->live_bytes -= c->wfree_bytes;
  c->wfree_bytes = 0;
  uint8_t ack[9] = {EZI_RX_ACK}; /* in a window, for this message and all before it */
  ezi_put_u64le(ack + 1, c->wack - 1);
  ezi_outbox_put_now(c->ctx, &c->acks, ack, sizeof ack); /* a closed link's outbox drops it */
}

/* After a read's frames: publishes the messages they completed, wakes the members that sleep (once
 * for all of them), and acknowledges what was released if that is a quarter of the window (or
 * 512 KiB). */
static void tcpring_read_done(chan *c) {
  c->wread = true;
  if (c->wnext == ezi_lchan_published(&c->lr))
    return; /* a part of a message: nothing to tell, and nothing freed meanwhile counts yet */
  pthread_mutex_lock(&c->pull_mu);
  ezi_lchan_publish(&c->lr, c->wnext); /* the read's messages, at once */
  ezi_lchan_signal_all(&c->lr);
  pthread_mutex_unlock(&c->pull_mu);
  ezi_lchan_trim_members(&c->lr); /* leaky subscribers' oldest go at once */
  /* While the stream goes on, acks go in batches of a quarter of the window's messages, or of
   * 512 KiB (a 16th of its byte budget: large messages are acked one by one, which was faster
   * at 1 MiB than by the quarter): the publisher's window stays open, and an ack costs the
   * sending TCP stack (and the publisher's I/O thread) a system call each. The rest go when the
   * stream pauses (tcpring_idle). */
  scan(c, c->lr.lsn / 4, c->win_bytes / 16);
}

/* The producer's freed (ezi_lring_ops): the release of message msg_id was its last (its entry is
 * free). Whether to ask the I/O thread to acknowledge: only if it sleeps (an awake one acknowledges
 * in its idle hook), when the receiver caught up or every 64 messages (a receiver that keeps taking
 * releases again soon), unless asked already. */
static bool tcpring_freed(ezi_lring *r, uint32_t idx, uint64_t msg_id, uint64_t now, bool more) {
  (void)idx;
  (void)now;
  chan *c = r->owner;
  if (more && (msg_id & 63) != 63) return false;        /* it releases again soon */
  if (__atomic_load_n(&c->ack_want, SEQ)) return false; /* asked already */
  /* An I/O thread that is awake scans before it sleeps: only a sleeping one is woken. (SEQ:
   * after the release's drop, against the loop's announcement before its idle scan.) */
  return ezi_loop_sleeping(c->ctx->loop);
}

/* The producer's wake (ezi_lring_ops): asks the I/O thread to acknowledge (it may write to the
 * wake-up eventfd: no lock held, and c alive). */
static void tcpring_wake(ezi_lring *r, uint64_t msg_id) {
  (void)msg_id;
  chan *c = r->owner;
  ez_context *ctx = c->ctx;
  __atomic_store_n(&c->ack_want, 1, SEQ);
  if (!__atomic_exchange_n(&ctx->acks_posted, 1, SEQ)) ezi_loop_wake(ctx->loop);
}

/* The acknowledgements releases asked for (the context's wake hook, ctx->rx_acks). */
static void tcpring_acks(ez_context *ctx) {
  if (!__atomic_exchange_n(&ctx->acks_posted, 0, SEQ)) return;
  /* Channels are created and destroyed on this thread only: the list is stable here. */
  for (size_t i = 0; i < ctx->n_chans; i++) {
    chan *c = ctx->chans[i];
    if (c->rx == &ezi_rx_tcp_window && __atomic_exchange_n(&c->ack_want, 0, SEQ)) scan(c, 1, 0);
  }
}

/* The loop's idle hook (loop.h): acknowledges what was released on the TCP rings whose stream
 * paused (not read in this round of events), or on all of them before the loop sleeps. */
static void tcpring_idle(void *arg, bool sleep) {
  ez_context *ctx = arg;
  for (size_t i = 0; i < ctx->n_chans; i++) {
    chan *c = ctx->chans[i];
    if (c->rx != &ezi_rx_tcp_window || c->state != CH_READY) continue;
    /* A round that read this channel is not a pause of its stream; a round that did not, or the
     * loop going to sleep, is. */
    bool read = c->wread;
    c->wread = false;
    if (sleep || !read) scan(c, 1, 0);
  }
}

static void tcpring_free(chan *c) {
  chunk_retire(c);
  c->pin = (ezi_buf){0};
  for (struct ezi_chunk *k = c->retired, *n; k; k = n) {
    n = k->next;
    chunk_free(c, k);
  }
  for (struct ezi_chunk *k = c->spare_chunks, *n; k; k = n) {
    n = k->next;
    chunk_free(c, k);
  }
  c->retired = c->spare_chunks = NULL;
  c->retired_tail = &c->retired;
  c->spare_bytes = 0;
  free(c->wlen);
  c->wlen = NULL;
}

static pthread_mutex_t *tcpring_memb_mu(ezi_lring *r) { return &((chan *)r->owner)->pull_mu; }

static const ezi_lring_ops tcp_producer = {
    .freed = tcpring_freed,
    .wake = tcpring_wake,
    .memb_mu = tcpring_memb_mu,
    .drains = true,
};

const ezi_rx_mode ezi_rx_tcp_window = {
    .ring = true,
    .window = true,
    .frame = tcpring_frame,
    .read_done = tcpring_read_done,
    .fill = tcpring_fill,
    .begin_reads = tcpring_begin_reads,
    .link_closed = tcpring_link_closed,
    .free = tcpring_free,
    EZI_RING_MEMBER_OPS,
    .producer = &tcp_producer,
};
