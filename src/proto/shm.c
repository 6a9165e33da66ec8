/* POSIX shared-memory segments in the ezmsg layout (see shm.h). */
#include "proto/shm.h"
#include "base/internal.h"
#include "base/le.h"
#include "base/shmguard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* Largest value an off_t holds. */
#define EZI_OFF_MAX (sizeof(off_t) >= 8 ? (uint64_t)INT64_MAX : (uint64_t)INT32_MAX)

static bool valid_name(const char *name) {
  if (!name) return false;
  size_t n = strnlen(name, EZI_SHM_NAME_MAX + 1);
  if (n == 0 || n > EZI_SHM_NAME_MAX) return false;
  if (!strcmp(name, ".") || !strcmp(name, "..")) return false;
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '.' || c == '-'))
      return false;
  }
  return true;
}

/* "/" + name, for shm_open / shm_unlink. */
static void shm_path(char out[EZI_SHM_NAME_MAX + 2], const char *name) {
  out[0] = '/';
  memcpy(out + 1, name, strlen(name) + 1);
}

/* 32 random bits: getrandom, else a mix of time, pid and a counter (names only need to differ). */
static uint32_t random32(void) {
  uint32_t r;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) == (ssize_t)sizeof r) return r;
  static uint32_t counter;
  uint64_t x =
      ezi_now_ns() ^ ((uint64_t)getpid() << 32) ^
      ((uint64_t)__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) * 0x9E3779B97F4A7C15ull);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (uint32_t)x;
}

static int sys_err(int e) {
  return (e == ENOMEM || e == ENOSPC || e == EFBIG) ? EZ_ENOMEM : EZ_ESYS;
}

/* ---- who may share our shared memory -------------------------------------------------------- */

static pthread_once_t g_group_once = PTHREAD_ONCE_INIT;
static gid_t g_group;
static bool g_group_set;

static void read_group(void) {
  const char *e = getenv(EZI_SHM_GROUP_ENV);
  if (!e || !*e) return;
  char *end;
  errno = 0;
  unsigned long v = strtoul(e, &end, 10);
  if (!errno && !*end && v < (unsigned long)(gid_t)-1) {
    g_group = (gid_t)v;
    g_group_set = true;
    return;
  }
  struct group gr, *res = NULL;
  char buf[4096];
  if (getgrnam_r(e, &gr, buf, sizeof buf, &res) == 0 && res) {
    g_group = res->gr_gid;
    g_group_set = true;
    return;
  }
  EZI_WARN("%s=%s: no such group; shared memory stays private to this user", EZI_SHM_GROUP_ENV, e);
}

int ezi_shm_check_fd(int fd, const char *name, struct stat *st) {
  pthread_once(&g_group_once, read_group);
  if (fstat(fd, st) != 0) {
    EZI_WARN("fstat(%s) failed: %s", name, strerror(errno));
    return EZ_ESYS;
  }
  bool mine = st->st_uid == geteuid(), group = g_group_set && st->st_gid == g_group;
  const char *why = NULL;
  if (!S_ISREG(st->st_mode))
    why = "is not a regular file";
  else if (!mine && !group)
    why = "belongs to another user";
  else if (st->st_mode & S_IRWXO)
    why = "is open to every user";
  else if ((st->st_mode & S_IRWXG) && !group)
    why = "is open to its group";
  if (!why) return 0;
  EZI_WARN_RL("shared memory %s %s (uid %u, gid %u, mode 0%o; we are uid %u%s): not mapped", name,
              why, (unsigned)st->st_uid, (unsigned)st->st_gid, (unsigned)(st->st_mode & 07777),
              (unsigned)geteuid(), g_group_set ? ", sharing with a group" : "");
  return EZ_EPROTO;
}

int ezi_shm_share_fd(int fd) {
  pthread_once(&g_group_once, read_group);
  if (!g_group_set) return 0;
  if (fchown(fd, (uid_t)-1, g_group) || fchmod(fd, 0660)) {
    EZI_WARN("cannot give shared memory to group %u (%s): %s", (unsigned)g_group, EZI_SHM_GROUP_ENV,
             strerror(errno));
    return EZ_ESYS;
  }
  return 0;
}

/* ---- segments ------------------------------------------------------------------------------ */

int ezi_shm_create(uint64_t num_buffers, uint64_t buf_size, ezi_shm *out, int *hold_fd) {
  if (hold_fd) *hold_fd = -1;
  if (!out) return EZ_EINVAL;
  memset(out, 0, sizeof *out);
  if (num_buffers < 1 || num_buffers > EZI_SHM_MAX_BUFFERS || buf_size < 1 ||
      buf_size > EZI_SHM_MAX_BUF_SIZE)
    return EZ_EINVAL;
  uint64_t stride = buf_size + 16 * num_buffers; /* <= 2^40 + 2^20: no overflow */
  if (num_buffers > UINT64_MAX / stride) return EZ_EINVAL;
  uint64_t total = num_buffers * stride;
  if (total > SIZE_MAX || total > EZI_OFF_MAX) return EZ_EINVAL;

  char name[EZI_SHM_NAME_MAX + 1], path[EZI_SHM_NAME_MAX + 2];
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
    snprintf(name, sizeof name, EZI_SHM_PREFIX "%08x", (unsigned)random32());
    shm_path(path, name);
    fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST && errno != EINTR) {
      int e = errno;
      EZI_WARN("shm_open(%s) failed: %s", path, strerror(e));
      return sys_err(e);
    }
  }
  if (fd < 0) {
    EZI_WARN("shm_open: no free segment name after 100 attempts");
    return EZ_ESYS;
  }

  int rc = 0, e = 0;
  const char *what = NULL;
  uint8_t *base = MAP_FAILED;
  if (ezi_shm_share_fd(fd)) {
    e = EPERM, what = "fchown";
    goto fail;
  }
  /* The hold first: ezi_shm_sweep takes a name nobody holds only once it is EZI_SHM_STALE_S old. */
  while (hold_fd && flock(fd, LOCK_SH | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    e = errno, what = "flock";
    goto fail;
  }
  while (ftruncate(fd, (off_t)total) != 0) {
    if (errno == EINTR) continue;
    e = errno, what = "ftruncate";
    goto fail;
  }
  /* Reserve the pages now: a full /dev/shm is an error here rather than SIGBUS on a later write. */
  while ((e = posix_fallocate(fd, 0, (off_t)total)) != 0) {
    if (e == EINTR) continue;
    if (e == EOPNOTSUPP || e == EINVAL) { /* a file system without fallocate: go on sparse */
      e = 0;
      break;
    }
    what = "posix_fallocate";
    goto fail;
  }
  base = mmap(NULL, (size_t)total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    e = errno, what = "mmap";
    goto fail;
  }
  if (hold_fd)
    *hold_fd = fd;
  else
    close(fd);
  ezi_guard_add(base, (size_t)total, &out->tripped);
  ezi_put_u64le(base, num_buffers);
  ezi_put_u64le(base + 8, stride);
  memcpy(out->name, name, sizeof name);
  out->base = base;
  out->size = (size_t)total;
  out->num_buffers = num_buffers;
  out->stride = stride;
  return 0;

fail:
  rc = sys_err(e);
  if (rc == EZ_ENOMEM)
    EZI_DEBUG("%s(%s, %llu bytes): %s", what, path, (unsigned long long)total, strerror(e));
  else
    EZI_WARN("%s(%s, %llu bytes) failed: %s", what, path, (unsigned long long)total, strerror(e));
  shm_unlink(path);
  close(fd);
  return rc;
}

int ezi_shm_attach(const char *name, ezi_shm *out) {
  if (!out) return EZ_EINVAL;
  memset(out, 0, sizeof *out);
  if (!valid_name(name)) return EZ_EINVAL;
  char path[EZI_SHM_NAME_MAX + 2];
  shm_path(path, name);
  int fd;
  do {
    fd = shm_open(path, O_RDWR | O_CLOEXEC, 0);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT) return EZ_ENOENT;
    EZI_WARN("shm_open(%s) failed: %s", path, strerror(e));
    return sys_err(e);
  }
  struct stat st;
  int rc = ezi_shm_check_fd(fd, name, &st);
  if (rc) {
    close(fd);
    return rc;
  }
  if (st.st_size < 16 || (uint64_t)st.st_size > SIZE_MAX) {
    EZI_DEBUG("segment %s: size %lld cannot hold a header", name, (long long)st.st_size);
    close(fd);
    return EZ_EPROTO;
  }
  size_t size = (size_t)st.st_size;
  uint8_t *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (base == MAP_FAILED) {
    EZI_WARN("mmap(%s, %zu bytes) failed: %s", path, size, strerror(e));
    return sys_err(e);
  }
  /* Guarded before the header is read: the file may have shrunk since fstat. */
  ezi_guard_add(base, size, &out->tripped);
  uint64_t nb = ezi_get_u64le_once(base), stride = ezi_get_u64le_once(base + 8);
  if (nb < 1 || stride < 16 || nb > UINT64_MAX / stride || nb * stride != (uint64_t)size ||
      ezi_guard_tripped(&out->tripped)) {
    EZI_DEBUG("segment %s: header (%llu buffers x %llu) does not match its size %zu", name,
              (unsigned long long)nb, (unsigned long long)stride, size);
    ezi_guard_del(base);
    munmap(base, size);
    out->tripped = 0;
    return EZ_EPROTO;
  }
  memcpy(out->name, name, strlen(name) + 1);
  out->base = base;
  out->size = size;
  out->num_buffers = nb;
  out->stride = stride;
  return 0;
}

void ezi_shm_detach(ezi_shm *s) {
  if (!s) return;
  if (s->base) {
    ezi_guard_del(s->base);
    munmap(s->base, s->size);
  }
  memset(s, 0, sizeof *s);
}

int ezi_shm_unlink(const char *name) {
  if (!valid_name(name)) return EZ_EINVAL;
  char path[EZI_SHM_NAME_MAX + 2];
  shm_path(path, name);
  if (shm_unlink(path) == 0) return 0;
  int e = errno;
  if (e == ENOENT) return EZ_ENOENT;
  EZI_WARN("shm_unlink(%s) failed: %s", path, strerror(e));
  return EZ_ESYS;
}

/* Whether name is EZI_SHM_PREFIX + 8 lower-case hex digits. */
static bool seg_name(const char *name) {
  size_t pl = strlen(EZI_SHM_PREFIX);
  if (strncmp(name, EZI_SHM_PREFIX, pl) || strlen(name) != pl + 8) return false;
  for (const char *c = name + pl; *c; c++)
    if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'))) return false;
  return true;
}

int ezi_shm_sweep_names(bool (*match)(const char *name), time_t min_age_s, const char *what) {
  DIR *d = opendir("/dev/shm");
  if (!d) return 0;
  int n = 0;
  time_t now = time(NULL);
  struct dirent *ent;
  while ((ent = readdir(d))) {
    if (!match(ent->d_name)) continue;
    int fd = openat(dirfd(d), ent->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st, again;
    /* Nobody holds it (its maker, and every process that inherited the hold, are gone) ... */
    if (!fstat(fd, &st) && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
        now - st.st_mtime >= min_age_s && !flock(fd, LOCK_EX | LOCK_NB) &&
        /* ... and the name still is that file (not unlinked and made anew meanwhile). */
        !fstatat(dirfd(d), ent->d_name, &again, AT_SYMLINK_NOFOLLOW) && again.st_ino == st.st_ino &&
        again.st_dev == st.st_dev && !unlinkat(dirfd(d), ent->d_name, 0)) {
      EZI_INFO("removed %s, %s", ent->d_name, what);
      n++;
    }
    close(fd);
  }
  closedir(d);
  return n;
}

int ezi_shm_sweep(time_t min_age_s) {
  return ezi_shm_sweep_names(seg_name, min_age_s, "a segment its dead graph server left");
}
