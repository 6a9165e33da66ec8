/* The graph server's side of the released dialect's control plane (ezmsg 3.9.0): sessions
 * (gs_session.c), processes and the requests routed to them (gs_process.c), the settings they
 * report (gs_settings.c), and the event streams (gs_stream.c). docs/protocol39.md describes the
 * bytes. Server thread only. */
#ifndef EZI_GS_RELEASED_H
#define EZI_GS_RELEASED_H

#include "graph/gs.h"
#include "proto/gsparse.h"
#include "proto/meta39.h"

/* The attribute our server adds to the GraphSnapshots it sends (a str: the ezmsg version it
 * greets with): a released-dialect client of ours that finds it knows it may send PROFILE. */
#define EZI_GS_MARK_ATTR "ezmsg_c_server"

/* ---- gs_session.c --------------------------------------------------------------------------- */

/* SESSION: c becomes a session (answered `str id, COMPLETE`). */
void ezi_gs_session_open(server *s, conn *c);
/* One parsed request of a session. It may leave c busy (answered later); c may be closed. */
void ezi_gs_session_request(server *s, conn *c, const ezi_gs_req *q);
/* The session's connection closed: its edges go (subscribers are told), its metadata and the
 * settings it brought, and its routed requests are forgotten. */
void ezi_gs_session_closed(server *s, conn *c);
/* The session whose registered metadata has a component at `address`, or NULL. */
conn *ezi_gs_session_of_component(server *s, const char *address);
/* A session's id / metadata (NULL: none registered). */
const ezi_pk *ezi_gs_session_meta(const conn *c);
ezi_pk_doc *ezi_gs_session_meta_doc(const conn *c);
/* Session c's request was answered: it goes on with the next one (at the next loop turn). */
void ezi_gs_session_answered(conn *c);
/* A finished OP_SESSION op: its byte to the session, which goes on with its next request. */
void ezi_gs_session_reply(op *o);

/* ---- gs_process.c --------------------------------------------------------------------------- */

/* PROCESS: c becomes a process's control connection (answered `str id, COMPLETE`). */
void ezi_gs_process_open(server *s, conn *c);
/* One parsed request of a process connection. c may be closed. */
void ezi_gs_process_request(server *s, conn *c, const ezi_gs_req *q);
/* The process's connection closed: requests routed to it are answered PROCESS_DISCONNECTED, its
 * settings are undone, its traces dropped, and a PROCESS_CHANGED event says so. */
void ezi_gs_process_closed(server *s, conn *c);
/* SESSION_PROCESS_REQUEST from session c: routes it to the process owning the unit; the answer
 * (or an error response) goes to c later, with c busy meanwhile. */
void ezi_gs_route(server *s, conn *c, const ezi_gs_req *q);
/* The session c left: its routed requests are abandoned (their answers are dropped). */
void ezi_gs_routes_session_gone(server *s, conn *c);
/* The process connection owning unit `address`, or NULL. */
conn *ezi_gs_process_of_unit(server *s, const char *address);
/* True if process connection c owns unit `address`. */
bool ezi_gs_process_owns(const conn *c, const char *address);
/* A process's registration for snapshots: *pid (-1: none), *host (NULL: none), its units. */
void ezi_gs_process_info(const conn *c, bool *registered, int64_t *pid, const char **host,
                         const char *const **units, size_t *n_units);
/* Up to max of process c's trace samples after sequence number `after` (an `after` older than
 * what is kept starts at the oldest kept) into *b (b->samples malloc'd: the caller frees it; its
 * strings live in the process's buffer until the next server callback), *upto the sequence
 * number of the last one, *lost how many after `after` went before this reader took them (a
 * reader too slow; 0 for a reader's first batch, `after` 0). 0 or EZ_ENOMEM. */
int ezi_gs_process_trace_batch(conn *c, int64_t after, size_t max, ezi_m39_trace_batch *b,
                               int64_t *upto, uint64_t *lost);

/* ---- gs_settings.c -------------------------------------------------------------------------- */

/* Session c registered metadata (kept in c): its components' initial settings become the
 * current ones (unless a process reported its own), with INITIAL_SETTINGS events. */
void ezi_gs_settings_session_meta(server *s, conn *c);
/* Session c's metadata goes (re-registered or closed): settings only it brought go. */
void ezi_gs_settings_session_gone(server *s, conn *c);
/* A process reported a component's settings: 0, or EZ_EPROTO if it does not own the unit (the
 * answer is ERROR). The value's document is kept. */
int ezi_gs_settings_process_update(server *s, conn *proc, const ezi_m39_settings_update *u,
                                   ezi_pk_doc *doc);
/* The process left: the settings it reported go back to the metadata's initial ones. */
void ezi_gs_settings_process_gone(server *s, conn *proc);
/* The current settings as a pickled dict[str, SettingsSnapshotValue], sorted by address. */
int ezi_gs_settings_snapshot(server *s, uint8_t **out, size_t *len);
/* Frees every setting (the server stops). */
void ezi_gs_settings_free(server *s);

/* ---- gs_stream.c ---------------------------------------------------------------------------- */

/* The event histories (0 or EZ_ENOMEM) and their freeing. */
int ezi_gs_events_init(server *s);
void ezi_gs_events_free(gs_events *e);
/* Records a SettingsChangedEvent (type: EZI_M39_INITIAL_SETTINGS / SETTINGS_UPDATED) and sends
 * it to the settings streams. value points into value_doc, which the event keeps. timestamp NULL:
 * now. Returns its sequence number (0 if it could not be made). */
int64_t ezi_gs_settings_event(server *s, int type, const char *address,
                              const ezi_m39_settings_value *value, ezi_pk_doc *value_doc,
                              const char *source_session, const char *source_process,
                              const double *timestamp);
/* Records a TopologyChangedEvent (EZI_M39_GRAPH_CHANGED / PROCESS_CHANGED) and sends it. */
int64_t ezi_gs_topology_event(server *s, int type, const char *const *topics, size_t n,
                              const char *source_session, const char *source_process);
/* The settings history after `after`, as a pickled list[SettingsChangedEvent]. */
int ezi_gs_settings_events_after(server *s, int64_t after, uint8_t **out, size_t *len);
/* SESSION_SETTINGS_SUBSCRIBE, SESSION_TOPOLOGY_SUBSCRIBE, SESSION_PROFILING_SUBSCRIBE on a new
 * connection c. */
void ezi_gs_stream_open(server *s, conn *c, const ezi_gs_req *q);
void ezi_gs_stream_closed(server *s, conn *c);
/* Python's int(str) for the `after_seq` strings: false if it is not one. */
bool ezi_gs_parse_seq(const char *p, size_t n, int64_t *out);

#endif
