/* The profile of a released-dialect graph (3.9.0, or our own server in that dialect): see
 * profile39.c. */
#ifndef EZI_PROFILE39_H
#define EZI_PROFILE39_H

#include <stdbool.h>

/* ez_profile's document for a server with sessions: through a session, every process's
 * snapshot (and, from our own server, PROFILE for its ezmsg-c clients). *json malloc'd. Returns 0
 * or an EZ_* code. Any thread. */
int ezi_profile39(const char *address, double window_s, int timeout_ms, char **json);
/* The same, with `as_foreign` reading our own server as it reads 3.9.0's: every process, ezmsg-c
 * ones included, through its snapshot (what tests use to check that path without Python). */
int ezi_profile39_as(const char *address, double window_s, int timeout_ms, char **json,
                     bool as_foreign);

#endif
