/* Little-endian u64 (and u32) loads and stores at any alignment: the byte order of every integer on
 * the ezmsg wire and in its shared memory. memcpy of 8 bytes compiles to one move (the byte-by-byte
 * loops these replace did not: ~30 instructions per integer, 4-5 integers per message). */
#ifndef EZI_LE_H
#define EZI_LE_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t ezi_get_u64le(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, sizeof v);
  return le64toh(v);
}

/* The same for memory another process may be writing (shared memory): the value is read once
 * here and is, from then on, only the local one (the empty asm hides where it came from, so the
 * compiler cannot read it again from memory instead of keeping it). Check and use only that. */
static inline uint64_t ezi_get_u64le_once(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, sizeof v);
  __asm__("" : "+r"(v));
  return le64toh(v);
}

static inline uint32_t ezi_get_u32le_once(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, sizeof v);
  __asm__("" : "+r"(v));
  return le32toh(v);
}

static inline void ezi_put_u64le(uint8_t *p, uint64_t v) {
  v = htole64(v);
  memcpy(p, &v, sizeof v);
}

static inline uint32_t ezi_get_u32le(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, sizeof v);
  return le32toh(v);
}

static inline void ezi_put_u32le(uint8_t *p, uint32_t v) {
  v = htole32(v);
  memcpy(p, &v, sizeof v);
}

#endif
