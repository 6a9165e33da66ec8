/* The reactor: epoll for fds, a timer list, and thread-safe posting of work (woken by an eventfd).
 * One thread runs a loop; everything registered with it is touched only by that thread, except
 * ezi_loop_post / ezi_loop_stop, which any thread may call. */
#ifndef EZI_LOOP_H
#define EZI_LOOP_H

#include <stdbool.h>
#include <stdint.h>

typedef struct ezi_loop ezi_loop;
typedef struct ezi_watch ezi_watch;

/* Called on the loop thread with the epoll events that fired (EPOLLIN, EPOLLOUT, EPOLLHUP, ...). */
typedef void (*ezi_io_fn)(ezi_watch *w, uint32_t events);

/* An fd registration; embed it in the object that owns the fd. */
struct ezi_watch {
  int fd;
  uint32_t events;
  ezi_io_fn fn;
  void *arg;
  ezi_loop *loop;
};

typedef void (*ezi_task_fn)(void *arg);

int ezi_loop_new(ezi_loop **out);
/* Frees the loop; callers must have removed their watches. Runs nothing that is still posted. */
void ezi_loop_free(ezi_loop *l);

/* Registers w (fd, fn, arg already set) for `events`. EZ_ESYS on failure. */
int ezi_loop_add(ezi_loop *l, ezi_watch *w, uint32_t events);
/* Changes the events of a registered watch (no system call if unchanged). */
int ezi_loop_mod(ezi_watch *w, uint32_t events);
/* Unregisters w; events of this iteration not yet dispatched for it are dropped, so the owner
 * may free it right after. Does not close the fd. */
void ezi_loop_del(ezi_watch *w);

/* Calls fn(arg) on the loop thread once `at_ns` (monotonic) has passed. Returns a timer id (> 0)
 * for ezi_loop_cancel, or 0 on ENOMEM. Loop thread only. */
uint64_t ezi_loop_timer(ezi_loop *l, uint64_t at_ns, ezi_task_fn fn, void *arg);
/* Cancels a pending timer; unknown or fired ids are ignored. Loop thread only. */
void ezi_loop_cancel(ezi_loop *l, uint64_t id);

/* Runs fn(arg) on the loop thread soon. Any thread. EZ_ENOMEM on failure. */
int ezi_loop_post(ezi_loop *l, ezi_task_fn fn, void *arg);
/* Wakes the loop without posting anything (it will run its `on_wake` hook). Any thread. */
void ezi_loop_wake(ezi_loop *l);
/* A hook run on the loop thread after every wake-up (used for lock-free hand-offs). */
void ezi_loop_set_wake_hook(ezi_loop *l, ezi_task_fn fn, void *arg);
/* A hook run on the loop thread after every round of events (sleep false), and before the loop
 * sleeps (sleep true; ezi_loop_sleeping is true from just before the call until the loop wakes):
 * work that waits for a quiet moment, such as acknowledgements sent in batches (tcpring.c). */
typedef void (*ezi_idle_fn)(void *arg, bool sleep);
void ezi_loop_set_idle_hook(ezi_loop *l, ezi_idle_fn fn, void *arg);
/* True while the loop sleeps, or is about to (see ezi_loop_set_idle_hook): work for its idle
 * hook must then wake it (ezi_loop_wake). Sequentially consistent. Any thread. */
bool ezi_loop_sleeping(const ezi_loop *l);

/* Makes the loop poll for up to spin_ns before each sleep, while polling keeps finding events
 * (0: never). Before ezi_loop_run. */
void ezi_loop_set_spin(ezi_loop *l, uint64_t spin_ns);

/* Runs until ezi_loop_stop. Returns 0. */
int ezi_loop_run(ezi_loop *l);
/* Makes ezi_loop_run return after its current iteration. Any thread. */
void ezi_loop_stop(ezi_loop *l);
/* True if the calling thread is the one running the loop. */
bool ezi_loop_on_thread(const ezi_loop *l);

#endif
