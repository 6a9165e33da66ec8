/* The TCP window between ezmsg-c peers, the channel's side (src/rx/tcpring.c): a real channel
 * against a publisher played by hand (what it accepts, acks in order once every member released,
 * and that it drops a publisher breaking the rules), and a real publisher process streaming to a
 * subscriber here with and without the window. The publisher's side is tests/test_tcpwin_pub.c. */
#include "harness.h"
#include "link/chanreg.h"
#include "rawproto.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TMO 30000

/* This binary is linked with -Wl,--wrap=malloc (tests/CMakeLists.txt): allocations larger than
 * a standard chunk made by other threads than the test's (the I/O thread's chunks) are counted
 * while g_count_big is set. */
void *__real_malloc(size_t n);
void *__wrap_malloc(size_t n);
static pthread_t g_test_thread;
static int g_count_big; /* atomic */
static int g_big;       /* atomic */

void *__wrap_malloc(size_t n) {
  if (n > EZI_CHUNK_ALLOC && __atomic_load_n(&g_count_big, __ATOMIC_SEQ_CST) &&
      !pthread_equal(pthread_self(), g_test_thread))
    __atomic_add_fetch(&g_big, 1, __ATOMIC_SEQ_CST);
  return __real_malloc(n);
}

/* ---- a real channel, a publisher played by hand -------------------------------------------- */

typedef struct fake {
  int graph, listener, data;
  char id[37];
} fake;

/* The publisher's side of a channel's handshake on f->listener (4 slots, no segment); the
 * channel asks for a window. */
static void fake_accept(fake *f) {
  f->data = rp_accept_talker(f->listener, TMO);
  assert_true(f->data >= 0);
  rp_expect_u8(f->data, EZI_CHANNEL);
  char chan_id[64];
  rp_rd_str(f->data, chan_id, sizeof chan_id);
  rp_wr_str(f->data, "");
  rp_expect_u8(f->data, EZI_SHM_ATTACH_FAILED);
  assert_int_equal(rp_rd_u64(f->data), (uint64_t)getpid());
  uint8_t done[9] = {EZI_COMPLETE};
  rp_put_u64le(done + 1, 4);
  rp_wr(f->data, done, 9);
  rp_expect_u8(f->data, EZI_X_WIN_ASK); /* no X_HELLO: no segment, no ring */
  rp_expect_u8(f->data, EZI_X_TCP_ASK);
}

/* Plays an ezmsg-c publisher of 4 slots whose segment the channel cannot attach (an empty name),
 * for subscriber topic `topic` in this process; the channel asks for a window. */
static void fake_pub_start(fake *f, const char *topic) {
  char my_addr[64];
  f->listener = rp_listen(my_addr, 4);
  f->graph = rp_fake_pub_begin(th_addr, topic, my_addr, f->id);
  fake_accept(f);
  rp_expect_u8(f->graph, EZI_COMPLETE);
}

static void fake_win(fake *f, uint64_t start, uint64_t msgs, uint64_t bytes) {
  uint8_t b[25] = {EZI_X_WIN};
  rp_put_u64le(b + 1, start);
  rp_put_u64le(b + 9, msgs);
  rp_put_u64le(b + 17, bytes);
  rp_wr(f->data, b, sizeof b);
}

/* Sends message id as TX_TCP with `len` payload bytes, all 'a' + id % 26: the first `split` bytes
 * of the frame (half of it if that is all of it), then after a pause the rest (split 0: at
 * once). */
static void fake_send_split(fake *f, uint64_t id, size_t len, size_t split) {
  size_t size = EZI_MARSHAL_BYTES_HDR + len;
  uint8_t *b = malloc(17 + size);
  assert_non_null(b);
  b[0] = EZI_TX_TCP;
  rp_put_u64le(b + 1, id);
  rp_put_u64le(b + 9, size);
  ezi_marshal_bytes_header(b + 17, id, len);
  memset(b + 17 + EZI_MARSHAL_BYTES_HDR, 'a' + (int)(id % 26), len);
  if (split >= 17 + size) split = (17 + size) / 2;
  if (split) {
    rp_wr(f->data, b, split);
    usleep(2000); /* the channel reads the part alone */
  }
  rp_wr(f->data, b + split, 17 + size - split);
  free(b);
}

static void fake_send(fake *f, uint64_t id, size_t len) { fake_send_split(f, id, len, 0); }

/* Sends the next message as X_TCP, `len` payload bytes all 'a' + id % 26, its header claiming
 * `claim` bytes (what it really has if 0). */
static void fake_send_x(fake *f, uint64_t id, size_t len, uint32_t claim) {
  uint8_t *b = malloc(5 + len);
  assert_non_null(b);
  b[0] = EZI_X_TCP;
  ezi_put_u32le(b + 1, claim ? claim : (uint32_t)len);
  memset(b + 5, 'a' + (int)(id % 26), len);
  rp_wr(f->data, b, 5 + len);
  free(b);
}

static void fake_end(fake *f) {
  close(f->data);
  close(f->graph);
  close(f->listener);
}

/* A context and a subscriber to `topic` here, with a hand-played publisher (f) connected to it.
 * The caller destroys the subscriber and closes the context. */
static ez_sub *sub_with_fake(ez_context **ctx, fake *f, const char *topic) {
  *ctx = th_open_ctx(NULL);
  ez_sub *s = NULL;
  assert_int_equal(ez_sub_create(*ctx, topic, NULL, &s), 0);
  fake_pub_start(f, topic);
  return s;
}

static void expect_msg(ez_sub *s, ez_msg *m, uint64_t id, size_t len) {
  assert_int_equal(ez_recv(s, m, TMO), 0);
  assert_int_equal(m->msg_id, id);
  assert_int_equal(m->len, len);
  for (size_t i = 0; i < len; i++)
    if (((const uint8_t *)m->data)[i] != 'a' + id % 26)
      fail_msg("message %llu: byte %zu", (unsigned long long)id, i);
}

/* Reads RX_ACKs (cumulative in a window) until one for `last`; their ids must rise and none may
 * pass `last`. */
static void expect_acked_to(int fd, uint64_t last) {
  uint64_t prev = 0;
  for (bool first = true;; first = false) {
    rp_expect_u8(fd, EZI_RX_ACK);
    uint64_t id = rp_rd_u64(fd);
    assert_true(id <= last);
    if (!first) assert_true(id > prev);
    if (id == last) return;
    prev = id;
  }
}

/* A window of 16 on 4 buffers: 16 messages held by the subscriber at once arrive intact. Acks go
 * in order (tcpring.c): released from the last to the second, nothing is acked; the release of
 * the first acks all 16. */
static void test_channel_window(void **state) {
  (void)state;
  ez_context *ctx;
  fake f;
  ez_sub *s = sub_with_fake(&ctx, &f, "/win/chan");
  fake_win(&f, 0, 16, 8 << 20);
  for (uint64_t id = 0; id < 16; id++)
    fake_send(&f, id, 100);
  ez_msg m[16];
  for (uint64_t id = 0; id < 16; id++)
    expect_msg(s, &m[id], id, 100);
  assert_int_equal(th_chan_window(ctx), 16);
  for (uint64_t id = 16; id-- > 1;)
    ez_msg_release(&m[id]);
  assert_true(rp_quiet_for(f.data, 200)); /* message 0 is still held */
  ez_msg_release(&m[0]);
  expect_acked_to(f.data, 15);
  fake_send(&f, 16, 5); /* entry 0 again */
  expect_msg(s, &m[0], 16, 5);
  ez_msg_release(&m[0]);
  fake_end(&f);
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

/* Message k of test_channel_chunks: larger than a chunk, several in one, or small; every 7th is
 * written in two parts, cut inside its header or its body. */
static size_t chunk_msg_len(uint64_t k) {
  static const size_t lens[4] = {300 << 10, 70 << 10, 5 << 10, 5 << 10};
  return lens[k % 4];
}

static void chunk_send(fake *f, uint64_t k) {
  fake_send_split(f, k, chunk_msg_len(k), k % 7 ? 0 : k % 2 ? 10 : 40000);
}

/* The channel reads into 256 KiB chunks and leaves messages where they arrived (tcpring.c):
 * across chunks, with frames cut anywhere and messages larger than a chunk, 64 messages (6 MiB)
 * held at once stay intact; once all are released and acked, the chunks are reused for 64 more. */
static void test_channel_chunks(void **state) {
  (void)state;
  ez_context *ctx;
  fake f;
  ez_sub *s = sub_with_fake(&ctx, &f, "/win/chunks");
  fake_win(&f, 0, 64, 8 << 20);
  static ez_msg m[64];
  for (uint64_t k = 0; k < 64; k++) {
    chunk_send(&f, k);
    expect_msg(s, &m[k], k, chunk_msg_len(k));
  }
  for (uint64_t k = 0; k < 64; k++) { /* all still there, as they arrived */
    const uint8_t *d = m[k].data;
    for (size_t i = 0; i < m[k].len; i++)
      if (d[i] != 'a' + k % 26) fail_msg("message %llu: byte %zu", (unsigned long long)k, i);
  }
  assert_true(rp_quiet_for(f.data, 100)); /* all held: nothing acked */
  for (uint64_t k = 64; k-- > 0;)
    ez_msg_release(&m[k]);
  expect_acked_to(f.data, 63);
  for (uint64_t k = 64; k < 128; k++) {
    chunk_send(&f, k);
    expect_msg(s, &m[0], k, chunk_msg_len(k));
    ez_msg_release(&m[0]);
  }
  expect_acked_to(f.data, 127);
  fake_end(&f);
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

/* Large messages reuse their chunk. First 36 messages of 200 KB are held at once and then
 * released: the standard chunks they filled become spares, up to the byte budget. Then ten 1 MB
 * messages come one at a time, each released and acknowledged before the next: the first grows a
 * chunk by doubling (at most 3 allocations), and the others reuse it. Two regressions: a frame
 * that did not fit got a new chunk at every read (~20 allocations for one 1 MB message), and the
 * standard spares crowded the large chunk out, so it was freed on release and every message
 * allocated again. */
static void test_channel_large_reuse(void **state) {
  (void)state;
  ez_context *ctx;
  fake f;
  ez_sub *s = sub_with_fake(&ctx, &f, "/win/large");
  fake_win(&f, 0, 64, 8 << 20);
  static ez_msg m[36];
  for (uint64_t k = 0; k < 36; k++) {
    fake_send(&f, k, 200000);
    expect_msg(s, &m[k], k, 200000);
  }
  for (uint64_t k = 0; k < 36; k++)
    ez_msg_release(&m[k]);
  expect_acked_to(f.data, 35);
  g_test_thread = pthread_self();
  __atomic_store_n(&g_big, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&g_count_big, 1, __ATOMIC_SEQ_CST);
  for (uint64_t k = 36; k < 46; k++) {
    fake_send(&f, k, 1000000);
    expect_msg(s, &m[0], k, 1000000);
    ez_msg_release(&m[0]);
    /* Its ack means the channel has taken it back (scanned it): the next one may take its
     * chunk. (Sent before that, it would find the chunk still counted, and allocate.) */
    expect_acked_to(f.data, k);
  }
  __atomic_store_n(&g_count_big, 0, __ATOMIC_SEQ_CST);
  int big = __atomic_load_n(&g_big, __ATOMIC_SEQ_CST);
  print_message("    10 messages of 1 MB: %d chunk allocations\n", big);
  assert_true(big >= 1 && big <= 3);
  fake_end(&f);
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

/* Streams 12 messages of `len` bytes to s through f, two in flight as in a stream: message k
 * arrives while k - 1 is held (so k's buffer cannot be k - 1's), then k - 1 is released, and
 * its buffer is what k + 1 can reuse. Returns the allocations larger than a chunk the channel
 * made for the last 10. */
static int stream_two_in_flight(ez_sub *s, fake *f, size_t len) {
  static ez_msg m[2];
  g_test_thread = pthread_self();
  fake_send(f, 0, len);
  expect_msg(s, &m[0], 0, len);
  fake_send(f, 1, len);
  expect_msg(s, &m[1], 1, len);
  __atomic_store_n(&g_big, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&g_count_big, 1, __ATOMIC_SEQ_CST);
  for (uint64_t k = 2; k < 12; k++) {
    ez_msg_release(&m[k % 2]);
    expect_acked_to(f->data, k - 2); /* taken back: its buffer is spare */
    fake_send(f, k, len);
    expect_msg(s, &m[k % 2], k, len);
  }
  ez_msg_release(&m[0]);
  ez_msg_release(&m[1]);
  __atomic_store_n(&g_count_big, 0, __ATOMIC_SEQ_CST);
  return __atomic_load_n(&g_big, __ATOMIC_SEQ_CST);
}

/* Messages larger than the window's byte budget: the spares may exceed the budget by one chunk
 * of their size, so each message reuses the last one's chunk. (Kept to the budget, every 8 MiB
 * message allocated a chunk, faulted it in and freed it: 7x slower than 4 MiB ones.) */
static void test_channel_larger_than_budget(void **state) {
  (void)state;
  ez_context *ctx;
  fake f;
  ez_sub *s = sub_with_fake(&ctx, &f, "/win/larger");
  fake_win(&f, 0, 64, 1 << 20);
  int big = stream_two_in_flight(s, &f, 3000000);
  print_message("    10 messages of 3 MB, budget 1 MiB: %d chunk allocations\n", big);
  assert_true(big <= 2);
  fake_end(&f);
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

/* Without a window (as from a Python publisher), each TX_TCP message gets a buffer of its own:
 * the last large one a release freed is kept for the next (a stream of 32 MiB messages
 * allocated, faulted in and freed one per message: 2.2x slower). */
static void test_channel_big_buffer_reused(void **state) {
  (void)state;
  ez_context *ctx;
  fake f;
  ez_sub *s = sub_with_fake(&ctx, &f, "/win/nowin_big");
  int big = stream_two_in_flight(s, &f, 3000000);
  print_message("    10 messages of 3 MB without a window: %d buffer allocations\n", big);
  assert_true(big <= 2);
  fake_end(&f);
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

/* Reads what the channel sends until it closes the link (acks may come first). */
static void expect_link_dropped(int fd) {
  uint8_t b[256];
  int64_t end = th_now_ms() + TMO;
  for (;;) {
    ssize_t n = recv(fd, b, sizeof b, MSG_DONTWAIT);
    if (n == 0) break;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) break; /* reset: dropped too */
    if (n < 0) {
      assert_true(th_now_ms() < end);
      th_sleep_ms(1);
    }
  }
  close(fd);
}

/* The capacity of the link buffer of the channel from publisher `pub` (I/O thread). */
typedef struct pin_query {
  ez_context *ctx;
  const char *pub;
  size_t cap;
} pin_query;

static void read_pin_cap(void *arg) {
  pin_query *q = arg;
  pthread_mutex_lock(&q->ctx->mu);
  chan *c = ezi_chan_find(q->ctx, q->pub);
  q->cap = c ? c->pin.cap : SIZE_MAX;
  pthread_mutex_unlock(&q->ctx->mu);
}

/* Without a window, a TX_TCP message of EZI_DIRECT_READ_MIN bytes or more is read straight into
 * its own buffer (chanlink.c, big_start) rather than gathered in the link's buffer and copied:
 * whole, or split inside the frame's header, at its end, and twice inside the body; one byte
 * smaller it takes the ordinary path. A link cut in the middle of such a message, and one whose
 * body is not the message its header announces, are dropped (what was read is freed: ASan), and
 * the subscriber joins again and goes on. */
static void test_channel_direct_read(void **state) {
  (void)state;
  ez_context *ctx;
  fake f;
  ez_sub *s = sub_with_fake(&ctx, &f, "/win/direct");
  const size_t min = EZI_DIRECT_READ_MIN - EZI_MARSHAL_BYTES_HDR; /* its frame's body: the min */
  const size_t lens[] = {min - 1, min, min + 1, 2 * EZI_DIRECT_READ_MIN + 7};
  const size_t splits[] = {0, 10, 17, 17 + 100, 17 + 70000};
  uint64_t id = 0;
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
    for (size_t k = 0; k < sizeof splits / sizeof splits[0]; k++, id++) {
      fake_send_split(&f, id, lens[i], splits[k]);
      ez_msg m;
      expect_msg(s, &m, id, lens[i]);
      ez_msg_release(&m);
    }
  /* The largest messages never went through the link's buffer: it would have grown to hold one
   * (it held those just below the threshold). */
  pin_query q = {.ctx = ctx, .pub = f.id};
  ezi_ctx_call(ctx, read_pin_cap, &q);
  assert_true(q.cap <= 2 * EZI_DIRECT_READ_MIN);

  /* The publisher goes away half way through a message. */
  size_t len = EZI_DIRECT_READ_MIN + 1000, size = EZI_MARSHAL_BYTES_HDR + len;
  uint8_t *b = calloc(1, 17 + size);
  assert_non_null(b);
  b[0] = EZI_TX_TCP;
  rp_put_u64le(b + 1, id);
  rp_put_u64le(b + 9, size);
  ezi_marshal_bytes_header(b + 17, id, len);
  rp_wr(f.data, b, 17 + size / 2);
  th_sleep_ms(20);
  close(f.data);
  fake_accept(&f); /* joined again */
  fake_send(&f, id, 1000);
  ez_msg m;
  expect_msg(s, &m, id, 1000);
  ez_msg_release(&m);
  id++;

  /* A body that is another message than its header says. */
  rp_put_u64le(b + 1, id);
  ezi_marshal_bytes_header(b + 17, id + 1, len);
  rp_wr(f.data, b, 17 + size);
  expect_link_dropped(f.data);
  fake_accept(&f);
  fake_send(&f, id, len);
  expect_msg(s, &m, id, len);
  ez_msg_release(&m);
  free(b);
  fake_end(&f);
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

/* Two subscribers of one process share the channel: each gets every message, and a message is
 * acked once both released it. A third joins mid-stream and gets what comes after. */
static void test_channel_window_members(void **state) {
  (void)state;
  ez_context *ctx;
  fake f;
  ez_sub *a = sub_with_fake(&ctx, &f, "/win/two");
  ez_sub *b = NULL, *late = NULL;
  assert_int_equal(ez_sub_create(ctx, "/win/two", NULL, &b), 0); /* the same channel */
  fake_win(&f, 0, 16, 8 << 20);
  for (uint64_t id = 0; id < 8; id++)
    fake_send(&f, id, 30);
  ez_msg m;
  for (uint64_t id = 0; id < 8; id++) {
    expect_msg(a, &m, id, 30);
    ez_msg_release(&m);
  }
  assert_true(rp_quiet_for(f.data, 200)); /* b holds them all still */
  for (uint64_t id = 0; id < 8; id++) {
    expect_msg(b, &m, id, 30);
    ez_msg_release(&m);
  }
  expect_acked_to(f.data, 7);
  assert_int_equal(ez_sub_create(ctx, "/win/two", NULL, &late), 0);
  for (uint64_t id = 8; id < 24; id++) /* entries 8..15, then 0..7 again */
    fake_send(&f, id, 40);
  for (uint64_t id = 8; id < 24; id++) {
    expect_msg(late, &m, id, 40);
    ez_msg_release(&m);
    expect_msg(a, &m, id, 40);
    ez_msg_release(&m);
    expect_msg(b, &m, id, 40);
    ez_msg_release(&m);
  }
  expect_acked_to(f.data, 23);
  fake_end(&f);
  ez_sub_destroy(late);
  ez_sub_destroy(b);
  ez_sub_destroy(a);
  ez_context_close(ctx);
}

/* Each way of breaking the window's rules drops the link, and nothing false is delivered:
 * 0: a window larger than a channel accepts; 1: X_WIN while a message is held; 2: a 17th message
 * in a window of 16 (its entry is taken); 3: beyond the byte budget after num_buffers messages;
 * 4: a window smaller than num_buffers; 5: a message out of order (one skipped); 6: an X_TCP
 * frame outside a window; 7: an X_TCP frame larger than a channel accepts; 8: as 3, in X_TCP
 * frames. */
static void window_violation(int kind) {
  ez_context *ctx;
  fake f;
  ez_sub *s = sub_with_fake(&ctx, &f, "/win/bad");
  ez_msg m[17];
  size_t held = 0;
  switch (kind) {
  case 0: fake_win(&f, 0, 1u << 20, 8 << 20); break;
  case 1:
    fake_send(&f, 0, 10);
    expect_msg(s, &m[held], 0, 10);
    held++;
    fake_win(&f, 1, 16, 8 << 20);
    break;
  case 2:
    fake_win(&f, 0, 16, 8 << 20);
    for (uint64_t id = 0; id < 16; id++) {
      fake_send(&f, id, 10);
      expect_msg(s, &m[held], id, 10);
      held++;
    }
    fake_send(&f, 16, 10);
    break;
  case 3:
    /* once 4 (num_buffers) are held, all held may take 5 messages' bytes: the 6th is over */
    fake_win(&f, 0, 16, 5 * (64 + EZI_MARSHAL_BYTES_HDR) + 10);
    for (uint64_t id = 0; id < 5; id++) {
      fake_send(&f, id, 64);
      expect_msg(s, &m[held], id, 64);
      held++;
    }
    fake_send(&f, 5, 64);
    break;
  case 4: fake_win(&f, 0, 2, 8 << 20); break;
  case 6: fake_send_x(&f, 0, 10, 0); break; /* X_TCP outside a window */
  case 7:
    fake_win(&f, 0, 16, 8 << 20);
    fake_send_x(&f, 0, 10, 0);
    expect_msg(s, &m[held], 0, 10);
    held++;
    fake_send_x(&f, 1, 10, (1u << 30) + 1); /* over EZI_MAX_TCP_MSG */
    break;
  case 8: /* as 3, in X_TCP frames: each counts as its TX_TCP frame would (6 x 64 B would fit) */
    fake_win(&f, 0, 16, 5 * (64 + EZI_MARSHAL_BYTES_HDR) + 10);
    for (uint64_t id = 0; id < 5; id++) {
      fake_send_x(&f, id, 64, 0);
      expect_msg(s, &m[held], id, 64);
      held++;
    }
    fake_send_x(&f, 5, 64, 0);
    break;
  default:
    fake_win(&f, 0, 16, 8 << 20);
    fake_send(&f, 0, 10);
    expect_msg(s, &m[held], 0, 10);
    held++;
    fake_send(&f, 2, 10);
    break;
  }
  assert_true(rp_hung_up(f.data, TMO));
  ez_msg extra;
  assert_int_equal(ez_recv(s, &extra, 300), EZ_ETIMEDOUT);
  for (size_t i = 0; i < held; i++) /* what was delivered stays readable until released */
    ez_msg_release(&m[i]);
  fake_end(&f);
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

/* In a window, X_TCP frames (the payload alone) and TX_TCP frames both deliver the channel's next
 * message, in any mix, small or larger than a read chunk; they count in the window as the same
 * message would as TX_TCP. */
static void test_channel_x_tcp(void **state) {
  (void)state;
  ez_context *ctx;
  fake f;
  ez_sub *s = sub_with_fake(&ctx, &f, "/win/xchan");
  fake_win(&f, 0, 16, 8 << 20);
  const size_t big = 300 << 10; /* beyond a 256 KiB chunk (tcpring.c) */
  for (uint64_t id = 0; id < 16; id++) {
    size_t len = id == 9 ? big : 100;
    if (id % 3)
      fake_send_x(&f, id, len, 0);
    else
      fake_send(&f, id, len);
  }
  ez_msg m[16];
  for (uint64_t id = 0; id < 16; id++)
    expect_msg(s, &m[id], id, id == 9 ? big : 100);
  for (uint64_t id = 0; id < 16; id++)
    ez_msg_release(&m[id]);
  expect_acked_to(f.data, 15);
  fake_end(&f);
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

/* One window_violation case per test: the kind is the test's initial state (see main). */
static void test_window_violation(void **state) { window_violation(*(const int *)*state); }

/* A named test of window_violation(kind). */
#define VIOLATION(name, kind)                                                                      \
  { #name, test_window_violation, th_setup, th_teardown, (void *)&kinds[kind] }

/* This process's virtual size in KiB (/proc/self/status VmSize). */
static long vm_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  assert_non_null(f);
  char line[256];
  long kib = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmSize: %ld", &kib) == 1) break;
  fclose(f);
  return kib;
}

/* A frame header claiming 512 MiB, then 100 KiB of its body: the channel's memory grows with the
 * bytes that came, not with the size claimed (chunks grow with what arrived, tcpring.c); the
 * frame stays incomplete, nothing is delivered, and the channel takes the rest when it comes. */
static void test_channel_huge_header(void **state) {
  (void)state;
  ez_context *ctx;
  fake f;
  ez_sub *s = sub_with_fake(&ctx, &f, "/win/huge");
  fake_win(&f, 0, 16, 8 << 20);
  fake_send(&f, 0, 10);
  ez_msg m;
  expect_msg(s, &m, 0, 10);
  ez_msg_release(&m);
  long before = vm_kib();
  const size_t claimed = (size_t)512 << 20, sent = 100 << 10;
  uint8_t *b = calloc(1, 17 + sent);
  assert_non_null(b);
  b[0] = EZI_TX_TCP;
  rp_put_u64le(b + 1, 1);
  rp_put_u64le(b + 9, claimed);
  rp_wr(f.data, b, 17 + sent);
  free(b);
  assert_int_equal(ez_recv(s, &m, 300), EZ_ETIMEDOUT);
  long grown = vm_kib() - before;
  if (grown > 64 << 10) fail_msg("the channel grew by %ld KiB for 100 KiB of a frame", grown);
  fake_end(&f);
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

/* The in_flight of every channel of this process's profile, summed. */
static long long all_in_flight(ez_context *ctx) {
  ez_profile_data pd;
  char *json = NULL;
  assert_int_equal(ez_context_profile(ctx, 1.0, &json), 0);
  assert_int_equal(ez_profile_parse(json, &pd), 0);
  free(json);
  long long n = 0;
  for (size_t i = 0; i < pd.n_channels; i++)
    n += (long long)pd.channels[i].in_flight;
  ez_profile_data_free(&pd);
  return n;
}

/* 200 messages arrive whole over TCP and wait in the subscriber's queue; then the publisher's
 * link breaks and it leaves the graph. With `receive`, all 200 are still delivered, in order,
 * and nothing after; without, destroying the subscriber frees them (checked by the sanitizers'
 * leak check). */
static void queue_outlives_link(bool receive) {
  ez_context *ctx;
  fake f;
  ez_sub *s = sub_with_fake(&ctx, &f, "/win/lost");
  fake_win(&f, 0, 256, 8 << 20);
  for (uint64_t id = 0; id < 200; id++)
    fake_send(&f, id, 50);
  th_wait_count(all_in_flight, ctx, 200, TMO);
  fake_end(&f); /* the link breaks, and the publisher leaves the graph (an UPDATE follows) */
  th_sleep_ms(300);
  if (receive) {
    for (uint64_t id = 0; id < 200; id++) {
      ez_msg m;
      expect_msg(s, &m, id, 50);
      ez_msg_release(&m);
    }
    ez_msg m;
    assert_int_equal(ez_recv(s, &m, 300), EZ_ETIMEDOUT);
  }
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

/* 100 messages wait in the TCP ring when the link is cut; the publisher stays in the graph, so the
 * subscriber joins it again, and the new channel (without a window this time: slots, the
 * subscriber's queue) brings messages 100..103. The 100 queued before come first, in order. */
static void test_drain_before_rejoin(void **state) {
  (void)state;
  ez_context *ctx;
  fake f;
  ez_sub *s = sub_with_fake(&ctx, &f, "/win/rejoin");
  fake_win(&f, 0, 256, 8 << 20);
  for (uint64_t id = 0; id < 100; id++)
    fake_send(&f, id, 20);
  th_wait_count(all_in_flight, ctx, 100, TMO);
  close(f.data); /* cut; the subscriber joins again within about 50 ms */
  fake_accept(&f);
  for (uint64_t id = 100; id < 104; id++) /* 4 slots: all may be in flight */
    fake_send(&f, id, 20);
  th_wait_count(all_in_flight, ctx, 104,
                TMO); /* both channels' messages wait before the first is taken */
  for (uint64_t id = 0; id < 104; id++) {
    ez_msg m;
    expect_msg(s, &m, id, 20);
    ez_msg_release(&m);
  }
  fake_end(&f);
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

static void test_queue_outlives_link(void **state) {
  (void)state;
  queue_outlives_link(true);
}

static void test_destroy_with_queue_of_lost_link(void **state) {
  (void)state;
  queue_outlives_link(false);
}

/* A channel hands the buffers of released TX_TCP messages back to its I/O thread for the next
 * frames (chan.spare, at most 8 KiB each). Messages of changing sizes, some larger than the
 * spare they would get, some too large to be kept, 0 and 1 bytes: each arrives intact. */
static void test_spare_buffers(void **state) {
  (void)state;
  ez_context *ctx;
  fake f;
  ez_sub *s = sub_with_fake(&ctx, &f, "/win/spare");
  fake_win(&f, 0, 256, 8 << 20);
  /* 8134 + the 58-byte header = 8192: the largest buffer kept. */
  static const size_t sizes[] = {50, 3000, 8000, 200, 9000, 1, 0, 8134, 4096, 77, 8135};
  const size_t n_sizes = sizeof sizes / sizeof sizes[0];
  uint64_t id = 0;
  for (int round = 0; round < 12; round++) {
    uint64_t first = id;
    for (int k = 0; k < 100; k++, id++)
      fake_send(&f, id, sizes[id % n_sizes]);
    for (uint64_t j = first; j < id; j++) {
      ez_msg m;
      expect_msg(s, &m, j, sizes[j % n_sizes]);
      ez_msg_release(&m);
    }
  }
  fake_end(&f);
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

/* ---- real processes ------------------------------------------------------------------------ */

/* `ezmsg pub --force-tcp --num-buffers 4` in a child process -> a subscriber here: everything
 * arrives once, in order, intact, with the window (this side asks) or without (it does not). */
static void stream_from_child(const char *window, long long want) {
  ez_context *ctx = th_open_ctx(window);
  ez_sub *s = NULL;
  assert_int_equal(ez_sub_create(ctx, "/win/stream", NULL, &s), 0);
  const uint64_t n = 20000;
  pid_t pub = th_spawn_cli(-1, "pub", "/win/stream", "--address", th_addr, "--size", "64",
                           "--count", "20000", "--num-buffers", "4", "--force-tcp", NULL);
  assert_true(pub > 0);
  uint64_t next = UINT64_MAX, got = 0;
  long long win = -2;
  while (next != n) {
    th_recv_cli64(s, &next, TMO);
    if (++got == 100) win = th_chan_window(ctx);
  }
  assert_int_equal(th_wait_exit(pub, TMO), 0);
  assert_int_equal(win, want);
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

static void test_stream_with_window(void **state) {
  (void)state;
  stream_from_child(NULL, EZ_TCP_WINDOW_DEFAULT);
}

static void test_stream_without_window(void **state) {
  (void)state;
  stream_from_child("0", 0);
}

int main(void) {
  static const int kinds[] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_channel_window, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_channel_window_members, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_channel_chunks, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_channel_large_reuse, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_channel_larger_than_budget, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_channel_big_buffer_reused, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_channel_direct_read, th_setup, th_teardown),
      VIOLATION(test_channel_too_large, 0),
      VIOLATION(test_channel_held, 1),
      VIOLATION(test_channel_overrun, 2),
      VIOLATION(test_channel_over_budget, 3),
      VIOLATION(test_channel_too_small, 4),
      VIOLATION(test_channel_skipped, 5),
      cmocka_unit_test_setup_teardown(test_channel_x_tcp, th_setup, th_teardown),
      VIOLATION(test_channel_x_tcp_outside_window, 6),
      VIOLATION(test_channel_x_tcp_too_large, 7),
      VIOLATION(test_channel_x_tcp_over_budget, 8),
      cmocka_unit_test_setup_teardown(test_channel_huge_header, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_queue_outlives_link, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_destroy_with_queue_of_lost_link, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_drain_before_rejoin, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_spare_buffers, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_stream_with_window, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_stream_without_window, th_setup, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
