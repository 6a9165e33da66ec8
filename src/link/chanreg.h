/* A channel's link to the graph server (chanreg.c): registration, then PROFILE requests. */
#ifndef EZI_CHANREG_H
#define EZI_CHANREG_H

#include "chan/channel.h"

/* Starts registering the channel at the graph server (non-blocking connect, CHANNEL request,
 * answer read as it comes); then ezi_chan_link_done, or the handshake with a remote publisher,
 * follows. EZ_ENOSERVER etc. if the server cannot be reached at once. I/O thread. */
int ezi_chan_reg_start(chan *c);
/* Closes the channel's graph-server link. I/O thread. */
void ezi_chan_graph_close(chan *c);

/* Finds or creates the channel for pub_id and adds sub to it, whose callbacks are ops (static:
 * they must outlast the membership) and whose receiver of ring messages is rv. If the channel is
 * still shaking hands with a remote publisher, *pending is set and ops->joined reports the outcome
 * later. 0, EZ_ENOMEM, or the graph server's unreachability (EZ_ENOSERVER...). I/O thread. */
/* The live channel of this process for publisher pub_id (failed ones are skipped), or NULL
 * (ctx->mu held by the caller, or the I/O thread). */
chan *ezi_chan_find(ez_context *ctx, const char *pub_id);
int ezi_chan_join(ez_context *ctx, const char *pub_id, ez_sub *sub, ezi_lrecv *rv,
                  const ezi_member_ops *ops, chan_sub **out, bool *pending);

#endif
