/* Segments (segment.c): an ezmsg shared-memory layout mapped and reference-counted, leased from the
 * graph server (or private memory in the same layout). */
#ifndef EZI_SEGMENT_H
#define EZI_SEGMENT_H

#include "proto/shm.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct ezi_seg {
  int refs;      /* atomic */
  ezi_shm shm;   /* mapping; shm.name empty for private memory */
  uint8_t *priv; /* private memory (when the publisher could not map the server's) */
  int lease_fd;  /* graph-server lease, -1 if none */
  bool creator;  /* we asked the server for it: if the server dies, we unlink it */
  bool unlinked; /* atomic: we removed its name (ezi_seg_orphaned), not to be removed again */
} ezi_seg;

/* Leases `name` at the graph server and maps it. */
int ezi_seg_attach(const char *address, const char *name, ezi_seg **out, int timeout_ms);
/* Maps segment `name` whose lease is the graph-server connection fd; the segment takes fd, and
 * on failure fd is closed. */
int ezi_seg_map(int fd, const char *name, ezi_seg **out);

/* Asks the graph server for a new segment and maps it. */
int ezi_seg_create(const char *address, uint64_t num_buffers, uint64_t buf_size, ezi_seg **out,
                   int timeout_ms);
/* Private memory in the segment layout, named `name` (when the server's segment can't be mapped).
 */
int ezi_seg_private(const char *name, uint64_t num_buffers, uint64_t buf_size, ezi_seg **out);
static inline uint8_t *ezi_seg_data(const ezi_seg *s, uint64_t i) {
  return ezi_shm_data(&s->shm, i);
}
static inline uint64_t ezi_seg_room(const ezi_seg *s) { return s->shm.stride - 16; }
void ezi_seg_ref(ezi_seg *s);
/* Frees s, whose last reference was dropped (ezi_seg_unref). */
void ezi_seg_free(ezi_seg *s);
/* Drops a reference (NULL: nothing); the last one frees s. Inline: a ring channel's release
 * drops one per message. Any thread. */
static inline void ezi_seg_unref(ezi_seg *s) {
  if (s && __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) == 0) ezi_seg_free(s);
}
/* True if the graph server hung up on s's lease, waiting up to wait_ms for it (0: just look).
 * False for a segment without a lease. The caller holds a reference. Any thread. */
bool ezi_seg_server_gone(ezi_seg *s, int wait_ms);
/* The server that leased s is gone (ezi_seg_server_gone): if we asked for s, removes its name now
 * rather than at the last unref, since nobody else will and this process may not live to do it
 * (mappings stay valid; with the server gone, nobody can join s by name). NULL: no-op. Once per
 * segment; any thread, with a reference held. */
void ezi_seg_orphaned(ezi_seg *s);

/* Segments a publisher replaced (grew) while messages in them were still held. */
typedef struct ezi_seg_chain {
  ezi_seg *seg;
  uint64_t last_id; /* the last message sent in it */
  struct ezi_seg_chain *next;
} ezi_seg_chain;
/* Drops the segments of a chain and frees it. */
void ezi_seg_chain_free(ezi_seg_chain *c);

#endif
