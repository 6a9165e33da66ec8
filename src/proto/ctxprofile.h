/* ezmsg-c's per-process PROFILE: the frames by which our graph server asks one client of each
 * ezmsg-c context for the profile of every publisher and channel of that context, where PROFILE
 * asks each endpoint on its own connection (one request, one wake-up and one answer per endpoint:
 * with 2 000 endpoints in 50 processes, most of a profile's time). The bytes are in base/wire.h
 * (EZI_X_CTX ...) and docs/profiling.md. Pure: no I/O. */
#ifndef EZI_CTXPROFILE_H
#define EZI_CTXPROFILE_H

#include "base/wire.h"

#include <stdbool.h>
#include <stdint.h>

#define EZI_CTXID_BYTES 16 /* a context's id: a UUID's 16 bytes */
/* X_CTX's payload after its command byte: each nibble of the id as one byte 0xf0 | nibble (never
 * 0x00, 0x16 or 0xec, the bytes some server acts on from a registered client: see wire.h). */
#define EZI_X_CTX_PAYLOAD (2 * EZI_CTXID_BYTES)
/* The most X_PROFILE_PART frames a server takes from one context per profile, by the number of
 * that context's endpoints it knows (more are dropped, so that a client cannot make it keep
 * more than about one answer per endpoint; the slack covers endpoints made meanwhile). */
#define EZI_CTX_PARTS_MAX(known) ((size_t)(known) + 16)

/* Appends X_CTX for the context whose id is `uuid` (its text form, 36 characters). 0,
 * EZ_EINVAL (not a UUID) or EZ_ENOMEM. */
int ezi_xctx_encode(ezi_buf *b, const char *uuid);
/* Decodes X_CTX's EZI_X_CTX_PAYLOAD bytes into id: false if a byte is not 0xf0 | nibble. */
bool ezi_xctx_decode(const uint8_t *p, uint8_t id[EZI_CTXID_BYTES]);

#endif
