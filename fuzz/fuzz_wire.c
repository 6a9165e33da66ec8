/* fuzz_wire: the incremental frame reader (ezi_rd) and the byte buffers (ezi_buf) of wire.h.
 *
 * Input: byte 0 picks the string limit, byte 1 the number of reads per frame (low 5 bits) and the
 * feeding step (high 3 bits); then one byte per read (low 2 bits: u8, u64, str, skip; for skip the
 * high 6 bits are the count); the rest is the byte stream. The stream is parsed as a sequence of
 * frames, each frame being that sequence of reads, in two ways:
 *  - all at once, and checked read by read against an independent reference parser;
 *  - as the library's readers do it: bytes arrive through a socketpair (ezi_buf_flush on one side,
 *    ezi_buf_fill with a growing limit on the other), the frame is re-parsed from the buffer head
 *    on each arrival until it is complete, then consumed.
 * Both must yield the same frames, values and errors; "need" must always promise more bytes than
 * were there; each complete frame re-encoded with ezi_buf_put_* must equal its bytes.
 * Also checks ezi_is_uuid and ezi_addr_parse against reference versions on the stream. */
#include "fuzz_common.h"
#include "base/wire.h"

#define CHECK(c)                                                                                   \
  do {                                                                                             \
    if (!(c)) fz_die("fuzz_wire: invariant failed: %s (line %d)", #c, __LINE__);                   \
  } while (0)

#define MAX_OPS 31
#define MAX_FRAMES 64

enum { OP_U8, OP_U64, OP_STR, OP_SKIP };

typedef struct val {
  uint64_t u; /* u8 / u64 value, str length, skip count */
  size_t off; /* str: offset of its bytes from the frame start */
} val;

typedef struct result {
  int status; /* 1 complete, 0 short, < 0 error */
  size_t pos, need;
  size_t nvals;
  val v[MAX_OPS];
} result;

static uint64_t le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

/* The reference: what the reads must give on p[0, len). */
static void ref_parse(const uint8_t *p, size_t len, size_t max_str, const uint8_t *ops, size_t nops,
                      result *out) {
  size_t pos = 0;
  out->nvals = 0;
  out->need = 0;
  for (size_t i = 0; i < nops; i++) {
    int kind = ops[i] & 3;
    size_t want = kind == OP_U8 ? 1 : kind == OP_SKIP ? (size_t)(ops[i] >> 2) : 8;
    if (len - pos < want) {
      out->status = 0;
      out->need = pos + want;
      out->pos = pos;
      return;
    }
    val v = {0, 0};
    if (kind == OP_U8)
      v.u = p[pos];
    else if (kind == OP_U64 || kind == OP_STR)
      v.u = le64(p + pos);
    else
      v.u = want;
    pos += want;
    if (kind == OP_STR) {
      if (v.u > max_str) {
        out->status = EZ_EMSGSIZE;
        out->pos = pos;
        return;
      }
      if (len - pos < v.u) {
        out->status = 0;
        out->need = pos + (size_t)v.u;
        out->pos = pos;
        return;
      }
      v.off = pos;
      pos += (size_t)v.u;
    }
    out->v[out->nvals++] = v;
  }
  out->status = 1;
  out->pos = pos;
}

/* The library: the same reads through ezi_rd, stopping at the first that fails. */
static void lib_parse(const uint8_t *p, size_t len, size_t max_str, const uint8_t *ops, size_t nops,
                      result *out) {
  ezi_rd r;
  ezi_rd_init(&r, p, len, max_str);
  out->nvals = 0;
  for (size_t i = 0; i < nops; i++) {
    int kind = ops[i] & 3;
    val v = {0, 0};
    bool ok;
    if (kind == OP_U8) {
      uint8_t b = 0;
      ok = ezi_rd_u8(&r, &b);
      v.u = b;
    } else if (kind == OP_U64) {
      ok = ezi_rd_u64(&r, &v.u);
    } else if (kind == OP_STR) {
      const char *s = NULL;
      size_t n = 0;
      ok = ezi_rd_str(&r, &s, &n);
      if (ok) {
        CHECK((const uint8_t *)s >= p && n <= len && (size_t)((const uint8_t *)s - p) <= len - n);
        v.u = n;
        v.off = (size_t)((const uint8_t *)s - p);
      }
    } else {
      ok = ezi_rd_skip(&r, (size_t)(ops[i] >> 2));
      v.u = ops[i] >> 2;
    }
    if (!ok) {
      /* A failed read leaves the reader failed: later reads fail too and change nothing. */
      size_t pos = r.pos, need = r.need;
      int err = r.err;
      uint8_t b;
      uint64_t u;
      CHECK(!ezi_rd_u8(&r, &b) && !ezi_rd_u64(&r, &u) && !ezi_rd_skip(&r, 0));
      CHECK(r.pos == pos && r.need == need && r.err == err);
      break;
    }
    out->v[out->nvals++] = v;
  }
  out->status = ezi_rd_status(&r);
  out->pos = r.pos;
  out->need = r.need;
  CHECK(r.pos <= len);
  if (out->status == 0) CHECK(r.need > len); /* short: more bytes than there are */
}

static bool same(const result *a, const result *b) {
  if (a->status != b->status || a->nvals != b->nvals) return false;
  if (a->status == 0 && a->need != b->need) return false;
  if (a->status == 1 && a->pos != b->pos) return false;
  for (size_t i = 0; i < a->nvals; i++)
    if (a->v[i].u != b->v[i].u || a->v[i].off != b->v[i].off) return false;
  return true;
}

/* Re-encodes a complete frame with the ezi_buf writers; must give back its bytes. */
static void check_encode(const uint8_t *p, const uint8_t *ops, size_t nops, const result *res) {
  ezi_buf b = {0};
  size_t k = 0;
  for (size_t i = 0; i < nops; i++) {
    const val *v = &res->v[k++];
    switch (ops[i] & 3) {
    case OP_U8: CHECK(ezi_buf_put_u8(&b, (uint8_t)v->u) == 0); break;
    case OP_U64: CHECK(ezi_buf_put_u64(&b, v->u) == 0); break;
    case OP_STR: CHECK(ezi_buf_put_str(&b, (const char *)p + v->off, (size_t)v->u) == 0); break;
    default: CHECK(ezi_buf_put(&b, p + (b.len - b.off), (size_t)v->u) == 0); break;
    }
  }
  CHECK(ezi_buf_pending(&b) == res->pos);
  CHECK(res->pos == 0 || memcmp(ezi_buf_head(&b), p, res->pos) == 0);
  ezi_buf_free(&b);
}

static bool ref_uuid(const uint8_t *s, size_t n) {
  if (n != 36) return false;
  for (size_t i = 0; i < n; i++) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash != (s[i] == '-')) return false;
    if (!dash && !((s[i] >= '0' && s[i] <= '9') || ((s[i] | 0x20) >= 'a' && (s[i] | 0x20) <= 'f')))
      return false;
  }
  return true;
}

static void check_misc(const uint8_t *d, size_t n) {
  CHECK(ezi_is_uuid((const char *)d, n) == ref_uuid(d, n));
  if (n >= 36) CHECK(ezi_is_uuid((const char *)d, 36) == ref_uuid(d, 36));
  if (n > 400) return;
  char s[401], host[256];
  memcpy(s, d, n);
  s[n] = 0;
  uint16_t port = 0;
  if (ezi_addr_parse(s, host, &port) == 0) {
    const char *colon = strrchr(s, ':');
    CHECK(colon && (size_t)(colon - s) < 256 && strlen(host) == (size_t)(colon - s));
    CHECK(strncmp(host, s, (size_t)(colon - s)) == 0);
    CHECK((long)port == strtol(colon + 1, NULL, 10));
  }
  char out[300];
  ezi_addr_resolve(s, out);
  CHECK(strlen(out) < 300);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const size_t limits[8] = {0, 1, 8, 36, 63, 64, EZ_MAX_CONTROL_STR, UINT32_MAX};
  static const size_t steps[8] = {1, 2, 3, 7, 16, 64, 1000, 100000};
  if (size < 2) return 0;
  check_misc(data, size);
  size_t max_str = limits[data[0] & 7];
  size_t nops = data[1] & 31, step = steps[data[1] >> 5];
  if (nops == 0 || size < 2 + nops) return 0;
  const uint8_t *ops = data + 2, *stream = data + 2 + nops;
  size_t len = size - 2 - nops;

  /* All at once, against the reference. */
  result want[MAX_FRAMES];
  size_t nframes = 0, off = 0;
  while (nframes < MAX_FRAMES) {
    result ref, lib;
    ref_parse(stream + off, len - off, max_str, ops, nops, &ref);
    lib_parse(stream + off, len - off, max_str, ops, nops, &lib);
    CHECK(same(&ref, &lib));
    want[nframes++] = lib;
    if (lib.status != 1) break;
    check_encode(stream + off, ops, nops, &lib);
    if (lib.pos == 0) break; /* an empty frame (zero-length skips only): would loop forever */
    off += lib.pos;
  }

  /* Incrementally, through a socketpair and the ezi_buf I/O functions. */
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv)) return 0;
  ezi_buf out = {0}, in = {0};
  CHECK(ezi_buf_put(&out, stream, len) == 0);
  size_t got = 0, frame = 0, sent = 0;
  bool done = false;
  while (!done) {
    /* Parse every complete frame now buffered. */
    for (;;) {
      result lib;
      lib_parse(ezi_buf_head(&in), ezi_buf_pending(&in), max_str, ops, nops, &lib);
      const result *w = &want[frame];
      if (lib.status == 0) {
        /* Not all here yet: the frame ends later (or fails later) in the full stream. */
        CHECK(w->status != 1 || w->pos > ezi_buf_pending(&in));
        CHECK(w->status != 1 || lib.need <= w->pos);
        break;
      }
      CHECK(same(&lib, w));
      if (lib.status < 0 || lib.pos == 0 || ++frame == nframes) {
        done = true;
        break;
      }
      ezi_buf_consume(&in, lib.pos);
      got += lib.pos;
    }
    if (done) break;
    if (sent == len && ezi_buf_pending(&out) == 0 && got + ezi_buf_pending(&in) == len) {
      CHECK(want[frame].status == 0); /* stream over, frame incomplete: so was it all at once */
      break;
    }
    /* Send and receive up to `step` more bytes. */
    if (ezi_buf_pending(&out)) CHECK(ezi_buf_flush(&out, sv[0]) == 0);
    sent = len - ezi_buf_pending(&out);
    size_t before = ezi_buf_pending(&in);
    long n = ezi_buf_fill(&in, sv[1], before + step);
    CHECK(n >= 0 && (size_t)n <= step && ezi_buf_pending(&in) == before + (size_t)n);
    if (n == 0) CHECK(got + before == sent); /* would block: everything sent was read */
  }
  ezi_buf_free(&out);
  ezi_buf_free(&in);
  close(sv[0]);
  close(sv[1]);
  return 0;
}

void fuzz_teardown(void) {}
