/* PROFILE at the graph server (gs_profile.c): the request fanned out to every profiled publisher
 * and channel, their PROFILE_DATA gathered, and one document answered. Server thread only. */
#ifndef EZI_GS_PROFILE_H
#define EZI_GS_PROFILE_H

#include "graph/gs.h"

/* PROFILE(window_ms) from c: every publisher and channel of ezmsg-c (in the profiling dialect,
 * Python's too) is asked; c gets PROFILE_DATA once all answered, left, or PROFILE_TIMEOUT_NS
 * passed (c may be closed: out of memory). */
void ezi_gs_profile(server *s, conn *c, uint64_t window_ms);
/* PROFILE_DATA (json, n bytes) from publisher or channel c: its answer to the oldest PROFILE it
 * owes one. One that is not a JSON object of the right "type" is logged and left out. */
void ezi_gs_profile_data(server *s, conn *c, const char *json, size_t n);
/* X_CTX from c (payload: its EZI_X_CTX_PAYLOAD bytes): c's context, through which PROFILE asks
 * it from now on. A malformed one closes c. */
void ezi_gs_profile_ctx(server *s, conn *c, const uint8_t *payload);
/* X_PROFILE_PART (one endpoint's JSON, as PROFILE_DATA's) and X_PROFILE_END from c, the answer to
 * the oldest X_PROFILE_CTX it owes one (ignored if it owes none). A part that is unusable, or
 * beyond EZI_CTX_PARTS_MAX of its context, is logged and left out. */
void ezi_gs_profile_part(server *s, conn *c, const char *json, size_t n);
void ezi_gs_profile_end(server *s, conn *c);

#endif
