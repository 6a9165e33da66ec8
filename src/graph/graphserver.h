/* What the rest of the library asks of an embedded graph server (the public calls are in
 * ezmsg.h). */
#ifndef EZI_GRAPHSERVER_H
#define EZI_GRAPHSERVER_H

#include "ezmsg/ezmsg.h"

/* The version string the server greets its clients with (EZ_VERSION or EZ_VERSION_PROFILING, by
 * its dialect). Owned by the server. Any thread. */
const char *ezi_server_greeting(const ez_server *srv);

#endif
