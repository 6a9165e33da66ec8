/* fuzz_txframe: the channel's data-frame parser (src/proto/txframe.c), in process and at full speed.
 *
 * Input: the bytes a publisher sent a channel. Checks: a complete frame fits in the input and its
 * name / body lie inside it; a short one asks for more bytes than there are; no prefix of a
 * complete frame needs bytes beyond it; the read limit always leaves room for the whole frame
 * (so a reader never stalls on a frame that fits the limits); errors are only EZ_EPROTO or
 * EZ_EMSGSIZE. Then the body of a complete TX_TCP goes through ezi_unmarshal, as the channel does.
 */
#include "fuzz_common.h"
#include "proto/marshal.h"
#include "proto/txframe.h"
#include "base/wire.h"

#define CHECK(c)                                                                                   \
  do {                                                                                             \
    if (!(c)) fz_die("fuzz_txframe: invariant failed: %s (line %d)", #c, __LINE__);                \
  } while (0)

static bool inside(const uint8_t *p, size_t len, const void *s, size_t n) {
  return !n || ((const uint8_t *)s >= p && (const uint8_t *)s + n <= p + len);
}

int LLVMFuzzerTestOneInput(const uint8_t *p, size_t len) {
  ezi_tx_frame f;
  int st = ezi_tx_parse(p, len, &f);
  CHECK(st == 1 || st == 0 || st == EZ_EPROTO || st == EZ_EMSGSIZE);
  size_t limit = ezi_tx_limit(p, len);
  if (st == 1) {
    CHECK(f.used >= (f.cmd == EZI_X_TCP ? 5u : 9u) && f.used <= len);
    CHECK(inside(p, f.used, f.name, f.name_len) && inside(p, f.used, f.body, (size_t)f.size));
    CHECK(f.used <= limit);
    size_t step = f.used > 4096 ? f.used / 512 : 1;
    for (size_t k = 0; k < f.used; k += step) {
      ezi_tx_frame pre;
      CHECK(ezi_tx_parse(p, k, &pre) == 0);
      CHECK(pre.need > k && pre.need <= f.used);
      CHECK(pre.need <= ezi_tx_limit(p, k) || k < 17); /* the reader may grow to what it needs */
    }
    if (f.cmd == EZI_TX_TCP) {
      ezi_unmarshalled um;
      if (ezi_unmarshal(f.body, (size_t)f.size, &um) == 0) {
        CHECK(um.size <= f.size);
        CHECK(inside(f.body, (size_t)f.size, um.payload, um.payload_len));
      }
    }
  } else if (st == 0) {
    CHECK(f.need > len);
    if (len >= 17) CHECK(f.need <= limit); /* never a need the reader refuses to hold */
  }
  return 0;
}

void fuzz_teardown(void) {}
