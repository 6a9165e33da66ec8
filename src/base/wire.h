/* The ezmsg wire encoding: u64 little-endian integers, length-prefixed strings, one-byte commands;
 * a growable byte buffer for output, and an incremental reader for input that may arrive one byte
 * at a time. Nothing here allocates what a peer announces: strings are views into the input. */
#ifndef EZI_WIRE_H
#define EZI_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ezmsg/ezmsg.h"
#include "base/le.h"

enum ezi_cmd {
  EZI_COMPLETE = 0,
  EZI_PUBLISH = 1,
  EZI_SUBSCRIBE = 2,
  EZI_CONNECT = 3,
  EZI_DISCONNECT = 4,
  EZI_CYCLIC = 5,
  EZI_PAUSE = 6,
  EZI_SYNC = 7,
  EZI_RESUME = 8,
  EZI_UPDATE = 9,
  EZI_DAG = 10,
  EZI_TX_LOCAL = 11,
  EZI_TX_SHM = 12,
  EZI_TX_TCP = 13,
  EZI_RX_ACK = 14,
  EZI_SHM_CREATE = 15,
  EZI_SHM_ATTACH = 16,
  EZI_SHUTDOWN = 17,
  EZI_CHANNEL = 18,
  EZI_SHM_OK = 19,
  EZI_SHM_ATTACH_FAILED = 20,
  EZI_PROFILE = 21,
  EZI_PROFILE_DATA = 22,
  /* The released dialect's (3.9.0) control plane, which reuses 21 and 22 (dialect.h): sessions
   * of a GraphContext, per-process control and their event streams (docs/protocol39.md). */
  EZI_SESSION = 21,
  EZI_SESSION_CONNECT = 22,
  EZI_SESSION_DISCONNECT = 23,
  EZI_SESSION_CLEAR = 24,
  EZI_SESSION_REGISTER = 25,
  EZI_SESSION_SNAPSHOT = 26,
  EZI_SESSION_SETTINGS_SNAPSHOT = 27,
  EZI_SESSION_SETTINGS_EVENTS = 28,
  EZI_SESSION_SETTINGS_SUBSCRIBE = 29,
  EZI_SESSION_TOPOLOGY_SUBSCRIBE = 30,
  EZI_SESSION_PROFILING_SUBSCRIBE = 31,
  EZI_SESSION_PROCESS_REQUEST = 32,
  EZI_PROCESS = 33,
  EZI_PROCESS_REGISTER = 34,
  EZI_PROCESS_UPDATE_OWNERSHIP = 35,
  EZI_PROCESS_SETTINGS_UPDATE = 36,
  EZI_PROCESS_PROFILING_TRACE_UPDATE = 37,
  EZI_PROCESS_ROUTE_REQUEST = 38,
  EZI_PROCESS_ROUTE_RESPONSE = 39,
  EZI_ERROR = 40,
  /* ezmsg-c's extension between a channel and a publisher that are both ezmsg-c (shmring.h). A
   * channel asks with one byte in [EZI_X_ASK_MIN, 0xff]; the reference ignores unknown bytes
   * from a channel, and so do we (an ask a publisher does not know gets no answer, and the link
   * goes on as the protocol has it), so that a later ask can be added beside these. A publisher
   * sends X_RING / X_WIN only after their ask. X_HELLO: "I can read a notice ring". X_RING: as
   * TX_SHM, with the first message id the ring carries and the ring's name. X_WIN_ASK: "I can
   * hold more TX_TCP messages than num_buffers, and ack them cumulatively". X_WIN: the
   * publisher's answer, u64 first message id, u64 window (messages), u64 byte budget (pubwin.c);
   * from that message on, the channel's RX_ACK for an id acknowledges every message up to it.
   * 0xe7 was the window's ask before acks were cumulative; a channel that sends it acks every
   * message, in order, which cumulative acks cover too, so a publisher still honours it.
   * X_TCP_ASK (sent after X_WIN_ASK): "in the window, send me X_TCP frames". X_TCP: a window's
   * message in 5 bytes of framing instead of TX_TCP's 17 and the marshalled message's 58: cmd,
   * u32 size, then `size` payload bytes; it is the channel's next message id (windows are in
   * order) and a bytes payload (an ezmsg-c publisher sends nothing else). A publisher sends it
   * only on a window (after X_WIN) to a channel that asked, for payloads below 4 GiB. */
  EZI_X_ASK_MIN = 0xe0,
  /* On a graph connection, from a registered client (publisher, subscriber, channel) to its
   * server, once registered: "I am ezmsg-c" (so our server may send it PROFILE in either dialect).
   * Every Python graph server reads a registered client's bytes one at a time and ignores all
   * but COMPLETE (and PROFILE_DATA, in the profiling dialect), so this one byte is harmless to
   * them; our server ignores other bytes from EZI_X_ASK_MIN up, for later additions. */
  EZI_X_CLIENT = 0xf0,
  EZI_X_HELLO = 0xe5,
  EZI_X_RING = 0xe6,
  EZI_X_WIN_ASK_V1 = 0xe7,
  EZI_X_WIN = 0xe8,
  EZI_X_WIN_ASK = 0xe9,
  EZI_X_TCP_ASK = 0xea,
  EZI_X_TCP = 0xeb,
  /* ezmsg-c's extension on a subscriber's graph connection (gsregistry.h): once created, an
   * ezmsg-c subscriber tells the graph server its process id and handle, so that the server can
   * list it before any publisher feeds it. Its bytes are never 0x00 (COMPLETE) or 0x16
   * (PROFILE_DATA), the only bytes the reference servers act on from a subscriber. */
  EZI_X_SUB_INFO = 0xec,
  /* ezmsg-c's per-process PROFILE (proto/ctxprofile.h), on a registered publisher's or channel's
   * graph connection. X_CTX, from the client once registered (after X_CLIENT): its context's id,
   * in 32 bytes 0xf0 | nibble (harmless to any server: Python's ignore every byte but 0x00 and
   * 0x16 from a registered client, and an older one of ours skips bytes from 0xe0 up but 0xec).
   * X_PROFILE_CTX, from our server to one client of each context, with a u64 window in ms: "profile
   * your whole context". The client answers X_PROFILE_PART (a str: one endpoint's JSON) for each of
   * its context's publishers and channels, then X_PROFILE_END. */
  EZI_X_CTX = 0xed,
  EZI_X_PROFILE_CTX = 0xee,
  EZI_X_PROFILE_PART = 0xef,
  EZI_X_PROFILE_END = 0xe4,
};
/* Name of a command byte for log lines ("?" if unknown). */
const char *ezi_cmd_name(unsigned cmd);

/* ---- output buffer ---------------------------------------------------------------------------
 * Bytes [off, len) are pending. Not thread-safe. A zeroed struct is an empty buffer. */
typedef struct ezi_buf {
  uint8_t *data;
  size_t off, len, cap;
} ezi_buf;

/* Makes room for `extra` more bytes; EZ_ENOMEM on failure (buffer unchanged). */
int ezi_buf_reserve(ezi_buf *b, size_t extra);
int ezi_buf_put(ezi_buf *b, const void *p, size_t n);
/* p1 then p2 (either may be empty), with one check for room: both or neither. */
int ezi_buf_put2(ezi_buf *b, const void *p1, size_t n1, const void *p2, size_t n2);
int ezi_buf_put_u8(ezi_buf *b, uint8_t v);
int ezi_buf_put_u64(ezi_buf *b, uint64_t v);
/* A str: u64 length then the bytes. */
int ezi_buf_put_str(ezi_buf *b, const char *s, size_t n);
static inline int ezi_buf_put_cstr(ezi_buf *b, const char *s) {
  return ezi_buf_put_str(b, s, strlen(s));
}
static inline size_t ezi_buf_pending(const ezi_buf *b) { return b->len - b->off; }
/* The first pending byte (a valid pointer even for an empty, never-allocated buffer). */
static inline const uint8_t *ezi_buf_head(const ezi_buf *b) {
  return b->data ? b->data + b->off : (const uint8_t *)"";
}
/* Drops n pending bytes from the front (compacting when it pays). */
void ezi_buf_consume(ezi_buf *b, size_t n);
void ezi_buf_reset(ezi_buf *b);
void ezi_buf_free(ezi_buf *b);

/* Writes pending bytes to a non-blocking fd until it would block or the buffer is empty.
 * Returns 0 (check ezi_buf_pending for what is left) or EZ_ECONNLOST. */
int ezi_buf_flush(ezi_buf *b, int fd);

/* Reads what is available from a non-blocking fd into b, at most `max_total` pending bytes in all.
 * Returns bytes read (> 0), 0 if it would block or b is full, EZ_ECONNLOST on EOF or error. */
long ezi_buf_fill(ezi_buf *b, int fd, size_t max_total);
/* One non-blocking read of at most `room` (> 0) bytes of fd into p: bytes read, 0 if none now,
 * EZ_ECONNLOST on EOF or an error. */
long ezi_recv_some(int fd, uint8_t *p, size_t room);

/* ---- incremental reader ----------------------------------------------------------------------
 * Parses a frame from the start of the available bytes. Every getter returns false when the bytes
 * are not all there yet (rd->need then says how many bytes in all the frame needs so far) or when
 * the frame is malformed (rd->err < 0). Parse the whole frame, then check ezi_rd_ok(). */
typedef struct ezi_rd {
  const uint8_t *p;
  size_t len, pos;
  size_t need; /* when short: total bytes needed from p so far */
  int err;     /* EZ_EMSGSIZE for a string beyond the limit, else 0 */
  size_t max_str;
} ezi_rd;

static inline void ezi_rd_init(ezi_rd *r, const void *p, size_t len, size_t max_str) {
  r->p = (const uint8_t *)p;
  r->len = len;
  r->pos = 0;
  r->need = 0;
  r->err = 0;
  r->max_str = max_str;
}
static inline bool ezi_rd_short(ezi_rd *r, size_t n) {
  if (r->err || r->need) return true;
  if (r->len - r->pos < n) {
    r->need = r->pos + n;
    return true;
  }
  return false;
}
static inline bool ezi_rd_u8(ezi_rd *r, uint8_t *v) {
  if (ezi_rd_short(r, 1)) return false;
  *v = r->p[r->pos++];
  return true;
}
static inline bool ezi_rd_u64(ezi_rd *r, uint64_t *v) {
  if (ezi_rd_short(r, 8)) return false;
  *v = ezi_get_u64le(r->p + r->pos);
  r->pos += 8;
  return true;
}
/* A str as a view (not NUL-terminated) into the input. */
static inline bool ezi_rd_str(ezi_rd *r, const char **s, size_t *n) {
  uint64_t len;
  if (!ezi_rd_u64(r, &len)) return false;
  if (len > r->max_str) {
    r->err = EZ_EMSGSIZE;
    return false;
  }
  if (ezi_rd_short(r, (size_t)len)) return false;
  *s = (const char *)r->p + r->pos;
  *n = (size_t)len;
  r->pos += (size_t)len;
  return true;
}
static inline bool ezi_rd_skip(ezi_rd *r, size_t n) {
  if (ezi_rd_short(r, n)) return false;
  r->pos += n;
  return true;
}
/* 1: a whole frame parsed (rd->pos bytes); 0: need more bytes; < 0: malformed. */
static inline int ezi_rd_status(const ezi_rd *r) { return r->err ? r->err : r->need ? 0 : 1; }

/* Copies a str view to a new NUL-terminated string (NULL on ENOMEM). */
char *ezi_strndup(const char *s, size_t n);

/* True if s (n bytes) is a canonical lower- or upper-case UUID string (8-4-4-4-12 hex). */
bool ezi_is_uuid(const char *s, size_t n);

/* ---- addresses -------------------------------------------------------------------------------
 * "host:port" -> host (NUL-terminated, at most 255 bytes) and port. EZ_EADDR if malformed. */
#define EZI_ADDR_MAX 262 /* the longest well-formed "host:port", with its NUL */
int ezi_addr_parse(const char *addr, char host[256], uint16_t *port);
/* NULL -> $EZMSG_GRAPHSERVER_ADDR -> EZ_DEFAULT_ADDRESS; copies into out. */
void ezi_addr_resolve(const char *addr, char out[300]);

/* Socket helpers: all sockets non-blocking and close-on-exec, TCP_NODELAY set. */
/* Listens on host:port (port 0: any). Returns fd or EZ_EADDR. */
int ezi_tcp_listen(const char *host, uint16_t port, int backlog);
/* The port an fd is bound to, 0 on error. */
uint16_t ezi_sock_port(int fd);
/* The peer's / our own numeric host of a connected socket into out (empty on error). */
void ezi_sock_peer_host(int fd, char out[64]);
void ezi_sock_local_host(int fd, char out[64]);
/* Connects to host:port within timeout_ms (the fd stays non-blocking). Returns fd or
 * EZ_ENOSERVER (refused / unreachable), EZ_ETIMEDOUT, EZ_EADDR. */
int ezi_tcp_connect(const char *host, uint16_t port, int timeout_ms);
/* Starts a non-blocking connect: the socket (non-blocking, TCP_NODELAY), with *done true if it
 * connected at once, else writable once connected (check SO_ERROR). EZ_ENOSERVER if refused at
 * once, EZ_EADDR if host does not resolve. */
int ezi_tcp_connect_start(const char *host, uint16_t port, bool *done);
/* Knocks at host:port without waiting for an answer: connects, looks once, hangs up. 1 if a
 * listener took the connection within the call, 0 if it was refused within the call (nothing
 * listens there), -1 if neither was settled by then (a remote host, usually), or on any other
 * error. On Linux a connection to this host is settled by the time connect() returns. */
int ezi_tcp_knock(const char *host, uint16_t port);
void ezi_sock_setup(int fd);

#endif
