/* A subscriber's graph link (sublink.c): UPDATEs, joining and leaving channels, and joining a
 * failed link again. */
#ifndef EZI_SUBLINK_H
#define EZI_SUBLINK_H

#include "sub/subscriber.h"

/* A pending join finished (rc 0) or failed (then sub leaves cs). I/O thread. */
void ezi_sub_join_done(ez_sub *sub, chan_sub *cs, int rc);
/* The link of cs's channel to its publisher was cut after the handshake: sub leaves cs and joins
 * the publisher again later. I/O thread. */
void ezi_sub_chan_lost(ez_sub *sub, chan_sub *cs);

/* The graph link's event handler (I/O thread). */
void ezi_sub_on_graph(ezi_watch *w, uint32_t ev);
/* Closes the graph link, stops the retries and leaves every channel (views end: the
 * subscriber is being destroyed). I/O thread. */
void ezi_sub_links_close(ez_sub *s);

#endif
