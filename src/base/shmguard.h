/* Shared memory that another process can shrink under us. Internal; not installed.
 *
 * Any process that can open a segment or a ring by name can ftruncate it; an access to a page of
 * our mapping beyond the new end of the file then raises SIGBUS, which kills a process by
 * default: a subscriber reading a message, a publisher copying one into its slot, or the user's
 * own thread reading a zero-copy view. Every mapping of a segment or ring is registered here
 * while it is mapped; a SIGBUS handler (installed with the first registration) that finds the
 * faulting address in one replaces the mapping from the faulting page to its end with private,
 * zeroed memory and returns, so the access is repeated and succeeds. Whoever reads the mapping
 * then sees zeros (which no validation accepts as a message) and its `tripped` word set, and
 * drops the link with a clear error (channels), or replaces its segment (publishers). The check
 * costs nothing while no fault happens: no system call and no lock on the message path (see
 * docs/architecture.md, "Hostile peers"). A SIGBUS anywhere else goes to the handler that was
 * installed before ours (or the default action: the process dies as before). An application
 * that installs its own SIGBUS handler afterwards replaces ours until the next mapping, which
 * puts ours back in front of it (handing it every other SIGBUS). */
#ifndef EZI_SHMGUARD_H
#define EZI_SHMGUARD_H

#include <stddef.h>
#include <stdint.h>

/* Most mappings guarded at once in a process; beyond that a mapping works unguarded (logged
 * once). Segments and rings: a subscriber of 1000 publishers maps about 2000. */
#define EZI_GUARD_MAX 8192

/* Registers [base, base + size) (page-aligned base, as mmap returns it). Once a fault in it was
 * repaired, *tripped (which must outlive the registration) is set to 1 (atomic store). 0, or
 * EZ_ENOMEM when the table is full. Any thread. */
int ezi_guard_add(void *base, size_t size, uint32_t *tripped);

/* Unregisters base; call it before munmap. Returns once no handler can still be repairing it.
 * Unknown bases are ignored. Any thread (not a signal handler). */
void ezi_guard_del(void *base);

/* Whether mapping base was repaired (for log lines on error paths: a table lookup). */
static inline int ezi_guard_tripped(const uint32_t *tripped) {
  return (int)__atomic_load_n(tripped, __ATOMIC_ACQUIRE);
}

/* How many faults were repaired in this process (tests, debugging). */
uint64_t ezi_guard_repairs(void);

#endif
