/* The TCP window with an ezmsg-c channel (pubwin.c). */
#ifndef EZI_PUBWIN_H
#define EZI_PUBWIN_H

#include "pub/pubstate.h"

/* pub->mu held for all.
 * ezi_win_start: channel pc asked for a window, holds nothing and gets TX_TCP: from the next
 * message on, announced by X_WIN, its messages count in the window instead of leasing slots.
 * Stays as it was if it cannot (no memory, a window no larger than num_buffers, a dead link).
 * ezi_win_full: the next message, of `bytes` bytes on the wire, must wait for some channel's
 * window; ezi_win_chan_full: pc's does (pc in EZI_SEND_WINDOW). ezi_win_sent: message id, of
 * `bytes` bytes, went to pc at `now`. ezi_win_ack: pc's RX_ACK for id, which in a window
 * acknowledges every message up to id (a stale or unknown id is ignored). ezi_win_collect: frees
 * the entries of every ack so far (then in_flight is exact). ezi_win_busy: some window has messages
 * unacknowledged. ezi_win_close: pc closes; what it had unacknowledged counts as freed. */
void ezi_win_start(ez_pub *pub, pub_chan *pc);
bool ezi_win_full(ez_pub *pub, uint64_t bytes);
bool ezi_win_chan_full(ez_pub *pub, pub_chan *pc, uint64_t bytes);
void ezi_win_sent(ez_pub *pub, pub_chan *pc, uint64_t id, uint64_t bytes, uint64_t now);
void ezi_win_ack(ez_pub *pub, pub_chan *pc, uint64_t id, uint64_t now);
void ezi_win_collect(ez_pub *pub);
bool ezi_win_busy(ez_pub *pub);
void ezi_win_close(ez_pub *pub, pub_chan *pc, uint64_t now);

#endif
