/* The graph server's answer to a channel's CHANNEL registration: its greeting (the version
 * string), COMPLETE, the channel id and the publisher's address. A pure parser, shared by the
 * channel's registration (chanreg.c) and its fuzz target. */
#ifndef EZI_REGFRAME_H
#define EZI_REGFRAME_H

#include <stddef.h>
#include <stdint.h>

#define EZI_REG_MAX_STR 300 /* the longest string of the answer we accept */

typedef struct ezi_reg_answer {
  const char *version; /* views into the input, not NUL-terminated */
  size_t version_len;
  const char *id; /* a UUID (36 bytes) */
  const char *addr;
  size_t addr_len;
  size_t used; /* bytes the answer takes (complete) */
} ezi_reg_answer;

/* Parses the answer from p[0, len): 1 complete, 0 more bytes needed, EZ_EPROTO if it cannot be a
 * valid answer (not COMPLETE after the greeting, an id that is not a UUID, a string longer than
 * EZI_REG_MAX_STR). */
int ezi_reg_parse(const uint8_t *p, size_t len, ezi_reg_answer *a);

/* What a hang-up after p[0, len) (an incomplete answer) means: EZ_EREFUSED before the greeting
 * (a server at its client limit closes at once), EZ_ENOENT right after it (the server does not
 * know the publisher), EZ_ECONNLOST in the middle of the answer. */
int ezi_reg_hangup(const uint8_t *p, size_t len);

#endif
