/* The in-process ring (localchan.c): a channel's ring of message entries, which its producer (a
 * publisher in this process, the puller of a shared ring, a TCP window's I/O thread: the channel's
 * receive mode, rxmode.h) fills and its members take from without a lock of each other's. */
#ifndef EZI_LOCALCHAN_H
#define EZI_LOCALCHAN_H

#include "core/context.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* An entry of the ring: written by the producer before it publishes the message, read by
 * receivers after; `refs` (atomic) counts the receivers still holding it, and the last one stores
 * freed_at before it drops refs to zero. */
typedef struct lslot {
  _Alignas(64) uint64_t msg_id; /* a cache line each: neighbours are written by the other side */
  uint64_t t0, freed_at;
  const uint8_t *data;
  size_t len;
  ezi_seg *seg; /* the segment the message lives in (a reference), or NULL */
  uint32_t refs;
} lslot;

#define EZI_LWANT_ANY UINT32_MAX /* pub_wants: the publisher sleeps until any slot is freed */

/* A zeroed ring of nbuf entries, each on a cache line of its own (NULL: no memory). Freed with
 * free(). */
lslot *ezi_lchan_ring_new(uint32_t nbuf);

/* ---- the producer (its membership lock held: rxmode.h memb_mu) ----------------------------- */
/* ezi_lchan_attach: makes every subscriber of c a member, from message next_id on (EZ_ENOMEM; I/O
 * thread). ezi_lchan_add: makes cs a member from the next message on (EZ_ENOMEM). */
int ezi_lchan_attach(chan *c, uint64_t next_id);
int ezi_lchan_add(chan *c, chan_sub *cs);
/* The producer wrote message msg_id (len payload bytes at data, in seg: the members hold a
 * reference each) into its entry; true if any member holds it now. Members waiting for a signal
 * get one: self (whose lock the caller holds: a receiver, or the I/O thread looking at a
 * subscriber) in place, others of a receiver's pull through the I/O thread (a TCP window's I/O
 * thread signals them after the read instead, ezi_lchan_signal_all). */
bool ezi_lchan_put(chan *c, uint64_t msg_id, const uint8_t *data, size_t len, uint64_t now,
                   ezi_seg *seg, ez_sub *self);
/* The first half of ezi_lchan_put: the entry is written for the members, not published yet (a TCP
 * window publishes a read's messages at once, tcpring.c). True if any member will hold it. */
bool ezi_lchan_fill(chan *c, uint64_t msg_id, const uint8_t *data, size_t len, uint64_t now,
                    ezi_seg *seg);
/* True (with the time of the last release) once no member holds entry idx. */
bool ezi_lchan_slot_free(chan *c, uint32_t idx, uint64_t *freed_at);
/* The message entry idx was last written for. */
uint64_t ezi_lchan_msg_id(const chan *c, uint32_t idx);
/* Announces what the producer is about to sleep for (0, entry + 1 or EZI_LWANT_ANY), which the
 * last release of that entry then asks it to be woken for (rxmode.h freed). */
void ezi_lchan_set_wants(chan *c, uint32_t wants);
/* Whether the producer asked to be woken for entry idx (ezi_lchan_set_wants). */
bool ezi_lchan_wanted(chan *c, uint32_t idx);
/* Signals a receiver that asked for it (want_signal; takes its lock). */
void ezi_lchan_signal(ez_sub *s);
/* Signals every member that asked for it (the membership lock held). */
void ezi_lchan_signal_all(chan *c);

/* ---- leaky members (ez_sub_opts.leaky) ----------------------------------------------------- */
/* ezi_lchan_trim drops what cs has waiting beyond its subscriber's max_queue, oldest first, at
 * most EZI_LDROPS_MAX (cs's subscriber's lock held; `publisher`: by a producer that trims as it
 * puts, holding its own lock, which needs no wake-up); the drops' segment references and
 * wake-ups wait in *d for ezi_lchan_trim_done, called with no lock held. ezi_lchan_trim_members
 * trims every leaky member of c (the I/O thread, after it published for them; no lock held). */
void ezi_lchan_trim(chan_sub *cs, bool publisher, ezi_ldrops *d);
void ezi_lchan_trim_done(ezi_ldrops *d);
void ezi_lchan_trim_members(chan *c);

/* ---- the members: the ring modes' member operations (rxmode.h) ------------------------------ */
int ezi_lchan_join(chan *c, chan_sub *cs);
void ezi_lchan_leave(chan_sub *cs, bool release_viewed);
void ezi_lchan_release(chan_sub *cs, uint64_t msg_id);
void ezi_lchan_cut(chan_sub *cs);
bool ezi_lchan_idle(chan_sub *cs);
json_t *ezi_lchan_sub_json(chan_sub *cs, uint64_t now, double window_s, uint64_t *in_flight);

/* ---- the receiver (its subscriber's lock held) --------------------------------------------- */
/* True if a ring channel has a message for s. */
bool ezi_lchan_ready(ez_sub *s);
/* Asks the producers of s's ring channels for a wake-up at their next message. */
void ezi_lchan_arm(ez_sub *s);
/* Takes the next message into m (round robin over the channels). With a leaky subscriber, what
 * its member has waiting beyond max_queue is dropped first, the oldest: *d gets what
 * ezi_lchan_trim_done must finish once s->mu is unlocked. */
bool ezi_lchan_take(ez_sub *s, ez_msg *m, ezi_ldrops *d);
/* True if a member that left or was cut still has messages to take. */
bool ezi_lchan_draining(ez_sub *s);
/* Ends the memberships s left that still drain what they had queued (a TCP window's members keep
 * delivering that after they left): their messages and views are released. The subscriber is
 * being destroyed; I/O thread, s->mu not held. */
void ezi_lchan_purge(ez_sub *s);

#endif
