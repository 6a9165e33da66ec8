/* Marshalled messages: the "EZ" framing, the C bytes form, and the pickle forms Python ezmsg sends.
 *
 * tests/corpus/marshal/ holds messages written by the reference's MessageMarshal (Python 3.11,
 * ezmsg 3.6.2) and by hand; they double as fuzzer seeds. Naming: valid_*.bin must unmarshal,
 * invalid_*.bin must give EZ_EPROTO; payloads of the valid ones follow pat() below. The corpus is
 * found through $EZ_SRC (set by CTest), else next to this source file. */
#include "harness.h"
#include "proto/marshal.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The payload pattern used by the corpus generator: byte i = (i*7 + 3) & 0xff. */
static uint8_t *pat(size_t n) {
  uint8_t *b = malloc(n ? n : 1);
  assert_non_null(b);
  for (size_t i = 0; i < n; i++)
    b[i] = (uint8_t)((i * 7 + 3) & 0xff);
  return b;
}
static bool is_pat(const uint8_t *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (b[i] != (uint8_t)((i * 7 + 3) & 0xff)) return false;
  return true;
}

/* A growable byte buffer for building messages. */
typedef struct {
  uint8_t *p;
  size_t n, cap;
} bb;
static void bb_put(bb *b, const void *d, size_t n) {
  if (!b->p || b->n + n > b->cap) {
    b->cap = (b->n + n) * 2 + 64;
    b->p = realloc(b->p, b->cap);
    assert_non_null(b->p);
  }
  if (n) memcpy(b->p + b->n, d, n);
  b->n += n;
}
static void bb_u8(bb *b, uint8_t v) { bb_put(b, &v, 1); }
static void bb_le(bb *b, uint64_t v, unsigned width) {
  for (unsigned i = 0; i < width; i++)
    bb_u8(b, (uint8_t)(v >> (8 * i)));
}

/* Builds a marshalled message from n buffers. */
static bb build(uint64_t msg_id, size_t n, const uint8_t *const *bufs, const size_t *lens) {
  bb b = {0};
  bb_put(&b, "EZ", 2);
  bb_le(&b, msg_id, 8);
  bb_le(&b, n, 8);
  for (size_t i = 0; i < n; i++)
    bb_le(&b, lens[i], 8);
  for (size_t i = 0; i < n; i++)
    bb_put(&b, bufs[i], lens[i]);
  return b;
}
static bb build1(uint64_t msg_id, const bb *pickle) {
  const uint8_t *bufs[1] = {pickle->p};
  size_t lens[1] = {pickle->n};
  return build(msg_id, 1, bufs, lens);
}

/* Every proper prefix of a valid message must be rejected (for big messages: the first and last
 * 512 prefixes and every 97th in between). */
static void check_truncations(const uint8_t *m, size_t size) {
  ezi_unmarshalled u;
  for (size_t l = 0; l < size; l++) {
    if (size > 4096 && l >= 512 && l < size - 512 && l % 97 != 0) continue;
    /* a fresh copy of exactly l bytes, so ASan catches any read past the end */
    uint8_t *c = malloc(l ? l : 1);
    assert_non_null(c);
    memcpy(c, m, l);
    int rc = ezi_unmarshal(c, l, &u);
    if (rc != EZ_EPROTO) fail_msg("prefix of %zu/%zu bytes accepted (rc %d)", l, size, rc);
    free(c);
  }
}

static void test_bytes_header_layout(void **state) {
  (void)state;
  assert_int_equal(EZI_MARSHAL_BYTES_HDR, 58);
  assert_int_equal(sizeof(EZI_PICKLE_BYTES_STUB) - 1, 24);
  uint8_t h[EZI_MARSHAL_BYTES_HDR + 1];
  memset(h, 0xAA, sizeof h);
  ezi_marshal_bytes_header(h, 0x0102030405060708ull, 0x1122334455667788ull);
  static const uint8_t want[EZI_MARSHAL_BYTES_HDR] = {
      'E',  'Z',  0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* msg_id */
      2,    0,    0,    0,    0,    0,    0,    0,                /* nbuf */
      24,   0,    0,    0,    0,    0,    0,    0,                /* len 0 */
      0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,             /* len 1 */
      0x80, 0x05, 0x8c, 0x08, 'b',  'u',  'i',  'l',  't',  'i',  'n',  's',
      0x8c, 0x05, 'b',  'y',  't',  'e',  's',  0x93, 0x97, 0x85, 0x52, 0x2e};
  assert_memory_equal(h, want, sizeof want);
  assert_int_equal(h[EZI_MARSHAL_BYTES_HDR], 0xAA); /* nothing written past the header */
}

static void roundtrip(size_t n, uint64_t msg_id) {
  size_t total = EZI_MARSHAL_BYTES_HDR + n;
  uint8_t *m = malloc(total + 100);
  assert_non_null(m);
  ezi_marshal_bytes_header(m, msg_id, n);
  uint8_t *p = pat(n);
  memcpy(m + EZI_MARSHAL_BYTES_HDR, p, n);
  ezi_unmarshalled u;
  assert_int_equal(ezi_unmarshal(m, total, &u), 0);
  assert_true(u.msg_id == msg_id);
  assert_int_equal(u.nbuf, 2);
  assert_int_equal(u.size, total);
  assert_false(u.raw_pickle);
  assert_ptr_equal(u.payload, m + EZI_MARSHAL_BYTES_HDR);
  assert_int_equal(u.payload_len, n);
  assert_memory_equal(u.payload, p, n);
  const uint8_t *d;
  size_t dl;
  ezi_unmarshal_buf(&u, 0, &d, &dl);
  assert_ptr_equal(d, m + 34);
  assert_int_equal(dl, 24);
  ezi_unmarshal_buf(&u, 1, &d, &dl);
  assert_ptr_equal(d, u.payload);
  assert_int_equal(dl, n);
  uint64_t id = 0;
  assert_int_equal(ezi_marshal_msg_id(m, total, &id), 0);
  assert_true(id == msg_id);
  /* Followed by junk (a shared-memory data block): still valid, size tells the real length. */
  memset(m + total, 0x5A, 100);
  assert_int_equal(ezi_unmarshal(m, total + 100, &u), 0);
  assert_int_equal(u.size, total);
  assert_int_equal(u.payload_len, n);
  check_truncations(m, total);
  free(p);
  free(m);
}

static void test_roundtrip_sizes(void **state) {
  (void)state;
  roundtrip(0, 0);
  roundtrip(1, 1);
  roundtrip(255, 77);
  roundtrip(64 * 1024, UINT64_MAX);
}

static void test_msg_id(void **state) {
  (void)state;
  uint64_t id = 123;
  const uint8_t ok[10] = {'E', 'Z', 1, 2, 0, 0, 0, 0, 0, 0x80};
  assert_int_equal(ezi_marshal_msg_id(ok, 10, &id), 0);
  assert_true(id == 0x8000000000000201ull);
  id = 123;
  assert_int_equal(ezi_marshal_msg_id(ok, 9, &id), EZ_EPROTO);
  assert_int_equal(ezi_marshal_msg_id(ok, 0, &id), EZ_EPROTO);
  const uint8_t bad[10] = {'E', 'Y', 1, 2, 0, 0, 0, 0, 0, 0};
  assert_int_equal(ezi_marshal_msg_id(bad, 10, &id), EZ_EPROTO);
  uint8_t zero[64] = {0}; /* an uninitialised shared-memory block */
  assert_int_equal(ezi_marshal_msg_id(zero, sizeof zero, &id), EZ_EPROTO);
  assert_true(id == 123);
  /* the reference's NO_MESSAGE: msg_id readable, but not a message */
  uint8_t nomsg[18] = {'E', 'Z', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  assert_int_equal(ezi_marshal_msg_id(nomsg, sizeof nomsg, &id), 0);
  assert_true(id == UINT64_MAX);
  ezi_unmarshalled u;
  assert_int_equal(ezi_unmarshal(nomsg, sizeof nomsg, &u), EZ_EPROTO);
}

/* ---- corpus (real Python output) ------------------------------------------------------------ */

static char *corpus_dir(void) {
  char *d = malloc(4096);
  assert_non_null(d);
  const char *src = getenv("EZ_SRC");
  if (src && *src) {
    snprintf(d, 4096, "%s/tests/corpus/marshal", src);
  } else {
    const char *f = __FILE__;
    const char *slash = strrchr(f, '/');
    if (slash)
      snprintf(d, 4096, "%.*s/corpus/marshal", (int)(slash - f), f);
    else
      snprintf(d, 4096, "corpus/marshal");
  }
  return d;
}

static uint8_t *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  assert_true(n >= 0);
  uint8_t *b = malloc((size_t)n ? (size_t)n : 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return b;
}

/* What each known corpus file must give. */
typedef struct {
  const char *name;
  uint64_t msg_id;
  uint64_t nbuf;
  bool raw;
  size_t pat_len; /* payload == pat(pat_len), when !raw */
} expect;
static const expect k_expect[] = {
    {"valid_py_bytes_0.bin", 1000, 1, false, 0},
    {"valid_py_bytes_1.bin", 1001, 1, false, 1},
    {"valid_py_bytes_255.bin", 1255, 1, false, 255}, /* FRAME + SHORT_BINBYTES */
    {"valid_py_bytes_256.bin", 1256, 1, false, 256}, /* FRAME + BINBYTES */
    {"valid_py_bytes_60000.bin", 61000, 1, false, 60000},
    {"valid_py_bytearray_0.bin", 2000, 1, false, 0}, /* FRAME + BYTEARRAY8 */
    {"valid_py_bytearray_3.bin", 2003, 1, false, 3},
    {"valid_py_bytearray_300.bin", 2300, 1, false, 300},
    {"valid_c_stub_0.bin", 4000, 2, false, 0},
    {"valid_c_stub_1.bin", 4001, 2, false, 1},
    {"valid_c_stub_100.bin", 4100, 2, false, 100},
    {"valid_py_dict_raw.bin", 3, 1, true, 0},
    {"valid_py_str_raw.bin", 4, 1, true, 0},
    {"valid_py_picklebuffer_raw.bin", 5, 2, true, 0}, /* PickleBuffer goes out of band */
};

static void check_corpus_file(const char *dir, const char *name, const expect **seen) {
  char path[4600];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  size_t len;
  uint8_t *m = read_file(path, &len);
  ezi_unmarshalled u;
  int rc = ezi_unmarshal(m, len, &u);
  if (strncmp(name, "invalid_", 8) == 0) {
    if (rc != EZ_EPROTO) fail_msg("%s: accepted", name);
  } else {
    if (rc != 0) fail_msg("%s: rc %d", name, rc);
    assert_int_equal(u.size, len);
    check_truncations(m, len);
    for (size_t i = 0; i < sizeof k_expect / sizeof k_expect[0]; i++) {
      const expect *e = &k_expect[i];
      if (strcmp(e->name, name) != 0) continue;
      seen[i] = e;
      assert_true(u.msg_id == e->msg_id);
      assert_int_equal(u.nbuf, e->nbuf);
      if (u.raw_pickle != e->raw) fail_msg("%s: raw_pickle %d", name, u.raw_pickle);
      if (!e->raw) {
        assert_int_equal(u.payload_len, e->pat_len);
        assert_true(is_pat(u.payload, u.payload_len));
      } else {
        const uint8_t *d;
        size_t dl;
        ezi_unmarshal_buf(&u, 0, &d, &dl);
        assert_ptr_equal(u.payload, d);
        assert_int_equal(u.payload_len, dl);
        assert_int_equal(d[0], 0x80);
        if (e->nbuf == 2) { /* the PickleBuffer: buffer 1 carries pat(10) */
          ezi_unmarshal_buf(&u, 1, &d, &dl);
          assert_int_equal(dl, 10);
          assert_true(is_pat(d, dl));
          assert_ptr_equal(d + dl, m + len);
        }
      }
    }
  }
  free(m);
}

static void test_corpus(void **state) {
  (void)state;
  char *dir = corpus_dir();
  DIR *d = opendir(dir);
  if (!d) fail_msg("corpus directory %s not found (set EZ_SRC)", dir);
  const expect *seen[sizeof k_expect / sizeof k_expect[0]] = {0};
  int n_valid = 0, n_invalid = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    size_t nl = strlen(de->d_name);
    if (nl < 4 || strcmp(de->d_name + nl - 4, ".bin") != 0) continue;
    if (strncmp(de->d_name, "invalid_", 8) == 0)
      n_invalid++;
    else if (strncmp(de->d_name, "valid_", 6) == 0)
      n_valid++;
    else
      continue;
    check_corpus_file(dir, de->d_name, seen);
  }
  closedir(d);
  for (size_t i = 0; i < sizeof k_expect / sizeof k_expect[0]; i++)
    if (!seen[i]) fail_msg("corpus file %s missing", k_expect[i].name);
  assert_true(n_valid >= 14);
  assert_true(n_invalid >= 8);
  free(dir);
}

/* ---- framing attacks ------------------------------------------------------------------------ */

static void test_nbuf_bounds(void **state) {
  (void)state;
  const uint64_t nbufs[] = {0, UINT64_MAX, 1ull << 61, (1ull << 61) + 1, 1ull << 63, 3, 1000};
  for (size_t k = 0; k < sizeof nbufs / sizeof nbufs[0]; k++) {
    bb b = {0};
    bb_put(&b, "EZ", 2);
    bb_le(&b, 9, 8);
    bb_le(&b, nbufs[k], 8);
    bb_le(&b, 0, 8); /* room for two zero lengths only */
    bb_le(&b, 0, 8);
    ezi_unmarshalled u;
    if (ezi_unmarshal(b.p, b.n, &u) != EZ_EPROTO)
      fail_msg("nbuf %llu accepted", (unsigned long long)nbufs[k]);
    free(b.p);
  }
  /* nbuf exactly what fits: two empty buffers -> valid, raw (empty pickle) */
  bb b = {0};
  bb_put(&b, "EZ", 2);
  bb_le(&b, 9, 8);
  bb_le(&b, 2, 8);
  bb_le(&b, 0, 8);
  bb_le(&b, 0, 8);
  ezi_unmarshalled u;
  assert_int_equal(ezi_unmarshal(b.p, b.n, &u), 0);
  assert_true(u.raw_pickle);
  assert_int_equal(u.payload_len, 0);
  assert_int_equal(u.size, b.n);
  free(b.p);
}

static void test_length_overflow(void **state) {
  (void)state;
  const uint64_t pairs[][2] = {
      {UINT64_MAX, 1},
      {1, UINT64_MAX},
      {1ull << 63, 1ull << 63},
      {(1ull << 63) + 1, (1ull << 63) - 1},
      {UINT64_MAX, UINT64_MAX},
      {4, 0},
      {0, 4},
      {2, 3},
      {SIZE_MAX, 2},
  };
  for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
    bb b = {0};
    bb_put(&b, "EZ", 2);
    bb_le(&b, 1, 8);
    bb_le(&b, 2, 8);
    bb_le(&b, pairs[k][0], 8);
    bb_le(&b, pairs[k][1], 8);
    bb_put(&b, "abc", 3); /* only 3 data bytes */
    ezi_unmarshalled u;
    if (ezi_unmarshal(b.p, b.n, &u) != EZ_EPROTO)
      fail_msg("lengths %llx %llx accepted", (unsigned long long)pairs[k][0],
               (unsigned long long)pairs[k][1]);
    free(b.p);
  }
}

static void test_multi_buffers(void **state) {
  (void)state;
  const uint8_t *bufs[4] = {(const uint8_t *)"\x80\x05N.", (const uint8_t *)"",
                            (const uint8_t *)"hello", (const uint8_t *)"xy"};
  size_t lens[4] = {4, 0, 5, 2};
  bb b = build(42, 4, bufs, lens);
  ezi_unmarshalled u;
  assert_int_equal(ezi_unmarshal(b.p, b.n, &u), 0);
  assert_int_equal(u.nbuf, 4);
  assert_true(u.raw_pickle);
  assert_int_equal(u.size, b.n);
  for (uint64_t i = 0; i < 4; i++) {
    const uint8_t *d;
    size_t dl;
    ezi_unmarshal_buf(&u, i, &d, &dl);
    assert_int_equal(dl, lens[i]);
    assert_memory_equal(d, bufs[i], lens[i]);
  }
  check_truncations(b.p, b.n);
  free(b.p);
}

/* ---- pickle recognition --------------------------------------------------------------------- */

/* Unmarshals a one-buffer message holding `pk`; returns the result. */
static ezi_unmarshalled un1(const bb *pk, int want_rc) {
  bb m = build1(7, pk);
  ezi_unmarshalled u;
  memset(&u, 0, sizeof u);
  assert_int_equal(ezi_unmarshal(m.p, m.n, &u), want_rc);
  if (want_rc == 0) {
    assert_int_equal(u.size, m.n);
    /* re-point into pk so callers can compare against its bytes */
    ptrdiff_t off = u.payload - (m.p + (m.n - pk->n));
    u.payload = pk->p + off;
  }
  free(m.p);
  return u;
}

/* Python's bytes pickle: 80 05 [95 u64] op len payload 94 2e. */
static bb py_bytes(uint8_t proto, bool frame, uint8_t op, size_t n, const char *memo) {
  bb body = {0};
  unsigned w = op == 0x43 ? 1 : op == 0x42 ? 4 : 8;
  bb_u8(&body, op);
  bb_le(&body, n, w);
  uint8_t *p = pat(n);
  bb_put(&body, p, n);
  free(p);
  if (memo) bb_put(&body, memo, strlen(memo));
  bb_u8(&body, 0x2e);
  bb pk = {0};
  bb_u8(&pk, 0x80);
  bb_u8(&pk, proto);
  if (frame) {
    bb_u8(&pk, 0x95);
    bb_le(&pk, body.n, 8);
  }
  bb_put(&pk, body.p, body.n);
  free(body.p);
  return pk;
}

static void expect_payload(const bb *pk, size_t n) {
  ezi_unmarshalled u = un1(pk, 0);
  if (u.raw_pickle) fail_msg("pickle of %zu bytes taken as raw", n);
  assert_int_equal(u.payload_len, n);
  assert_true(is_pat(u.payload, n));
  assert_true(u.payload >= pk->p && u.payload + n <= pk->p + pk->n);
}
static void expect_raw(const bb *pk) {
  ezi_unmarshalled u = un1(pk, 0);
  if (!u.raw_pickle) fail_msg("pickle wrongly recognised as bytes");
  assert_ptr_equal(u.payload, pk->p);
  assert_int_equal(u.payload_len, pk->n);
}

static void test_pickle_forms(void **state) {
  (void)state;
  /* Exactly what CPython 3.11 emits (checked by hand):
   *  protocol 5 bytes, n < 256:        80 05 95 <u64> 43 <u8> payload 94 2e
   *  protocol 5 bytes, 256..65535:     80 05 95 <u64> 42 <u32> payload 94 2e
   *  protocol 5 bytes, >= 65536:       80 05 42 <u32> payload 94 2e  (no FRAME)
   *  protocol 5 bytearray, < 65536:    80 05 95 <u64> 96 <u64> payload 94 2e
   *  protocol 5 bytearray, >= 65536:   80 05 96 <u64> payload 94 2e
   *  protocol 4: same as 5 with 80 04; protocol 3: 80 03 43|42 ... 71 00 2e (BINPUT) */
  const char *memo94 = "\x94";
  bb pk;
  pk = py_bytes(5, true, 0x43, 0, memo94), expect_payload(&pk, 0), free(pk.p);
  pk = py_bytes(5, true, 0x43, 255, memo94), expect_payload(&pk, 255), free(pk.p);
  pk = py_bytes(5, true, 0x42, 256, memo94), expect_payload(&pk, 256), free(pk.p);
  pk = py_bytes(5, false, 0x42, 70000, memo94), expect_payload(&pk, 70000), free(pk.p);
  pk = py_bytes(5, false, 0x8e, 70000, memo94), expect_payload(&pk, 70000), free(pk.p);
  pk = py_bytes(5, true, 0x96, 0, memo94), expect_payload(&pk, 0), free(pk.p);
  pk = py_bytes(5, true, 0x96, 1000, memo94), expect_payload(&pk, 1000), free(pk.p);
  pk = py_bytes(5, false, 0x96, 70000, memo94), expect_payload(&pk, 70000), free(pk.p);
  pk = py_bytes(5, true, 0x43, 3, NULL), expect_payload(&pk, 3), free(pk.p); /* no memo */
  pk = py_bytes(4, true, 0x43, 3, memo94), expect_payload(&pk, 3), free(pk.p);
  /* protocol 3: 80 03 43 03 <3> 71 00 2e */
  {
    bb b = {0};
    bb_put(&b, "\x80\x03\x43\x03", 4);
    bb_put(&b, "\x03\x0a\x11", 3);
    bb_put(&b, "\x71\x00\x2e", 3);
    expect_payload(&b, 3);
    free(b.p);
    bb l = {0}; /* LONG_BINPUT */
    bb_put(&l, "\x80\x03\x42\x03\x00\x00\x00", 7);
    bb_put(&l, "\x03\x0a\x11", 3);
    bb_put(&l, "\x72\x00\x00\x00\x00\x2e", 6);
    expect_payload(&l, 3);
    free(l.p);
  }
  /* The real 5 MiB Python output shape (no FRAME, BINBYTES), checked against its length. */
  pk = py_bytes(5, false, 0x42, 5u << 20, memo94);
  assert_int_equal(pk.n, 5242889); /* len(pickle.dumps(b"a" * 5 MiB, protocol=5)) */
  expect_payload(&pk, 5u << 20);
  free(pk.p);
}

/* Builds raw bytes into a bb. */
static bb raw(const void *d, size_t n) {
  bb b = {0};
  bb_put(&b, d, n);
  return b;
}
#define RAW(lit) raw(lit, sizeof(lit) - 1)

static void test_raw_pickles(void **state) {
  (void)state;
  bb pk;
  const struct {
    const char *d;
    size_t n;
  } cases[] = {
#define C(lit) {lit, sizeof(lit) - 1}
      C(""),                                                 /* empty buffer 0 */
      C("\x80"),                                             /* PROTO without version */
      C("\x80\x05"),                                         /* nothing else */
      C("\x80\x05\x2e"),                                     /* STOP only */
      C("\x80\x02\x43\x01\x03\x94\x2e"),                     /* protocol 2 */
      C("\x80\x06\x43\x01\x03\x94\x2e"),                     /* protocol 6 (Python refuses it) */
      C("\x43\x01\x03\x94\x2e"),                             /* no PROTO */
      C("\x80\x05\x43\x01\x03\x94"),                         /* no STOP */
      C("\x80\x05\x43\x01\x03\x94\x2e\x2e"),                 /* trailing byte after STOP */
      C("\x80\x05\x43\x02\x03\x2e"),                         /* length longer than the data */
      C("\x80\x05\x43\x05\x03\x2e"),                         /* length past the end */
      C("\x80\x05\x42\x01\x00\x00"),                         /* truncated u32 */
      C("\x80\x05\x8e\xff\xff\xff\xff\xff\xff\xff\xff\x2e"), /* u64 length huge */
      C("\x80\x05\x96\x00\x00\x00\x00\x00\x00\x00\x80\x2e"), /* u64 length 2^63 */
      C("\x80\x05\x95\xff\xff\xff\xff\xff\xff\xff\xff\x43\x00\x2e"), /* FRAME longer than data */
      C("\x80\x05\x95\x03\x00\x00\x00\x00\x00\x00\x00\x95\x03\x00\x00\x00\x00\x00\x00\x00\x43\x00"
        "\x2e"),
      C("\x80\x05\x95\x03\x00\x00"),             /* truncated FRAME */
      C("\x80\x05\x43\x01\x03\x94\x94\x2e"),     /* two memo ops */
      C("\x80\x05\x43\x01\x03\x71\x2e"),         /* BINPUT takes the STOP as its index */
      C("\x80\x05\x43\x01\x03\x72\x00\x00\x2e"), /* truncated LONG_BINPUT */
      C("\x80\x05\x8c\x05hello\x94\x2e"),        /* a str */
      C("\x80\x05\x4b\x01\x2e"),                 /* an int */
      C("\x80\x05\x43\x01\x03\x43\x01\x03\x2e"), /* two bytes objects */
      C("\x80\x05\x8c\x08"
        "builtins"
        "\x8c\x05"
        "bytes"
        "\x93\x97\x85\x52\x2e"), /* stub, nbuf 1 */
#undef C
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    pk = raw(cases[k].d, cases[k].n);
    ezi_unmarshalled u = un1(&pk, 0);
    if (!u.raw_pickle) fail_msg("case %zu wrongly recognised as bytes", k);
    assert_ptr_equal(u.payload, pk.p);
    assert_int_equal(u.payload_len, pk.n);
    free(pk.p);
  }
  pk = RAW("\x80\x05\x43\x01\x03\x94\x2e");
  expect_payload(&pk, 1);
  free(pk.p);
  pk = RAW("\x80\x05\x95\x05\x00\x00\x00\x00\x00\x00\x00\x43\x01\x03\x94\x2e");
  expect_payload(&pk, 1);
  free(pk.p);
  pk = RAW("\x80\x05\x95\x00\x00\x00\x00\x00\x00\x00\x00\x43\x01\x03\x94\x2e"); /* short FRAME */
  expect_payload(&pk, 1);
  free(pk.p);
  pk = RAW("\x80\x05\x4b\x01\x2e");
  expect_raw(&pk);
  free(pk.p);
}

static void test_stub_variants(void **state) {
  (void)state;
  static const uint8_t stub[] = EZI_PICKLE_BYTES_STUB;
  uint8_t *p = pat(9);
  /* nbuf 3 with the stub: not our form */
  {
    const uint8_t *bufs[3] = {stub, p, p};
    size_t lens[3] = {24, 9, 9};
    bb m = build(1, 3, bufs, lens);
    ezi_unmarshalled u;
    assert_int_equal(ezi_unmarshal(m.p, m.n, &u), 0);
    assert_true(u.raw_pickle);
    assert_int_equal(u.payload_len, 24);
    free(m.p);
  }
  /* one byte off anywhere in the stub -> raw */
  for (size_t i = 0; i < 24; i++) {
    uint8_t s2[24];
    memcpy(s2, stub, 24);
    s2[i] ^= 0x01;
    const uint8_t *bufs[2] = {s2, p};
    size_t lens[2] = {24, 9};
    bb m = build(1, 2, bufs, lens);
    ezi_unmarshalled u;
    assert_int_equal(ezi_unmarshal(m.p, m.n, &u), 0);
    if (!u.raw_pickle) fail_msg("stub with byte %zu changed accepted", i);
    free(m.p);
  }
  /* a shorter buffer 0 that is a prefix of the stub -> raw */
  {
    const uint8_t *bufs[2] = {stub, p};
    size_t lens[2] = {23, 9};
    bb m = build(1, 2, bufs, lens);
    ezi_unmarshalled u;
    assert_int_equal(ezi_unmarshal(m.p, m.n, &u), 0);
    assert_true(u.raw_pickle);
    free(m.p);
  }
  /* the real thing */
  {
    const uint8_t *bufs[2] = {stub, p};
    size_t lens[2] = {24, 9};
    bb m = build(1, 2, bufs, lens);
    ezi_unmarshalled u;
    assert_int_equal(ezi_unmarshal(m.p, m.n, &u), 0);
    assert_false(u.raw_pickle);
    assert_int_equal(u.payload_len, 9);
    assert_true(is_pat(u.payload, 9));
    uint8_t h[EZI_MARSHAL_BYTES_HDR];
    ezi_marshal_bytes_header(h, 1, 9);
    assert_memory_equal(h, m.p, sizeof h);
    free(m.p);
  }
  free(p);
}

static void test_null_args(void **state) {
  (void)state;
  ezi_unmarshalled u;
  uint64_t id;
  assert_int_equal(ezi_unmarshal(NULL, 100, &u), EZ_EPROTO);
  assert_int_equal(ezi_marshal_msg_id(NULL, 100, &id), EZ_EPROTO);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bytes_header_layout),
      cmocka_unit_test(test_roundtrip_sizes),
      cmocka_unit_test(test_msg_id),
      cmocka_unit_test(test_corpus),
      cmocka_unit_test(test_nbuf_bounds),
      cmocka_unit_test(test_length_overflow),
      cmocka_unit_test(test_multi_buffers),
      cmocka_unit_test(test_pickle_forms),
      cmocka_unit_test(test_raw_pickles),
      cmocka_unit_test(test_stub_variants),
      cmocka_unit_test(test_null_args),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
