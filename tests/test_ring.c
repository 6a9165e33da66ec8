/* The shared-memory notice ring between two ezmsg-c processes (src/proto/shmring.c, the ring mode
 * of src/ring/localchan.c): the mapping rules (what a channel accepts and removes), a real
 * publisher process whose notices reach this process through the ring, or through TX_SHM frames
 * when the ring is turned off, and the receiver that sleeps on the ring's word: woken by the
 * publisher directly, by an older publisher's frame, by its link's end, and not fooled by a peer
 * that wakes it for nothing; a receiver of several rings sleeps on all their words at once. */
#include "harness.h"
#include "proto/marshal.h"
#include "rawproto.h"
#include "proto/shmring.h"
#include "base/futex.h"
#include "base/wire.h"
#include "chan/channel.h"

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

#define TMO 30000

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

typedef struct fake {
  int graph, listener, data;
  char id[37], seg_name[64], ring_name[EZI_SHM_NAME_MAX + 1];
  ez_shm *seg;
  ezi_ring ring;
} fake;

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Plays an ezmsg-c publisher of 4 slots, by hand, for subscriber topic `topic` in this process:
 * registration, the channel handshake with a real segment, then the channel's X_HELLO, answered
 * with X_RING. */
static void fake_start(fake *f, const char *topic) {
  char my_addr[64];
  f->listener = rp_listen(my_addr, 4);
  f->graph = rp_fake_pub_begin(th_addr, topic, my_addr, f->id);
  f->data = accept4(f->listener, NULL, NULL, SOCK_CLOEXEC);
  assert_true(f->data >= 0);
  rp_expect_u8(f->data, EZI_CHANNEL);
  char chan_id[64];
  rp_rd_str(f->data, chan_id, sizeof chan_id);
  assert_int_equal(ez_shm_create(th_addr, 4, 256, &f->seg, TMO), 0);
  snprintf(f->seg_name, sizeof f->seg_name, "%s", ez_shm_name(f->seg));
  rp_wr_str(f->data, f->seg_name);
  rp_expect_u8(f->data, EZI_SHM_OK);
  assert_int_equal(rp_rd_u64(f->data), (uint64_t)getpid());
  uint8_t done[9] = {EZI_COMPLETE};
  rp_put_u64le(done + 1, 4);
  rp_wr(f->data, done, 9);
  rp_expect_u8(f->data, EZI_X_HELLO); /* an ezmsg-c channel asks for a ring */
  rp_expect_u8(f->graph, EZI_COMPLETE);
  assert_int_equal(ezi_ring_create(4, &f->ring, f->ring_name), 0);
  uint8_t hdr[17];
  hdr[0] = EZI_X_RING;
  rp_put_u64le(hdr + 1, 0);
  rp_put_u64le(hdr + 9, strlen(f->ring_name));
  rp_wr(f->data, hdr, 17);
  rp_wr(f->data, f->ring_name, strlen(f->ring_name));
}

/* The TX_SHM frame for message id, which names the segment and wakes the channel. */
static void fake_frame(fake *f, uint64_t id) {
  uint8_t hdr[17];
  hdr[0] = EZI_TX_SHM;
  rp_put_u64le(hdr + 1, id);
  rp_put_u64le(hdr + 9, strlen(f->seg_name));
  rp_wr(f->data, hdr, 17);
  rp_wr(f->data, f->seg_name, strlen(f->seg_name));
}

/* Puts message id (text) in its slot and ring entry, as entry_id, then publishes up to
 * `published` and sends the TX_SHM that names the segment and wakes the channel. */
static void fake_put(fake *f, uint64_t id, uint64_t entry_id, const char *text,
                     uint64_t published) {
  uint8_t *slot = ez_shm_buffer(f->seg, id % 4);
  size_t n = strlen(text);
  ezi_marshal_bytes_header(slot, id, n);
  memcpy(slot + EZI_MARSHAL_BYTES_HDR, text, n);
  ezi_ring_entry *e = &f->ring.e[id % 4];
  e->msg_id = entry_id;
  e->t0 = mono_ns();
  e->gen = 0;
  __atomic_store_n(&e->refs, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&f->ring.h->published, published, __ATOMIC_SEQ_CST);
  fake_frame(f, id);
}

static void fake_end(fake *f) {
  close(f->data);
  close(f->graph);
  close(f->listener);
  ezi_ring_detach(&f->ring);
  ez_shm_close(f->seg);
}

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

/* ---- the receiver asleep on the ring's word ------------------------------------------------- */

/* ez_recv on another thread, which the test watches from /proc. */
typedef struct receiver {
  ez_sub *s;
  int timeout_ms;
  pthread_t th;
  int tid; /* atomic: set once the thread runs */
  int rc;
  uint64_t msg_id;
  char text[16];
} receiver;

static void *receiver_main(void *arg) {
  receiver *r = arg;
  __atomic_store_n(&r->tid, (int)gettid(), __ATOMIC_SEQ_CST);
  ez_msg m;
  r->rc = ez_recv(r->s, &m, r->timeout_ms);
  if (r->rc == 0) {
    r->msg_id = m.msg_id;
    snprintf(r->text, sizeof r->text, "%.*s", (int)m.len, (const char *)m.data);
    ez_msg_release(&m);
  }
  return NULL;
}

static void receiver_start(receiver *r, ez_sub *s, int timeout_ms) {
  *r = (receiver){.s = s, .timeout_ms = timeout_ms};
  assert_int_equal(pthread_create(&r->th, NULL, receiver_main, r), 0);
}

/* Whether thread tid of this process is in system call want_nr with want_a1 as its second
 * argument; in a futex wait on a word shared between processes (FUTEX_WAIT_BITSET, 9: a
 * condition variable's wait is private, 0x89 or 0x189). */
static bool in_syscall(int tid, unsigned long want_nr, unsigned long want_a1) {
  char path[64], line[256] = "";
  snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
  FILE *f = fopen(path, "r");
  if (!f) return false;
  bool ok = fgets(line, sizeof line, f) != NULL;
  fclose(f);
  unsigned long nr = 0, a0 = 0, a1 = 0;
  return ok && sscanf(line, "%lu %lx %lx", &nr, &a0, &a1) == 3 && nr == want_nr && a1 == want_a1;
}

static bool in_shared_futex_wait(int tid) { return in_syscall(tid, SYS_futex, 9); }

/* Waits until the thread whose id will be stored in *tidp sleeps on a ring's word. */
static void sleeps_on_word(const int *tidp) {
  int64_t end = th_now_ms() + TMO;
  int tid;
  while (!(tid = __atomic_load_n(tidp, __ATOMIC_SEQ_CST)) && th_now_ms() < end)
    th_sleep_ms(1);
  while (!in_shared_futex_wait(tid) && th_now_ms() < end)
    th_sleep_ms(1);
  assert_true(in_shared_futex_wait(tid));
}

static void receiver_sleeps(receiver *r) { sleeps_on_word(&r->tid); }

/* As fake_put, without the TX_SHM frame: what a publisher of ours does while the channel is awake
 * or asleep on the word. */
static void fake_put_silent(fake *f, uint64_t id, const char *text) {
  uint8_t *slot = ez_shm_buffer(f->seg, id % 4);
  size_t n = strlen(text);
  ezi_marshal_bytes_header(slot, id, n);
  memcpy(slot + EZI_MARSHAL_BYTES_HDR, text, n);
  ezi_ring_entry *e = &f->ring.e[id % 4];
  e->msg_id = id;
  e->t0 = mono_ns();
  e->gen = 0;
  __atomic_store_n(&e->refs, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&f->ring.h->published, id + 1, __ATOMIC_SEQ_CST);
}

/* A subscriber here and a hand-made publisher whose first message (with its TX_SHM, which names
 * the segment) was taken. */
static void word_setup(ez_context **ctx, ez_sub **s, fake *f, const char *topic) {
  assert_int_equal(ez_context_open(th_addr, ctx), 0);
  assert_int_equal(ez_sub_create(*ctx, topic, NULL, s), 0);
  fake_start(f, topic);
  fake_put(f, 0, 0, "first", 1);
  ez_msg m;
  assert_int_equal(ez_recv(*s, &m, TMO), 0);
  assert_int_equal(m.msg_id, 0);
  ez_msg_release(&m);
  /* What the receiver asked for meanwhile (it may have slept before the ring started), taken as
   * a publisher's next put takes it. */
  __atomic_store_n(&f->ring.h->rx_sleep, 0, __ATOMIC_SEQ_CST);
}

/* word_setup, then a thread of this process asleep in ez_recv on the ring's word. */
static void word_sleeping(ez_context **ctx, ez_sub **s, fake *f, receiver *r, const char *topic) {
  word_setup(ctx, s, f, topic);
  receiver_start(r, *s, TMO);
  receiver_sleeps(r);
}

static void word_done(ez_context *ctx, ez_sub *s, fake *f) {
  fake_end(f);
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

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

/* On ctx's I/O thread: whether its channels' sockets hold no unread byte (so every frame that came
 * was handled). */
static void all_read(void *arg) {
  ez_context *ctx = *(ez_context **)arg;
  int unread = 0, n;
  for (size_t i = 0; i < ctx->n_chans; i++)
    if (ctx->chans[i]->pw.fd >= 0 && !ioctl(ctx->chans[i]->pw.fd, FIONREAD, &n)) unread += n;
  *(ez_context **)arg = unread ? ctx : NULL;
}

/* Returns once ctx's I/O thread has handled every frame written to its channels so far. */
static void frames_handled(ez_context *ctx) {
  int64_t end = th_now_ms() + TMO;
  ez_context *arg = ctx;
  do {
    arg = ctx;
    ezi_ctx_call(ctx, all_read, &arg);
  } while (arg && th_now_ms() < end);
  assert_null(arg);
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

static void nothing(void *arg) { (void)arg; }

/* The shared-ring channel of ctx (one), or NULL. */
static chan *find_ring_chan(ez_context *ctx) {
  chan *c = NULL;
  pthread_mutex_lock(&ctx->mu);
  for (size_t i = 0; i < ctx->n_chans; i++)
    if (ctx->chans[i]->rx->shared_ring) c = ctx->chans[i];
  pthread_mutex_unlock(&ctx->mu);
  return c;
}

static chan *ring_chan(ez_context *ctx) {
  chan *c = find_ring_chan(ctx);
  assert_non_null(c);
  return c;
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

/* Whether thread tid of this process sleeps in futex_waitv on n words. */
static bool in_futex_waitv(int tid, unsigned long n) { return in_syscall(tid, SYS_futex_waitv, n); }

/* ezi_futex_waitv: a word that no longer holds what the caller read returns at once, words that
 * do sleep until the deadline, and a bad call or an unmapped word is an error, not a sleep. */
/* Whether this kernel has futex_waitv (5.16 on), and no filter refuses it: else the tests of
 * several words skip (the receivers then sleep the frame way, as test_word_woken_by_frame). */
static bool waitv_works(void) {
  uint32_t a = 1, *w[1] = {&a}, v[1] = {2};
  return ezi_futex_waitv(w, v, 1, UINT64_MAX) != EZ_ENOTSUP;
}

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
 * once and asks neither publisher for a frame; a wake-up of either word, with no frame, brings
 * that publisher's message. */
static void test_word_fan_in(void **state) {
  (void)state;
  if (!waitv_works()) skip();
  const char *topic = "/ring/fanin";
  ez_context *ctx;
  ez_sub *s;
  fake f[2];
  assert_int_equal(ez_context_open(th_addr, &ctx), 0);
  assert_int_equal(ez_sub_create(ctx, topic, NULL, &s), 0);
  for (int i = 0; i < 2; i++) {
    fake_start(&f[i], topic);
    fake_put(&f[i], 0, 0, "first", 1);
  }
  for (int i = 0; i < 2; i++) {
    ez_msg m;
    assert_int_equal(ez_recv(s, &m, TMO), 0);
    assert_int_equal(m.msg_id, 0);
    ez_msg_release(&m);
  }
  for (int i = 0; i < 2; i++) /* (as each publisher's next put takes what was asked) */
    __atomic_store_n(&f[i].ring.h->rx_sleep, 0, __ATOMIC_SEQ_CST);
  for (int k = 0; k < 2; k++) {
    fake *p = &f[1 - k], *other = &f[k]; /* the second ring's message first */
    receiver r;
    receiver_start(&r, s, TMO);
    int64_t end = th_now_ms() + TMO;
    int tid;
    while (!(tid = __atomic_load_n(&r.tid, __ATOMIC_SEQ_CST)) && th_now_ms() < end)
      th_sleep_ms(1);
    while (!in_futex_waitv(tid, 2) && th_now_ms() < end)
      th_sleep_ms(1);
    assert_true(in_futex_waitv(tid, 2));
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
  for (int i = 0; i < 2; i++)
    fake_end(&f[i]);
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

/* The ring header of ctx's one shared-ring channel (chan/channel.h), or NULL. */
static ezi_ring_hdr *ring_of(ez_context *ctx) {
  chan *c = find_ring_chan(ctx);
  return c ? c->ring.h : NULL;
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
      cmocka_unit_test_setup_teardown(test_word_woken_by_publisher, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_word_woken_by_frame, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_word_spurious_and_link_end, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_empty_frame_rearms, th_setup, th_teardown),
      cmocka_unit_test(test_futex_waitv),
      cmocka_unit_test_setup_teardown(test_word_fan_in, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_empty_frame_word_sleeper, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_rearm_word_old_publisher, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_pull_missed, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_publisher_wakes_word, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_publisher_wakes_frames, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_publisher_sleeps_on_word, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_publisher_woken_by_ack, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_publisher_sync_on_word, th_setup, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
