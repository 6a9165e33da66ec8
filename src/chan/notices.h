/* The notices mode (notices.c): a remote publisher's TX_SHM notices and TX_TCP messages, into
 * the channel's slots. */
#ifndef EZI_NOTICES_H
#define EZI_NOTICES_H

#include "chan/channel.h"

/* The mode's table (rxmode.h): every channel's first. */
extern const ezi_rx_mode ezi_rx_notices;

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
/* Checks and delivers a TX_TCP message of `size` bytes in `owned` (a buffer of `cap` bytes from
 * ezi_chan_buf_take, which this takes): 0, or EZ_EPROTO. I/O thread, c->mu not held. */
int ezi_notices_tcp(chan *c, uint64_t msg_id, uint64_t size, uint8_t *owned, size_t cap,
                    uint64_t now);
/* Fills a view of message msg_id for cs (called by recv). EZ_ENOENT if it is gone. Any thread. */
int ezi_chan_view(chan_sub *cs, uint64_t msg_id, ez_msg *msg);
/* cs's channel lost its link: the notices cs has queued for messages in the publisher's shared
 * memory are dropped (released), since the publisher may write those slots again; those that
 * came whole over TCP stay queued where they are. I/O thread. */
void ezi_chan_drop_unowned(chan_sub *cs);
/* Frees the slots and the spare buffers (the channel is destroyed: whatever its mode now, it may
 * keep spare buffers from its notices). */
void ezi_notices_free(chan *c);

#endif
