/* Hot buffers: where a copying publisher puts a large message that only this process reads.
 *
 * The protocol puts message k in slot k % num_buffers of the publisher's segment. With 32 slots of
 * 1 MiB, every copy then writes 32 MiB of memory in turn, which no cache holds: an in-process
 * stream of 1 MiB copies ran at 13 GB/s, against ZeroMQ's 21 GB/s (its allocator hands back the
 * buffer the receiver just freed, still in the cache), and at 37 GB/s with 2 to 8 slots.
 *
 * So when every channel of the publisher is in this process (no remote one, whose reader needs the
 * slot) and a message is large, ez_publish copies it into one of two buffers of the publisher's
 * own instead, if the local channel's members released the message it held last: while they keep
 * up, the same one or two buffers carry every message. The slot is still taken and released as
 * before, so backpressure is unchanged; only where the bytes live differs. When the publisher goes,
 * the buffers go to the local channel with its segments (ezi_pub_hand_over), since queued messages
 * and views may still point into them. */
#include "chan/channel.h"
#include "pub/pubhot.h"

#include <stdlib.h>

/* Whether the message a hot buffer holds is released by every local member (p->mu held): its
 * entry no longer names it (the slot was reused, which waits for that), or nobody holds it. */
static bool hot_free(ez_pub *p, const struct ezi_hot *h) {
  if (!h->used) return true;
  uint32_t idx = (uint32_t)(h->msg % p->nbuf);
  uint64_t freed;
  return ezi_lchan_msg_id(&p->local->lr, idx) != h->msg ||
         ezi_lchan_slot_free(&p->local->lr, idx, &freed);
}

uint8_t *ezi_pub_hot_take(ez_pub *p, uint64_t id, size_t len) {
  if (len < EZI_HOT_MIN || !p->local || p->n_chans) return NULL;
  for (int j = 0; j < 2; j++) {
    struct ezi_hot *h = &p->hot[(p->hot_last + j) % 2]; /* the last one first: the warmest */
    if (!hot_free(p, h)) continue;
    if (h->cap < len) {
      uint8_t *nb = malloc(len);
      if (!nb) return NULL; /* the slot will do */
      free(h->p);
      h->p = nb;
      h->cap = len;
    }
    h->used = true;
    h->msg = id;
    p->hot_last = (p->hot_last + j) % 2;
    return h->p;
  }
  return NULL;
}

void ezi_pub_hot_reset(ez_pub *p) {
  for (int j = 0; j < 2; j++)
    p->hot[j].used = false;
}

void ezi_pub_hot_hand_over(ez_pub *p, uint8_t **out) {
  for (int j = 0; j < 2; j++) {
    out[j] = p->hot[j].p;
    p->hot[j] = (struct ezi_hot){0};
  }
}

void ezi_pub_hot_free(ez_pub *p) {
  for (int j = 0; j < 2; j++)
    free(p->hot[j].p);
}
