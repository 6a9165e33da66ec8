/* The released dialect's GraphContext sessions in the graph server (gs_session.c). Server thread
 * only. */
#ifndef EZI_GS_SESSION_H
#define EZI_GS_SESSION_H

#include "graph/gs.h"
#include "proto/gsparse.h"

/* SESSION: c becomes a session (answered `str id, COMPLETE`). When it closes, its edges go
 * (subscribers are told), its metadata and the settings it brought, and its routed requests are
 * forgotten. */
void ezi_gs_session_open(server *s, conn *c);
/* One parsed request of a session. It may leave c busy (answered later); c may be closed. */
void ezi_gs_session_request(server *s, conn *c, const ezi_gs_req *q);

#endif
