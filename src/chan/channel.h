/* A channel's private state, shared by channel.c (slots, subscribers, profile, lifetime) and
 * chanlink.c (the link to a publisher in another process: handshake and data frames). */
#ifndef EZI_CHANNEL_H
#define EZI_CHANNEL_H

#include "core/context.h"
#include "proto/shmring.h"
#include "proto/txframe.h"

/* Spare TX_TCP buffers a channel with slots keeps (chan.spare): at most this many, of at most
 * this size: at most 8 MiB per channel, and only once that much was in flight at the same time
 * (num_buffers messages). Of the bigger ones, only the last is kept (chan.big_spare). A TCP ring
 * reads into chunks instead (below). */
#define EZI_CHAN_SPARES 1024u
#define EZI_CHAN_SPARE_MAX 8192u

/* TX_TCP messages of this many bytes or more, without a window, are read straight into their own
 * buffer (chanlink.c): at 16 MiB that made 1.2x the rate with 1.3x less CPU per message; at 4 MiB
 * the same rate with 10% less CPU; at 1 MiB no difference but noise, so below 4 MiB they go
 * through the link's buffer as before. */
#define EZI_DIRECT_READ_MIN ((size_t)4 << 20)

/* A TCP ring's reads land in chunks of this many bytes (more for a larger message), and its
 * messages stay where they arrived until no member holds them (tcpring.c). A chunk's allocation
 * holds its header first: EZI_CHUNK_ALLOC bytes for one of the standard size. */
#define EZI_CHUNK_BYTES ((size_t)256 << 10)
struct ezi_chunk {
  struct ezi_chunk *next; /* the next one retired, or spare */
  size_t cap;             /* bytes after the header */
  uint64_t last;          /* retired: the id of the last message read into it */
};
#define EZI_CHUNK_ALLOC (sizeof(struct ezi_chunk) + EZI_CHUNK_BYTES)

typedef struct slot {
  uint64_t msg_id;
  bool live;
  uint32_t refs; /* subscribers still holding it */
  ezi_unmarshalled um;
  uint8_t *owned;   /* TX_TCP bytes ... */
  size_t owned_cap; /* ... in a buffer of this size (ezi_chan_buf_take) */
  ezi_seg *seg;     /* the segment the bytes live in */
  ez_iov *iov;      /* raw pickles: the buffers */
} slot;

/* An entry of a local channel's ring (localchan.c): written by the publisher before it publishes
 * the message, read by receivers after; `refs` (atomic) counts the receivers still holding it,
 * and the last one stores freed_at before it drops refs to zero. */
typedef struct lslot {
  _Alignas(64) uint64_t msg_id; /* a cache line each: neighbours are written by the other side */
  uint64_t t0, freed_at;
  const uint8_t *data;
  size_t len;
  ezi_seg *seg; /* ring channels: the segment the message lives in (a reference) */
  uint32_t refs;
} lslot;

/* A subscriber's membership of a channel. Its fields are guarded by chan->mu, except for a local
 * channel's members (local, shared-memory ring and TCP ring), whose t0, held, next, end, gone,
 * leaving, cut and proc are guarded by their subscriber's mu (their receivers never take chan->mu
 * per message). */
struct chan_sub {
  chan *ch;
  ez_sub *sub;
  uint64_t *t0; /* notify time per slot (0: not held); allocated once nbuf is known */
  uint64_t in_flight;
  bool gone;    /* left its channel; freed once nothing it held is outstanding */
  bool leaving; /* ezi_chan_leave is running: it frees the struct itself */
  bool cut;     /* local channels: its link was lost (ezi_lchan_cut); it drains, then leaves */
  /* local channels */
  uint64_t next;    /* the next message id to take */
  uint64_t seen;    /* the channel's `published` when last read: the publisher writes that line
                     * per message, so a receiver behind it reads it once per batch, not per
                     * message (localchan.c avail_end) */
  uint64_t end;     /* UINT64_MAX while a member; after leaving, the first id not counted for it */
  uint32_t held;    /* taken and not released yet */
  ezi_window *proc; /* processing times (telemetry.h; its own allocation, same guard) */
};

enum { CH_REGISTERING, CH_CONNECTING, CH_READY, CH_FAILED };

struct chan {
  ez_context *ctx;
  char id[37], pub_id[37];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int state;     /* CH_*; changes on the I/O thread only */
  uint32_t nbuf; /* known once ready */
  /* Notices of a remote publisher: `nslot` (= nbuf) slots, msg_id % nslot (c->mu). */
  slot *slots;
  uint32_t nslot;
  /* TCP window (tcpring.c): an ezmsg-c publisher sent X_WIN. The channel then works as a local
   * one (ls, lsn entries) whose publisher is its own I/O thread. I/O thread only, except tcp_ring
   * and lsn, which are set before any member can see them. */
  bool tcp_ring;
  uint64_t win_bytes;   /* the byte budget beyond nbuf messages in flight */
  uint64_t live_bytes;  /* what the unacknowledged messages [wack, published) take */
  uint64_t wack;        /* the first message not acknowledged yet */
  uint64_t wnext;       /* the next message expected (published once its read is done) */
  uint64_t wscan;       /* [wack, wscan): free, not acknowledged yet ... */
  uint64_t wfree_bytes; /* ... and their bytes */
  bool wread;           /* a read since the last idle scan (ezi_tcpring_idle) */
  uint64_t *wlen;       /* per entry: its message's frame size, until acknowledged */
  /* Reads: `pin` is the current chunk's data (cur) once the window starts; a chunk retired since
   * is reused once no member holds a message read into it. */
  struct ezi_chunk *cur;
  uint64_t cur_first;                        /* the first message read into cur */
  struct ezi_chunk *retired, **retired_tail; /* oldest first */
  struct ezi_chunk *spare_chunks;            /* for the next reads (the last freed first) */
  uint64_t spare_bytes;                      /* their sizes, in all */
  int ack_want; /* atomic: a release asks the I/O thread to acknowledge (ezi_tcpring_released) */
  chan_sub **subs;
  size_t n_subs;
  int refs; /* chan_subs alive (chan->mu) */
  const char *mode;
  /* local (localchan.c) */
  ez_pub *local_pub;
  int pub_users;
  lslot *ls;        /* the ring, one entry per slot; set before any message (local channels only) */
  uint32_t lsn;     /* its entries: nbuf, or a TCP window's size */
  chan_sub **lsubs; /* the members each new message counts (pub->mu) */
  size_t n_lsubs;   /* (pub->mu) */
  uint32_t n_leaky; /* atomic, changed with lsubs: members whose subscriber is leaky */
  ezi_seg *kept_seg;    /* a gone publisher's segments, which messages still queued live in */
  uint8_t *kept_hot[2]; /* ... and its hot buffers (pubhot.c) */
  ezi_seg_chain *kept_retired;
  /* ring mode: a remote ezmsg-c publisher's notices come through a shared ring (shmring.h), and
   * the channel works as a local one whose "publisher" is whoever pulls from the ring */
  bool ring_on;  /* set once, before any member can see it */
  bool ring_bad; /* atomic: the ring broke the rules: nothing more is pulled, the link is dropped
                  * (set by a puller under pull_mu; read by the I/O thread and pullers) */
  ezi_ring ring;
  pthread_mutex_t pull_mu; /* ring mode: members (lsubs) and pulling */
  struct {
    uint32_t gen;
    ezi_seg *seg;
  } gseg[8]; /* the publisher's segments by generation (pull_mu) */
  /* Each on a cache line of its own: the publisher writes `published` per message, receivers
   * read `pub_wants` per release. */
  char pad0_[64];
  uint64_t published; /* atomic: every id below has been put */
  char pad1_[64];
  uint32_t pub_wants; /* atomic: 0, the slot + 1 the publisher sleeps for, or EZI_LWANT_ANY */
  char pad2_[64];
  /* remote (I/O thread; `remote` is set before anyone else sees the channel) */
  bool remote;
  ezi_watch pw;
  ezi_buf pin;
  /* A large TX_TCP message (EZI_DIRECT_READ_MIN bytes or more, no window) read straight into the
   * buffer the subscribers will get (chanlink.c), instead of into `pin` and copied from there. */
  struct {
    uint8_t *buf; /* NULL: none under way */
    size_t cap, have, size;
    uint64_t msg_id;
  } big;
  ezi_outbox acks;
  /* Memory held for this link's TCP bytes (rxbudget.h; atomic: releases give back on the
   * receivers' threads), of which `pin_acct` is the capacity of `pin` when it is not a chunk. */
  uint64_t rx_bytes;
  size_t pin_acct;
  bool rx_refused; /* a chunk was refused for the budget (tcpring.c: EZ_EMSGSIZE, not ENOMEM) */
  /* A frame that stays incomplete too long drops the link (EZMSG_FRAME_TIMEOUT_MS): when the
   * current incomplete one was first seen (0: none), frames read so far, and the check's timer.
   * I/O thread. */
  uint64_t frame_since, frames, frame_timer;
  ezi_stamper stamps; /* which deliveries are timed (telclock.h) */
  /* TX_TCP buffers the releases freed, handed back to the I/O thread for the next frames, so
   * that a message costs no malloc and no free across threads: a ring filled under c->mu
   * (slot_clear) and emptied by the I/O thread alone (ezi_chan_buf_take). */
  struct {
    uint8_t *p;
    size_t cap;
  } spare[EZI_CHAN_SPARES];
  uint32_t spare_head, spare_tail; /* atomic: the I/O thread moves head, the filler tail */
  /* The last buffer larger than EZI_CHAN_SPARE_MAX a release freed (c->mu): one at most, so that
   * a stream of large messages (from a Python publisher, say) does not allocate, fault in and
   * free a buffer per message. */
  uint8_t *big_spare;
  size_t big_spare_cap;
  ezi_seg *seg;
  uint64_t hs_timer; /* the registration's, then the handshake's deadline */
  bool reg_sent;     /* the CHANNEL request went out (registration) */
  bool hs_named;     /* the shm name arrived (and was answered, unless attaching) */
  int pub_dialect;   /* the publisher's, from the handshake's shape (EZ_DIALECT_*) */
  /* A segment being attached (segattach.c): reading from the publisher pauses meanwhile. */
  ezi_attach *attaching;
  char attach_name[EZI_SHM_NAME_MAX + 1];
  /* notices leaky subscribers dropped, to release after the delivery (I/O thread) */
  note *drops;
  size_t n_drops, cap_drops;
  /* graph link (I/O thread) */
  ezi_watch gw;
  ezi_buf gin;
  ezi_outbox gout;
};

/* chanreg.c: starts registering the channel at the graph server (non-blocking connect, CHANNEL
 * request, answer read as it comes); then ezi_chan_link_done, or the handshake with a remote
 * publisher, follows. EZ_ENOSERVER etc. if the server cannot be reached at once. I/O thread. */
int ezi_chan_reg_start(chan *c);
/* Closes the channel's graph-server link. I/O thread. */
void ezi_chan_graph_close(chan *c);

/* chanlink.c: connects to the publisher at addr and starts the handshake (I/O thread). The
 * channel becomes ready (or failed) later, through ezi_chan_link_done. */
int ezi_chan_link_start(chan *c, const char *addr);
void ezi_chan_link_close(chan *c);

/* channel.c: the registration or handshake finished (rc 0, c->nbuf set) or failed. Tells the
 * waiting subscribers. Returns 0 if the channel is ready and still there; otherwise (failed, or
 * every subscriber left meanwhile) it may be gone: touch nothing. I/O thread. */
int ezi_chan_link_done(chan *c, int rc);
/* A buffer of at least n bytes for a TX_TCP frame's bytes: a spare one a release gave back, or a
 * new one (at least 256 bytes, so that small sizes share them); *cap gets its size, counted in
 * the link's memory (rxbudget.h) until it is freed. NULL when out of memory (*err EZ_ENOMEM) or
 * beyond the link's or the process's limit (*err EZ_EMSGSIZE). I/O thread only, c->mu not held
 * (it takes it for a large buffer). */
uint8_t *ezi_chan_buf_take(chan *c, size_t n, size_t *cap, int *err);
/* Frees a buffer from ezi_chan_buf_take that was not delivered (no lock needed). */
void ezi_chan_buf_free(chan *c, uint8_t *p, size_t cap);
/* Stores a validated message (taking `owned`, a buffer of owned_cap bytes from
 * ezi_chan_buf_take, or NULL) and notifies the subscribers (c->mu held). Returns 1 if someone
 * took it, 0 if nobody listens (the caller acks it), -1 if its slot is still held (the publisher
 * broke backpressure: a protocol error). */
int ezi_chan_deliver(chan *c, uint64_t msg_id, const ezi_unmarshalled *um, uint8_t *owned,
                     size_t owned_cap, ezi_seg *seg, uint64_t now);
/* Releases the notices leaky subscribers dropped during ezi_chan_deliver (I/O thread, c->mu not
 * held: call it after unlocking). */
void ezi_chan_release_drops(chan *c);
/* tcpring.c: an ezmsg-c publisher's X_WIN: from message start_id on, up to msgs TX_TCP messages
 * may be unacknowledged, holding at most bytes beyond the first nbuf. The channel holds nothing
 * at this point (the publisher waited) and becomes a TCP ring. EZ_EPROTO if the window breaks the
 * limits or something is held, EZ_ENOMEM. I/O thread. */
int ezi_chan_win_start(chan *c, uint64_t start_id, uint64_t msgs, uint64_t bytes);
/* tcpring.c: a TX_TCP frame (f, whole, in the current chunk, where it stays) on a TCP ring:
 * checked against the window and put for the members. 0, or EZ_EPROTO (the publisher broke the
 * window). I/O thread. */
int ezi_tcpring_frame(chan *c, const ezi_tx_frame *f, uint64_t now);
/* tcpring.c: after a read's frames: publishes the messages they completed, wakes the members
 * that sleep (once for all of them), and acknowledges what was released if that is a quarter of
 * the window (or 512 KiB). I/O thread. */
void ezi_tcpring_read_done(chan *c);
/* tcpring.c: the release of message msg_id of TCP ring c was its last (its entry is free);
 * `more`: its receiver has more to take at once. ezi_tcpring_ask tells whether to ask the I/O
 * thread to acknowledge: only if it sleeps (an awake one acknowledges in its idle hook), when the
 * receiver caught up or every 64 messages (a receiver that keeps taking releases again soon),
 * unless asked already. ezi_tcpring_released asks (it may write to the wake-up eventfd: call it
 * with no lock held, and c alive). Any thread. */
bool ezi_tcpring_ask(chan *c, uint64_t msg_id, bool more);
void ezi_tcpring_released(chan *c);
/* tcpring.c: the acknowledgements releases asked for (the context's wake hook). I/O thread. */
void ezi_tcpring_acks(ez_context *ctx);
/* tcpring.c: the loop's idle hook (loop.h): acknowledges what was released on the TCP rings whose
 * stream paused (not read in this round of events), or on all of them before the loop sleeps. */
void ezi_tcpring_idle(void *arg, bool sleep);
/* tcpring.c: after the frame X_WIN was consumed: the bytes already read after it move to the
 * first chunk, and reads go to chunks from now on (ezi_tcpring_fill; a frame used is then
 * consumed by advancing c->pin.off alone). EZ_ENOMEM if it cannot be allocated. */
int ezi_tcpring_chunk_start(chan *c);
/* tcpring.c: reads from fd into the current chunk, moving to a new one when the frame being read
 * does not fit in it. As ezi_buf_fill: bytes read, 0 if none now, < 0 on error or EOF. */
long ezi_tcpring_fill(chan *c, int fd);
/* tcpring.c: the link closes: the current chunk is retired with the rest (its messages may still
 * be held), and c->pin is left empty. */
void ezi_tcpring_link_closed(chan *c);
/* tcpring.c: frees the chunks (chan_destroy). */
void ezi_tcpring_free(chan *c);
/* The link of a ready channel failed (it is closed already): the channel is marked failed and
 * its subscribers leave it to join again; it may be gone when this returns. I/O thread. */
void ezi_chan_link_lost(chan *c);
/* Wakes the subscribers a batch of deferred deliveries left asleep (chanlink.c, after a read). */
void ezi_chan_wake_subs(chan *c);
/* Drops a reference held by a chan_sub; the last one destroys the channel on the I/O thread. */
void ezi_chan_unref(chan *c);
/* Frees a chan_sub and what it owns (its t0 array and window), not its channel reference. NULL
 * is a no-op. */
void ezi_chan_sub_free(chan_sub *cs);

/* localchan.c, receiver side. ezi_lchan_add: makes cs a member of local channel c from the next
 * message on (pub->mu held, or the publisher gone; I/O thread). ezi_lchan_attach: the same for
 * every subscriber of c, which starts with message next_id (pub->mu held). EZ_ENOMEM. */
int ezi_lchan_add(chan *c, chan_sub *cs);
/* Leaky members (ez_sub_opts.leaky): ezi_lchan_trim drops what cs has waiting beyond its
 * subscriber's max_queue, oldest first, at most EZI_LDROPS_MAX (cs's subscriber's lock held;
 * `publisher`: by the local publisher, holding its own lock, which needs no wake-up); the drops'
 * segment references and wake-ups wait in *d for ezi_lchan_trim_done, called with no lock held.
 * ezi_lchan_trim_members trims every leaky member of c (the I/O thread, after it published for
 * them; no lock held). */
void ezi_lchan_trim(chan_sub *cs, bool publisher, ezi_ldrops *d);
void ezi_lchan_trim_done(ezi_ldrops *d);
void ezi_lchan_trim_members(chan *c);
/* ezi_lchan_add for a channel already attached (takes pub->mu). I/O thread. */
int ezi_lchan_join(chan *c, chan_sub *cs);
int ezi_lchan_attach(chan *c, uint64_t next_id);
/* cs leaves its local channel: what it had not taken is released, and with release_viewed what
 * it views too. Frees cs when nothing is left. I/O thread. */
void ezi_lchan_leave(chan_sub *cs, bool release_viewed);
/* localchan.c: a zeroed ring of nbuf entries, each on a cache line of its own (NULL: no memory).
 * Freed with free(). */
lslot *ezi_lchan_ring_new(uint32_t nbuf);
/* localchan.c: signals a receiver that asked for it (want_signal; takes its lock). */
void ezi_lchan_signal(ez_sub *s);
/* localchan.c: signals every member that asked for it. A TCP ring's puts signal nobody: its I/O
 * thread calls this after each read, with the membership lock held. */
void ezi_lchan_signal_all(chan *c);

/* ringchan.c. ezi_ring_chan_drop: gives ring entry idx back to the remote publisher; true if the
 * publisher sleeps for it and must get ezi_ring_chan_ack (which may write to the socket: call it
 * with no subscriber lock held). ezi_ring_chan_free: both. ezi_lchan_resignal: asks the I/O thread
 * to signal the waiting members of every ring channel (a receiver that pulled must not take another
 * subscriber's lock). Any thread. */
bool ezi_ring_chan_drop(chan *c, uint32_t idx, uint64_t now);
void ezi_ring_chan_ack(chan *c, uint64_t msg_id);
void ezi_ring_chan_free(chan *c, uint32_t idx, uint64_t msg_id, uint64_t now);
void ezi_lchan_resignal(ez_context *ctx);
/* Whether ring channel c broke the rules (its link is to be dropped). Any thread. */
static inline bool ezi_ring_chan_bad(const chan *c) {
  return __atomic_load_n(&c->ring_bad, __ATOMIC_RELAXED);
}
/* Ring mode (I/O thread): ezi_lchan_ring_start maps the ring `name` announced by X_RING, from
 * message start_id on, and makes every subscriber a member (EZ_EPROTO, EZ_ENOMEM...).
 * ezi_lchan_ring_seg: the publisher's segment for message msg_id is now c->seg. ezi_lchan_pull:
 * takes what the publisher put since the last pull into the channel's own ring (self: the
 * subscriber whose receiver pulls, not signalled; block: wait for another puller). True if it
 * brought anything. */
int ezi_lchan_ring_start(chan *c, const char *name, size_t n, uint64_t start_id);
void ezi_lchan_ring_seg(chan *c, uint64_t msg_id);
bool ezi_lchan_pull(chan *c, ez_sub *self, bool block);
/* Frees what ring mode holds (chan_destroy). */
void ezi_lchan_ring_free(chan *c);
/* Releases a message taken by ezi_lchan_take. Any thread. */
void ezi_lchan_release(chan_sub *cs, uint64_t msg_id);
/* A local member's link was lost (I/O thread): what it has queued is taken before anything else
 * of its subscriber's (a later channel to the same publisher brings later messages). */
void ezi_lchan_cut(chan_sub *cs);
/* True if a local member holds nothing (none queued, none viewed). */
bool ezi_lchan_idle(chan_sub *cs);
/* Profile of a local member (sets *in_flight). */
json_t *ezi_lchan_sub_json(chan_sub *cs, uint64_t now, double window_s, uint64_t *in_flight);

/* Acks msg_id to the publisher. Never called with c->mu held. */
void ezi_chan_ack(chan *c, uint64_t msg_id);

#endif
