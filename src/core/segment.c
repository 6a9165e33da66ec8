/* Shared-memory segments as the data plane uses them: leased through the graph server (the lease
 * is a connection kept open), mapped, reference-counted so a message can outlive a segment swap.
 * Also the public ez_shm_* calls, which are the same thing with an opaque handle. */
#include "core/segment.h"
#include "core/context.h"
#include "graph/graphio.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* SHM_CREATE / SHM_ATTACH at the server: returns the lease fd and the name it answered. */
static int lease(const char *address, uint8_t cmd, uint64_t nbuf, uint64_t size, const char *name,
                 char out_name[64], int timeout_ms) {
  uint64_t deadline = ezi_deadline(timeout_ms);
  int fd = ezi_graph_open(address, deadline, NULL, 0);
  if (fd < 0) return fd;
  ezi_buf b = {0};
  ezi_buf_put_u8(&b, cmd);
  if (cmd == EZI_SHM_CREATE) {
    ezi_buf_put_u64(&b, nbuf);
    ezi_buf_put_u64(&b, size);
  } else {
    ezi_buf_put_cstr(&b, name);
  }
  int rc = b.data ? ezi_io_write(fd, b.data, b.len, deadline) : EZ_ENOMEM;
  ezi_buf_free(&b);
  uint8_t r = 0;
  if (!rc) rc = ezi_io_read(fd, &r, 1, deadline);
  if (rc == EZ_ECONNLOST) rc = cmd == EZI_SHM_ATTACH ? EZ_ENOENT : EZ_EINVAL; /* server refused */
  if (!rc && r != EZI_COMPLETE) rc = EZ_EPROTO;
  char *got = NULL;
  if (!rc) rc = ezi_io_read_str(fd, &got, NULL, EZI_SHM_NAME_MAX, deadline);
  if (rc) {
    close(fd);
    return rc;
  }
  snprintf(out_name, 64, "%s", got);
  free(got);
  return fd;
}

int ezi_seg_map(int fd, const char *name, ezi_seg **out) {
  ezi_seg *s = calloc(1, sizeof *s);
  if (!s) {
    close(fd);
    return EZ_ENOMEM;
  }
  int rc = ezi_shm_attach(name, &s->shm);
  if (rc) {
    close(fd);
    free(s);
    return rc;
  }
  s->refs = 1;
  s->lease_fd = fd;
  *out = s;
  return 0;
}

int ezi_seg_attach(const char *address, const char *name, ezi_seg **out, int timeout_ms) {
  char got[64];
  int fd = lease(address, EZI_SHM_ATTACH, 0, 0, name, got, timeout_ms);
  return fd < 0 ? fd : ezi_seg_map(fd, got, out);
}

int ezi_seg_create(const char *address, uint64_t num_buffers, uint64_t buf_size, ezi_seg **out,
                   int timeout_ms) {
  char got[64];
  int fd = lease(address, EZI_SHM_CREATE, num_buffers, buf_size, NULL, got, timeout_ms);
  int rc = fd < 0 ? fd : ezi_seg_map(fd, got, out);
  if (!rc) (*out)->creator = true;
  return rc;
}

int ezi_seg_private(const char *name, uint64_t num_buffers, uint64_t buf_size, ezi_seg **out) {
  if (!num_buffers || buf_size > EZI_SHM_MAX_BUF_SIZE || num_buffers > EZI_SHM_MAX_BUFFERS)
    return EZ_EINVAL;
  uint64_t stride = buf_size + 16 * num_buffers;
  ezi_seg *s = calloc(1, sizeof *s);
  if (!s) return EZ_ENOMEM;
  s->priv = calloc(1, (size_t)(num_buffers * stride));
  if (!s->priv) {
    free(s);
    return EZ_ENOMEM;
  }
  snprintf(s->shm.name, sizeof s->shm.name, "%s", name ? name : "");
  s->shm.base = s->priv;
  s->shm.size = (size_t)(num_buffers * stride);
  s->shm.num_buffers = num_buffers;
  s->shm.stride = stride;
  ezi_put_u64le(s->priv, num_buffers);
  ezi_put_u64le(s->priv + 8, stride);
  s->refs = 1;
  s->lease_fd = -1;
  *out = s;
  return 0;
}

void ezi_seg_ref(ezi_seg *s) { __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED); }

/* True if the graph server has hung up on our lease (it died, or stopped), waiting up to wait_ms
 * for it. The server sends nothing on a lease, so anything readable is its hang-up. */
static bool server_gone(int lease_fd, int wait_ms) {
  struct pollfd p = {.fd = lease_fd, .events = POLLIN};
  int r;
  while ((r = poll(&p, 1, wait_ms)) < 0 && errno == EINTR) {
  }
  if (r <= 0) return false;
  char b;
  ssize_t n = recv(lease_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

bool ezi_seg_server_gone(ezi_seg *s, int wait_ms) {
  return s->lease_fd >= 0 && server_gone(s->lease_fd, wait_ms);
}

void ezi_seg_orphaned(ezi_seg *s) {
  if (!s || !s->creator || s->lease_fd < 0) return;
  if (!__atomic_exchange_n(&s->unlinked, true, __ATOMIC_ACQ_REL)) {
    ezi_shm_unlink(s->shm.name);
    EZI_DEBUG("the graph server is gone: removed the name of our segment %s", s->shm.name);
  }
}

void ezi_seg_free(ezi_seg *s) {
  /* Normally the server unlinks a segment with its last lease. A server that died cannot: then
   * whoever asked for the segment removes its name (mappings elsewhere stay valid). */
  if (s->creator && ezi_seg_server_gone(s, 0)) ezi_seg_orphaned(s);
  if (s->priv)
    free(s->priv);
  else
    ezi_shm_detach(&s->shm);
  if (s->lease_fd >= 0) close(s->lease_fd);
  free(s);
}

void ezi_seg_chain_free(ezi_seg_chain *c) {
  while (c) {
    ezi_seg_chain *n = c->next;
    ezi_seg_unref(c->seg);
    free(c);
    c = n;
  }
}

/* ---- public ez_shm ------------------------------------------------------------------------- */
struct ez_shm {
  ezi_seg *seg;
};

static int wrap(int rc, ezi_seg *seg, ez_shm **out) {
  if (rc) return rc;
  *out = malloc(sizeof **out);
  if (!*out) {
    ezi_seg_unref(seg);
    return EZ_ENOMEM;
  }
  (*out)->seg = seg;
  return 0;
}

int ez_shm_create(const char *address, uint64_t num_buffers, uint64_t buf_size, ez_shm **out,
                  int timeout_ms) {
  if (!out || !num_buffers || !buf_size) return EZ_EINVAL;
  ezi_seg *seg = NULL;
  int rc = ezi_seg_create(address, num_buffers, buf_size, &seg, timeout_ms);
  return wrap(rc, seg, out);
}

int ez_shm_attach(const char *address, const char *name, ez_shm **out, int timeout_ms) {
  if (!out || !name || strlen(name) > EZI_SHM_NAME_MAX) return EZ_EINVAL;
  ezi_seg *seg = NULL;
  int rc = ezi_seg_attach(address, name, &seg, timeout_ms);
  return wrap(rc, seg, out);
}

const char *ez_shm_name(const ez_shm *s) { return s->seg->shm.name; }
uint64_t ez_shm_num_buffers(const ez_shm *s) { return s->seg->shm.num_buffers; }
uint64_t ez_shm_buffer_size(const ez_shm *s) { return ezi_seg_room(s->seg); }
void *ez_shm_buffer(ez_shm *s, uint64_t i) {
  return i < s->seg->shm.num_buffers ? ezi_seg_data(s->seg, i) : NULL;
}

void ez_shm_close(ez_shm *s) {
  if (!s) return;
  ezi_seg_unref(s->seg);
  free(s);
}
