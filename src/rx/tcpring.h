/* The TCP-window receive mode (tcpring.c): the channel of a remote ezmsg-c publisher that granted
 * a window of TX_TCP messages (X_WIN, pub/pubwin.c). */
#ifndef EZI_TCPRING_H
#define EZI_TCPRING_H

#include "chan/channel.h"

/* The mode's table (rxmode.h). */
extern const ezi_rx_mode ezi_rx_tcp_window;

/* The publisher's X_WIN: from message start_id on, up to msgs TX_TCP messages may be
 * unacknowledged, holding at most `bytes` beyond the first nbuf. The channel holds nothing at
 * this point (the publisher waited) and is in this mode from now on. EZ_EPROTO if the window
 * breaks the limits or something is held, EZ_ENOMEM. I/O thread. */
int ezi_tcpring_start(chan *c, uint64_t start_id, uint64_t msgs, uint64_t bytes);

#endif
