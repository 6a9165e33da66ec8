/* One-shot requests to a graph server: each opens a connection, reads the version, sends one
 * command, reads the answer and hangs up. Blocking, with a deadline for the whole exchange. */
#include "proto/dag.h"
#include "proto/dialect.h"
#include "graph/profile39.h"
#include "base/internal.h"
#include "graph/graphclient.h"
#include "graph/graphio.h"
#include "base/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_DAG_BYTES ((uint64_t)256 << 20)
#define MAX_PROFILE_BYTES ((uint64_t)64 << 20)

int ez_graph_ping(const char *address, char *version, size_t cap, int timeout_ms) {
  int fd = ezi_graph_open(address, ezi_deadline(timeout_ms), version, cap);
  if (fd < 0) return fd;
  close(fd);
  return 0;
}

/* Opens a connection and sends one command with up to two strings. */
static int request(const char *address, uint8_t cmd, const char *a, const char *b,
                   uint64_t deadline) {
  if ((a && strlen(a) > EZ_MAX_CONTROL_STR) || (b && strlen(b) > EZ_MAX_CONTROL_STR))
    return EZ_EMSGSIZE;
  int fd = ezi_graph_open(address, deadline, NULL, 0);
  if (fd < 0) return fd;
  ezi_buf out = {0};
  ezi_buf_put_u8(&out, cmd);
  if (a) ezi_buf_put_cstr(&out, a);
  if (b) ezi_buf_put_cstr(&out, b);
  int rc = out.data ? ezi_io_write(fd, out.data, out.len, deadline) : EZ_ENOMEM;
  ezi_buf_free(&out);
  if (rc) {
    close(fd);
    return rc;
  }
  return fd;
}

static int expect_byte(int fd, uint8_t *got, uint64_t deadline) {
  int rc = ezi_io_read(fd, got, 1, deadline);
  return rc;
}

static int edge(const char *address, uint8_t cmd, const char *from, const char *to, int tmo) {
  if (!from || !to) return EZ_EINVAL;
  uint64_t deadline = ezi_deadline(tmo);
  int fd = request(address, cmd, from, to, deadline);
  if (fd < 0) return fd;
  uint8_t r;
  int rc = expect_byte(fd, &r, deadline);
  close(fd);
  if (rc) return rc;
  if (r == EZI_CYCLIC) return EZ_ECYCLIC;
  return r == EZI_COMPLETE ? 0 : EZ_EPROTO;
}

int ez_graph_connect(const char *address, const char *from, const char *to, int timeout_ms) {
  return edge(address, EZI_CONNECT, from, to, timeout_ms);
}

int ez_graph_disconnect(const char *address, const char *from, const char *to, int timeout_ms) {
  return edge(address, EZI_DISCONNECT, from, to, timeout_ms);
}

int ez_graph_sync(const char *address, int timeout_ms) {
  uint64_t deadline = ezi_deadline(timeout_ms);
  int fd = request(address, EZI_SYNC, NULL, NULL, deadline);
  if (fd < 0) return fd;
  uint8_t r;
  int rc = expect_byte(fd, &r, deadline);
  close(fd);
  return rc ? rc : r == EZI_COMPLETE ? 0 : EZ_EPROTO;
}

/* Sends a command that has no answer; waits for the server to hang up so it surely acted. */
static int fire(const char *address, uint8_t cmd, int timeout_ms) {
  uint64_t deadline = ezi_deadline(timeout_ms);
  int fd = request(address, cmd, NULL, NULL, deadline);
  if (fd < 0) return fd;
  uint8_t r;
  int rc = ezi_io_read(fd, &r, 1, deadline);
  close(fd);
  return rc == EZ_ECONNLOST ? 0 : rc ? rc : EZ_EPROTO;
}

int ez_graph_pause(const char *address, int timeout_ms) {
  return fire(address, EZI_PAUSE, timeout_ms);
}
int ez_graph_resume(const char *address, int timeout_ms) {
  return fire(address, EZI_RESUME, timeout_ms);
}
int ez_graph_shutdown(const char *address, int timeout_ms) {
  return fire(address, EZI_SHUTDOWN, timeout_ms);
}

int ez_graph_dag(const char *address, ez_graph *out, int timeout_ms) {
  if (!out) return EZ_EINVAL;
  *out = (ez_graph){0};
  uint64_t deadline = ezi_deadline(timeout_ms);
  int fd = request(address, EZI_DAG, NULL, NULL, deadline);
  if (fd < 0) return fd;
  uint8_t r = 0, done = 0;
  uint64_t n = 0;
  uint8_t *pk = NULL;
  int rc = expect_byte(fd, &r, deadline);
  if (!rc && r != EZI_DAG) rc = EZ_EPROTO;
  if (!rc) rc = ezi_io_read_u64(fd, &n, deadline);
  if (!rc && n > MAX_DAG_BYTES) rc = EZ_EPROTO;
  if (!rc && !(pk = malloc(n ? (size_t)n : 1))) rc = EZ_ENOMEM;
  if (!rc) rc = ezi_io_read(fd, pk, (size_t)n, deadline);
  if (!rc) rc = expect_byte(fd, &done, deadline);
  if (!rc && done != EZI_COMPLETE) rc = EZ_EPROTO;
  close(fd);
  if (!rc) rc = ezi_dag_unpickle(pk, (size_t)n, out);
  free(pk);
  return rc;
}

/* PROFILE on a connection already greeted: window_ms and the command in one write (a server of
 * ours waits a little for them before it takes a lone 21 for the released dialect's SESSION). */
static int profile_on(int fd, double window_s, char **json, uint64_t deadline) {
  uint8_t req[9] = {EZI_PROFILE}, r = 0, done = 0;
  ezi_put_u64le(req + 1, (uint64_t)(window_s * 1000.0 + 0.5));
  int rc = ezi_io_write(fd, req, sizeof req, deadline);
  if (!rc) rc = expect_byte(fd, &r, deadline);
  if (!rc && r != EZI_PROFILE_DATA) rc = EZ_EPROTO;
  if (!rc) rc = ezi_io_read_str(fd, json, NULL, MAX_PROFILE_BYTES, deadline);
  if (!rc) rc = expect_byte(fd, &done, deadline);
  if (!rc && done != EZI_COMPLETE) rc = EZ_EPROTO;
  if (rc) {
    free(*json);
    *json = NULL;
  }
  return rc;
}

int ezi_profile_request(const char *address, double window_s, char **json, uint64_t deadline) {
  *json = NULL;
  int fd = ezi_graph_open(address, deadline, NULL, 0);
  if (fd < 0) return fd;
  int rc = profile_on(fd, window_s, json, deadline);
  close(fd);
  return rc;
}

int ez_profile(const char *address, double window_s, char **json, int timeout_ms) {
  if (!json) return EZ_EINVAL;
  *json = NULL;
  if (!(window_s >= 0)) window_s = 0; /* also NaN */
  if (window_s > EZ_PROFILE_MAX_WINDOW_S) window_s = EZ_PROFILE_MAX_WINDOW_S;
  uint64_t deadline = ezi_deadline(timeout_ms);
  char ver[64] = "";
  int fd = ezi_graph_open(address, deadline, ver, sizeof ver);
  if (fd < 0) return fd;
  ezi_peer_version pv = ezi_dialect_of_greeting(ver, strlen(ver));
  if (pv.dialect == EZ_DIALECT_PROFILING) {
    int rc = profile_on(fd, window_s, json, deadline);
    close(fd);
    return rc;
  }
  close(fd);
  /* The released dialect has no PROFILE (3.9.0 reads its bytes as a SESSION and commands):
   * ask the processes (3.9), or nothing is there to ask (3.7, 3.8). */
  if (!pv.sessions) return EZ_ENOTSUP;
  return ezi_profile39(address, window_s, ezi_ms_left(deadline), json);
}
