/* A channel's state, shared by the files of its life (channel.c, chanreg.c), its link to a
 * remote publisher (chanlink.c) and its receive modes (rxmode.h: notices.c, rx/ringchan.c,
 * rx/tcpring.c, pub/publocal.c, and the in-process ring they fill, ring/localchan.c); and the
 * functions of channel.c. */
#ifndef EZI_CHANNEL_H
#define EZI_CHANNEL_H

#include "core/context.h"
#include "ring/localchan.h"
#include "ring/rxmode.h"
#include "core/segattach.h"
#include "base/trace.h"
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

typedef struct chan_slot {
  uint64_t msg_id;
  bool live;
  uint32_t refs; /* subscribers still holding it */
  ezi_unmarshalled um;
  uint8_t *owned;   /* TX_TCP bytes ... */
  size_t owned_cap; /* ... in a buffer of this size (ezi_chan_buf_take) */
  ezi_seg *seg;     /* the segment the bytes live in */
  ez_iov *iov;      /* raw pickles: the buffers */
} chan_slot;

/* What a channel calls in the subscriber of a membership: the callbacks the subscriber registered
 * when it joined (ezi_chan_join), so that the channel names none of its functions. */
typedef struct ezi_member_ops {
  /* A pending join finished (rc 0) or failed (then sub leaves cs). I/O thread. */
  void (*joined)(ez_sub *sub, chan_sub *cs, int rc);
  /* The link of cs's channel to its publisher was cut after the handshake: sub leaves cs and
   * joins the publisher again later. I/O thread. */
  void (*lost)(ez_sub *sub, chan_sub *cs);
  /* Queues a notice of message msg_id (chan->mu held). With defer_wake, a sleeping receiver is
   * signalled only by the next `wake` (the I/O thread queues a whole read's batch first). False if
   * it could not be queued (out of memory). A leaky subscriber whose queue is full drops its
   * oldest notice to make room: it goes to *dropped (its cs NULL if none), for the caller to
   * release once it holds no channel lock. */
  bool (*push)(ez_sub *sub, chan_sub *cs, uint64_t msg_id, bool defer_wake, note *dropped);
  /* Signals the receiver if a deferred push left it asleep. Any thread. */
  void (*wake)(ez_sub *sub);
  /* Drops every queued notice of cs, then (unlocked) passes their msg ids to fn, in order. */
  void (*purge)(ez_sub *sub, chan_sub *cs, void (*fn)(chan_sub *, uint64_t));
  /* Removes up to cap queued notices of cs for which drop(cs, msg_id, arg) says so (called under
   * the subscriber's lock: it may not take a lock that comes after it), into ids; the others stay
   * where they are, in order. Returns how many were removed. */
  size_t (*take_if)(ez_sub *sub, chan_sub *cs, bool (*drop)(chan_sub *, uint64_t, void *),
                    void *arg, uint64_t *ids, size_t cap);
  /* The subscriber's part of a member's profile: its id and handle, and a leaky one's bound and
   * what it dropped (a new reference, from the member's processing times). Any thread. */
  json_t *(*profile)(const ez_sub *sub, const ezi_window *proc, uint64_t in_flight, uint64_t now,
                     double window_s);
  /* Where the subscriber keeps its trace (base/trace.h), which a trace poll of the channel's
   * PROFILE answer sets and reads (ezi_ctx_trace_poll), and its topic and id. I/O thread. */
  ezi_trace **(*trace_of)(ez_sub *sub, const char **topic, const char **id);
} ezi_member_ops;

enum { CH_REGISTERING, CH_CONNECTING, CH_READY, CH_FAILED };

struct chan {
  ez_context *ctx;
  char id[37], pub_id[37];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int state;     /* CH_*; changes on the I/O thread only */
  uint32_t nbuf; /* known once ready */
  /* Notices of a remote publisher: `nslot` (= nbuf) slots, msg_id % nslot (c->mu). */
  chan_slot *slots;
  uint32_t nslot;
  /* TCP window (tcpring.c): an ezmsg-c publisher sent X_WIN. The channel then works as a local
   * one (its ring lr, of the window's size) whose producer is its own I/O thread. I/O thread
   * only. */
  uint64_t win_bytes;   /* the byte budget beyond nbuf messages in flight */
  uint64_t live_bytes;  /* what the unacknowledged messages [wack, published) take */
  uint64_t wack;        /* the first message not acknowledged yet */
  uint64_t wnext;       /* the next message expected (published once its read is done) */
  uint64_t wscan;       /* [wack, wscan): free, not acknowledged yet ... */
  uint64_t wfree_bytes; /* ... and their bytes */
  bool wread;           /* a read since the last idle scan (tcpring_idle) */
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
  /* How it receives (rxmode.h): notices until a local publisher attaches or a remote one grants
   * a ring or a window; it changes once, before any member takes a message. */
  const ezi_rx_mode *rx;
  /* Its links' closers, which chanreg.c sets at creation: to the publisher (chanlink.c; what
   * members hold or have queued stays valid) and to the graph server. I/O thread. */
  void (*close_link)(chan *c);
  void (*close_graph)(chan *c);
  /* local (localchan.c) */
  ez_pub *local_pub;
  int pub_users;
  ezi_seg *kept_seg;    /* a gone publisher's segments, which messages still queued live in */
  uint8_t *kept_hot[2]; /* ... and its hot buffers (pubhot.c) */
  ezi_seg_chain *kept_retired;
  /* ring mode: a remote ezmsg-c publisher's notices come through a shared ring (shmring.h), and
   * the channel works as a local one whose "publisher" is whoever pulls from the ring */
  bool ring_bad; /* atomic: the ring broke the rules: nothing more is pulled, the link is dropped
                  * (set by a puller under pull_mu; read by the I/O thread and pullers) */
  ezi_ring ring;
  pthread_mutex_t pull_mu; /* ring mode: members (lsubs) and pulling */
  uint32_t pull_missed;    /* atomic: a receiver found pull_mu taken and could not pull: whoever
                            * holds it pulls once it unlocks (ringchan.c ezi_ringchan_unlock) */
  struct {
    uint32_t gen;
    ezi_seg *seg;
  } gseg[8]; /* the publisher's segments by generation (pull_mu) */
  /* The ring of the ring modes (ring/localchan.h): set up before any member can see it. */
  ezi_lring lr;
  /* remote (I/O thread; `remote` is set before anyone else sees the channel) */
  bool remote;
  char pub_addr[EZI_ADDR_MAX]; /* the publisher's address the server gave (empty if too long) */
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

/* channel.c: the registration or handshake finished (rc 0, c->nbuf set) or failed. Tells the
 * waiting subscribers. Returns 0 if the channel is ready and still there; otherwise (failed, or
 * every subscriber left meanwhile) it may be gone: touch nothing. I/O thread. */
int ezi_chan_link_done(chan *c, int rc);
/* The link of a ready channel failed (it is closed already): the channel is marked failed and
 * its subscribers leave it to join again; it may be gone when this returns. I/O thread. */
void ezi_chan_link_lost(chan *c);
/* Wakes the subscribers a batch of deferred deliveries left asleep (chanlink.c, after a read). */
void ezi_chan_wake_subs(chan *c);
/* Destroys c: its links are closed, what its modes hold freed (no member is left). I/O thread. */
void ezi_chan_destroy(chan *c);
/* Drops a reference held by a chan_sub; the last one destroys the channel on the I/O thread. */
void ezi_chan_unref(chan *c);
/* Frees a chan_sub and what it owns (its t0 array and window), not its channel reference. NULL
 * is a no-op. */
void ezi_chan_sub_free(chan_sub *cs);

/* Removes a subscriber from its channel, releasing what it has queued and, with release_viewed,
 * the messages its user is viewing (else those are released by the user); the channel goes away
 * with its last subscriber. I/O thread. */
void ezi_chan_leave(chan_sub *cs, bool release_viewed);
/* The publisher of a local channel is going away. I/O thread. */
void ezi_chan_pub_gone(chan *c);
/* The kind of cs's channel, as 3.9 names it (ezi_m39_channel). Any thread. */
int ezi_chan_sub_kind(const chan_sub *cs);
/* The channel's own id (empty until the graph server gave it one). */
const char *ezi_chan_id(const chan *c);
/* Profile JSON of a channel and its members (a new reference). I/O thread. */
json_t *ezi_chan_profile(chan *c, double window_s);
/* Acks msg_id to the publisher. Never called with c->mu held. */
void ezi_chan_ack(chan *c, uint64_t msg_id);

/* The ring modes' share (rxmode.h), on the channel's ring c->lr. ezi_chan_ring_attach: every
 * subscriber of c becomes a member, from message next_id on (the membership lock held;
 * EZ_ENOMEM). ezi_chan_ring_join: the member op join. ezi_chan_ring_member_json: the member op
 * member_json. */
int ezi_chan_ring_attach(chan *c, uint64_t next_id);
int ezi_chan_ring_join(chan *c, chan_sub *cs);
json_t *ezi_chan_ring_member_json(chan_sub *cs, uint64_t now, double window_s, uint64_t *in_flight);
/* The member part of every ring mode's table (rxmode.h), in its initializer. */
#define EZI_RING_MEMBER_OPS                                                                        \
  .join = ezi_chan_ring_join, .leave = ezi_lchan_leave, .release = ezi_lchan_release,              \
  .cut = ezi_lchan_cut, .idle = ezi_lchan_idle, .member_json = ezi_chan_ring_member_json
/* cs left and holds nothing: it is freed, and its reference to its channel dropped (the ring's
 * chan_sub.done). Any thread. */
void ezi_chan_sub_done(chan_sub *cs);

/* Through the channel's receive mode (rxmode.h). ezi_chan_release: cs's user is done with
 * message msg_id (any thread). ezi_chan_sub_idle: true if cs holds no message, none queued, none
 * viewed (any thread). ezi_chan_sub_cut: cs's channel link was lost: a ring member's queued
 * messages are then taken before anything else of its subscriber's (a channel with slots keeps
 * its queue's order anyway; I/O thread). */
static inline void ezi_chan_release(chan_sub *cs, uint64_t msg_id) {
  cs->ch->rx->release(cs, msg_id);
}
static inline bool ezi_chan_sub_idle(chan_sub *cs) { return cs->ch->rx->idle(cs); }
static inline void ezi_chan_sub_cut(chan_sub *cs) {
  if (cs->ch->rx->cut) cs->ch->rx->cut(cs);
}

#endif
