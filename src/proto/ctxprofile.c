/* X_CTX's encoding (ctxprofile.h). */
#include "proto/ctxprofile.h"

#include <string.h>

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int ezi_xctx_encode(ezi_buf *b, const char *uuid) {
  uint8_t f[1 + EZI_X_CTX_PAYLOAD] = {EZI_X_CTX};
  size_t k = 1;
  for (const char *p = uuid; *p && k < sizeof f; p++) {
    if (*p == '-') continue;
    int v = hexval(*p);
    if (v < 0) return EZ_EINVAL;
    f[k++] = (uint8_t)(0xf0 | v);
  }
  if (k != sizeof f || strlen(uuid) != 36) return EZ_EINVAL;
  return ezi_buf_put(b, f, sizeof f);
}

bool ezi_xctx_decode(const uint8_t *p, uint8_t id[EZI_CTXID_BYTES]) {
  for (size_t i = 0; i < EZI_X_CTX_PAYLOAD; i++)
    if ((p[i] & 0xf0) != 0xf0) return false;
  for (size_t i = 0; i < EZI_CTXID_BYTES; i++)
    id[i] = (uint8_t)(((p[2 * i] & 0x0f) << 4) | (p[2 * i + 1] & 0x0f));
  return true;
}
