/* The graph server's request parser: pure (no I/O, no allocation), so it can be fuzzed at full
 * speed. graphserver.c feeds it the bytes a connection has buffered and acts on what it returns. */
#ifndef EZI_GSPARSE_H
#define EZI_GSPARSE_H

#include <stddef.h>
#include <stdint.h>

/* The largest pickle payload (u64 size, then the bytes) a released-dialect request may carry:
 * a GraphMetadata, a trace batch, a process's answer. Larger is EZ_EMSGSIZE. */
#define EZI_GS_MAX_PAYLOAD ((size_t)8 << 20)
/* ... and the ProfilingStreamControl of SESSION_PROFILING_SUBSCRIBE (a few hundred bytes). */
#define EZI_GS_MAX_CONTROL_PAYLOAD ((size_t)64 << 10)

/* What the server expects next from a connection. */
typedef enum {
  EZI_GS_COMMAND,  /* a fresh connection: one request (command byte and its arguments) */
  EZI_GS_PUB_ADDR, /* a publisher registering: the str address of its channel server */
  EZI_GS_CLIENT,   /* a registered client: COMPLETE, PROFILE_DATA and its str, X_SUB_INFO, X_CTX
                    * (its payload in pl), X_PROFILE_PART and its str, X_PROFILE_END */
  EZI_GS_SESSION,  /* a GraphContext session (released dialect): its requests */
  EZI_GS_PROCESS,  /* a process's control connection (released dialect): its requests */
  EZI_GS_NPHASES
} ezi_gs_phase;

/* One parsed frame. Strings and the payload are views into the input (not NUL-terminated). */
typedef struct ezi_gs_req {
  uint8_t cmd;           /* the command byte (0 in EZI_GS_PUB_ADDR) */
  const char *a, *b, *c; /* string arguments, in order */
  size_t na, nb, nc;
  uint64_t u1, u2;   /* integer arguments, in order */
  const uint8_t *pl; /* a payload (u64 size and bytes; its size in npl) */
  size_t npl;
  size_t used; /* bytes the frame took (when complete) */
  size_t need; /* bytes needed in all before it can be complete (when short) */
} ezi_gs_req;

/* Parses one frame from p[0, len). Returns 1 (complete), 0 (more bytes needed: req->need says how
 * many in all) or EZ_EMSGSIZE (a string longer than EZ_MAX_CONTROL_STR, or a payload beyond its
 * limit). Unknown command bytes parse as complete one-byte frames: the caller decides what is
 * allowed.
 *
 * In EZI_GS_COMMAND, PROFILE (the profiling dialect's 21, with a u64) and SESSION (the released
 * dialect's 21, alone) share a byte: 21 parses as PROFILE, short until its u64 is there. Only the
 * caller can tell a SESSION from a PROFILE whose u64 is late (graphserver.c waits a little). */
int ezi_gs_parse(ezi_gs_phase phase, const uint8_t *p, size_t len, ezi_gs_req *req);

#endif
