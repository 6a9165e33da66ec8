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

/* ---- segments: a mapped ezmsg shared-memory layout (or private memory in the same layout) --- */
typedef struct ezi_seg {
  int refs;      /* atomic */
  ezi_shm shm;   /* mapping; shm.name empty for private memory */
  uint8_t *priv; /* private memory (when the publisher could not map the server's) */
  int lease_fd;  /* graph-server lease, -1 if none */
  bool creator;  /* we asked the server for it: if the server dies, we unlink it */
  bool unlinked; /* atomic: we removed its name (ezi_seg_orphaned), not to be removed again */
} ezi_seg;

/* Leases `name` at the graph server and maps it. */
int ezi_seg_attach(const char *address, const char *name, ezi_seg **out, int timeout_ms);
/* Maps segment `name` whose lease is the graph-server connection fd; the segment takes fd, and
 * on failure fd is closed. */
int ezi_seg_map(int fd, const char *name, ezi_seg **out);

/* segattach.c: ezi_seg_attach without blocking, on the I/O thread. fn(arg, 0, seg) gets the
 * mapped segment (a reference the callee owns), or fn(arg, rc, NULL) an error: EZ_ENOENT (the
 * server has no such segment), EZ_ETIMEDOUT after timeout_ms (< 0: no limit), EZ_ENOSERVER,
 * EZ_ECONNLOST, EZ_EPROTO, or what mapping it returned. fn runs once, on the I/O thread, never
 * from within ezi_attach_start, and not after ezi_attach_cancel. Start returns 0 (and *out), or an
 * error and then fn is never called. I/O thread only. */
typedef struct ezi_attach ezi_attach;
typedef void (*ezi_attach_fn)(void *arg, int rc, ezi_seg *seg);
int ezi_attach_start(ez_context *ctx, const char *name, int timeout_ms, ezi_attach_fn fn, void *arg,
                     ezi_attach **out);
/* Abandons an attempt still running (NULL: nothing). */
void ezi_attach_cancel(ezi_attach *a);

/* Asks the graph server for a new segment and maps it. */
int ezi_seg_create(const char *address, uint64_t num_buffers, uint64_t buf_size, ezi_seg **out,
                   int timeout_ms);
/* Private memory in the segment layout, named `name` (when the server's segment can't be mapped).
 */
int ezi_seg_private(const char *name, uint64_t num_buffers, uint64_t buf_size, ezi_seg **out);
static inline uint8_t *ezi_seg_data(const ezi_seg *s, uint64_t i) {
  return ezi_shm_data(&s->shm, i);
}
static inline uint64_t ezi_seg_room(const ezi_seg *s) { return s->shm.stride - 16; }
void ezi_seg_ref(ezi_seg *s);
/* Frees s, whose last reference was dropped (ezi_seg_unref). */
void ezi_seg_free(ezi_seg *s);
/* Drops a reference (NULL: nothing); the last one frees s. Inline: a ring channel's release
 * drops one per message. Any thread. */
static inline void ezi_seg_unref(ezi_seg *s) {
  if (s && __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) == 0) ezi_seg_free(s);
}
/* True if the graph server hung up on s's lease, waiting up to wait_ms for it (0: just look).
 * False for a segment without a lease. The caller holds a reference. Any thread. */
bool ezi_seg_server_gone(ezi_seg *s, int wait_ms);
/* The server that leased s is gone (ezi_seg_server_gone): if we asked for s, removes its name now
 * rather than at the last unref, since nobody else will and this process may not live to do it
 * (mappings stay valid; with the server gone, nobody can join s by name). NULL: no-op. Once per
 * segment; any thread, with a reference held. */
void ezi_seg_orphaned(ezi_seg *s);

/* Segments a publisher replaced (grew) while messages in them were still held. */
typedef struct ezi_seg_chain {
  ezi_seg *seg;
  uint64_t last_id; /* the last message sent in it */
  struct ezi_seg_chain *next;
} ezi_seg_chain;
/* Drops the segments of a chain and frees it. */
void ezi_seg_chain_free(ezi_seg_chain *c);

/* ---- outbox: bytes for one socket, appended by any thread, written by the I/O thread ----------
 * Appends are cheap (a lock and a memcpy); the first append after a flush asks the loop to write,
 * so under load many frames go out in one system call, and an idle link adds no delay.
 *
 * An outbox holds what its socket does not take yet. A publisher's data outbox is bounded by
 * EZI_OUTBOX_HIGH: past it the publisher waits (as for a slot) until the I/O thread has written
 * it down to half of that (ezi_outbox_full, ezi_outbox_wait_drain). Without the bound, a TCP
 * channel slower than its publisher made the outbox hold num_buffers messages besides their
 * slots: 512 MiB at 16 MiB a message. */
#define EZI_OUTBOX_HIGH ((uint64_t)8 << 20)
typedef struct ezi_outbox {
  pthread_mutex_t mu;
  /* Unsent bytes (appended, not written to the socket yet) are appended - written: two counters
   * with one writer each, so that an append costs no locked instruction. */
  uint64_t appended;   /* atomic, stored under mu: bytes ever appended to pending */
  uint32_t drain_wait; /* atomic: someone waits for the unsent bytes to fall to HIGH / 2 */
  uint64_t written;    /* atomic, stored by the I/O thread: bytes ever written (or dropped) */
  ezi_buf pending;     /* appended, not yet taken by the I/O thread */
  ezi_buf io;          /* being written by the I/O thread */
  bool queued;         /* on the context's dirty list */
  bool dead;           /* socket gone: appends are dropped */
  ezi_watch *w;        /* the socket's watch (EPOLLOUT is armed through it) */
  struct ezi_outbox *next_dirty;
  uint32_t base_events;
  void (*on_drain)(void *arg); /* called (I/O thread, no lock held) for drain_wait, or NULL */
  void *drain_arg;
} ezi_outbox;

/* ---- context ------------------------------------------------------------------------------ */
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
  uint32_t tcp_window; /* messages in flight on a TCP link between ezmsg-c peers (0: off) */
  int resignal_posted; /* atomic: the I/O thread is asked to signal ring channels' waiters */
  int acks_posted;     /* atomic: the I/O thread is asked to acknowledge TCP rings (tcpring.c) */
  /* The acknowledgements releases asked for (acks_posted), run by the I/O thread after a wake-up:
   * set by the first TCP window (rx/tcpring.c) on the I/O thread, NULL until then. */
  void (*rx_acks)(ez_context *ctx);
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

void ezi_outbox_init(ezi_outbox *ob, ezi_watch *w, uint32_t base_events);
/* Appends bytes (any thread). Returns false if the outbox is dead. */
bool ezi_outbox_put(ez_context *ctx, ezi_outbox *ob, const void *p, size_t n);
/* Appends p1[0..n1) then p2[0..n2) with ob->mu held; when the link is idle, writes them straight
 * to the socket instead. Returns true if the caller must call ezi_outbox_kick after unlocking.
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

/* Registry lookups (ctx->mu held by the caller or I/O thread only). find_chan skips failed
 * channels. */
ez_pub *ezi_ctx_find_pub(ez_context *ctx, const char *id);
chan *ezi_ctx_find_chan(ez_context *ctx, const char *pub_id);

/* ---- publisher (publisher.c) --------------------------------------------------------------- */
/* Attaches the process's local channel (EZ_ENOMEM) or, with c NULL, detaches it. I/O thread. */
int ezi_pub_set_local(ez_pub *pub, chan *c);
/* The publisher goes away: hands its current segment (a new reference), its retired ones and its
 * two hot buffers (hot[2], malloc'd or NULL) over to the local channel, whose queued messages and
 * views may still live in them. I/O thread. */
void ezi_pub_hand_over(ez_pub *pub, ezi_seg **seg, ezi_seg_chain **retired, uint8_t **hot);
/* The publisher lost its graph connection: if the server died (its lease hangs up within
 * LEASE_HANGUP_WAIT_MS), removes the names of the segments it asked for (ezi_seg_orphaned), so
 * that a SIGKILL of this process afterwards leaves nothing in /dev/shm. I/O thread. */
void ezi_pub_graph_gone(ez_pub *pub);
uint32_t ezi_pub_num_buffers(const ez_pub *pub);
/* Profile JSON of a publisher (new reference). */
json_t *ezi_pub_profile(ez_pub *pub, double window_s);

/* ---- channel (channel.c) ------------------------------------------------------------------- */
/* Removes a subscriber from its channel, releasing what it has queued and, with release_viewed,
 * the messages its user is viewing (else those are released by the user); the channel goes away
 * with its last subscriber. I/O thread. */
void ezi_chan_leave(chan_sub *cs, bool release_viewed);
/* The TCP window between ezmsg-c peers (pubwin.c): the most messages a channel accepts, the byte
 * budget a publisher proposes, and the most a channel accepts, beyond num_buffers messages. */
#define EZI_WIN_MAX_MSGS 16384
#define EZI_WIN_BYTES ((uint64_t)8 << 20)
#define EZI_WIN_MAX_BYTES ((uint64_t)64 << 20)
/* The publisher of a local channel is going away. I/O thread. */
void ezi_chan_pub_gone(chan *c);
/* Fills a view of message msg_id for cs (called by recv). EZ_ENOENT if it is gone. */
int ezi_chan_view(chan_sub *cs, uint64_t msg_id, ez_msg *msg);
/* cs's channel lost its link: the notices cs has queued for messages in the publisher's shared
 * memory are dropped (released), since the publisher may write those slots again; those that
 * came whole over TCP stay queued where they are. I/O thread. */
void ezi_chan_drop_unowned(chan_sub *cs);
/* The subscriber cs belongs to. */
ez_sub *ezi_chan_sub_owner(const chan_sub *cs);
/* The kind of cs's channel, as 3.9 names it (ezi_m39_channel). Any thread. */
int ezi_chan_sub_kind(const chan_sub *cs);
const char *ezi_chan_pub_id(const chan *c);
/* The channel's own id (empty until the graph server gave it one). */
const char *ezi_chan_id(const chan *c);
/* True once the channel's link failed; it only waits for its subscribers to leave. I/O thread. */
bool ezi_chan_failed(const chan *c);
json_t *ezi_chan_profile(chan *c, double window_s);

#endif
