/* The TCP window between ezmsg-c peers, the publisher's side (src/pub/pubwin.c): a real
 * publisher against a channel played by hand (the window's size, the rule that an entry still
 * taken holds the next message back, the byte budget, the outbox's bound, acks out of order, what
 * it answers to asks it does not know). The channel's side is tests/test_tcpwin_chan.c. */
#include "harness.h"
#include "pub/pubstate.h"
#include "rawproto.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TMO 30000

/* ---- a real publisher, a channel played by hand --------------------------------------------- */

/* Connects to the publisher's channel server as a channel that cannot attach its segment (so it
 * gets TX_TCP), and checks the handshake; returns the connection. */
static int fake_chan(uint16_t port, uint64_t nbuf) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
  int fd = rp_open(addr);
  rp_wr_cmd(fd, EZI_CHANNEL, "11111111-2222-3333-4444-555555555555", NULL);
  char name[128], topic[128];
  rp_rd_pub_hello(fd, name, sizeof name, topic, sizeof topic);
  assert_true(topic[0]); /* our server greets as released ezmsg: so does the publisher */
  uint8_t b[9] = {EZI_SHM_ATTACH_FAILED};
  rp_put_u64le(b + 1, (uint64_t)getpid());
  rp_wr(fd, b, 9);
  rp_expect_u8(fd, EZI_COMPLETE);
  assert_int_equal(rp_rd_u64(fd), nbuf);
  return fd;
}

/* Reads a TX_TCP frame and checks it carries message id with `len` payload bytes. */
static void expect_tcp(int fd, uint64_t id, size_t len) {
  rp_expect_u8(fd, EZI_TX_TCP);
  assert_int_equal(rp_rd_u64(fd), id);
  uint64_t size = rp_rd_u64(fd);
  assert_int_equal(size, EZI_MARSHAL_BYTES_HDR + len);
  uint8_t *body = malloc((size_t)size);
  assert_non_null(body);
  assert_int_equal(rp_rd_exact(fd, body, (size_t)size, RP_TMO), 0);
  ezi_unmarshalled um;
  assert_int_equal(ezi_unmarshal(body, (size_t)size, &um), 0);
  assert_int_equal(um.msg_id, id);
  assert_int_equal(um.payload_len, len);
  free(body);
}

/* Reads an X_TCP frame (a window's message as its payload alone) and checks it carries the
 * `len` bytes at msg. */
static void expect_x_tcp(int fd, const void *msg, size_t len) {
  rp_expect_u8(fd, EZI_X_TCP);
  uint8_t h[4], body[256];
  assert_int_equal(rp_rd_exact(fd, h, 4, RP_TMO), 0);
  assert_int_equal(ezi_get_u32le(h), len);
  assert_true(len <= sizeof body);
  assert_int_equal(rp_rd_exact(fd, body, len, RP_TMO), 0);
  assert_memory_equal(body, msg, len);
}

static void ack(int fd, uint64_t id) {
  uint8_t b[9] = {EZI_RX_ACK};
  rp_put_u64le(b + 1, id);
  rp_wr(fd, b, 9);
}

static ez_pub *make_pub(ez_context *ctx, const char *topic, uint32_t nbuf, size_t buf_size,
                        uint16_t *port) {
  *port = 0; /* gcc -O3 cannot see that fail_msg does not return */
  ez_pub_opts o;
  ez_pub_opts_init(&o);
  o.num_buffers = nbuf;
  o.buf_size = buf_size;
  for (int attempt = 0; attempt < 20; attempt++) {
    o.port = (uint16_t)th_free_port(); /* may be taken meanwhile by someone else: then retry */
    ez_pub *p = NULL;
    int rc = ez_pub_create(ctx, topic, &o, &p);
    if (rc == 0) {
      *port = o.port;
      return p;
    }
    assert_int_equal(rc, EZ_EADDR);
  }
  fail_msg("no free port for the publisher");
  return NULL;
}

/* The channel asks for a window with `ask`; publishes (acking what still goes the old way) until
 * X_WIN comes, checks it and the message after it (an X_TCP frame if x_tcp: the channel asked
 * for them). Returns the window's first message id. */
static uint64_t switch_with(int fd, uint8_t ask, ez_pub *p, const void *msg, size_t len,
                            uint64_t window, bool x_tcp) {
  rp_wr_u8(fd, ask);
  for (uint64_t id = 0; id < 1000; id++) {
    assert_int_equal(ez_publish(p, msg, len, TMO), 0);
    uint8_t cmd = rp_rd_u8(fd);
    if (cmd == EZI_X_WIN) {
      uint64_t start = rp_rd_u64(fd);
      assert_int_equal(start, id);
      assert_int_equal(rp_rd_u64(fd), window);
      assert_int_equal(rp_rd_u64(fd), (uint64_t)8 << 20);
      if (x_tcp)
        expect_x_tcp(fd, msg, len);
      else
        expect_tcp(fd, id, len);
      return start;
    }
    /* the ask was not read yet: this one leases its slot, as the protocol says */
    assert_int_equal(cmd, EZI_TX_TCP);
    assert_int_equal(rp_rd_u64(fd), id);
    uint64_t size = rp_rd_u64(fd);
    uint8_t body[256];
    assert_true(size <= sizeof body);
    assert_int_equal(rp_rd_exact(fd, body, (size_t)size, RP_TMO), 0);
    ack(fd, id);
  }
  fail_msg("no X_WIN after 1000 messages");
  return 0;
}

static uint64_t switch_to_window(int fd, ez_pub *p, const void *msg, size_t len, uint64_t window) {
  return switch_with(fd, EZI_X_WIN_ASK, p, msg, len, window, false);
}

/* The publisher's in_flight, from this process's profile. */
static long long pub_in_flight(ez_context *ctx) {
  ez_profile_data pd;
  char *json = NULL;
  assert_int_equal(ez_context_profile(ctx, 1.0, &json), 0);
  assert_int_equal(ez_profile_parse(json, &pd), 0);
  free(json);
  assert_int_equal(pd.n_publishers, 1);
  long long n = (long long)pd.publishers[0].backpressure.in_flight;
  ez_profile_data_free(&pd);
  return n;
}

/* Until the publisher's in_flight is n (acks arrive on the I/O thread). */
static void wait_in_flight(ez_context *ctx, long long n) {
  th_wait_count(pub_in_flight, ctx, n, TMO);
}

/* A window of 16 with 4 buffers: 16 messages go out unacknowledged; the 17th waits for the entry
 * of the first, and goes once that is acked. An ack in a window is for every message up to it;
 * stale, duplicate and never-sent ids are ignored. */
static void test_publisher_window(void **state) {
  (void)state;
  ez_context *ctx = th_open_ctx("16");
  uint16_t port;
  ez_pub *p = make_pub(ctx, "/win/pub", 4, 256, &port);
  int fd = fake_chan(port, 4);
  const char msg[] = "windowed";
  uint64_t s = switch_to_window(fd, p, msg, sizeof msg, 16);
  for (uint64_t id = s + 1; id < s + 16; id++) { /* 15 more, none acked: beyond 4 buffers */
    assert_int_equal(ez_publish(p, msg, sizeof msg, TMO), 0);
    expect_tcp(fd, id, sizeof msg);
  }
  assert_int_equal(pub_in_flight(ctx), 16);
  assert_int_equal(ez_publish(p, msg, sizeof msg, 200), EZ_ETIMEDOUT); /* its entry is s's */
  ack(fd, s + 16);                                                     /* never sent */
  assert_int_equal(ez_publish(p, msg, sizeof msg, 200), EZ_ETIMEDOUT);
  ack(fd, s);
  assert_int_equal(ez_publish(p, msg, sizeof msg, TMO), 0);
  expect_tcp(fd, s + 16, sizeof msg);
  ack(fd, s);     /* a duplicate */
  ack(fd, s + 5); /* s + 1 .. s + 5 */
  wait_in_flight(ctx, 11);
  ack(fd, s + 3);  /* stale */
  ack(fd, s + 17); /* never sent */
  ack(fd, s + 16);
  assert_int_equal(ez_pub_flush(p, TMO), 0);
  assert_int_equal(pub_in_flight(ctx), 0);
  assert_int_equal(ez_publish(p, msg, sizeof msg, TMO), 0);
  expect_tcp(fd, s + 17, sizeof msg);
  assert_int_equal(pub_in_flight(ctx), 1);
  /* Acks one by one while the publisher does not look: more than it keeps unapplied (marks). */
  for (uint64_t id = s + 18; id < s + 32; id++) {
    assert_int_equal(ez_publish(p, msg, sizeof msg, TMO), 0);
    expect_tcp(fd, id, sizeof msg);
  }
  for (uint64_t id = s + 17; id < s + 32; id++)
    ack(fd, id);
  wait_in_flight(ctx, 0);
  close(fd);
  ez_pub_destroy(p);
  ez_context_close(ctx);
}

/* Beyond num_buffers messages, at most 8 MiB are in flight: with 1 MiB messages and 4 buffers,
 * seven go out unacknowledged and the eighth waits; a channel that closes frees them all. */
static void test_publisher_byte_budget(void **state) {
  (void)state;
  ez_context *ctx = th_open_ctx("16");
  uint16_t port;
  const size_t big = (size_t)1 << 20;
  ez_pub *p = make_pub(ctx, "/win/bytes", 4, 2 * big, &port);
  int fd = fake_chan(port, 4);
  uint8_t *msg = calloc(1, big);
  assert_non_null(msg);
  const char small[] = "s";
  uint64_t s = switch_to_window(fd, p, small, sizeof small, 16);
  for (uint64_t id = s + 1; id < s + 8; id++) {
    assert_int_equal(ez_publish(p, msg, big, TMO), 0);
    expect_tcp(fd, id, big);
  }
  assert_int_equal(ez_publish(p, msg, big, 200), EZ_ETIMEDOUT);
  ack(fd, s);
  assert_int_equal(ez_publish(p, msg, big, 200), EZ_ETIMEDOUT); /* a small one made no room */
  ack(fd, s + 1);
  assert_int_equal(ez_publish(p, msg, big, TMO), 0);
  expect_tcp(fd, s + 8, big);
  close(fd); /* the channel leaves with 7 messages unacknowledged: they are free again */
  assert_int_equal(ez_pub_flush(p, TMO), 0);
  assert_int_equal(pub_in_flight(ctx), 0);
  free(msg);
  ez_pub_destroy(p);
  ez_context_close(ctx);
}

/* Reads `count` TX_TCP frames of `len`-byte messages, ids from 0, without acknowledging them (a
 * thread of its own: the publisher waits meanwhile). */
typedef struct reader {
  int fd;
  uint64_t count;
  size_t len;
  uint8_t *body;
  bool ok;
} reader;

static void *read_frames(void *arg) {
  reader *r = arg;
  r->ok = true;
  for (uint64_t id = 0; id < r->count && r->ok; id++) {
    uint8_t h[17];
    r->ok = rp_rd_exact(r->fd, h, sizeof h, RP_TMO) == 0 && h[0] == EZI_TX_TCP &&
            ezi_get_u64le(h + 1) == id && ezi_get_u64le(h + 9) == EZI_MARSHAL_BYTES_HDR + r->len &&
            rp_rd_exact(r->fd, r->body, EZI_MARSHAL_BYTES_HDR + r->len, RP_TMO) == 0;
  }
  return NULL;
}

#define BIG ((size_t)1 << 20)

/* A publisher of 64 slots, a channel played by hand that reads nothing, and 1 MiB messages
 * published until one times out: o->n went. */
typedef struct outbox_fixture {
  ez_context *ctx;
  ez_pub *p;
  int fd;
  uint8_t *msg;
  uint64_t n;
} outbox_fixture;

static void outbox_fill(outbox_fixture *o, const char *topic) {
  o->ctx = th_open_ctx(NULL);
  uint16_t port;
  o->p = make_pub(o->ctx, topic, 64, 2 * BIG, &port);
  o->fd = fake_chan(port, 64);
  o->msg = calloc(1, BIG);
  assert_non_null(o->msg);
  o->n = 0;
  while (o->n < 64 && ez_publish(o->p, o->msg, BIG, 300) == 0)
    o->n++;
  /* The socket's buffers hold a few MiB besides the outbox; without its bound all 64 went. */
  assert_true(o->n < 48);
}

static void outbox_end(outbox_fixture *o) {
  free(o->msg);
  ez_pub_destroy(o->p);
  ez_context_close(o->ctx);
}

/* A TCP channel that stops reading: its publisher's outbox fills up to EZI_OUTBOX_HIGH, and then
 * the publisher waits, as for a slot, instead of queueing a copy of every slot's message too (at
 * 16 MiB a message that was 512 MiB besides the segment). Reading alone wakes it again: no ack
 * comes meanwhile, and the slots are not what it waits for. */
static void test_publisher_outbox_bounded(void **state) {
  (void)state;
  outbox_fixture o;
  outbox_fill(&o, "/win/outbox");
  pthread_mutex_lock(&o.p->mu);
  uint64_t unsent = ezi_outbox_unsent(&o.p->chans[0]->out);
  pthread_mutex_unlock(&o.p->mu);
  assert_true(unsent >= EZI_OUTBOX_HIGH);
  assert_true(unsent < EZI_OUTBOX_HIGH + 17 + EZI_MARSHAL_BYTES_HDR + BIG);
  reader r = {
      .fd = o.fd, .count = o.n + 8, .len = BIG, .body = malloc(EZI_MARSHAL_BYTES_HDR + BIG)};
  assert_non_null(r.body);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, read_frames, &r), 0);
  for (int k = 0; k < 8; k++)
    assert_int_equal(ez_publish(o.p, o.msg, BIG, TMO), 0);
  pthread_join(t, NULL);
  assert_true(r.ok);
  for (uint64_t id = 0; id < o.n + 8; id++)
    ack(o.fd, id);
  wait_in_flight(o.ctx, 0);
  close(o.fd);
  free(r.body);
  outbox_end(&o);
}

typedef struct publisher_call {
  ez_pub *p;
  const void *msg;
  size_t len;
  int rc;
} publisher_call;

static void *publish_one(void *arg) {
  publisher_call *c = arg;
  c->rc = ez_publish(c->p, c->msg, c->len, TMO);
  return NULL;
}

/* A publisher that waits for a full outbox goes on when that channel leaves instead: the
 * outbox's bytes are gone with it. */
static void test_publisher_outbox_channel_leaves(void **state) {
  (void)state;
  outbox_fixture o;
  outbox_fill(&o, "/win/outbox-leaves");
  publisher_call c = {.p = o.p, .msg = o.msg, .len = BIG, .rc = 1};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, publish_one, &c), 0);
  th_sleep_ms(100); /* (it waits; if it has not started yet, it finds no channel) */
  int64_t t0 = th_now_ms();
  close(o.fd);
  pthread_join(t, NULL);
  assert_int_equal(c.rc, 0);
  assert_true(th_now_ms() - t0 < TMO / 2);
  wait_in_flight(o.ctx, 0);
  outbox_end(&o);
}

/* Asks a publisher does not know (one byte each, 0xe0 and up) are skipped, between acks too, so
 * that a later version of the channel can ask for more; the window's first ask (0xe7, from
 * before acks were cumulative: such a channel acks one by one) still gets a window. */
static void test_publisher_unknown_asks(void **state) {
  (void)state;
  ez_context *ctx = th_open_ctx("16");
  uint16_t port;
  ez_pub *p = make_pub(ctx, "/win/asks", 4, 256, &port);
  int fd = fake_chan(port, 4);
  rp_wr_u8(fd, EZI_X_ASK_MIN);
  rp_wr_u8(fd, 0xff);
  const char msg[] = "asks";
  uint64_t s = switch_with(fd, EZI_X_WIN_ASK_V1, p, msg, sizeof msg, 16, false);
  for (uint64_t id = s + 1; id < s + 8; id++) {
    assert_int_equal(ez_publish(p, msg, sizeof msg, TMO), 0);
    expect_tcp(fd, id, sizeof msg);
  }
  assert_int_equal(pub_in_flight(ctx), 8);
  for (uint64_t id = s; id < s + 8; id++) {
    ack(fd, id);
    rp_wr_u8(fd, (uint8_t)(0xec + id % 16)); /* 0xec..0xfb: none of them ours */
  }
  assert_int_equal(ez_pub_flush(p, TMO), 0);
  assert_int_equal(pub_in_flight(ctx), 0);
  assert_int_equal(ez_publish(p, msg, sizeof msg, TMO), 0); /* the link is still up */
  expect_tcp(fd, s + 8, sizeof msg);
  close(fd);
  ez_pub_destroy(p);
  ez_context_close(ctx);
}

/* A channel that asked for X_TCP gets its window's messages as X_TCP frames (wire.h: the payload
 * and its size, 5 bytes of framing); before the window, TX_TCP frames as the protocol has it. */
static void test_publisher_x_tcp(void **state) {
  (void)state;
  ez_context *ctx = th_open_ctx("16");
  uint16_t port;
  ez_pub *p = make_pub(ctx, "/win/xtcp", 4, 256, &port);
  int fd = fake_chan(port, 4);
  rp_wr_u8(fd, EZI_X_TCP_ASK); /* (before the window's ask: asks may come in any order) */
  const char msg[] = "compact frames";
  uint64_t s = switch_with(fd, EZI_X_WIN_ASK, p, msg, sizeof msg, 16, true);
  for (uint64_t id = s + 1; id < s + 16; id++) { /* the whole window, unacknowledged */
    /* Each payload its own: X_TCP copies from the caller's buffer, not from a slot that no
     * reader needs (so it is never written), which a stale slot would show here. */
    char one[32];
    int n = snprintf(one, sizeof one, "compact frame %llu", (unsigned long long)id);
    assert_int_equal(ez_publish(p, one, (size_t)n, TMO), 0);
    expect_x_tcp(fd, one, (size_t)n);
  }
  assert_int_equal(pub_in_flight(ctx), 16);
  assert_int_equal(ez_publish(p, msg, sizeof msg, 200), EZ_ETIMEDOUT);
  ack(fd, s + 15);
  assert_int_equal(ez_pub_flush(p, TMO), 0);
  assert_int_equal(pub_in_flight(ctx), 0);
  close(fd);
  ez_pub_destroy(p);
  ez_context_close(ctx);
}

/* With the window off on the publisher's side, an ask changes nothing: 4 buffers, 4 messages. */
static void test_publisher_window_off(void **state) {
  (void)state;
  ez_context *ctx = th_open_ctx("0");
  uint16_t port;
  ez_pub *p = make_pub(ctx, "/win/off", 4, 256, &port);
  int fd = fake_chan(port, 4);
  rp_wr_u8(fd, EZI_X_WIN_ASK);
  const char msg[] = "plain";
  for (uint64_t id = 0; id < 4; id++) {
    assert_int_equal(ez_publish(p, msg, sizeof msg, TMO), 0);
    expect_tcp(fd, id, sizeof msg);
  }
  assert_int_equal(ez_publish(p, msg, sizeof msg, 200), EZ_ETIMEDOUT);
  ack(fd, 0);
  assert_int_equal(ez_publish(p, msg, sizeof msg, TMO), 0);
  expect_tcp(fd, 4, sizeof msg);
  close(fd);
  ez_pub_destroy(p);
  ez_context_close(ctx);
}

/* Holds a context's I/O thread in a call until released (ezi_ctx_call, from a thread of its own).
 */
typedef struct io_hold {
  ez_context *ctx;
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool held, release;
} io_hold;

static void hold_fn(void *arg) {
  io_hold *h = arg;
  pthread_mutex_lock(&h->mu);
  h->held = true;
  pthread_cond_broadcast(&h->cv);
  while (!h->release)
    pthread_cond_wait(&h->cv, &h->mu);
  pthread_mutex_unlock(&h->mu);
}

static void *hold_main(void *arg) {
  io_hold *h = arg;
  ezi_ctx_call(h->ctx, hold_fn, h);
  return NULL;
}

static void io_hold_start(io_hold *h, ez_context *ctx) {
  *h = (io_hold){.ctx = ctx};
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
  assert_int_equal(pthread_create(&h->th, NULL, hold_main, h), 0);
  pthread_mutex_lock(&h->mu);
  while (!h->held)
    pthread_cond_wait(&h->cv, &h->mu);
  pthread_mutex_unlock(&h->mu);
}

static void io_hold_end(io_hold *h) {
  pthread_mutex_lock(&h->mu);
  h->release = true;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
  pthread_join(h->th, NULL);
  pthread_mutex_destroy(&h->mu);
  pthread_cond_destroy(&h->cv);
}

/* A publisher whose I/O thread is behind (here: held in a call) writes its outbox itself once a
 * batch is pending (EZI_OUTBOX_BATCH bytes): the channel gets every whole frame of those bytes
 * while the I/O thread still writes nothing, and the rest once it runs again, in order. */
static void test_publisher_writes_batches(void **state) {
  (void)state;
  enum { N = 600, LEN = 64 };
  const size_t frame = 17 + EZI_MARSHAL_BYTES_HDR + LEN;
  ez_context *ctx = th_open_ctx("0"); /* no window: TX_TCP frames, each holding its slot */
  uint16_t port;
  ez_pub *p = make_pub(ctx, "/win/batches", N, 256, &port);
  int fd = fake_chan(port, N);
  uint8_t msg[LEN] = {0};
  assert_int_equal(ez_publish(p, msg, LEN, TMO), 0);
  expect_tcp(fd, 0, LEN); /* the link is up: the I/O thread wrote the first */
  io_hold h;
  io_hold_start(&h, ctx);
  for (int k = 1; k < N; k++)
    assert_int_equal(ez_publish(p, msg, LEN, TMO), 0);
  /* (N - 1) frames were appended; all but the last partial batch went out from this thread. */
  uint64_t batches = ((N - 1) * frame) / EZI_OUTBOX_BATCH,
           whole = batches * EZI_OUTBOX_BATCH / frame;
  assert_true(whole >= 250);
  for (uint64_t id = 1; id <= whole; id++)
    expect_tcp(fd, id, LEN);
  io_hold_end(&h);
  for (uint64_t id = whole + 1; id < N; id++)
    expect_tcp(fd, id, LEN);
  close(fd);
  ez_pub_destroy(p);
  ez_context_close(ctx);
}

/* The same with the channel gone first: the publishing thread's write of a batch fails, which
 * kills the outbox (later frames are dropped, not retried), and the I/O thread's flush reports
 * the link lost once it runs again; the publisher drops the channel and goes on publishing. */
static void test_publisher_batch_to_closed_peer(void **state) {
  (void)state;
  enum { N = 600, LEN = 64 };
  ez_context *ctx = th_open_ctx("0");
  uint16_t port;
  ez_pub *p = make_pub(ctx, "/win/batch-closed", N, 256, &port);
  int fd = fake_chan(port, N);
  uint8_t msg[LEN] = {0};
  assert_int_equal(ez_publish(p, msg, LEN, TMO), 0);
  expect_tcp(fd, 0, LEN);
  io_hold h;
  io_hold_start(&h, ctx);
  struct linger lg = {1, 0}; /* a reset, not a FIN: the next send fails at once */
  assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
  close(fd);
  for (int k = 1; k < N; k++) /* past several batches: nothing blocks, nothing kills us */
    assert_int_equal(ez_publish(p, msg, LEN, TMO), 0);
  assert_int_equal(ez_pub_num_channels(p), 1); /* (only the I/O thread closes it) */
  io_hold_end(&h);
  int64_t end = th_now_ms() + TMO;
  while (ez_pub_num_channels(p) != 0 && th_now_ms() < end)
    th_sleep_ms(1);
  assert_int_equal(ez_pub_num_channels(p), 0);
  assert_int_equal(ez_publish(p, msg, LEN, TMO), 0); /* its slots were freed with it */
  ez_pub_destroy(p);
  ez_context_close(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_publisher_window, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_publisher_byte_budget, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_publisher_window_off, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_publisher_writes_batches, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_publisher_batch_to_closed_peer, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_publisher_outbox_bounded, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_publisher_outbox_channel_leaves, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_publisher_unknown_asks, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_publisher_x_tcp, th_setup, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
