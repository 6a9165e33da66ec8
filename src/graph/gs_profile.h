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

#endif
