/* The graph server's request framing: which arguments follow which command (protocol.md). */
#include "gsparse.h"
#include "gsregistry.h"
#include "wire.h"

#include <string.h>

/* X_SUB_INFO's payload: the bytes up to '\n' (gsregistry.h). */
static int sub_info(const uint8_t *p, size_t len, ezi_gs_req *req) {
  size_t room = len - 1 < EZI_SUBINFO_MAX ? len - 1 : EZI_SUBINFO_MAX;
  const uint8_t *nl = memchr(p + 1, '\n', room);
  if (!nl) {
    if (len - 1 >= EZI_SUBINFO_MAX) return EZ_EMSGSIZE;
    req->need = len + 1;
    return 0;
  }
  req->a = (const char *)p + 1;
  req->na = (size_t)(nl - (p + 1));
  req->used = req->na + 2;
  return 1;
}

int ezi_gs_parse(ezi_gs_phase phase, const uint8_t *p, size_t len, ezi_gs_req *req) {
  ezi_rd r;
  ezi_rd_init(&r, p, len, EZ_MAX_CONTROL_STR);
  *req = (ezi_gs_req){0};
  if (phase == EZI_GS_PUB_ADDR) {
    ezi_rd_str(&r, &req->a, &req->na);
  } else if (phase == EZI_GS_CLIENT) {
    if (len > 0 && p[0] == EZI_X_SUB_INFO) {
      req->cmd = EZI_X_SUB_INFO;
      return sub_info(p, len, req);
    }
    if (ezi_rd_u8(&r, &req->cmd) && req->cmd == EZI_PROFILE_DATA) ezi_rd_str(&r, &req->a, &req->na);
  } else if (ezi_rd_u8(&r, &req->cmd)) {
    switch (req->cmd) {
    case EZI_PUBLISH:
    case EZI_SUBSCRIBE:
    case EZI_CHANNEL:
    case EZI_SHM_ATTACH: ezi_rd_str(&r, &req->a, &req->na); break;
    case EZI_CONNECT:
    case EZI_DISCONNECT:
      if (ezi_rd_str(&r, &req->a, &req->na)) ezi_rd_str(&r, &req->b, &req->nb);
      break;
    case EZI_SHM_CREATE:
      if (ezi_rd_u64(&r, &req->u1)) ezi_rd_u64(&r, &req->u2);
      break;
    case EZI_PROFILE: ezi_rd_u64(&r, &req->u1); break;
    default: break;
    }
  }
  int st = ezi_rd_status(&r);
  if (st == 1) req->used = r.pos;
  if (st == 0) req->need = r.need;
  return st;
}
