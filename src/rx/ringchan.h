/* The shared-ring receive mode (ringchan.c): the channel of a remote ezmsg-c publisher whose
 * notices come through a ring in shared memory (proto/shmring.h). */
#ifndef EZI_RINGCHAN_H
#define EZI_RINGCHAN_H

#include "chan/channel.h"

/* The mode's table (rxmode.h). */
extern const ezi_rx_mode ezi_rx_shm_ring;

/* The publisher's X_RING: maps the ring `name` (n bytes) it announced, from message start_id on,
 * and makes every subscriber a member; the channel is in this mode from now on (EZ_EPROTO,
 * EZ_ENOMEM...). I/O thread. */
int ezi_ringchan_start(chan *c, const char *name, size_t n, uint64_t start_id);

/* Unlocks c->pull_mu, taken for anything but a pull (its members, its segments), and pulls if a
 * receiver found it taken meanwhile (pull_missed): such a receiver, woken on the ring's word,
 * went back to sleep counting on the holder. Any thread that may pull (no receiver's lock held). */
void ezi_ringchan_unlock(chan *c);

#endif
