/* Blocking exchanges with a graph server, bounded by a deadline (graphio.c); declared in
 * graphclient.h until the next commit moves them here. */
#ifndef EZI_GRAPHIO_H
#define EZI_GRAPHIO_H
#include "graph/graphclient.h"
#endif
