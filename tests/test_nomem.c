/* Out of memory on the data path. This binary is linked with
 * -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc (tests/CMakeLists.txt): every malloc, calloc and
 * realloc of the library and of this file goes through the wrappers below. malloc, calloc and
 * realloc fail the next `g_fail_count` allocations of exactly `g_fail_size` bytes (a size no other
 * allocation here has, so the failure lands where the test aims it: a message read straight into
 * its buffer grows it to exactly its size with realloc); realloc also fails the next
 * `g_realloc_fails` calls for REALLOC_FAIL_MIN bytes or more made by a thread that asked for it
 * (t_realloc_fail).
 *
 * - A TCP stream from an ezmsg-c publisher in another process: the buffer for an arriving
 *   message without a window, small, large or read straight into it (channel.c, chanlink.c),
 *   the TCP window's bookkeeping when it starts, or a chunk its reads go to (src/rx/tcpring.c)
 *   cannot be allocated. The link is dropped
 *   with a warning, the subscriber joins again by itself, and the stream goes on: every message
 *   received is intact and in order, and messages keep coming after the failure.
 * - A large in-process message whose hot buffer cannot be allocated (src/pub/pubhot.c): ez_publish
 *   puts it in its slot instead, and the subscriber gets it intact.
 * - A publisher in this process whose outbox to a TCP channel cannot grow (src/core/context.c): the
 *   frame is lost with the link, the subscriber in another process joins again, and what it
 *   prints is whole messages in order, the stream going on after the failure.
 * - The tick that expires sampled stamps (src/base/stamptick.c) cannot get its timer or the post
 * that starts it: it stops, and the next sampled stamp starts it again. */
#include "chan/channel.h"
#include "harness.h"
#include "base/loop.h"
#include "base/telclock.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TMO 30000

void *__real_malloc(size_t n);
void *__wrap_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__wrap_realloc(void *p, size_t n);

static size_t g_fail_size; /* atomic */
static int g_fail_skip;    /* atomic: allocations of that size still to let through first */
static int g_fail_count;   /* atomic: failures still to make */
static int g_failed;       /* atomic: failures made */
static size_t g_big_size;  /* atomic: allocations larger than this are counted ... */
static int g_big;          /* atomic: ... here */

/* Whether this allocation of n bytes is one to fail. */
static bool fail_this(size_t n) {
  if (n != __atomic_load_n(&g_fail_size, __ATOMIC_SEQ_CST) ||
      __atomic_sub_fetch(&g_fail_skip, 1, __ATOMIC_SEQ_CST) >= 0 ||
      __atomic_sub_fetch(&g_fail_count, 1, __ATOMIC_SEQ_CST) < 0)
    return false;
  __atomic_add_fetch(&g_failed, 1, __ATOMIC_SEQ_CST);
  return true;
}

void *__wrap_malloc(size_t n) {
  size_t big = __atomic_load_n(&g_big_size, __ATOMIC_SEQ_CST);
  if (big && n > big) __atomic_add_fetch(&g_big, 1, __ATOMIC_SEQ_CST);
  return fail_this(n) ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size) {
  return n && size <= SIZE_MAX / n && fail_this(n * size) ? NULL : __real_calloc(n, size);
}

#define REALLOC_FAIL_MIN 4096
static _Thread_local bool t_realloc_fail;       /* this thread's reallocs may fail */
static int g_realloc_fails;                     /* atomic: failures still to make */
static int g_realloc_failed;                    /* atomic: failures made */
static size_t g_realloc_min = REALLOC_FAIL_MIN; /* atomic: ... of this many bytes or more */

void *__wrap_realloc(void *p, size_t n) {
  if (fail_this(n)) return NULL; /* a buffer that grows to that size (chanlink.c's direct read) */
  if (t_realloc_fail && n >= __atomic_load_n(&g_realloc_min, __ATOMIC_SEQ_CST) &&
      __atomic_sub_fetch(&g_realloc_fails, 1, __ATOMIC_SEQ_CST) >= 0) {
    __atomic_add_fetch(&g_realloc_failed, 1, __ATOMIC_SEQ_CST);
    return NULL;
  }
  return __real_realloc(p, n);
}

/* Fails `count` allocations of `size` bytes, after `skip` of them went through. */
static void fail_after(size_t size, int skip, int count) {
  __atomic_store_n(&g_failed, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&g_fail_skip, skip, __ATOMIC_SEQ_CST);
  __atomic_store_n(&g_fail_count, count, __ATOMIC_SEQ_CST);
  __atomic_store_n(&g_fail_size, size, __ATOMIC_SEQ_CST);
}

static void fail_none(void) {
  __atomic_store_n(&g_fail_size, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&g_fail_count, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&g_realloc_fails, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&g_realloc_min, REALLOC_FAIL_MIN, __ATOMIC_SEQ_CST);
  t_realloc_fail = false;
}

static int teardown(void **state) {
  fail_none();
  return th_teardown(state);
}

/* `ezmsg pub --size N` payloads: bytes 0..7 the message number (little-endian), byte i: i % 256.
 * Returns the number, or UINT64_MAX if the payload is not one. */
static uint64_t cli_payload(const ez_msg *m, size_t n) {
  if (m->len != n) return UINT64_MAX;
  const uint8_t *b = m->data;
  uint64_t k = 0;
  for (int i = 7; i >= 0; i--)
    k = (k << 8) | b[i];
  for (size_t i = 8; i < n; i++)
    if (b[i] != (uint8_t)(i % 256)) return UINT64_MAX;
  return k;
}

#define TCP_PAYLOAD 3333
/* The marshalled message: the buffer a channel allocates for it. */
#define FRAME_BYTES (TCP_PAYLOAD + 58)
/* A payload whose buffer is larger than the channel keeps among its small spares (channel.h). */
#define BIG_PAYLOAD 20000
#define BIG_FRAME_BYTES (BIG_PAYLOAD + 58)
/* A message read straight into its buffer (chanlink.c, from EZI_DIRECT_READ_MIN bytes on). */
#define DIRECT_PAYLOAD ((int)EZI_DIRECT_READ_MIN)
#define DIRECT_FRAME_BYTES ((size_t)DIRECT_PAYLOAD + 58)
/* The publisher proposes a window of this many messages; the channel then allocates room for the
 * size of each when the window starts (tcpring.c, ezi_tcpring_start). */
#define TCP_WINDOW 1000
#define WIN_BYTES (TCP_WINDOW * sizeof(uint64_t))

/* An `ezmsg pub --force-tcp --size payload` stream from another process, whose TCP window is
 * `window` messages, with an allocation of `fail_size` bytes failing once in this process, after
 * `skip` of them went through: the link drops, the subscriber joins again, and the stream goes
 * on, every message received intact and in order. */
static void tcp_stream_survives(int payload, size_t fail_size, int skip, int window) {
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(th_addr, &ctx), 0);
  ez_sub *s = NULL;
  assert_int_equal(ez_sub_create(ctx, "/nomem/tcp", NULL, &s), 0);
  fail_after(fail_size, skip, 1);
  char size[16], win[16];
  snprintf(size, sizeof size, "%d", payload);
  snprintf(win, sizeof win, "%d", window);
  setenv(EZ_TCP_WINDOW_ENV, win, 1); /* for the publisher process only */
  pid_t pub = th_spawn_cli(-1, "pub", "--address", th_addr, "--force-tcp", "--size", size,
                           "--count", "0", "--rate", "2000", "/nomem/tcp", NULL);
  unsetenv(EZ_TCP_WINDOW_ENV);
  uint64_t last = UINT64_MAX, after = 0;
  int64_t end = th_now_ms() + TMO;
  while (after < 200 && th_now_ms() < end) {
    ez_msg m;
    if (ez_recv(s, &m, 1000)) continue;
    uint64_t k = cli_payload(&m, (size_t)payload);
    ez_msg_release(&m);
    if (k == UINT64_MAX) fail_msg("a damaged message");
    if (last != UINT64_MAX && k <= last)
      fail_msg("message %llu after %llu", (unsigned long long)k, (unsigned long long)last);
    last = k;
    if (__atomic_load_n(&g_failed, __ATOMIC_SEQ_CST)) after++;
  }
  assert_int_equal(th_stop(pub, SIGTERM, 5000) & 0x7f, 0);
  assert_int_equal(__atomic_load_n(&g_failed, __ATOMIC_SEQ_CST), 1);
  assert_true(after >= 200); /* the stream went on after the failure */
  fail_none();
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

/* The buffer of an arriving message, without a window (a slot's). */
static void test_tcp_buffer_fails(void **state) {
  (void)state;
  tcp_stream_survives(TCP_PAYLOAD, FRAME_BYTES, 0, 0);
}

/* The same, for a buffer larger than the small spares: it comes from the one large spare, or,
 * as here (the first), from malloc. */
static void test_tcp_big_buffer_fails(void **state) {
  (void)state;
  tcp_stream_survives(BIG_PAYLOAD, BIG_FRAME_BYTES, 0, 0);
}

/* The same, for the buffer a large message is read straight into, taken when its frame's header
 * is in: the part of the message already read is dropped with the link. */
static void test_tcp_direct_read_buffer_fails(void **state) {
  (void)state;
  tcp_stream_survives(DIRECT_PAYLOAD, DIRECT_FRAME_BYTES, 0, 0);
}

/* The window's own allocations when it starts: the channel stays without one until it joins
 * again. */
static void test_tcp_window_start_fails(void **state) {
  (void)state;
  tcp_stream_survives(TCP_PAYLOAD, WIN_BYTES, 0, TCP_WINDOW);
}

/* The first chunk for the window's reads, allocated when the window starts. */
static void test_tcp_first_chunk_fails(void **state) {
  (void)state;
  tcp_stream_survives(TCP_PAYLOAD, EZI_CHUNK_ALLOC, 0, TCP_WINDOW);
}

/* The second chunk: the first is still current when a frame does not fit in its rest (256 KiB
 * are 77 messages here), so no spare can serve; the read that needs it fails. */
static void test_tcp_next_chunk_fails(void **state) {
  (void)state;
  tcp_stream_survives(TCP_PAYLOAD, EZI_CHUNK_ALLOC, 1, TCP_WINDOW);
}

/* Not out of memory, but what the same allocator sees: a stream of messages larger than a chunk
 * does not allocate chunks per message. Each one's chunk is kept when it is released and serves a
 * later one (a regression: standard chunks crowded the large ones out of the spares, and a
 * message that did not fit got a new chunk at every read while it arrived, ~7 per message). A
 * window of 4 messages bounds the chunks in use at once: 4 held, and the one being read into.
 * Their 5 MiB fit the spares' budget (8 MiB), so however late this process releases, the chunks
 * that exist are reused, and a new one is needed only when more are in use at once than ever
 * before: at most 5 times, at most 3 allocations each (a frame grows from 256 KiB by doubling). */
#define LARGE 1000000

static void test_large_messages_reuse_chunks(void **state) {
  (void)state;
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(th_addr, &ctx), 0);
  ez_sub *s = NULL;
  assert_int_equal(ez_sub_create(ctx, "/nomem/large", NULL, &s), 0);
  char size[16];
  snprintf(size, sizeof size, "%d", LARGE);
  setenv(EZ_TCP_WINDOW_ENV, "4", 1); /* for the publisher process only (> its 2 buffers) */
  pid_t pub =
      th_spawn_cli(-1, "pub", "--address", th_addr, "--force-tcp", "--size", size, "--num-buffers",
                   "2", "--count", "0", "--rate", "1000", "/nomem/large", NULL);
  unsetenv(EZ_TCP_WINDOW_ENV);
  /* Counted from the 10th message after the window is on. */
  int n = 0, counted = 0, warm = -1;
  int64_t end = th_now_ms() + TMO;
  while (counted < 200 && th_now_ms() < end) {
    ez_msg m;
    if (ez_recv(s, &m, 1000)) continue;
    uint64_t k = cli_payload(&m, LARGE);
    ez_msg_release(&m);
    if (k == UINT64_MAX) fail_msg("a damaged message");
    n++;
    if (warm < 0 && th_chan_window(ctx) == 4) warm = n + 10;
    if (n == warm) __atomic_store_n(&g_big_size, (size_t)EZI_CHUNK_ALLOC, __ATOMIC_SEQ_CST);
    if (warm >= 0 && n > warm) counted++;
  }
  __atomic_store_n(&g_big_size, 0, __ATOMIC_SEQ_CST);
  int big = __atomic_load_n(&g_big, __ATOMIC_SEQ_CST);
  assert_int_equal(th_stop(pub, SIGTERM, 5000) & 0x7f, 0);
  print_message(
      "    %d messages of %d bytes in a window of 4: %d allocations larger than a chunk\n", counted,
      LARGE, big);
  assert_int_equal(counted, 200);
  assert_true(big <= 15); /* (the bug: 329 in 200 messages, with a larger window) */
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

#define BIG 300000

static void test_hot_buffer_fails(void **state) {
  (void)state;
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(th_addr, &ctx), 0);
  ez_sub *s = NULL;
  assert_int_equal(ez_sub_create(ctx, "/nomem/hot", NULL, &s), 0);
  ez_pub *p = NULL;
  assert_int_equal(ez_pub_create(ctx, "/nomem/hot", NULL, &p), 0);
  uint8_t *b = malloc(BIG);
  assert_non_null(b);
  fail_after(BIG, 0, 1000); /* no hot buffer can be had at all */
  for (int round = 0; round < 2; round++) {
    for (uint32_t k = 0; k < 20; k++) {
      memset(b, (int)(k + 1 + 40 * round), BIG);
      assert_int_equal(ez_publish(p, b, BIG, TMO), 0);
      ez_msg m;
      assert_int_equal(ez_recv(s, &m, TMO), 0);
      assert_int_equal(m.len, BIG);
      const uint8_t *d = m.data;
      for (size_t i = 0; i < BIG; i++)
        if (d[i] != (uint8_t)(k + 1 + 40 * round)) fail_msg("message %u, byte %zu", k, i);
      ez_msg_release(&m);
    }
    if (round == 0) {
      assert_true(__atomic_load_n(&g_failed, __ATOMIC_SEQ_CST) > 0); /* it tried, and coped */
      fail_none(); /* the second round gets its hot buffers */
    }
  }
  free(b);
  ez_pub_destroy(p);
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

/* ---- the publisher's outbox ---------------------------------------------------------------- */

/* Text messages (so that `ezmsg sub` prints them as they are): 10 digits, a space, then letters
 * that depend on the number. 8000 bytes: below the size a publisher writes to an idle socket
 * directly, so every frame goes through the outbox. */
#define LINE 8000

static void line_fill(char *b, uint64_t k) {
  snprintf(b, LINE + 1, "%010llu ", (unsigned long long)k);
  for (size_t i = 11; i < LINE; i++)
    b[i] = (char)('a' + (k + i) % 26);
}

/* The number of a line `ezmsg sub` printed, or UINT64_MAX if it is not a whole message. */
static uint64_t line_number(const char *l, size_t n) {
  if (n != LINE) return UINT64_MAX;
  char *end;
  uint64_t k = strtoull(l, &end, 10);
  if (end != l + 10 || *end != ' ') return UINT64_MAX;
  for (size_t i = 11; i < LINE; i++)
    if (l[i] != (char)('a' + (k + i) % 26)) return UINT64_MAX;
  return k;
}

typedef struct reader {
  int fd;
  int lines, after, damaged, disorder; /* atomic */
  uint64_t last;
} reader;

/* Reads the subscriber's lines until EOF: counts them, and those after the failure. */
static void *read_lines(void *arg) {
  reader *r = arg;
  FILE *f = fdopen(r->fd, "r");
  char *l = NULL;
  size_t cap = 0;
  ssize_t n;
  r->last = UINT64_MAX;
  while (f && (n = getline(&l, &cap, f)) > 0) {
    if (l[n - 1] != '\n') break; /* a last line cut short by our SIGTERM */
    n--;
    uint64_t k = line_number(l, (size_t)n);
    if (k == UINT64_MAX)
      __atomic_add_fetch(&r->damaged, 1, __ATOMIC_SEQ_CST);
    else if (r->last != UINT64_MAX && k <= r->last)
      __atomic_add_fetch(&r->disorder, 1, __ATOMIC_SEQ_CST);
    r->last = k;
    __atomic_add_fetch(&r->lines, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&g_realloc_failed, __ATOMIC_SEQ_CST))
      __atomic_add_fetch(&r->after, 1, __ATOMIC_SEQ_CST);
  }
  free(l);
  if (f) fclose(f);
  return NULL;
}

static void test_outbox_grow_fails(void **state) {
  (void)state;
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(th_addr, &ctx), 0);
  ez_pub_opts o;
  ez_pub_opts_init(&o);
  o.force_tcp = true;
  ez_pub *p = NULL;
  assert_int_equal(ez_pub_create(ctx, "/nomem/outbox", &o, &p), 0);
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t sub = th_spawn_cli(fds[1], "sub", "--address", th_addr, "/nomem/outbox", NULL);
  close(fds[1]);
  reader r = {.fd = fds[0]};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, read_lines, &r), 0);
  int64_t end = th_now_ms() + TMO;
  while (ez_pub_num_channels(p) < 1 && th_now_ms() < end)
    th_sleep_ms(10);
  assert_int_equal(ez_pub_num_channels(p), 1);
  /* This thread's first realloc of 4 KiB or more is the outbox's for the first frame. */
  __atomic_store_n(&g_realloc_failed, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&g_realloc_fails, 1, __ATOMIC_SEQ_CST);
  t_realloc_fail = true;
  char *b = malloc(LINE + 1);
  assert_non_null(b);
  uint64_t k = 0;
  bool dropped = false; /* the link went after the failure: the frame was not lost silently */
  while (__atomic_load_n(&r.after, __ATOMIC_SEQ_CST) < 200 && th_now_ms() < end) {
    line_fill(b, k);
    int rc = ez_publish(p, b, LINE, 1000);
    if (rc == EZ_ETIMEDOUT) continue; /* nothing sent: the same number again */
    assert_int_equal(rc, 0);
    k++;
    if (!ez_pub_num_channels(p)) { /* between the link's drop and the rejoin */
      dropped |= __atomic_load_n(&g_realloc_failed, __ATOMIC_SEQ_CST) > 0;
      th_sleep_ms(1);
    }
  }
  fail_none();
  int failed = __atomic_load_n(&g_realloc_failed, __ATOMIC_SEQ_CST);
  assert_int_equal(th_stop(sub, SIGTERM, 5000) & 0x7f, 0);
  pthread_join(t, NULL);
  print_message("    %llu published, %d lines printed, %d after the failure\n",
                (unsigned long long)k, r.lines, r.after);
  assert_int_equal(failed, 1);
  assert_true(dropped);
  assert_int_equal(r.damaged, 0);
  assert_int_equal(r.disorder, 0);
  assert_true(r.after >= 200); /* the stream went on after the failure */
  free(b);
  ez_pub_destroy(p);
  ez_context_close(ctx);
}

/* ---- the stamp tick (stamptick.c) ----------------------------------------------------------
 * Its loop's timer or the post that starts it cannot be allocated: the tick stops, and the next
 * sampled stamp starts it again, so stamps still expire. Without a server in the process, the
 * test's own loop is the only other thread, idle but for the tick. */

static void *loop_failing_reallocs(void *arg) {
  t_realloc_fail = true; /* its first timer array is the tick's */
  ezi_loop_run(arg);
  return NULL;
}

static bool tick_wait(ezi_tick *k, bool (*done)(ezi_tick *)) {
  int64_t end = th_now_ms() + TMO;
  while (!done(k) && th_now_ms() < end)
    th_sleep_ms(2);
  return done(k);
}
static bool tick_stopped(ezi_tick *k) { return !__atomic_load_n(&k->armed, __ATOMIC_SEQ_CST); }
static bool tick_advanced(ezi_tick *k) { return __atomic_load_n(&k->n, __ATOMIC_SEQ_CST) > 0; }

/* timer: its timer array cannot be allocated on the loop thread; else the start's post fails. */
static void tick_restarts(bool timer) {
  ezi_loop *l = NULL;
  assert_int_equal(ezi_loop_new(&l), 0);
  if (timer) {
    __atomic_store_n(&g_realloc_failed, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&g_realloc_min, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&g_realloc_fails, 1, __ATOMIC_SEQ_CST);
  }
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, loop_failing_reallocs, l), 0);
  ezi_tick *k = ezi_tick_new(l);
  assert_non_null(k);
  if (!timer) fail_after(3 * sizeof(void *), 0, 1); /* loop.c's post: fn, arg, next */
  ezi_tick_note(k);                                 /* a sampled stamp: start the timer */
  if (!timer) fail_none();
  assert_true(tick_wait(k, tick_stopped));
  if (timer) /* (the start's post may still be on its way to the failing realloc) */
    while (!__atomic_load_n(&g_realloc_failed, __ATOMIC_SEQ_CST))
      th_sleep_ms(2);
  assert_int_equal(timer ? __atomic_load_n(&g_realloc_failed, __ATOMIC_SEQ_CST)
                         : __atomic_load_n(&g_failed, __ATOMIC_SEQ_CST),
                   1);
  assert_true(tick_wait(k, tick_stopped)); /* it gave up: nothing advances the tick now */
  th_sleep_ms((int)(3 * EZI_TICK_NS / 1000000));
  assert_false(tick_advanced(k));
  ezi_tick_note(k); /* the next sampled stamp */
  assert_true(tick_wait(k, tick_advanced));
  fail_none();
  ezi_loop_stop(l);
  pthread_join(t, NULL);
  ezi_tick_free(k);
  ezi_loop_free(l);
}

static int fail_none_teardown(void **state) {
  (void)state;
  fail_none();
  return 0;
}

/* ez_context_open when an allocation of the tick's size fails, each such allocation of the open
 * in turn (the tick's own among them, stamptick.c): EZ_ENOMEM with nothing left behind (ASan
 * checks), until the open goes through. */
static void test_context_open_fails(void **state) {
  (void)state;
  int skip, enomem = 0;
  for (skip = 0; skip < 64; skip++) {
    fail_after(sizeof(ezi_tick), skip, 1);
    ez_context *ctx = NULL;
    int rc = ez_context_open(th_addr, &ctx);
    int failed = __atomic_load_n(&g_failed, __ATOMIC_SEQ_CST);
    fail_none();
    if (rc == 0) {
      ez_context_close(ctx);
      if (!failed) break; /* every allocation of that size went through */
      continue;           /* (one made later, on the context's own thread) */
    }
    assert_int_equal(rc, EZ_ENOMEM);
    assert_int_equal(failed, 1);
    enomem++;
  }
  assert_true(skip < 64);
  assert_true(enomem >= 1);
}

static void test_tick_timer_fails(void **state) {
  (void)state;
  tick_restarts(true);
}

static void test_tick_start_post_fails(void **state) {
  (void)state;
  tick_restarts(false);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_tcp_buffer_fails, th_setup, teardown),
      cmocka_unit_test_setup_teardown(test_tcp_big_buffer_fails, th_setup, teardown),
      cmocka_unit_test_setup_teardown(test_tcp_direct_read_buffer_fails, th_setup, teardown),
      cmocka_unit_test_setup_teardown(test_tcp_window_start_fails, th_setup, teardown),
      cmocka_unit_test_setup_teardown(test_tcp_first_chunk_fails, th_setup, teardown),
      cmocka_unit_test_setup_teardown(test_tcp_next_chunk_fails, th_setup, teardown),
      cmocka_unit_test_setup_teardown(test_hot_buffer_fails, th_setup, teardown),
      cmocka_unit_test_setup_teardown(test_outbox_grow_fails, th_setup, teardown),
      cmocka_unit_test_setup_teardown(test_large_messages_reuse_chunks, th_setup, teardown),
      cmocka_unit_test_setup_teardown(test_context_open_fails, th_setup, teardown),
      cmocka_unit_test_teardown(test_tick_timer_fails, fail_none_teardown),
      cmocka_unit_test_teardown(test_tick_start_post_fails, fail_none_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
