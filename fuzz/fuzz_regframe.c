/* fuzz_regframe: the parser of the graph server's answer to a channel's CHANNEL registration
 * (src/proto/regframe.c), in process and at full speed. The registration reads this answer from the
 * graph server as it arrives (chanreg.c); fuzz_client cannot reach it, since its fake server must
 * not hand the library addresses to resolve.
 *
 * Input: the bytes the graph server sent. Checks: the result is 1, 0 or EZ_EPROTO; a complete
 * answer fits in the input, its views lie inside it, its id is a UUID and its strings are within
 * the limit; every prefix of a complete answer asks for more bytes (never an error); bytes after
 * a complete answer change nothing; what a hang-up means is one of the three documented codes. */
#include "fuzz_common.h"
#include "proto/regframe.h"
#include "base/wire.h"

#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                                                   \
  do {                                                                                             \
    if (!(c)) fz_die("fuzz_regframe: invariant failed: %s (line %d)", #c, __LINE__);               \
  } while (0)

static bool inside(const uint8_t *p, size_t len, const void *s, size_t n) {
  return !n || ((const uint8_t *)s >= p && (const uint8_t *)s + n <= p + len);
}

static bool hangup_code(int rc) {
  return rc == EZ_EREFUSED || rc == EZ_ENOENT || rc == EZ_ECONNLOST;
}

int LLVMFuzzerTestOneInput(const uint8_t *p, size_t len) {
  ezi_reg_answer a;
  int st = ezi_reg_parse(p, len, &a);
  CHECK(st == 1 || st == 0 || st == EZ_EPROTO);
  if (st == 0) CHECK(hangup_code(ezi_reg_hangup(p, len)));
  if (st != 1) return 0;
  CHECK(a.used <= len);
  CHECK(inside(p, a.used, a.version, a.version_len) && inside(p, a.used, a.id, 36) &&
        inside(p, a.used, a.addr, a.addr_len));
  CHECK(a.version_len <= EZI_REG_MAX_STR && a.addr_len <= EZI_REG_MAX_STR);
  CHECK(ezi_is_uuid(a.id, 36));
  for (size_t k = 0; k < a.used; k++) {
    ezi_reg_answer pre;
    CHECK(ezi_reg_parse(p, k, &pre) == 0);
    CHECK(hangup_code(ezi_reg_hangup(p, k)));
  }
  uint8_t *more = malloc(a.used + 16); /* trailing bytes change nothing */
  if (!more) return 0;
  memcpy(more, p, a.used);
  memset(more + a.used, 0xA5, 16);
  ezi_reg_answer b;
  CHECK(ezi_reg_parse(more, a.used + 16, &b) == 1);
  CHECK(b.used == a.used && b.version_len == a.version_len && b.addr_len == a.addr_len);
  CHECK(!memcmp(b.id, more + (a.id - (const char *)p), 36));
  free(more);
  return 0;
}

void fuzz_teardown(void) {}
