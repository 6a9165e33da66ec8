/* The graph server's request framing: which arguments follow which command (protocol.md, and
 * docs/protocol39.md for the released dialect's). */
#include "proto/gsparse.h"
#include "proto/ctxprofile.h"
#include "proto/gsregistry.h"
#include "base/wire.h"

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

/* A payload: u64 size, then that many bytes (at most max). */
static void rd_payload(ezi_rd *r, ezi_gs_req *req, size_t max) {
  uint64_t n;
  if (!ezi_rd_u64(r, &n)) return;
  if (n > max) {
    r->err = EZ_EMSGSIZE;
    return;
  }
  if (ezi_rd_short(r, (size_t)n)) return;
  req->pl = r->p + r->pos;
  req->npl = (size_t)n;
  r->pos += (size_t)n;
}

static void rd_two(ezi_rd *r, ezi_gs_req *req) {
  if (ezi_rd_str(r, &req->a, &req->na)) ezi_rd_str(r, &req->b, &req->nb);
}

static void command(ezi_rd *r, ezi_gs_req *req) {
  switch (req->cmd) {
  case EZI_PUBLISH:
  case EZI_SUBSCRIBE:
  case EZI_CHANNEL:
  case EZI_SHM_ATTACH:
  case EZI_SESSION_SETTINGS_SUBSCRIBE:
  case EZI_SESSION_TOPOLOGY_SUBSCRIBE: ezi_rd_str(r, &req->a, &req->na); break;
  case EZI_CONNECT:
  case EZI_DISCONNECT: rd_two(r, req); break;
  case EZI_SHM_CREATE:
    if (ezi_rd_u64(r, &req->u1)) ezi_rd_u64(r, &req->u2);
    break;
  case EZI_PROFILE: ezi_rd_u64(r, &req->u1); break;
  case EZI_SESSION_PROFILING_SUBSCRIBE: rd_payload(r, req, EZI_GS_MAX_CONTROL_PAYLOAD); break;
  default: break;
  }
}

static void session(ezi_rd *r, ezi_gs_req *req) {
  switch (req->cmd) {
  case EZI_SESSION_CONNECT:
  case EZI_SESSION_DISCONNECT: rd_two(r, req); break;
  case EZI_SESSION_REGISTER: rd_payload(r, req, EZI_GS_MAX_PAYLOAD); break;
  case EZI_SESSION_SETTINGS_EVENTS: ezi_rd_str(r, &req->a, &req->na); break;
  case EZI_SESSION_PROCESS_REQUEST:
    if (ezi_rd_str(r, &req->a, &req->na) && ezi_rd_str(r, &req->b, &req->nb) &&
        ezi_rd_str(r, &req->c, &req->nc))
      rd_payload(r, req, EZI_GS_MAX_PAYLOAD);
    break;
  default: break; /* SESSION_CLEAR, SESSION_SNAPSHOT, SESSION_SETTINGS_SNAPSHOT: no arguments */
  }
}

static void process(ezi_rd *r, ezi_gs_req *req) {
  switch (req->cmd) {
  case EZI_PROCESS_REGISTER:
  case EZI_PROCESS_UPDATE_OWNERSHIP:
  case EZI_PROCESS_SETTINGS_UPDATE:
  case EZI_PROCESS_PROFILING_TRACE_UPDATE:
  case EZI_PROCESS_ROUTE_RESPONSE: rd_payload(r, req, EZI_GS_MAX_PAYLOAD); break;
  default: break;
  }
}

int ezi_gs_parse(ezi_gs_phase phase, const uint8_t *p, size_t len, ezi_gs_req *req) {
  ezi_rd r;
  ezi_rd_init(&r, p, len, EZ_MAX_CONTROL_STR);
  *req = (ezi_gs_req){0};
  if (phase == EZI_GS_PUB_ADDR) {
    ezi_rd_str(&r, &req->a, &req->na);
  } else if (phase == EZI_GS_CLIENT && len > 0 && p[0] == EZI_X_SUB_INFO) {
    req->cmd = EZI_X_SUB_INFO;
    return sub_info(p, len, req);
  } else if (ezi_rd_u8(&r, &req->cmd)) {
    switch (phase) {
    case EZI_GS_CLIENT:
      if (req->cmd == EZI_PROFILE_DATA || req->cmd == EZI_X_PROFILE_PART) {
        ezi_rd_str(&r, &req->a, &req->na);
      } else if (req->cmd == EZI_X_CTX && !ezi_rd_short(&r, EZI_X_CTX_PAYLOAD)) {
        req->pl = p + r.pos;
        req->npl = EZI_X_CTX_PAYLOAD;
        r.pos += EZI_X_CTX_PAYLOAD;
      }
      break;
    case EZI_GS_SESSION: session(&r, req); break;
    case EZI_GS_PROCESS: process(&r, req); break;
    default: command(&r, req); break;
    }
  }
  int st = ezi_rd_status(&r);
  if (st == 1) req->used = r.pos;
  if (st == 0) req->need = r.need;
  return st;
}
