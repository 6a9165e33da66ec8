/* The released dialect's event streams in the graph server (gs_stream.c): the history of settings
 * and topology events, and the connections that subscribe to them and to the processes' profiling
 * traces. Server thread only. */
#ifndef EZI_GS_STREAM_H
#define EZI_GS_STREAM_H

#include "graph/gs.h"
#include "proto/gsparse.h"
#include "proto/meta39.h"

/* The event histories (0 or EZ_ENOMEM) and their freeing (NULL: no-op). */
int ezi_gs_events_init(server *s);
void ezi_gs_events_free(gs_events *e);
/* Records a SettingsChangedEvent (type: EZI_M39_INITIAL_SETTINGS / SETTINGS_UPDATED) and sends
 * it to the settings streams. value points into value_doc, which the event keeps. timestamp NULL:
 * now. Returns its sequence number (0 if it could not be made). */
int64_t ezi_gs_settings_event(server *s, int type, const char *address,
                              const ezi_m39_settings_value *value, ezi_pk_doc *value_doc,
                              const char *source_session, const char *source_process,
                              const double *timestamp);
/* Records a TopologyChangedEvent (EZI_M39_GRAPH_CHANGED / PROCESS_CHANGED) and sends it. Returns
 * its sequence number (0 if it could not be made). */
int64_t ezi_gs_topology_event(server *s, int type, const char *const *topics, size_t n,
                              const char *source_session, const char *source_process);
/* The settings history after `after`, as a pickled list[SettingsChangedEvent] (*out malloc'd:
 * the caller frees it). 0 or an error. */
int ezi_gs_settings_events_after(server *s, int64_t after, uint8_t **out, size_t *len);
/* SESSION_SETTINGS_SUBSCRIBE, SESSION_TOPOLOGY_SUBSCRIBE, SESSION_PROFILING_SUBSCRIBE on a new
 * connection c, which becomes a stream until it closes (a bad request closes it). */
void ezi_gs_stream_open(server *s, conn *c, const ezi_gs_req *q);
/* Python's int(str) for the `after_seq` strings: false if it is not one. */
bool ezi_gs_parse_seq(const char *p, size_t n, int64_t *out);

#endif
