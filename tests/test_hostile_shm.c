/* Hostile peers on shared memory (issue 24): the subscriber under attack is a child process (a
 * "victim", hostile_kit.h) that checks every message it gets, so that a crash or a bad message
 * fails the test; the attackers are fake publishers spoken by hand, in this process or in a child
 * of another uid.
 *
 *  - test_foreign_ring: a publisher of another user answers X_HELLO with a ring file of its own,
 *    open to all, then truncates it and sends TX_SHM. The victim refuses the ring before mapping
 *    it (it used to die of SIGBUS), says why, leaves the file alone and keeps working.
 *  - test_length_flipped: another process flips a message's length in the segment while the
 *    victim reads it. Every message the victim gets has the right lengths and bytes (it used to
 *    hand out megabytes beyond the message: a length was checked, then read again).
 *  - test_truncated_segment: the publisher truncates its segment between two messages. The victim
 *    survives (it used to die of SIGBUS), drops the link with a line saying so, and keeps working.
 *  - test_truncated_own_segment: someone truncates a real `ezmsg pub`'s segment under it. The
 *    publisher survives (it used to die of SIGBUS in its copy), moves to a new segment, and its
 *    subscriber keeps receiving.
 *  - test_truncated_ring_under_sleeper: a real `ezmsg pub` sleeps on its ring's word (its
 *    subscriber holds every slot) when the ring is truncated and the subscriber dies: no wake-up
 *    reaches that word any more, and the publisher's I/O thread closes the channel without waiting
 *    for the sleeper (it used to wait up to 100 ms, stalling every other link of that process).
 *  - test_ownership: ezi_shm_attach / ezi_ring_attach refuse files open to group or others, or of
 *    another user, and accept group files with EZMSG_SHM_GROUP.
 * Real processes, real shared memory, a real `ezmsg serve` per test. */
#include "hostile_kit.h"
#include "proto/shmring.h"
#include "base/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <grp.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOBODY 65534

/* ---- another user's ring ----------------------------------------------------------------------
 */

static void say(int fd, const char *s) {
  if (write(fd, s, strlen(s)) < 0) _exit(20);
}

/* The attacker, in a child that became uid/gid NOBODY: registers a publisher, gets the server to
 * make a segment (which the victim attaches), and answers X_HELLO with a ring of its own in
 * /dev/shm, mode 0666, with the ring's magic and the right size; then truncates it and sends a
 * TX_SHM. Reports "ring NAME" and "sent" on `report`; waits for a line on `go` before it leaves.
 * No cmocka here: exit codes say what failed. */
static int foreign_pub(int report, int go) {
  if (setgroups(0, NULL) || setresgid(NOBODY, NOBODY, NOBODY) || setresuid(NOBODY, NOBODY, NOBODY))
    return 10;
  hk_pub fp;
  if (!hk_pub_register(&fp, th_addr, "/hostile/ring")) return 11;
  if (!hk_pub_segment(&fp, th_addr, 4, 64, false)) return 12; /* root's: we cannot map it */
  if (!hk_pub_accept(&fp, HK_TMO)) return 13;
  uint8_t ans = 0;
  if (!hk_pub_handshake(&fp, fp.seg, 4, &ans) || ans != HK_SHM_OK) return 14;
  uint8_t b[16];
  size_t n = hk_pub_drain(&fp, b, sizeof b, 1000);
  if (!memchr(b, EZI_X_HELLO, n)) return 15;
  char name[64], path[80];
  snprintf(name, sizeof name, "psm_r%d_0badf00d", (int)getpid());
  snprintf(path, sizeof path, "/%s", name);
  umask(0);
  int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL, 0666);
  size_t size = sizeof(ezi_ring_hdr) + 4 * sizeof(ezi_ring_entry);
  if (fd < 0 || fchmod(fd, 0666) || ftruncate(fd, (off_t)size)) return 16;
  ezi_ring_hdr *h = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (h == MAP_FAILED) return 17;
  h->magic = EZI_RING_MAGIC;
  h->num_buffers = 4;
  munmap(h, size);
  char line[128];
  snprintf(line, sizeof line, "ring %s\n", name);
  say(report, line);
  uint8_t x[17 + 64] = {EZI_X_RING};
  ezi_put_u64le(x + 1, 0);
  ezi_put_u64le(x + 9, strlen(name));
  memcpy(x + 17, name, strlen(name));
  if (!hk_write(fp.data, x, 17 + strlen(name))) return 18;
  th_sleep_ms(300); /* it maps the ring now (the old code did) */
  if (ftruncate(fd, 0)) return 19;
  if (!hk_pub_tx_shm(&fp, 0)) say(report, "link gone\n");
  say(report, "sent\n");
  char c;
  while (read(go, &c, 1) < 0 && errno == EINTR) {
  }
  shm_unlink(path);
  close(fd);
  hk_pub_close(&fp);
  return 0;
}

static bool rd_line(int fd, char *out, size_t cap) {
  size_t n = 0;
  int64_t end = th_now_ms() + HK_TMO;
  while (n + 1 < cap && th_now_ms() < end) {
    char c;
    ssize_t k = read(fd, &c, 1);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    if (c == '\n') {
      out[n] = 0;
      return true;
    }
    out[n++] = c;
  }
  out[n] = 0;
  return false;
}

static void test_foreign_ring(void **state) {
  (void)state;
  if (geteuid() != 0) {
    print_message("not root: cannot play a publisher of another user; skipped\n");
    skip();
  }
  hk_proc v;
  hk_spawn_opts self = {.self = true};
  hk_start(&v, &self, "--victim", th_addr, "/hostile/ring", "any", NULL);
  assert_true(hk_expect(&v, "ready", NULL, 0, HK_TMO));
  int rep[2], go[2];
  assert_int_equal(pipe(rep), 0);
  assert_int_equal(pipe(go), 0);
  pid_t atk = fork();
  assert_true(atk >= 0);
  if (atk == 0) {
    hk_child();
    close(rep[0]);
    close(go[1]);
    _exit(foreign_pub(rep[1], go[0]));
  }
  close(rep[1]);
  close(go[0]);
  char line[128], ring[64] = "";
  bool got_ring = rd_line(rep[0], line, sizeof line) && sscanf(line, "ring %63s", ring) == 1;
  bool sent = got_ring && rd_line(rep[0], line, sizeof line);
  if (sent && !strcmp(line, "link gone")) sent = rd_line(rep[0], line, sizeof line);
  if (!sent) {
    kill(atk, SIGKILL);
    int st = th_wait_exit(atk, 5000);
    hk_stop(&v);
    fail_msg("the attacker did not get through its script (exit %d)", st);
  }
  th_sleep_ms(1000); /* what the victim does with it */
  hk_assert_alive(&v, "the subscriber attacked through another user's ring");
  /* It refused the ring, said why, and did not touch the file (the attacker's). */
  assert_true(hk_count_lines(&v, "belongs to another user") >= 1);
  char path[96];
  snprintf(path, sizeof path, "/dev/shm/%s", ring);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_uid, NOBODY);
  say(go[1], "x");
  close(go[1]);
  close(rep[0]);
  assert_int_equal(th_wait_exit(atk, HK_TMO), 0);
  /* Still a working subscriber: a real publisher's messages arrive. */
  hk_proc pub;
  hk_start(&pub, NULL, "pub", "--address", th_addr, "--message", "after", "--count", "3",
           "/hostile/ring", NULL);
  assert_true(hk_expect(&v, "got", line, sizeof line, HK_TMO));
  assert_int_equal(hk_stop(&pub), 0);
  assert_int_equal(hk_stop(&v), 0);
}

/* ---- a length flipped while it is read ----------------------------------------------------------
 */

#define FLIP_NBUF 8
#define FLIP_LEN 64
#define FLIP_BAD 0x00007fffffff0000ull

/* The flipper, in a child: maps the segment and, in every slot, sets the payload length (lens[1],
 * 26 bytes into the data block) to FLIP_BAD for a moment, then back to FLIP_LEN, over and over.
 * Each value on its own is checked by the receiver; only reading it twice lets the bad one in. */
static void flipper(const char *seg, uint64_t stride) {
  char path[96];
  snprintf(path, sizeof path, "/%s", seg);
  int fd = shm_open(path, O_RDWR, 0);
  if (fd < 0) _exit(1);
  uint8_t *b = mmap(NULL, FLIP_NBUF * stride, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (b == MAP_FAILED) _exit(2);
  uint64_t bad = FLIP_BAD, good = FLIP_LEN;
  int pb = getenv("HK_FLIP_B") ? atoi(getenv("HK_FLIP_B")) : 4;
  int pa = getenv("HK_FLIP_A") ? atoi(getenv("HK_FLIP_A")) : 50;
  for (;;) {
    for (int i = 0; i < FLIP_NBUF; i++)
      memcpy(b + i * stride + 16 + 26, &bad, 8);
    __atomic_thread_fence(__ATOMIC_SEQ_CST); /* visible, if only for a moment */
    for (int k = 0; k < pb; k++)
      __builtin_ia32_pause();
    for (int i = 0; i < FLIP_NBUF; i++)
      memcpy(b + i * stride + 16 + 26, &good, 8);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    for (int k = 0; k < pa; k++)
      __builtin_ia32_pause();
  }
}

/* Accepts the victim's (next) channel and completes its handshake on the segment; else says
 * what failed. */
static bool flip_link(hk_pub *fp) {
  uint8_t ans = 0, asks[16];
  if (!hk_pub_accept(fp, HK_TMO)) {
    print_error("no channel connection came\n");
    return false;
  }
  if (!hk_pub_handshake(fp, fp->seg, FLIP_NBUF, &ans) || ans != HK_SHM_OK) {
    print_error("the channel's handshake failed (answer %u)\n", ans);
    return false;
  }
  hk_pub_drain(fp, asks, sizeof asks, 100); /* X_HELLO, X_WIN_ASK, X_TCP_ASK: not answered */
  return true;
}

static void test_length_flipped(void **state) {
  (void)state;
  hk_proc v;
  hk_spawn_opts self = {.self = true};
  char check[16];
  snprintf(check, sizeof check, "mix:%d", FLIP_LEN);
  hk_start(&v, &self, "--victim", th_addr, "/hostile/flip", check, NULL);
  assert_true(hk_expect(&v, "ready", NULL, 0, HK_TMO));
  hk_pub fp;
  assert_true(hk_pub_register(&fp, th_addr, "/hostile/flip"));
  assert_true(hk_pub_segment(&fp, th_addr, FLIP_NBUF, 256, true));
  assert_true(flip_link(&fp));
  assert_true(hk_pub_registered(&fp, HK_TMO));
  for (uint64_t k = 0; k < FLIP_NBUF; k++)
    hk_pub_put_slot(&fp, k, FLIP_LEN);
  pid_t flip = fork();
  assert_true(flip >= 0);
  if (flip == 0) {
    hk_child();
    flipper(fp.seg, fp.stride);
  }
  /* Messages one at a time, each acked before the next, every other one a raw pickle of three
   * buffers (its iov is built from the lengths: the old code read them again there, long after
   * checking them): until the victim has dropped the link 80 times (a length seen bad is
   * refused, which drops the link, and it joins again), 30000 messages, or 30 s. The old code
   * let a bad length through in 13 of 14 runs here (6 of 6 with these bounds; the miss was with
   * half as many drops allowed), mostly within a few thousand messages. */
  long got = 0, drops = 0, sent = 0;
  bool relinked = true;
  char bad[256] = "";
  int64_t end = th_now_ms() + 30000;
  for (uint64_t k = 0; k < 30000 && drops < 80 && th_now_ms() < end; k++) {
    if (k % 2)
      hk_pub_put_raw3(&fp, k, FLIP_LEN, 16);
    else
      hk_pub_put_slot(&fp, k, FLIP_LEN);
    uint8_t ack[9];
    bool ok = hk_pub_tx_shm(&fp, k) && hk_pub_drain(&fp, ack, 9, 5000) == 9 &&
              ack[0] == HK_RX_ACK && ezi_get_u64le(ack + 1) == k;
    sent++;
    if (hk_scan(&v, "bad", bad, sizeof bad, &got)) break;
    if (!ok) { /* dropped (or acked something else: then it is broken too) */
      drops++;
      hk_assert_alive(&v, "the subscriber whose segment's lengths were flipped");
      if (!flip_link(&fp)) {
        relinked = false;
        break;
      }
    }
  }
  kill(flip, SIGKILL);
  waitpid(flip, NULL, 0);
  th_sleep_ms(100);
  hk_scan(&v, "bad", bad, sizeof bad, &got);
  print_message("%ld messages sent, %ld received intact, %ld links dropped\n", sent, got, drops);
  if (*bad) fail_msg("the victim got a message it should not have: %s", bad);
  hk_assert_alive(&v, "the subscriber whose segment's lengths were flipped");
  assert_true(relinked);
  assert_true(sent >= 100); /* (fewer only on a very slow machine: then the check is weak) */
  hk_pub_close(&fp);
  assert_int_equal(hk_stop(&v), 0);
}

/* ---- truncated segments -------------------------------------------------------------------------
 */

static void test_truncated_segment(void **state) {
  (void)state;
  hk_proc v;
  hk_spawn_opts self = {.self = true};
  hk_start(&v, &self, "--victim", th_addr, "/hostile/trunc", "any", NULL);
  assert_true(hk_expect(&v, "ready", NULL, 0, HK_TMO));
  hk_pub fp;
  assert_true(hk_pub_register(&fp, th_addr, "/hostile/trunc"));
  assert_true(hk_pub_segment(&fp, th_addr, 4, 8192, true));
  uint8_t ans = 0, b[16];
  assert_true(hk_pub_accept(&fp, HK_TMO));
  assert_true(hk_pub_handshake(&fp, fp.seg, 4, &ans));
  assert_int_equal(ans, HK_SHM_OK);
  hk_pub_drain(&fp, b, sizeof b, 100);
  assert_true(hk_pub_registered(&fp, HK_TMO));
  /* One message as it should be: received and acked. */
  hk_pub_put_slot(&fp, 0, 100);
  hk_pub_put_slot(&fp, 1, 100); /* the next, before the truncation (our mapping faults after) */
  assert_true(hk_pub_tx_shm(&fp, 0));
  assert_int_equal(hk_pub_drain(&fp, b, 9, HK_TMO), 9);
  assert_int_equal(b[0], HK_RX_ACK);
  char line[128];
  assert_true(hk_expect(&v, "got 0 100", line, sizeof line, HK_TMO));
  /* Then the segment shrinks to nothing, and the next message is announced in it. */
  char path[96];
  snprintf(path, sizeof path, "/%s", fp.seg);
  int fd = shm_open(path, O_RDWR, 0);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, 0), 0);
  close(fd);
  assert_true(hk_pub_tx_shm(&fp, 1));
  /* The victim drops the link (no ack: the connection ends) and lives on. */
  assert_true(hk_pub_drain(&fp, b, 9, HK_TMO) < 9);
  th_sleep_ms(200);
  hk_assert_alive(&v, "the subscriber whose publisher truncated its segment");
  assert_true(hk_count_lines(&v, "truncated under this process") >= 1);
  hk_pub_close(&fp);
  /* Still a working subscriber. */
  hk_proc pub;
  hk_start(&pub, NULL, "pub", "--address", th_addr, "--message", "after", "--count", "3",
           "/hostile/trunc", NULL);
  assert_true(hk_expect(&v, "got", line, sizeof line, HK_TMO));
  assert_int_equal(hk_stop(&pub), 0);
  assert_int_equal(hk_stop(&v), 0);
}

static void test_truncated_own_segment(void **state) {
  (void)state;
  hk_proc v, pub;
  hk_spawn_opts self = {.self = true};
  hk_start(&v, &self, "--victim", th_addr, "/hostile/own", "cli:64", NULL);
  assert_true(hk_expect(&v, "ready", NULL, 0, HK_TMO));
  hk_start(&pub, NULL, "pub", "--address", th_addr, "--size", "64", "--count", "0", "--rate", "500",
           "/hostile/own", NULL);
  char line[128], seg[64];
  for (int i = 0; i < 10; i++) {
    assert_true(hk_expect(&v, "got", line, sizeof line, HK_TMO));
    assert_null(strstr(line, "zeroed")); /* (nothing truncated yet) */
  }
  assert_true(hk_mapped_shm(pub.pid, "psm_ez", seg, sizeof seg));
  char path[96];
  snprintf(path, sizeof path, "/%s", seg);
  int fd = shm_open(path, O_RDWR, 0);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, 0), 0); /* under both of them */
  close(fd);
  /* Both survive: the publisher moves to a new segment, the subscriber joins it again. A view
   * the victim was reading when the segment went may read as zeros (hostile_kit.c, msg_ok); what
   * comes after is whole again. */
  int zeroed = 0;
  for (int i = 0; i < 50 || strstr(line, "zeroed"); i++) {
    if (!hk_expect(&v, "got", line, sizeof line, HK_TMO)) {
      hk_assert_alive(&pub, "the publisher whose segment was truncated");
      hk_assert_alive(&v, "its subscriber");
      fail_msg("message %d after the truncation did not come", i);
    }
    zeroed += strstr(line, "zeroed") != NULL;
    assert_true(zeroed <= 4);
  }
  hk_assert_alive(&pub, "the publisher whose segment was truncated");
  assert_true(hk_count_lines(&pub, "truncated") >= 1);
  kill(pub.pid, SIGTERM);
  assert_int_equal(hk_stop(&pub), 0);
  assert_int_equal(hk_stop(&v), 0);
}

/* ---- a ring truncated under a publisher asleep on its word -----------------------------------
 */

/* Whether a thread of pid sleeps in a futex wait on a shared word (FUTEX_WAIT_BITSET, op 9: a
 * ring's word; condition variables wait on private words). */
static bool sleeps_on_shared_word(pid_t pid) {
  char dir[64];
  snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
  DIR *d = opendir(dir);
  if (!d) return false;
  bool found = false;
  struct dirent *e;
  while (!found && (e = readdir(d))) {
    char path[384], line[256] = "";
    snprintf(path, sizeof path, "%s/%s/syscall", dir, e->d_name);
    FILE *f = e->d_name[0] != '.' ? fopen(path, "r") : NULL;
    if (!f) continue;
    unsigned long nr = 0, a0 = 0, op = 0;
    found = fgets(line, sizeof line, f) && sscanf(line, "%lu %lx %lx", &nr, &a0, &op) == 3 &&
            nr == SYS_futex && op == 9;
    fclose(f);
  }
  closedir(d);
  return found;
}

/* Truncates pid's mapping of a notice ring (unlinked once its channel mapped it: reached through
 * /proc/PID/map_files). */
static void truncate_ring_of(pid_t pid) {
  char path[96], line[1024], file[128] = "";
  snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  while (!file[0] && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (strstr(line, "/dev/shm/psm_r") && sscanf(line, "%lx-%lx", &lo, &hi) == 2)
      snprintf(file, sizeof file, "/proc/%d/map_files/%lx-%lx", (int)pid, lo, hi);
  }
  fclose(f);
  assert_true(file[0]);
  int fd = open(file, O_RDWR | O_CLOEXEC);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, 0), 0);
  close(fd);
}

/* How many channels the publisher of `topic` lists in the graph's profile (its "leases"; -1 if it
 * is not listed). Its process answers from its I/O thread. */
static int channels_of(const char *topic) {
  char *json = NULL;
  int n = -1;
  json_t *doc = ez_profile(th_addr, 0, &json, 5000) == 0 ? json_loads(json, 0, NULL) : NULL;
  size_t i;
  json_t *p;
  json_array_foreach(json_object_get(doc, "publishers"), i, p) {
    const char *t = json_string_value(json_object_get(p, "topic"));
    if (t && !strcmp(t, topic)) n = (int)json_array_size(json_object_get(p, "leases"));
  }
  json_decref(doc);
  free(json);
  return n;
}

static void test_truncated_ring_under_sleeper(void **state) {
  (void)state;
  const char *topic = "/hostile/ringword";
  hk_proc pub;
  hk_start(&pub, NULL, "pub", "--address", th_addr, "--size", "64", "--count", "0", "--rate",
           "1000", "--num-buffers", "2", topic, NULL);
  /* Seen when the channel is gone while the publisher still sleeps; a round in which its 100 ms
   * slice passed first (a slow machine), or in which it did not sleep on the word, shows nothing,
   * and another is made. */
  bool seen = false;
  for (int round = 0; round < 5 && !seen; round++) {
    hk_proc sub;
    hk_start(&sub, NULL, "sub", "--address", th_addr, topic, NULL);
    for (int k = 0; k < 20; k++) /* messages flow, through the ring by now */
      assert_true(hk_expect(&sub, "", NULL, 0, HK_TMO));
    kill(sub.pid, SIGSTOP); /* it holds what it took: the publisher fills both slots and sleeps */
    int64_t end = th_now_ms() + 3000;
    while (!sleeps_on_shared_word(pub.pid) && th_now_ms() < end)
      th_sleep_ms(1);
    /* Stopped while it still held a slot by frame (a lease), the publisher waits on its
     * condition variable instead: another round. */
    if (!sleeps_on_shared_word(pub.pid)) {
      kill(sub.pid, SIGKILL);
      hk_stop(&sub);
      continue;
    }
    end = th_now_ms() + HK_TMO;
    truncate_ring_of(pub.pid);
    kill(sub.pid, SIGKILL);
    hk_stop(&sub);
    while (channels_of(topic) != 0 && th_now_ms() < end)
      th_sleep_ms(1);
    hk_assert_alive(&pub, "the publisher whose ring was truncated");
    assert_int_equal(channels_of(topic), 0);
    seen = sleeps_on_shared_word(pub.pid);
  }
  assert_true(seen);
  hk_assert_alive(&pub, "the publisher whose ring was truncated");
  kill(pub.pid, SIGTERM);
  assert_int_equal(hk_stop(&pub), 0);
}

/* ---- who may share our shared memory ------------------------------------------------------------
 */

/* /dev/shm/<name>: a segment of 2 buffers x 32 (or a ring for 4 slots) with the given owner and
 * mode. */
static void make_file(const char *name, bool ring, mode_t mode, uid_t uid, gid_t gid) {
  char path[96];
  snprintf(path, sizeof path, "/%s", name);
  shm_unlink(path);
  int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
  assert_true(fd >= 0);
  size_t size = ring ? sizeof(ezi_ring_hdr) + 4 * sizeof(ezi_ring_entry) : 64;
  assert_int_equal(ftruncate(fd, (off_t)size), 0);
  uint8_t *b = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  assert_true(b != MAP_FAILED);
  if (ring) {
    ((ezi_ring_hdr *)b)->magic = EZI_RING_MAGIC;
    ((ezi_ring_hdr *)b)->num_buffers = 4;
  } else {
    ezi_put_u64le(b, 2);
    ezi_put_u64le(b + 8, 32);
  }
  munmap(b, size);
  assert_int_equal(fchown(fd, uid, gid), 0);
  assert_int_equal(fchmod(fd, mode), 0);
  close(fd);
}

/* ezi_shm_attach of name in a child with $EZMSG_SHM_GROUP (read once per process) set to group. */
static int attach_in_child(const char *name, const char *group) {
  char env[64];
  snprintf(env, sizeof env, "EZMSG_SHM_GROUP=%s", group);
  hk_proc p;
  hk_spawn_opts o = {.self = true, .env = {env}};
  hk_start(&p, &o, "--attach", name, NULL);
  char line[64];
  assert_true(hk_expect(&p, "rc ", line, sizeof line, HK_TMO));
  assert_int_equal(hk_stop(&p), 0);
  return atoi(line + 3);
}

static void test_ownership(void **state) {
  (void)state;
  char name[64];
  snprintf(name, sizeof name, "psm_ezown%d", (int)getpid());
  uid_t me = geteuid();
  gid_t g = getegid();
  ezi_shm s;
  make_file(name, false, 0600, me, g);
  assert_int_equal(ezi_shm_attach(name, &s), 0); /* ours: as a graph server makes them */
  ezi_shm_detach(&s);
  const mode_t open_modes[] = {0640, 0660, 0604, 0606, 0666};
  for (size_t i = 0; i < sizeof open_modes / sizeof open_modes[0]; i++) {
    make_file(name, false, open_modes[i], me, g);
    assert_int_equal(ezi_shm_attach(name, &s), EZ_EPROTO);
  }
  if (me == 0) { /* another user's, even private to it */
    make_file(name, false, 0600, NOBODY, NOBODY);
    assert_int_equal(ezi_shm_attach(name, &s), EZ_EPROTO);
    /* EZMSG_SHM_GROUP opens a graph to a group: its files are mapped, not others'. */
    make_file(name, false, 0660, NOBODY, 4242);
    assert_int_equal(attach_in_child(name, "4242"), 0);
    assert_int_equal(attach_in_child(name, "4243"), EZ_EPROTO);
    make_file(name, false, 0664, NOBODY, 4242); /* still not one open to everyone */
    assert_int_equal(attach_in_child(name, "4242"), EZ_EPROTO);
    make_file(name, false, 0640, me, 4242); /* ours, for that group */
    assert_int_equal(attach_in_child(name, "4242"), 0);
  }
  char path[96];
  snprintf(path, sizeof path, "/%s", name);
  shm_unlink(path);

  /* A ring that is not ours is refused before it is mapped, and its name is left alone. */
  snprintf(name, sizeof name, "psm_r%d_0000beef", (int)getpid());
  snprintf(path, sizeof path, "/dev/shm/%s", name);
  ezi_ring r;
  make_file(name, true, 0644, me, g);
  assert_int_equal(ezi_ring_attach(name, strlen(name), 4, &r), EZ_EPROTO);
  assert_int_equal(access(path, F_OK), 0);
  make_file(name, true, 0600, me, g);
  assert_int_equal(ezi_ring_attach(name, strlen(name), 4, &r), 0);
  assert_int_not_equal(access(path, F_OK), 0); /* ours: mapped, and its name removed */
  ezi_ring_detach(&r);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_foreign_ring, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_length_flipped, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_truncated_segment, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_truncated_own_segment, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_truncated_ring_under_sleeper, th_setup, th_teardown),
      cmocka_unit_test(test_ownership),
  };
  return hk_main(argc, argv, tests, sizeof tests / sizeof tests[0]);
}
