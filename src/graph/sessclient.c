/* A released-dialect session, blocking, for one-shot tools (sessclient.h). */
#include "graph/sessclient.h"
#include "proto/dialect.h"
#include "graph/graphio.h"
#include "proto/meta39.h"
#include "base/internal.h"
#include "base/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_ANSWER ((uint64_t)64 << 20)

int ezi_sess_open(const char *address, uint64_t deadline, ezi_sess *s) {
  *s = (ezi_sess){.fd = -1};
  char ver[64] = "";
  int fd = ezi_graph_open(address, deadline, ver, sizeof ver);
  if (fd < 0) return fd;
  ezi_peer_version pv = ezi_dialect_of_greeting(ver, strlen(ver));
  if (pv.dialect != EZ_DIALECT_RELEASED || !pv.sessions) {
    close(fd);
    return EZ_ENOTSUP;
  }
  /* SESSION and, in the same write, a SESSION_CLEAR, which a new session answers COMPLETE and
   * nothing else (no edges, no metadata, no event, on 3.9.0 as on ours): our server takes a 21
   * with bytes behind it for a SESSION at once, where a lone 21 waits SNIFF_NS for a PROFILE's
   * u64. */
  uint8_t cmd[2] = {EZI_SESSION, EZI_SESSION_CLEAR}, done = 0, cleared = 0;
  char *id = NULL;
  size_t n = 0;
  int rc = ezi_io_write(fd, cmd, sizeof cmd, deadline);
  if (!rc) rc = ezi_io_read_str(fd, &id, &n, 64, deadline);
  if (!rc && !ezi_is_uuid(id, n)) rc = EZ_EPROTO;
  if (!rc) rc = ezi_io_read(fd, &done, 1, deadline);
  if (!rc) rc = ezi_io_read(fd, &cleared, 1, deadline);
  if (!rc && (done != EZI_COMPLETE || cleared != EZI_COMPLETE)) rc = EZ_EPROTO;
  if (!rc) memcpy(s->id, id, 37);
  free(id);
  if (rc) {
    close(fd);
    return rc;
  }
  s->fd = fd;
  return 0;
}

void ezi_sess_close(ezi_sess *s) {
  if (s->fd >= 0) close(s->fd);
  s->fd = -1;
}

/* Reads `u64 n, pickle, COMPLETE` into a new buffer. */
static int read_pickled(ezi_sess *s, uint64_t deadline, uint8_t **out, size_t *len) {
  uint64_t n = 0;
  uint8_t done = 0;
  *out = NULL;
  int rc = ezi_io_read_u64(s->fd, &n, deadline);
  if (!rc && n > MAX_ANSWER) rc = EZ_EPROTO;
  if (!rc && !(*out = malloc(n ? (size_t)n : 1))) rc = EZ_ENOMEM;
  if (!rc) rc = ezi_io_read(s->fd, *out, (size_t)n, deadline);
  if (!rc) rc = ezi_io_read(s->fd, &done, 1, deadline);
  if (!rc && done != EZI_COMPLETE) rc = EZ_EPROTO;
  if (rc) {
    free(*out);
    *out = NULL;
  }
  *len = (size_t)n;
  return rc;
}

int ezi_sess_snapshot(ezi_sess *s, uint64_t deadline, ezi_pk_doc **doc, ezi_m39_graph_snapshot *gs,
                      bool *ours) {
  *doc = NULL;
  uint8_t cmd = EZI_SESSION_SNAPSHOT, *pk = NULL;
  size_t n = 0;
  int rc = ezi_io_write(s->fd, &cmd, 1, deadline);
  if (!rc) rc = read_pickled(s, deadline, &pk, &n);
  const ezi_pk *root = NULL;
  if (!rc) rc = ezi_pk_load(pk, n, NULL, doc, &root, NULL);
  if (!rc) rc = ezi_m39_parse(*doc, &EZI_M39_GRAPH_SNAPSHOT, root, gs, NULL);
  if (!rc && ours) *ours = ezi_pk_str_of(ezi_pk_attr(root, EZI_GS_MARK_ATTR), NULL) != NULL;
  free(pk);
  if (rc) {
    ezi_pk_doc_free(*doc);
    *doc = NULL;
    if (rc != EZ_ENOMEM && rc != EZ_ETIMEDOUT && rc != EZ_ECONNLOST) rc = EZ_EPROTO;
  }
  return rc;
}

int ezi_sess_request(ezi_sess *s, const char *unit, const char *operation, double timeout_s,
                     const uint8_t *payload, size_t n, uint64_t deadline, ezi_pk_doc **doc,
                     ezi_m39_control_response *resp) {
  *doc = NULL;
  char tmo[32];
  snprintf(tmo, sizeof tmo, "%.3f", timeout_s);
  ezi_buf b = {0};
  ezi_buf_put_u8(&b, EZI_SESSION_PROCESS_REQUEST);
  ezi_buf_put_cstr(&b, unit);
  ezi_buf_put_cstr(&b, operation);
  ezi_buf_put_cstr(&b, tmo);
  ezi_buf_put_u64(&b, payload ? n : 0);
  if (payload) ezi_buf_put(&b, payload, n);
  int rc = b.data ? ezi_io_write(s->fd, b.data, b.len, deadline) : EZ_ENOMEM;
  ezi_buf_free(&b);
  uint8_t *pk = NULL;
  size_t len = 0;
  if (!rc) rc = read_pickled(s, deadline, &pk, &len);
  if (!rc) rc = ezi_m39_load(&EZI_M39_PROCESS_CONTROL_RESPONSE, pk, len, doc, resp, NULL);
  free(pk);
  if (rc) {
    ezi_pk_doc_free(*doc);
    *doc = NULL;
  }
  return rc;
}
