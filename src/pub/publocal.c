/* The in-process receive mode: the publisher puts into its local channel's ring under its own
 * lock (pubsend.c, ring/localchan.c), and a release that frees the entry it sleeps for wakes it
 * through that lock. */
#include "pub/publocal.h"
#include "chan/channel.h"
#include "pub/pubstate.h"
#include "pub/pubwait.h"

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
    .name = "in-process",
    .ring = true,
    EZI_RING_MEMBER_OPS,
    .producer = &producer,
};
