/* The in-process path (src/ring/localchan.c): publisher and subscribers of one process exchange
 * messages through the publisher's slots without a lock between them. These tests drive it from
 * several threads at once (run under ThreadSanitizer too) and check what must hold whatever the
 * interleaving: every subscriber gets every message once, in order, intact; a subscriber that
 * leaves gives its slots back; views outlive their publisher; flush and backpressure wait for
 * views. */
#include "harness.h"
#include "pub/pubstate.h"

#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define TMO 30000 /* for anything that should happen (ms): generous, never a speed test */
#define N_MSGS 20000
#define MSG_LEN 48

static ez_context *open_ctx(void) {
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(th_addr, &ctx), 0);
  return ctx;
}

static ez_pub *make_pub(ez_context *ctx, const char *topic, uint32_t nbuf) {
  ez_pub_opts o;
  ez_pub_opts_init(&o);
  o.num_buffers = nbuf;
  ez_pub *p = NULL;
  assert_int_equal(ez_pub_create(ctx, topic, &o, &p), 0);
  return p;
}

static ez_sub *make_sub(ez_context *ctx, const char *topic) {
  ez_sub *s = NULL;
  assert_int_equal(ez_sub_create(ctx, topic, NULL, &s), 0);
  return s;
}

/* Message k: its number, then bytes that depend on k and the position. */
static void fill(uint8_t *b, uint64_t k) {
  memcpy(b, &k, 8);
  for (size_t i = 8; i < MSG_LEN; i++)
    b[i] = (uint8_t)(k * 31u + i);
}

/* 0 if m is message k intact; else a reason in why. */
static int check(const void *data, size_t len, uint64_t k, char *why, size_t cap) {
  uint8_t want[MSG_LEN];
  fill(want, k);
  uint64_t got = 0;
  if (len >= 8) memcpy(&got, data, 8);
  if (len != MSG_LEN || memcmp(data, want, MSG_LEN)) {
    snprintf(why, cap, "expected message %llu, got %zu bytes numbered %llu", (unsigned long long)k,
             len, (unsigned long long)got);
    return -1;
  }
  return 0;
}

/* ---- many threads ---------------------------------------------------------------------------- */

enum { BLOCKING_HOLDS, FD_POLLING, COPY_TIMED };

typedef struct receiver {
  ez_sub *sub;
  int how;
  bool late;           /* joined while messages flowed: starts with any message up to N_MSGS / 4 */
  uint64_t first, got; /* the first message it must get, and how many it got */
  char why[160];       /* first failure, empty if none */
} receiver;

static void *receive(void *arg) {
  receiver *r = arg;
  ez_msg held[2];
  size_t n_held = 0;
  int fd = r->how == FD_POLLING ? ez_sub_fd(r->sub) : -1;
  int64_t last_progress = th_now_ms();
  while (r->got < N_MSGS - r->first && !r->why[0]) {
    uint64_t k = r->first + r->got;
    int rc;
    if (r->how == COPY_TIMED) {
      uint8_t buf[MSG_LEN];
      size_t len = 0;
      rc = ez_recv_copy(r->sub, buf, sizeof buf, &len, 5);
      if (rc == EZ_ETIMEDOUT && th_now_ms() - last_progress < TMO) continue; /* on purpose */
      last_progress = th_now_ms();
      if (!rc && !check(buf, len, k, r->why, sizeof r->why)) r->got++;
    } else {
      if (r->how == FD_POLLING) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, TMO) != 1) {
          snprintf(r->why, sizeof r->why, "fd not readable for message %llu",
                   (unsigned long long)k);
          break;
        }
      }
      ez_msg m;
      rc = ez_recv(r->sub, &m, r->how == FD_POLLING ? 0 : TMO);
      if (rc == EZ_EAGAIN && r->how == FD_POLLING) continue; /* a stale wake-up is allowed */
      if (!rc && r->late && !r->got) { /* its first message sets where it starts */
        uint64_t k0 = UINT64_MAX;
        if (m.len >= 8) memcpy(&k0, m.data, 8);
        if (k0 <= N_MSGS / 4) k = r->first = k0;
      }
      if (!rc && !check(m.data, m.len, k, r->why, sizeof r->why)) {
        r->got++;
        held[n_held++] = m;
        if (r->how == FD_POLLING || n_held == 2) { /* BLOCKING_HOLDS keeps two views at once */
          ez_msg_release(&held[0]);
          held[0] = held[1];
          n_held--;
        }
      } else if (!rc) {
        ez_msg_release(&m);
      }
    }
    if (rc && !r->why[0])
      snprintf(r->why, sizeof r->why, "recv: %s at message %llu", ez_strerror(rc),
               (unsigned long long)k);
  }
  while (n_held)
    ez_msg_release(&held[--n_held]);
  return NULL;
}

typedef struct publisher {
  ez_pub *pub;
  atomic_int late_joined; /* the publisher waits for it before message N_MSGS / 4 */
  int rc;
} publisher;

static void *publish_all(void *arg) {
  publisher *p = arg;
  for (uint64_t k = 0; k < N_MSGS && !p->rc; k++) {
    if (k == N_MSGS / 4)
      while (!atomic_load(&p->late_joined))
        th_sleep_ms(1);
    uint8_t b[MSG_LEN];
    fill(b, k);
    if (k % 2) { /* half through a loan */
      void *slot;
      p->rc = ez_pub_loan(p->pub, MSG_LEN, &slot, TMO);
      if (!p->rc) {
        memcpy(slot, b, MSG_LEN);
        p->rc = ez_pub_commit(p->pub, MSG_LEN);
      }
    } else {
      p->rc = ez_publish(p->pub, b, MSG_LEN, TMO);
    }
  }
  return NULL;
}

/* One publisher thread with 4 slots; three subscribers on their own threads (one holding two
 * views at a time, one polling its fd, one copying with 5 ms timeouts) and one that joins a
 * quarter of the way in: each gets its messages once, in order and intact. */
static void test_threads(void **state) {
  (void)state;
  ez_context *ctx = open_ctx();
  receiver r[4] = {{.how = BLOCKING_HOLDS}, {.how = FD_POLLING}, {.how = COPY_TIMED}};
  for (int i = 0; i < 3; i++)
    r[i].sub = make_sub(ctx, "/local/threads");
  publisher p = {.pub = make_pub(ctx, "/local/threads", 4)};
  pthread_t t[4], pt;
  for (int i = 0; i < 3; i++)
    assert_int_equal(pthread_create(&t[i], NULL, receive, &r[i]), 0);
  assert_int_equal(pthread_create(&pt, NULL, publish_all, &p), 0);
  r[3] = (receiver){.sub = make_sub(ctx, "/local/threads"), .how = BLOCKING_HOLDS, .late = true};
  atomic_store(&p.late_joined, 1); /* it joined before message N_MSGS / 4: it gets the rest */
  assert_int_equal(pthread_create(&t[3], NULL, receive, &r[3]), 0);
  assert_int_equal(pthread_join(pt, NULL), 0);
  for (int i = 0; i < 4; i++)
    assert_int_equal(pthread_join(t[i], NULL), 0);
  assert_int_equal(p.rc, 0);
  for (int i = 0; i < 4; i++) {
    if (r[i].why[0]) fail_msg("subscriber %d: %s", i, r[i].why);
    assert_int_equal(r[i].got, N_MSGS - r[i].first);
  }
  assert_int_equal(ez_pub_flush(p.pub, TMO), 0);
  for (int i = 0; i < 4; i++) {
    ez_msg m;
    assert_int_equal(ez_recv(r[i].sub, &m, 0), EZ_EAGAIN); /* nothing more, nothing twice */
  }
  ez_context_close(ctx);
}

/* ---- leaving, flushing, outliving the publisher --------------------------------------------- */

/* The publisher's messages still held somewhere (local snapshot). */
static uint64_t pub_in_flight(ez_context *ctx) {
  char *json = NULL;
  assert_int_equal(ez_context_profile(ctx, 1.0, &json), 0);
  ez_profile_data d;
  assert_int_equal(ez_profile_parse(json, &d), 0);
  free(json);
  assert_int_equal(d.n_publishers, 1);
  uint64_t n = d.publishers[0].backpressure.in_flight;
  ez_profile_data_free(&d);
  return n;
}

static void wait_in_flight(ez_context *ctx, uint64_t want) {
  int64_t end = th_now_ms() + TMO;
  uint64_t n;
  while ((n = pub_in_flight(ctx)) != want) {
    if (th_now_ms() > end) fail_msg("publisher still holds %llu messages", (unsigned long long)n);
    th_sleep_ms(10);
  }
}

/* A subscriber cut off by DISCONNECT gives back the slots of what it had queued at once, and of
 * the message it views when it releases it; the view stays intact meanwhile. Flush and a publish
 * into the viewed slot wait for that release. */
static void test_leave_and_flush(void **state) {
  (void)state;
  ez_context *ctx = open_ctx();
  ez_pub *p = make_pub(ctx, "/local/x", 4);
  assert_int_equal(ez_graph_connect(th_addr, "/local/x", "/local/y", TMO), 0);
  ez_sub *s = make_sub(ctx, "/local/y");
  uint8_t b[MSG_LEN];
  for (uint64_t k = 0; k < 4; k++) {
    fill(b, k);
    assert_int_equal(ez_publish(p, b, MSG_LEN, TMO), 0);
  }
  ez_msg m;
  assert_int_equal(ez_recv(s, &m, TMO), 0);
  char why[160];
  if (check(m.data, m.len, 0, why, sizeof why)) fail_msg("%s", why);
  assert_int_equal(ez_pub_flush(p, 50), EZ_ETIMEDOUT);
  fill(b, 4);
  assert_int_equal(ez_publish(p, b, MSG_LEN, 50), EZ_ETIMEDOUT); /* slot 0 is viewed */
  wait_in_flight(ctx, 4);

  assert_int_equal(ez_graph_disconnect(th_addr, "/local/x", "/local/y", TMO), 0);
  wait_in_flight(ctx, 1); /* the three queued ones are released; the view is not */
  if (check(m.data, m.len, 0, why, sizeof why)) fail_msg("after leaving: %s", why);
  assert_int_equal(ez_publish(p, b, MSG_LEN, 50), EZ_ETIMEDOUT);
  ez_msg_release(&m);
  assert_int_equal(ez_pub_flush(p, TMO), 0);
  assert_int_equal(ez_publish(p, b, MSG_LEN, TMO), 0); /* nobody listens: nothing held */
  assert_int_equal(pub_in_flight(ctx), 0);
  assert_int_equal(ez_recv(s, &m, 0), EZ_EAGAIN);
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

/* Views and queued messages stay intact after their publisher is destroyed (ASan checks the
 * memory is still mapped); the subscriber then leaves the channel cleanly. */
static void test_outlive_publisher(void **state) {
  (void)state;
  ez_context *ctx = open_ctx();
  ez_sub *s = make_sub(ctx, "/local/gone");
  ez_pub *p = make_pub(ctx, "/local/gone", 4);
  uint8_t b[MSG_LEN];
  for (uint64_t k = 0; k < 3; k++) {
    fill(b, k);
    assert_int_equal(ez_publish(p, b, MSG_LEN, TMO), 0);
  }
  ez_msg m;
  assert_int_equal(ez_recv(s, &m, TMO), 0);
  ez_pub_destroy(p);
  char why[160];
  if (check(m.data, m.len, 0, why, sizeof why)) fail_msg("view after destroy: %s", why);
  /* What was queued arrives intact unless the UPDATE that drops the publisher came first. */
  uint64_t k = 1;
  ez_msg q;
  while (k < 3 && ez_recv(s, &q, 100) == 0) {
    int rc = check(q.data, q.len, k++, why, sizeof why);
    ez_msg_release(&q);
    if (rc) fail_msg("queued after destroy: %s", why);
  }
  ez_msg_release(&m);
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

/* Large messages (src/pub/pubhot.c): k's bytes depend on k and the position. */
#define BIG_LEN (256 * 1024)

static void fill_big(uint8_t *b, uint64_t k) {
  for (size_t i = 0; i < BIG_LEN; i += 8) {
    uint64_t v = k * 1000003u + i;
    memcpy(b + i, &v, 8);
  }
}

static bool big_ok(const ez_msg *m, uint64_t k) {
  if (m->len != BIG_LEN) return false;
  for (size_t i = 0; i < BIG_LEN; i += 8) {
    uint64_t v;
    memcpy(&v, (const uint8_t *)m->data + i, 8);
    if (v != k * 1000003u + i) return false;
  }
  return true;
}

/* A copying publisher with only local subscribers puts large messages in two buffers of its own
 * while they are released (pubhot.c). Two subscribers: one releases each message at once, the
 * other keeps every 10th view until it holds three (so views are kept for up to 30 messages, and
 * at times both hot buffers are held and messages go to their slots). Every message arrives once,
 * intact, and a kept view is still intact when released: its buffer was not reused meanwhile. */
static void test_hot_buffers(void **state) {
  (void)state;
  ez_context *ctx = open_ctx();
  ez_sub *fast = make_sub(ctx, "/local/hot"), *keep = make_sub(ctx, "/local/hot");
  ez_pub *p = make_pub(ctx, "/local/hot", 64);
  uint8_t *b = malloc(BIG_LEN);
  assert_non_null(b);
  ez_msg kept[3];
  size_t n_kept = 0;
  for (uint64_t k = 0; k < 400; k++) {
    fill_big(b, k);
    assert_int_equal(ez_publish(p, b, BIG_LEN, TMO), 0);
    if (k == 0) assert_true(p->hot[0].p || p->hot[1].p); /* the path under test ran */
    ez_msg m;
    assert_int_equal(ez_recv(fast, &m, TMO), 0);
    assert_true(big_ok(&m, k));
    ez_msg_release(&m);
    assert_int_equal(ez_recv(keep, &m, TMO), 0);
    assert_true(big_ok(&m, k));
    if (k % 10) {
      ez_msg_release(&m);
      continue;
    }
    if (n_kept == 3) { /* the oldest kept one goes, checked once more */
      assert_true(big_ok(&kept[0], kept[0].msg_id));
      ez_msg_release(&kept[0]);
      memmove(kept, kept + 1, 2 * sizeof kept[0]);
      n_kept--;
    }
    kept[n_kept++] = m;
  }
  for (size_t i = 0; i < n_kept; i++) {
    assert_true(big_ok(&kept[i], kept[i].msg_id));
    ez_msg_release(&kept[i]);
  }
  free(b);
  ez_pub_destroy(p);
  ez_sub_destroy(keep);
  ez_sub_destroy(fast);
  ez_context_close(ctx);
}

/* The publisher goes while a view and queued messages point into its hot buffers: they stay
 * intact (the local channel keeps the buffers; AddressSanitizer would see a use after free). */
static void test_hot_buffers_outlive_publisher(void **state) {
  (void)state;
  ez_context *ctx = open_ctx();
  ez_sub *s = make_sub(ctx, "/local/hotgone");
  ez_pub *p = make_pub(ctx, "/local/hotgone", 4);
  uint8_t *b = malloc(BIG_LEN);
  assert_non_null(b);
  fill_big(b, 0);
  assert_int_equal(ez_publish(p, b, BIG_LEN, TMO), 0);
  ez_msg m;
  assert_int_equal(ez_recv(s, &m, TMO), 0);
  for (uint64_t k = 1; k < 3; k++) { /* queued behind the view */
    fill_big(b, k);
    assert_int_equal(ez_publish(p, b, BIG_LEN, TMO), 0);
  }
  ez_pub_destroy(p);
  assert_true(big_ok(&m, 0));
  ez_msg q;
  for (uint64_t k = 1; k < 3 && ez_recv(s, &q, 100) == 0; k++) { /* unless the UPDATE came */
    bool ok = big_ok(&q, k);
    ez_msg_release(&q);
    assert_true(ok);
  }
  ez_msg_release(&m);
  free(b);
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

typedef struct waiter {
  ez_sub *sub;
  int rc;
  uint8_t got[MSG_LEN];
  size_t len;
} waiter;

static void *wait_one(void *arg) {
  waiter *w = arg;
  w->rc = ez_recv_copy(w->sub, w->got, sizeof w->got, &w->len, TMO);
  return NULL;
}

/* A receiver already asleep in ez_recv when a publisher of its process appears is woken by that
 * publisher's first message. */
static void test_publisher_appears_while_waiting(void **state) {
  (void)state;
  ez_context *ctx = open_ctx();
  waiter w = {.sub = make_sub(ctx, "/local/later")};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, wait_one, &w), 0);
  th_sleep_ms(200); /* let it fall asleep (nothing to poll for) */
  ez_pub *p = make_pub(ctx, "/local/later", 4);
  uint8_t b[MSG_LEN];
  fill(b, 7);
  assert_int_equal(ez_publish(p, b, MSG_LEN, TMO), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(w.rc, 0);
  char why[160];
  if (check(w.got, w.len, 7, why, sizeof why)) fail_msg("%s", why);
  ez_context_close(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_threads, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_leave_and_flush, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_outlive_publisher, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_hot_buffers, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_hot_buffers_outlive_publisher, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_publisher_appears_while_waiting, th_setup, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
