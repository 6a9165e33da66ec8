/* What peers can make a process hold in memory for the TCP messages they send it. Internal.
 *
 * A publisher chooses how large its messages are (up to EZI_MAX_TCP_MSG) and how many it sends
 * before it waits for acks, and a hostile one can announce a large frame and send it slowly, or
 * not at all. So every buffer a channel allocates for TCP bytes (the link's input buffer, a large
 * message read straight into its own buffer, the buffers of messages received and not released
 * yet, spares kept for reuse, a TCP ring's chunks) is counted, per link and for the process, as
 * it is allocated (which happens as bytes arrive: never the size a header announces), and
 * uncounted when freed. A link whose next allocation would take it beyond EZMSG_RX_LINK_MB, or
 * the process beyond EZMSG_RX_PROCESS_MB, is dropped (chanlink.c) and joined again later; what it
 * delivered stays valid. The counters are atomic: releases run on the receivers' threads. */
#ifndef EZI_RXBUDGET_H
#define EZI_RXBUDGET_H

#include <stddef.h>
#include <stdint.h>

/* Counts n more bytes for a link (*link: its counter): 0, or EZ_EMSGSIZE (nothing counted) if
 * that would take the link or the process beyond its limit. Any thread. */
int ezi_rx_take(uint64_t *link, size_t n);
/* Uncounts n bytes taken for *link. Any thread. */
void ezi_rx_give(uint64_t *link, size_t n);
/* Adjusts *link from `had` counted bytes to `now` (a buffer that grew or shrank): as
 * ezi_rx_take for growth (nothing changes on EZ_EMSGSIZE). */
int ezi_rx_resize(uint64_t *link, size_t had, size_t now);

/* The limits in bytes (environment read once), and the process's count now. */
uint64_t ezi_rx_link_max(void);
uint64_t ezi_rx_process_max(void);
uint64_t ezi_rx_process_held(void);
/* $EZMSG_FRAME_TIMEOUT_MS in ns: how long a frame may stay incomplete on a link. */
uint64_t ezi_frame_timeout_ns(void);

#endif
