/* The publisher's private state, shared by the files of src/pub/: publisher.c (creation,
 * destruction, profile), pubsend.c (publishing), pubwait.c (backpressure, segment growth),
 * pubserve.c (its channel server and graph link, on the I/O thread), pubwin.c (TCP windows),
 * pubhot.c (hot buffers) and pubdebug.c. Each of them declares its own functions in its header. */
#ifndef EZI_PUBSTATE_H
#define EZI_PUBSTATE_H

#include "base/acceptor.h"
#include "core/context.h"
#include "ring/localchan.h"
#include "base/trace.h"
#include "proto/shmring.h"
#include "base/futex.h"

enum { PC_HANDSHAKE, PC_AWAIT_SHM, PC_READY };

/* How a ready channel's messages go (pub_chan.mode; pub->mu). A channel starts with frames; an
 * ezmsg-c channel asks for a ring (X_HELLO) or a window (X_WIN_ASK), recorded in pub_chan.wanted,
 * and switches once it holds nothing (ring_switch_waits, pubwait.c). */
typedef enum ezi_send_mode {
  EZI_SEND_FRAMES, /* a TX_SHM or TX_TCP frame per message on its socket; each holds its slot
                    * (a lease) until the channel's RX_ACK; as wanted: no switch asked */
  EZI_SEND_RING,   /* an entry of the shared-memory ring per message (shmring.h): the entry says
                    * when the channel released the slot */
  EZI_SEND_WINDOW, /* TX_TCP or X_TCP frames in a TCP window (pubwin.c): the bytes go on the
                    * socket and hold no slot, up to the window's bounds */
} ezi_send_mode;

/* A channel connection must finish its handshake this soon after it was accepted, or it is
 * closed: silent connections must not hold descriptors forever (pubserve.c). */
#define EZI_PUB_HS_MS EZ_DEFAULT_TIMEOUT_MS

/* Acks a window keeps before it frees entries on the I/O thread (pubwin.c). */
#define EZI_WIN_MARKS 8

struct pub_chan {
  ez_pub *pub;
  ezi_watch w;
  ezi_buf in;
  ezi_outbox out;
  int state;
  uint64_t hs_timer; /* the handshake's deadline (EZI_PUB_HS_MS from the accept), 0: none */
  char id[37];
  uint64_t pid;
  bool shm_ok;
  ezi_send_mode mode;   /* how its messages go (above) */
  ezi_send_mode wanted; /* the mode it asked for, until it switches (EZI_SEND_FRAMES: none) */
  uint64_t *t0;         /* lease start per slot (0: not held) */
  uint32_t held;        /* slots it holds (pub->mu) */
  /* The shared-memory ring with an ezmsg-c channel that asked for one (shmring.h; pub->mu). */
  bool ring_cut;     /* the ring was truncated: its connection was shut down (pubwait.c) */
  bool word_bad;     /* sleeping on the ring's word failed: the publisher sleeps on cv instead */
  bool orphan;       /* closed while a publishing thread slept on its word: that thread frees it */
  uint32_t ring_gen; /* the segment generation it was last told about */
  ezi_ring ring;
  char ring_name[EZI_SHM_NAME_MAX + 1];
  /* The TCP window with an ezmsg-c channel that asked for one (pubwin.c; pub->mu): its TX_TCP
   * messages hold no slot; messages [win_first, win_next) are unacknowledged, entry
   * msg_id % win_max each. Acks are cumulative; the I/O thread records them as marks, and the
   * entries are freed by whoever looks next (mostly the publishing thread, whose lines they are).
   */
  bool x_tcp;       /* X_TCP_ASK came: its window's messages go as X_TCP frames (wire.h) */
  uint32_t win_max; /* the window's size */
  uint32_t n_marks; /* acks not applied to the entries yet */
  uint64_t win_first, win_next; /* the oldest unacknowledged message; the next to send */
  uint64_t win_bytes;           /* the unacknowledged messages' bytes (frames' bodies) */
  uint64_t *win_t0;             /* per entry: when it was sent */
  uint64_t *win_len;            /* per entry: its bytes */
  struct ezi_win_mark {
    uint64_t to, at; /* every message before `to` was acknowledged by time `at` */
  } marks[EZI_WIN_MARKS];
};

struct ez_pub {
  ez_context *ctx;
  char id[37];
  char *topic;
  ez_pub_opts opts;
  uint32_t nbuf;
  ezi_trace *trace;        /* atomic: set once a tool traces it (trace.h), else NULL */
  uint64_t loan_wait_from; /* a loan's wait for its slot, while traced (0: none) */

  /* graph link (I/O thread) */
  ezi_watch gw;
  ezi_buf gin;
  ezi_outbox gout;
  bool graph_lost; /* pub->mu */
  bool registered; /* pub->mu: the server's COMPLETE to PUBLISH arrived */

  /* channel server (I/O thread) */
  ezi_watch lw;
  ezi_acceptor acc; /* accepts on lw without spinning when out of descriptors */
  char acc_who[96];
  uint16_t port;

  pthread_mutex_t mu; /* everything below */
  pthread_cond_t cv;
  int waiters;
  int64_t want; /* the slot a waiting publisher needs, -1: any change (flush, pause) */
  /* A publishing thread asleep on a ring channel's word instead of cv (pubwait.c): the word, until
   * the first wake-up of ours (else NULL), and the channel, until the thread woke (whose ring
   * stays mapped meanwhile: a channel that closes before leaves itself to that thread,
   * ezi_pub_chan_free). */
  uint32_t *sleep_word;
  pub_chan *sleep_pc;
  ezi_seg *seg;
  uint32_t seg_gen; /* how many times seg was replaced (grown) */
  bool shm_real;    /* seg is the server's segment, mapped here too */
  uint64_t next_id;
  uint32_t *leases;   /* channels on TX_SHM / TX_TCP holding each slot (the local channel and ring
                       * channels: local_t0 / pc->t0 and their entries' counts) */
  uint64_t *slot_msg; /* msg id currently in each slot */
  bool running, sync_pending, closing, loaned;
  size_t loan_len;
  pub_chan **chans;
  size_t n_chans;
  chan *local;
  uint64_t *local_t0;
  /* Segments replaced by a grow, kept (with their server leases) until every message sent while
   * they were current has been released: a channel that has not read its TX_SHM yet must still
   * be able to attach them, and local views still point into them. */
  ezi_seg_chain *retired;
  uint32_t spin_score; /* how often polling for a local slot paid off (0..1024) */
  uint32_t since_probe;
  uint64_t total_msgs, total_bytes, in_flight;
  int win_waiters;   /* publishing threads asleep for a TCP window (pubwin.c) */
  uint64_t win_need; /* the last one's message size */
  bool win_kicked;   /* they were woken since the last one went to sleep */
  /* Messages and bytes, and lease durations (telemetry.h; allocations of their own), and which
   * messages are stamped (telclock.h). */
  ezi_window *tel_msgs, *tel_bp;
  ezi_stamper stamps;
  uint64_t msgs_seen, bytes_seen; /* the totals when tel_msgs last had them (the rest: unstamped) */
  /* Hot buffers for large messages only this process reads (pubhot.c). */
  struct ezi_hot {
    uint8_t *p;
    size_t cap;
    uint64_t msg; /* the message it holds, if used */
    bool used;
  } hot[2];
  int hot_last; /* the one used last */
};

/* Wakes every thread that waits on p: on its condition variable, or on a ring's word (p->mu
 * held, which keeps that word mapped). */
static inline void ezi_pub_broadcast(ez_pub *p) {
  if (p->sleep_word) {
    ezi_futex_wake(p->sleep_word);
    p->sleep_word = NULL; /* once is enough: the thread looks at everything when it wakes */
  }
  pthread_cond_broadcast(&p->cv);
}

#endif
