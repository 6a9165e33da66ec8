/* POSIX shared-memory segments in the ezmsg layout. Internal; not installed.
 *
 * A segment "name" is the POSIX object "/" + name (on Linux: /dev/shm/<name>), mode 0600.
 * Created with num_buffers and a requested buf_size:
 *   stride = buf_size + 16 * num_buffers, size = num_buffers * stride,
 *   bytes 0..7 = u64 num_buffers, bytes 8..15 = u64 stride (little-endian),
 *   buffer i = [i*stride, (i+1)*stride): 16 reserved bytes (buffer 0's are the header above), then
 *   its data block of stride - 16 bytes.
 * These functions keep no shared state; an ezi_shm is used by one owner (the mapping itself may be
 * shared between threads and processes as the protocol dictates). */
#ifndef EZI_SHM_H
#define EZI_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "ezmsg/ezmsg.h"

#define EZI_SHM_NAME_MAX 63               /* longest segment name we accept */
#define EZI_SHM_MAX_BUFFERS 65536u        /* most buffers ezi_shm_create makes */
#define EZI_SHM_MAX_BUF_SIZE (1ull << 40) /* largest buf_size ezi_shm_create accepts */

typedef struct ezi_shm {
  char name[EZI_SHM_NAME_MAX + 1]; /* without the leading '/' */
  uint8_t *base;                   /* the whole segment, mapped read-write */
  size_t size;                     /* num_buffers * stride */
  uint64_t num_buffers, stride;
  /* Atomic: 1 once a process truncated the segment under our mapping and an access faulted
   * (shmguard.h): the mapping reads zeros from there on. Set by the SIGBUS handler; the struct
   * must not move while mapped (it is registered by address). */
  uint32_t tripped;
} ezi_shm;

/* Who may share our segments and rings: by default only processes of our effective uid (mode
 * 0600). $EZMSG_SHM_GROUP=<gid or group name> opens a graph to a group: what we create gets that
 * group and mode 0660, and what we map may belong to that group (read once per process). */
#define EZI_SHM_GROUP_ENV EZ_SHM_GROUP_ENV

/* Whether the file open as fd, named `name` by a peer, is ours to map: a regular file of our
 * effective uid without permissions for group or others, or, with $EZMSG_SHM_GROUP, a file of
 * that group without permissions for others. Refusing a file someone else can write or shrink is
 * what keeps another local user from crashing or feeding us. 0 (st gets its fstat), or
 * EZ_EPROTO after logging a line that says why (rate-limited), EZ_ESYS if fstat fails. */
struct stat;
int ezi_shm_check_fd(int fd, const char *name, struct stat *st);

/* A creator's part of the same rule: with $EZMSG_SHM_GROUP the new file at fd goes to that group
 * with mode 0660 (else it stays as created, 0600). 0 or EZ_ESYS (logged). */
int ezi_shm_share_fd(int fd);

/* Creates a new segment named EZI_SHM_PREFIX + 8 random lower-case hex digits (shm_open
 * O_CREAT|O_EXCL, mode 0600, a new name on EEXIST), sizes it, reserves its memory (so a full
 * /dev/shm fails here, not with SIGBUS on first write), maps it and writes the header. The rest
 * reads as zeros. Limits: num_buffers in [1, EZI_SHM_MAX_BUFFERS], buf_size in [1,
 * EZI_SHM_MAX_BUF_SIZE], and the total must fit in size_t and off_t: EZ_EINVAL otherwise.
 * EZ_ENOMEM if the memory cannot be had (mmap ENOMEM, /dev/shm full), EZ_ESYS on other failures
 * (logged); on failure nothing is left in /dev/shm and *out is zeroed. On success the caller owns
 * the mapping (ezi_shm_detach) and the name (ezi_shm_unlink).
 *
 * hold_fd: if not NULL, *hold_fd gets an open descriptor of the segment holding a shared flock,
 * which the caller closes after unlinking the name (-1 on failure). The lock lasts while that
 * descriptor, a copy of it (fork, dup) or the mapping made from it is open. While it lasts,
 * ezi_shm_sweep leaves the name alone; once it is gone, the name is left over. Without it the name
 * counts as left over from the start (ezi_shm_sweep removes it once EZI_SHM_STALE_S old). */
int ezi_shm_create(uint64_t num_buffers, uint64_t buf_size, ezi_shm *out, int *hold_fd);

/* Our segments' names start so ("psm_" as the reference's, then "ez", which its names, 8 hex
 * digits after "psm_", never have), followed by 8 hex digits. */
#define EZI_SHM_PREFIX "psm_ez"

/* A name of ours older than this that nobody holds is left over (ezi_shm_sweep). The age only
 * guards the moment between a segment's creation and its flock. */
#define EZI_SHM_STALE_S 10

/* Removes the names of our segments (EZI_SHM_PREFIX + 8 hex digits) in /dev/shm that belong to
 * this user, are at least min_age_s old (by their mtime) and that no process holds (see
 * hold_fd above): segments whose graph server died without unlinking them, with the process that
 * asked for them dying too (both SIGKILLed, say), which nobody else would remove. Mappings
 * elsewhere stay valid. The graph server calls it when it starts. Returns how many names it
 * removed. Any thread; reads the directory once. */
int ezi_shm_sweep(time_t min_age_s);

/* The same for any kind of name whose maker holds a shared flock on it while it lives (notice
 * rings too, shmring.h): each name in /dev/shm that `match` accepts, of this user, at least
 * min_age_s old and on which an exclusive flock can be had, is removed, and logged with `what`
 * (why it was left over). A name whose file was replaced meanwhile is left alone. */
int ezi_shm_sweep_names(bool (*match)(const char *name), time_t min_age_s, const char *what);

/* Opens and maps the existing segment `name` read-write and validates its header against its
 * size: size >= 16, num_buffers >= 1, stride >= 16 and num_buffers * stride == size (no
 * overflow). The file must pass ezi_shm_check_fd first. The mapping is guarded against
 * truncation (shmguard.h; out->tripped). Returns EZ_EINVAL unless name is 1..63 characters of
 * [A-Za-z0-9_.-] (not "." or ".."), EZ_ENOENT if no such segment exists, EZ_EPROTO if the header
 * is inconsistent or the file is not ours, EZ_ENOMEM if it cannot be mapped for lack of memory,
 * EZ_ESYS otherwise (logged). *out is zeroed on failure. Works on segments created by Python
 * ezmsg (multiprocessing.shared_memory: mode 0600). */
int ezi_shm_attach(const char *name, ezi_shm *out);

/* Start of buffer i's data block (i < num_buffers): base + i*stride + 16. */
static inline uint8_t *ezi_shm_data(const ezi_shm *s, uint64_t i) {
  return s->base + (size_t)(i * s->stride) + 16;
}

/* Size of every data block: stride - 16. */
static inline uint64_t ezi_shm_data_size(const ezi_shm *s) { return s->stride - 16; }

/* Unmaps the segment and zeroes *s (the segment itself stays until unlinked). Idempotent; safe on
 * a zeroed struct. */
void ezi_shm_detach(ezi_shm *s);

/* Removes the segment `name` (shm_unlink("/" + name)); existing mappings stay valid. Returns 0,
 * EZ_EINVAL for a bad name (rules as ezi_shm_attach), EZ_ENOENT if it does not exist, EZ_ESYS
 * otherwise. */
int ezi_shm_unlink(const char *name);

#endif
