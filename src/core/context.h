/* The data plane's internal objects and how they share a process.
 *
 * Threads: each context runs one I/O thread (its loop). User threads call publish / recv / release
 * directly; control work (creating and destroying publishers, subscribers and channels, answering
 * the graph server) runs on the I/O thread, and user-thread API calls that need it wait for it
 * there (ezi_ctx_call).
 *
 * Lock order, outermost first: pub->mu, chan->mu, sub->mu, outbox->mu. No lock is held across a
 * blocking system call except the outbox's short appends. Messages between threads of one process
 * take no lock of the other side (localchan.c): the publisher only its pub->mu, a receiver only
 * its sub->mu, unless the other side sleeps. */
#ifndef EZI_CONTEXT_H
#define EZI_CONTEXT_H

#include "proto/dialect.h"
#include "base/internal.h"
#include "base/loop.h"
#include "proto/marshal.h"
#include "proto/shm.h"
#include "base/telemetry.h"
#include "base/wire.h"
#include "base/trace.h"
#include "core/segment.h"

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>

typedef struct chan chan;
typedef struct chan_sub chan_sub;
/* A notice queued for a subscriber (subscriber.c): message msg_id of channel membership cs. */
typedef struct note {
  chan_sub *cs;
  uint64_t msg_id;
} note;
/* Messages a leaky subscriber dropped from a ring (localchan.c), to finish without locks. */
#define EZI_LDROPS_MAX 16
typedef struct ezi_ldrop {
  chan_sub *cs;
  uint64_t msg_id;
  struct ezi_seg *seg;
  bool wake;
} ezi_ldrop;
typedef struct ezi_ldrops {
  size_t n;
  ezi_ldrop v[EZI_LDROPS_MAX];
} ezi_ldrops;
typedef struct pub_chan pub_chan;

/* ---- outbox: bytes for one socket, appended by any thread, written by the I/O thread ----------
 * Appends are cheap (a lock and a memcpy); the first append after a flush asks the loop to write,
 * so under load many frames go out in one system call, and an idle link adds no delay. When the
 * I/O thread falls behind (EZI_OUTBOX_BATCH bytes wait while it writes nothing), the appending
 * thread writes them itself: one system call for that many bytes, on the core that wrote them.
 *
 * An outbox holds what its socket does not take yet. A publisher's data outbox is bounded by
 * EZI_OUTBOX_HIGH: past it the publisher waits (as for a slot) until the I/O thread has written
 * it down to half of that (ezi_outbox_full, ezi_outbox_wait_drain). Without the bound, a TCP
 * channel slower than its publisher made the outbox hold num_buffers messages besides their
 * slots: 512 MiB at 16 MiB a message. */
#define EZI_OUTBOX_HIGH ((uint64_t)8 << 20)
#define EZI_OUTBOX_BATCH 32768
typedef struct ezi_outbox {
  pthread_mutex_t mu;
  /* Unsent bytes (appended, not written to the socket yet) are appended - written: appended has
   * one writer at a time (under mu), so that an append costs no locked instruction; written is
   * added to by whoever writes (the I/O thread, or an appender's write_batch). */
  uint64_t appended;   /* atomic, stored under mu: bytes ever appended to pending */
  uint32_t drain_wait; /* atomic: someone waits for the unsent bytes to fall to HIGH / 2 */
  uint64_t written;    /* atomic, added to by whoever writes: bytes ever written (or dropped) */
  ezi_buf pending;     /* appended, not yet taken by the I/O thread */
  ezi_buf io;          /* being written by the I/O thread */
  bool queued;         /* on the context's dirty list */
  bool io_busy;        /* (under mu) the I/O thread holds bytes in io: nobody else writes */
  bool dead;           /* socket gone: appends are dropped */
  ezi_watch *w;        /* the socket's watch (EPOLLOUT is armed through it) */
  struct ezi_outbox *next_dirty;
  uint32_t base_events;
  void (*on_drain)(void *arg); /* called (I/O thread, no lock held) for drain_wait, or NULL */
  void *drain_arg;
} ezi_outbox;

/* ---- context ------------------------------------------------------------------------------ */
/* What a channel asks of a publisher of its own process: the publishers' part (pub/publocal.c),
 * which every publisher registers in its context (ctx->local_pubs). I/O thread. */
typedef struct ezi_local_pubs_ops {
  /* The publisher whose id is `id` (its num_buffers in *nbuf), or NULL. */
  ez_pub *(*find)(ez_context *ctx, const char *id, uint32_t *nbuf);
  /* Attaches local channel c to pub, which starts putting into its ring (0, EZ_ENOMEM), or, with
   * c NULL, detaches pub's channel (its members released everything). */
  int (*attach)(ez_pub *pub, chan *c);
  /* pub goes away: hands its current segment (a new reference), its retired ones and its two hot
   * buffers (hot[2], malloc'd or NULL) over to its local channel, whose queued messages and views
   * may still live in them. */
  void (*hand_over)(ez_pub *pub, ezi_seg **seg, ezi_seg_chain **retired, uint8_t **hot);
} ezi_local_pubs_ops;

struct ez_context {
  char address[300];
  char server_addr[300]; /* the same with a numeric host: what its threads connect to */
  ez_server *server;
  ezi_loop *loop;
  pthread_t thread;
  pthread_mutex_t mu; /* registries below */
  ez_pub **pubs;
  size_t n_pubs;
  ez_sub **subs;
  size_t n_subs;
  chan **chans;
  size_t n_chans;
  pthread_mutex_t dirty_mu;
  ezi_outbox *dirty;
  uint64_t spin_ns;    /* how long threads poll before sleeping ($EZMSG_SPIN_US) */
  bool ring_ok;        /* shared-memory rings with other ezmsg-c processes ($EZMSG_SHM_RING) */
  bool ring_wake;      /* their receivers sleep on the ring's word ($EZMSG_SHM_WAKE) */
  uint32_t tcp_window; /* messages in flight on a TCP link between ezmsg-c peers (0: off) */
  int resignal_posted; /* atomic: the I/O thread is asked to signal ring channels' waiters */
  int acks_posted;     /* atomic: the I/O thread is asked to acknowledge TCP rings (tcpring.c) */
  /* The acknowledgements releases asked for (acks_posted), run by the I/O thread after a wake-up:
   * set by the first TCP window (rx/tcpring.c) on the I/O thread, NULL until then. */
  void (*rx_acks)(ez_context *ctx);
  /* The publishers' part for local channels (above), set as the first publisher registers (I/O
   * thread, ctx->mu); NULL while there has been none. */
  const ezi_local_pubs_ops *local_pubs;
  /* The trace control's poll (proc/tracectl.h), which the process sets as it opens, on the I/O
   * thread (ez_context_open): a PROFILE answer traces its endpoint a while more
   * (ezi_ctx_trace_poll). NULL until then. */
  ezi_trace *(*trace_poll)(ez_context *ctx, ezi_trace **slot, const char *topic, const char *id);
  /* The answer to X_PROFILE_CTX (proto/ctxprofile.h): every publisher's and channel's profile
   * over window_ms, as X_PROFILE_PART frames and X_PROFILE_END, into the outbox ob of the graph
   * connection that was asked. Set by the process as it opens (proc/process.c), I/O thread. */
  void (*profile_all)(ez_context *ctx, uint64_t window_ms, ezi_outbox *ob);
  char id[37];    /* this context's id (X_CTX), a UUID */
  ezi_tick *tick; /* expires its publishers' sampled stamps (telclock.h) */
  char host[64];  /* this process's address as seen for profiles */
  int pid;
  ezi_peer_version server_peer;  /* what the graph server's greeting said at open (dialect.h) */
  struct ezi_proc *proc;         /* the process link in a released graph (procclient.h), or NULL */
  struct ezi_tracectl *tracectl; /* trace control (tracectl.h); I/O thread */
};

/* Runs fn(arg) on the context's I/O thread and waits for it. From the I/O thread itself, runs it
 * directly. */
void ezi_ctx_call(ez_context *ctx, void (*fn)(void *), void *arg);

/* The context without what the process adds (proc/process.c, ez_context_open and _close):
 * ezi_ctx_new reaches (or embeds) the graph server at address and starts the I/O thread (0,
 * EZ_EADDR, EZ_ENOSERVER, EZ_ENOMEM, EZ_ESYS: nothing is left then); ezi_ctx_free stops the I/O
 * thread and frees the context, whose endpoints are gone already. Caller's thread. */
int ezi_ctx_new(const char *address, ez_context **out);
void ezi_ctx_free(ez_context *ctx);
/* The trace control's poll, if the process set it (ctx->trace_poll): traces the endpoint (topic,
 * id) whose trace is *slot a while more and returns the trace (NULL: none). I/O thread. */
static inline ezi_trace *ezi_ctx_trace_poll(ez_context *ctx, ezi_trace **slot, const char *topic,
                                            const char *id) {
  return ctx->trace_poll ? ctx->trace_poll(ctx, slot, topic, id) : NULL;
}

void ezi_outbox_init(ezi_outbox *ob, ezi_watch *w, uint32_t base_events);
/* Appends bytes (any thread). Returns false if the outbox is dead. */
bool ezi_outbox_put(ez_context *ctx, ezi_outbox *ob, const void *p, size_t n);
/* Appends p1[0..n1) then p2[0..n2) with ob->mu held; when the link is idle, writes them straight
 * to the socket instead, and when EZI_OUTBOX_BATCH bytes are pending and the I/O thread writes
 * nothing, writes those (non-blocking; what the socket does not take stays for the I/O thread).
 * Returns true if the caller must call ezi_outbox_kick after unlocking.
 * Out of memory, the frame is lost and so is the link: the outbox dies (logged), and its next
 * flush reports EZ_ECONNLOST, so that the I/O thread closes the link. */
bool ezi_outbox_put_locked(ezi_outbox *ob, const void *p1, size_t n1, const void *p2, size_t n2);
void ezi_outbox_kick(ez_context *ctx, ezi_outbox *ob);
/* Appends a small frame that someone waits for (a wake-up): on an idle link it is written from
 * the calling thread at once instead of by the I/O thread. False if the outbox is dead. */
bool ezi_outbox_put_now(ez_context *ctx, ezi_outbox *ob, const void *p, size_t n);
/* Appends PROFILE_DATA with j as compact JSON ("{}" if j is NULL or cannot be written) and drops
 * the reference to j. Any thread. */
void ezi_outbox_put_profile(ez_context *ctx, ezi_outbox *ob, json_t *j);
/* I/O thread: writes what is pending; EZ_ECONNLOST if the socket failed or the outbox died. */
int ezi_outbox_flush(ezi_outbox *ob);
/* Sets the events the outbox's socket is watched for besides EPOLLOUT (which it arms itself while
 * it has bytes to write): a reader pauses by leaving EPOLLIN out. I/O thread. */
void ezi_outbox_set_events(ezi_outbox *ob, uint32_t base_events);
/* I/O thread: marks dead and unlinks from the dirty list; frees the buffers. A drain waiter is
 * called as if the outbox had drained. */
void ezi_outbox_close(ez_context *ctx, ezi_outbox *ob);
/* Bytes appended to ob and not written to its socket yet (any thread; two loads). */
static inline uint64_t ezi_outbox_unsent(ezi_outbox *ob) {
  uint64_t written = __atomic_load_n(&ob->written, __ATOMIC_SEQ_CST);
  return __atomic_load_n(&ob->appended, __ATOMIC_SEQ_CST) - written;
}
/* Whether ob holds EZI_OUTBOX_HIGH bytes or more, unsent (any thread). */
static inline bool ezi_outbox_full(ezi_outbox *ob) {
  return ezi_outbox_unsent(ob) >= EZI_OUTBOX_HIGH;
}
/* Arms ob's drain wake-up: once unsent is at most EZI_OUTBOX_HIGH / 2 (or ob closes), the I/O
 * thread calls ob->on_drain(ob->drain_arg). Returns false, disarmed, if ob is not full any more:
 * then nothing is to be waited for. A waiter calls it under the lock that on_drain takes before
 * it signals, so that no wake-up is lost between the check and the wait. */
bool ezi_outbox_wait_drain(ezi_outbox *ob);

/* The TCP window between ezmsg-c peers (pub/pubwin.c, rx/tcpring.c): the most messages a channel
 * accepts, the byte budget a publisher proposes, and the most a channel accepts, beyond
 * num_buffers messages. */
#define EZI_WIN_MAX_MSGS 16384
#define EZI_WIN_BYTES ((uint64_t)8 << 20)
#define EZI_WIN_MAX_BYTES ((uint64_t)64 << 20)

/* X_PROFILE_CTX(window_ms) came on a graph connection whose outbox is ob: the process answers it
 * (ctx->profile_all), or, before it can, X_PROFILE_END alone. I/O thread. */
static inline void ezi_ctx_profile_all(ez_context *ctx, uint64_t window_ms, ezi_outbox *ob) {
  if (ctx->profile_all) {
    ctx->profile_all(ctx, window_ms, ob);
  } else {
    uint8_t end = EZI_X_PROFILE_END;
    ezi_outbox_put(ctx, ob, &end, 1);
  }
}

#endif
