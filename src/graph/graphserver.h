/* What the rest of the library asks of an embedded graph server (the public calls are in
 * ezmsg.h). */
#ifndef EZI_GRAPHSERVER_H
#define EZI_GRAPHSERVER_H

#include "ezmsg/ezmsg.h"

#include <stdint.h>

/* The version string the server greets its clients with (EZ_VERSION or EZ_VERSION_PROFILING, by
 * its dialect). Owned by the server. Any thread. */
const char *ezi_server_greeting(const ez_server *srv);

/* How long a lone byte 21 on a new connection waits for the 8 bytes that would make it a
 * profiling-dialect PROFILE before it is taken for a released-dialect SESSION (SNIFF_NS unless
 * changed), as every server in this process uses it: a fuzz target sets it to 0 (its sessions
 * send nothing after 21 until answered). Set it before starting servers. */
extern uint64_t ezi_gs_sniff_ns;

#endif
