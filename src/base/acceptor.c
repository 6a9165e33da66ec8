/* Accepting without spinning when descriptors run out (acceptor.h). */
#include "base/acceptor.h"
#include "base/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

/* One reserve descriptor per process while any acceptor lives (g_mu): -1 if it could not be
 * opened, or while shed() uses it. Closed with the last acceptor, so that a process that stops
 * serving has no descriptor more than before. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_reserve = -1;
static int g_users;

void ezi_acceptor_init(ezi_acceptor *a, ezi_watch *w, ezi_loop *loop, const char *who) {
  pthread_mutex_lock(&g_mu);
  if (g_users++ == 0) g_reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
  pthread_mutex_unlock(&g_mu);
  *a = (ezi_acceptor){.w = w, .loop = loop, .who = who, .live = true};
}

static void resume(void *arg) {
  ezi_acceptor *a = arg;
  a->timer = 0;
  ezi_loop_mod(a->w, EPOLLIN);
}

/* Stops watching the listener for EZI_ACCEPT_PAUSE_MS (never spin on it). */
static void pause_listener(ezi_acceptor *a) {
  if (a->timer) return;
  uint64_t at = ezi_now_ns() + (uint64_t)EZI_ACCEPT_PAUSE_MS * 1000000u;
  if ((a->timer = ezi_loop_timer(a->loop, at, resume, a))) ezi_loop_mod(a->w, 0);
}

/* Out of descriptors (err): accepts the next pending connection with the reserve descriptor's
 * help and closes it at once (true: try again), or finds none pending (false), or, if that is
 * not possible either, pauses the listener (false). */
static bool shed(ezi_acceptor *a, int err) {
  int fd = -1, e = err;
  pthread_mutex_lock(&g_mu);
  bool reserve = g_reserve >= 0 && (err == EMFILE || err == ENFILE);
  if (reserve) {
    close(g_reserve);
    fd = accept4(a->w->fd, NULL, NULL, SOCK_CLOEXEC); /* non-blocking: the listener is */
    e = errno;
    if (fd >= 0) close(fd);
    g_reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  pthread_mutex_unlock(&g_mu);
  if (fd >= 0) {
    a->dropped++;
    EZI_WARN_RL("%s: out of file descriptors (%s): closed a new connection at once (%llu so far)",
                a->who, strerror(err), (unsigned long long)a->dropped);
    return true;
  }
  if (reserve && (e == EAGAIN || e == EWOULDBLOCK)) return false; /* nobody waits */
  EZI_WARN_RL("%s: cannot accept (%s): not accepting for %d ms", a->who, strerror(err),
              EZI_ACCEPT_PAUSE_MS);
  pause_listener(a);
  return false;
}

int ezi_accept(ezi_acceptor *a) {
  for (;;) {
    int fd = accept4(a->w->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) return fd;
    int e = errno;
    if (e == EINTR || e == ECONNABORTED) continue;
    if (e == EAGAIN || e == EWOULDBLOCK) return -1;
    if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
      if (shed(a, e)) continue; /* the next one may fit (a descriptor was freed meanwhile) */
      return -1;
    }
    EZI_WARN_RL("%s: accept: %s", a->who, strerror(e));
    pause_listener(a);
    return -1;
  }
}

void ezi_acceptor_stop(ezi_acceptor *a) {
  if (!a->live) return;
  a->live = false;
  if (a->timer) ezi_loop_cancel(a->loop, a->timer);
  a->timer = 0;
  pthread_mutex_lock(&g_mu);
  if (--g_users == 0 && g_reserve >= 0) {
    close(g_reserve);
    g_reserve = -1;
  }
  pthread_mutex_unlock(&g_mu);
}

static void raise_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl)) return;
  rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > (1u << 20) ? (1u << 20) : rl.rlim_max;
  if (rl.rlim_cur >= want) return;
  rl.rlim_cur = want;
  if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
    EZI_DEBUG("raised the open-files limit to %llu", (unsigned long long)want);
}

void ezi_raise_fd_limit(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, raise_limit);
}
