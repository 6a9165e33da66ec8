/* A blocking client of a released-dialect (3.9.0) graph server's session: what a GraphContext
 * does, for our one-shot tools (profiles, traces, topic listings). Every call has a deadline. Any
 * thread; one session is used by one thread at a time. docs/protocol39.md has the bytes. */
#ifndef EZI_SESSCLIENT_H
#define EZI_SESSCLIENT_H

#include "proto/meta39.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ezi_sess {
  int fd;
  char id[37];
} ezi_sess;

/* Opens a session at `address` (NULL: env / default). The server must speak the released
 * dialect with sessions (3.9 or later): otherwise EZ_ENOTSUP, before anything is sent. 0, or
 * EZ_ENOSERVER, EZ_ETIMEDOUT, EZ_EPROTO, ... */
int ezi_sess_open(const char *address, uint64_t deadline, ezi_sess *s);
void ezi_sess_close(ezi_sess *s);

/* SESSION_SNAPSHOT: the GraphSnapshot (*doc, caller frees, owns what *gs points to); *ours
 * (may be NULL) tells whether the server is ezmsg-c's (it answers PROFILE too). */
int ezi_sess_snapshot(ezi_sess *s, uint64_t deadline, ezi_pk_doc **doc, ezi_m39_graph_snapshot *gs,
                      bool *ours);

/* SESSION_PROCESS_REQUEST: routes `operation` to the process owning `unit`, waiting at most
 * timeout_s there (the server answers TIMEOUT after it). The response (*doc, caller frees) into
 * *resp. payload may be NULL (None). */
int ezi_sess_request(ezi_sess *s, const char *unit, const char *operation, double timeout_s,
                     const uint8_t *payload, size_t n, uint64_t deadline, ezi_pk_doc **doc,
                     ezi_m39_control_response *resp);

#endif
