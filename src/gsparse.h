/* The graph server's request parser: pure (no I/O, no allocation), so it can be fuzzed at full
 * speed. graphserver.c feeds it the bytes a connection has buffered and acts on what it returns. */
#ifndef EZI_GSPARSE_H
#define EZI_GSPARSE_H

#include <stddef.h>
#include <stdint.h>

/* What the server expects next from a connection. */
typedef enum {
  EZI_GS_COMMAND,  /* a fresh connection: one request (command byte and its arguments) */
  EZI_GS_PUB_ADDR, /* a publisher registering: the str address of its channel server */
  EZI_GS_CLIENT,   /* a registered client: COMPLETE, PROFILE_DATA and its str, or X_SUB_INFO */
} ezi_gs_phase;

/* One parsed frame. Strings are views into the input (not NUL-terminated). */
typedef struct ezi_gs_req {
  uint8_t cmd;       /* the command byte (0 in EZI_GS_PUB_ADDR) */
  const char *a, *b; /* string arguments, in order */
  size_t na, nb;
  uint64_t u1, u2; /* integer arguments, in order */
  size_t used;     /* bytes the frame took (when complete) */
  size_t need;     /* bytes needed in all before it can be complete (when short) */
} ezi_gs_req;

/* Parses one frame from p[0, len). Returns 1 (complete), 0 (more bytes needed: req->need says how
 * many in all) or EZ_EMSGSIZE (a string longer than EZ_MAX_CONTROL_STR). Unknown command bytes
 * parse as complete one-byte frames: the caller decides what is allowed. */
int ezi_gs_parse(ezi_gs_phase phase, const uint8_t *p, size_t len, ezi_gs_req *req);

#endif
