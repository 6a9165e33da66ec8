/* The in-process ring (src/ring/localchan.c) on its own: driven by a producer and receivers that
 * are neither publishers, channels nor subscribers, only the callbacks it asks for
 * (ezi_lring_ops, ezi_lrecv_ops, chan_sub.done). Order, releases given back once per entry, the
 * producer's and the receivers' sleep and wake-up handshakes across threads, a leaky member, and
 * a member that leaves with messages queued, and the undo of a start that failed half way. */
#include "harness.h"
#include "ring/localchan.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- a producer: a lock for the membership and its puts, and a condition variable to sleep on */

typedef struct producer {
  ezi_lring r;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool trims;
  uint64_t freed, woken; /* entries given back, wake-ups asked for (atomic) */
  uint64_t last_woken;   /* the msg_id of the last wake-up */
} producer;

static bool p_freed(ezi_lring *r, uint32_t idx, uint64_t msg_id, uint64_t now, bool more) {
  (void)msg_id;
  (void)now;
  (void)more;
  producer *p = r->owner;
  __atomic_add_fetch(&p->freed, 1, __ATOMIC_SEQ_CST);
  return ezi_lchan_wanted(r, idx);
}

static void p_wake(ezi_lring *r, uint64_t msg_id) {
  producer *p = r->owner;
  pthread_mutex_lock(&p->mu);
  __atomic_add_fetch(&p->woken, 1, __ATOMIC_SEQ_CST);
  p->last_woken = msg_id;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

static pthread_mutex_t *p_memb_mu(ezi_lring *r) { return &((producer *)r->owner)->mu; }

static const ezi_lring_ops p_ops = {.freed = p_freed, .wake = p_wake, .memb_mu = p_memb_mu};
static const ezi_lring_ops p_ops_trims = {
    .freed = p_freed, .wake = p_wake, .memb_mu = p_memb_mu, .producer_trims = true};

static void producer_init(producer *p, uint32_t n, bool trims) {
  memset(p, 0, sizeof *p);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  p->trims = trims;
  assert_int_equal(ezi_lchan_ring_init(&p->r, n, trims ? &p_ops_trims : &p_ops, p, "prod"), 0);
  ezi_lchan_start(&p->r, 1);
}

static void producer_fini(producer *p) {
  ezi_lchan_ring_free(&p->r);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
}

/* Puts message id (its payload: the id itself) once its entry is free, sleeping on the
 * announced wish otherwise: the producer's side of the handshake (pub/pubwait.c's, in small). */
static void produce(producer *p, uint64_t id, const uint64_t *payload) {
  uint32_t idx = (uint32_t)(id % p->r.lsn);
  uint64_t freed_at;
  pthread_mutex_lock(&p->mu);
  while (!ezi_lchan_slot_free(&p->r, idx, &freed_at)) {
    ezi_lchan_set_wants(&p->r, idx + 1);
    if (!ezi_lchan_slot_free(&p->r, idx, &freed_at)) pthread_cond_wait(&p->cv, &p->mu);
    ezi_lchan_set_wants(&p->r, 0);
  }
  ezi_lchan_put(&p->r, id, (const uint8_t *)payload, sizeof *payload, 0, NULL, NULL);
  pthread_mutex_unlock(&p->mu);
}

/* ---- a receiver: its own lock and condition variable ------------------------------------------
 */

typedef struct receiver {
  ezi_lrecv rv;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int sleepers;
} receiver;

static receiver *of(ezi_lrecv *rv) { return (receiver *)((char *)rv - offsetof(receiver, rv)); }
static bool r_waited(ezi_lrecv *rv) { return of(rv)->sleepers > 0; }
static bool r_mark_ready(ezi_lrecv *rv) { return of(rv)->sleepers > 0; }
static void r_signal_ready(ezi_lrecv *rv) { pthread_cond_signal(&of(rv)->cv); }
static const ezi_lrecv_ops r_ops = {
    .waited = r_waited, .mark_ready = r_mark_ready, .signal_ready = r_signal_ready};

static void receiver_init(receiver *x, uint32_t max_queue) {
  memset(x, 0, sizeof *x);
  pthread_mutex_init(&x->mu, NULL);
  pthread_cond_init(&x->cv, NULL);
  x->rv.ops = &r_ops;
  x->rv.mu = &x->mu;
  x->rv.cv = &x->cv;
  x->rv.max_queue = max_queue;
}

static void receiver_fini(receiver *x) {
  free(x->rv.locals);
  pthread_mutex_destroy(&x->mu);
  pthread_cond_destroy(&x->cv);
}

static int done_calls;
static void member_done(chan_sub *cs) {
  __atomic_add_fetch(&done_calls, 1, __ATOMIC_SEQ_CST);
  free(cs->t0);
  ezi_window_free(cs->proc);
  free(cs);
}

/* A membership of receiver x in p's ring, from the next message on. */
static chan_sub *join(producer *p, receiver *x) {
  chan_sub *cs = calloc(1, sizeof *cs);
  assert_non_null(cs);
  cs->t0 = calloc(p->r.lsn, sizeof *cs->t0);
  cs->proc = ezi_window_new();
  assert_true(cs->t0 && cs->proc);
  cs->rv = &x->rv;
  cs->done = member_done;
  assert_int_equal(ezi_lchan_join(&p->r, cs), 0);
  return cs;
}

/* Takes the next message, sleeping for it as a subscriber's recv does (want_signal announced,
 * the producers armed, then looked at again). */
static void take(receiver *x, ez_msg *m) {
  ezi_ldrops d = {0};
  pthread_mutex_lock(&x->mu);
  while (!ezi_lchan_take(&x->rv, m, &d)) {
    __atomic_store_n(&x->rv.want_signal, 1, __ATOMIC_SEQ_CST);
    ezi_lchan_arm(&x->rv);
    if (!ezi_lchan_ready(&x->rv)) {
      x->sleepers++;
      pthread_cond_wait(&x->cv, &x->mu);
      x->sleepers--;
    }
    __atomic_store_n(&x->rv.want_signal, 0, __ATOMIC_RELAXED);
  }
  pthread_mutex_unlock(&x->mu);
  ezi_lchan_trim_done(&d);
}

/* ---- tests ------------------------------------------------------------------------------------
 */

/* Two members take every message in order; an entry goes back to the producer once, after both
 * released it; a wake-up is asked for only for the entry the producer said it sleeps for. */
static void test_order_and_give_back(void **state) {
  (void)state;
  producer p;
  receiver a, b;
  producer_init(&p, 4, false);
  receiver_init(&a, 0);
  receiver_init(&b, 0);
  chan_sub *ca = join(&p, &a), *cb = join(&p, &b);
  uint64_t payload[4];
  for (uint64_t id = 1; id <= 4; id++) {
    payload[id - 1] = id;
    produce(&p, id, &payload[id - 1]);
  }
  ezi_lchan_set_wants(&p.r, (uint32_t)(2 % 4) + 1); /* it sleeps for message 2's entry */
  ez_msg m[4];
  for (int i = 0; i < 4; i++) {
    take(&a, &m[i]);
    assert_int_equal(m[i].msg_id, i + 1);
    assert_int_equal(*(const uint64_t *)m[i].data, i + 1);
    assert_string_equal(m[i].pub_id, "prod");
  }
  for (int i = 0; i < 4; i++)
    ezi_lchan_release(ca, m[i].msg_id);
  assert_int_equal(__atomic_load_n(&p.freed, __ATOMIC_SEQ_CST), 0); /* b holds them all */
  for (int i = 0; i < 4; i++) {
    ez_msg x;
    take(&b, &x);
    assert_int_equal(x.msg_id, i + 1);
    ezi_lchan_release(cb, x.msg_id);
    ezi_lchan_release(cb, x.msg_id); /* a second release of the same view does nothing */
  }
  assert_int_equal(p.freed, 4);
  assert_int_equal(p.woken, 1);
  assert_int_equal(p.last_woken, 2);
  ezi_lchan_leave(ca, true);
  ezi_lchan_leave(cb, true);
  assert_int_equal(done_calls, 2);
  done_calls = 0;
  receiver_fini(&a);
  receiver_fini(&b);
  producer_fini(&p);
}

typedef struct stream_arg {
  producer *p;
  receiver *x;
  chan_sub *cs;
  uint64_t n, *payload;
  uint64_t bad;
} stream_arg;

static void *consume_thread(void *arg) {
  stream_arg *s = arg;
  for (uint64_t want = 1; want <= s->n; want++) {
    ez_msg m;
    take(s->x, &m);
    if (m.msg_id != want || *(const uint64_t *)m.data != want) s->bad++;
    ezi_lchan_release(s->cs, m.msg_id);
  }
  return NULL;
}

/* A producer thread and two receiver threads through a ring of 8 entries: every message, in
 * order, to both; the producer sleeps whenever the ring is full and the receivers whenever it is
 * empty, so both handshakes run thousands of times (and under ThreadSanitizer). */
static void test_threads_both_sleep(void **state) {
  (void)state;
  enum { N = 20000 };
  producer p;
  receiver a, b;
  producer_init(&p, 8, false);
  receiver_init(&a, 0);
  receiver_init(&b, 0);
  stream_arg sa = {.p = &p, .x = &a, .n = N}, sb = {.p = &p, .x = &b, .n = N};
  sa.cs = join(&p, &a);
  sb.cs = join(&p, &b);
  uint64_t *payload = calloc(N + 1, sizeof *payload);
  assert_non_null(payload);
  pthread_t ta, tb;
  assert_int_equal(pthread_create(&ta, NULL, consume_thread, &sa), 0);
  assert_int_equal(pthread_create(&tb, NULL, consume_thread, &sb), 0);
  for (uint64_t id = 1; id <= N; id++) {
    payload[id] = id; /* (the entry it lands in is free: the previous reader of it released) */
    produce(&p, id, &payload[id]);
  }
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  assert_int_equal(sa.bad, 0);
  assert_int_equal(sb.bad, 0);
  assert_int_equal(p.freed, N);
  ezi_lchan_leave(sa.cs, true);
  ezi_lchan_leave(sb.cs, true);
  assert_int_equal(done_calls, 2);
  done_calls = 0;
  free(payload);
  receiver_fini(&a);
  receiver_fini(&b);
  producer_fini(&p);
}

/* A leaky receiver (max_queue 2) that takes nothing while 6 messages are put by a producer that
 * trims as it puts: it keeps the newest 2, the 4 dropped go back to the producer at once and are
 * counted, and it then takes messages 5 and 6. */
static void test_leaky_member(void **state) {
  (void)state;
  producer p;
  receiver x;
  producer_init(&p, 8, true);
  receiver_init(&x, 2);
  chan_sub *cs = join(&p, &x);
  uint64_t payload[6];
  for (uint64_t id = 1; id <= 6; id++) {
    payload[id - 1] = id;
    produce(&p, id, &payload[id - 1]);
  }
  assert_int_equal(p.freed, 4);
  assert_int_equal(__atomic_load_n(&x.rv.dropped, __ATOMIC_RELAXED), 4);
  ez_msg m;
  take(&x, &m);
  assert_int_equal(m.msg_id, 5);
  ezi_lchan_release(cs, m.msg_id);
  take(&x, &m);
  assert_int_equal(m.msg_id, 6);
  ezi_lchan_release(cs, m.msg_id);
  assert_int_equal(p.freed, 6);
  ezi_lchan_leave(cs, true);
  assert_int_equal(done_calls, 1);
  done_calls = 0;
  receiver_fini(&x);
  producer_fini(&p);
}

/* A member that leaves with messages queued and one still viewed: the queued ones go back at
 * once; the member is freed (done) only when the viewed one is released. */
static void test_leave_with_queued(void **state) {
  (void)state;
  producer p;
  receiver x;
  producer_init(&p, 4, false);
  receiver_init(&x, 0);
  chan_sub *cs = join(&p, &x);
  uint64_t payload[3] = {1, 2, 3};
  for (uint64_t id = 1; id <= 3; id++)
    produce(&p, id, &payload[id - 1]);
  ez_msg m;
  take(&x, &m); /* viewed: message 1 */
  ezi_lchan_leave(cs, false);
  assert_int_equal(p.freed, 2); /* 2 and 3, never taken */
  assert_int_equal(done_calls, 0);
  assert_false(ezi_lchan_draining(&x.rv));
  ezi_lchan_release(cs, m.msg_id);
  assert_int_equal(p.freed, 3);
  assert_int_equal(done_calls, 1);
  done_calls = 0;
  receiver_fini(&x);
  producer_fini(&p);
}

/* The undo of a start that failed half way (ezi_lchan_unjoin, as ezi_chan_ring_attach uses it
 * when a member cannot be added): the members added after `from` leave the ring and their
 * receivers' lists, and the count of leaky ones goes back, before anything was put. */
static void test_unjoin(void **state) {
  (void)state;
  producer p;
  receiver a, b;
  producer_init(&p, 4, true);
  receiver_init(&a, 0);
  receiver_init(&b, 3); /* leaky */
  chan_sub *ca = join(&p, &a), *cb = join(&p, &b);
  assert_int_equal(p.r.n_lsubs, 2);
  assert_int_equal(p.r.n_leaky, 1);
  assert_int_equal(b.rv.n_locals, 1);
  pthread_mutex_lock(&p.mu);
  ezi_lchan_unjoin(&p.r, 1); /* b joined after a: b goes */
  pthread_mutex_unlock(&p.mu);
  assert_int_equal(p.r.n_lsubs, 1);
  assert_ptr_equal(p.r.lsubs[0], ca);
  assert_int_equal(p.r.n_leaky, 0);
  assert_int_equal(b.rv.n_locals, 0);
  assert_int_equal(a.rv.n_locals, 1);
  pthread_mutex_lock(&p.mu);
  ezi_lchan_unjoin(&p.r, 0);
  pthread_mutex_unlock(&p.mu);
  assert_int_equal(p.r.n_lsubs, 0);
  assert_int_equal(a.rv.n_locals, 0);
  uint64_t one = 1; /* a put now reaches nobody: the entry is not held */
  pthread_mutex_lock(&p.mu);
  assert_false(ezi_lchan_put(&p.r, 1, (const uint8_t *)&one, sizeof one, 0, NULL, NULL));
  pthread_mutex_unlock(&p.mu);
  member_done(ca); /* (never members now: freed as their owner would) */
  member_done(cb);
  done_calls = 0;
  receiver_fini(&a);
  receiver_fini(&b);
  producer_fini(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_order_and_give_back),
      cmocka_unit_test(test_threads_both_sleep),
      cmocka_unit_test(test_leaky_member),
      cmocka_unit_test(test_leave_with_queued),
      cmocka_unit_test(test_unjoin),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
