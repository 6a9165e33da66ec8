/* The data frames a publisher sends a channel (TX_SHM, TX_TCP): a pure parser, shared by the
 * channel's link (chanlink.c) and its fuzz target. */
#ifndef EZI_TXFRAME_H
#define EZI_TXFRAME_H

#include <stddef.h>
#include <stdint.h>

#define EZI_MAX_TCP_MSG ((uint64_t)1 << 30) /* the largest TX_TCP message a channel accepts */
#define EZI_TX_HDR_ROOM 4096                /* input room for frame headers */

typedef struct ezi_tx_frame {
  uint8_t cmd;      /* EZI_TX_SHM, EZI_TX_TCP, EZI_X_RING, EZI_X_WIN or EZI_X_TCP */
  uint64_t msg_id;  /* (not in X_TCP: 0) */
  const char *name; /* TX_SHM: the segment name, X_RING: the ring's (a view, not NUL-terminated) */
  size_t name_len;
  /* TX_TCP: the marshalled message, `size` bytes; X_TCP: the payload (views) */
  const uint8_t *body;
  uint64_t size;
  uint64_t win_msgs, win_bytes; /* X_WIN: the window in messages, and its byte budget */
  size_t used;                  /* bytes the frame takes (complete) */
  size_t need;                  /* bytes needed in all (short) */
} ezi_tx_frame;

/* Parses one frame from p[0, len): 1 complete, 0 more bytes needed (f->need), EZ_EPROTO for an
 * unknown command or a segment name over 63 bytes, EZ_EMSGSIZE for a TX_TCP over
 * EZI_MAX_TCP_MSG. */
int ezi_tx_parse(const uint8_t *p, size_t len, ezi_tx_frame *f);

/* The whole length of a TX_TCP or X_TCP frame whose header is in p[0, len), or 0 (another
 * command, a header not complete yet, or a size over EZI_MAX_TCP_MSG, which ezi_tx_parse
 * refuses). */
size_t ezi_tx_frame_len(const uint8_t *p, size_t len);

/* How many bytes a reader should hold for the frame starting at p[0, len): room for headers, or a
 * whole TX_TCP frame once its header says how large it is (the buffer then grows only as the
 * bytes arrive). */
size_t ezi_tx_limit(const uint8_t *p, size_t len);

#endif
