/* ezmsg-c's graph server extension that lists its registered clients, and the frame with which an
 * ezmsg-c subscriber tells the server its process id and handle (X_SUB_INFO).
 *
 * The seed protocol never tells the graph server a subscriber's process or handle: those reach a
 * profile only through a channel, and a subscriber has no channel until a publisher feeds its
 * topic. So an idle subscriber appeared nowhere. Our server adds to its PROFILE answer a field
 * "registry" (docs/profiling.md): every registered publisher (id, topic, host, port) and
 * subscriber (id, topic, host, and pid / handle when the subscriber sent X_SUB_INFO).
 *
 * X_SUB_INFO is one frame after the subscriber's creation, on its graph connection:
 *   0xec, the pid in decimal ASCII, ':', the handle in lower-case hex (at most EZI_SUBINFO_HANDLE
 *   bytes of it, cut at a character), '\n'.
 * None of its bytes is 0x00 or 0x16, the only bytes the Python graph servers act on from a
 * subscriber (they ignore the rest), so it is safe to send to any server. */
#ifndef EZI_GSREGISTRY_H
#define EZI_GSREGISTRY_H

#include "base/wire.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define EZI_SUBINFO_HANDLE 1024 /* longest handle sent, in bytes */
/* Longest X_SUB_INFO payload (after the command byte, up to and including '\n'). */
#define EZI_SUBINFO_MAX (20 + 1 + 2 * EZI_SUBINFO_HANDLE + 1)

/* Appends the X_SUB_INFO frame for (pid, handle) to b. 0 or EZ_ENOMEM. */
int ezi_subinfo_encode(ezi_buf *b, int64_t pid, const char *handle);

/* Decodes an X_SUB_INFO payload (without the command byte and '\n'). On success *handle is a new
 * string (caller frees; the previous value is freed first). False if malformed. */
bool ezi_subinfo_decode(const char *p, size_t n, int64_t *pid, char **handle);

/* One registered client, as the server sees it. Strings are borrowed. */
typedef struct ezi_gs_client {
  bool is_pub;
  const char *id, *topic, *host;
  uint16_t port;      /* publisher: its channel server port */
  int64_t pid;        /* subscriber: 0 if unknown */
  const char *handle; /* subscriber: NULL if unknown */
} ezi_gs_client;

/* The "registry" object: {"publishers": [...], "subscribers": [...]}. NULL without memory. */
json_t *ezi_gs_registry_json(const ezi_gs_client *v, size_t n);

#endif
