/* fuzz_marshal: ezi_unmarshal on arbitrary bytes.
 * Checks, for every input: the verdict equals an independent re-implementation of the framing
 * rules; a decoded message lies within the input (size, buffers, payload); the verdict does not
 * depend on bytes after the message; ezi_unmarshal_buf and ezi_unmarshal_bufs stay in bounds and
 * agree, and ezi_unmarshal_bufs refuses a length changed after the check; ezi_marshal_msg_id
 * agrees; and the input used as the payload of a C bytes message round-trips exactly. */
#include "fuzz_common.h"
#include "proto/marshal.h"

static uint64_t le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

/* The framing rules of marshal.h, written independently: 0 and the total size, or -1. */
static int ref_frame(const uint8_t *p, size_t len, size_t *size) {
  if (len < 18 || p[0] != 'E' || p[1] != 'Z') return -1;
  uint64_t nbuf = le64(p + 10);
  if (nbuf == 0 || nbuf > (len - 18) / 8) return -1;
  /* 128-bit-free overflow-safe sum: stop as soon as it passes len. */
  uint64_t total = 18 + nbuf * 8;
  for (uint64_t i = 0; i < nbuf; i++) {
    uint64_t l = le64(p + 18 + 8 * i);
    if (l > len - total) return -1;
    total += l;
  }
  *size = (size_t)total;
  return 0;
}

#define CHECK(c)                                                                                   \
  do {                                                                                             \
    if (!(c)) fz_die("fuzz_marshal: invariant failed: %s (line %d)", #c, __LINE__);                \
  } while (0)

static bool within(const uint8_t *base, size_t n, const uint8_t *p, size_t len) {
  return p >= base && p <= base + n && len <= (size_t)(base + n - p);
}

static void check_message(const uint8_t *data, size_t size) {
  ezi_unmarshalled u;
  int rc = ezi_unmarshal(data, size, &u);
  size_t ref_size = 0;
  int ref = ref_frame(data, size, &ref_size);
  CHECK((rc == 0) == (ref == 0));
  CHECK(rc == 0 || rc == EZ_EPROTO);

  uint64_t id;
  int idrc = ezi_marshal_msg_id(data, size, &id);
  CHECK(idrc == 0 || idrc == EZ_EPROTO);
  if (rc) return;

  CHECK(idrc == 0 && id == u.msg_id);
  CHECK(u.size == ref_size && u.size <= size);
  CHECK(u.nbuf >= 1 && u.nbuf <= (size - 18) / 8);
  CHECK(u.lens == data + 18);
  CHECK(u.bufs == data + 18 + 8 * u.nbuf);
  CHECK(within(data, u.size, u.payload, u.payload_len));
  if (u.raw_pickle) {
    CHECK(u.payload == u.bufs && u.payload_len == le64(u.lens));
  } else if (u.nbuf == 2 && le64(u.lens) == EZI_PICKLE_BYTES_STUB_LEN &&
             memcmp(u.bufs, EZI_PICKLE_BYTES_STUB, EZI_PICKLE_BYTES_STUB_LEN) == 0) {
    CHECK(u.payload == u.bufs + EZI_PICKLE_BYTES_STUB_LEN && u.payload_len == le64(u.lens + 8));
  } else {
    CHECK(u.nbuf == 1);
    CHECK(within(u.bufs, (size_t)le64(u.lens), u.payload, u.payload_len));
    CHECK(u.bufs[le64(u.lens) - 1] == 0x2e); /* STOP is the last byte of the pickle */
  }

  /* Buffers: contiguous, in bounds (O(i) each: only the first few). */
  const uint8_t *expect = u.bufs;
  for (uint64_t i = 0; i < u.nbuf && i < 64; i++) {
    const uint8_t *b;
    size_t n;
    ezi_unmarshal_buf(&u, i, &b, &n);
    CHECK(b == expect && within(data, u.size, b, n));
    expect = b + n;
  }
  if (u.nbuf <= 64) CHECK(expect == data + u.size);

  /* All of them in one pass (what a channel delivers): the same buffers, ending at the end. */
  if (u.nbuf <= 65536) {
    ez_iov *iov = malloc((size_t)u.nbuf * sizeof *iov);
    if (iov) {
      CHECK(ezi_unmarshal_bufs(&u, iov) == 0);
      expect = u.bufs;
      for (uint64_t i = 0; i < u.nbuf; i++) {
        CHECK(iov[i].data == expect && within(data, u.size, iov[i].data, iov[i].len));
        expect = (const uint8_t *)iov[i].data + iov[i].len;
      }
      CHECK(expect == data + u.size);
      /* A length grown after the check (another process's write) is refused, not followed. */
      if (u.nbuf >= 2) {
        uint8_t *copy = malloc(size);
        if (copy) {
          memcpy(copy, data, size);
          ezi_unmarshalled w = u;
          w.lens = copy + 18;
          w.bufs = copy + 18 + 8 * u.nbuf;
          uint64_t grown = le64(w.lens + 8) + 1; /* the lengths no longer add up */
          for (int k = 0; k < 8; k++)
            copy[18 + 8 + k] = (uint8_t)(grown >> (8 * k));
          CHECK(ezi_unmarshal_bufs(&w, iov) == EZ_EPROTO);
          free(copy);
        }
      }
      free(iov);
    }
  }

  /* The same message without what follows it decodes the same. */
  if (u.size < size) {
    uint8_t *exact = malloc(u.size);
    if (exact) {
      memcpy(exact, data, u.size);
      ezi_unmarshalled v;
      CHECK(ezi_unmarshal(exact, u.size, &v) == 0);
      CHECK(v.size == u.size && v.nbuf == u.nbuf && v.msg_id == u.msg_id &&
            v.raw_pickle == u.raw_pickle && v.payload_len == u.payload_len &&
            v.payload - exact == u.payload - data);
      free(exact);
    }
  }
}

/* The input as the payload of a C bytes message: must come back exactly. */
static void check_roundtrip(const uint8_t *data, size_t size) {
  size_t total = EZI_MARSHAL_BYTES_HDR + size;
  uint8_t *m = malloc(total);
  if (!m) return;
  uint64_t id = size >= 8 ? le64(data) : size;
  ezi_marshal_bytes_header(m, id, size);
  if (size) memcpy(m + EZI_MARSHAL_BYTES_HDR, data, size);
  ezi_unmarshalled u;
  CHECK(ezi_unmarshal(m, total, &u) == 0);
  CHECK(!u.raw_pickle && u.msg_id == id && u.nbuf == 2 && u.size == total);
  CHECK(u.payload == m + EZI_MARSHAL_BYTES_HDR && u.payload_len == size);
  free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  check_message(data, size);
  check_roundtrip(data, size);
  return 0;
}

void fuzz_teardown(void) {}
