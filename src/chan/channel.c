/* Channels: one per (process, publisher), shared by that process's subscribers. A channel receives
 * each message once (in place from the publisher's segment when local or over shared memory, or
 * as TX_TCP bytes), through its receive mode (ring/rxmode.h: notices.c, ring/localchan.c and the
 * modes that fill it), and acks the publisher when the last subscriber released it. Here: its
 * readiness and loss, its members leaving, its profile and its end. The I/O thread runs its links
 * (chanreg.c, chanlink.c); user threads view and release messages. */
#include "chan/channel.h"
#include "chan/notices.h"
#include "proto/meta39.h"
#include "base/rxbudget.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

const char *ezi_chan_id(const chan *c) { return c->id; }

int ezi_chan_sub_kind(const chan_sub *cs) {
  pthread_mutex_lock(&cs->ch->mu); /* (only while a tool traces: once per traced message) */
  const char *m = cs->ch->mode;
  pthread_mutex_unlock(&cs->ch->mu);
  return !m                    ? EZI_M39_CH_UNKNOWN
         : !strcmp(m, "local") ? EZI_M39_CH_LOCAL
         : !strcmp(m, "shm")   ? EZI_M39_CH_SHM
         : !strcmp(m, "tcp")   ? EZI_M39_CH_TCP
                               : EZI_M39_CH_UNKNOWN;
}

/* ---- the ring modes' share ------------------------------------------------------------------ */

int ezi_chan_ring_attach(chan *c, uint64_t next_id) {
  pthread_mutex_lock(&c->mu);
  ezi_lchan_start(&c->lr, next_id);
  int rc = 0;
  for (size_t i = 0; i < c->n_subs && !rc; i++)
    if (!c->subs[i]->gone) rc = ezi_lchan_add(&c->lr, c->subs[i]);
  if (rc) ezi_lchan_unjoin(&c->lr, 0); /* nothing was put yet */
  pthread_mutex_unlock(&c->mu);
  return rc;
}

int ezi_chan_ring_join(chan *c, chan_sub *cs) { return ezi_lchan_join(&c->lr, cs); }

json_t *ezi_chan_ring_member_json(chan_sub *cs, uint64_t now, double window_s,
                                  uint64_t *in_flight) {
  pthread_mutex_lock(cs->rv->mu); /* (a ring member's fields are its receiver's) */
  *in_flight = ezi_lchan_in_flight(cs);
  ezi_window_fold(cs->proc);
  json_t *j = cs->ops->profile(cs->sub, cs->proc, *in_flight, now, window_s);
  pthread_mutex_unlock(cs->rv->mu);
  return j;
}

void ezi_chan_sub_done(chan_sub *cs) {
  chan *c = cs->ch;
  ezi_chan_sub_free(cs);
  ezi_chan_unref(c);
}

void ezi_chan_wake_subs(chan *c) {
  pthread_mutex_lock(&c->mu);
  for (size_t i = 0; i < c->n_subs; i++)
    c->subs[i]->ops->wake(c->subs[i]->sub);
  pthread_mutex_unlock(&c->mu);
}

void ezi_chan_ack(chan *c, uint64_t msg_id) {
  if (!c->remote) return;
  uint8_t b[9] = {EZI_RX_ACK}; /* a closed link's outbox drops it */
  ezi_put_u64le(b + 1, msg_id);
  ezi_outbox_put(c->ctx, &c->acks, b, 9);
}

static void destroy_task(void *arg) { ezi_chan_destroy(arg); }

void ezi_chan_sub_free(chan_sub *cs) {
  if (!cs) return;
  free(cs->t0);
  ezi_window_free(cs->proc);
  free(cs);
}

void ezi_chan_unref(chan *c) {
  pthread_mutex_lock(&c->mu);
  int left = --c->refs;
  pthread_mutex_unlock(&c->mu);
  if (left > 0) return;
  if (ezi_loop_on_thread(c->ctx->loop))
    ezi_chan_destroy(c);
  else
    ezi_loop_post(c->ctx->loop, destroy_task, c);
}

/* ---- graph link ---------------------------------------------------------------------------- */

json_t *ezi_chan_profile(chan *c, double window_s) {
  uint64_t now = ezi_now_ns();
  window_s = ezi_clamp_window(window_s);
  json_t *j = json_object(), *subs = json_array();
  uint64_t in_flight = 0;
  pthread_mutex_lock(&c->mu);
  for (size_t i = 0; i < c->n_subs; i++) {
    chan_sub *cs = c->subs[i];
    uint64_t n = 0;
    json_t *sj = c->rx->member_json(cs, now, window_s, &n);
    json_array_append_new(subs, sj);
    in_flight += n;
  }
  const char *mode = c->mode;
  uint32_t window = c->rx->window ? c->lr.lsn : 0;
  pthread_mutex_unlock(&c->mu);
  json_object_set_new(j, "type", json_string("channel"));
  json_object_set_new(j, "channel_id", json_string(c->id));
  json_object_set_new(j, "pub_id", json_string(c->pub_id));
  json_object_set_new(j, "pid", json_integer(c->ctx->pid));
  json_object_set_new(j, "num_buffers", json_integer(c->nbuf));
  json_object_set_new(j, "mode", json_string(mode));
  /* Beyond the reference: notices from an ezmsg-c publisher come through a shared ring */
  json_object_set_new(j, "shm_ring", json_boolean(c->rx->shared_ring));
  /* ... and TCP messages beyond num_buffers may be in flight (0: the protocol's window) */
  json_object_set_new(j, "tcp_window", json_integer(window));
  json_object_set_new(j, "window_s", json_real(window_s));
  json_object_set_new(j, "in_flight", json_integer((json_int_t)in_flight));
  json_object_set_new(j, "subscribers", subs);
  json_object_set_new(j, "host", json_string(c->ctx->host));
  return j;
}

/* ---- creation and destruction (I/O thread) ------------------------------------------------- */

int ezi_chan_link_done(chan *c, int rc) {
  pthread_mutex_lock(&c->mu);
  size_t n = c->n_subs;
  chan_sub **waiting = malloc((n ? n : 1) * sizeof *waiting);
  if (!rc && !waiting) rc = EZ_ENOMEM;
  /* A remote publisher's notices fill slots; a local channel has its ring instead (whose
   * producer, the publisher, sets its callbacks as it attaches: ctx->local_pubs->attach). */
  if (!rc && c->local_pub)
    rc = ezi_lchan_ring_init(&c->lr, c->nbuf, NULL, c, c->pub_id);
  else if (!rc && !(c->slots = calloc(c->nslot = c->nbuf, sizeof *c->slots)))
    rc = EZ_ENOMEM;
  for (size_t i = 0; i < n && !rc; i++)
    if (!(c->subs[i]->t0 = calloc(c->nbuf, sizeof(uint64_t)))) rc = EZ_ENOMEM;
  c->state = rc ? CH_FAILED : CH_READY;
  if (waiting) memcpy(waiting, c->subs, n * sizeof *waiting);
  c->refs++; /* ours while the subscribers hear of it: they may leave, and UPDATEs follow */
  pthread_mutex_unlock(&c->mu);
  /* A local channel starts taking messages before its subscribers hear it is ready: a message
   * published once their creation returned must reach them. */
  if (!rc && c->local_pub && (rc = c->ctx->local_pubs->attach(c->local_pub, c))) {
    pthread_mutex_lock(&c->mu);
    c->state = CH_FAILED;
    c->local_pub = NULL;
    pthread_mutex_unlock(&c->mu);
  }
  if (rc) c->close_link(c);
  /* Tell each waiting subscriber; on failure they leave. */
  for (size_t i = 0; waiting && i < n; i++)
    waiting[i]->ops->joined(waiting[i]->sub, waiting[i], rc);
  free(waiting);
  pthread_mutex_lock(&c->mu);
  int left = --c->refs;
  pthread_mutex_unlock(&c->mu);
  if (left == 0) { /* every subscriber left meanwhile */
    ezi_chan_destroy(c);
    return rc ? rc : EZ_ECLOSED;
  }
  return rc;
}

void ezi_chan_link_lost(chan *c) {
  pthread_mutex_lock(&c->mu);
  if (c->state != CH_READY) {
    pthread_mutex_unlock(&c->mu);
    return;
  }
  c->state = CH_FAILED; /* no new subscriber joins it; a new channel is made for them */
  size_t n = c->n_subs;
  chan_sub **subs = n ? malloc(n * sizeof *subs) : NULL;
  if (subs) memcpy(subs, c->subs, n * sizeof *subs);
  pthread_mutex_unlock(&c->mu);
  if (n && !subs) {
    EZI_ERROR("channel %s: out of memory; its subscribers stay on the dead link", c->id);
    return;
  }
  /* Each leaves (the last one frees the channel) and joins the publisher again later. */
  for (size_t i = 0; i < n; i++)
    subs[i]->ops->lost(subs[i]->sub, subs[i]);
  free(subs);
}

void ezi_chan_pub_gone(chan *c) {
  pthread_mutex_lock(&c->mu);
  ez_pub *pub = c->local_pub;
  c->local_pub = NULL;
  while (c->pub_users)
    pthread_cond_wait(&c->cv, &c->mu); /* wake-ups in progress finish first */
  pthread_mutex_unlock(&c->mu);
  if (pub && c->lr.ls)
    c->ctx->local_pubs->hand_over(pub, &c->kept_seg, &c->kept_retired, c->kept_hot);
}

void ezi_chan_destroy(chan *c) {
  ez_context *ctx = c->ctx;
  pthread_mutex_lock(&ctx->mu);
  for (size_t i = 0; i < ctx->n_chans; i++) {
    if (ctx->chans[i] == c) {
      ctx->chans[i] = ctx->chans[--ctx->n_chans];
      break;
    }
  }
  pthread_mutex_unlock(&ctx->mu);
  pthread_mutex_lock(&c->mu);
  ez_pub *pub = c->local_pub;
  pthread_mutex_unlock(&c->mu);
  if (pub) {
    c->ctx->local_pubs->attach(pub, NULL);
    ezi_chan_pub_gone(c);
  }
  c->close_link(c);
  c->close_graph(c);
  ezi_notices_free(c); /* (a channel that changed mode may still keep spare buffers) */
  if (c->rx->free) c->rx->free(c);
  ezi_seg_unref(c->seg);
  ezi_seg_unref(c->kept_seg);
  free(c->kept_hot[0]);
  free(c->kept_hot[1]);
  ezi_seg_chain_free(c->kept_retired);
  free(c->slots);
  free(c->drops);
  ezi_lchan_ring_free(&c->lr);
  free(c->subs);
  pthread_mutex_destroy(&c->pull_mu);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
}

void ezi_chan_leave(chan_sub *cs, bool release_viewed) {
  chan *c = cs->ch;
  pthread_mutex_lock(&c->mu);
  for (size_t i = 0; i < c->n_subs; i++) {
    if (c->subs[i] == cs) {
      c->subs[i] = c->subs[--c->n_subs];
      break;
    }
  }
  const ezi_rx_mode *rx = c->rx;
  pthread_mutex_unlock(&c->mu);
  rx->leave(cs, release_viewed);
}
