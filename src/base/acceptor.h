/* Accepting connections on a listener without spinning when descriptors run out. Internal.
 *
 * accept() that fails with EMFILE or ENFILE leaves the connection in the listen queue, so the
 * listener stays readable and an event loop calls accept again at once: a process out of
 * descriptors spun a whole core and served no one. Here the connection waiting first is accepted
 * with a descriptor kept in reserve for that and closed at once (its peer sees the close and may
 * try again later), the event is logged at most a few times per period (internal.h's rate limits),
 * and if even that is not possible, the listener is left unwatched for EZI_ACCEPT_PAUSE_MS. */
#ifndef EZI_ACCEPTOR_H
#define EZI_ACCEPTOR_H

#include "base/loop.h"

#include <stdbool.h>
#include <stdint.h>

#define EZI_ACCEPT_PAUSE_MS 200

typedef struct ezi_acceptor {
  ezi_watch *w;     /* the listener's watch (registered with EPOLLIN) */
  ezi_loop *loop;   /* its loop */
  const char *who;  /* for log lines ("publisher /topic", "graph server") */
  uint64_t timer;   /* a pause's end, 0: not paused */
  uint64_t dropped; /* connections closed for want of descriptors */
  bool live;        /* between init and stop */
} ezi_acceptor;

/* Sets a up for listener watch w on loop (who must outlive it). The first acceptor of the
 * process opens the reserve descriptor (the last one's ezi_acceptor_stop closes it). Loop
 * thread, or before the loop runs. */
void ezi_acceptor_init(ezi_acceptor *a, ezi_watch *w, ezi_loop *loop, const char *who);
/* The next connection (non-blocking, close-on-exec), or -1 when there is none now: nothing
 * pending, or the pending ones were shed for want of descriptors (then the listener may be
 * paused). Other errors are logged (rate-limited) and also give -1. Loop thread. */
int ezi_accept(ezi_acceptor *a);
/* Cancels a pause and lets go of the reserve (before the listener's watch is removed); once per
 * init, later calls do nothing. Loop thread, or after it stopped. */
void ezi_acceptor_stop(ezi_acceptor *a);

/* Raises this process's soft limit on open files to its hard limit (at most 2^20), once: a
 * process that serves connections (a graph server, a publisher's channels, a subscriber's links)
 * needs one descriptor per peer, and the usual soft limit of 1024 caps a large graph long before
 * the hard limit does. Failure leaves the limit as it was. Any thread. */
void ezi_raise_fd_limit(void);

#endif
