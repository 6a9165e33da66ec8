/* The one-shot requests to a graph server (their I/O: graphio.h). */
#ifndef EZI_GRAPHCLIENT_H
#define EZI_GRAPHCLIENT_H

#include <stddef.h>
#include <stdint.h>

/* PROFILE (the profiling dialect's, or our own server's in either) on a new connection: the
 * document's text into *json (malloc'd). 0 or an EZ_* code. */
int ezi_profile_request(const char *address, double window_s, char **json, uint64_t deadline);

#endif
