/* Marshalled messages: "EZ" framing and the bytes pickle forms (see marshal.h). */
#include "proto/marshal.h"
#include "base/internal.h"

#include <string.h>

/* Pickle opcodes we recognise. */
enum {
  OP_PROTO = 0x80,
  OP_FRAME = 0x95,
  OP_SHORT_BINBYTES = 0x43, /* 'C', u8 length */
  OP_BINBYTES = 0x42,       /* 'B', u32 length */
  OP_BINBYTES8 = 0x8e,      /* u64 length */
  OP_BYTEARRAY8 = 0x96,     /* u64 length */
  OP_MEMOIZE = 0x94,
  OP_BINPUT = 0x71,      /* 'q', u8 memo index (protocol <= 3) */
  OP_LONG_BINPUT = 0x72, /* 'r', u32 memo index */
  OP_STOP = 0x2e,
};

static const uint8_t k_stub[EZI_PICKLE_BYTES_STUB_LEN] = EZI_PICKLE_BYTES_STUB;
_Static_assert(sizeof(EZI_PICKLE_BYTES_STUB) - 1 == EZI_PICKLE_BYTES_STUB_LEN, "stub length");
_Static_assert(EZI_MARSHAL_BYTES_HDR == 58, "bytes header length");

void ezi_marshal_bytes_header(uint8_t *dst, uint64_t msg_id, uint64_t payload_len) {
  dst[0] = 'E';
  dst[1] = 'Z';
  ezi_put_u64le(dst + 2, msg_id);
  ezi_put_u64le(dst + 10, 2);
  ezi_put_u64le(dst + 18, EZI_PICKLE_BYTES_STUB_LEN);
  ezi_put_u64le(dst + 26, payload_len);
  memcpy(dst + 34, k_stub, EZI_PICKLE_BYTES_STUB_LEN);
}

int ezi_marshal_msg_id(const uint8_t *p, size_t len, uint64_t *msg_id) {
  if (!p || len < 10 || p[0] != 'E' || p[1] != 'Z') return EZ_EPROTO;
  *msg_id = ezi_get_u64le(p + 2);
  return 0;
}

/* Everything below may read memory another process writes at the same time (a publisher's
 * shared-memory segment): every byte and length is read once into a local, which alone is then
 * checked and used (ezi_get_u64le_once). Reading a length again after its check let a publisher
 * flip it in between and make us hand out megabytes beyond the message. */

/* Reads an n-byte (n <= 8) little-endian unsigned integer at q[*pos] if it fits in len. */
static bool read_uint(const uint8_t *q, size_t len, size_t *pos, unsigned n, uint64_t *v) {
  if (len - *pos < n) return false;
  uint8_t b[8] = {0};
  memcpy(b, q + *pos, n);
  *pos += n;
  *v = ezi_get_u64le_once(b);
  return true;
}

/* One byte of q, read once. */
static uint8_t byte_once(const uint8_t *q, size_t pos) {
  uint8_t b = q[pos];
  __asm__("" : "+r"(b));
  return b;
}

/* Recognises a CPython pickle of a bytes/bytearray object (grammar in marshal.h). On success sets
 * *data / *dlen to the object's bytes inside q. */
static bool pickled_bytes(const uint8_t *q, size_t len, const uint8_t **data, size_t *dlen) {
  size_t pos = 0;
  uint64_t v;
  if (len < 2 || byte_once(q, 0) != OP_PROTO) return false;
  uint8_t proto = byte_once(q, 1);
  if (proto < 3 || proto > 5) return false;
  pos = 2;
  uint8_t op = pos < len ? byte_once(q, pos) : 0;
  if (op == OP_FRAME) {
    pos++;
    if (!read_uint(q, len, &pos, 8, &v) || v > len - pos) return false;
    op = pos < len ? byte_once(q, pos) : 0;
  }
  if (pos >= len) return false;
  pos++;
  unsigned width;
  switch (op) {
  case OP_SHORT_BINBYTES: width = 1; break;
  case OP_BINBYTES: width = 4; break;
  case OP_BINBYTES8:
  case OP_BYTEARRAY8: width = 8; break;
  default: return false;
  }
  if (!read_uint(q, len, &pos, width, &v) || v > len - pos) return false;
  const uint8_t *body = q + pos;
  size_t body_len = (size_t)v;
  pos += body_len;
  op = pos < len ? byte_once(q, pos) : 0;
  if (pos < len) {
    uint64_t idx;
    bool memo = true;
    switch (op) {
    case OP_MEMOIZE: pos++; break;
    case OP_BINPUT:
      pos++;
      if (!read_uint(q, len, &pos, 1, &idx)) return false;
      break;
    case OP_LONG_BINPUT:
      pos++;
      if (!read_uint(q, len, &pos, 4, &idx)) return false;
      break;
    default: memo = false; break;
    }
    if (memo) op = pos < len ? byte_once(q, pos) : 0;
  }
  if (pos >= len || op != OP_STOP || pos + 1 != len) return false;
  *data = body;
  *dlen = body_len;
  return true;
}

int ezi_unmarshal(const uint8_t *p, size_t len, ezi_unmarshalled *out) {
  if (!p || !out || len < EZI_MARSHAL_FIXED || byte_once(p, 0) != 'E' || byte_once(p, 1) != 'Z')
    return EZ_EPROTO;
  uint64_t nbuf = ezi_get_u64le_once(p + 10);
  size_t rem = len - EZI_MARSHAL_FIXED;
  if (nbuf == 0 || nbuf > rem / 8) return EZ_EPROTO;
  rem -= (size_t)nbuf * 8; /* no overflow: nbuf * 8 <= rem */
  const uint8_t *lens = p + EZI_MARSHAL_FIXED;
  uint64_t l0 = 0, l1 = 0; /* the first two lengths, as checked */
  for (uint64_t i = 0; i < nbuf; i++) {
    uint64_t l = ezi_get_u64le_once(lens + 8 * i);
    if (l > rem) return EZ_EPROTO;
    rem -= (size_t)l;
    if (i == 0) l0 = l;
    if (i == 1) l1 = l;
  }
  memset(out, 0, sizeof *out);
  out->msg_id = ezi_get_u64le_once(p + 2);
  out->nbuf = nbuf;
  out->size = len - rem;
  out->lens = lens;
  out->bufs = lens + nbuf * 8;

  const uint8_t *b0 = out->bufs;
  size_t b0_len = (size_t)l0;
  if (nbuf == 2 && b0_len == EZI_PICKLE_BYTES_STUB_LEN &&
      memcmp(b0, k_stub, EZI_PICKLE_BYTES_STUB_LEN) == 0) {
    out->payload = b0 + b0_len;
    out->payload_len = (size_t)l1;
    return 0;
  }
  if (nbuf == 1 && pickled_bytes(b0, b0_len, &out->payload, &out->payload_len)) return 0;
  out->raw_pickle = true;
  out->payload = b0;
  out->payload_len = b0_len;
  return 0;
}

int ezi_unmarshal_bufs(const ezi_unmarshalled *u, ez_iov *iov) {
  const uint8_t *b = u->bufs, *end = u->lens + (u->size - EZI_MARSHAL_FIXED);
  for (uint64_t i = 0; i < u->nbuf; i++) {
    uint64_t l = ezi_get_u64le_once(u->lens + 8 * i);
    if (l > (uint64_t)(end - b)) return EZ_EPROTO; /* not what ezi_unmarshal checked */
    iov[i] = (ez_iov){b, (size_t)l};
    b += l;
  }
  return 0;
}

void ezi_unmarshal_buf(const ezi_unmarshalled *u, uint64_t i, const uint8_t **data, size_t *len) {
  const uint8_t *b = u->bufs;
  for (uint64_t k = 0; k < i; k++)
    b += ezi_get_u64le(u->lens + 8 * k);
  *data = b;
  *len = (size_t)ezi_get_u64le(u->lens + 8 * i);
}
