/* The graph server's client registry extension (gsregistry.h): the X_SUB_INFO frame encoded,
 * parsed from a connection's bytes (whole, cut short, oversized) and decoded, malformed payloads
 * refused, and the "registry" JSON. The live path (an idle subscriber listed with its pid and
 * handle) is in tests/topics.sh. */
#include "harness.h"

#include "proto/gsparse.h"
#include "proto/gsregistry.h"
#include "base/internal.h"

#include <stdlib.h>
#include <string.h>

static void roundtrip(const char *handle, const char *want) {
  ezi_buf b = {0};
  assert_int_equal(ezi_subinfo_encode(&b, 4242, handle), 0);
  const uint8_t *p = ezi_buf_head(&b);
  size_t n = ezi_buf_pending(&b);
  for (size_t i = 0; i < n; i++) /* the reference servers act on these bytes only */
    assert_true(p[i] != 0x00 && p[i] != 0x16);
  ezi_gs_req q;
  assert_int_equal(ezi_gs_parse(EZI_GS_CLIENT, p, n, &q), 1);
  assert_int_equal(q.cmd, EZI_X_SUB_INFO);
  assert_int_equal(q.used, n);
  for (size_t k = 0; k < n; k++) { /* every prefix is short and asks for at most the frame */
    assert_int_equal(ezi_gs_parse(EZI_GS_CLIENT, p, k, &q), 0);
    assert_true(q.need > k && q.need <= n);
  }
  assert_int_equal(ezi_gs_parse(EZI_GS_CLIENT, p, n, &q), 1);
  int64_t pid = 0;
  char *h = NULL;
  assert_true(ezi_subinfo_decode(q.a, q.na, &pid, &h));
  assert_int_equal(pid, 4242);
  assert_string_equal(h, want);
  free(h);
  ezi_buf_free(&b);
}

static void test_subinfo_roundtrip(void **state) {
  (void)state;
  roundtrip("camera-filter", "camera-filter");
  roundtrip("", "");
  roundtrip("caf\xc3\xa9 \xe2\x86\x92 /x", "caf\xc3\xa9 \xe2\x86\x92 /x");
  /* Longer than EZI_SUBINFO_HANDLE: cut, and never inside a UTF-8 sequence. */
  char big[EZI_SUBINFO_HANDLE + 8];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = 0;
  big[EZI_SUBINFO_HANDLE - 1] = (char)0xc3; /* a 2-byte character across the limit */
  big[EZI_SUBINFO_HANDLE] = (char)0xa9;
  char want[EZI_SUBINFO_HANDLE];
  memset(want, 'a', sizeof want - 1);
  want[EZI_SUBINFO_HANDLE - 1] = 0;
  roundtrip(big, want);
}

static void test_subinfo_malformed(void **state) {
  (void)state;
  const char *bad[] = {"",     ":",     "12",    "12:6",  "12:zz",
                       "x:61", "-1:61", "12:00", "12:ff", "99999999999999999999999:61"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int64_t pid = 7;
    char *h = NULL;
    assert_false(ezi_subinfo_decode(bad[i], strlen(bad[i]), &pid, &h));
    assert_null(h);
    assert_int_equal(pid, 7);
  }
  /* No newline within the limit: an error, not a wait for ever more bytes. */
  size_t n = EZI_SUBINFO_MAX + 2;
  uint8_t *p = malloc(n);
  memset(p, '1', n);
  p[0] = EZI_X_SUB_INFO;
  ezi_gs_req q;
  assert_int_equal(ezi_gs_parse(EZI_GS_CLIENT, p, n, &q), EZ_EMSGSIZE);
  free(p);
}

static void test_registry_json(void **state) {
  (void)state;
  ezi_gs_client v[] = {
      {true, "p-id", "/a", "127.0.0.1", 25980, 0, NULL},
      {false, "s-id", "/b", "127.0.0.1", 0, 99, "h"},
      {false, "s2", "/c", "10.0.0.2", 0, 0, NULL},
  };
  json_t *j = ezi_gs_registry_json(v, 3);
  assert_non_null(j);
  char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
  assert_string_equal(
      s,
      "{\"publishers\":[{\"host\":\"127.0.0.1\",\"id\":\"p-id\",\"port\":25980,\"topic\":\"/a\"}],"
      "\"subscribers\":[{\"handle\":\"h\",\"host\":\"127.0.0.1\",\"id\":\"s-id\",\"pid\":99,"
      "\"topic\":\"/b\"},{\"host\":\"10.0.0.2\",\"id\":\"s2\",\"topic\":\"/c\"}]}");
  free(s);
  json_decref(j);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_subinfo_roundtrip),
      cmocka_unit_test(test_subinfo_malformed),
      cmocka_unit_test(test_registry_json),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
