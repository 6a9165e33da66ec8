/* One way a channel receives: the table each receive mode fills, and through which the channel,
 * its link and the in-process ring call it. Four modes fill one each:
 *
 *   in-process     pub/publocal.c   the publisher is in this process and puts into the ring
 *   notices        chan/notices.c   a remote publisher's TX_SHM notices and TX_TCP messages,
 *                                   into slots (the protocol's own way; one link may send both)
 *   shm ring       rx/ringchan.c    an ezmsg-c publisher's notices through a shared ring
 *   TCP window     rx/tcpring.c     an ezmsg-c publisher's TX_TCP messages in a window
 *
 * The ring modes (all but notices) deliver through the channel's ring (ring/localchan.c), which
 * gives its entries back to their producer through the producer's callbacks (`producer`) and
 * knows no producer by name. A channel starts in notices mode (chan_create) and changes mode once,
 * before any member can take a message: a local publisher attaches (ezi_local_pubs_ops.attach),
 * or a remote one grants a ring or a window (X_RING, X_WIN). */
#ifndef EZI_RXMODE_H
#define EZI_RXMODE_H

#include "core/context.h"
#include "ring/localchan.h"
#include "proto/txframe.h"

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct ezi_rx_mode {
  /* Messages go through the channel's ring (c->lr) rather than its slots. */
  bool ring;
  /* What a channel's profile says of its mode beyond the protocol's: notices come through a
   * shared ring ("shm_ring"); TCP messages beyond num_buffers may be in flight, as many as the
   * ring holds ("tcp_window"). */
  bool shared_ring, window;
  /* Its TX_SHM frames name messages in the publisher's segment: the link maps a segment a frame
   * names before the mode sees the frame. */
  bool shm_frames;

  /* ---- the link (NULL for the in-process mode, which has none). I/O thread. */
  /* A data frame of the publisher's (whole, parsed): bytes used, or < 0 to drop the link. */
  long (*frame)(chan *c, const ezi_tx_frame *f, uint64_t now);
  /* After a read's frames, and before a link is dropped: the receivers that sleep are woken once
   * for the whole batch (and what was released is acknowledged). */
  void (*read_done)(chan *c);
  /* Optional: reads the socket into the mode's own buffers rather than the link's (as
   * ezi_buf_fill: bytes read, 0 if none now, < 0 on error or EOF), once begin_reads (optional,
   * called after the frame that started the mode was consumed: 0 or EZ_ENOMEM) set them up. */
  long (*fill)(chan *c, int fd);
  int (*begin_reads)(chan *c);
  /* Optional: the link closed (what is held or queued stays valid). */
  void (*link_closed)(chan *c);
  /* Optional: frees what the mode holds (the channel is destroyed). */
  void (*free)(chan *c);

  /* ---- the members */
  /* Optional: cs joins channel c, which is ready (0, EZ_ENOMEM; NULL: the channel's list of
   * subscribers is all it needs). I/O thread. */
  int (*join)(chan *c, chan_sub *cs);
  /* cs leaves: what it had queued is released, and with release_viewed (its subscriber is being
   * destroyed) what it views too; cs is freed once it holds nothing. I/O thread. */
  void (*leave)(chan_sub *cs, bool release_viewed);
  /* The user of cs's subscriber is done with message msg_id. Any thread, no lock held. */
  void (*release)(chan_sub *cs, uint64_t msg_id);
  /* cs's link was lost: what it has queued is taken before anything else of its subscriber's
   * (NULL: nothing to do, the subscriber's queue keeps the order). I/O thread. */
  void (*cut)(chan_sub *cs);
  /* Whether cs holds nothing (none queued, none viewed). Any thread. */
  bool (*idle)(chan_sub *cs);
  /* cs's profile (a new reference) and *in_flight; c->mu held. */
  json_t *(*member_json)(chan_sub *cs, uint64_t now, double window_s, uint64_t *in_flight);

  /* ---- the ring modes: the producer of the channel's ring (c->lr), which the ring calls
   * (ring/localchan.h); NULL for notices. */
  const ezi_lring_ops *producer;
} ezi_rx_mode;

#endif
