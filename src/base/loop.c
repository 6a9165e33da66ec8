/* epoll reactor with timers and cross-thread posting. */
#include "base/loop.h"
#include "base/internal.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define MAX_EVENTS 64

typedef struct post {
  ezi_task_fn fn;
  void *arg;
  struct post *next;
} post;

typedef struct timer {
  uint64_t id, at;
  ezi_task_fn fn;
  void *arg;
} timer;

struct ezi_loop {
  int epfd;
  ezi_watch wake;
  pthread_mutex_t mu;
  post *posts, **posts_tail;
  timer *timers;
  size_t n_timers, cap_timers;
  uint64_t next_timer_id;
  struct epoll_event events[MAX_EVENTS];
  int n_events, cur_event;
  uint64_t spin_ns;     /* how long to poll before sleeping (0: never) */
  uint32_t spin_score;  /* how often polling found events: 0..1024, a moving average */
  uint32_t since_probe; /* sleeps since the last poll */

  int stop; /* atomic */
  ezi_task_fn wake_hook;
  void *wake_arg;
  ezi_idle_fn idle_hook;
  void *idle_arg;
  int sleeping; /* atomic: ezi_loop_sleeping */
};

static void on_wake(ezi_watch *w, uint32_t ev) {
  (void)ev;
  uint64_t v;
  while (read(w->fd, &v, sizeof v) < 0 && errno == EINTR) {
  }
}

int ezi_loop_new(ezi_loop **out) {
  ezi_loop *l = calloc(1, sizeof *l);
  if (!l) return EZ_ENOMEM;
  l->epfd = epoll_create1(EPOLL_CLOEXEC);

  int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (l->epfd < 0 || efd < 0) {
    if (l->epfd >= 0) close(l->epfd);
    if (efd >= 0) close(efd);
    free(l);
    return EZ_ESYS;
  }
  pthread_mutex_init(&l->mu, NULL);
  l->posts_tail = &l->posts;
  l->wake = (ezi_watch){.fd = efd, .fn = on_wake, .arg = l};
  ezi_loop_add(l, &l->wake, EPOLLIN);
  *out = l;
  return 0;
}

void ezi_loop_free(ezi_loop *l) {
  if (!l) return;
  ezi_loop_del(&l->wake);
  close(l->wake.fd);
  close(l->epfd);
  for (post *p = l->posts, *n; p; p = n) {
    n = p->next;
    free(p);
  }
  free(l->timers);
  pthread_mutex_destroy(&l->mu);
  free(l);
}

int ezi_loop_add(ezi_loop *l, ezi_watch *w, uint32_t events) {
  w->loop = l;
  w->events = events;
  struct epoll_event ev = {.events = events, .data.ptr = w};
  return epoll_ctl(l->epfd, EPOLL_CTL_ADD, w->fd, &ev) == 0 ? 0 : EZ_ESYS;
}

int ezi_loop_mod(ezi_watch *w, uint32_t events) {
  if (w->events == events) return 0;
  w->events = events;
  struct epoll_event ev = {.events = events, .data.ptr = w};
  return epoll_ctl(w->loop->epfd, EPOLL_CTL_MOD, w->fd, &ev) == 0 ? 0 : EZ_ESYS;
}

void ezi_loop_del(ezi_watch *w) {
  ezi_loop *l = w->loop;
  if (!l) return;
  epoll_ctl(l->epfd, EPOLL_CTL_DEL, w->fd, NULL);
  for (int i = l->cur_event; i < l->n_events; i++)
    if (l->events[i].data.ptr == w) l->events[i].data.ptr = NULL;
  w->loop = NULL;
}

uint64_t ezi_loop_timer(ezi_loop *l, uint64_t at_ns, ezi_task_fn fn, void *arg) {
  if (l->n_timers == l->cap_timers) {
    size_t cap = l->cap_timers ? l->cap_timers * 2 : 16;
    timer *t = realloc(l->timers, cap * sizeof *t);
    if (!t) return 0;
    l->timers = t;
    l->cap_timers = cap;
  }
  uint64_t id = ++l->next_timer_id;
  l->timers[l->n_timers++] = (timer){id, at_ns, fn, arg};
  return id;
}

void ezi_loop_cancel(ezi_loop *l, uint64_t id) {
  for (size_t i = 0; i < l->n_timers; i++) {
    if (l->timers[i].id == id) {
      l->timers[i] = l->timers[--l->n_timers];
      return;
    }
  }
}

void ezi_loop_wake(ezi_loop *l) {
  uint64_t one = 1;
  while (write(l->wake.fd, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

int ezi_loop_post(ezi_loop *l, ezi_task_fn fn, void *arg) {
  post *p = malloc(sizeof *p);
  if (!p) return EZ_ENOMEM;
  *p = (post){fn, arg, NULL};
  pthread_mutex_lock(&l->mu);
  *l->posts_tail = p;
  l->posts_tail = &p->next;
  pthread_mutex_unlock(&l->mu);
  ezi_loop_wake(l);
  return 0;
}

void ezi_loop_set_wake_hook(ezi_loop *l, ezi_task_fn fn, void *arg) {
  l->wake_hook = fn;
  l->wake_arg = arg;
}

void ezi_loop_set_idle_hook(ezi_loop *l, ezi_idle_fn fn, void *arg) {
  l->idle_hook = fn;
  l->idle_arg = arg;
}

bool ezi_loop_sleeping(const ezi_loop *l) {
  return __atomic_load_n(&l->sleeping, __ATOMIC_SEQ_CST) != 0;
}

void ezi_loop_stop(ezi_loop *l) {
  __atomic_store_n(&l->stop, 1, __ATOMIC_RELEASE);
  ezi_loop_wake(l);
}

static _Thread_local const ezi_loop *tl_running; /* the loop this thread is running, if any */

bool ezi_loop_on_thread(const ezi_loop *l) { return tl_running == l; }

static void run_posts(ezi_loop *l) {
  pthread_mutex_lock(&l->mu);
  post *p = l->posts;
  l->posts = NULL;
  l->posts_tail = &l->posts;
  pthread_mutex_unlock(&l->mu);
  while (p) {
    post *n = p->next;
    p->fn(p->arg);
    free(p);
    p = n;
  }
}

static int next_timeout_ms(ezi_loop *l) {
  if (!l->n_timers) return -1;
  uint64_t soonest = UINT64_MAX;
  for (size_t i = 0; i < l->n_timers; i++)
    if (l->timers[i].at < soonest) soonest = l->timers[i].at;
  return ezi_ms_left(soonest);
}

static void run_timers(ezi_loop *l) {
  uint64_t now = ezi_now_ns();
  for (size_t i = 0; i < l->n_timers;) {
    if (l->timers[i].at <= now) {
      timer t = l->timers[i];
      l->timers[i] = l->timers[--l->n_timers];
      t.fn(t.arg); /* may add or cancel timers: restart the scan */
      i = 0;
      continue;
    }
    i++;
  }
}

void ezi_loop_set_spin(ezi_loop *l, uint64_t spin_ns) { l->spin_ns = spin_ns; }

int ezi_loop_run(ezi_loop *l) {
  const ezi_loop *outer = tl_running;
  tl_running = l;
  while (!__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE)) {
    int tmo = next_timeout_ms(l), n = 0;
    if (l->spin_ns && tmo != 0 && (l->spin_score >= SPIN_WORTH || ++l->since_probe >= 32)) {
      /* Poll before sleeping: a sleeping thread takes tens of microseconds to wake on a virtual
       * machine, which is the round trip of a busy stream. Spinning stops paying when the events
       * stop coming within the budget; a probe every 32 sleeps notices when they come again. */
      l->since_probe = 0;
      uint64_t t0 = ezi_now_ns();
      while ((n = epoll_wait(l->epfd, l->events, MAX_EVENTS, 0)) == 0 &&
             ezi_now_ns() - t0 < l->spin_ns)
        sched_yield(); /* anything else runnable on this CPU goes first */
      l->spin_score = l->spin_score - l->spin_score / 8 + (n > 0 ? 128 : 0);
    }
    if (n == 0) {
      if (l->idle_hook && tmo != 0) { /* announced first: see ezi_loop_sleeping */
        __atomic_store_n(&l->sleeping, 1, __ATOMIC_SEQ_CST);
        l->idle_hook(l->idle_arg, true);
      }
      n = epoll_wait(l->epfd, l->events, MAX_EVENTS, tmo);
      __atomic_store_n(&l->sleeping, 0, __ATOMIC_RELAXED);
    }
    l->n_events = n > 0 ? n : 0;
    bool woke = false;
    for (l->cur_event = 0; l->cur_event < l->n_events;) {
      struct epoll_event ev = l->events[l->cur_event++];
      ezi_watch *w = ev.data.ptr;
      if (!w) continue;
      if (w == &l->wake) woke = true;
      w->fn(w, ev.events);
    }
    l->n_events = l->cur_event = 0;
    if (woke) {
      run_posts(l);
      if (l->wake_hook) l->wake_hook(l->wake_arg);
    }
    if (l->idle_hook && n > 0) l->idle_hook(l->idle_arg, false);
    run_timers(l);
  }
  run_posts(l);
  tl_running = outer;
  __atomic_store_n(&l->stop, 0, __ATOMIC_RELEASE);
  return 0;
}
