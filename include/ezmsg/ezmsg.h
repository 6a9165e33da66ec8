/*
 * ezmsg-c: the ezmsg messaging core in C, with profiling built in.
 *
 * This is the whole public API. It speaks the ezmsg wire protocol, so C processes and Python ezmsg
 * processes share one graph (one graph server, one topic graph, one profile).
 *
 * Conventions
 * - Every function that can fail returns an int: 0 (EZ_OK) or a negative EZ_E* code; ez_strerror()
 *   names it. Functions returning a pointer return NULL only where documented.
 * - Timeouts are in milliseconds; a negative timeout waits forever, 0 does not wait.
 * - Addresses are "host:port" strings. A NULL address means: $EZMSG_GRAPHSERVER_ADDR, else
 *   EZ_DEFAULT_ADDRESS.
 * - The library never writes to stdout and never exits the process. It logs through a hook
 *   (ez_set_log_hook); the default hook writes warnings and errors to stderr.
 * - Strings returned through `char **` out-parameters are owned by the caller (free()).
 *   Strings returned as `const char *` from an object are owned by that object and live as long
 *   as it does.
 * - Process-wide effects: the first mapping of shared memory installs a SIGBUS handler (a peer
 *   that truncates a segment under us must not kill the process: the mapping is repaired with
 *   zeroed memory and the link dropped; a SIGBUS anywhere else goes to the handler installed
 *   before, or kills the process as it would have). An application that installs its own SIGBUS
 *   handler afterwards must chain to the previous one. ez_context_open and ez_server_start raise
 *   the soft limit on open files to the hard limit (at most 2^20).
 */
#ifndef EZMSG_EZMSG_H
#define EZMSG_EZMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the functions of this API: the only names libezmsg.so exports (the library is compiled
 * with hidden visibility; tests/symbols.sh checks the exported list against these). */
#if defined(__GNUC__) || defined(__clang__)
#define EZ_API __attribute__((visibility("default")))
#else
#define EZ_API
#endif

/* The ezmsg release whose wire protocol ezmsg-c speaks by default: its graph server announces this
 * version, and its clients speak to a server in the dialect that server's greeting names (below).
 */
#define EZ_VERSION "3.9.0"
/* The version the `feature/profiling` branch of ezmsg announces, and so does our graph server in
 * that dialect (EZ_DIALECT_PROFILING). */
#define EZ_VERSION_PROFILING "3.6.2"
#define EZ_DEFAULT_ADDRESS "127.0.0.1:25978"
#define EZ_ADDR_ENV "EZMSG_GRAPHSERVER_ADDR"
#define EZ_PUB_PORT_ENV "EZMSG_PUBLISHER_PORT_START"
#define EZ_PUB_PORT_DEFAULT 25980
/* Microseconds a context's I/O thread polls before it sleeps, while polling keeps finding work
 * (0..1000, default 50; 0: never poll). See ez_context_open. */
#define EZ_SPIN_ENV "EZMSG_SPIN_US"
#define EZ_SPIN_DEFAULT_US 50
/* "0" turns off the shared-memory notice ring between ezmsg-c processes (they then use the
 * protocol's TX_SHM / RX_ACK over TCP, as with Python peers). See ez_context_open. */
#define EZ_SHM_RING_ENV "EZMSG_SHM_RING"
/* "0" makes a receiver of that ring sleep as for any other channel, woken through its I/O thread
 * by a TX_SHM frame, instead of on a word in the ring that the publisher wakes directly. See
 * ez_context_open. */
#define EZ_SHM_WAKE_ENV "EZMSG_SHM_WAKE"
/* How many messages a publisher may have unacknowledged on a TCP link to an ezmsg-c channel
 * (0..16384, default 8192; 0: num_buffers, as with Python peers). Once num_buffers messages
 * are in flight on a link, another goes only while they all take at most 8 MiB. See
 * ez_context_open. */
#define EZ_TCP_WINDOW_ENV "EZMSG_TCP_WINDOW"
#define EZ_TCP_WINDOW_DEFAULT 8192
/* Forces the wire dialect of this process's clients and graph servers: "profiling", "released" or
 * "auto" (the default: decided per peer). See the dialects below. */
#define EZ_DIALECT_ENV "EZMSG_DIALECT"
/* Limits against hostile or broken peers (docs/architecture.md, "Hostile peers"). Each is read
 * once per process from the environment; a bad value is logged and the default used.
 * - EZMSG_SHM_GROUP=<gid or group name>: share shared memory with that group (created with that
 *   group and mode 0660; mapped if it belongs to us or to that group). Default: only segments and
 *   rings of our own effective uid without group or other permissions are mapped.
 * - EZMSG_RX_LINK_MB (default 1152: the largest TCP message, 1 GiB, and some) and
 *   EZMSG_RX_PROCESS_MB (default 2048): the memory one link,
 *   and all links of a process, may hold for TCP messages from publishers (being received, or
 *   received and not yet released, and spare buffers). Memory is taken as bytes arrive, never as
 *   a frame's header announces; a link that would go beyond either is dropped (and joined again
 *   later).
 * - EZMSG_FRAME_TIMEOUT_MS (default 30000): how long a publisher's frame may stay incomplete on a
 *   link before the link is dropped.
 * - EZMSG_SHM_SEGMENT_MB (default 4096) and EZMSG_SHM_TOTAL_MB (default half the size of
 *   /dev/shm): the graph server's largest segment, and what the segments it creates for the
 *   clients of one host may take in all. SHM_CREATE beyond them is refused (the connection
 *   closed, which ez_shm_create reports as EZ_EINVAL; a publisher then sends over TCP). */
#define EZ_SHM_GROUP_ENV "EZMSG_SHM_GROUP"
#define EZ_RX_LINK_ENV "EZMSG_RX_LINK_MB"
#define EZ_RX_LINK_DEFAULT_MB 1152
#define EZ_RX_PROCESS_ENV "EZMSG_RX_PROCESS_MB"
#define EZ_RX_PROCESS_DEFAULT_MB 2048
#define EZ_FRAME_TIMEOUT_ENV "EZMSG_FRAME_TIMEOUT_MS"
#define EZ_FRAME_TIMEOUT_DEFAULT_MS 30000
#define EZ_SHM_SEGMENT_MAX_ENV "EZMSG_SHM_SEGMENT_MB"
#define EZ_SHM_SEGMENT_MAX_DEFAULT_MB 4096
#define EZ_SHM_TOTAL_MAX_ENV "EZMSG_SHM_TOTAL_MB"
#define EZ_MAX_CONTROL_STR (1u << 20) /* longest string accepted on a control link */
#define EZ_DEFAULT_TIMEOUT_MS 5000    /* default for one-shot graph requests */

/* The version of this library (libezmsg), e.g. "3.6.2": what `ezmsg --version` prints and
 * pkg-config reports. The ezmsg protocol versions it speaks are EZ_VERSION and
 * EZ_VERSION_PROFILING (above). Returns a static string; any thread. */
EZ_API const char *ez_version(void);

/* ---------------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------------- */
enum {
  EZ_OK = 0,
  EZ_EINVAL = -22,     /* a bad argument from the caller */
  EZ_ENOMEM = -12,     /* out of memory */
  EZ_ENOENT = -2,      /* unknown id, name or topic */
  EZ_ETIMEDOUT = -110, /* the timeout passed */
  EZ_ENOSERVER = -111, /* nothing listens at the graph server address */
  EZ_ECONNLOST = -104, /* a peer went away (graph server, publisher, channel) */
  EZ_EPROTO = -71,     /* a peer broke the protocol */
  EZ_EMSGSIZE = -90,   /* a message or string beyond a limit */
  EZ_ECLOSED = -108,   /* the object is closing or closed */
  EZ_EAGAIN = -11,     /* nothing available now (timeout 0) */
  EZ_EADDR = -99,      /* address unparsable, or cannot be bound */
  EZ_ESYS = -5,        /* an unexpected system call failure (see the log) */
  EZ_ECYCLIC = -4001,  /* CONNECT would create a cycle in the topic graph */
  EZ_EREFUSED = -4002, /* the graph server closed the connection before greeting: it is at its
                        * client limit (or what answers is not a graph server) */
  EZ_ENOTSUP = -95,    /* the peer's ezmsg does not have it (profiling on a 3.7 or 3.8 server) */
};

/* Returns a static, human-readable name for an EZ_E* code (or "unknown error"). Any thread. */
EZ_API const char *ez_strerror(int err);

/* ---------------------------------------------------------------------------------------------
 * Logging
 * ------------------------------------------------------------------------------------------- */
enum { EZ_LOG_DEBUG = 0, EZ_LOG_INFO = 1, EZ_LOG_WARN = 2, EZ_LOG_ERROR = 3, EZ_LOG_OFF = 4 };

/* A log sink: `msg` is one line without a newline, valid only during the call. May be called from
 * any library thread, concurrently; it must not call back into the library. */
typedef void (*ez_log_fn)(void *user, int level, const char *msg);

/* Sets the process-wide log sink (NULL restores the default stderr sink) and the lowest level
 * that reaches it (default EZ_LOG_WARN; $EZMSG_LOG_LEVEL=debug|info|warn|error|off overrides the
 * default). Call before creating library objects; not synchronised with logging threads. */
EZ_API void ez_set_log_hook(ez_log_fn fn, void *user, int min_level);

/* ---------------------------------------------------------------------------------------------
 * Wire dialects
 *
 * ezmsg has two: EZ_DIALECT_RELEASED, the released ezmsg since 3.7.0 (3.7, 3.8 and 3.9.0, which
 * adds GraphContext sessions and per-process control), and EZ_DIALECT_PROFILING, the
 * `feature/profiling` branch (which greets as 3.6.2 and answers PROFILE). A client of this library
 * speaks the dialect its graph server's greeting names; a channel reads a publisher's from the
 * shape of the handshake; a publisher speaks its graph server's dialect to every channel.
 * $EZMSG_DIALECT forces one for the whole process. docs/architecture.md, "Dialects", has the
 * rules and what interoperates.
 * ------------------------------------------------------------------------------------------- */
enum { EZ_DIALECT_AUTO = 0, EZ_DIALECT_PROFILING = 1, EZ_DIALECT_RELEASED = 2 };

/* ---------------------------------------------------------------------------------------------
 * Graph server
 * ------------------------------------------------------------------------------------------- */
typedef struct ez_server ez_server;

/* Starts a graph server on its own thread, listening on `address` (NULL: env, else default; port
 * 0 picks a free port). Returns once it accepts connections. EZ_EADDR if it cannot bind.
 * The caller owns *out and must ez_server_stop() it. Any thread. */
EZ_API int ez_server_start(const char *address, ez_server **out);

/* Options of ez_server_start_opts. Zero-initialise, then set what you need. */
typedef struct ez_server_opts {
  int max_clients; /* connections served at once; 0: 4096. One more is accepted and closed at once,
                    * which a client of this library reports as EZ_EREFUSED. */
  int dialect;     /* what the server greets with, and what it takes Python clients to speak:
                    * EZ_DIALECT_RELEASED (EZ_VERSION) or EZ_DIALECT_PROFILING (EZ_VERSION_PROFILING);
                    * EZ_DIALECT_AUTO (0): $EZMSG_DIALECT, else released. It serves the commands
                    * of both dialects to anyone; ezmsg-c clients are told apart and profiled in
                    * either. */
} ez_server_opts;

/* ez_server_start with options (NULL: the defaults). EZ_EINVAL if max_clients < 0 or dialect is not
 * one of EZ_DIALECT_*. */
EZ_API int ez_server_start_opts(const char *address, const ez_server_opts *opts, ez_server **out);

/* The address the server listens on ("host:port", port resolved). Owned by the server. */
EZ_API const char *ez_server_address(const ez_server *srv);

/* Blocks until the server stops (a SHUTDOWN command or ez_server_stop from another thread).
 * Returns 0, or EZ_ETIMEDOUT if `timeout_ms` passed first. */
EZ_API int ez_server_wait(ez_server *srv, int timeout_ms);

/* Stops the server (closing every client connection and unlinking every segment it created),
 * joins its thread and frees it. NULL is a no-op. Not from the server's own thread. */
EZ_API void ez_server_stop(ez_server *srv);

/* ---------------------------------------------------------------------------------------------
 * One-shot graph requests (each opens its own connection to the graph server at `address`)
 * All are thread-safe. EZ_ENOSERVER if nothing listens; EZ_EREFUSED if the server is at its
 * client limit; EZ_ETIMEDOUT after timeout_ms.
 * ------------------------------------------------------------------------------------------- */

/* Connects, reads the server's version string and hangs up. If `version` is non-NULL it receives
 * the version (truncated to `cap` bytes, NUL-terminated). */
EZ_API int ez_graph_ping(const char *address, char *version, size_t cap, int timeout_ms);

/* Adds the edge from -> to. EZ_ECYCLIC if it would create a cycle (a self-edge is one). */
EZ_API int ez_graph_connect(const char *address, const char *from, const char *to, int timeout_ms);

/* Removes the edge from -> to (absent edges are fine); nodes left unconnected are pruned. */
EZ_API int ez_graph_disconnect(const char *address, const char *from, const char *to,
                               int timeout_ms);

/* Asks every publisher to drain its buffers; returns when all have (they stay paused). */
EZ_API int ez_graph_sync(const char *address, int timeout_ms);

/* Pauses / resumes every publisher of the graph. */
EZ_API int ez_graph_pause(const char *address, int timeout_ms);
EZ_API int ez_graph_resume(const char *address, int timeout_ms);

/* Asks the graph server to stop. */
EZ_API int ez_graph_shutdown(const char *address, int timeout_ms);

/* The topic graph: every topic and the topics it feeds. */
typedef struct ez_graph_node {
  char *topic;
  size_t n_to;
  char **to;
} ez_graph_node;
typedef struct ez_graph {
  size_t n_nodes;
  ez_graph_node *nodes;
} ez_graph;

/* Fetches the topic graph (DAG command). On success *out is filled; free it with ez_graph_free.
 * EZ_EPROTO if the server's pickle is not one we accept. */
EZ_API int ez_graph_dag(const char *address, ez_graph *out, int timeout_ms);

/* Frees what ez_graph_dag filled (not the struct itself). Safe on a zeroed struct. */
EZ_API void ez_graph_free(ez_graph *g);

/* Renders a graph as text: fmt is "graphviz" or "mermaid". Returns a malloc'd string or NULL for
 * an unknown format / no memory. */
EZ_API char *ez_graph_format(const ez_graph *g, const char *fmt);

/* ---------------------------------------------------------------------------------------------
 * Shared-memory segments (through the graph server; the connection is the lease)
 * ------------------------------------------------------------------------------------------- */
typedef struct ez_shm ez_shm;

/* Asks the server to create a segment of `num_buffers` buffers with room for `buf_size` bytes
 * each, and maps it. The caller owns *out (ez_shm_close). */
EZ_API int ez_shm_create(const char *address, uint64_t num_buffers, uint64_t buf_size, ez_shm **out,
                         int timeout_ms);

/* Leases and maps the existing segment `name`. EZ_ENOENT if the server does not know it. */
EZ_API int ez_shm_attach(const char *address, const char *name, ez_shm **out, int timeout_ms);

EZ_API const char *ez_shm_name(const ez_shm *s);
EZ_API uint64_t ez_shm_num_buffers(const ez_shm *s);
/* Usable bytes of each buffer's data block (stride - 16). */
EZ_API uint64_t ez_shm_buffer_size(const ez_shm *s);
/* Data block of buffer i (NULL if i is out of range). */
EZ_API void *ez_shm_buffer(ez_shm *s, uint64_t i);

/* Unmaps and releases the lease (the server unlinks the segment with its last lease). */
EZ_API void ez_shm_close(ez_shm *s);

/* ---------------------------------------------------------------------------------------------
 * Context: one process's membership of a graph
 * ------------------------------------------------------------------------------------------- */
typedef struct ez_context ez_context;

/* Opens a context on the graph server at `address`. With a NULL address the environment's or the
 * default address is used, and if nothing answers there and $EZMSG_GRAPHSERVER_ADDR is unset, an
 * embedded server is started in this process on that default address (as the reference's
 * GraphService.ensure()). Starts the context's I/O thread. Caller owns *out (ez_context_close).
 * EZ_ENOSERVER if an explicitly named server does not answer.
 *
 * The I/O thread polls for up to $EZMSG_SPIN_US microseconds (default 50) before it sleeps, and
 * so do ez_recv for messages from publishers in this process and a publish waiting for a slot
 * that only subscribers in this process hold, but only while polling keeps finding work (a busy
 * stream), so an idle or slow graph costs nothing.
 * Waking a sleeping thread is the largest part of a message's round trip on most machines; on the
 * 2-core VM of bench/RESULTS.md polling takes 64 B shm throughput from ~0.3 to ~0.7 M msgs/s
 * and the round trip from ~90 to ~40 us, for up to ~16% of a core per process at 10 kHz. Set
 * EZMSG_SPIN_US=0 where CPU matters more than latency. An invalid value is logged and ignored.
 *
 * Between two ezmsg-c processes on one machine, notices and releases go through a ring in shared
 * memory instead of TX_SHM / RX_ACK frames, negotiated per channel (Python peers never see it);
 * $EZMSG_SHM_RING=0 turns that off for this context's channels and publishers. A thread that
 * waits in ez_recv for such a ring alone sleeps on a word in it, which the publisher wakes
 * directly ($EZMSG_SHM_WAKE=0: through this context's I/O thread instead). Over TCP between
 * two ezmsg-c processes, a publisher may have up to $EZMSG_TCP_WINDOW messages unacknowledged per
 * channel instead of num_buffers (default 8192, within 8 MiB beyond num_buffers; 0: off). A
 * window costs ~80 bytes per message of it on the channel's side, ~16 on the publisher's, and a
 * subscriber slower than its publisher falls that far behind before backpressure stops it. */
EZ_API int ez_context_open(const char *address, ez_context **out);

/* The graph server address in use. Owned by the context. */
EZ_API const char *ez_context_address(const ez_context *ctx);

/* True if this context runs the embedded graph server. */
EZ_API bool ez_context_owns_server(const ez_context *ctx);

/* Destroys every publisher and subscriber still open on the context, stops its I/O thread (and its
 * embedded server, if any) and frees it. No other thread may use the context or its objects
 * during or after this call. NULL is a no-op. */
EZ_API void ez_context_close(ez_context *ctx);

/* ---------------------------------------------------------------------------------------------
 * Publishers
 * ------------------------------------------------------------------------------------------- */
typedef struct ez_pub ez_pub;

typedef struct ez_pub_opts {
  uint32_t num_buffers; /* ring slots, >= 1 (default 32) */
  uint64_t buf_size;    /* initial data room per slot in bytes (default 65536) */
  bool force_tcp;       /* never use shared memory for other processes */
  bool start_paused;    /* publish blocks until resumed */
  const char *host;     /* channel server host (default "127.0.0.1") */
  uint16_t port;        /* channel server port (0: first free from $EZMSG_PUBLISHER_PORT_START) */
} ez_pub_opts;

/* Fills opts with the defaults above. */
EZ_API void ez_pub_opts_init(ez_pub_opts *opts);

/* Creates a publisher on `topic` (opts may be NULL for defaults): registers it with the graph
 * server, obtains its segment and starts serving channels. Caller owns *out (ez_pub_destroy).
 * Any thread. */
EZ_API int ez_pub_create(ez_context *ctx, const char *topic, const ez_pub_opts *opts, ez_pub **out);

/* Publishes `len` bytes: one copy into the next ring slot, then every subscriber is notified.
 * Blocks while that slot is still held by a subscriber (backpressure), while a TCP subscriber has
 * 8 MiB or more still to be written to its socket, or while the publisher is paused, up to
 * timeout_ms (EZ_ETIMEDOUT; nothing was sent). One publisher may be used by one thread at a time
 * (calls on the same publisher must not overlap). */
EZ_API int ez_publish(ez_pub *pub, const void *data, size_t len, int timeout_ms);

/* Zero-copy publish: waits (as ez_publish) for the next slot and returns a pointer to `len` bytes
 * of writable room in it. Finish with ez_pub_commit (sends, possibly fewer bytes) or
 * ez_pub_cancel. No other publish may start in between. */
EZ_API int ez_pub_loan(ez_pub *pub, size_t len, void **buf, int timeout_ms);
EZ_API int ez_pub_commit(ez_pub *pub, size_t len);
EZ_API void ez_pub_cancel(ez_pub *pub);

/* Blocks until every message published so far has been released by every subscriber. */
EZ_API int ez_pub_flush(ez_pub *pub, int timeout_ms);

/* The publisher's id (UUID string), topic, channel count and sent-message count. Any thread. */
EZ_API const char *ez_pub_id(const ez_pub *pub);
EZ_API const char *ez_pub_topic(const ez_pub *pub);
EZ_API size_t ez_pub_num_channels(ez_pub *pub);

/* Unregisters and frees the publisher; unacknowledged messages are abandoned. NULL: no-op. */
EZ_API void ez_pub_destroy(ez_pub *pub);

/* ---------------------------------------------------------------------------------------------
 * Subscribers
 * ------------------------------------------------------------------------------------------- */
typedef struct ez_sub ez_sub;

typedef struct ez_sub_opts {
  const char *handle; /* label in profiles (default: the topic) */
  /* A leaky subscriber (3.9.0's `leaky` / `max_queue`): at most max_queue messages wait for it
   * (default 1); when another arrives, the oldest waiting one is dropped and its buffer released
   * at once, instead of holding its publisher back. Messages it has taken (ez_recv) are not
   * counted and never dropped. Counted in the profile ("dropped"). */
  bool leaky;
  uint32_t max_queue;
} ez_sub_opts;

/* Creates a subscriber on `topic`; returns once it is connected to every current upstream
 * publisher, so anything published after this returns is received. Caller owns *out. A publisher
 * that cannot be reached (or whose connection is cut later) is joined again in the background,
 * after 50 ms doubling to 2 s, while the graph server lists it; each first failure is logged.
 * After a cut, a publisher on this host that no longer listens at its address is not asked for;
 * after ~3 s of that it is taken as gone (until an UPDATE lists it again). */
EZ_API int ez_sub_create(ez_context *ctx, const char *topic, const ez_sub_opts *opts, ez_sub **out);

enum {
  EZ_MSG_RAW_PICKLE = 1 /* not a bytes payload: `bufs` hold the sender's pickle buffers */
};

typedef struct ez_iov {
  const void *data;
  size_t len;
} ez_iov;

/* A received message: a read-only view into the channel's memory, valid until ez_msg_release. */
typedef struct ez_msg {
  const void *data; /* the payload (for EZ_MSG_RAW_PICKLE: buffer 0, the pickle) */
  size_t len;
  uint64_t msg_id;    /* per-publisher sequence number, from 0 */
  const char *pub_id; /* the sending publisher's id */
  unsigned flags;
  size_t nbufs; /* with EZ_MSG_RAW_PICKLE: the marshalled buffers */
  const ez_iov *bufs;
  void *ref_;        /* internal */
  uint64_t trace_t_; /* internal: when ez_recv gave it out, while a tool traces the subscriber */
} ez_msg;

/* Waits up to timeout_ms for the next message and fills *msg with a zero-copy view. The message
 * holds its publisher's slot until ez_msg_release (backpressure). EZ_ETIMEDOUT / EZ_EAGAIN when
 * nothing came; EZ_ECONNLOST if the graph server went away. One thread at a time per subscriber. */
EZ_API int ez_recv(ez_sub *sub, ez_msg *msg, int timeout_ms);

/* Releases a message from ez_recv. Any thread, once per message. */
EZ_API void ez_msg_release(ez_msg *msg);

/* Copying receive: copies up to `cap` bytes into buf, sets *len to the full payload length and
 * releases the message. EZ_EMSGSIZE (message consumed, *len set) if cap was too small. */
EZ_API int ez_recv_copy(ez_sub *sub, void *buf, size_t cap, size_t *len, int timeout_ms);

/* A file descriptor that polls readable while a message waits. Owned by the subscriber. */
EZ_API int ez_sub_fd(const ez_sub *sub);

EZ_API const char *ez_sub_id(const ez_sub *sub);
EZ_API const char *ez_sub_topic(const ez_sub *sub);

/* Unregisters and frees the subscriber, releasing every message it still holds: views from
 * ez_recv that were not released become invalid and must not be released afterwards. Not while
 * another thread is in ez_recv on it. NULL: no-op. */
EZ_API void ez_sub_destroy(ez_sub *sub);

/* ---------------------------------------------------------------------------------------------
 * Profiling
 * ------------------------------------------------------------------------------------------- */
#define EZ_PROFILE_WINDOW_S 2.0 /* default window */
#define EZ_PROFILE_MAX_WINDOW_S 10.0

/* Asks the graph server for the aggregated profile over the last `window_s` seconds (clamped to
 * [0, 10]). *json receives the document {"window_s", "publishers": [...], "channels": [...]}
 * (caller frees). */
EZ_API int ez_profile(const char *address, double window_s, char **json, int timeout_ms);

/* Snapshot of this process's own publishers and channels, no server round trip; same document
 * shape. Any thread. */
EZ_API int ez_context_profile(ez_context *ctx, double window_s, char **json);

typedef struct ez_latency {
  double avg_ms, max_ms, p50_ms, p99_ms;
  uint64_t samples;       /* events in the window */
  uint64_t timed_samples; /* those the durations come from: all of them below ~500 k messages/s,
                           * a sample above (docs/profiling.md); `samples` if the document does
                           * not say (Python ezmsg times every one) */
  uint64_t in_flight;
} ez_latency;

/* What one channel of a publisher holds, as the publisher sees it (ours only: "leases"). */
typedef struct ez_profile_lease {
  char *channel_id;   /* as the channel named itself in its handshake */
  int64_t pid;        /* the process it said it is in */
  char *mode;         /* "local", "shm" or "tcp" */
  uint64_t in_flight; /* messages sent to it and not acknowledged yet */
} ez_profile_lease;

typedef struct ez_profile_pub {
  char *id, *topic, *host;
  int64_t pid;
  uint64_t num_buffers, num_channels;
  double window_s, message_rate_hz, byte_rate_per_s;
  uint64_t messages_total, messages_window, bytes_total, bytes_window;
  ez_latency backpressure;
  size_t n_leases; /* its channels (ours only): who holds backpressure.in_flight */
  ez_profile_lease *leases;
  char *dialect; /* how it was answered: "profiling" (PROFILE), "released" (3.9 snapshots);
                  * NULL if the document does not say (the seed's) */
} ez_profile_pub;

typedef struct ez_profile_subscriber {
  char *subscriber_id, *handle;
  double message_rate_hz;
  ez_latency processing;
} ez_profile_subscriber;

typedef struct ez_profile_channel {
  char *channel_id, *pub_id, *topic, *mode, *host;
  int64_t pid;
  uint64_t num_buffers, in_flight;
  double window_s;
  size_t n_subscribers;
  ez_profile_subscriber *subscribers;
  char *dialect; /* as ez_profile_pub's. In "released" entries of Python 3.9 subscribers,
                  * channel_id and pub_id are NULL: 3.9 does not report them */
} ez_profile_channel;

typedef struct ez_profile_data {
  double window_s;
  size_t n_publishers, n_channels;
  ez_profile_pub *publishers;
  ez_profile_channel *channels;
} ez_profile_data;

/* One per-message trace sample (3.9.0's profiling traces), or a report of samples lost. */
typedef struct ez_trace_sample {
  double time;             /* wall clock, seconds since 1970 (exact for a process on this host) */
  const char *endpoint_id; /* "topic:id" of the publisher or subscriber */
  const char *topic;
  /* "publish_delta_ns", "backpressure_wait_ns", "lease_time_ns" or "user_span_ns" */
  const char *metric;
  double value;        /* ns */
  int64_t seq;         /* the message's number (-1: not given) */
  int64_t pid;         /* the endpoint's process */
  const char *dialect; /* how it came: "profiling" (PROFILE polls) or "released" (3.9's stream) */
  uint64_t dropped;    /* nonzero: no sample, but this many were dropped (a reader too slow) */
} ez_trace_sample;

/* Called for each sample, on the calling thread of ez_trace; the strings live during the call.
 * Returns nonzero to stop. */
typedef int (*ez_trace_fn)(void *user, const ez_trace_sample *s);

/* Streams the trace samples of the endpoints on `topics` (n_topics 0: all) of the graph at
 * `address` to fn until *stop becomes nonzero (stop may be NULL), duration_ms passes (< 0:
 * never) or fn returns nonzero. While it runs, the endpoints record a sample per message, and stop
 * by themselves a few seconds after it ends. Works with every server that has profiling: in the
 * profiling dialect with ezmsg-c endpoints (polled), in the released dialect (3.9) with ezmsg-c
 * and Python endpoints (3.9's trace stream). Returns 0, EZ_ENOTSUP (ezmsg 3.7 / 3.8: no
 * profiling), or a connection error. Blocking; any thread. */
EZ_API int ez_trace(const char *address, const char *const *topics, size_t n_topics, ez_trace_fn fn,
                    void *user, volatile int *stop, int duration_ms);

/* Parses a profile document (ours or the Python reference's) into *out; absent fields are zero
 * or NULL. EZ_EPROTO if it is not such a document. Free with ez_profile_data_free. */
EZ_API int ez_profile_parse(const char *json, ez_profile_data *out);
EZ_API void ez_profile_data_free(ez_profile_data *p);

#ifdef __cplusplus
}
#endif
#endif
