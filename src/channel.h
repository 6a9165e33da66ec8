/* A channel's private state, shared by channel.c (slots, subscribers, profile, lifetime) and
 * chanlink.c (the link to a publisher in another process: handshake and data frames). */
#ifndef EZI_CHANNEL_H
#define EZI_CHANNEL_H

#include "context.h"

typedef struct slot {
  uint64_t msg_id;
  bool live;
  uint32_t refs; /* subscribers still holding it */
  ezi_unmarshalled um;
  uint8_t *owned; /* TX_TCP bytes */
  ezi_seg *seg;   /* the segment the bytes live in */
  ez_iov *iov;    /* raw pickles: the buffers */
} slot;

struct chan_sub {
  chan *ch;
  ez_sub *sub;
  uint64_t *t0; /* notify time per slot (0: not held); allocated once nbuf is known */
  uint64_t in_flight;
  bool gone;    /* left its channel; freed once nothing it held is outstanding */
  bool leaving; /* ezi_chan_leave is running: it frees the struct itself */
  ezi_window proc;
};

enum { CH_REGISTERING, CH_CONNECTING, CH_READY, CH_FAILED };

struct chan {
  ez_context *ctx;
  char id[37], pub_id[37];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int state;     /* CH_*; changes on the I/O thread only */
  uint32_t nbuf; /* known once ready */
  slot *slots;
  chan_sub **subs;
  size_t n_subs;
  int refs; /* chan_subs alive (chan->mu) */
  const char *mode;
  /* local */
  ez_pub *local_pub;
  int pub_users;
  /* remote (I/O thread; `remote` is set before anyone else sees the channel) */
  bool remote;
  ezi_watch pw;
  ezi_buf pin;
  ezi_outbox acks;
  ezi_seg *seg;
  uint64_t hs_timer; /* the registration's, then the handshake's deadline */
  bool reg_sent;     /* the CHANNEL request went out (registration) */
  bool hs_named;     /* the shm name arrived and was answered */
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
/* Stores a validated message (taking `owned`) and notifies the subscribers (c->mu held). Returns
 * 1 if someone took it, 0 if nobody listens (the caller acks it), -1 if its slot is still held
 * (the publisher broke backpressure: a protocol error). */
int ezi_chan_deliver(chan *c, uint64_t msg_id, const ezi_unmarshalled *um, uint8_t *owned,
                     ezi_seg *seg, uint64_t now);
/* The link of a ready channel failed (it is closed already): the channel is marked failed and
 * its subscribers leave it to join again; it may be gone when this returns. I/O thread. */
void ezi_chan_link_lost(chan *c);
/* Wakes the subscribers a batch of deferred deliveries left asleep (chanlink.c, after a read). */
void ezi_chan_wake_subs(chan *c);
/* Acks msg_id to the publisher (now: the release time). Never called with c->mu held. */
void ezi_chan_ack(chan *c, uint64_t msg_id, uint64_t now);

#endif
