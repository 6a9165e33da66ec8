/* A channel's link to a publisher in another process: the handshake (CHANNEL, shm name, SHM_OK or
 * SHM_ATTACH_FAILED and pid, COMPLETE and num_buffers), then TX_SHM / TX_TCP frames in and RX_ACKs
 * out (and ezmsg-c's extensions: X_HELLO / X_RING for a notice ring, X_WIN_ASK / X_WIN for a
 * larger TCP window). Everything here runs on the I/O thread and never waits for the publisher: two
 * processes that subscribe to each other at the same moment must not wait on each other's I/O
 * threads. Nor for the graph server: a segment is attached (SHM_ATTACH) asynchronously, and the
 * link stops reading from its publisher until that is done. */
#include "link/chanlink.h"
#include "chan/notices.h"
#include "rx/ringchan.h"
#include "rx/tcpring.h"
#include "proto/dialect.h"
#include "base/rxbudget.h"
#include "base/shmguard.h"
#include "proto/txframe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- remote link --------------------------------------------------------------------------- */

void ezi_chan_link_close(chan *c) {
  if (c->hs_timer) ezi_loop_cancel(c->ctx->loop, c->hs_timer);
  c->hs_timer = 0;
  if (c->frame_timer) ezi_loop_cancel(c->ctx->loop, c->frame_timer);
  c->frame_timer = 0;
  c->frame_since = 0;
  ezi_attach_cancel(c->attaching);
  c->attaching = NULL;
  if (c->pw.fd < 0) return;
  ezi_loop_del(&c->pw);
  ezi_outbox_close(c->ctx, &c->acks);
  close(c->pw.fd);
  c->pw.fd = -1;
  if (c->cur) { /* the mode reads into buffers of its own: their messages may still be held */
    c->rx->link_closed(c);
  } else {
    ezi_buf_free(&c->pin);
    ezi_rx_give(&c->rx_bytes, c->pin_acct);
    c->pin_acct = 0;
  }
  ezi_chan_buf_free(c, c->big.buf, c->big.cap); /* a message cut short */
  c->big.buf = NULL;
}

static void attached(void *arg, int rc, ezi_seg *seg);

/* The handshake's attach gives up early enough to answer SHM_ATTACH_FAILED (the publisher then
 * sends over TCP) before the handshake's own deadline, EZ_DEFAULT_TIMEOUT_MS. */
#define EZI_HS_ATTACH_MS 2000

/* Starts attaching segment `name` (n bytes) and pauses reading until it is done (`attached`).
 * 0, or an error (EZ_EPROTO for a bad name). Not even a hang-up is watched for meanwhile: what
 * the publisher sent before it left is still read once the segment is mapped. */
static int attach(chan *c, const char *name, size_t n) {
  /* (A NUL inside would attach a shorter name than the frame's, which then never matches.) */
  if (!n || n > EZI_SHM_NAME_MAX || memchr(name, 0, n)) return EZ_EPROTO;
  memcpy(c->attach_name, name, n);
  c->attach_name[n] = 0;
  int ms = c->state == CH_CONNECTING ? EZI_HS_ATTACH_MS : EZ_DEFAULT_TIMEOUT_MS;
  int rc = ezi_attach_start(c->ctx, c->attach_name, ms, attached, c, &c->attaching);
  if (!rc) ezi_outbox_set_events(&c->acks, 0);
  return rc;
}

/* A message names a segment other than the one mapped (the publisher grew its buffers): 0 once
 * it is mapped, else 0 after starting to attach it (the frame waits in c->pin), or an error. */
static int need_segment(chan *c, const char *name, size_t n) {
  if (c->seg && strlen(c->seg->shm.name) == n && !memcmp(c->seg->shm.name, name, n)) return 0;
  return attach(c, name, n);
}

/* The handshake's answer to the segment's name: SHM_OK if it is mapped, and our pid. */
static void answer_name(chan *c) {
  uint8_t b[9] = {c->seg ? EZI_SHM_OK : EZI_SHM_ATTACH_FAILED};
  ezi_put_u64le(b + 1, (uint64_t)c->ctx->pid);
  ezi_outbox_put(c->ctx, &c->acks, b, 9);
}

/* c->pin holds the start of a TX_TCP frame not complete yet: if its message is large, its body
 * goes to a buffer of its own from here on (c->big; read by big_fill), so that it is neither
 * gathered in `pin` nor copied out of it. The buffer grows with what arrives (twice that plus
 * 1 MiB at first, then doubling, up to the message's size): a header alone never allocates the
 * size it announces, and a peer that sends slowly, or stops, holds only what it sent (counted,
 * rxbudget.h). A spare buffer of the message's size is taken whole. 0, EZ_ENOMEM or EZ_EMSGSIZE
 * (beyond the link's or the process's limit). */
static int big_start(chan *c) {
  const uint8_t *p = ezi_buf_head(&c->pin);
  size_t len = ezi_buf_pending(&c->pin), hl = 17; /* u8 TX_TCP, u64 msg_id, u64 size */
  if (len < hl || p[0] != EZI_TX_TCP || !ezi_tx_frame_len(p, len)) return 0;
  uint64_t size = ezi_get_u64le(p + 9);
  if (size < EZI_DIRECT_READ_MIN || len - hl >= size) return 0;
  size_t have = len - hl, want = 2 * have + ((size_t)1 << 20), cap;
  if (want > size) want = (size_t)size;
  int err;
  uint8_t *b = ezi_chan_buf_take(c, want, &cap, &err);
  if (!b) return err;
  memcpy(b, p + hl, have);
  c->big.buf = b;
  c->big.cap = cap;
  c->big.have = have;
  c->big.size = (size_t)size;
  c->big.msg_id = ezi_get_u64le(p + 1);
  ezi_buf_consume(&c->pin, len);
  return 0;
}

/* Reads more of c->big's message, 64 KiB at a time as into `pin` (reads of all the socket
 * held did less well at 16 MiB), growing its buffer as it fills: bytes read, 0 if none now, < 0
 * if the link failed (EZ_ENOMEM, EZ_EMSGSIZE: a buffer it may not have). */
static long big_fill(chan *c, int fd) {
  size_t room = c->big.size - c->big.have;
  if (room > 65536) room = 65536;
  if (c->big.have + room > c->big.cap) {
    size_t cap = c->big.cap * 2 > c->big.have + room ? c->big.cap * 2 : c->big.have + room;
    if (cap > c->big.size) cap = c->big.size;
    if (ezi_rx_resize(&c->rx_bytes, c->big.cap, cap)) return EZ_EMSGSIZE;
    uint8_t *b = realloc(c->big.buf, cap);
    if (!b) {
      ezi_rx_resize(&c->rx_bytes, cap, c->big.cap);
      return EZ_ENOMEM;
    }
    c->big.buf = b;
    c->big.cap = cap;
  }
  long n = ezi_recv_some(fd, c->big.buf + c->big.have, room);
  if (n > 0) c->big.have += (size_t)n;
  return n;
}

/* c->big's message: delivered once complete (0), or still arriving (0), or bad (< 0). */
static int big_done(chan *c, uint64_t now) {
  if (c->big.have < c->big.size) return 0;
  uint8_t *b = c->big.buf;
  c->big.buf = NULL;
  return ezi_notices_tcp(c, c->big.msg_id, c->big.size, b, c->big.cap, now);
}

/* Parses one data frame from c->pin: bytes used, 0 for more, < 0 on a protocol error. */
static long data_frame(chan *c, uint64_t now) {
  ezi_tx_frame f;
  int st = ezi_tx_parse(ezi_buf_head(&c->pin), ezi_buf_pending(&c->pin), &f);
  if (st == 0 && !c->rx->ring) return big_start(c); /* (notices) */
  if (st <= 0) return st;
  if (f.cmd == EZI_X_RING) { /* an ezmsg-c publisher answers our X_HELLO */
    int rc = ezi_ringchan_start(c, f.name, f.name_len, f.msg_id);
    if (rc) return rc;
    EZI_DEBUG("channel %s: notices from publisher %s come through shared memory now", c->id,
              c->pub_id);
    return (long)f.used;
  }
  if (f.cmd == EZI_X_WIN) { /* an ezmsg-c publisher answers our X_WIN_ASK */
    int rc = ezi_tcpring_start(c, f.msg_id, f.win_msgs, f.win_bytes);
    return rc ? rc : (long)f.used;
  }
  if (f.cmd == EZI_TX_SHM && c->rx->shm_frames) { /* a segment we have not mapped yet */
    int rc = need_segment(c, f.name, f.name_len);
    if (rc || c->attaching) return rc;
  }
  return c->rx->frame(c, &f, now);
}

#define GONE (-100000) /* the channel may have been freed: touch nothing */

/* The link failed: close it and tell the subscribers, which leave to join again (the channel may
 * be gone when this returns). */
static void fail(chan *c, int rc) {
  ezi_chan_link_close(c);
  if (c->state == CH_CONNECTING)
    ezi_chan_link_done(c, rc);
  else
    ezi_chan_link_lost(c);
}

/* The publisher's side of the handshake: str topic (released dialect) and str shm_name, then
 * (after our SHM_OK / FAILED and pid) COMPLETE and u64 num_buffers. Which of the two first frames
 * it is, the first string's shape says (ezi_dialect_is_segment_name). Returns bytes used, 0 for
 * more, < 0 on error. */
static long handshake(chan *c) {
  ezi_rd r;
  ezi_rd_init(&r, ezi_buf_head(&c->pin), ezi_buf_pending(&c->pin), 1024);
  if (!c->hs_named) {
    const char *name = NULL, *topic = NULL;
    size_t n = 0, nt = 0;
    if (ezi_rd_str(&r, &name, &n) && !ezi_dialect_is_segment_name(name, n)) {
      topic = name; /* a released publisher: its topic, then the segment's name */
      nt = n;
      ezi_rd_str(&r, &name, &n);
    }
    int st = ezi_rd_status(&r);
    if (st <= 0) return st;
    c->hs_named = true;
    c->pub_dialect = topic ? EZ_DIALECT_RELEASED : EZ_DIALECT_PROFILING;
    EZI_DEBUG("channel %s: publisher %s%s%.*s speaks the %s dialect", c->id, c->pub_id,
              topic ? " on " : "", (int)(nt > 200 ? 200 : nt), topic ? topic : "",
              ezi_dialect_name(c->pub_dialect));
    /* The answer waits for the attach (`attached`); a name we cannot attach gets
     * SHM_ATTACH_FAILED at once, and the publisher sends over TCP. */
    if (attach(c, name, n)) answer_name(c);
    return (long)r.pos;
  }
  if (c->attaching) return 0;
  uint8_t cmd = 0;
  uint64_t nbuf = 0;
  if (ezi_rd_u8(&r, &cmd)) ezi_rd_u64(&r, &nbuf);
  int st = ezi_rd_status(&r);
  if (st <= 0) return st;
  if (cmd != EZI_COMPLETE || nbuf < 1 || nbuf > EZI_SHM_MAX_BUFFERS) return EZ_EPROTO;
  if (c->seg && c->seg->shm.num_buffers != nbuf) { /* not the layout the publisher says */
    ezi_seg_unref(c->seg);
    c->seg = NULL;
  }
  c->nbuf = (uint32_t)nbuf;
  if (c->hs_timer) ezi_loop_cancel(c->ctx->loop, c->hs_timer);
  c->hs_timer = 0;
  long used = (long)r.pos;
  if (ezi_chan_link_done(c, 0)) return GONE;
  /* Ask an ezmsg-c publisher for a ring, and for a TCP window; others ignore these bytes. */
  if (c->seg && c->ctx->ring_ok) {
    uint8_t hello = EZI_X_HELLO;
    ezi_outbox_put(c->ctx, &c->acks, &hello, 1);
  }
  if (c->ctx->tcp_window) { /* and, in that window, for the compact X_TCP frames */
    uint8_t ask[2] = {EZI_X_WIN_ASK, EZI_X_TCP_ASK};
    ezi_outbox_put(c->ctx, &c->acks, ask, 2);
  }
  return used;
}

static void hs_timeout(void *arg) {
  chan *c = arg;
  c->hs_timer = 0;
  EZI_WARN_RL("channel %s: publisher %s did not finish the handshake", c->id, c->pub_id);
  fail(c, EZ_ETIMEDOUT);
}

/* Drops the link after a frame that is bad, or that there is no memory for; what arrived before
 * it is delivered. One line says why (rate-limited: a peer can make this happen at will). */
static void drop(chan *c, long err) {
  bool shrunk = (c->seg && ezi_guard_tripped(&c->seg->shm.tripped)) ||
                ezi_guard_tripped(&c->ring.tripped) /* (zero unless mapped) */;
  if (err == EZ_ENOMEM)
    EZI_WARN_RL("channel %s: out of memory for the data of publisher %s; dropping the link (it is "
                "joined again)",
                c->id, c->pub_id);
  else if (err == EZ_EMSGSIZE)
    EZI_WARN_RL("channel %s: publisher %s would make this process hold more than its limit for "
                "TCP messages (%llu MiB per link, %s; %llu MiB per process, %s); dropping the link",
                c->id, c->pub_id, (unsigned long long)(ezi_rx_link_max() >> 20), EZ_RX_LINK_ENV,
                (unsigned long long)(ezi_rx_process_max() >> 20), EZ_RX_PROCESS_ENV);
  else if (shrunk)
    EZI_WARN_RL("channel %s: the shared memory of publisher %s (%s) was truncated under this "
                "process; dropping the link",
                c->id, c->pub_id, c->seg ? c->seg->shm.name : "its ring");
  else
    EZI_WARN_RL("channel %s: bad data from publisher %s (%s); dropping the link", c->id, c->pub_id,
                ez_strerror((int)err));
  c->rx->read_done(c); /* for what arrived before it */
  fail(c, (int)err);
}

/* After a read: notes when the frame left incomplete (if any) began (frame_deadline). */
static void note_partial(chan *c, uint64_t frames_before) {
  if (!c->big.buf && !ezi_buf_pending(&c->pin))
    c->frame_since = 0;
  else if (!c->frame_since || c->frames != frames_before)
    c->frame_since = ezi_now_ns();
}

/* Every quarter of EZMSG_FRAME_TIMEOUT_MS while the link is up: a frame incomplete for that long
 * drops the link (a publisher that announces a large frame and stops holds what it sent). */
static void frame_check(void *arg) {
  chan *c = arg;
  c->frame_timer = 0;
  if (c->pw.fd < 0 || c->state != CH_READY) return;
  uint64_t t = ezi_frame_timeout_ns(), now = ezi_now_ns();
  if (c->frame_since && !c->attaching && now - c->frame_since >= t) {
    EZI_WARN_RL("channel %s: a frame of publisher %s stayed incomplete for %llu ms (%s); dropping "
                "the link",
                c->id, c->pub_id, (unsigned long long)((now - c->frame_since) / 1000000u),
                EZ_FRAME_TIMEOUT_ENV);
    c->rx->read_done(c);
    return fail(c, EZ_ETIMEDOUT);
  }
  c->frame_timer = ezi_loop_timer(c->ctx->loop, now + t / 4, frame_check, c);
}

/* Parses the frames c->pin holds (all of them, or up to one that waits for an attach). false if
 * the link was dropped, or the channel may be gone. */
static bool consume(chan *c, uint64_t now) {
  if (c->big.buf) { /* a large message read straight into its buffer (big_start) */
    int rc = big_done(c, now);
    if (rc) {
      drop(c, rc);
      return false;
    }
    if (c->big.buf) return true; /* more of it to come */
  }
  for (;;) {
    long used = c->state == CH_CONNECTING ? handshake(c) : data_frame(c, now);
    if (used == GONE) return false;
    if (used > 0) c->frames++;
    if (used > 0 && c->cur) { /* a chunk keeps its bytes: messages point into it */
      c->pin.off += (size_t)used;
    } else if (used > 0) {
      ezi_buf_consume(&c->pin, (size_t)used);
      /* a frame that started a mode with buffers of its own (X_WIN): reads go there now */
      int rc = c->rx->begin_reads ? c->rx->begin_reads(c) : 0;
      if (rc) used = rc;
    }
    if (used < 0) {
      drop(c, used);
      return false;
    }
    if (used == 0) break;
  }
  if (c->state != CH_READY) return true;
  c->rx->read_done(c); /* receivers were not woken frame by frame: once for the whole read */
  return true;
}

static void attached(void *arg, int rc, ezi_seg *seg) {
  chan *c = arg;
  c->attaching = NULL;
  if (!rc && strcmp(seg->shm.name, c->attach_name) != 0) rc = EZ_EPROTO; /* not what we asked */
  if (!rc && c->state != CH_CONNECTING && seg->shm.num_buffers != c->nbuf) rc = EZ_EPROTO;
  if (rc) ezi_seg_unref(seg);
  if (c->state == CH_CONNECTING) { /* the handshake's name: mapped or not, the answer goes out */
    c->seg = rc ? NULL : seg;
    if (rc)
      EZI_DEBUG("channel %s: segment %s not attached (%s): publisher %s sends over TCP", c->id,
                c->attach_name, ez_strerror(rc), c->pub_id);
    answer_name(c);
  } else if (rc) { /* a message in a segment we cannot map: the link is no use */
    EZI_WARN_RL("channel %s: segment %s of publisher %s not attached (%s); dropping the link",
                c->id, c->attach_name, c->pub_id, ez_strerror(rc));
    ezi_chan_wake_subs(c); /* for what arrived before it */
    return fail(c, rc);
  } else {
    ezi_seg_unref(c->seg); /* slots keep their own references */
    c->seg = seg;
  }
  ezi_outbox_set_events(&c->acks, EPOLLIN | EPOLLRDHUP);
  c->frame_since = 0;        /* the wait was the attach's (its own deadline), not the publisher's */
  consume(c, ezi_tel_now()); /* what arrived before the attach began and waits in c->pin */
}

static void on_pub(ezi_watch *w, uint32_t ev) {
  chan *c = w->arg;
  if ((ev & EPOLLOUT) && ezi_outbox_flush(&c->acks)) return fail(c, EZ_ECONNLOST);
  if (c->attaching) { /* not reading meanwhile (a reset connection is reported anyway) */
    if (ev & (EPOLLHUP | EPOLLERR)) fail(c, EZ_ECONNLOST);
    return;
  }
  if (!(ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))) return;
  long n = 0;
  uint64_t frames = c->frames;
  while (!c->attaching &&
         (n = c->cur       ? c->rx->fill(c, w->fd)
              : c->big.buf ? big_fill(c, w->fd)
                           : ezi_buf_fill(&c->pin, w->fd,
                                          ezi_tx_limit(ezi_buf_head(&c->pin),
                                                       ezi_buf_pending(&c->pin)))) > 0) {
    /* The input buffer grows with what arrives: counted (rxbudget.h) as it grows. */
    if (!c->cur && c->pin.cap != c->pin_acct) {
      if (ezi_rx_resize(&c->rx_bytes, c->pin_acct, c->pin.cap)) return drop(c, EZ_EMSGSIZE);
      c->pin_acct = c->pin.cap;
    }
    uint64_t now = ezi_tel_now(); /* one clock read for all the frames of this read */
    if (!consume(c, now)) return;
  }
  if (n == EZ_ENOMEM || n == EZ_EMSGSIZE) return drop(c, n);
  if (c->state == CH_READY && n == 0) {
    note_partial(c, frames);
    if (!c->frame_timer)
      c->frame_timer =
          ezi_loop_timer(c->ctx->loop, ezi_now_ns() + ezi_frame_timeout_ns() / 4, frame_check, c);
  }
  if (n < 0) {
    EZI_DEBUG("channel %s: publisher %s went away", c->id, c->pub_id);
    fail(c, EZ_ECONNLOST);
  }
}

int ezi_chan_link_start(chan *c, const char *addr) {
  char host[256];
  uint16_t port;
  if (ezi_addr_parse(addr, host, &port)) return EZ_EPROTO;
  /* Non-blocking: a publisher on another host whose packets are dropped must not stall this I/O
   * thread. The CHANNEL request waits in the outbox until the socket is writable, and the
   * handshake timer bounds the whole exchange. */
  bool connected;
  int fd = ezi_tcp_connect_start(host, port, &connected);
  if (fd < 0) return fd == EZ_ENOSERVER ? EZ_ECONNLOST : fd;
  c->pw = (ezi_watch){.fd = fd, .fn = on_pub, .arg = c};
  ezi_outbox_init(&c->acks, &c->pw, EPOLLIN | EPOLLRDHUP);
  if (ezi_loop_add(c->ctx->loop, &c->pw, EPOLLIN | EPOLLRDHUP)) {
    close(fd);
    c->pw.fd = -1;
    return EZ_ESYS;
  }
  ezi_buf b = {0};
  ezi_buf_put_u8(&b, EZI_CHANNEL);
  ezi_buf_put_cstr(&b, c->id);
  if (b.data) ezi_outbox_put(c->ctx, &c->acks, b.data, b.len);
  ezi_buf_free(&b);
  c->hs_timer = ezi_loop_timer(
      c->ctx->loop, ezi_now_ns() + (uint64_t)EZ_DEFAULT_TIMEOUT_MS * 1000000u, hs_timeout, c);
  return 0;
}
