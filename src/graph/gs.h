/* The graph server's private parts, shared by its files: graphserver.c (lifecycle, connections
 * accepted, the requests of both dialects' common protocol), gs_conn.c (connection I/O, the ops
 * that wait for other clients' answers, topology updates), and the released dialect's sessions,
 * processes and streams (gs_session.c, gs_process.c, gs_stream.c). All of it runs on the
 * server's one thread. */
#ifndef EZI_GS_H
#define EZI_GS_H

#include "base/acceptor.h"
#include "proto/dag.h"
#include "proto/gsparse.h"
#include "base/internal.h"
#include "base/loop.h"
#include "base/wire.h"

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>

/* The largest request: a released-dialect process request (three strings and a payload). */
#define IN_LIMIT (3 * (size_t)EZ_MAX_CONTROL_STR + EZI_GS_MAX_PAYLOAD + 64)
#define OUT_LIMIT ((size_t)16 << 20) /* a client that lets more pile up is dropped */
#define MAX_CONNS 4096               /* default client limit */
#define MAX_SEGMENTS 4096
#define PROFILE_TIMEOUT_NS 1000000000ull
#define UPDATE_TIMEOUT_NS 30000000000ull
#define LINGER_NS 2000000000ull
/* A lone 21 on a new connection is a released-dialect SESSION unless the 8 bytes of a profiling-
 * dialect PROFILE follow within this long (a client sends them with the command byte, or right
 * after it: Python's writes are two send calls, microseconds apart). */
#define SNIFF_NS 50000000ull
/* SNIFF_NS, as every server in this process uses it: a fuzz target sets it to 0 (its sessions
 * send nothing after 21 until answered). Set it before starting servers. */
extern uint64_t ezi_gs_sniff_ns;
/* What the server keeps of the released dialect's history (as 3.9.0's defaults): events of each
 * kind, and trace samples per process (also at most TRACE_BYTES of them). */
#define EVENT_HISTORY 10000
#define TRACE_SAMPLES 200000
#define TRACE_BYTES ((size_t)64 << 20)
/* A stream subscriber whose socket holds this much unsent is skipped (events are dropped for it,
 * counted) until it reads: a slow reader costs bounded memory. */
#define STREAM_BACKLOG ((size_t)1 << 20)
/* Input all connections may buffer at once (each within its request's limit, gsparse.h): a
 * connection that would take more is dropped. */
#define IN_BUDGET ((size_t)256 << 20)
/* The longest a routed process request may wait for its answer (3.9 lets the client choose;
 * a larger timeout is clamped to this). */
#define ROUTE_MAX_NS 300000000000ull

typedef enum {
  C_NEW,      /* version sent, waiting for a command */
  C_PUB_ADDR, /* PUBLISH answered with an id; waiting for the channel server address */
  C_PUB,      /* registered publisher */
  C_SUB,      /* registered subscriber */
  C_CHAN,     /* registered channel */
  C_LEASE,    /* holds a shared-memory segment until it closes */
  C_WAIT,     /* a one-shot request waiting for its op */
  C_CLOSING,  /* answer sent (or being sent); waiting for the peer to hang up */
  /* the released dialect (gs_session.c, gs_process.c, gs_stream.c) */
  C_SNIFF,   /* sent 21 alone: a SESSION, or a PROFILE whose u64 is late (waits SNIFF_NS) */
  C_SESSION, /* a GraphContext session */
  C_PROCESS, /* a process's control connection */
  C_STREAM,  /* a settings, topology or profiling-trace stream */
} cstate;

typedef struct ez_server server;
typedef struct op op;
typedef struct conn conn;

typedef struct waiter {
  op *op;
  size_t slot;
} waiter;

typedef struct wqueue { /* FIFO ring of waiters */
  waiter *w;
  size_t head, n, cap;
} wqueue;

typedef enum {
  OP_SUBSCRIBE,
  OP_PUBLISH,
  OP_EDGE,
  OP_SYNC,
  OP_PROFILE,
  OP_NOTIFY,
  OP_SESSION, /* a session's request that waited for UPDATEs: answer `reply`, then go on */
} opkind;

struct op {
  opkind kind;
  int refs;
  size_t remaining;
  bool done;
  conn *req; /* who gets the answer (NULL: none, or it left) */
  uint64_t timer;
  server *srv;
  uint8_t reply; /* OP_SESSION: the byte to answer (COMPLETE, CYCLIC) */
  /* OP_PROFILE */
  uint64_t window_ms;
  size_t n_results;
  json_t **results;
  bool *is_channel;
};

typedef struct gs_session gs_session; /* gs_session.c */
typedef struct gs_process gs_process; /* gs_process.c */
typedef struct gs_stream gs_stream;   /* gs_stream.c */
typedef struct gs_route gs_route;     /* gs_process.c: a process request waiting for its answer */
typedef struct gs_setting gs_setting; /* gs_settings.c */
typedef struct gs_events gs_events;   /* gs_stream.c */

typedef struct segment {
  char name[64];
  int hold_fd; /* keeps the name ours while we live (ezi_shm_sweep) */
  int leases;
  uint64_t bytes; /* its size */
  char host[64];  /* the host of the client that asked for it (its quota, shm_quota) */
  struct segment *next;
} segment;

struct conn {
  ezi_watch w;
  server *srv;
  cstate st;
  ezi_buf in, out;
  size_t need; /* don't re-parse until this many bytes are buffered */
  bool shut_wr;
  char id[37];     /* publisher / subscriber / channel id */
  char *topic;     /* publisher / subscriber topic */
  char peer[64];   /* publisher: host its graph connection came from */
  uint16_t port;   /* publisher: its channel server port */
  char pub_id[37]; /* channel: its publisher */
  int64_t pid;     /* subscriber: from X_SUB_INFO (0: unknown) */
  char *handle;    /* subscriber: from X_SUB_INFO */
  segment *lease;  /* C_LEASE */
  wqueue complete_q, profile_q;
  op *req_op; /* the op this connection waits on as a requester */
  uint64_t linger_timer;
  bool ezc;  /* an ezmsg-c client (it sent EZI_X_CLIENT): answers PROFILE in either dialect */
  bool dead; /* closed; freed once the current callback is over */
  /* the released dialect */
  uint64_t sniff_timer; /* C_SNIFF */
  bool busy;            /* a session's request is being answered: later ones wait */
  uint64_t resume_timer;
  size_t in_charged; /* what this connection's input buffer counts against IN_BUDGET */
  gs_session *sess;  /* C_SESSION */
  gs_process *proc;  /* C_PROCESS */
  gs_stream *stream; /* C_STREAM */
  conn *prev, *next;
  /* C_PUB and C_SUB: its place in the server's list of those (pubs, subs); C_PUB: in the chain
   * of its bucket of pub_ids */
  conn *role_prev, *role_next, *id_next, *topic_next;
};

struct ez_server {
  ezi_loop *loop;
  ezi_watch listen;
  ezi_acceptor acc; /* accepts without spinning when out of descriptors */
  conn *conns;
  size_t n_conns;
  /* The registered publishers and subscribers (most recent first), so that an UPDATE looks at
   * those and not at every connection; and the publishers by id (a chained hash table of
   * pub_ids_cap buckets, a power of two): CHANNEL and PROFILE answers name them. */
  conn *pubs, *subs;
  conn **pub_ids, **pub_topics; /* (pub_topics: by topic, as many buckets) */
  size_t n_pubs, pub_ids_cap;
  size_t max_conns; /* client limit */
  ezi_dag *dag;
  segment *segs;
  size_t n_segs;
  uint64_t seg_max, host_max; /* SHM_CREATE limits (shm_limits) */
  conn *graveyard;            /* closed connections waiting to be freed */
  uint64_t reap_timer;
  char address[300];
  int dialect;      /* EZ_DIALECT_PROFILING or EZ_DIALECT_RELEASED */
  size_t in_total;  /* input buffered by every connection (IN_BUDGET) */
  ezi_buf spare_in; /* an input buffer for the next connection that has none (on_conn) */
  /* the released dialect's state */
  gs_route *routes; /* process requests waiting for their answers */
  gs_setting *settings;
  size_t n_settings, cap_settings;
  gs_events *settings_events, *topology_events;
  const char *greeting; /* what every connection is greeted with, by the dialect */
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stopped;
};

/* ---- gs_conn.c ------------------------------------------------------------------------------ */

/* Waiter queues: pushes o (its reference) at slot; pops the oldest. */
int ezi_gs_wq_push(wqueue *q, op *o, size_t slot);
bool ezi_gs_wq_pop(wqueue *q, waiter *out);

/* A new op (reference held until it finishes) answering `req` (NULL: nobody). */
op *ezi_gs_op_new(server *s, opkind kind, conn *req);
void ezi_gs_op_unref(op *o);
/* Finishes the op: its requester gets its answer, the timer is cancelled. Idempotent. */
void ezi_gs_op_finish(op *o);
/* One expected answer arrived (or its client left). */
void ezi_gs_op_answer(op *o);
/* Called once every request of the op is sent: finishes at once if nothing is due, else arms its
 * timer (timeout_ns 0: none). */
void ezi_gs_op_launch(op *o, uint64_t timeout_ns);

/* UPDATE to subscriber `sub` (listing every publisher upstream of its topic); o waits for it. */
void ezi_gs_notify_sub(server *s, conn *sub, op *o);
/* UPDATE to every subscriber downstream of `topic` (only the ezmsg-c ones, which sent X_CLIENT,
 * with ezc_only). */
void ezi_gs_notify_down(server *s, const char *topic, op *o, bool ezc_only);
/* c has just become C_PUB or C_SUB: enters the server's lists (and a publisher its id index). */
void ezi_gs_registered(server *s, conn *c);
/* The registered publisher with id (n bytes), or NULL. */
conn *ezi_gs_find_pub(server *s, const char *id, size_t n);

/* Queues bytes to a client and writes what the socket takes now; a client past OUT_LIMIT is
 * dropped (closed on the next loop turn, so callers iterating clients stay safe). */
void ezi_gs_send(conn *c, const ezi_buf *b);
/* The one-shot request is answered: hang up once the answer is out and the peer has closed. */
void ezi_gs_finish(conn *c);
/* Closes a connection and unregisters its client. The struct stays readable (c->dead) until the
 * current callback returns. */
void ezi_gs_close(conn *c);
/* The socket is writable: writes what is queued. True if that failed and c was closed. */
bool ezi_gs_writable(conn *c);
/* Frees the connections closed since the last call (a loop timer; arg is the server). */
void ezi_gs_reap(void *arg);
/* Logs the peer's protocol error and closes the connection. */
void ezi_gs_proto_error(conn *c, const char *what);

/* ---- graphserver.c -------------------------------------------------------------------------- */

/* Parses and handles the requests c has buffered (after a session's answer, say). False if c
 * was closed. */
bool ezi_gs_consume(conn *c);
/* Answers a finished PROFILE op. */
void ezi_gs_reply_profile(op *o);
/* Drops one lease of a segment; the last one removes its name. */
void ezi_gs_seg_release(server *s, segment *g);

#endif
