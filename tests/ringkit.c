/* The kit of the ring tests (test_ring.c, test_ring_words.c): a hand-played ezmsg-c publisher of
 * a shared ring, a receiving thread watched from /proc, and the channel seen from inside
 * (ringkit.h). */
#include "ringkit.h"
#include "proto/marshal.h"
#include "rawproto.h"
#include "base/wire.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Plays an ezmsg-c publisher of 4 slots, by hand, for subscriber topic `topic` in this process:
 * registration, the channel handshake with a real segment, then the channel's X_HELLO, answered
 * with X_RING. */
void fake_start(fake *f, const char *topic) {
  char my_addr[64];
  f->listener = rp_listen(my_addr, 4);
  f->graph = rp_fake_pub_begin(th_addr, topic, my_addr, f->id);
  f->data = rp_accept_talker(f->listener, TMO);
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
void fake_frame(fake *f, uint64_t id) {
  uint8_t hdr[17];
  hdr[0] = EZI_TX_SHM;
  rp_put_u64le(hdr + 1, id);
  rp_put_u64le(hdr + 9, strlen(f->seg_name));
  rp_wr(f->data, hdr, 17);
  rp_wr(f->data, f->seg_name, strlen(f->seg_name));
}

/* Message id (text) in its slot and ring entry, as entry_id; then `published`. */
static void put_entry(fake *f, uint64_t id, uint64_t entry_id, const char *text,
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
}

void fake_put(fake *f, uint64_t id, uint64_t entry_id, const char *text, uint64_t published) {
  put_entry(f, id, entry_id, text, published);
  fake_frame(f, id);
}

void fake_end(fake *f) {
  close(f->data);
  close(f->graph);
  close(f->listener);
  ezi_ring_detach(&f->ring);
  ez_shm_close(f->seg);
}

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

void receiver_start(receiver *r, ez_sub *s, int timeout_ms) {
  *r = (receiver){.s = s, .timeout_ms = timeout_ms};
  assert_int_equal(pthread_create(&r->th, NULL, receiver_main, r), 0);
}

/* Whether thread tid of this process is in system call want_nr with want_a1 (or ANY_ARG) as its
 * second argument; in a futex wait on a word shared between processes (FUTEX_WAIT_BITSET, 9: a
 * condition variable's wait is private, 0x89 or 0x189). */
#define ANY_ARG (~0ul)

static bool in_syscall(int tid, unsigned long want_nr, unsigned long want_a1) {
  char path[64], line[256] = "";
  snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
  FILE *f = fopen(path, "r");
  if (!f) return false;
  bool ok = fgets(line, sizeof line, f) != NULL;
  fclose(f);
  unsigned long nr = 0, a0 = 0, a1 = 0;
  return ok && sscanf(line, "%lu %lx %lx", &nr, &a0, &a1) == 3 && nr == want_nr &&
         (a1 == want_a1 || want_a1 == ANY_ARG);
}

/* Waits until the thread whose id will be stored in *tidp sleeps on a ring's word. */
static void waits_in(const int *tidp, unsigned long nr, unsigned long a1) {
  int64_t end = th_now_ms() + TMO;
  int tid;
  while (!(tid = __atomic_load_n(tidp, __ATOMIC_SEQ_CST)) && th_now_ms() < end)
    th_sleep_ms(1);
  while (!in_syscall(tid, nr, a1) && th_now_ms() < end)
    th_sleep_ms(1);
  assert_true(in_syscall(tid, nr, a1));
}

void sleeps_in_futex(const int *tidp) { waits_in(tidp, SYS_futex, ANY_ARG); }

void sleeps_on_word(const int *tidp) { waits_in(tidp, SYS_futex, 9); }
void sleeps_on_words(const int *tidp, unsigned long n) { waits_in(tidp, SYS_futex_waitv, n); }

void receiver_sleeps(receiver *r) { sleeps_on_word(&r->tid); }

void fake_put_silent(fake *f, uint64_t id, const char *text) { put_entry(f, id, id, text, id + 1); }

/* A subscriber here and a hand-made publisher whose first message (with its TX_SHM, which names
 * the segment) was taken. */
void word_setup(ez_context **ctx, ez_sub **s, fake *f, const char *topic) {
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
void word_sleeping(ez_context **ctx, ez_sub **s, fake *f, receiver *r, const char *topic) {
  word_setup(ctx, s, f, topic);
  receiver_start(r, *s, TMO);
  receiver_sleeps(r);
}

void word_done(ez_context *ctx, ez_sub *s, fake *f) {
  fake_end(f);
  ez_sub_destroy(s);
  ez_context_close(ctx);
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
void frames_handled(ez_context *ctx) {
  int64_t end = th_now_ms() + TMO;
  ez_context *arg = ctx;
  do {
    arg = ctx;
    ezi_ctx_call(ctx, all_read, &arg);
  } while (arg && th_now_ms() < end);
  assert_null(arg);
}

void nothing(void *arg) { (void)arg; }

/* The shared-ring channel of ctx (one), or NULL. */
chan *find_ring_chan(ez_context *ctx) {
  chan *c = NULL;
  pthread_mutex_lock(&ctx->mu);
  for (size_t i = 0; i < ctx->n_chans; i++)
    if (ctx->chans[i]->rx->shared_ring) c = ctx->chans[i];
  pthread_mutex_unlock(&ctx->mu);
  return c;
}

chan *ring_chan(ez_context *ctx) {
  chan *c = find_ring_chan(ctx);
  assert_non_null(c);
  return c;
}

/* Whether this kernel has futex_waitv (5.16 on), and no filter refuses it: else the tests of
 * several words skip (the receivers then sleep the frame way, as test_word_woken_by_frame). */
bool waitv_works(void) {
  uint32_t a = 1, *w[1] = {&a}, v[1] = {2};
  return ezi_futex_waitv(w, v, 1, UINT64_MAX) != EZ_ENOTSUP;
}

/* The ring header of ctx's one shared-ring channel (chan/channel.h), or NULL. */
ezi_ring_hdr *ring_of(ez_context *ctx) {
  chan *c = find_ring_chan(ctx);
  return c ? c->ring.h : NULL;
}
