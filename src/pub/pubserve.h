/* A publisher's I/O-thread half (pubserve.c): its channel server and its graph link. */
#ifndef EZI_PUBSERVE_H
#define EZI_PUBSERVE_H

#include "pub/pubstate.h"

/* Starts serving channels on listen_fd and the graph link on graph_fd (the I/O thread watches
 * both); stops it. */
int ezi_pub_serve_start(ez_pub *pub, int graph_fd, int listen_fd);
void ezi_pub_serve_stop(ez_pub *pub);

#endif
