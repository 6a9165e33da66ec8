/* The released dialect's process connections in the graph server (gs_process.c): a backend
 * process registers its pid, host and units, reports settings and profiling traces, and answers
 * the requests sessions route to the owner of a unit. Server thread only. */
#ifndef EZI_GS_PROCESS_H
#define EZI_GS_PROCESS_H

#include "graph/gs.h"
#include "proto/gsparse.h"

/* PROCESS: c becomes a process's control connection (answered `str id, COMPLETE`). When it
 * closes, requests routed to it are answered PROCESS_DISCONNECTED, its settings are undone, its
 * traces dropped, and a PROCESS_CHANGED event says so. */
void ezi_gs_process_open(server *s, conn *c);
/* One parsed request of a process connection. c may be closed. */
void ezi_gs_process_request(server *s, conn *c, const ezi_gs_req *q);
/* SESSION_PROCESS_REQUEST from session c: routes it to the process owning the unit; the answer
 * (or an error response) goes to c later, with c busy meanwhile. */
void ezi_gs_route(server *s, conn *c, const ezi_gs_req *q);
/* The session c left: its routed requests are abandoned (their answers are dropped). */
void ezi_gs_routes_session_gone(server *s, conn *c);
/* A process's registration for snapshots: *pid (-1: none), *host (NULL: none), its units
 * (borrowed until the process's next request). */
void ezi_gs_process_info(const conn *c, bool *registered, int64_t *pid, const char **host,
                         const char *const **units, size_t *n_units);

#endif
