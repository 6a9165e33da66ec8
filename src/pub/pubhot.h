/* Hot buffers: large messages only this process reads skip the shared segment (pubhot.c). */
#ifndef EZI_PUBHOT_H
#define EZI_PUBHOT_H

#include "pub/pubstate.h"

/* ezi_pub_hot_take (p->mu held): a buffer to copy message id's len payload bytes into instead of
 * its slot, or NULL (use the slot): only with no remote channel, for messages of at least
 * EZI_HOT_MIN bytes, and while the local members released one of the two buffers.
 * ezi_pub_hot_hand_over: the buffers go to the local channel (out[2]; it frees them), the publisher
 * is going away. ezi_pub_hot_reset: the local channel left (its members released everything).
 * ezi_pub_hot_free: at the publisher's end. */
#define EZI_HOT_MIN 65536
uint8_t *ezi_pub_hot_take(ez_pub *p, uint64_t id, size_t len);
void ezi_pub_hot_hand_over(ez_pub *p, uint8_t **out);
void ezi_pub_hot_reset(ez_pub *p);
void ezi_pub_hot_free(ez_pub *p);

#endif
