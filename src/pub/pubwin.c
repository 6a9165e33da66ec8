/* The TCP window between an ezmsg-c publisher and an ezmsg-c channel (ezmsg-c's extension).
 *
 * The protocol lets a publisher have at most num_buffers messages unacknowledged per channel: a
 * TX_TCP message leases its slot until the channel's RX_ACK, though its bytes were copied into the
 * socket when it was sent. At 64 B that window, not the CPU, bounds throughput: 32 messages per
 * notice-to-ack round trip through four threads.
 *
 * A channel of ours sends X_WIN_ASK after the handshake (the reference's publisher ignores bytes it
 * does not know, and so does ours: wire.h). Once that channel holds nothing and gets TX_TCP, the
 * publisher answers X_WIN (first message id, window size, byte budget), and from then on that
 * channel's messages hold no slot: each takes entry msg_id % win_max of the window, until it is
 * acknowledged. The next message waits while its entry is still taken (as a slot would be), or
 * while more than num_buffers are in flight and it would take the window's bytes beyond the budget.
 * The channel becomes a ring of the window's size (tcpring.c) and checks the rules, so a publisher
 * that breaks them loses the link.
 *
 * Acks in a window are cumulative: our channel acks in order, and one RX_ACK for id acknowledges
 * every message up to id. The I/O thread only notes it (a mark: up to where, and when); the
 * entries are freed, and their backpressure timed, by the next look at the window: mostly the
 * publishing thread's, before its next message, so that the entries' cache lines stay with it
 * instead of going to the I/O thread and back for every message. The I/O thread frees them itself
 * when someone waits (a publish for room, a flush, a SYNC) or its marks are all taken.
 *
 * The channel's subscribers see nothing different; backpressure (a slow subscriber stops the
 * publisher) holds with a larger bound. Telemetry counts a window message's backpressure from its
 * send to its ack, as a lease's. */
#include "pub/pubwin.h"
#include "pub/pubwait.h"

#include <stdlib.h>

void ezi_win_start(ez_pub *p, pub_chan *pc) {
  if (pc->held) return; /* not yet (ring_switch_waits holds new messages back meanwhile) */
  pc->wanted = EZI_SEND_FRAMES;
  uint32_t w = p->ctx->tcp_window;
  if (w <= p->nbuf) return;
  pc->win_t0 = calloc(w, sizeof *pc->win_t0);
  pc->win_len = calloc(w, sizeof *pc->win_len);
  uint8_t f[1 + 8 + 8 + 8] = {EZI_X_WIN};
  ezi_put_u64le(f + 1, p->next_id);
  ezi_put_u64le(f + 9, w);
  ezi_put_u64le(f + 17, EZI_WIN_BYTES);
  if (!pc->win_t0 || !pc->win_len || !ezi_outbox_put_now(p->ctx, &pc->out, f, sizeof f)) {
    free(pc->win_t0);
    free(pc->win_len);
    pc->win_t0 = pc->win_len = NULL;
    return;
  }
  pc->mode = EZI_SEND_WINDOW;
  pc->win_max = w;
  pc->win_first = pc->win_next = p->next_id;
  pc->win_bytes = 0;
  pc->n_marks = 0;
}

/* Frees the entries of pc's marks, each timed by its mark. The loop keeps its state in locals (the
 * compiler could not, since the window's counters might alias the entries) and times only the
 * stamped entries: the others are counted once, after the loop. */
static void apply(ez_pub *p, pub_chan *pc) {
  const uint64_t *t0 = pc->win_t0, *len = pc->win_len;
  uint64_t first = pc->win_first, bytes = pc->win_bytes, unstamped = 0, freed = 0;
  uint32_t max = pc->win_max;
  for (uint32_t i = 0; i < pc->n_marks; i++) {
    uint64_t to = pc->marks[i].to, at = pc->marks[i].at;
    if (to <= first) continue;
    freed += to - first;
    for (; first < to; first++) {
      uint32_t k = (uint32_t)(first % max);
      if (t0[k] != EZI_UNSTAMPED && at != EZI_UNSTAMPED)
        ezi_window_span(p->tel_bp, t0[k], at);
      else
        unstamped++;
      bytes -= len[k];
    }
  }
  ezi_window_pend(p->tel_bp, unstamped);
  pc->win_first = first;
  pc->win_bytes = bytes;
  p->in_flight -= freed;
  pc->n_marks = 0;
}

bool ezi_win_chan_full(ez_pub *p, pub_chan *pc, uint64_t bytes) {
  if (pc->n_marks) apply(p, pc);
  uint64_t n = pc->win_next - pc->win_first;
  return n >= pc->win_max || (n >= p->nbuf && pc->win_bytes + bytes > EZI_WIN_BYTES);
}

bool ezi_win_full(ez_pub *p, uint64_t bytes) {
  for (size_t i = 0; i < p->n_chans; i++)
    if (p->chans[i]->mode == EZI_SEND_WINDOW && ezi_win_chan_full(p, p->chans[i], bytes))
      return true;
  return false;
}

void ezi_win_sent(ez_pub *p, pub_chan *pc, uint64_t id, uint64_t bytes, uint64_t now) {
  uint32_t k = (uint32_t)(id % pc->win_max);
  pc->win_t0[k] = now;
  pc->win_len[k] = bytes;
  pc->win_next = id + 1;
  pc->win_bytes += bytes;
  p->in_flight++;
}

/* After entries were freed: wakes a publisher whose message may go now, or a flush or SYNC that
 * waits for everything. */
static void wake(ez_pub *p) {
  if (p->win_waiters && !p->win_kicked && !ezi_win_full(p, p->win_need)) {
    p->win_kicked = true; /* once per sleep, not per ack of a batch */
    ezi_pub_broadcast(p);
  } else if (!p->in_flight && p->waiters) {
    ezi_pub_broadcast(p);
  }
  if (p->sync_pending && !ezi_win_busy(p)) ezi_pub_check_sync(p);
}

void ezi_win_ack(ez_pub *p, pub_chan *pc, uint64_t id, uint64_t now) {
  uint64_t last = pc->n_marks ? pc->marks[pc->n_marks - 1].to : pc->win_first;
  if (id < last || id >= pc->win_next) return;    /* stale, a duplicate, or never sent */
  if (pc->n_marks == EZI_WIN_MARKS) apply(p, pc); /* the publisher does not look: free them here */
  pc->marks[pc->n_marks++] = (struct ezi_win_mark){.to = id + 1, .at = now};
  if (p->waiters || p->sync_pending) {
    apply(p, pc);
    wake(p);
  }
}

void ezi_win_collect(ez_pub *p) {
  for (size_t i = 0; i < p->n_chans; i++)
    if (p->chans[i]->mode == EZI_SEND_WINDOW && p->chans[i]->n_marks) apply(p, p->chans[i]);
}

bool ezi_win_busy(ez_pub *p) {
  ezi_win_collect(p);
  for (size_t i = 0; i < p->n_chans; i++)
    if (p->chans[i]->mode == EZI_SEND_WINDOW && p->chans[i]->win_first != p->chans[i]->win_next)
      return true;
  return false;
}

void ezi_win_close(ez_pub *p, pub_chan *pc, uint64_t now) {
  if (pc->mode != EZI_SEND_WINDOW) return;
  apply(p, pc);
  pc->marks[0] = (struct ezi_win_mark){.to = pc->win_next, .at = now};
  pc->n_marks = 1;
  apply(p, pc);
  pc->mode = EZI_SEND_FRAMES;
  free(pc->win_t0);
  free(pc->win_len);
  pc->win_t0 = pc->win_len = NULL;
  wake(p);
}
