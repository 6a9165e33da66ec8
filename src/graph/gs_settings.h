/* The released dialect's component settings as the graph server holds them (gs_settings.c): the
 * initial ones of the metadata sessions register, the values processes report, and the events
 * that tell the settings streams. Knows sessions and processes only by their ids. Server thread
 * only. */
#ifndef EZI_GS_SETTINGS_H
#define EZI_GS_SETTINGS_H

#include "graph/gs.h"
#include "proto/meta39.h"

/* Session `session` (an id) registered metadata `meta` (in doc, which the settings keep): its
 * components' initial settings become the current ones (unless a process reported its own), with
 * INITIAL_SETTINGS events. */
void ezi_gs_settings_session_meta(server *s, const char *session, const ezi_pk *meta,
                                  ezi_pk_doc *doc);
/* The session's metadata goes (re-registered or closed): settings only it brought go. */
void ezi_gs_settings_session_gone(server *s, const char *session);
/* Process `process` (an id), which owns the unit (the caller checked), reported a component's
 * settings: 0, EZ_EPROTO if the value is not a SettingsSnapshotValue, or EZ_ENOMEM. The value's
 * document is kept. */
int ezi_gs_settings_process_update(server *s, const char *process, const ezi_m39_settings_update *u,
                                   ezi_pk_doc *doc);
/* The process left: the settings it reported go back to the metadata's initial ones. */
void ezi_gs_settings_process_gone(server *s, const char *process);
/* The current settings as a pickled dict[str, SettingsSnapshotValue], sorted by address (*out
 * malloc'd: the caller frees it). 0 or an error. */
int ezi_gs_settings_snapshot(server *s, uint8_t **out, size_t *len);
/* Frees every setting (the server stops). */
void ezi_gs_settings_free(server *s);

#endif
