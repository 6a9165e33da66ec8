/* What a publisher waits for, in words (pubdebug.c). */
#ifndef EZI_PUBDEBUG_H
#define EZI_PUBDEBUG_H

#include "pub/pubstate.h"

/* Writes to buf (cap bytes, NUL-terminated, cut short if need be) what p waits for:
 * its next slot, who holds it, each channel's mode, outbox and shared ring words. Returns the
 * length written. Takes p->mu and each outbox's lock (the caller holds neither). For a publish
 * that timed out (tests print it). */
size_t ezi_pub_describe(ez_pub *p, char *buf, size_t cap);

#endif
