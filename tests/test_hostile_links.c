/* Hostile peers on the links of the data plane (issue 24): what a peer can make a process hold,
 * spend or print. Real processes (the CLI, or a victim subscriber re-run from this executable,
 * hostile_kit.h) against fake peers spoken by hand over sockets, a real `ezmsg serve` per test.
 *
 *  - test_silent_flood: more silent connections than a publisher (ulimit -n 48) has descriptors.
 *    It used to spin a core and serve no one until they closed; now it sheds what it cannot
 *    accept, closes the silent ones at its handshake deadline, stays nearly idle, logs a few
 *    lines, and a real subscriber gets its messages while the flood's connections stay open.
 *  - test_handshake_deadline: a connection that never finishes the handshake is closed.
 *  - test_fd_limit_raised: `ezmsg sub` and `ezmsg pub` raise their soft open-files limit.
 *  - test_rx_memory_cap: 12 publishers each announce a 256 MiB frame and send 12 MiB of it to a
 *    victim limited to 64 MiB (EZMSG_RX_PROCESS_MB): its peak resident memory stays within the
 *    limit (it grew by 144 MiB before) and its address space does not grow by what the headers
 *    announce (3 GiB before); links beyond the limit are dropped at once, the rest when their
 *    frame has been incomplete for EZMSG_FRAME_TIMEOUT_MS (never, before).
 *  - test_log_storm: 60 bad handshakes in 3 s give a few lines, not 60.
 *  - test_ratelimit_rule: the rate limit's rule, with a made-up clock.
 *  - test_many_buffers: messages of 100 000 and 1 000 000 buffers arrive whole (delivering one
 *    walked every length per buffer: seconds, and half an hour for the second).
 *  - test_shm_create_limits: the graph server refuses segments beyond its limits.
 *  - test_never_acking_channel_named: a channel that takes every message and acks none holds its
 *    publisher (protocol semantics), and the publisher's profile names it. */
#include "hostile_kit.h"
#include "base/internal.h"
#include "rawproto.h"
#include "base/wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* (So that this file also builds on a tree without the limits, to show that its tests fail
 * there.) */
#ifndef EZ_RX_PROCESS_ENV
#define EZ_RX_PROCESS_ENV "EZMSG_RX_PROCESS_MB"
#define EZ_FRAME_TIMEOUT_ENV "EZMSG_FRAME_TIMEOUT_MS"
#define EZ_SHM_SEGMENT_MAX_ENV "EZMSG_SHM_SEGMENT_MB"
#define EZ_SHM_TOTAL_MAX_ENV "EZMSG_SHM_TOTAL_MB"
#endif
#ifndef EZI_RL_BURST
#define EZI_RL_BURST 5
#endif

/* ---- helpers ----------------------------------------------------------------------------------
 */

/* The id and channel address ("host:port") of the publisher of `topic` at server srv, once it is
 * registered (asked from the profile, then with a CHANNEL request). */
static void pub_address(const char *srv, const char *topic, char id[64], char addr[64]) {
  int64_t end = th_now_ms() + HK_TMO;
  id[0] = 0;
  while (!id[0] && th_now_ms() < end) {
    char *json = NULL;
    ez_profile_data d;
    if (ez_profile(srv, 0, &json, 5000) == 0 && ez_profile_parse(json, &d) == 0) {
      for (size_t i = 0; i < d.n_publishers; i++)
        if (d.publishers[i].topic && !strcmp(d.publishers[i].topic, topic) && d.publishers[i].id)
          snprintf(id, 64, "%s", d.publishers[i].id);
      ez_profile_data_free(&d);
    }
    free(json);
    if (!id[0]) th_sleep_ms(50);
  }
  assert_true(id[0]);
  int fd = rp_connect(srv);
  rp_wr_cmd(fd, HK_CHANNEL, id, NULL);
  rp_expect_u8(fd, HK_COMPLETE);
  char cid[64];
  rp_rd_str(fd, cid, sizeof cid);
  rp_rd_str(fd, addr, 64);
  close(fd);
}

/* A TCP connection to addr, or -1 (no cmocka: connections may be refused in a flood). */
static int dial(const char *addr) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)atoi(strrchr(addr, ':') + 1)),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a)) {
    close(fd);
    fd = -1;
  }
  return fd;
}

/* ---- descriptors and handshakes ---------------------------------------------------------------
 */

#define FLOOD 60

static void test_silent_flood(void **state) {
  (void)state;
  hk_proc pub;
  hk_spawn_opts lim = {.nofile_soft = 48, .nofile_hard = 48};
  hk_start(&pub, &lim, "pub", "--address", th_addr, "--size", "64", "--count", "0", "--rate", "100",
           "/hostile/flood", NULL);
  char id[64], addr[64];
  pub_address(th_addr, "/hostile/flood", id, addr);
  int fds[FLOOD], n = 0;
  for (int i = 0; i < FLOOD; i++)
    if ((fds[n] = dial(addr)) >= 0) n++;
  assert_true(n >= 48); /* more than it has descriptors for (the rest wait in its backlog) */
  /* Out of descriptors, it does not spin: 2 s of that take a fraction of a core (a spinning
   * publisher took all of one). A generous bound, not a measurement. */
  th_sleep_ms(300);
  long c0 = hk_cpu_ms(pub.pid);
  th_sleep_ms(2000);
  long c1 = hk_cpu_ms(pub.pid);
  hk_assert_alive(&pub, "the flooded publisher");
  print_message("flooded publisher: %ld ms of CPU in 2000 ms\n", c1 - c0);
  assert_true(c0 >= 0 && c1 - c0 < 1000);
  /* A real subscriber gets messages while the flood's connections stay open: the publisher
   * closes those that never finish the handshake. */
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(th_addr, &ctx), 0);
  ez_sub *s = NULL;
  assert_int_equal(ez_sub_create(ctx, "/hostile/flood", NULL, &s), 0);
  uint64_t next = UINT64_MAX;
  th_recv_cli64(s, &next, 3 * HK_TMO);
  th_recv_cli64(s, &next, HK_TMO);
  ez_sub_destroy(s);
  ez_context_close(ctx);
  int lines = hk_count_lines(&pub, "out of file descriptors");
  print_message("%d lines about it\n", lines);
  assert_true(lines >= 1 && lines <= 2 * EZI_RL_BURST); /* (two windows, on a slow day) */
  for (int i = 0; i < n; i++)
    close(fds[i]);
  kill(pub.pid, SIGTERM);
  assert_int_equal(hk_stop(&pub), 0);
}

static void test_handshake_deadline(void **state) {
  (void)state;
  hk_proc pub;
  hk_start(&pub, NULL, "pub", "--address", th_addr, "--size", "8", "--count", "0", "--rate", "10",
           "/hostile/hs", NULL);
  char id[64], addr[64];
  pub_address(th_addr, "/hostile/hs", id, addr);
  int silent = rp_open(addr), half = rp_open(addr);
  rp_wr(half, (const uint8_t[]){HK_CHANNEL, 36, 0, 0, 0, 0, 0, 0, 0, 'a', 'b'}, 11);
  assert_true(rp_closed_silently(silent, HK_TMO)); /* within its 5 s deadline, and some slack */
  assert_true(rp_closed_silently(half, HK_TMO));
  close(silent);
  close(half);
  assert_true(hk_count_lines(&pub, "did not finish the handshake") >= 1);
  kill(pub.pid, SIGTERM);
  assert_int_equal(hk_stop(&pub), 0);
}

/* Waits until pid's soft open-files limit is `want`. */
static bool limit_becomes(pid_t pid, unsigned long want) {
  unsigned long soft = 0, hard = 0;
  for (int i = 0; i < 200; i++) {
    if (hk_nofile(pid, &soft, &hard) && soft == want) return true;
    th_sleep_ms(50);
  }
  print_error("open-files limit of %d: %lu (hard %lu), want %lu\n", (int)pid, soft, hard, want);
  return false;
}

static void test_fd_limit_raised(void **state) {
  (void)state;
  hk_proc sub, pub;
  hk_spawn_opts lim = {.nofile_soft = 256, .nofile_hard = 4096};
  hk_start(&sub, &lim, "sub", "--address", th_addr, "/hostile/fdl", NULL);
  hk_start(&pub, &lim, "pub", "--address", th_addr, "--size", "8", "--count", "0", "--rate", "10",
           "/hostile/fdl", NULL);
  assert_true(limit_becomes(sub.pid, 4096));
  assert_true(limit_becomes(pub.pid, 4096));
  kill(pub.pid, SIGTERM);
  kill(sub.pid, SIGTERM);
  assert_int_equal(hk_stop(&pub), 0);
  assert_int_equal(hk_stop(&sub), 0);
}

/* ---- memory -----------------------------------------------------------------------------------
 */

#define MEM_LINKS 12
#define MEM_ANNOUNCED ((uint64_t)256 << 20)
#define MEM_SENT ((size_t)12 << 20)
#define MEM_CAP_MB 64

/* ASAN_OPTIONS for a victim: a small quarantine (freed memory would stay resident otherwise). */
static const char *asan_env(void) {
  static char env[1024];
  const char *old = getenv("ASAN_OPTIONS");
  snprintf(env, sizeof env,
           "ASAN_OPTIONS=%s%squarantine_size_mb=4:thread_local_quarantine_size_kb=64",
           old ? old : "", old && *old ? ":" : "");
  return env;
}

static void test_rx_memory_cap(void **state) {
  (void)state;
  char cap[64];
  snprintf(cap, sizeof cap, "%s=%d", EZ_RX_PROCESS_ENV, MEM_CAP_MB);
  hk_proc v;
  hk_spawn_opts o = {
      .self = true, .env = {cap, EZ_FRAME_TIMEOUT_ENV "=1500", EZ_TCP_WINDOW_ENV "=0", asan_env()}};
  hk_start(&v, &o, "--victim", th_addr, "/hostile/mem", "any", NULL);
  assert_true(hk_expect(&v, "ready", NULL, 0, HK_TMO));
  th_sleep_ms(200);
  long hwm0 = hk_status_kb(v.pid, "VmHWM"), peak0 = hk_status_kb(v.pid, "VmPeak");
  assert_true(hwm0 > 0 && peak0 > 0);
  static hk_pub fp[MEM_LINKS];
  static uint8_t body[1 << 20];
  for (int i = 0; i < MEM_LINKS; i++) {
    assert_true(hk_pub_register(&fp[i], th_addr, "/hostile/mem"));
    uint8_t ans = 0, asks[16];
    assert_true(hk_pub_accept(&fp[i], HK_TMO));
    assert_true(hk_pub_handshake(&fp[i], "", 4, &ans));
    assert_int_equal(ans, HK_SHM_ATTACH_FAILED);
    hk_pub_drain(&fp[i], asks, sizeof asks, 50);
    assert_true(hk_pub_registered(&fp[i], HK_TMO));
    close(fp[i].listener); /* its joins again find nobody */
    fp[i].listener = -1;
  }
  /* Each announces a frame of 256 MiB and sends 12 MiB of it, then nothing more. */
  int took = 0;
  for (int i = 0; i < MEM_LINKS; i++) {
    uint8_t h[17] = {HK_TX_TCP};
    ezi_put_u64le(h + 1, 0);
    ezi_put_u64le(h + 9, MEM_ANNOUNCED);
    bool ok = hk_write(fp[i].data, h, sizeof h);
    for (size_t sent = 0; ok && sent < MEM_SENT; sent += sizeof body)
      ok = hk_write(fp[i].data, body, sizeof body);
    took += ok;
  }
  th_sleep_ms(300);
  long hwm = hk_status_kb(v.pid, "VmHWM"), peak = hk_status_kb(v.pid, "VmPeak");
  print_message("victim: %d of %d links sent 12 MiB; peak RSS +%ld MiB, address space +%ld MiB\n",
                took, MEM_LINKS, (hwm - hwm0) >> 10, (peak - peak0) >> 10);
  hk_assert_alive(&v, "the victim of large frames");
  assert_true(hwm - hwm0 < (MEM_CAP_MB + 24) * 1024);
  assert_true(peak - peak0 < 512 * 1024);
  /* Every link is dropped: beyond the limit at once, the others when their frame is overdue. */
  for (int i = 0; i < MEM_LINKS; i++) {
    uint8_t b[64];
    int64_t end = th_now_ms() + HK_TMO;
    while (hk_pub_drain(&fp[i], b, sizeof b, 200) && th_now_ms() < end) {
    }
    assert_true(rp_closed_silently(fp[i].data, HK_TMO));
  }
  assert_true(hk_count_lines(&v, EZ_RX_PROCESS_ENV) >= 1);
  assert_true(hk_count_lines(&v, "stayed incomplete") >= 1);
  for (int i = 0; i < MEM_LINKS; i++)
    hk_pub_close(&fp[i]);
  assert_int_equal(hk_stop(&v), 0);
}

/* ---- logs ---------------------------------------------------------------------------------------
 */

static void test_log_storm(void **state) {
  (void)state;
  hk_proc pub;
  hk_start(&pub, NULL, "pub", "--address", th_addr, "--size", "8", "--count", "0", "--rate", "10",
           "/hostile/storm", NULL);
  char id[64], addr[64];
  pub_address(th_addr, "/hostile/storm", id, addr);
  for (int i = 0; i < 60; i++) { /* 20 a second for 3 s */
    int fd = dial(addr);
    if (fd >= 0) { /* a whole request, but not CHANNEL */
      const uint8_t junk[12] = {0xff, 3, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 'c'};
      hk_write(fd, junk, sizeof junk);
      rp_hung_up(fd, 1000); /* it closes ours */
      close(fd);
    }
    th_sleep_ms(50);
  }
  th_sleep_ms(200);
  int lines = hk_count_lines(&pub, "bad handshake");
  print_message("60 bad handshakes: %d lines\n", lines);
  assert_true(lines >= 1 && lines <= 2 * EZI_RL_BURST); /* (two windows, on a slow day) */
  kill(pub.pid, SIGTERM);
  assert_int_equal(hk_stop(&pub), 0);
}

static void test_ratelimit_rule(void **state) {
  (void)state;
#ifndef EZI_RL_WINDOW_NS
  fail_msg("no rate limit in this tree");
#else
  ezi_ratelimit rl = {0};
  uint32_t dropped = 99;
  uint64_t t = 1000;
  for (int i = 0; i < EZI_RL_BURST; i++) { /* a burst passes */
    assert_true(ezi_ratelimit_pass(&rl, t + (uint64_t)i, &dropped));
    assert_int_equal(dropped, 0);
  }
  for (int i = 0; i < 40; i++) /* then nothing for the rest of the window */
    assert_false(ezi_ratelimit_pass(&rl, t + 1000000000ull * (uint64_t)(i % 9), &dropped));
  /* The next window's first line says how many were dropped; the one after, none. */
  assert_true(ezi_ratelimit_pass(&rl, t + EZI_RL_WINDOW_NS, &dropped));
  assert_int_equal(dropped, 40);
  assert_true(ezi_ratelimit_pass(&rl, t + EZI_RL_WINDOW_NS + 1, &dropped));
  assert_int_equal(dropped, 0);
#endif
}

/* ---- many buffers -------------------------------------------------------------------------------
 */

/* A TX_TCP frame of a raw-pickle message of nbuf buffers: a 5-byte pickle, then nbuf - 1 of `each`
 * bytes (buffer i holds i as a u32 when each is 4). *len its size; caller frees. */
static uint8_t *many_frame(uint64_t id, uint64_t nbuf, size_t each, size_t *len) {
  size_t msg = 18 + 8 * nbuf + 5 + (nbuf - 1) * each;
  uint8_t *b = malloc(17 + msg);
  assert_non_null(b);
  b[0] = HK_TX_TCP;
  ezi_put_u64le(b + 1, id);
  ezi_put_u64le(b + 9, msg);
  uint8_t *m = b + 17;
  m[0] = 'E';
  m[1] = 'Z';
  ezi_put_u64le(m + 2, id);
  ezi_put_u64le(m + 10, nbuf);
  ezi_put_u64le(m + 18, 5);
  for (uint64_t i = 1; i < nbuf; i++)
    ezi_put_u64le(m + 18 + 8 * i, each);
  uint8_t *d = m + 18 + 8 * nbuf;
  memcpy(d, (const uint8_t[]){0x80, 0x05, 'K', 0x07, '.'}, 5);
  d += 5;
  for (uint64_t i = 1; i < nbuf && each == 4; i++, d += 4)
    ezi_put_u32le(d, (uint32_t)i);
  *len = 17 + msg;
  return b;
}

static void test_many_buffers(void **state) {
  (void)state;
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(th_addr, &ctx), 0);
  ez_sub *s = NULL;
  assert_int_equal(ez_sub_create(ctx, "/hostile/many", NULL, &s), 0);
  hk_pub fp;
  assert_true(hk_pub_register(&fp, th_addr, "/hostile/many"));
  uint8_t ans = 0, b[16];
  assert_true(hk_pub_accept(&fp, HK_TMO));
  assert_true(hk_pub_handshake(&fp, "", 4, &ans));
  hk_pub_drain(&fp, b, sizeof b, 50);
  assert_true(hk_pub_registered(&fp, HK_TMO));
  const struct {
    uint64_t nbuf;
    size_t each;
  } cases[] = {{100000, 4}, {100000, 4}, {1000000, 0}};
  for (uint64_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    size_t len;
    uint8_t *fr = many_frame(k, cases[k].nbuf, cases[k].each, &len);
    int64_t t0 = th_now_ms();
    assert_true(hk_write(fp.data, fr, len));
    free(fr);
    ez_msg m;
    int rc = ez_recv(s, &m, 3 * HK_TMO); /* a bound on completing, generous: not a speed test */
    if (rc)
      fail_msg("message %llu of %llu buffers: %s", (unsigned long long)k,
               (unsigned long long)cases[k].nbuf, ez_strerror(rc));
    print_message("%llu buffers delivered in %lld ms\n", (unsigned long long)cases[k].nbuf,
                  (long long)(th_now_ms() - t0));
    assert_true(m.flags & EZ_MSG_RAW_PICKLE);
    assert_int_equal(m.msg_id, k);
    assert_int_equal(m.nbufs, cases[k].nbuf);
    assert_int_equal(m.bufs[0].len, 5);
    for (uint64_t i = 1; i < m.nbufs; i++) {
      if (m.bufs[i].len != cases[k].each)
        fail_msg("buffer %llu: %zu bytes", (unsigned long long)i, m.bufs[i].len);
      if (cases[k].each == 4 && ezi_get_u32le(m.bufs[i].data) != (uint32_t)i)
        fail_msg("buffer %llu holds %u", (unsigned long long)i, ezi_get_u32le(m.bufs[i].data));
    }
    ez_msg_release(&m);
    uint8_t ack[9];
    assert_int_equal(hk_pub_drain(&fp, ack, 9, HK_TMO), 9);
    assert_int_equal(ack[0], HK_RX_ACK);
    assert_int_equal(ezi_get_u64le(ack + 1), k);
  }
  hk_pub_close(&fp);
  ez_sub_destroy(s);
  ez_context_close(ctx);
}

/* ---- the graph server's segments
 * ------------------------------------------------------------------ */

/* SHM_CREATE nbuf x size at srv: the lease (COMPLETE and a name came), or -1 (closed unanswered).
 */
static int shm_create(const char *srv, uint64_t nbuf, uint64_t size) {
  int fd = rp_connect(srv);
  uint8_t m[17] = {HK_SHM_CREATE};
  ezi_put_u64le(m + 1, nbuf);
  ezi_put_u64le(m + 9, size);
  rp_wr(fd, m, sizeof m);
  uint8_t c;
  if (rp_rd_exact(fd, &c, 1, HK_TMO)) {
    close(fd);
    return -1;
  }
  assert_int_equal(c, HK_COMPLETE);
  char name[64];
  rp_rd_str(fd, name, sizeof name);
  return fd;
}

static void test_shm_create_limits(void **state) {
  (void)state;
  char addr[64];
  th_free_address(addr, sizeof addr);
  hk_proc srv;
  hk_spawn_opts o = {.env = {EZ_SHM_SEGMENT_MAX_ENV "=16", EZ_SHM_TOTAL_MAX_ENV "=40"}};
  hk_start(&srv, &o, "serve", "--address", addr, NULL);
  for (int i = 0; i < 500 && ez_graph_ping(addr, NULL, 0, 200); i++)
    th_sleep_ms(10);
  const uint64_t mib = 1 << 20;
  int a = shm_create(addr, 4, mib); /* 4 MiB */
  assert_true(a >= 0);
  assert_int_equal(shm_create(addr, 4, 8 * mib), -1); /* 32 MiB: beyond the largest segment */
  int b = shm_create(addr, 4, 3 * mib), c = shm_create(addr, 4, 3 * mib); /* 12 MiB each */
  assert_true(b >= 0 && c >= 0);
  assert_int_equal(shm_create(addr, 4, 3 * mib), -1); /* 40 MiB and a bit: beyond the total */
  close(b);                                           /* its lease ends: room again */
  int d = -1;
  for (int i = 0; i < 100 && d < 0; i++)
    if ((d = shm_create(addr, 4, 3 * mib)) < 0) th_sleep_ms(20);
  assert_true(d >= 0);
  assert_true(hk_count_lines(&srv, EZ_SHM_SEGMENT_MAX_ENV) >= 1);
  assert_true(hk_count_lines(&srv, EZ_SHM_TOTAL_MAX_ENV) >= 1);
  /* A publisher whose segment is refused sends over TCP instead. */
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(addr, &ctx), 0);
  ez_pub_opts po;
  ez_pub_opts_init(&po);
  po.buf_size = 32 * mib;
  po.num_buffers = 2; /* its private memory instead: 64 MiB, not 1 GiB (slow to zero under TSan) */
  ez_pub *p = NULL;
  assert_int_equal(ez_pub_create(ctx, "/hostile/shmlimit", &po, &p), 0);
  ez_pub_destroy(p);
  ez_context_close(ctx);
  close(a);
  close(c);
  close(d);
  kill(srv.pid, SIGTERM);
  assert_int_equal(hk_stop(&srv), 0);
}

/* ---- a channel that never acknowledges
 * ------------------------------------------------------------ */

/* The leases the publisher of `topic` reports for channel cid (read from the profile's JSON):
 * its in_flight (-1: not listed), and its pid into *pid. */
static long long lease_of(const char *srv, const char *topic, const char *cid, long long *pid) {
  char *json = NULL;
  long long n = -1;
  json_t *doc = ez_profile(srv, 0, &json, 5000) == 0 ? json_loads(json, 0, NULL) : NULL;
  size_t i, j;
  json_t *p, *l;
  json_array_foreach(json_object_get(doc, "publishers"), i, p) {
    const char *t = json_string_value(json_object_get(p, "topic"));
    if (!t || strcmp(t, topic)) continue;
    json_array_foreach(json_object_get(p, "leases"), j, l) {
      const char *c = json_string_value(json_object_get(l, "channel_id"));
      if (!c || strcmp(c, cid)) continue;
      n = json_integer_value(json_object_get(l, "in_flight"));
      *pid = json_integer_value(json_object_get(l, "pid"));
    }
  }
  json_decref(doc);
  free(json);
  return n;
}

static void test_never_acking_channel_named(void **state) {
  (void)state;
  hk_proc pub;
  hk_start(&pub, NULL, "pub", "--address", th_addr, "--size", "64", "--count", "0", "/hostile/hold",
           NULL);
  char id[64], addr[64];
  pub_address(th_addr, "/hostile/hold", id, addr);
  /* A channel registered at the server, joined by hand, that never acks. */
  int reg = rp_connect(th_addr);
  rp_wr_cmd(reg, HK_CHANNEL, id, NULL);
  rp_expect_u8(reg, HK_COMPLETE);
  char cid[64], a2[64];
  rp_rd_str(reg, cid, sizeof cid);
  rp_rd_str(reg, a2, sizeof a2);
  int ch = rp_open(addr);
  rp_wr_cmd(ch, HK_CHANNEL, cid, NULL);
  char seg[64];
  rp_rd_pub_hello(ch, seg, sizeof seg, NULL, 0); /* (the released dialect's topic first) */
  uint8_t m[9] = {HK_SHM_ATTACH_FAILED};
  ezi_put_u64le(m + 1, 424242);
  rp_wr(ch, m, sizeof m);
  rp_expect_u8(ch, HK_COMPLETE);
  assert_int_equal(rp_rd_u64(ch), 32);
  /* The publisher soon has num_buffers messages in flight to it, and says whose they are. */
  long long n = -1, pid = 0;
  for (int i = 0; i < 100 && (n = lease_of(th_addr, "/hostile/hold", cid, &pid)) != 32; i++)
    th_sleep_ms(100);
  assert_int_equal(n, 32);
  assert_int_equal(pid, 424242);
  char out[8192], want[64];
  th_run(out, sizeof out, "'%s' profile --address %s --format table --window 0", th_cli(), th_addr);
  snprintf(want, sizeof want, "held by %.15s", cid); /* (the column cuts the rest) */
  if (!strstr(out, want) || !strstr(out, "424242") || !strstr(out, "32 tcp"))
    fail_msg("the table does not name channel %s:\n%s", cid, out);
  close(ch);
  close(reg);
  kill(pub.pid, SIGTERM);
  assert_int_equal(hk_stop(&pub), 0);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_silent_flood, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_handshake_deadline, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_fd_limit_raised, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_rx_memory_cap, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_log_storm, th_setup, th_teardown),
      cmocka_unit_test(test_ratelimit_rule),
      cmocka_unit_test_setup_teardown(test_many_buffers, th_setup, th_teardown),
      cmocka_unit_test(test_shm_create_limits),
      cmocka_unit_test_setup_teardown(test_never_acking_channel_named, th_setup, th_teardown),
  };
  return hk_main(argc, argv, tests, sizeof tests / sizeof tests[0]);
}
