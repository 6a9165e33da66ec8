/* A publisher's life (publisher.c): created through the graph server, destroyed, profiled. Its
 * state is pubstate.h. */
#ifndef EZI_PUBLISHER_H
#define EZI_PUBLISHER_H

#include "pub/pubstate.h"

/* The publisher lost its graph connection: if the server died (its lease hangs up within
 * LEASE_HANGUP_WAIT_MS), removes the names of the segments it asked for (ezi_seg_orphaned), so
 * that a SIGKILL of this process afterwards leaves nothing in /dev/shm. I/O thread. */
void ezi_pub_graph_gone(ez_pub *pub);
/* Profile JSON of a publisher (a new reference; NULL when out of memory). I/O thread. */
json_t *ezi_pub_profile(ez_pub *pub, double window_s);
/* Whether the graph server has answered the publisher's PUBLISH (it is one of its clients). Any
 * thread. */
bool ezi_pub_registered(ez_pub *pub);

#endif
