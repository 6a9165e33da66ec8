/* The two wire dialects of ezmsg and how a peer's is told.
 *
 * - EZ_DIALECT_PROFILING: the `feature/profiling` branch (it greets as 3.6.2): commands 0-22 with
 *   PROFILE / PROFILE_DATA (21, 22); in the channel handshake the publisher sends only its
 *   segment's name.
 * - EZ_DIALECT_RELEASED: released ezmsg since 3.7.0 (3.7, 3.8, 3.9): the publisher sends its topic
 *   and then the segment's name. 3.9.0 also replaced 21 and 22 with SESSION_* (21-32),
 *   PROCESS_* (33-39) and ERROR (40), and its DAG pickle carries edge owners.
 *
 * A client knows its server's dialect from the greeting (the version string the server sends
 * first). A channel knows its publisher's from the shape of the handshake (ezi_dialect_is_segment_
 * name). A publisher cannot tell a channel's: it speaks its graph server's. Pure functions, any
 * thread. */
#ifndef EZI_DIALECT_H
#define EZI_DIALECT_H

#include "ezmsg/ezmsg.h"

#include <stdbool.h>
#include <stddef.h>

/* The greetings our own server sends in each dialect. */
#define EZI_GREETING_PROFILING "3.6.2"
#define EZI_GREETING_RELEASED "3.9.0"

/* What a greeting says about the server that sent it. */
typedef struct ezi_peer_version {
  int dialect;   /* EZ_DIALECT_PROFILING or EZ_DIALECT_RELEASED */
  int minor;     /* 3.<minor>; 0 if the version did not parse */
  bool sessions; /* SESSION_* / PROCESS_* commands (3.9 and later) */
} ezi_peer_version;

/* Reads a server's greeting (n bytes, not NUL-terminated): 3.6.x is the profiling dialect; 3.7
 * and later (and anything that does not parse as 3.x) the released one; sessions from 3.9 on.
 * $EZMSG_DIALECT (ezi_dialect_forced) overrides the dialect, not `sessions`. */
ezi_peer_version ezi_dialect_of_greeting(const char *ver, size_t n);

/* $EZMSG_DIALECT: EZ_DIALECT_PROFILING for "profiling", EZ_DIALECT_RELEASED for "released", 0
 * for unset, empty or "auto"; anything else is logged (once) and read as 0. */
int ezi_dialect_forced(void);

/* The name of a dialect for logs and profiles: "profiling", "released" or "?". */
const char *ezi_dialect_name(int dialect);

/* The shape rule of the channel handshake: true if the first string a publisher sends (n bytes)
 * can be a segment name, which makes it a profiling-dialect publisher (a released one sends its
 * topic first). Segment names are "psm_" and then letters, digits and '_' (Python's are "psm_"
 * and 8 hex digits, ours "psm_ez" and 8), or empty (no segment): a topic of that form would be
 * misread, and no ezmsg topic looks like that (they are paths of component names). */
bool ezi_dialect_is_segment_name(const char *s, size_t n);

#endif
