/* fuzz_gsparse: the graph server's request parser (src/proto/gsparse.c), in process and at full speed.
 *
 * Input: byte 0 picks the phase (mod EZI_GS_NPHASES); the rest is what a connection sent. Checks:
 *  - a complete frame fits in the input, and its strings and payload lie inside it, within their
 *    limits;
 *  - a short one asks for more bytes than there are;
 *  - every prefix of a complete frame is short (or the same error), and asks for no more than the
 *    frame's length: the parser never needs bytes beyond the frame;
 *  - parsing is deterministic and an error is only ever EZ_EMSGSIZE. */
#include "fuzz_common.h"
#include "proto/gsparse.h"

#define CHECK(c)                                                                                   \
  do {                                                                                             \
    if (!(c)) fz_die("fuzz_gsparse: invariant failed: %s (line %d)", #c, __LINE__);                \
  } while (0)

static bool inside(const uint8_t *p, size_t len, const char *s, size_t n) {
  return !n || ((const uint8_t *)s >= p && (const uint8_t *)s + n <= p + len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  ezi_gs_phase phase = (ezi_gs_phase)(data[0] % EZI_GS_NPHASES);
  const uint8_t *p = data + 1;
  size_t len = size - 1;
  ezi_gs_req q, again;
  int st = ezi_gs_parse(phase, p, len, &q);
  CHECK(st == 1 || st == 0 || st == EZ_EMSGSIZE);
  CHECK(ezi_gs_parse(phase, p, len, &again) == st && again.used == q.used && again.need == q.need);
  if (st == 1) {
    CHECK(q.used >= 1 && q.used <= len);
    CHECK(inside(p, q.used, q.a, q.na) && inside(p, q.used, q.b, q.nb) &&
          inside(p, q.used, q.c, q.nc) && inside(p, q.used, (const char *)q.pl, q.npl));
    CHECK(q.na <= EZ_MAX_CONTROL_STR && q.nb <= EZ_MAX_CONTROL_STR && q.nc <= EZ_MAX_CONTROL_STR);
    CHECK(q.npl <= EZI_GS_MAX_PAYLOAD);
    /* Prefixes (a sample of them for long frames) are short and need nothing past the frame. */
    size_t step = q.used > 4096 ? q.used / 512 : 1;
    for (size_t k = 0; k < q.used; k += step) {
      ezi_gs_req pre;
      int ps = ezi_gs_parse(phase, p, k, &pre);
      CHECK(ps == 0);
      CHECK(pre.need > k && pre.need <= q.used);
    }
  } else if (st == 0) {
    CHECK(q.need > len);
  }
  return 0;
}

void fuzz_teardown(void) {}
