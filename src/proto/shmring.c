/* The shared-memory notice ring between an ezmsg-c publisher and an ezmsg-c channel (shmring.h). */
#include "proto/shmring.h"
#include "base/internal.h"
#include "base/shmguard.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(sizeof(ezi_ring_hdr) == 256, "the ring header is four cache lines");
_Static_assert(sizeof(ezi_ring_entry) == 64, "a ring entry is one cache line");

static size_t ring_size(uint32_t nbuf) {
  return sizeof(ezi_ring_hdr) + (size_t)nbuf * sizeof(ezi_ring_entry);
}

static void map_into(void *base, size_t size, uint32_t nbuf, ezi_ring *out) {
  out->h = base;
  out->e = (ezi_ring_entry *)((uint8_t *)base + sizeof(ezi_ring_hdr));
  out->size = size;
  out->nbuf = nbuf;
}

/* Whether name is a ring's name: "psm_r" <pid> "_" <8 hex digits>. */
static bool ring_name(const char *name) {
  if (strncmp(name, "psm_r", 5)) return false;
  const char *c = name + 5;
  int digits = 0;
  for (; *c >= '0' && *c <= '9' && digits < 10; c++, digits++) {
  }
  if (!digits || *c++ != '_') return false;
  for (int i = 0; i < 8; i++, c++)
    if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'))) return false;
  return !*c;
}

int ezi_ring_sweep(time_t min_age_s) {
  return ezi_shm_sweep_names(ring_name, min_age_s, "a notice ring its dead publisher left");
}

static void sweep_once(void) { ezi_ring_sweep(EZI_SHM_STALE_S); }

int ezi_ring_create(uint32_t nbuf, ezi_ring *out, char name[EZI_SHM_NAME_MAX + 1]) {
  *out = (ezi_ring){0};
  static pthread_once_t swept = PTHREAD_ONCE_INIT;
  pthread_once(&swept, sweep_once);
  size_t size = ring_size(nbuf);
  for (int tries = 0; tries < 16; tries++) {
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
      r = (uint32_t)(ezi_now_ns() * 2654435761u) ^ (uint32_t)getpid() ^ (uint32_t)tries;
    snprintf(name, EZI_SHM_NAME_MAX + 1, "psm_r%u_%08x", (unsigned)getpid(), (unsigned)r);
    char path[EZI_SHM_NAME_MAX + 2];
    snprintf(path, sizeof path, "/%s", name);
    int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) break;
    void *base = MAP_FAILED;
    /* The hold (ezi_shm_sweep_names): the mapping keeps it after the descriptor is closed. */
    if (!ezi_shm_share_fd(fd) && flock(fd, LOCK_SH | LOCK_NB) == 0 &&
        posix_fallocate(fd, 0, (off_t)size) == 0)
      base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
      shm_unlink(path);
      EZI_WARN("cannot make a notice ring of %zu bytes: %s", size, strerror(errno));
      return EZ_ENOMEM;
    }
    map_into(base, size, nbuf, out);
    ezi_guard_add(base, size, &out->tripped);
    out->h->num_buffers = nbuf;
    __atomic_store_n(&out->h->magic, EZI_RING_MAGIC, __ATOMIC_RELEASE);
    return 0;
  }
  EZI_WARN("cannot make a notice ring: %s", strerror(errno));
  return EZ_ESYS;
}

int ezi_ring_attach(const char *name, size_t n, uint32_t nbuf, ezi_ring *out) {
  *out = (ezi_ring){0};
  char path[EZI_SHM_NAME_MAX + 2];
  if (n < 1 || n > EZI_SHM_NAME_MAX) return EZ_EPROTO;
  for (size_t i = 0; i < n; i++) /* the characters ezi_shm_attach accepts */
    if (!isalnum((unsigned char)name[i]) && name[i] != '_' && name[i] != '-' && name[i] != '.')
      return EZ_EPROTO;
  if ((n == 1 && name[0] == '.') || (n == 2 && name[0] == '.' && name[1] == '.')) return EZ_EPROTO;
  path[0] = '/';
  memcpy(path + 1, name, n);
  path[n + 1] = 0;
  int fd = shm_open(path, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return errno == ENOENT ? EZ_ENOENT : EZ_ESYS;
  size_t size = ring_size(nbuf);
  struct stat st;
  void *base = MAP_FAILED;
  int rc = ezi_shm_check_fd(fd, path + 1, &st); /* not ours: not mapped, and not unlinked */
  if (!rc && (uint64_t)st.st_size == size)
    base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return rc == EZ_ESYS ? rc : EZ_EPROTO;
  map_into(base, size, nbuf, out);
  ezi_guard_add(base, size, &out->tripped); /* before the first read: it may have shrunk */
  if (__atomic_load_n(&out->h->magic, __ATOMIC_ACQUIRE) != EZI_RING_MAGIC ||
      __atomic_load_n(&out->h->num_buffers, __ATOMIC_RELAXED) != nbuf ||
      ezi_guard_tripped(&out->tripped)) {
    ezi_ring_detach(out);
    return EZ_EPROTO;
  }
  /* Mapped from now on: no name left to leak if either side dies. Only a ring is unlinked: a
   * publisher cannot make us remove anything else of ours. */
  shm_unlink(path);
  return 0;
}

void ezi_ring_detach(ezi_ring *r) {
  if (r->h) {
    ezi_guard_del(r->h);
    munmap(r->h, r->size);
  }
  *r = (ezi_ring){0};
}
