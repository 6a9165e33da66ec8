/* The in-process receive mode: the publisher puts into its local channel's ring under its own
 * lock (pubsend.c, ring/localchan.c), and a release that frees the entry it sleeps for wakes it
 * through that lock. And how a channel of this process finds its publisher, attaches to it and
 * takes over its memory when it goes (ezi_local_pubs, which every publisher registers in its
 * context). */
#include "pub/publocal.h"
#include "chan/channel.h"
#include "pub/pubstate.h"
#include "pub/pubwait.h"
#include "pub/pubhot.h"

#include <string.h>

/* The producer's freed (ezi_lring_ops): the publisher reads the entry's holder count itself when it
 * needs the slot again; it is woken only if it announced that it sleeps for this entry (or any). */
static bool local_freed(ezi_lring *r, uint32_t idx, uint64_t msg_id, uint64_t now, bool more) {
  (void)msg_id;
  (void)now;
  (void)more;
  return ezi_lchan_wanted(r, idx);
}

/* The producer's wake (ezi_lring_ops): the publisher sleeps on pub->cv: it is woken through its
 * lock (pub_users keeps it alive meanwhile: ezi_chan_pub_gone waits for them). */
static void local_wake(ezi_lring *r, uint64_t msg_id) {
  (void)msg_id;
  chan *c = r->owner;
  pthread_mutex_lock(&c->mu);
  ez_pub *pub = c->local_pub;
  if (pub) c->pub_users++;
  pthread_mutex_unlock(&c->mu);
  if (!pub) return;
  ezi_pub_local_wake(pub);
  pthread_mutex_lock(&c->mu);
  if (--c->pub_users == 0) pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

/* The producer's memb_mu (ezi_lring_ops): the publisher's lock; none once the publisher is gone
 * (nobody puts any more; only the I/O thread clears local_pub). */
static pthread_mutex_t *local_memb_mu(ezi_lring *r) {
  chan *c = r->owner;
  return c->local_pub ? &c->local_pub->mu : NULL;
}

static const ezi_lring_ops producer = {
    .freed = local_freed,
    .wake = local_wake,
    .memb_mu = local_memb_mu,
    .producer_trims = true,
};

const ezi_rx_mode ezi_rx_in_process = {
    .ring = true,
    EZI_RING_MEMBER_OPS,
    .producer = &producer,
};

/* ---- what a channel of this process asks of its publisher (core/context.h) ---------------- */

/* ezi_local_pubs.find. */
static ez_pub *local_find(ez_context *ctx, const char *id, uint32_t *nbuf) {
  for (size_t i = 0; i < ctx->n_pubs; i++)
    if (!strcmp(ctx->pubs[i]->id, id)) {
      *nbuf = ctx->pubs[i]->nbuf;
      return ctx->pubs[i];
    }
  return NULL;
}

/* ezi_local_pubs.attach. */
static int local_attach(ez_pub *p, chan *c) {
  pthread_mutex_lock(&p->mu);
  int rc = 0;
  if (c) {
    c->lr.ops = ezi_rx_in_process.producer; /* (no member yet: they come with the attach) */
    c->rx = &ezi_rx_in_process;
    rc = ezi_chan_ring_attach(c, p->next_id);
    if (!rc) p->local = c;
  } else if (p->local) { /* the local channel leaves (its members released everything) */
    ezi_pub_harvest_all(p);
    for (uint32_t i = 0; i < p->nbuf; i++)
      if (p->local_t0[i]) { /* cannot happen: a member still held it */
        p->local_t0[i] = 0;
        p->in_flight--;
      }
    p->local = NULL;
    ezi_pub_hot_reset(p);
    ezi_pub_check_sync(p);
    if (p->waiters) ezi_pub_broadcast(p);
  }
  pthread_mutex_unlock(&p->mu);
  return rc;
}

/* ezi_local_pubs.hand_over. */
static void local_hand_over(ez_pub *p, ezi_seg **seg, ezi_seg_chain **retired, uint8_t **hot) {
  pthread_mutex_lock(&p->mu);
  ezi_seg_ref(p->seg);
  *seg = p->seg;
  *retired = p->retired;
  p->retired = NULL;
  ezi_pub_hot_hand_over(p, hot);
  pthread_mutex_unlock(&p->mu);
}

const ezi_local_pubs_ops ezi_local_pubs = {
    .find = local_find,
    .attach = local_attach,
    .hand_over = local_hand_over,
};
