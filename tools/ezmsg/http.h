/* A small HTTP server for the dashboard and /metrics, on libmicrohttpd: GET / HEAD only, a
 * connection limit, a per-connection memory limit (huge headers get 431, then the connection is
 * closed), a connection timeout (slow clients are dropped), and on a loopback address a check of
 * the Host header (a page elsewhere cannot reach the server by DNS rebinding: 421).
 *
 * Each connection has its own thread (at most HTTP_MAX_CONNS, each with a small stack), so a
 * streamed response (server-sent events) may block in its producer; a producer must return within
 * about a second so that http_stop is prompt. */
#ifndef EZ_HTTP_H
#define EZ_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define HTTP_MAX_CONNS 64           /* connections served at once; more are closed at once */
#define HTTP_CONN_MEMORY (32 << 10) /* request headers and buffers per connection */
#define HTTP_TIMEOUT_S 15           /* a connection with no progress for this long is closed */

typedef struct http_server http_server;
typedef struct http_req http_req;

/* A streamed body: called repeatedly from the connection's thread; writes at most `max` bytes
 * into buf and returns how many, or 0 if nothing is ready (it may first block up to about a
 * second), or -1 to end the response. */
typedef ssize_t (*http_stream_fn)(void *arg, char *buf, size_t max);

typedef struct http_resp {
  int status;            /* default 200 */
  const char *type;      /* Content-Type; default text/plain */
  const char *body;      /* the body (NULL: empty) ... */
  size_t len;            /* ... of len bytes */
  bool owned;            /* body is malloc'd: the server frees it */
  http_stream_fn stream; /* instead of a body: a stream (server-sent events) */
  void *stream_arg;
  void (*stream_free)(void *arg); /* called once the stream ends (may be NULL) */
} http_resp;

/* Fills *out for GET path (without the query). Runs on a connection's thread, concurrently with
 * other requests. */
typedef void (*http_handler)(void *user, const char *path, http_req *req, http_resp *out);

/* The value of query argument `key` of the request, or NULL. Valid during the handler. */
const char *http_arg(http_req *req, const char *key);

/* Starts serving on listen_addr ("host:port"; port 0 picks one). On failure returns NULL and
 * writes a one-line reason into err (e.g. "address already in use"). */
http_server *http_start(const char *listen_addr, http_handler fn, void *user, char *err,
                        size_t errcap);

/* The address it listens on, "host:port" with the port resolved. */
const char *http_address(const http_server *s);

/* True if it listens on a loopback address only. */
bool http_loopback(const http_server *s);

/* Stops serving (streams end within about a second) and frees it. NULL: no-op. */
void http_stop(http_server *s);

#endif
