/* The receiver that sleeps on a shared ring's word (src/ring/localchan.c, src/rx/ringchan.c; the
 * publisher's side is tests/test_ring.c): woken by the publisher directly, by an older
 * publisher's frame, by its link's end, and not fooled by a peer that wakes it for nothing; a
 * frame that brings nothing asks again for what the sleeper wants; a receiver that finds the
 * channel's lock taken leaves the pull to the holder; a receiver of several rings sleeps on all
 * their words at once (futex_waitv), or asks for frames where a filter refuses that call.
 * Hand-played publishers (tests/ringkit.h). */
#include "ringkit.h"

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The publisher's way: the receiver asked for the word (rx_sleep), sleeps on it, and one wake-up
 * of the word, with no frame, brings it the message. */
static void test_word_woken_by_publisher(void **state) {
  (void)state;
  ez_context *ctx;
  ez_sub *s;
  fake f;
  receiver r;
  word_sleeping(&ctx, &s, &f, &r, "/ring/word");
  fake_put_silent(&f, 1, "direct");
  uint32_t want = __atomic_exchange_n(&f.ring.h->rx_sleep, 0, __ATOMIC_SEQ_CST);
  assert_true(want & EZI_RING_WANT_WORD);
  assert_false(want & EZI_RING_WANT_FRAME);                /* one source, no fd: no frame wanted */
  assert_int_equal(ezi_futex_wake(&f.ring.h->rx_word), 1); /* exactly the receiver woke */
  pthread_join(r.th, NULL);
  assert_int_equal(r.rc, 0);
  assert_int_equal(r.msg_id, 1);
  assert_string_equal(r.text, "direct");
  word_done(ctx, s, &f);
}

/* An older publisher sends a TX_SHM frame for any request: the channel's I/O thread pulls and
 * wakes the receiver through the word (it is bumped by this process). */
static void test_word_woken_by_frame(void **state) {
  (void)state;
  ez_context *ctx;
  ez_sub *s;
  fake f;
  receiver r;
  word_sleeping(&ctx, &s, &f, &r, "/ring/frame");
  uint32_t w0 = __atomic_load_n(&f.ring.h->rx_word, __ATOMIC_SEQ_CST);
  __atomic_store_n(&f.ring.h->rx_sleep, 0, __ATOMIC_SEQ_CST); /* (an older one stores 0) */
  fake_put(&f, 1, 1, "framed", 2);
  pthread_join(r.th, NULL);
  assert_int_equal(r.rc, 0);
  assert_int_equal(r.msg_id, 1);
  assert_string_equal(r.text, "framed");
  assert_true(__atomic_load_n(&f.ring.h->rx_word, __ATOMIC_SEQ_CST) != w0);
  word_done(ctx, s, &f);
}

/* A frame that brings nothing (its message was taken already: the publisher consumed a newer
 * sleep request with it) makes the channel ask again for a frame at the next put, instead of
 * waking the members that wait: a subscriber's fd stays unreadable, and the next message still
 * makes it readable. */
static void test_empty_frame_rearms(void **state) {
  (void)state;
  ez_context *ctx;
  ez_sub *s;
  fake f;
  word_setup(&ctx, &s, &f, "/ring/rearm");
  int fd = ez_sub_fd(s);
  assert_true(fd >= 0);
  struct pollfd pfd = {fd, POLLIN, 0};
  ez_msg m;
  assert_int_equal(ez_recv(s, &m, 0), EZ_EAGAIN); /* empty: the fd's request is made */
  assert_int_equal(poll(&pfd, 1, 0), 0);
  assert_true(__atomic_load_n(&f.ring.h->rx_sleep, __ATOMIC_SEQ_CST) & EZI_RING_WANT_FRAME);
  __atomic_store_n(&f.ring.h->rx_sleep, 0, __ATOMIC_SEQ_CST); /* consumed by a put... */
  fake_frame(&f, 0);                                          /* ...whose frame brings nothing */
  int64_t end = th_now_ms() + TMO;
  while (!(__atomic_load_n(&f.ring.h->rx_sleep, __ATOMIC_SEQ_CST) & EZI_RING_WANT_FRAME) &&
         th_now_ms() < end)
    th_sleep_ms(1);
  assert_true(__atomic_load_n(&f.ring.h->rx_sleep, __ATOMIC_SEQ_CST) & EZI_RING_WANT_FRAME);
  assert_int_equal(poll(&pfd, 1, 0), 0); /* not readable for nothing */
  __atomic_store_n(&f.ring.h->rx_sleep, 0, __ATOMIC_SEQ_CST);
  fake_put(&f, 1, 1, "next", 2);
  assert_int_equal(poll(&pfd, 1, TMO), 1);
  assert_int_equal(ez_recv(s, &m, 0), 0);
  assert_int_equal(m.msg_id, 1);
  ez_msg_release(&m);
  word_done(ctx, s, &f);
}

/* The same frame while the only member sleeps on the ring's word: it does not ask for frames (a
 * put that consumed its request woke the word too). The next framed message still wakes it, and
 * what it asked for is then the word alone. */
static void test_empty_frame_word_sleeper(void **state) {
  (void)state;
  ez_context *ctx;
  ez_sub *s;
  fake f;
  receiver r;
  word_sleeping(&ctx, &s, &f, &r, "/ring/rearm-word");
  assert_int_equal(__atomic_load_n(&f.ring.h->rx_sleep, __ATOMIC_SEQ_CST), EZI_RING_WANT_WORD);
  fake_frame(&f, 0); /* message 0 again: taken already */
  frames_handled(ctx);
  assert_int_equal(__atomic_load_n(&f.ring.h->rx_sleep, __ATOMIC_SEQ_CST), EZI_RING_WANT_WORD);
  fake_put(&f, 1, 1, "after", 2);
  pthread_join(r.th, NULL);
  assert_int_equal(r.rc, 0);
  assert_int_equal(r.msg_id, 1);
  assert_int_equal(__atomic_load_n(&f.ring.h->rx_sleep, __ATOMIC_SEQ_CST), EZI_RING_WANT_WORD);
  word_done(ctx, s, &f);
}

/* An older publisher answers any request with a frame, the word's too: when that frame brings
 * nothing (the receiver took its message itself and sleeps on the word again, and the publisher's
 * late exchange took that new request), the channel asks for the word again, so that the next
 * put still wakes the receiver (it used to wait for its 1 s slice). */
static void test_rearm_word_old_publisher(void **state) {
  (void)state;
  ez_context *ctx;
  ez_sub *s;
  fake f;
  word_setup(&ctx, &s, &f, "/ring/oldpub");
  fake_put_silent(&f, 1, "m1"); /* `published` stored; the exchange comes late */
  ez_msg m;
  assert_int_equal(ez_recv(s, &m, TMO), 0);
  assert_int_equal(m.msg_id, 1);
  ez_msg_release(&m);
  receiver r;
  receiver_start(&r, s, TMO);
  receiver_sleeps(&r);
  uint32_t want = __atomic_exchange_n(&f.ring.h->rx_sleep, 0, __ATOMIC_SEQ_CST);
  assert_int_equal(want, EZI_RING_WANT_WORD); /* the late exchange takes the new request */
  fake_frame(&f, 1);                          /* and answers it the older way */
  frames_handled(ctx);                        /* the frame's pull found nothing */
  assert_int_equal(__atomic_load_n(&f.ring.h->rx_sleep, __ATOMIC_SEQ_CST), EZI_RING_WANT_WORD);
  fake_put_silent(&f, 2, "m2");
  want = __atomic_exchange_n(&f.ring.h->rx_sleep, 0, __ATOMIC_SEQ_CST);
  assert_int_equal(want, EZI_RING_WANT_WORD);
  assert_int_equal(ezi_futex_wake(&f.ring.h->rx_word), 1);
  pthread_join(r.th, NULL);
  assert_int_equal(r.rc, 0);
  assert_int_equal(r.msg_id, 2);
  word_done(ctx, s, &f);
}

/* A receiver woken on the ring's word while the channel's lock is held by someone who does not
 * pull (the I/O thread signalling members, a member joining or leaving) cannot pull: it leaves
 * that to the holder, whose unlock pulls. The message is in the channel's ring as soon as the lock
 * is released (it used to wait for the receiver's next slice, 1 s). */
static void test_pull_missed(void **state) {
  (void)state;
  ez_context *ctx;
  ez_sub *s;
  fake f;
  receiver r;
  word_sleeping(&ctx, &s, &f, &r, "/ring/missed");
  chan *c = ring_chan(ctx);
  ezi_lring *lr = &c->lr;
  pthread_mutex_lock(lr->ops->memb_mu(lr)); /* as a member's join does (localchan.c) */
  fake_put_silent(&f, 1, "missed");
  assert_int_equal(__atomic_exchange_n(&f.ring.h->rx_sleep, 0, __ATOMIC_SEQ_CST),
                   EZI_RING_WANT_WORD);
  assert_int_equal(ezi_futex_wake(&f.ring.h->rx_word), 1);
  int64_t end = th_now_ms() + TMO; /* it woke, found the lock taken, and sleeps again */
  while (!__atomic_load_n(&c->pull_missed, __ATOMIC_SEQ_CST) && th_now_ms() < end)
    th_sleep_ms(1);
  assert_int_equal(__atomic_load_n(&c->pull_missed, __ATOMIC_SEQ_CST), 1);
  receiver_sleeps(&r);
  assert_int_equal(ezi_lchan_published(&c->lr), 1); /* nobody pulled */
  lr->ops->memb_unlock(lr);
  assert_int_equal(ezi_lchan_published(&c->lr), 2); /* the unlock did */
  ezi_ctx_call(ctx, nothing, NULL); /* (ordered before the I/O thread frees the channel, later) */
  pthread_join(r.th, NULL);
  assert_int_equal(r.rc, 0);
  assert_int_equal(r.msg_id, 1);
  assert_string_equal(r.text, "missed");
  word_done(ctx, s, &f);
}

typedef struct storm {
  uint32_t *word;
  bool stop; /* atomic */
  long wakes;
} storm;

static void *storm_main(void *arg) {
  storm *st = arg;
  while (!__atomic_load_n(&st->stop, __ATOMIC_SEQ_CST)) {
    ezi_futex_wake(st->word);
    st->wakes++;
  }
  return NULL;
}

/* A peer that wakes the word over and over with nothing published: the receiver looks again each
 * time and still waits its whole timeout, and gives nothing out. Then the link ends while it
 * sleeps: the channel's leave wakes the word too. */
static void test_word_spurious_and_link_end(void **state) {
  (void)state;
  ez_context *ctx;
  ez_sub *s;
  fake f;
  word_setup(&ctx, &s, &f, "/ring/storm");
  storm st = {.word = &f.ring.h->rx_word};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, storm_main, &st), 0);
  ez_msg m;
  assert_int_equal(ez_recv(s, &m, 300), EZ_ETIMEDOUT);
  __atomic_store_n(&st.stop, true, __ATOMIC_SEQ_CST);
  pthread_join(th, NULL);
  assert_true(st.wakes > 0);

  receiver r;
  receiver_start(&r, s, 2000);
  receiver_sleeps(&r);
  uint32_t w0 = __atomic_load_n(&f.ring.h->rx_word, __ATOMIC_SEQ_CST);
  close(f.data); /* the publisher goes: the channel leaves, and wakes the sleeper */
  f.data = -1;
  int64_t end = th_now_ms() + TMO;
  while (__atomic_load_n(&f.ring.h->rx_word, __ATOMIC_SEQ_CST) == w0 && th_now_ms() < end)
    th_sleep_ms(1);
  assert_true(__atomic_load_n(&f.ring.h->rx_word, __ATOMIC_SEQ_CST) != w0);
  pthread_join(r.th, NULL);
  assert_int_equal(r.rc, EZ_ETIMEDOUT);
  word_done(ctx, s, &f);
}

/* ezi_futex_waitv: a word that no longer holds what the caller read returns at once, words that
 * do sleep until the deadline, and a bad call or an unmapped word is an error, not a sleep. */

static void test_futex_waitv(void **state) {
  (void)state;
  if (!waitv_works()) skip();
  uint32_t a = 5, b = 7;
  uint32_t *w[2] = {&a, &b}, v[2] = {5, 8};
  assert_int_equal(ezi_futex_waitv(w, v, 2, UINT64_MAX), 0); /* b is not 8 */
  v[1] = 7;
  uint64_t t0 = mono_ns();
  assert_int_equal(ezi_futex_waitv(w, v, 2, t0 + 20000000u), EZ_ETIMEDOUT);
  assert_true(mono_ns() - t0 >= 20000000u);
  assert_int_equal(ezi_futex_waitv(w, v, 0, UINT64_MAX), EZ_ESYS);
  uint32_t *unmapped[2] = {&a, (uint32_t *)(uintptr_t)64};
  assert_int_equal(ezi_futex_waitv(unmapped, v, 2, UINT64_MAX), EZ_ESYS);
}

/* A receiver of two shared rings (fan-in from two publishers) sleeps on both rings' words at
 * once (and its own) and asks neither publisher for a frame; a wake-up of either word, with no
 * frame, brings that publisher's message; anything else wakes its own word. */
/* A subscriber here fed by two hand-made publishers, each one's first message taken. */
static void fanin_setup(ez_context **ctx, ez_sub **s, fake f[2], const char *topic) {
  assert_int_equal(ez_context_open(th_addr, ctx), 0);
  assert_int_equal(ez_sub_create(*ctx, topic, NULL, s), 0);
  for (int i = 0; i < 2; i++) {
    fake_start(&f[i], topic);
    fake_put(&f[i], 0, 0, "first", 1);
  }
  for (int i = 0; i < 2; i++) {
    ez_msg m;
    assert_int_equal(ez_recv(*s, &m, TMO), 0);
    assert_int_equal(m.msg_id, 0);
    ez_msg_release(&m);
  }
  for (int i = 0; i < 2; i++) /* (as each publisher's next put takes what was asked) */
    __atomic_store_n(&f[i].ring.h->rx_sleep, 0, __ATOMIC_SEQ_CST);
}

static void fanin_done(ez_context *ctx, ez_sub *s, fake f[2]) {
  for (int i = 0; i < 2; i++)
    fake_end(&f[i]);
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

static void test_word_fan_in(void **state) {
  (void)state;
  if (!waitv_works()) skip();
  ez_context *ctx;
  ez_sub *s;
  fake f[2];
  fanin_setup(&ctx, &s, f, "/ring/fanin");
  for (int k = 0; k < 2; k++) {
    fake *p = &f[1 - k], *other = &f[k]; /* the second ring's message first */
    receiver r;
    receiver_start(&r, s, TMO);
    sleeps_on_words(&r.tid, 3); /* the two rings' words and its own */
    fake_put_silent(p, 1, k ? "one" : "two");
    uint32_t want = __atomic_exchange_n(&p->ring.h->rx_sleep, 0, __ATOMIC_SEQ_CST);
    assert_int_equal(want, EZI_RING_WANT_WORD); /* the word alone: no frame */
    assert_int_equal(ezi_futex_wake(&p->ring.h->rx_word), 1);
    pthread_join(r.th, NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.msg_id, 1);
    assert_string_equal(r.text, k ? "one" : "two");
    /* The other ring was asked for its word too; its next put would take that. */
    want = __atomic_exchange_n(&other->ring.h->rx_sleep, 0, __ATOMIC_SEQ_CST);
    assert_int_equal(want, EZI_RING_WANT_WORD);
  }
  /* Anything else wakes it through its own word: here the first publisher goes (its channel
   * leaves), the receiver wakes and sleeps on the second ring's word alone, and neither ring's
   * word was touched (no other sleeper of theirs woke for it). */
  uint32_t w0 = __atomic_load_n(&f[0].ring.h->rx_word, __ATOMIC_SEQ_CST);
  uint32_t w1 = __atomic_load_n(&f[1].ring.h->rx_word, __ATOMIC_SEQ_CST);
  receiver r;
  receiver_start(&r, s, TMO);
  sleeps_on_words(&r.tid, 3);
  close(f[0].data);
  f[0].data = -1;
  /* One ring left (or a membership cut, not yet gone): it sleeps on that ring's word or on its
   * condition variable, not on the three words. */
  sleeps_in_futex(&r.tid);
  assert_int_equal(__atomic_load_n(&f[0].ring.h->rx_word, __ATOMIC_SEQ_CST), w0);
  assert_int_equal(__atomic_load_n(&f[1].ring.h->rx_word, __ATOMIC_SEQ_CST), w1);
  fake_put(&f[1], 2, 2, "last", 3); /* (its frame wakes it either way) */
  pthread_join(r.th, NULL);
  assert_int_equal(r.rc, 0);
  assert_string_equal(r.text, "last");
  fanin_done(ctx, s, f);
}

/* futex_waitv refused, as a system-call filter that does not know it does (EPERM): a fan-in
 * receiver asks its publishers for frames instead, and a frame wakes it. In a child process,
 * whose every thread the filter covers (the refusal is remembered for the whole process). */
static void test_waitv_refused(void **state) {
  (void)state;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    struct sock_filter filt[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_futex_waitv, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof filt / sizeof filt[0], filt};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
        syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog))
      _exit(3);
    ez_context *ctx;
    ez_sub *s;
    fake f[2];
    fanin_setup(&ctx, &s, f, "/ring/refused");
    receiver r;
    receiver_start(&r, s, TMO);
    int64_t end = th_now_ms() + TMO; /* it tried the words, then asked for frames */
    while (!(__atomic_load_n(&f[1].ring.h->rx_sleep, __ATOMIC_SEQ_CST) & EZI_RING_WANT_FRAME) &&
           th_now_ms() < end)
      th_sleep_ms(1);
    if (!(__atomic_load_n(&f[1].ring.h->rx_sleep, __ATOMIC_SEQ_CST) & EZI_RING_WANT_FRAME))
      _exit(4);
    __atomic_store_n(&f[1].ring.h->rx_sleep, 0, __ATOMIC_SEQ_CST);
    fake_put(&f[1], 1, 1, "framed", 2);
    pthread_join(r.th, NULL);
    if (r.rc || strcmp(r.text, "framed")) _exit(5);
    if (waitv_works()) _exit(6); /* the refusal is remembered */
    fanin_done(ctx, s, f);
    _exit(0);
  }
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_word_woken_by_publisher, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_word_woken_by_frame, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_word_spurious_and_link_end, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_empty_frame_rearms, th_setup, th_teardown),
      cmocka_unit_test(test_futex_waitv),
      cmocka_unit_test_setup_teardown(test_word_fan_in, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_waitv_refused, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_empty_frame_word_sleeper, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_rearm_word_old_publisher, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_pull_missed, th_setup, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
