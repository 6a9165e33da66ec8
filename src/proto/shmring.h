/* A ring of message notices in shared memory between a publisher and a channel of another process,
 * both ezmsg-c: an extension of the protocol, used only once both sides said they speak it (see
 * docs/architecture.md, "The shared-memory ring"). It carries, for each slot of the publisher's
 * segment, which message the slot holds and whether the channel still holds it, so that neither a
 * notice nor an ack needs a system call while both sides are busy. Internal; not installed.
 *
 * Layout (native endianness and alignment: both ends run on the same machine): a 256-byte header
 * of four cache lines (magic and num_buffers; `published`; `pub_wants`, `pub_sleep`, `pub_word`;
 * `rx_sleep`, `start_gen`,
 * `rx_word`, `pub_wakes`), then num_buffers entries of one cache line each. The publisher creates
 * it (mode 0600) and sends its name; the channel maps it and removes the name at once, so a crash
 * of either side leaves nothing in /dev/shm. If both die before that (the publisher between
 * creating it and the channel mapping it), the name stays behind. Its creator holds a shared flock
 * on it for as long as its mapping lasts, so the next ezmsg-c process to create a ring removes a
 * name nobody holds (ezi_ring_sweep). The name also carries the creator's pid, for whoever looks at
 * /dev/shm. */
#ifndef EZI_SHMRING_H
#define EZI_SHMRING_H

#include "proto/shm.h"

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#define EZI_RING_MAGIC 0x31474e4952205a45ull /* "EZ RING1" */

typedef struct ezi_ring_entry {
  _Alignas(64) uint64_t msg_id; /* the message the publisher put in this slot */
  uint64_t t0;                  /* when (CLOCK_MONOTONIC ns, one clock for the machine) */
  uint64_t freed_at;            /* when the channel released it */
  uint32_t gen;  /* which of the publisher's segments holds it (0, 1, ... per grow) */
  uint32_t refs; /* atomic: 1 while the channel holds it, 0 once released */
} ezi_ring_entry;

typedef struct ezi_ring_hdr {
  _Alignas(64) uint64_t magic;
  uint64_t num_buffers;
  _Alignas(64) uint64_t published; /* atomic: every id below it has been put */
  _Alignas(64) uint32_t pub_wants; /* atomic: 0, slot + 1 the publisher sleeps for, or ~0u (any) */
  uint32_t pub_sleep; /* atomic: 1 while the publisher sleeps on pub_word: the release it wants
                       * wakes that word (ezi_futex_wake) instead of sending an RX_ACK. A channel
                       * that knows only RX_ACK sends one, which still wakes such a publisher
                       * (through its I/O thread) */
  uint32_t pub_word;  /* atomic: the futex word the publisher sleeps on */
  _Alignas(64) uint32_t rx_sleep; /* atomic: what the channel wants at the next put (bits below;
                                   * 0: nothing) */
  uint32_t start_gen;             /* the segment generation current when the ring started (for
                                   * debugging: a TX_SHM frame names each generation's segment) */
  uint32_t rx_word;   /* atomic: a futex word the channel's receivers sleep on (base/futex.h) */
  uint32_t pub_wakes; /* the publisher's direct wake-ups of rx_word so far (for tests, debugging) */
} ezi_ring_hdr;

/* rx_sleep's bits. A channel that arms the ring ORs in what it wants; the publisher's next put
 * takes them all (one exchange with 0). EZI_RING_WANT_FRAME: a TX_SHM frame, which wakes the
 * channel's I/O thread (the protocol's way; every bit but EZI_RING_WANT_WORD asks for it, so an
 * older channel's 1 still does). EZI_RING_WANT_WORD: a receiver sleeps on rx_word itself: add one
 * to it and wake it (ezi_futex_wake), with no frame and no I/O thread in between. A publisher
 * that knows only the frame sends one for any bit, which still wakes such a receiver (through
 * its I/O thread), so either side may be older. */
#define EZI_RING_WANT_FRAME 1u
#define EZI_RING_WANT_WORD 2u

typedef struct ezi_ring {
  ezi_ring_hdr *h;
  ezi_ring_entry *e;
  size_t size;
  uint32_t nbuf;
  uint32_t tripped; /* atomic: the file was truncated under the mapping (shmguard.h, as ezi_shm) */
} ezi_ring;

/* Creates and maps a ring for num_buffers slots under a new name ("psm_r" + this process's pid +
 * "_" + 8 random hex digits, written to name). EZ_ENOMEM / EZ_ESYS (logged). The caller removes
 * the name (ezi_shm_unlink) once the channel has mapped it or is gone. The creator's mapping holds
 * a shared flock on it until ezi_ring_detach. The first call in a process sweeps leftovers first
 * (ezi_ring_sweep(EZI_SHM_STALE_S)). */
int ezi_ring_create(uint32_t num_buffers, ezi_ring *out, char name[EZI_SHM_NAME_MAX + 1]);

/* Maps the ring `name` (n bytes, not NUL-terminated), checks that it is ours (ezi_shm_check_fd:
 * a ring another user could write or shrink is refused before it is mapped or unlinked) and one
 * for num_buffers slots (size and magic), and only then removes the name. The mapping is guarded
 * against truncation (out->tripped). EZ_EPROTO if it is not such a ring or not a valid name,
 * EZ_ENOENT / EZ_ESYS otherwise. `out` must not move while mapped. */
int ezi_ring_attach(const char *name, size_t n, uint32_t num_buffers, ezi_ring *out);

/* Removes from /dev/shm the ring names (only those: the name's shape above) of this user that
 * no creator holds any more (its process is gone, or detached it without removing the name) and
 * that are at least min_age_s seconds old (ezi_shm_sweep_names). Returns how many it removed. Any
 * thread; reads the directory once. */
int ezi_ring_sweep(time_t min_age_s);

/* Unmaps; idempotent, safe on a zeroed ring. */
void ezi_ring_detach(ezi_ring *r);

#endif
