/* Units of the wire layer: the output buffer, the incremental reader and its limits, addresses,
 * UUIDs, and the graph server's request framing (every command, whole and a byte at a time). */
#include "harness.h"

#include "proto/gsparse.h"
#include "base/internal.h"
#include "base/wire.h"
#include "rawproto.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void test_buf_encoding(void **state) {
  (void)state;
  ezi_buf b = {0};
  assert_int_equal(ezi_buf_pending(&b), 0);
  assert_non_null(ezi_buf_head(&b)); /* valid even before the first allocation */
  assert_int_equal(ezi_buf_put_u8(&b, EZI_CONNECT), 0);
  assert_int_equal(ezi_buf_put_cstr(&b, "/a"), 0);
  assert_int_equal(ezi_buf_put_u64(&b, 0x0102030405060708ull), 0);
  const uint8_t want[] = {3, 2, 0, 0, 0, 0, 0, 0, 0, '/', 'a', 8, 7, 6, 5, 4, 3, 2, 1};
  assert_int_equal(ezi_buf_pending(&b), sizeof want);
  assert_memory_equal(ezi_buf_head(&b), want, sizeof want);
  ezi_buf_consume(&b, 3);
  assert_int_equal(ezi_buf_pending(&b), sizeof want - 3);
  assert_memory_equal(ezi_buf_head(&b), want + 3, sizeof want - 3);
  /* Growing past the capacity after consuming keeps the pending bytes in order. */
  for (int i = 0; i < 10000; i++)
    assert_int_equal(ezi_buf_put_u8(&b, (uint8_t)i), 0);
  assert_memory_equal(ezi_buf_head(&b), want + 3, sizeof want - 3);
  assert_int_equal(ezi_buf_head(&b)[sizeof want - 3 + 9999], (uint8_t)9999);
  ezi_buf_consume(&b, ezi_buf_pending(&b));
  assert_int_equal(ezi_buf_pending(&b), 0);
  ezi_buf_free(&b);
  assert_null(b.data);
}

static void test_buf_socket_io(void **state) {
  (void)state;
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  ezi_buf out = {0}, in = {0};
  for (int i = 0; i < 1000; i++)
    ezi_buf_put_u64(&out, (uint64_t)i);
  assert_int_equal(ezi_buf_flush(&out, sv[0]), 0);
  assert_int_equal(ezi_buf_pending(&out), 0);
  /* fill never takes more than the limit it is given */
  assert_int_equal(ezi_buf_fill(&in, sv[1], 100), 100);
  assert_int_equal(ezi_buf_fill(&in, sv[1], 100), 0); /* full */
  long n;
  while ((n = ezi_buf_fill(&in, sv[1], 1 << 20)) > 0) {
  }
  assert_int_equal(n, 0); /* would block: nothing lost */
  assert_int_equal(ezi_buf_pending(&in), 8000);
  for (int i = 0; i < 1000; i++)
    assert_int_equal(ezi_get_u64le(ezi_buf_head(&in) + 8 * i), i);
  close(sv[0]);
  assert_int_equal(ezi_buf_fill(&in, sv[1], 1 << 20), EZ_ECONNLOST); /* EOF */
  close(sv[1]);
  ezi_buf_free(&out);
  ezi_buf_free(&in);
}

static void test_reader_short_and_limits(void **state) {
  (void)state;
  ezi_buf b = {0};
  ezi_buf_put_u8(&b, 7);
  ezi_buf_put_cstr(&b, "hello");
  const uint8_t *p = ezi_buf_head(&b);
  size_t len = ezi_buf_pending(&b);
  /* Every prefix is short and says exactly how many bytes the frame needs so far. */
  for (size_t k = 0; k < len; k++) {
    ezi_rd r;
    uint8_t c = 0;
    const char *s = NULL;
    size_t n = 0;
    ezi_rd_init(&r, p, k, 64);
    if (ezi_rd_u8(&r, &c)) ezi_rd_str(&r, &s, &n);
    assert_int_equal(ezi_rd_status(&r), 0);
    assert_true(r.need > k && r.need <= len);
  }
  ezi_rd r;
  uint8_t c = 0;
  const char *s = NULL;
  size_t n = 0;
  ezi_rd_init(&r, p, len, 64);
  assert_true(ezi_rd_u8(&r, &c) && ezi_rd_str(&r, &s, &n));
  assert_int_equal(ezi_rd_status(&r), 1);
  assert_int_equal(c, 7);
  assert_int_equal(n, 5);
  assert_memory_equal(s, "hello", 5);
  /* A string beyond the limit is an error at once, before its bytes arrive. */
  ezi_rd_init(&r, p, 9, 4);
  assert_true(ezi_rd_u8(&r, &c));
  assert_false(ezi_rd_str(&r, &s, &n));
  assert_int_equal(ezi_rd_status(&r), EZ_EMSGSIZE);
  /* A 2^63 length with only the prefix present: an error, never a "need" of 2^63 bytes. */
  uint8_t huge[9] = {0};
  ezi_put_u64le(huge, 1ull << 63);
  ezi_rd_init(&r, huge, 8, EZ_MAX_CONTROL_STR);
  assert_false(ezi_rd_str(&r, &s, &n));
  assert_int_equal(ezi_rd_status(&r), EZ_EMSGSIZE);
  ezi_buf_free(&b);
}

static void test_addresses_and_ids(void **state) {
  (void)state;
  char host[256];
  uint16_t port;
  assert_int_equal(ezi_addr_parse("127.0.0.1:25978", host, &port), 0);
  assert_string_equal(host, "127.0.0.1");
  assert_int_equal(port, 25978);
  assert_int_equal(ezi_addr_parse("localhost:0", host, &port), 0);
  const char *bad[] = {"", ":1", "host", "host:", "host:65536", "host:-1", "host:12x", NULL};
  for (int i = 0; bad[i]; i++)
    assert_int_equal(ezi_addr_parse(bad[i], host, &port), EZ_EADDR);
  assert_int_equal(ezi_addr_parse(NULL, host, &port), EZ_EADDR);
  char id[37];
  ezi_uuid(id);
  assert_true(ezi_is_uuid(id, 36));
  assert_false(ezi_is_uuid(id, 35));
  assert_false(ezi_is_uuid("0123456789abcdef0123456789abcdef0123", 36));
  char bad_id[37];
  memcpy(bad_id, id, 37);
  bad_id[10] = 'g';
  assert_false(ezi_is_uuid(bad_id, 36));
}

/* ezi_tcp_knock on this host: a listener takes the knock (a connection that says nothing and
 * hangs up), and once it is closed the same port refuses, both settled within the call. */
static void test_knock(void **state) {
  (void)state;
  char addr[64], host[256];
  uint16_t port;
  int l = rp_listen(addr, 4);
  assert_int_equal(ezi_addr_parse(addr, host, &port), 0);
  assert_int_equal(ezi_tcp_knock(host, port), 1);
  int fd = accept4(l, NULL, NULL, SOCK_CLOEXEC);
  assert_true(fd >= 0);
  assert_true(rp_closed_silently(fd, 5000));
  close(fd);
  close(l);
  assert_int_equal(ezi_tcp_knock(host, port), 0);
}

/* A request frame: whole, then fed a byte at a time, must parse to the same fields. */
static void check_frame(ezi_gs_phase ph, const ezi_buf *b, ezi_gs_req *out) {
  const uint8_t *p = ezi_buf_head(b);
  size_t len = ezi_buf_pending(b);
  assert_int_equal(ezi_gs_parse(ph, p, len, out), 1);
  assert_int_equal(out->used, len);
  for (size_t k = 0; k < len; k++) {
    ezi_gs_req q;
    assert_int_equal(ezi_gs_parse(ph, p, k, &q), 0);
    assert_true(q.need > k && q.need <= len);
  }
}

static void test_server_requests(void **state) {
  (void)state;
  ezi_gs_req q;
  ezi_buf b = {0};
  ezi_buf_put_u8(&b, EZI_CONNECT);
  ezi_buf_put_cstr(&b, "/from");
  ezi_buf_put_cstr(&b, "/to");
  check_frame(EZI_GS_COMMAND, &b, &q);
  assert_int_equal(q.cmd, EZI_CONNECT);
  assert_int_equal(q.na, 5);
  assert_memory_equal(q.a, "/from", 5);
  assert_int_equal(q.nb, 3);
  assert_memory_equal(q.b, "/to", 3);

  ezi_buf_reset(&b);
  ezi_buf_put_u8(&b, EZI_SHM_CREATE);
  ezi_buf_put_u64(&b, 32);
  ezi_buf_put_u64(&b, 65536);
  check_frame(EZI_GS_COMMAND, &b, &q);
  assert_int_equal(q.u1, 32);
  assert_int_equal(q.u2, 65536);

  ezi_buf_reset(&b);
  ezi_buf_put_u8(&b, EZI_PROFILE);
  ezi_buf_put_u64(&b, 2000);
  check_frame(EZI_GS_COMMAND, &b, &q);
  assert_int_equal(q.u1, 2000);

  const uint8_t one_byte[] = {EZI_SYNC, EZI_PAUSE, EZI_RESUME, EZI_SHUTDOWN, EZI_DAG, 200};
  for (size_t i = 0; i < sizeof one_byte; i++) {
    assert_int_equal(ezi_gs_parse(EZI_GS_COMMAND, &one_byte[i], 1, &q), 1);
    assert_int_equal(q.used, 1);
    assert_int_equal(q.cmd, one_byte[i]);
  }
  const uint8_t with_str[] = {EZI_PUBLISH, EZI_SUBSCRIBE, EZI_CHANNEL, EZI_SHM_ATTACH};
  for (size_t i = 0; i < sizeof with_str; i++) {
    ezi_buf_reset(&b);
    ezi_buf_put_u8(&b, with_str[i]);
    ezi_buf_put_cstr(&b, "x");
    check_frame(EZI_GS_COMMAND, &b, &q);
    assert_int_equal(q.na, 1);
  }

  ezi_buf_reset(&b); /* a publisher's address, then a registered client's answers */
  ezi_buf_put_cstr(&b, "127.0.0.1:25980");
  check_frame(EZI_GS_PUB_ADDR, &b, &q);
  assert_int_equal(q.na, 15);
  ezi_buf_reset(&b);
  ezi_buf_put_u8(&b, EZI_PROFILE_DATA);
  ezi_buf_put_cstr(&b, "{}");
  check_frame(EZI_GS_CLIENT, &b, &q);
  assert_int_equal(q.cmd, EZI_PROFILE_DATA);
  uint8_t complete = EZI_COMPLETE;
  assert_int_equal(ezi_gs_parse(EZI_GS_CLIENT, &complete, 1, &q), 1);

  /* Limits: exactly 1 MiB is fine, one byte more is refused before it arrives. */
  ezi_buf_reset(&b);
  ezi_buf_put_u8(&b, EZI_SUBSCRIBE);
  ezi_buf_put_u64(&b, EZ_MAX_CONTROL_STR + 1);
  assert_int_equal(ezi_gs_parse(EZI_GS_COMMAND, ezi_buf_head(&b), ezi_buf_pending(&b), &q),
                   EZ_EMSGSIZE);
  ezi_buf_reset(&b);
  ezi_buf_put_u8(&b, EZI_SUBSCRIBE);
  ezi_buf_put_u64(&b, EZ_MAX_CONTROL_STR);
  assert_int_equal(ezi_gs_parse(EZI_GS_COMMAND, ezi_buf_head(&b), ezi_buf_pending(&b), &q), 0);
  assert_int_equal(q.need, 9 + (size_t)EZ_MAX_CONTROL_STR);
  ezi_buf_free(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_buf_encoding),
      cmocka_unit_test(test_buf_socket_io),
      cmocka_unit_test(test_reader_short_and_limits),
      cmocka_unit_test(test_addresses_and_ids),
      cmocka_unit_test(test_knock),
      cmocka_unit_test(test_server_requests),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
