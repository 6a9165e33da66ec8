/* The HTTP server of the dashboard and /metrics (http.h), on libmicrohttpd. */
#include "http.h"

#include "cli.h"
#include "base/wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define STACK_BYTES (256 << 10)

struct http_server {
  struct MHD_Daemon *d;
  int fd;
  char addr[300];
  bool loopback;
  http_handler fn;
  void *user;
};

struct http_req {
  struct MHD_Connection *c;
};

const char *http_arg(http_req *req, const char *key) {
  return MHD_lookup_connection_value(req->c, MHD_GET_ARGUMENT_KIND, key);
}

/* ---- listening ------------------------------------------------------------------------------ */

static int listen_on(const char *addr, http_server *s, char *err, size_t errcap) {
  char host[256];
  uint16_t port;
  if (ezi_addr_parse(addr, host, &port)) {
    snprintf(err, errcap, "bad address '%s' (want HOST:PORT)", addr);
    return -1;
  }
  struct addrinfo hints = {.ai_family = AF_UNSPEC,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_NUMERICSERV | AI_PASSIVE},
                  *ai = NULL;
  char ps[8];
  snprintf(ps, sizeof ps, "%u", port);
  int g = getaddrinfo(host, ps, &hints, &ai);
  if (g || !ai) {
    snprintf(err, errcap, "cannot resolve '%s': %s", host, gai_strerror(g));
    return -1;
  }
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1, e = 0;
  if (fd < 0) {
    e = errno;
  } else {
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 64) != 0) e = errno;
  }
  bool lo = false;
  if (ai->ai_family == AF_INET)
    lo = (ntohl(((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr) >> 24) == 127;
  else if (ai->ai_family == AF_INET6)
    lo = IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr);
  freeaddrinfo(ai);
  if (e) {
    if (fd >= 0) close(fd);
    snprintf(err, errcap, "cannot listen on %s: %s", addr,
             e == EADDRINUSE ? "address already in use" : strerror(e));
    return -1;
  }
  s->fd = fd;
  s->loopback = lo;
  snprintf(s->addr, sizeof s->addr, "%s:%u", host, ezi_sock_port(fd));
  return 0;
}

/* ---- requests ------------------------------------------------------------------------------- */

/* On a loopback server, the Host header must name a loopback host: a page of another site that
 * resolves its own name to 127.0.0.1 (DNS rebinding) then gets 421, not the dashboard. */
static bool host_ok(const http_server *s, struct MHD_Connection *c) {
  if (!s->loopback) return true;
  const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
  if (!h) return false;
  size_t n = strcspn(h, ":");
  if (h[0] == '[') n = strcspn(h, "]") + 1; /* [::1]:port */
  char name[64];
  if (n >= sizeof name) return false;
  memcpy(name, h, n);
  name[n] = 0;
  if (h[n] && h[n] != ':') return false;
  if (!strcmp(name, "localhost") || !strcmp(name, "[::1]")) return true;
  struct in_addr a;
  return inet_pton(AF_INET, name, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

static int hexval(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, const char *text) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  enum MHD_Result ret = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ret;
}

typedef struct stream_ctx {
  http_stream_fn fn;
  void *arg;
  void (*free_fn)(void *);
} stream_ctx;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  stream_ctx *sc = cls;
  ssize_t n = sc->fn(sc->arg, buf, max);
  return n < 0 ? MHD_CONTENT_READER_END_OF_STREAM : n;
}

static void stream_done(void *cls) {
  stream_ctx *sc = cls;
  if (sc->free_fn) sc->free_fn(sc->arg);
  free(sc);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **con_cls) {
  (void)version;
  (void)upload_data;
  (void)con_cls;
  http_server *s = cls;
  bool head = !strcmp(method, MHD_HTTP_METHOD_HEAD);
  if (!head && strcmp(method, MHD_HTTP_METHOD_GET)) {
    *upload_size = 0; /* a body is not read */
    return send_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n");
  }
  if (!host_ok(s, c))
    return send_text(c, 421, "this server answers only to a loopback host name\n");
  http_req req = {c};
  http_resp out = {.status = 200, .type = "text/plain; charset=utf-8"};
  s->fn(s->user, url, &req, &out);
  struct MHD_Response *r = NULL;
  if (out.stream && !head) {
    stream_ctx *sc = malloc(sizeof *sc);
    if (sc) {
      *sc = (stream_ctx){out.stream, out.stream_arg, out.stream_free};
      r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 << 10, stream_read, sc,
                                            stream_done);
      if (!r) stream_done(sc);
    } else if (out.stream_free) {
      out.stream_free(out.stream_arg);
    }
  } else {
    if (out.stream && out.stream_free) out.stream_free(out.stream_arg);
    r = MHD_create_response_from_buffer(out.len, (void *)(out.body ? out.body : ""),
                                        out.owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r && out.owned) free((void *)out.body);
  }
  if (!r) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, out.type);
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
  MHD_add_response_header(r, "X-Frame-Options", "DENY");
  MHD_add_response_header(r, "Content-Security-Policy",
                          "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                          "img-src 'self' data:; frame-ancestors 'none'");
  if (out.stream) MHD_add_response_header(r, "X-Accel-Buffering", "no");
  enum MHD_Result ret = MHD_queue_response(c, (unsigned)out.status, r);
  MHD_destroy_response(r);
  return ret;
}

/* Percent-decoding of the path and arguments, in place, as libmicrohttpd's own but keeping "%00"
 * as it is: a decoded NUL would cut the path short ("/%00" would read as "/"). Returns the new
 * length. */
static size_t unescape(void *cls, struct MHD_Connection *c, char *s) {
  (void)cls;
  (void)c;
  char *w = s;
  for (const char *r = s; *r;) {
    int hi, lo;
    if (r[0] == '%' && (hi = hexval(r[1])) >= 0 && (lo = hexval(r[2])) >= 0 && (hi | lo)) {
      *w++ = (char)(hi << 4 | lo);
      r += 3;
    } else {
      *w++ = *r++;
    }
  }
  *w = 0;
  return (size_t)(w - s);
}

/* libmicrohttpd's own complaints (a client that broke the protocol, ...) go to the debug log. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  (void)fmt;
  (void)ap;
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

http_server *http_start(const char *listen_addr, http_handler fn, void *user, char *err,
                        size_t errcap) {
  http_server *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errcap, "out of memory");
    return NULL;
  }
  s->fn = fn;
  s->user = user;
  if (listen_on(listen_addr, s, err, errcap)) {
    free(s);
    return NULL;
  }
  unsigned per_ip = s->loopback ? 0 : HTTP_MAX_CONNS / 4; /* remote hosts share the limit */
  s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                              MHD_USE_POLL | MHD_USE_ERROR_LOG,
                          0, NULL, NULL, on_request, s, MHD_OPTION_LISTEN_SOCKET, s->fd,
                          MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_MAX_CONNS,
                          MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip, MHD_OPTION_CONNECTION_TIMEOUT,
                          (unsigned)HTTP_TIMEOUT_S, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                          (size_t)HTTP_CONN_MEMORY, MHD_OPTION_THREAD_STACK_SIZE,
                          (size_t)STACK_BYTES, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                          MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL, MHD_OPTION_END);
  if (!s->d) {
    snprintf(err, errcap, "cannot start the HTTP server on %s", s->addr);
    close(s->fd);
    free(s);
    return NULL;
  }
  return s;
}

const char *http_address(const http_server *s) { return s->addr; }

bool http_loopback(const http_server *s) { return s->loopback; }

void http_stop(http_server *s) {
  if (!s) return;
  MHD_stop_daemon(s->d);
  close(s->fd);
  free(s);
}
