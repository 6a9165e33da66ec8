/* A subscriber's private state, shared by subscriber.c (the notice queue, recv, creation and
 * destruction) and sublink.c (its graph link: UPDATEs, joining and leaving channels, and the
 * supervision that joins a failed link again, sublink.h); and the functions of subscriber.c. */
#ifndef EZI_SUBSCRIBER_H
#define EZI_SUBSCRIBER_H

#include "core/context.h"
#include "ring/localchan.h"
#include "base/trace.h"

typedef struct link {
  char pub_id[37];
  chan_sub *cs;      /* NULL while waiting to join again */
  uint64_t retry_at; /* with cs NULL: when to join again (0: not scheduled, the server said the
                      * publisher is unknown or knocks found it gone; the next UPDATE listing it
                      * retries) */
  unsigned failures; /* in a row; reset by a join that completes */
  bool retry_join;   /* cs is a retry's join, still shaking hands (not counted in joins_pending) */
  /* After a cut: the address to knock at before joining again, and how many knocks were refused
   * in a row (sublink.c). */
  char knock[EZI_ADDR_MAX];
  unsigned knocks;
  chan_sub **dead; /* memberships of cut channels whose messages the user still views */
  size_t n_dead;
} pub_link;

struct ez_sub {
  ez_context *ctx;
  char id[37];
  char *topic, *handle;
  ezi_trace *trace; /* atomic: set once a tool traces it (trace.h), else NULL */
  /* graph link (I/O thread) */
  ezi_watch gw;
  ezi_buf gin;
  ezi_outbox gout;
  pub_link *links;
  size_t n_links;
  size_t joins_pending; /* channels of the current UPDATE still shaking hands */
  uint64_t retry_timer; /* the loop timer that joins failed links again (0: none) */
  /* queue (mu) */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int waiters;
  note *q;
  size_t head, n, cap;
  int efd;
  bool efd_set, initialized, lost, closing;
  bool wake_pending; /* a batch is being queued: signal once it is all there */
  uint32_t pushed;   /* atomic, written under mu: notices ever queued (what a polling receiver
                      * watches) */
  bool rr;           /* alternates between queued notices and ring channels */
  /* Its receiver of ring channels' messages (ring/localchan.h: memberships, want_signal, a leaky
   * one's max_queue and dropped count), under mu. */
  ezi_lrecv lr;
  /* the receiving thread's own (one thread at a time per subscriber) */
  uint64_t received;    /* atomic, one writer (the receiving thread): messages ez_recv gave out */
  uint32_t spin_score;  /* how often polling found a message: 0..1024, a moving average */
  uint32_t since_probe; /* waits since the last poll */
};

/* subscriber.c: signals a receiver (eventfd, condition variable) that the queue is not empty or
 * the subscriber is lost. s->mu held. ezi_sub_mark_ready: the eventfd only; returns whether a
 * receiver sleeps on s->cv, for the caller to signal once it has dropped s->mu (so that the woken
 * receiver does not wake into a held lock); whatever keeps s alive must outlast that signal. */
void ezi_sub_signal_ready(ez_sub *s);
bool ezi_sub_mark_ready(ez_sub *s);

/* ---- subscriber.c: a membership's callbacks (ezi_member_ops) and the notice queue
 * ------------------------------------------------------------- */
/* Queues a notice for sub (called with chan->mu held). With defer_wake, a sleeping receiver is
 * signalled only by the next ezi_sub_wake (the I/O thread queues a whole read's batch first).
 * Returns false if it could not be queued (out of memory). A leaky subscriber whose queue is full
 * drops its oldest notice to make room: it goes to *dropped (its cs NULL if none), for the
 * caller to release once it holds no channel lock. */
bool ezi_sub_push(ez_sub *sub, chan_sub *cs, uint64_t msg_id, bool defer_wake, note *dropped);
/* Signals the receiver if a deferred push left it asleep. Any thread. */
void ezi_sub_wake(ez_sub *sub);
/* Drops every queued notice of cs, then (unlocked) passes their msg ids to fn, in order. */
void ezi_sub_purge(ez_sub *sub, chan_sub *cs, void (*fn)(chan_sub *, uint64_t));
/* Releases every queued notice (the subscriber is going away; the channels it still holds
 * messages of, left already, go once those are released). I/O thread. */
void ezi_sub_purge_all(ez_sub *sub);
/* Removes up to cap queued notices of cs for which drop(cs, msg_id, arg) says so (called under
 * sub->mu: it may not take a lock that comes after it), into ids; the others stay where they
 * are, in order. Returns how many were removed. */
size_t ezi_sub_take_if(ez_sub *sub, chan_sub *cs, bool (*drop)(chan_sub *, uint64_t, void *),
                       void *arg, uint64_t *ids, size_t cap);
const char *ezi_sub_handle(const ez_sub *sub);
/* A membership's profile (ezi_member_ops.profile): its processing times, the subscriber's id and
 * handle, and a leaky one's bound and what it dropped. */
json_t *ezi_sub_member_json(const ez_sub *sub, const ezi_window *proc, uint64_t in_flight,
                            uint64_t now, double window_s);
/* Where s keeps its trace, and its topic and id (ezi_member_ops.trace_of). */
ezi_trace **ezi_sub_trace_of(ez_sub *s, const char **topic, const char **id);
#endif
