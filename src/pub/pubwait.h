/* A publisher's backpressure and segment growth (pubwait.c): which slots its channels hold,
 * waiting for the next one, waking for releases and SYNC. */
#ifndef EZI_PUBWAIT_H
#define EZI_PUBWAIT_H

#include "pub/pubstate.h"

/* Frees the lease of remote channel `pc` on msg_id. pub->mu held. */
void ezi_pub_free_locked(ez_pub *pub, pub_chan *pc, uint64_t msg_id, uint64_t now);
/* Sends COMPLETE for a pending SYNC once every slot is free. pub->mu held. */
void ezi_pub_check_sync(ez_pub *pub);
/* A ring channel's receivers freed a slot the publisher sleeps for (its RX_ACK), or the channel
 * closes: wakes the publisher (which collects what was freed) and answers a pending SYNC that
 * is now complete. pub->mu held. */
void ezi_pub_ring_wake(ez_pub *pub);
/* A receiver freed the local slot the publisher waits for (or it waits for any): takes pub->mu
 * and wakes it (ezi_pub_ring_wake). Any thread. */
void ezi_pub_local_wake(ez_pub *pub);
/* Channel pc closes: its ring's slots are freed (the ring stays mapped until ezi_pub_chan_free).
 * pub->mu held. */
void ezi_pub_ring_close(ez_pub *pub, pub_chan *pc, uint64_t now);
/* The closing of pc is done (pub->mu held; pc out of pub's channels): frees pc and unmaps its
 * ring, or, if a publishing thread still sleeps on that ring's word (which a ring truncated under
 * it keeps from waking for up to 100 ms), leaves both to that thread, which frees them when it
 * wakes. So the I/O thread never waits for it. */
void ezi_pub_chan_free(ez_pub *pub, pub_chan *pc);

/* Waits until the next slot (of `bytes` bytes on the wire) is free and the publisher runs:
 * every holder released it, no channel switching mode holds messages, no window or full outbox
 * keeps it back. Polls first while polling pays. *deadline is read from the clock
 * only once there is something to wait for (0: not yet). 0, EZ_ETIMEDOUT, or EZ_ECLOSED. p->mu
 * held (dropped while it sleeps). */
int ezi_pub_wait_slot(ez_pub *pub, uint64_t bytes, int timeout_ms, uint64_t *deadline);
/* Replaces the segment by one whose slots hold `need` bytes (twice that), copying the held slots;
 * ezi_pub_seg_tripped: by one of the same layout, because another process truncated ours. 0 or
 * an error of the server's; p->mu held, dropped meanwhile. */
int ezi_pub_grow(ez_pub *pub, uint64_t need);
int ezi_pub_seg_tripped(ez_pub *pub);
/* Collects every slot the local channel and the rings released (p->mu held). */
void ezi_pub_harvest_all(ez_pub *pub);
/* Tells the local channel's receivers and the rings what a release must wake the publisher for:
 * a pending SYNC or flush waits for every slot, a publish for its next one (p->mu held). */
void ezi_pub_set_wants(ez_pub *pub);

#endif
