/* A segment attached without blocking the I/O thread (segattach.c). */
#ifndef EZI_SEGATTACH_H
#define EZI_SEGATTACH_H

#include "core/segment.h"

typedef struct ez_context ez_context;

/* ezi_seg_attach without blocking, on the I/O thread. fn(arg, 0, seg) gets the
 * mapped segment (a reference the callee owns), or fn(arg, rc, NULL) an error: EZ_ENOENT (the
 * server has no such segment), EZ_ETIMEDOUT after timeout_ms (< 0: no limit), EZ_ENOSERVER,
 * EZ_ECONNLOST, EZ_EPROTO, or what mapping it returned. fn runs once, on the I/O thread, never
 * from within ezi_attach_start, and not after ezi_attach_cancel. Start returns 0 (and *out), or an
 * error and then fn is never called. I/O thread only. */
typedef struct ezi_attach ezi_attach;
typedef void (*ezi_attach_fn)(void *arg, int rc, ezi_seg *seg);
int ezi_attach_start(ez_context *ctx, const char *name, int timeout_ms, ezi_attach_fn fn, void *arg,
                     ezi_attach **out);
/* Abandons an attempt still running (NULL: nothing). */
void ezi_attach_cancel(ezi_attach *a);

#endif
