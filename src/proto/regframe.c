/* The graph server's answer to CHANNEL (see regframe.h). */
#include "proto/regframe.h"
#include "base/internal.h"
#include "base/wire.h"

int ezi_reg_parse(const uint8_t *p, size_t len, ezi_reg_answer *a) {
  *a = (ezi_reg_answer){0};
  ezi_rd r;
  ezi_rd_init(&r, p, len, EZI_REG_MAX_STR);
  const char *id = NULL;
  size_t nid = 0;
  uint8_t cmd = 0;
  bool got_cmd = false;
  if (ezi_rd_str(&r, &a->version, &a->version_len) && (got_cmd = ezi_rd_u8(&r, &cmd)) &&
      cmd == EZI_COMPLETE && ezi_rd_str(&r, &id, &nid))
    ezi_rd_str(&r, &a->addr, &a->addr_len);
  int st = ezi_rd_status(&r);
  if (st < 0 || (got_cmd && cmd != EZI_COMPLETE) || (id && !ezi_is_uuid(id, nid))) {
    *a = (ezi_reg_answer){0};
    return EZ_EPROTO;
  }
  if (st == 0) return 0;
  a->id = id; /* st > 0: all four were read */
  a->used = r.pos;
  return 1;
}

int ezi_reg_hangup(const uint8_t *p, size_t len) {
  ezi_rd r;
  ezi_rd_init(&r, p, len, EZI_REG_MAX_STR);
  const char *ver;
  size_t n;
  uint8_t cmd;
  if (!ezi_rd_str(&r, &ver, &n)) return EZ_EREFUSED;
  if (!ezi_rd_u8(&r, &cmd)) return EZ_ENOENT;
  return EZ_ECONNLOST;
}
