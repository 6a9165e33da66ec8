/* TX_SHM: cmd, u64 msg_id, str shm_name. TX_TCP: cmd, u64 msg_id, u64 size, size bytes. X_RING
 * (ezmsg-c's extension): as TX_SHM, with the ring's name. X_WIN (ezmsg-c's too): cmd, u64 first
 * msg_id, u64 window, u64 byte budget. X_TCP (ours too): cmd, u32 size, size payload bytes. */
#include "proto/txframe.h"
#include "proto/shm.h"
#include "base/wire.h"

int ezi_tx_parse(const uint8_t *p, size_t len, ezi_tx_frame *f) {
  *f = (ezi_tx_frame){0};
  ezi_rd r;
  ezi_rd_init(&r, p, len, EZI_SHM_NAME_MAX);
  if (len >= 1 && p[0] == EZI_X_TCP) { /* no msg_id */
    if (ezi_rd_u8(&r, &f->cmd) && ezi_rd_skip(&r, 4)) {
      f->size = ezi_get_u32le(p + 1);
      if (f->size > EZI_MAX_TCP_MSG) return EZ_EMSGSIZE;
      f->body = r.p + r.pos;
      ezi_rd_skip(&r, (size_t)f->size);
    }
  } else if (ezi_rd_u8(&r, &f->cmd) && ezi_rd_u64(&r, &f->msg_id)) {
    if (f->cmd == EZI_TX_SHM || f->cmd == EZI_X_RING) {
      ezi_rd_str(&r, &f->name, &f->name_len);
      if (r.err) return EZ_EPROTO; /* not a name we could ever attach */
    } else if (f->cmd == EZI_X_WIN) {
      if (ezi_rd_u64(&r, &f->win_msgs)) ezi_rd_u64(&r, &f->win_bytes);
    } else if (f->cmd == EZI_TX_TCP) {
      if (ezi_rd_u64(&r, &f->size)) {
        if (f->size > EZI_MAX_TCP_MSG) return EZ_EMSGSIZE;
        f->body = r.p + r.pos;
        ezi_rd_skip(&r, (size_t)f->size);
      }
    } else {
      return EZ_EPROTO;
    }
  }
  int st = ezi_rd_status(&r);
  if (st == 1) f->used = r.pos;
  if (st == 0) {
    f->need = r.need;
    f->body = NULL;
  }
  return st;
}

size_t ezi_tx_frame_len(const uint8_t *p, size_t len) {
  uint64_t size = UINT64_MAX, hdr = 0;
  if (len >= 17 && p[0] == EZI_TX_TCP) {
    size = ezi_get_u64le(p + 9);
    hdr = 17;
  } else if (len >= 5 && p[0] == EZI_X_TCP) {
    size = ezi_get_u32le(p + 1);
    hdr = 5;
  }
  return size <= EZI_MAX_TCP_MSG ? (size_t)(size + hdr) : 0;
}

size_t ezi_tx_limit(const uint8_t *p, size_t len) {
  size_t limit = 65536 + EZI_TX_HDR_ROOM, whole = ezi_tx_frame_len(p, len);
  return whole > limit ? whole : limit;
}
