/* The TCP window between an ezmsg-c publisher and an ezmsg-c channel (ezmsg-c's extension).
 *
 * The protocol lets a publisher have at most num_buffers messages unacknowledged per channel: a
 * TX_TCP message leases its slot until the channel's RX_ACK, though its bytes were copied into the
 * socket when it was sent. At 64 B that window, not the CPU, bounds throughput: 32 messages per
 * notice-to-ack round trip through four threads.
 *
 * A channel of ours sends X_WIN_ASK after the handshake (the reference's publisher ignores bytes it
 * does not know). Once that channel holds nothing and gets TX_TCP, the publisher answers X_WIN
 * (first message id, window size, byte budget), and from then on that channel's messages hold no
 * slot: each takes entry msg_id % win_max of the window, until its RX_ACK. The next message waits
 * while its entry is still taken (as a slot would be; our channel acks in order, but the
 * publisher does not count on it), or while more than num_buffers are in flight and it would take
 * the window's bytes beyond the budget. The channel becomes a ring of the window's size
 * (tcpring.c) and checks the rules, so a publisher that breaks them loses the link.
 *
 * The channel's subscribers see nothing different; backpressure (a slow subscriber stops the
 * publisher) holds with a larger bound. Telemetry counts a window message's backpressure from its
 * send to its ack, as a lease's. */
#include "publisher.h"

#include <stdlib.h>

void ezi_win_start(ez_pub *p, pub_chan *pc) {
  if (pc->held) return; /* not yet (ring_switch_waits holds new messages back meanwhile) */
  pc->win_wanted = false;
  uint32_t w = p->ctx->tcp_window;
  if (w <= p->nbuf) return;
  pc->win_t0 = calloc(w, sizeof *pc->win_t0);
  pc->win_id = calloc(w, sizeof *pc->win_id);
  pc->win_len = calloc(w, sizeof *pc->win_len);
  uint8_t f[1 + 8 + 8 + 8] = {EZI_X_WIN};
  ezi_put_u64le(f + 1, p->next_id);
  ezi_put_u64le(f + 9, w);
  ezi_put_u64le(f + 17, EZI_WIN_BYTES);
  if (!pc->win_t0 || !pc->win_id || !pc->win_len ||
      !ezi_outbox_put_now(p->ctx, &pc->out, f, sizeof f)) {
    free(pc->win_t0);
    free(pc->win_id);
    free(pc->win_len);
    pc->win_t0 = pc->win_id = pc->win_len = NULL;
    return;
  }
  pc->win_on = true;
  pc->win_max = w;
  pc->win_n = 0;
  pc->win_bytes = 0;
}

/* Whether pc's window keeps the next message (id, bytes) back. */
static bool full(const ez_pub *p, const pub_chan *pc, uint64_t bytes) {
  if (pc->win_t0[p->next_id % pc->win_max]) return true;
  return pc->win_n >= p->nbuf && pc->win_bytes + bytes > EZI_WIN_BYTES;
}

bool ezi_win_full(const ez_pub *p, uint64_t bytes) {
  for (size_t i = 0; i < p->n_chans; i++)
    if (p->chans[i]->win_on && full(p, p->chans[i], bytes)) return true;
  return false;
}

void ezi_win_sent(ez_pub *p, pub_chan *pc, uint64_t id, uint64_t bytes, uint64_t now) {
  uint32_t k = (uint32_t)(id % pc->win_max);
  pc->win_t0[k] = now ? now : 1;
  pc->win_id[k] = id;
  pc->win_len[k] = bytes;
  pc->win_n++;
  pc->win_bytes += bytes;
  p->in_flight++;
}

/* Frees entry k (taken), counting its backpressure until `now`. */
static void entry_free(ez_pub *p, pub_chan *pc, uint32_t k, uint64_t now) {
  uint64_t t0 = pc->win_t0[k];
  ezi_window_span(p->tel_bp, t0, now, &p->bp_untimed);
  pc->win_t0[k] = 0;
  pc->win_n--;
  pc->win_bytes -= pc->win_len[k];
  p->in_flight--;
}

/* After entries were freed: wakes a publisher whose message may go now, or a flush or SYNC that
 * waits for everything. */
static void wake(ez_pub *p) {
  if (p->win_waiters && !p->win_kicked && !ezi_win_full(p, p->win_need)) {
    p->win_kicked = true; /* once per sleep, not per ack of a batch */
    pthread_cond_broadcast(&p->cv);
  } else if (!p->in_flight && p->waiters) {
    pthread_cond_broadcast(&p->cv);
  }
  if (p->sync_pending && !ezi_win_busy(p)) ezi_pub_check_sync(p);
}

void ezi_win_ack(ez_pub *p, pub_chan *pc, uint64_t id, uint64_t now) {
  uint32_t k = (uint32_t)(id % pc->win_max);
  if (!pc->win_t0[k] || pc->win_id[k] != id) return; /* stale or duplicate */
  entry_free(p, pc, k, now);
  wake(p);
}

bool ezi_win_busy(const ez_pub *p) {
  for (size_t i = 0; i < p->n_chans; i++)
    if (p->chans[i]->win_on && p->chans[i]->win_n) return true;
  return false;
}

void ezi_win_close(ez_pub *p, pub_chan *pc, uint64_t now) {
  if (!pc->win_on) return;
  for (uint32_t k = 0; k < pc->win_max; k++)
    if (pc->win_t0[k]) entry_free(p, pc, k, now);
  pc->win_on = false;
  free(pc->win_t0);
  free(pc->win_id);
  free(pc->win_len);
  pc->win_t0 = pc->win_id = pc->win_len = NULL;
  wake(p);
}
