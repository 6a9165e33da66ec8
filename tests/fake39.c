/* Fake ezmsg 3.9.0 clients for tests: sessions and processes speaking the released dialect's
 * bytes by hand to the graph server at th_addr (docs/protocol39.md). Every helper fails the
 * running cmocka test on a wrong answer. */
#include "fake39.h"
#include "harness.h"
#include "rawproto.h"
#include "base/wire.h"

#include <stdlib.h>
#include <string.h>

int f39_open(void) {
  int fd = rp_open(th_addr);
  rp_expect_str(fd, EZ_VERSION);
  return fd;
}

int f39_session(char id[64]) {
  int fd = f39_open();
  rp_wr_u8(fd, EZI_SESSION);
  rp_rd_str(fd, id, 64);
  assert_true(rp_is_uuid(id));
  rp_expect_u8(fd, EZI_COMPLETE);
  return fd;
}

void f39_wr_payload(int fd, uint8_t cmd, const uint8_t *p, size_t n) {
  rp_wr_u8(fd, cmd);
  rp_wr_u64(fd, n);
  if (n) rp_wr(fd, p, n);
}

uint8_t *f39_rd_pickle(int fd, size_t *n) {
  uint64_t len = rp_rd_u64(fd);
  assert_true(len < (64u << 20));
  uint8_t *b = malloc(len ? len : 1);
  assert_non_null(b);
  assert_int_equal(rp_rd_exact(fd, b, (size_t)len, RP_TMO), 0);
  *n = (size_t)len;
  return b;
}

void f39_rd_answer(int fd, const ezi_m39_class *c, ezi_pk_doc **doc, void *out) {
  size_t n;
  uint8_t *b = f39_rd_pickle(fd, &n);
  rp_expect_u8(fd, EZI_COMPLETE);
  ezi_pk_err err;
  int rc = ezi_m39_load(c, b, n, doc, out, &err);
  if (rc) fail_msg("%s: %s", c->name, err.msg);
  free(b);
}

uint8_t f39_sess_edge(int fd, uint8_t cmd, const char *from, const char *to) {
  rp_wr_cmd(fd, cmd, from, to);
  return rp_rd_u8(fd);
}

void f39_snapshot(int fd, ezi_pk_doc **doc, ezi_m39_graph_snapshot *gs) {
  rp_wr_u8(fd, EZI_SESSION_SNAPSHOT);
  f39_rd_answer(fd, &EZI_M39_GRAPH_SNAPSHOT, doc, gs);
}

const ezi_m39_strs *f39_owners_of(const ezi_m39_graph_snapshot *gs, const char *from,
                                  const char *to) {
  for (size_t i = 0; i < gs->n_edge_owners; i++)
    if (!strcmp(gs->edge_owner_keys[i].from_topic, from) &&
        !strcmp(gs->edge_owner_keys[i].to_topic, to))
      return &gs->edge_owners[i];
  return NULL;
}

int f39_process(char id[64], const char *const *units, size_t n, uint8_t want) {
  int fd = f39_open();
  rp_wr_u8(fd, EZI_PROCESS);
  rp_rd_str(fd, id, 64);
  assert_true(rp_is_uuid(id));
  rp_expect_u8(fd, EZI_COMPLETE);
  ezi_m39_process_registration reg = {
      .pid = 4242, .host = "testhost", .units = {.has = true, .n = n, .v = (const char **)units}};
  uint8_t *pk;
  size_t len;
  assert_int_equal(ezi_m39_dump(&EZI_M39_PROCESS_REGISTRATION, &reg, &pk, &len, NULL), 0);
  f39_wr_payload(fd, EZI_PROCESS_REGISTER, pk, len);
  free(pk);
  rp_expect_u8(fd, want);
  return fd;
}

void f39_route(int fd, const char *unit, const char *op, const char *timeout, const void *pl,
               size_t n) {
  rp_wr_u8(fd, EZI_SESSION_PROCESS_REQUEST);
  rp_wr_str(fd, unit);
  rp_wr_str(fd, op);
  rp_wr_str(fd, timeout);
  rp_wr_u64(fd, n);
  if (n) rp_wr(fd, pl, n);
}
