/* SHM_ATTACH without blocking the I/O thread: the lease a channel takes on a publisher's segment
 * (segment.c's ezi_seg_attach does the same exchange, blocking, for the API's callers). One I/O
 * thread serves every publisher and channel of a process, so a graph server that is slow to
 * answer, or stopped, must stall only the channel that waits for it. */
#include "core/segattach.h"
#include "core/context.h"

#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

/* The server's answer: its version (a str of at most 256 bytes), COMPLETE, the segment's name. */
#define EZI_ATTACH_ANSWER_MAX (8 + 256 + 1 + 8 + EZI_SHM_NAME_MAX)

struct ezi_attach {
  ez_context *ctx;
  ezi_watch w;
  ezi_buf out, in;
  uint64_t timer;
  bool connected;
  ezi_attach_fn fn;
  void *arg;
};

static void attach_free(ezi_attach *a) {
  if (a->timer) ezi_loop_cancel(a->ctx->loop, a->timer);
  if (a->w.fd >= 0) {
    ezi_loop_del(&a->w);
    close(a->w.fd);
  }
  ezi_buf_free(&a->out);
  ezi_buf_free(&a->in);
  free(a);
}

/* Ends the attempt: the callback gets the segment (its lease is the connection) or an error. */
static void finish(ezi_attach *a, int rc, const char *name, size_t n) {
  ezi_seg *seg = NULL;
  if (!rc) {
    char nm[EZI_SHM_NAME_MAX + 1];
    memcpy(nm, name, n);
    nm[n] = 0;
    ezi_loop_del(&a->w);
    rc = ezi_seg_map(a->w.fd, nm, &seg); /* takes the fd, even on failure */
    a->w.fd = -1;
  }
  ezi_attach_fn fn = a->fn;
  void *arg = a->arg;
  attach_free(a);
  fn(arg, rc, seg);
}

static void on_timeout(void *arg) {
  ezi_attach *a = arg;
  a->timer = 0;
  finish(a, EZ_ETIMEDOUT, NULL, 0);
}

/* 1: the answer is complete and finish() ran; 0: wait for more; < 0: a bad answer. */
static int parse(ezi_attach *a) {
  ezi_rd r;
  ezi_rd_init(&r, ezi_buf_head(&a->in), ezi_buf_pending(&a->in), 256);
  const char *ver = NULL, *name = NULL;
  size_t nv = 0, nn = 0;
  uint8_t cmd = 0;
  if (ezi_rd_str(&r, &ver, &nv) && ezi_rd_u8(&r, &cmd) && cmd == EZI_COMPLETE)
    ezi_rd_str(&r, &name, &nn);
  int st = ezi_rd_status(&r);
  if (st <= 0) return st;
  if (cmd != EZI_COMPLETE || !nn || nn > EZI_SHM_NAME_MAX) return EZ_EPROTO;
  finish(a, 0, name, nn);
  return 1;
}

static void on_io(ezi_watch *w, uint32_t ev) {
  ezi_attach *a = w->arg;
  if (!a->connected && (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(w->fd, SOL_SOCKET, SO_ERROR, &err, &len) || err)
      return finish(a, EZ_ENOSERVER, NULL, 0);
    a->connected = true;
  }
  if (a->connected && ezi_buf_pending(&a->out)) { /* the request: a few dozen bytes */
    if (ezi_buf_flush(&a->out, w->fd)) return finish(a, EZ_ECONNLOST, NULL, 0);
    if (!ezi_buf_pending(&a->out)) ezi_loop_mod(w, EPOLLIN | EPOLLRDHUP);
  }
  if (!(ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))) return;
  long n;
  while ((n = ezi_buf_fill(&a->in, w->fd, EZI_ATTACH_ANSWER_MAX)) > 0) {
    int st = parse(a);
    if (st > 0) return;
    if (st < 0) return finish(a, st, NULL, 0);
  }
  if (n < 0) /* the server hung up before answering: it has no such segment */
    return finish(a, EZ_ENOENT, NULL, 0);
  if (ezi_buf_pending(&a->in) >= EZI_ATTACH_ANSWER_MAX) return finish(a, EZ_EPROTO, NULL, 0);
}

int ezi_attach_start(ez_context *ctx, const char *name, int timeout_ms, ezi_attach_fn fn, void *arg,
                     ezi_attach **out) {
  size_t nl = strlen(name);
  if (!nl || nl > EZI_SHM_NAME_MAX) return EZ_EINVAL;
  char host[256];
  uint16_t port;
  if (ezi_addr_parse(ctx->server_addr, host, &port)) return EZ_EADDR;
  ezi_attach *a = calloc(1, sizeof *a);
  if (!a) return EZ_ENOMEM;
  a->ctx = ctx;
  a->fn = fn;
  a->arg = arg;
  a->w = (ezi_watch){.fd = -1, .fn = on_io, .arg = a};
  /* The request goes out without waiting for the server's greeting: it reads commands after
   * sending it, and the socket buffers them meanwhile. */
  ezi_buf_put_u8(&a->out, EZI_SHM_ATTACH);
  ezi_buf_put_cstr(&a->out, name);
  if (!a->out.data) {
    attach_free(a);
    return EZ_ENOMEM;
  }
  int fd = ezi_tcp_connect_start(host, port, &a->connected);
  if (fd < 0) {
    attach_free(a);
    return fd;
  }
  a->w.fd = fd;
  if (ezi_loop_add(ctx->loop, &a->w, EPOLLIN | EPOLLRDHUP | EPOLLOUT)) {
    attach_free(a);
    return EZ_ESYS;
  }
  uint64_t t = timeout_ms < 0 ? 0 : ezi_now_ns() + (uint64_t)timeout_ms * 1000000u;
  if (t && !(a->timer = ezi_loop_timer(ctx->loop, t, on_timeout, a))) {
    attach_free(a);
    return EZ_ENOMEM;
  }
  *out = a;
  return 0;
}

void ezi_attach_cancel(ezi_attach *a) {
  if (a) attach_free(a);
}
