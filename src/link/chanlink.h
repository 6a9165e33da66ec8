/* A channel's link to a publisher in another process (chanlink.c): the handshake, then data
 * frames handed to the channel's receive mode. */
#ifndef EZI_CHANLINK_H
#define EZI_CHANLINK_H

#include "chan/channel.h"

/* Connects to the publisher at addr and starts the handshake. The channel becomes ready (or
 * failed) later, through ezi_chan_link_done. 0, or an error if it cannot even start (EZ_EPROTO
 * for a bad address, EZ_ECONNLOST, EZ_ESYS). I/O thread. */
int ezi_chan_link_start(chan *c, const char *addr);
/* Closes the link (if open): what members hold or have queued stays valid. I/O thread. */
void ezi_chan_link_close(chan *c);
#endif
