/* Marshalled messages: the "EZ" framing shared by the TCP and shared-memory transports, and the
 * pickle forms a raw byte payload takes between C and Python ezmsg. Internal; not installed.
 *
 * Layout (all integers u64 little-endian):
 *   "EZ", msg_id, nbuf, nbuf x len_i, then the nbuf buffers back to back.
 * Python ezmsg puts a protocol-5 pickle in buffer 0 and the out-of-band buffers after it.
 *
 * C -> Python, bytes payload: nbuf = 2, buffer 0 = EZI_PICKLE_BYTES_STUB (a 24-byte pickle that
 * means `bytes(next out-of-band buffer)`), buffer 1 = the payload. Python receives `bytes`.
 * Python -> C: a Python bytes/bytearray is pickled in band (nbuf = 1); ezi_unmarshal finds the
 * payload inside the pickle. Any other pickle is handed to the user as raw buffers.
 *
 * Nothing here allocates; every function is thread-safe (no shared state). The readers may read
 * shared memory a publisher writes meanwhile: each reads every byte and length once, then checks
 * and uses only that. */
#ifndef EZI_MARSHAL_H
#define EZI_MARSHAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ezmsg/ezmsg.h"
#include "base/le.h"

/* "EZ" + u64 msg_id + u64 nbuf: the fixed part before the buffer lengths. */
#define EZI_MARSHAL_FIXED 18
/* Length of the pickle stub below. */
#define EZI_PICKLE_BYTES_STUB_LEN 24
/* Protocol-5 pickle of `bytes(<next out-of-band buffer>)`:
 * PROTO 5, SHORT_BINUNICODE "builtins", SHORT_BINUNICODE "bytes", STACK_GLOBAL, NEXT_BUFFER,
 * TUPLE1, REDUCE, STOP. */
#define EZI_PICKLE_BYTES_STUB                                                                      \
  "\x80\x05\x8c\x08"                                                                               \
  "builtins"                                                                                       \
  "\x8c\x05"                                                                                       \
  "bytes"                                                                                          \
  "\x93\x97\x85\x52\x2e"
/* Bytes before the payload of a C bytes message: "EZ" (2) + msg_id (8) + nbuf (8) + two lengths
 * (16) + stub (24) = 58. The whole message is EZI_MARSHAL_BYTES_HDR + payload_len bytes. */
#define EZI_MARSHAL_BYTES_HDR (EZI_MARSHAL_FIXED + 16 + EZI_PICKLE_BYTES_STUB_LEN)

/* Writes the EZI_MARSHAL_BYTES_HDR bytes that precede a bytes payload of `payload_len` bytes
 * (preamble, msg_id, nbuf = 2, lengths {24, payload_len}, pickle stub) into dst, which must have
 * room for EZI_MARSHAL_BYTES_HDR bytes. The caller puts the payload right after them. */
void ezi_marshal_bytes_header(uint8_t *dst, uint64_t msg_id, uint64_t payload_len);

/* Reads msg_id from the first `len` bytes of a marshalled message. Returns 0, or EZ_EPROTO if
 * len < 10 or the buffer does not start with "EZ" (e.g. an uninitialised shared-memory block). */
int ezi_marshal_msg_id(const uint8_t *p, size_t len, uint64_t *msg_id);

/* A validated marshalled message. Every pointer points into the caller's buffer.
 * - payload / payload_len: the user payload. raw_pickle == false: the bytes (or bytearray) the
 *   sender sent. raw_pickle == true: an opaque pickle; payload is buffer 0 and the other buffers
 *   are available through ezi_unmarshal_buf.
 * - size: the total length of the message (header + buffers), <= the len given to ezi_unmarshal.
 * - lens: the nbuf little-endian u64 lengths inside the message; bufs: the start of buffer 0. */
typedef struct ezi_unmarshalled {
  uint64_t msg_id;
  uint64_t nbuf; /* >= 1 */
  size_t size;
  const uint8_t *payload;
  size_t payload_len;
  bool raw_pickle;
  const uint8_t *lens;
  const uint8_t *bufs;
} ezi_unmarshalled;

/* Validates the marshalled message at the start of p[0, len) without allocating, and recognises its
 * payload. The message may be followed by unrelated bytes (a shared-memory data block is larger
 * than the message it holds): it must fit in len, out->size tells its exact length, and a caller
 * that needs an exact fit (TCP) compares out->size with len.
 * Framing checks (EZ_EPROTO on failure): len >= 18, "EZ" preamble, 1 <= nbuf <= (len - 18) / 8,
 * and each len_i no larger than what remains (overflow-safe).
 * Payload recognition:
 *  (a) nbuf == 2 and buffer 0 == EZI_PICKLE_BYTES_STUB -> payload = buffer 1;
 *  (b) nbuf == 1 and buffer 0 is exactly a pickle of bytes or bytearray as CPython 3 writes it:
 *      PROTO 3..5, optional FRAME (u64 length <= what follows), one of SHORT_BINBYTES (u8 len),
 *      BINBYTES (u32 len), BINBYTES8 (u64 len), BYTEARRAY8 (u64 len) and the payload, an optional
 *      memo opcode (MEMOIZE; BINPUT u8 or LONG_BINPUT u32 as protocol 3 writes), STOP, and nothing
 *      after it -> payload = the bytes inside the pickle;
 *  (c) anything else -> raw_pickle = true, payload = buffer 0.
 * Returns 0 or EZ_EPROTO (then *out is unspecified). */
int ezi_unmarshal(const uint8_t *p, size_t len, ezi_unmarshalled *out);

/* All the u->nbuf buffers of a message validated by ezi_unmarshal, in one pass (O(nbuf): a
 * message of 100 000 buffers is one walk over its lengths, not one per buffer), into iov[0,
 * nbuf). Each length is read once and checked again against the message's size: in shared
 * memory a publisher may have changed them since ezi_unmarshal, and then this returns EZ_EPROTO
 * (iov partly written) instead of pointing beyond the message. 0 otherwise. */
int ezi_unmarshal_bufs(const ezi_unmarshalled *u, ez_iov *iov);

/* Buffer i (< u->nbuf) of a message validated by ezi_unmarshal, from a buffer nobody else
 * writes (tests, fuzzing). O(i): for all of them, ezi_unmarshal_bufs. */
void ezi_unmarshal_buf(const ezi_unmarshalled *u, uint64_t i, const uint8_t **data, size_t *len);

#endif
