/* The shared-memory notice ring between two ezmsg-c processes (src/proto/shmring.c, the ring mode
 * of src/ring/localchan.c): the mapping rules (what a channel accepts and removes), a real
 * publisher process whose notices reach this process through the ring, or through TX_SHM frames
 * when the ring is turned off, a hand-played publisher that breaks the ring's rules, and the
 * publisher's side of the words: a receiver woken on its word, a publisher asleep on its ring's
 * word for a slot. The receiver's side of the words is tests/test_ring_words.c. */
#include "ringkit.h"
#include "proto/marshal.h"
#include "rawproto.h"
#include "base/wire.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static bool shm_exists(const char *name) {
  char path[128];
  snprintf(path, sizeof path, "/dev/shm/%s", name);
  return access(path, F_OK) == 0;
}

/* ---- mapping ------------------------------------------------------------------------------- */

static void test_create_attach(void **state) {
  (void)state;
  ezi_ring a, b;
  char name[EZI_SHM_NAME_MAX + 1];
  assert_int_equal(ezi_ring_create(8, &a, name), 0);
  assert_true(shm_exists(name));
  assert_int_equal(strncmp(name, "psm_", 4), 0);
  /* the wrong slot count: refused, and the name stays (it is not ours to remove) */
  assert_int_equal(ezi_ring_attach(name, strlen(name), 16, &b), EZ_EPROTO);
  assert_true(shm_exists(name));
  assert_int_equal(ezi_ring_attach(name, strlen(name), 8, &b), 0);
  assert_false(shm_exists(name)); /* mapped by both: the name goes */
  /* both see the same memory */
  __atomic_store_n(&a.h->published, 42, __ATOMIC_SEQ_CST);
  a.e[3].msg_id = 7;
  assert_int_equal(__atomic_load_n(&b.h->published, __ATOMIC_SEQ_CST), 42);
  assert_int_equal(b.e[3].msg_id, 7);
  ezi_ring_detach(&a);
  ezi_ring_detach(&b);
  ezi_ring_detach(&b); /* idempotent */
}

/* A file in /dev/shm named name, mtime age_s seconds ago. */
static void make_shm_file(const char *name, time_t age_s) {
  char path[128];
  snprintf(path, sizeof path, "/dev/shm/%s", name);
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, 4096), 0);
  struct timespec t[2] = {{.tv_sec = time(NULL) - age_s}, {.tv_sec = time(NULL) - age_s}};
  assert_int_equal(futimens(fd, t), 0);
  close(fd);
}

/* Sets an existing /dev/shm name's mtime age_s seconds back. */
static void age_shm_file(const char *name, time_t age_s) {
  char path[128];
  snprintf(path, sizeof path, "/dev/shm/%s", name);
  struct timespec t[2] = {{.tv_sec = time(NULL) - age_s}, {.tv_sec = time(NULL) - age_s}};
  assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
}

/* Rings left by a publisher and a channel that both died mid-handshake: removed once nobody
 * holds them and they are old enough; a live creator's ring (held by its mapping), however old,
 * and anything not named as a ring are not touched. */
static void test_sweep_leftovers(void **state) {
  (void)state;
  pid_t dead = fork(); /* a pid that existed and no longer does */
  if (dead == 0) _exit(0);
  assert_true(dead > 0);
  assert_int_equal(waitpid(dead, NULL, 0), dead);
  char stale[64], young[64], mine[EZI_SHM_NAME_MAX + 1], other[64];
  snprintf(stale, sizeof stale, "psm_r%d_%08x", (int)dead, 0x5eed0001u);
  snprintf(young, sizeof young, "psm_r%d_%08x", (int)dead, 0x5eed0002u);
  snprintf(other, sizeof other, "psm_r%d_%08x_x", (int)dead, 0x5eed0004u); /* not a ring name */
  make_shm_file(stale, 3600);
  make_shm_file(young, 0);
  make_shm_file(other, 3600);
  ezi_ring live;
  assert_int_equal(ezi_ring_create(8, &live, mine), 0);
  age_shm_file(mine, 3600);
  ezi_ring_sweep(EZI_SHM_STALE_S); /* (its count: another test's first ring may sweep first) */
  assert_false(shm_exists(stale));
  assert_true(shm_exists(young));
  assert_true(shm_exists(mine));
  assert_true(shm_exists(other));
  assert_true(ezi_ring_sweep(0) >= 1); /* age 0: the young one goes as well (only we sweep so) */
  assert_false(shm_exists(young));
  assert_true(shm_exists(mine));
  ezi_ring_detach(&live); /* its creator lets go without removing the name: left over now */
  ezi_ring_sweep(EZI_SHM_STALE_S); /* (another test's first ring may sweep it first) */
  assert_false(shm_exists(mine));
  assert_int_equal(shm_unlink(other), 0);
}

static void test_attach_refuses(void **state) {
  (void)state;
  ezi_ring r;
  static const char *const bad[] = {"", ".", "..", "a/b", "../etc", "x\ny", "psm_\x01"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(ezi_ring_attach(bad[i], strlen(bad[i]), 8, &r), EZ_EPROTO);
  char longname[80];
  memset(longname, 'a', sizeof longname);
  assert_int_equal(ezi_ring_attach(longname, sizeof longname, 8, &r), EZ_EPROTO);
  assert_int_equal(ezi_ring_attach("psm_nothere", 11, 8, &r), EZ_ENOENT);

  /* a shared-memory object of the right size that is not a ring (no magic): refused, kept */
  char name[64];
  snprintf(name, sizeof name, "psm_ringtest%d", (int)getpid());
  char path[80];
  snprintf(path, sizeof path, "/%s", name);
  int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, (off_t)(sizeof(ezi_ring_hdr) + 8 * sizeof(ezi_ring_entry))), 0);
  close(fd);
  assert_int_equal(ezi_ring_attach(name, strlen(name), 8, &r), EZ_EPROTO);
  assert_true(shm_exists(name));
  assert_int_equal(shm_unlink(path), 0);
}

/* ---- a publisher in another process -------------------------------------------------------- */

/* The channel's shm_ring flag in this process's profile (-1: no channel yet). */
static int ring_flag(ez_context *ctx) {
  char *json = NULL;
  assert_int_equal(ez_context_profile(ctx, 1.0, &json), 0);
  const char *p = strstr(json, "\"shm_ring\":");
  int v = !p ? -1 : !strncmp(p + 11, "true", 4) ? 1 : 0;
  free(json);
  return v;
}

/* `ezmsg pub --size 64 --count N --rate 20000` in a child process -> a subscriber here (paced, so
 * the receiver both polls and sleeps): everything from the first message this subscriber sees to
 * the last arrives once, in order, intact; the channel says whether the ring carried it. */
static void stream_from_child(bool ring) {
  if (!ring) setenv("EZMSG_SHM_RING", "0", 1); /* read by ez_context_open: this side says no */
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(th_addr, &ctx), 0);
  unsetenv("EZMSG_SHM_RING");
  ez_sub *s = NULL;
  assert_int_equal(ez_sub_create(ctx, "/ring/stream", NULL, &s), 0);
  const uint64_t n = 20000;
  char count[32];
  snprintf(count, sizeof count, "%llu", (unsigned long long)n);
  pid_t pub = th_spawn_cli(-1, "pub", "/ring/stream", "--address", th_addr, "--size", "64",
                           "--count", count, "--num-buffers", "8", "--rate", "20000", NULL);
  assert_true(pub > 0);
  uint64_t next = UINT64_MAX, got = 0;
  int flag = -1;
  while (next != n) {
    th_recv_cli64(s, &next, TMO);
    if (++got == 100) flag = ring_flag(ctx); /* the channel is settled by now */
  }
  assert_int_equal(th_wait_exit(pub, TMO), 0);
  assert_int_equal(flag, ring ? 1 : 0);
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

static void test_stream_through_ring(void **state) {
  (void)state;
  stream_from_child(true);
}

static void test_stream_without_ring(void **state) {
  (void)state;
  stream_from_child(false);
}

/* ---- a publisher that breaks the ring's rules ----------------------------------------------- */
/* A message through a hand-made ring arrives; one whose entry names another message, or a
 * `published` beyond the ring, makes the channel drop the link, and nothing false is delivered. */
static void ring_violation(int kind) {
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(th_addr, &ctx), 0);
  ez_sub *s = NULL;
  assert_int_equal(ez_sub_create(ctx, "/ring/fake", NULL, &s), 0);
  fake f;
  fake_start(&f, "/ring/fake");
  fake_put(&f, 0, 0, "hello", 1);
  ez_msg m;
  assert_int_equal(ez_recv(s, &m, TMO), 0);
  assert_int_equal(m.msg_id, 0);
  assert_int_equal(m.len, 5);
  assert_memory_equal(m.data, "hello", 5);
  assert_string_equal(m.pub_id, f.id);
  ez_msg_release(&m);
  int64_t end = th_now_ms() + TMO; /* the release reaches the shared entry */
  while (__atomic_load_n(&f.ring.e[0].refs, __ATOMIC_SEQ_CST) && th_now_ms() < end)
    th_sleep_ms(1);
  assert_int_equal(__atomic_load_n(&f.ring.e[0].refs, __ATOMIC_SEQ_CST), 0);

  if (kind == 0)
    fake_put(&f, 1, 5, "wrong", 2); /* the entry names message 5 */
  else
    fake_put(&f, 1, 1, "far", 1000); /* 999 messages announced in a ring of 4 */
  assert_true(rp_hung_up(f.data, TMO));
  assert_int_equal(ez_recv(s, &m, 300), EZ_ETIMEDOUT);
  fake_end(&f);
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

static void test_ring_wrong_entry(void **state) {
  (void)state;
  ring_violation(0);
}

static void test_ring_out_of_range(void **state) {
  (void)state;
  ring_violation(1);
}

/* A real publisher (another context: a ring between them, as between processes) and a receiver
 * that sleeps before each message: with the word on, the publisher wakes it through the word for
 * every one of them; with EZMSG_SHM_WAKE=0 (the receiver's side), through frames only. */
static void publisher_wakes(bool word) {
  setenv("EZMSG_SPIN_US", "0", 1); /* nobody polls: the receiver sleeps for each message */
  if (!word) setenv(EZ_SHM_WAKE_ENV, "0", 1);
  ez_context *cp, *cs;
  assert_int_equal(ez_context_open(th_addr, &cp), 0);
  assert_int_equal(ez_context_open(th_addr, &cs), 0);
  unsetenv("EZMSG_SPIN_US");
  unsetenv(EZ_SHM_WAKE_ENV);
  ez_sub *s;
  ez_pub *p;
  assert_int_equal(ez_sub_create(cs, "/ring/wakes", NULL, &s), 0);
  assert_int_equal(ez_pub_create(cp, "/ring/wakes", NULL, &p), 0);
  ezi_ring_hdr *h = NULL;
  for (int i = 0; !h; i++) { /* until the ring carries the messages */
    assert_true(i < 1000);
    ez_msg m;
    assert_int_equal(ez_publish(p, "x", 1, TMO), 0);
    assert_int_equal(ez_recv(s, &m, TMO), 0);
    ez_msg_release(&m);
    h = ring_of(cs);
  }
  uint32_t w0 = __atomic_load_n(&h->pub_wakes, __ATOMIC_RELAXED);
  const int n = 20;
  for (int i = 0; i < n; i++) {
    receiver r;
    receiver_start(&r, s, TMO);
    if (word) receiver_sleeps(&r); /* (without the word it sleeps on its condition variable) */
    char text[16];
    snprintf(text, sizeof text, "m%d", i);
    assert_int_equal(ez_publish(p, text, strlen(text), TMO), 0);
    pthread_join(r.th, NULL);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.text, text);
  }
  /* Each publish found the receiver asleep on the word, and woke it there. */
  uint32_t wakes = __atomic_load_n(&h->pub_wakes, __ATOMIC_RELAXED) - w0;
  assert_int_equal(wakes, word ? (uint32_t)n : 0);
  ez_pub_destroy(p);
  ez_sub_destroy(s);
  ez_context_close(cp);
  ez_context_close(cs);
}

static void test_publisher_wakes_word(void **state) {
  (void)state;
  publisher_wakes(true);
}

static void test_publisher_wakes_frames(void **state) {
  (void)state;
  publisher_wakes(false);
}

/* ez_publish on another thread, which the test watches from /proc. */
typedef struct publishing {
  ez_pub *p;
  pthread_t th;
  int tid; /* atomic */
  int rc;
} publishing;

static void *publishing_main(void *arg) {
  publishing *w = arg;
  __atomic_store_n(&w->tid, (int)gettid(), __ATOMIC_SEQ_CST);
  w->rc = ez_publish(w->p, "blocked", 7, TMO);
  return NULL;
}

/* A publisher of 2 slots in one context and a subscriber in another (a ring between them, as
 * between processes), nobody polling, once the ring carries their messages and the next one goes
 * to slot 0; then the subscriber holds the next two messages (m[0] in slot 0, m[1] in slot 1). */
typedef struct pair {
  ez_context *cp, *cs;
  ez_sub *s;
  ez_pub *p;
  ezi_ring_hdr *h;
  ez_msg m[2];
} pair;

static void pair_open(pair *x, const char *topic) {
  setenv("EZMSG_SPIN_US", "0", 1);
  assert_int_equal(ez_context_open(th_addr, &x->cp), 0);
  assert_int_equal(ez_context_open(th_addr, &x->cs), 0);
  unsetenv("EZMSG_SPIN_US");
  ez_pub_opts o;
  ez_pub_opts_init(&o);
  o.num_buffers = 2;
  assert_int_equal(ez_sub_create(x->cs, topic, NULL, &x->s), 0);
  assert_int_equal(ez_pub_create(x->cp, topic, &o, &x->p), 0);
  x->h = NULL;
  for (int i = 0; !x->h || i % 2; i++) {
    assert_true(i < 1000);
    assert_int_equal(ez_publish(x->p, "x", 1, TMO), 0);
    assert_int_equal(ez_recv(x->s, &x->m[0], TMO), 0);
    ez_msg_release(&x->m[0]);
    x->h = ring_of(x->cs);
  }
  for (int i = 0; i < 2; i++) {
    assert_int_equal(ez_publish(x->p, "held", 4, TMO), 0);
    assert_int_equal(ez_recv(x->s, &x->m[i], TMO), 0);
  }
}

/* The blocked publish's message arrives; then everything closes. */
static void pair_close(pair *x) {
  ez_msg m;
  assert_int_equal(ez_recv(x->s, &m, TMO), 0);
  assert_int_equal(m.len, 7);
  assert_memory_equal(m.data, "blocked", 7);
  ez_msg_release(&m);
  ez_pub_destroy(x->p);
  ez_sub_destroy(x->s);
  ez_context_close(x->cp);
  ez_context_close(x->cs);
}

/* The subscriber holds both slots: the publish waits, asleep on the ring's word, and the release
 * wakes it there (old_channel: the test clears pub_sleep as a channel that does not know it
 * would ignore it, so the release sends an RX_ACK, which wakes it through its I/O thread). */
static void publisher_sleeps(bool old_channel) {
  pair x;
  pair_open(&x, "/ring/pubword");
  publishing w = {.p = x.p};
  assert_int_equal(pthread_create(&w.th, NULL, publishing_main, &w), 0);
  sleeps_on_word(&w.tid); /* the publish sleeps on the ring's word */
  uint32_t w0 = __atomic_load_n(&x.h->pub_word, __ATOMIC_SEQ_CST);
  if (old_channel) __atomic_store_n(&x.h->pub_sleep, 0, __ATOMIC_SEQ_CST);
  ez_msg_release(&x.m[0]);
  pthread_join(w.th, NULL);
  assert_int_equal(w.rc, 0);
  if (!old_channel) assert_true(__atomic_load_n(&x.h->pub_word, __ATOMIC_SEQ_CST) != w0);
  ez_msg_release(&x.m[1]);
  pair_close(&x);
}

typedef struct syncing {
  pthread_t th;
  int rc;
} syncing;

static void *syncing_main(void *arg) {
  ((syncing *)arg)->rc = ez_graph_sync(th_addr, TMO);
  return NULL;
}

/* A SYNC comes while the publisher sleeps on the word for the one slot still held: the release
 * of that slot wakes the word (no RX_ACK for the I/O thread to act on), and the SYNC still
 * completes. */
static void test_publisher_sync_on_word(void **state) {
  (void)state;
  pair x;
  pair_open(&x, "/ring/sync");
  ez_msg_release(&x.m[1]); /* slot 0 alone is held: the next publish waits for it */
  publishing w = {.p = x.p};
  assert_int_equal(pthread_create(&w.th, NULL, publishing_main, &w), 0);
  sleeps_on_word(&w.tid);
  syncing y;
  assert_int_equal(pthread_create(&y.th, NULL, syncing_main, &y), 0);
  int64_t end = th_now_ms() + TMO; /* the SYNC reached the publisher: it wants any slot now */
  while (__atomic_load_n(&x.h->pub_wants, __ATOMIC_SEQ_CST) != UINT32_MAX && th_now_ms() < end)
    th_sleep_ms(1);
  assert_int_equal(__atomic_load_n(&x.h->pub_wants, __ATOMIC_SEQ_CST), UINT32_MAX);
  ez_msg_release(&x.m[0]);
  pthread_join(y.th, NULL);
  assert_int_equal(y.rc, 0);
  assert_int_equal(ez_graph_resume(th_addr, TMO), 0); /* (a SYNC leaves it paused) */
  pthread_join(w.th, NULL);
  assert_int_equal(w.rc, 0);
  pair_close(&x);
}

static void test_publisher_sleeps_on_word(void **state) {
  (void)state;
  publisher_sleeps(false);
}

static void test_publisher_woken_by_ack(void **state) {
  (void)state;
  publisher_sleeps(true);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_create_attach),
      cmocka_unit_test(test_attach_refuses),
      cmocka_unit_test(test_sweep_leftovers),
      cmocka_unit_test_setup_teardown(test_stream_through_ring, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_stream_without_ring, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_ring_wrong_entry, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_ring_out_of_range, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_publisher_wakes_word, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_publisher_wakes_frames, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_publisher_sleeps_on_word, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_publisher_woken_by_ack, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_publisher_sync_on_word, th_setup, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}