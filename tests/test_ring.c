/* The shared-memory notice ring between two ezmsg-c processes (src/shmring.c, the ring mode of
 * src/localchan.c): the mapping rules (what a channel accepts and removes), and a real publisher
 * process whose notices reach this process through the ring, or through TX_SHM frames when the
 * ring is turned off. */
#include "harness.h"
#include "shmring.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

static char g_addr[64];
static pid_t g_server;

static int setup(void **state) {
  (void)state;
  th_free_address(g_addr, sizeof g_addr);
  g_server = th_start_server(g_addr);
  return g_server > 0 ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  int rc = g_server > 0 ? th_stop(g_server, SIGTERM, 10000) : 0;
  g_server = 0;
  return rc == 0 ? 0 : -1;
}

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
  assert_int_equal(ez_context_open(g_addr, &ctx), 0);
  unsetenv("EZMSG_SHM_RING");
  ez_sub *s = NULL;
  assert_int_equal(ez_sub_create(ctx, "/ring/stream", NULL, &s), 0);
  const uint64_t n = 20000;
  char count[32];
  snprintf(count, sizeof count, "%llu", (unsigned long long)n);
  pid_t pub = th_spawn_cli(-1, "pub", "/ring/stream", "--address", g_addr, "--size", "64",
                           "--count", count, "--num-buffers", "8", "--rate", "20000", NULL);
  assert_true(pub > 0);
  uint64_t next = UINT64_MAX, got = 0;
  int flag = -1;
  while (next != n) {
    ez_msg m;
    int rc = ez_recv(s, &m, TMO);
    if (rc) fail_msg("after %llu messages: %s", (unsigned long long)got, ez_strerror(rc));
    uint64_t k = 0;
    memcpy(&k, m.data, 8);
    bool ok = m.len == 64 && (next == UINT64_MAX || k == next);
    for (size_t i = 8; ok && i < 64; i++)
      ok = ((const uint8_t *)m.data)[i] == (uint8_t)i;
    ez_msg_release(&m);
    if (!ok)
      fail_msg("message %llu: expected number %llu", (unsigned long long)k,
               (unsigned long long)next);
    next = k + 1;
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_create_attach),
      cmocka_unit_test(test_attach_refuses),
      cmocka_unit_test_setup_teardown(test_stream_through_ring, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stream_without_ring, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
