/* The kit of the ring tests (test_ring.c, test_ring_words.c): a hand-played ezmsg-c publisher of
 * a shared ring (4 slots, a real segment, the channel handshake by hand), a receiving thread
 * watched from /proc, and the channel seen from inside. */
#ifndef EZ_TEST_RINGKIT_H
#define EZ_TEST_RINGKIT_H

#include "harness.h"
#include "proto/shmring.h"
#include "base/futex.h"
#include "chan/channel.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define TMO 30000

typedef struct fake {
  int graph, listener, data;
  char id[37], seg_name[64], ring_name[EZI_SHM_NAME_MAX + 1];
  ez_shm *seg;
  ezi_ring ring;
} fake;

uint64_t mono_ns(void);
/* Plays an ezmsg-c publisher of 4 slots, by hand, for subscriber topic `topic` in this process:
 * registration, the channel handshake with a real segment, then the channel's X_HELLO, answered
 * with X_RING. */
void fake_start(fake *f, const char *topic);
/* The TX_SHM frame for message id, which names the segment and wakes the channel. */
void fake_frame(fake *f, uint64_t id);
/* Puts message id (text) in its slot and ring entry, as entry_id, then publishes up to
 * `published` and sends the TX_SHM that names the segment and wakes the channel. */
void fake_put(fake *f, uint64_t id, uint64_t entry_id, const char *text, uint64_t published);
/* As fake_put, without the TX_SHM frame: what a publisher of ours does while the channel is awake
 * or asleep on the word. */
void fake_put_silent(fake *f, uint64_t id, const char *text);
void fake_end(fake *f);

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

void receiver_start(receiver *r, ez_sub *s, int timeout_ms);
/* Waits until the thread whose id will be stored in *tidp sleeps on a ring's word (a futex wait
 * on a word shared between processes, FUTEX_WAIT_BITSET: a condition variable's wait is
 * private), or in futex_waitv on n words (seen in /proc/self/task/TID/syscall). */
void sleeps_on_word(const int *tidp);
void sleeps_on_words(const int *tidp, unsigned long n);
/* ... or in any futex wait (a shared word, or a condition variable). */
void sleeps_in_futex(const int *tidp);
void receiver_sleeps(receiver *r);
/* Whether this kernel has futex_waitv (5.16 on), and no filter refuses it. */
bool waitv_works(void);

/* A subscriber here and a hand-made publisher whose first message (with its TX_SHM, which names
 * the segment) was taken. */
void word_setup(ez_context **ctx, ez_sub **s, fake *f, const char *topic);
/* word_setup, then a thread of this process asleep in ez_recv on the ring's word. */
void word_sleeping(ez_context **ctx, ez_sub **s, fake *f, receiver *r, const char *topic);
void word_done(ez_context *ctx, ez_sub *s, fake *f);

/* Returns once ctx's I/O thread has handled every frame written to its channels so far. */
void frames_handled(ez_context *ctx);
/* A call that does nothing (ezi_ctx_call(ctx, nothing, NULL) orders what came before it before
 * what the I/O thread does after). */
void nothing(void *arg);
/* The shared-ring channel of ctx (one), or NULL; the same asserted; its ring's header or NULL. */
chan *find_ring_chan(ez_context *ctx);
chan *ring_chan(ez_context *ctx);
ezi_ring_hdr *ring_of(ez_context *ctx);

#endif
