/* The graph server's state, shared by its files: the server, its connections and the ops that
 * wait for other clients' answers. Types and bounds only; each file declares its functions in a
 * header of its own, lowest first:
 *   gs_conn.h      connection I/O, ops, topology updates (calls nothing above it: what a
 *                  connection's role must do when it closes, and what answers an op, are hooks
 *                  set by the file that gave it that role or made that op)
 *   gs_traces.h    a process's buffer of profiling trace samples
 *   gs_stream.h    the released dialect's event histories and event / trace streams
 *   gs_settings.h  its component settings
 *   gs_process.h   its process connections and the requests routed to them
 *   gs_session.h   its sessions
 *   graphserver.h  the server: lifecycle, connections accepted, requests parsed and dispatched
 * All of it runs on the server's one thread. */
#ifndef EZI_GS_H
#define EZI_GS_H

#include "base/acceptor.h"
#include "proto/dag.h"
#include "proto/gsparse.h"
#include "base/internal.h"
#include "base/loop.h"
#include "base/wire.h"

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
  /* OP_PROFILE, OP_SESSION: answers the requester once the op is finished (set by whoever made
   * the op; gs_conn.c calls it and names no answer of its own) */
  void (*answer)(op *o);
  /* OP_PROFILE (gs_profile.c) */
  uint64_t window_ms;
  ezi_buf pubs, chans; /* the entries so far: JSON objects, comma-separated */
  uint8_t *slot_kind;  /* per slot: what was asked of it (gs_profile.c) */
  size_t *parts_left;  /* per slot: X_PROFILE_PART frames it may still send */
};

typedef struct gs_session gs_session; /* gs_session.c */
typedef struct gs_process gs_process; /* gs_process.c */
typedef struct gs_stream gs_stream;   /* gs_stream.c */
typedef struct gs_route gs_route;     /* gs_process.c: a process request waiting for its answer */
typedef struct gs_setting gs_setting; /* gs_settings.c */
typedef struct gs_events gs_events;   /* gs_stream.c */
typedef struct gs_traces gs_traces;   /* gs_traces.c */

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
  bool ezc;     /* an ezmsg-c client (it sent EZI_X_CLIENT): answers PROFILE in either dialect */
  bool has_ctx; /* it sent X_CTX: its context, ctx, answers X_PROFILE_CTX */
  uint8_t ctx[16];
  bool dead; /* closed; freed once the current callback is over */
  /* the released dialect */
  uint64_t sniff_timer; /* C_SNIFF */
  bool busy;            /* a session's request is being answered: later ones wait */
  uint64_t resume_timer;
  size_t in_charged; /* what this connection's input buffer counts against IN_BUDGET */
  gs_session *sess;  /* C_SESSION */
  gs_process *proc;  /* C_PROCESS */
  gs_stream *stream; /* C_STREAM */
  gs_traces *traces; /* C_PROCESS: its trace samples (owned by its gs_process) */
  /* What the connection's role lets go of when it closes (a session, a process, a stream, a
   * lease): set by the file that gave it the role, called once by ezi_gs_close. */
  void (*closed)(conn *c);
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
  /* Parses and handles what c has buffered (graphserver.c's request parser), for a session
   * going on once its request is answered (ezi_gs_answered). False if c was closed. */
  bool (*consume)(conn *c);
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stopped;
};

#endif
