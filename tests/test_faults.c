/* Fault injection with real processes: publishers, subscribers and graph servers SIGKILLed or
 * SIGSTOPped mid-stream, and a publisher (played by hand over raw sockets) that cuts its channel's
 * connection in the middle of a message.
 *
 *  - test_pub_killed_{shm,tcp}: a publisher process dies mid-stream; its subscriber process keeps
 *    running, never prints part of a message, and receives a new publisher's messages.
 *  - test_sub_stopped_{shm,tcp}: a subscriber process stops holding messages; our publisher (4
 *    buffers) blocks; once that process is killed it goes on, and the other subscriber process
 *    receives everything in order.
 *  - test_pub_stopped: a stopped publisher holds up neither a profile nor the graph.
 *  - test_server_killed: every client call fails within its timeout, a waiting ez_recv wakes up
 *    with EZ_ECONNLOST, `ezmsg sub` exits 1 with a message, the data plane itself goes on.
 *  - test_server_stopped: calls to a stopped server time out within their timeouts.
 *  - test_channel_cut_mid_message: a publisher cuts the channel at ten points of a TX_TCP frame;
 *    no partial message is delivered, and the subscriber stays usable.
 *  - test_sub_leaves_with_queued_messages: a subscriber destroyed with messages in its queue.
 *
 * Every test starts its own `ezmsg serve` on a free 127.0.0.1 port and stops every process it
 * started by pid. At the end of each test (fx_finish) it checks that
 *  - every child was reaped (no zombie, no child left),
 *  - every shared-memory segment that one of its processes mapped is gone from /dev/shm (a sampler
 *    thread records the psm_* names in /proc/<pid>/maps and /proc/<pid>/fd of the test's own
 *    processes while they run, because other tests create segments concurrently),
 *  - this process has as many fds open as before the test.
 * No timing assertion other than generous upper bounds on "returns within its timeout".
 * EZ_FAULTS_FILTER=<glob> runs only the matching tests; EZ_FAULTS_VERBOSE=1 lists the segments. */
#include "harness.h"
#include "rawproto.h"
#include "marshal.h"
#include "wire.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TMO 5000   /* generous bound for anything that should be quick (ms) */
#define SLACK 4000 /* what a loaded machine may add to a call's own timeout (ms) */
#define MAX_KIDS 32
#define MAX_NAMES 256

enum {
  COMPLETE = 0,
  PUBLISH = 1,
  TX_TCP = 13,
  RX_ACK = 14,
  CHANNEL = 18,
  SHM_OK = 19,
  SHM_ATTACH_FAILED = 20,
};

/* ---- fixture: a server, child processes by pid, a segment sampler ---------------------------- */

typedef struct fx {
  char addr[64];
  char dir[64]; /* private temp dir for the children's output */
  pid_t server;
  pid_t kids[MAX_KIDS]; /* children not reaped yet (the server included) */
  int nkids;
  int fds0;
  bool finished;
  /* sampler */
  pthread_t sampler;
  atomic_bool stop;
  pthread_mutex_t mu;
  pid_t watch[MAX_KIDS + 1];
  int nwatch;
  char names[MAX_NAMES][40];
  int nnames;
} fx;

static void note_name(fx *f, const char *p) {
  char nm[40];
  size_t n = 0;
  while (n < sizeof nm - 1 && p[n] && p[n] != ' ' && p[n] != '\n' && p[n] != '/') {
    nm[n] = p[n];
    n++;
  }
  nm[n] = 0;
  if (n <= 4) return;
  pthread_mutex_lock(&f->mu);
  bool have = false;
  for (int i = 0; i < f->nnames && !have; i++)
    have = !strcmp(f->names[i], nm);
  if (!have && f->nnames < MAX_NAMES) snprintf(f->names[f->nnames++], sizeof f->names[0], "%s", nm);
  pthread_mutex_unlock(&f->mu);
}

/* Records every /dev/shm/psm_* that pid maps or holds open. */
static void scan_pid(fx *f, pid_t pid) {
  char path[64], line[512];
  snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
  FILE *m = fopen(path, "re");
  if (m) {
    while (fgets(line, sizeof line, m)) {
      char *p = strstr(line, "/dev/shm/psm_");
      if (p) note_name(f, p + 9);
    }
    fclose(m);
  }
  snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
  DIR *d = opendir(path);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char lp[320], target[256];
    snprintf(lp, sizeof lp, "%s/%s", path, e->d_name);
    ssize_t n = readlink(lp, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = 0;
    if (!strncmp(target, "/dev/shm/psm_", 13)) note_name(f, target + 9);
  }
  closedir(d);
}

static void *sampler_main(void *arg) {
  fx *f = arg;
  while (!atomic_load(&f->stop)) {
    pid_t pids[MAX_KIDS + 1];
    pthread_mutex_lock(&f->mu);
    int n = f->nwatch;
    memcpy(pids, f->watch, sizeof pids);
    pthread_mutex_unlock(&f->mu);
    for (int i = 0; i < n; i++)
      scan_pid(f, pids[i]);
    th_sleep_ms(5);
  }
  return NULL;
}

static void watch_add(fx *f, pid_t pid) {
  pthread_mutex_lock(&f->mu);
  if (f->nwatch < MAX_KIDS + 1) f->watch[f->nwatch++] = pid;
  pthread_mutex_unlock(&f->mu);
}

static void watch_del(fx *f, pid_t pid) {
  scan_pid(f, pid); /* one last look while it may still be there */
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < f->nwatch; i++) {
    if (f->watch[i] == pid) {
      f->watch[i] = f->watch[--f->nwatch];
      break;
    }
  }
  pthread_mutex_unlock(&f->mu);
}

static void kid_forget(fx *f, pid_t pid) {
  for (int i = 0; i < f->nkids; i++) {
    if (f->kids[i] == pid) {
      f->kids[i] = f->kids[--f->nkids];
      break;
    }
  }
}

static char *fx_path(fx *f, const char *name, char *buf, size_t cap) {
  snprintf(buf, cap, "%s/%s", f->dir, name);
  return buf;
}

/* Starts the CLI with the given arguments (NULL-terminated); its stdout goes to <dir>/<tag>.out and
 * its stderr to <dir>/<tag>.err. Returns the pid. */
static pid_t fx_spawn(fx *f, const char *tag, const char *arg0, ...) {
  char *argv[40];
  int n = 0;
  argv[n++] = (char *)th_cli();
  va_list ap;
  va_start(ap, arg0);
  for (const char *a = arg0; a && n < 39; a = va_arg(ap, const char *))
    argv[n++] = (char *)a;
  va_end(ap);
  argv[n] = NULL;
  char out[256], err[256], p[96];
  snprintf(p, sizeof p, "%s.out", tag);
  fx_path(f, p, out, sizeof out);
  snprintf(p, sizeof p, "%s.err", tag);
  fx_path(f, p, err, sizeof err);
  int ofd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int efd = open(err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  assert_true(ofd >= 0 && efd >= 0);
  assert_true(f->nkids < MAX_KIDS);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) { /* (th_spawn, plus: it dies with this process, should a test crash it) */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(ofd, 1);
    dup2(efd, 2);
    execv(argv[0], argv);
    _exit(127);
  }
  close(ofd);
  close(efd);
  assert_true(pid > 0);
  f->kids[f->nkids++] = pid;
  watch_add(f, pid);
  return pid;
}

/* Sends sig to a child and reaps it; returns its exit code (128+signal if killed). */
static int fx_kill(fx *f, pid_t pid, int sig) {
  watch_del(f, pid);
  int st = th_stop(pid, sig, TMO);
  kid_forget(f, pid);
  return st;
}

/* Waits (at most timeout_ms) for a child to exit by itself and reaps it; -1 if it did not (it
 * is then killed). */
static int fx_wait(fx *f, pid_t pid, int timeout_ms) {
  int st = th_wait_exit(pid, timeout_ms);
  watch_del(f, pid);
  kid_forget(f, pid);
  return st;
}

static bool kid_alive(pid_t pid) {
  int st;
  return waitpid(pid, &st, WNOHANG) == 0;
}

static char *slurp(const char *path, size_t *len);

/* Fails the test if the child started under tag has exited, showing the end of its stderr (a
 * sanitizer report, a crash message) so that a failure in CI explains itself. */
static void fx_assert_alive(fx *f, pid_t pid, const char *tag) {
  int st;
  if (waitpid(pid, &st, WNOHANG) == 0) return;
  watch_del(f, pid);
  kid_forget(f, pid);
  char name[96], p[256];
  snprintf(name, sizeof name, "%s.err", tag);
  size_t len = 0;
  char *err = slurp(fx_path(f, name, p, sizeof p), &len);
  const char *tail = err && len > 3000 ? err + len - 3000 : err;
  print_error("%s (pid %d) exited (status 0x%x); its stderr ends:\n", tag, (int)pid, st);
  fputs(tail ? tail : "(none)\n", stderr); /* (cmocka's messages have a short buffer) */
  fail_msg("%s exited", tag);
}

/* SIGSTOPs pid and waits until every one of its threads has stopped: kill() returns before a
 * multi-threaded process is stopped (the thread that takes the signal stops the others once it
 * runs), so until then its other threads may still work. */
static void stop_process(pid_t pid) {
  assert_int_equal(kill(pid, SIGSTOP), 0);
  char dir[64];
  snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
  for (int64_t t0 = th_now_ms(); th_now_ms() - t0 < 10000; th_sleep_ms(2)) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    bool all = true;
    struct dirent *e;
    while (all && (e = readdir(d))) {
      if (e->d_name[0] == '.') continue;
      char p[400], st[512];
      snprintf(p, sizeof p, "%s/%s/stat", dir, e->d_name);
      FILE *fp = fopen(p, "re");
      if (!fp) continue;
      size_t n = fread(st, 1, sizeof st - 1, fp);
      fclose(fp);
      st[n] = 0;
      const char *q = strrchr(st, ')');
      all = q && (q[2] == 'T' || q[2] == 't');
    }
    closedir(d);
    if (all) return;
  }
  fail_msg("process %d did not stop within 10 s of SIGSTOP", (int)pid);
}

static pid_t fx_start_server(fx *f) {
  f->server = fx_spawn(f, "serve", "serve", "--address", f->addr, NULL);
  for (int i = 0; i < 1000; i++) {
    if (ez_graph_ping(f->addr, NULL, 0, 200) == 0) return f->server;
    assert_true(kid_alive(f->server));
    th_sleep_ms(10);
  }
  fail_msg("server at %s did not come up", f->addr);
  return -1;
}

static int setup(void **state) {
  fx *f = calloc(1, sizeof *f);
  if (!f) return -1;
  f->fds0 = th_count_fds();
  snprintf(f->dir, sizeof f->dir, "%s/ezfaults.XXXXXX", "/tmp");
  if (!mkdtemp(f->dir)) return -1;
  th_free_address(f->addr, sizeof f->addr);
  pthread_mutex_init(&f->mu, NULL);
  watch_add(f, getpid());
  if (pthread_create(&f->sampler, NULL, sampler_main, f)) return -1;
  *state = f;
  fx_start_server(f);
  return 0;
}

static void rm_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char p[512];
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

/* Stops whatever is left (SIGTERM for a live server, which must exit 0; SIGKILL for the rest). */
static int stop_all(fx *f) {
  int bad = 0;
  while (f->nkids) {
    pid_t pid = f->kids[f->nkids - 1];
    kill(pid, SIGCONT); /* a test that failed may have left it stopped */
    if (pid == f->server) {
      int st = fx_kill(f, pid, SIGTERM);
      if (st != 0) {
        print_error("server %s: exit status %d after SIGTERM (want 0)\n", f->addr, st);
        bad = 1;
      }
    } else {
      fx_kill(f, pid, SIGKILL);
    }
  }
  return bad;
}

/* The end of every test: stops what is left and checks for zombies, segments and fds. */
static void fx_finish(fx *f) {
  f->finished = true;
  assert_int_equal(stop_all(f), 0);
  atomic_store(&f->stop, true);
  pthread_join(f->sampler, NULL);
  /* No child left, zombie or not. */
  int st;
  errno = 0;
  assert_int_equal(waitpid(-1, &st, WNOHANG), -1);
  assert_int_equal(errno, ECHILD);
  /* Every segment seen is gone (the server unlinks with the last lease: give it a moment). */
  if (getenv("EZ_FAULTS_VERBOSE"))
    for (int i = 0; i < f->nnames; i++)
      print_message("segment seen: %s\n", f->names[i]);
  char left[512] = "";
  for (int i = 0; i < f->nnames; i++) {
    char p[64];
    snprintf(p, sizeof p, "/dev/shm/%s", f->names[i]);
    int64_t t0 = th_now_ms();
    while (access(p, F_OK) == 0 && th_now_ms() - t0 < TMO)
      th_sleep_ms(20);
    if (access(p, F_OK) == 0) { /* report it, and do not leave it behind on this machine */
      size_t l = strlen(left);
      snprintf(left + l, sizeof left - l, " %s", f->names[i]);
      unlink(p);
    }
  }
  if (*left) fail_msg("segments left in /dev/shm:%s", left);
  int fds = 0;
  for (int i = 0; i < 200 && (fds = th_count_fds()) != f->fds0; i++)
    th_sleep_ms(10);
  assert_int_equal(fds, f->fds0);
}

static int teardown(void **state) {
  fx *f = *state;
  int rc = 0;
  if (!f->finished) { /* the test failed early: clean up quietly */
    stop_all(f);
    atomic_store(&f->stop, true);
    pthread_join(f->sampler, NULL);
  }
  rm_dir(f->dir);
  pthread_mutex_destroy(&f->mu);
  free(f);
  return rc;
}

/* ---- files ----------------------------------------------------------------------------------- */

/* The whole file (NUL-terminated; caller frees); *len its size. */
static char *slurp(const char *path, size_t *len) {
  FILE *fp = fopen(path, "re");
  if (!fp) {
    if (len) *len = 0;
    return calloc(1, 1);
  }
  size_t cap = 4096, n = 0;
  char *b = malloc(cap);
  size_t k;
  while (b && (k = fread(b + n, 1, cap - n - 1, fp)) > 0) {
    n += k;
    if (cap - n - 1 == 0) {
      char *nb = realloc(b, cap * 2);
      if (!nb) {
        free(b);
        b = NULL;
        break;
      }
      b = nb;
      cap *= 2;
    }
  }
  fclose(fp);
  assert_non_null(b);
  b[n] = 0;
  if (len) *len = n;
  return b;
}

static size_t count_lines(const char *path) {
  size_t n = 0, len;
  char *b = slurp(path, &len);
  for (size_t i = 0; i < len; i++)
    n += b[i] == '\n';
  free(b);
  return n;
}

/* Waits until the file at <dir>/<name> has at least n lines; fails if `pid` exits first or
 * timeout_ms passes. */
static void wait_lines(fx *f, const char *name, size_t n, pid_t pid, int timeout_ms) {
  char p[256];
  fx_path(f, name, p, sizeof p);
  int64_t t0 = th_now_ms();
  size_t got = 0;
  while ((got = count_lines(p)) < n) {
    if (th_now_ms() - t0 > timeout_ms)
      fail_msg("%s: %zu lines after %d ms, want %zu", name, got, timeout_ms, n);
    if (pid > 0 && !kid_alive(pid)) fail_msg("%s: the process exited after %zu lines", name, got);
    th_sleep_ms(10);
  }
}

/* Starts `ezmsg sub TOPIC [extra args]` and waits until it has subscribed (--ready-file). */
static pid_t start_sub(fx *f, const char *tag, const char *topic, const char *count) {
  char ready[256], rn[96];
  snprintf(rn, sizeof rn, "%s.ready", tag);
  fx_path(f, rn, ready, sizeof ready);
  pid_t pid =
      count ? fx_spawn(f, tag, "sub", topic, "--address", f->addr, "--ready-file", ready, "--count",
                       count, NULL)
            : fx_spawn(f, tag, "sub", topic, "--address", f->addr, "--ready-file", ready, NULL);
  for (int i = 0; i < 1000; i++) {
    if (access(ready, F_OK) == 0) return pid;
    if (!kid_alive(pid)) fail_msg("ezmsg sub %s exited before subscribing", topic);
    th_sleep_ms(10);
  }
  fail_msg("ezmsg sub %s did not subscribe within 10 s", topic);
  return -1;
}

/* ---- 1. a publisher process is SIGKILLed mid-stream ------------------------------------------ */

/* Text messages over shared memory: the subscriber process keeps running and receives every
 * message of a new publisher started on the same topic afterwards. */
static void test_pub_killed_shm(void **state) {
  fx *f = *state;
  pid_t sub = start_sub(f, "sub", "/faults/pubkill", NULL);
  pid_t p1 = fx_spawn(f, "p1", "pub", "/faults/pubkill", "--address", f->addr, "--message", "first",
                      "--count", "0", "--rate", "500", NULL);
  wait_lines(f, "sub.out", 20, sub, 20000);
  assert_int_equal(fx_kill(f, p1, SIGKILL), 128 + SIGKILL);
  th_sleep_ms(200);
  fx_assert_alive(f, sub, "sub");

  pid_t p2 = fx_spawn(f, "p2", "pub", "/faults/pubkill", "--address", f->addr, "--message",
                      "second", "--count", "50", NULL);
  assert_int_equal(fx_wait(f, p2, 30000), 0); /* exits once the subscriber released all 50 */
  fx_assert_alive(f, sub, "sub");
  assert_int_equal(fx_kill(f, sub, SIGTERM), 0);

  char p[256];
  size_t len;
  char *out = slurp(fx_path(f, "sub.out", p, sizeof p), &len);
  int firsts = 0, seconds = 0;
  for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
    if (!strcmp(line, "first")) {
      assert_int_equal(seconds, 0); /* nothing of the dead publisher after the new one's */
      firsts++;
    } else if (!strcmp(line, "second")) {
      seconds++;
    } else {
      fail_msg("unexpected line '%.40s'", line);
    }
  }
  free(out);
  assert_true(firsts >= 20);
  assert_int_equal(seconds, 50);
  fx_finish(f);
}

/* Large messages over TCP (a SIGKILL very likely cuts a frame): every line the subscriber prints
 * is a whole message, numbered 0, 1, 2, ..., and it then receives the new publisher's. */
static void test_pub_killed_tcp(void **state) {
  fx *f = *state;
  enum { SIZE = 262144 };
  pid_t sub = start_sub(f, "sub", "/faults/pubkill_tcp", NULL);
  pid_t p1 = fx_spawn(f, "p1", "pub", "/faults/pubkill_tcp", "--address", f->addr, "--size",
                      "262144", "--count", "0", "--force-tcp", "--num-buffers", "4", NULL);
  wait_lines(f, "sub.out", 3, sub, 20000);
  assert_int_equal(fx_kill(f, p1, SIGKILL), 128 + SIGKILL);
  th_sleep_ms(200);
  fx_assert_alive(f, sub, "sub");
  pid_t p2 = fx_spawn(f, "p2", "pub", "/faults/pubkill_tcp", "--address", f->addr, "--message",
                      "second", "--count", "20", "--force-tcp", NULL);
  assert_int_equal(fx_wait(f, p2, 30000), 0);
  assert_int_equal(fx_kill(f, sub, SIGTERM), 0);

  char p[256];
  size_t len;
  char *out = slurp(fx_path(f, "sub.out", p, sizeof p), &len);
  uint64_t next = 0;
  int seconds = 0;
  for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
    if (!strcmp(line, "second")) {
      seconds++;
      continue;
    }
    assert_int_equal(seconds, 0);
    assert_int_equal(strlen(line), 2 * SIZE); /* hex: a whole message, never part of one */
    uint64_t id = 0;
    for (int i = 7; i >= 0; i--) {
      unsigned b;
      assert_int_equal(sscanf(line + 2 * i, "%2x", &b), 1);
      id = (id << 8) | b;
    }
    assert_int_equal(id, next);
    next++;
    for (size_t i = 8; i < SIZE; i += 4099) { /* a sample of the body: byte i is i mod 256 */
      unsigned b;
      assert_int_equal(sscanf(line + 2 * i, "%2x", &b), 1);
      assert_int_equal(b, i % 256);
    }
  }
  free(out);
  assert_true(next >= 3);
  assert_int_equal(seconds, 20);
  fx_finish(f);
}

/* ---- 2. a subscriber process is SIGSTOPped, then SIGKILLed ------------------------------------
 */

/* A publisher here (4 buffers) feeds two subscriber processes; one of them is stopped while it
 * holds messages, so the publisher blocks (publish with a timeout, in a loop); once it is killed
 * the publisher goes on, and the other subscriber receives everything in order. */
static void sub_stopped(fx *f, bool force_tcp) {
  enum { N = 200, STOP_AT = 20 };
  const char *topic = force_tcp ? "/faults/stall_tcp" : "/faults/stall";
  pid_t a = start_sub(f, "a", topic, NULL);
  pid_t b = start_sub(f, "b", topic, "200");

  /* Over TCP the subscribers' channels ask for a window (src/pubwin.c): a small one, so that
   * backpressure shows within 200 messages. */
  enum { WINDOW = 16 };
  setenv(EZ_TCP_WINDOW_ENV, "16", 1);
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(f->addr, &ctx), 0);
  unsetenv(EZ_TCP_WINDOW_ENV);
  ez_pub_opts o;
  ez_pub_opts_init(&o);
  o.num_buffers = 4;
  o.force_tcp = force_tcp;
  ez_pub *pub = NULL;
  assert_int_equal(ez_pub_create(ctx, topic, &o, &pub), 0);
  assert_int_equal(ez_pub_num_channels(pub), 2);

  bool stopped = false, killed = false;
  int consecutive = 0, timeouts = 0, blocked_at = -1;
  for (int i = 0; i < N;) {
    if (i == STOP_AT && !stopped) {
      stop_process(a);
      stopped = true;
    }
    char msg[32];
    int n = snprintf(msg, sizeof msg, "msg %04d", i);
    int rc = ez_publish(pub, msg, (size_t)n, 100);
    if (rc == EZ_ETIMEDOUT) {
      assert_true(stopped); /* nobody holds anything before the stop */
      assert_false(killed); /* and the kill releases the publisher for good */
      consecutive++;
      if (++timeouts > 600) fail_msg("publisher blocked for a minute at message %d", i);
      if (consecutive == 5) { /* blocked for good: now kill the stopped subscriber */
        blocked_at = i;
        assert_int_equal(fx_kill(f, a, SIGKILL), 128 + SIGKILL);
        killed = true;
      }
      continue;
    }
    assert_int_equal(rc, 0);
    if (killed && consecutive) /* the kill closed its channel: that is what freed the slot */
      assert_int_equal(ez_pub_num_channels(pub), 1);
    consecutive = 0;
    i++;
  }
  assert_true(killed);
  /* Blocked by backpressure, exactly where 4 buffers (or the TCP window) say: the stopped
   * subscriber had released at most what came before the stop. */
  assert_in_range(blocked_at, STOP_AT, STOP_AT + (force_tcp ? WINDOW : 4));
  assert_int_equal(ez_pub_flush(pub, 20000), 0);

  assert_int_equal(fx_wait(f, b, 30000), 0); /* --count 200 */
  char p[256];
  size_t len;
  char *out = slurp(fx_path(f, "b.out", p, sizeof p), &len);
  char *line = strtok(out, "\n");
  for (int i = 0; i < N; i++, line = strtok(NULL, "\n")) {
    char want[32];
    snprintf(want, sizeof want, "msg %04d", i);
    if (!line || strcmp(line, want))
      fail_msg("subscriber b: line %d is '%s', want '%s'", i, line ? line : "(none)", want);
  }
  assert_null(line);
  free(out);
  ez_pub_destroy(pub);
  ez_context_close(ctx);
  fx_finish(f);
}

static void test_sub_stopped_shm(void **state) { sub_stopped(*state, false); }
static void test_sub_stopped_tcp(void **state) { sub_stopped(*state, true); }

/* ---- 3. the graph server is SIGKILLed ------------------------------------------------------- */

typedef struct waiter {
  ez_sub *sub;
  int rc;
  atomic_bool done;
} waiter;

static void *recv_forever(void *arg) {
  waiter *w = arg;
  ez_msg m;
  w->rc = ez_recv(w->sub, &m, -1);
  if (w->rc == 0) ez_msg_release(&m);
  atomic_store(&w->done, true);
  return NULL;
}

/* Every outcome a dead server may give. */
static bool server_gone_err(int rc) {
  return rc == EZ_ENOSERVER || rc == EZ_ECONNLOST || rc == EZ_ETIMEDOUT;
}

#define ASSERT_FAILS_WITHIN(call, bound_ms)                                                        \
  do {                                                                                             \
    int64_t t0_ = th_now_ms();                                                                     \
    int rc_ = (call);                                                                              \
    int64_t dt_ = th_now_ms() - t0_;                                                               \
    if (!server_gone_err(rc_)) fail_msg("%s returned %d (%s)", #call, rc_, ez_strerror(rc_));      \
    if (dt_ > (bound_ms))                                                                          \
      fail_msg("%s took %lld ms (bound %d)", #call, (long long)dt_, (bound_ms));                   \
  } while (0)

static void test_server_killed(void **state) {
  fx *f = *state;
  /* A publisher process streaming, a CLI subscriber on a quiet topic, and here a subscriber on
   * the stream and one on a quiet topic blocked in ez_recv(-1). */
  pid_t quiet = start_sub(f, "quiet", "/faults/quiet", NULL);
  pid_t pub = fx_spawn(f, "pub", "pub", "/faults/live", "--address", f->addr, "--message", "live",
                       "--count", "0", "--rate", "200", NULL);
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(f->addr, &ctx), 0);
  ez_sub *live = NULL, *still = NULL;
  assert_int_equal(ez_sub_create(ctx, "/faults/live", NULL, &live), 0);
  assert_int_equal(ez_sub_create(ctx, "/faults/still", NULL, &still), 0);
  ez_msg m;
  int rc;
  int64_t t0 = th_now_ms();
  while ((rc = ez_recv(live, &m, 200)) == EZ_ETIMEDOUT && th_now_ms() - t0 < 20000) {
  } /* the publisher process may still be registering */
  assert_int_equal(rc, 0);
  assert_memory_equal(m.data, "live", 4);
  ez_msg_release(&m);

  waiter w = {.sub = still};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, recv_forever, &w), 0);
  th_sleep_ms(100);
  assert_false(atomic_load(&w.done));

  assert_int_equal(fx_kill(f, f->server, SIGKILL), 128 + SIGKILL);

  /* The waiting receiver wakes up with EZ_ECONNLOST. */
  t0 = th_now_ms();
  while (!atomic_load(&w.done) && th_now_ms() - t0 < 10000)
    th_sleep_ms(10);
  if (!atomic_load(&w.done)) fail_msg("ez_recv(-1) still waits 10 s after the server died");
  pthread_join(th, NULL);
  assert_int_equal(w.rc, EZ_ECONNLOST);
  assert_int_equal(ez_recv(still, &m, 0), EZ_ECONNLOST); /* and keeps saying so */

  /* The CLI subscriber exits 1 with a message. */
  assert_int_equal(fx_wait(f, quiet, 10000), 1);
  char p[256];
  char *err = slurp(fx_path(f, "quiet.err", p, sizeof p), NULL);
  if (!strstr(err, "lost the graph server")) fail_msg("ezmsg sub said: %s", err);
  free(err);

  /* Every client call fails within its timeout. */
  ez_graph g = {0};
  char *json = NULL;
  ez_context *ctx2 = NULL;
  ez_sub *s2 = NULL;
  ez_pub *p2 = NULL;
  ASSERT_FAILS_WITHIN(ez_graph_ping(f->addr, NULL, 0, 2000), 2000 + SLACK);
  ASSERT_FAILS_WITHIN(ez_graph_connect(f->addr, "/a", "/b", 2000), 2000 + SLACK);
  ASSERT_FAILS_WITHIN(ez_graph_disconnect(f->addr, "/a", "/b", 2000), 2000 + SLACK);
  ASSERT_FAILS_WITHIN(ez_graph_dag(f->addr, &g, 2000), 2000 + SLACK);
  ASSERT_FAILS_WITHIN(ez_profile(f->addr, 1.0, &json, 2000), 2000 + SLACK);
  ASSERT_FAILS_WITHIN(ez_graph_sync(f->addr, 2000), 2000 + SLACK);
  ASSERT_FAILS_WITHIN(ez_context_open(f->addr, &ctx2), 2000 + SLACK);
  ASSERT_FAILS_WITHIN(ez_sub_create(ctx, "/faults/late", NULL, &s2),
                      2 * EZ_DEFAULT_TIMEOUT_MS + SLACK);
  ASSERT_FAILS_WITHIN(ez_pub_create(ctx, "/faults/late", NULL, &p2), EZ_DEFAULT_TIMEOUT_MS + SLACK);
  assert_null(json);
  assert_null(ctx2);
  assert_null(s2);
  assert_null(p2);
  assert_int_equal(g.n_nodes, 0);

  /* The data plane does not need the server: the stream goes on until its publisher stops;
   * then the receiver drains what was queued and reports the lost server. */
  int got = 0;
  t0 = th_now_ms();
  while (th_now_ms() - t0 < 500) {
    if ((rc = ez_recv(live, &m, 100)) == 0) {
      got++;
      ez_msg_release(&m);
    }
  }
  int st = fx_kill(f, pub, SIGTERM);
  assert_true(st == 0 || st == 1); /* a clean exit, whatever it thinks of the lost server */
  t0 = th_now_ms();
  while ((rc = ez_recv(live, &m, 500)) == 0 && th_now_ms() - t0 < 10000)
    ez_msg_release(&m);
  assert_int_equal(rc, EZ_ECONNLOST);
  print_message("after the server died: %d message(s) arrived in 0.5 s from the live publisher\n",
                got);

  /* Nobody is left to unlink the publisher's segment but its own users: the checks below
   * (fx_finish) want it gone all the same. */
  ez_context_close(ctx);
  fx_finish(f);
}

/* The graph server is SIGSTOPped (alive but deaf): calls time out within their timeouts; after
 * SIGCONT everything works again. */
static void test_server_stopped(void **state) {
  fx *f = *state;
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(f->addr, &ctx), 0);
  stop_process(f->server);
  ez_graph g = {0};
  char *json = NULL;
  ez_pub *p = NULL;
  int64_t t0 = th_now_ms();
  int rc = ez_graph_dag(f->addr, &g, 500);
  assert_int_equal(rc, EZ_ETIMEDOUT);
  assert_true(th_now_ms() - t0 <= 500 + SLACK);
  t0 = th_now_ms();
  assert_int_equal(ez_profile(f->addr, 1.0, &json, 500), EZ_ETIMEDOUT);
  assert_true(th_now_ms() - t0 <= 500 + SLACK);
  t0 = th_now_ms();
  assert_int_equal(ez_graph_connect(f->addr, "/x", "/y", 500), EZ_ETIMEDOUT);
  assert_true(th_now_ms() - t0 <= 500 + SLACK);
  t0 = th_now_ms();
  rc = ez_pub_create(ctx, "/faults/deaf", NULL, &p);
  assert_int_equal(rc, EZ_ETIMEDOUT);
  assert_true(th_now_ms() - t0 <= EZ_DEFAULT_TIMEOUT_MS + SLACK);
  assert_int_equal(kill(f->server, SIGCONT), 0);

  /* Awake again: the same calls succeed. */
  assert_int_equal(ez_graph_dag(f->addr, &g, TMO), 0);
  ez_graph_free(&g);
  assert_int_equal(ez_pub_create(ctx, "/faults/deaf", NULL, &p), 0);
  ez_sub *s = NULL;
  assert_int_equal(ez_sub_create(ctx, "/faults/deaf", NULL, &s), 0);
  assert_int_equal(ez_publish(p, "awake", 5, TMO), 0);
  char buf[16];
  size_t len = 0;
  assert_int_equal(ez_recv_copy(s, buf, sizeof buf, &len, TMO), 0);
  assert_int_equal(len, 5);
  assert_memory_equal(buf, "awake", 5);
  ez_context_close(ctx);
  fx_finish(f);
}

/* A publisher process is SIGSTOPped (alive but deaf): the server does not wait on it for more than
 * its bound (a profile waits at most 1 s per client), the rest of the graph goes on, and once it
 * is SIGKILLed a new publisher reaches the same subscriber. */
static void test_pub_stopped(void **state) {
  fx *f = *state;
  pid_t sub = start_sub(f, "sub", "/faults/frozen", NULL);
  pid_t p1 = fx_spawn(f, "p1", "pub", "/faults/frozen", "--address", f->addr, "--message", "first",
                      "--count", "0", "--rate", "200", NULL);
  wait_lines(f, "sub.out", 5, sub, 20000);
  stop_process(p1);
  char *json = NULL;
  int64_t t0 = th_now_ms();
  assert_int_equal(ez_profile(f->addr, 1.0, &json, 20000), 0);
  int64_t dt = th_now_ms() - t0;
  if (dt > 1000 + SLACK)
    fail_msg("ez_profile took %lld ms with a stopped publisher", (long long)dt);
  ez_profile_data pd;
  assert_int_equal(ez_profile_parse(json, &pd), 0);
  free(json);
  assert_int_equal(pd.n_publishers, 0); /* it could not answer */
  assert_int_equal(pd.n_channels, 1);   /* the subscriber's channel did */
  assert_string_equal(pd.channels[0].topic, "/faults/frozen");
  ez_profile_data_free(&pd);
  ez_graph g = {0};
  assert_int_equal(ez_graph_dag(f->addr, &g, TMO), 0);
  ez_graph_free(&g);
  fx_assert_alive(f, sub, "sub");

  assert_int_equal(fx_kill(f, p1, SIGKILL), 128 + SIGKILL);
  pid_t p2 = fx_spawn(f, "p2", "pub", "/faults/frozen", "--address", f->addr, "--message", "second",
                      "--count", "10", NULL);
  assert_int_equal(fx_wait(f, p2, 30000), 0);
  assert_int_equal(fx_kill(f, sub, SIGTERM), 0);
  char p[256];
  char *out = slurp(fx_path(f, "sub.out", p, sizeof p), NULL);
  int seconds = 0;
  for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
    if (!strcmp(line, "second"))
      seconds++;
    else if (strcmp(line, "first") || seconds)
      fail_msg("unexpected line '%.40s'", line);
  }
  free(out);
  assert_int_equal(seconds, 10);
  fx_finish(f);
}

/* ---- 4. a publisher (played here over raw sockets) cuts its channel mid-message ---------------
 */

typedef struct fake_pub {
  int graph, data, listener;
  char id[64];
} fake_pub;

/* Registers a publisher on topic at the server, announcing `addr` for its channels. */
static void fake_pub_announce(fx *f, fake_pub *fp, const char *topic, const char *addr) {
  fp->graph = rp_open(f->addr);
  char ver[64];
  rp_rd_str(fp->graph, ver, sizeof ver);
  uint8_t cmd = PUBLISH;
  rp_wr(fp->graph, &cmd, 1);
  rp_wr_str(fp->graph, topic);
  rp_rd_str(fp->graph, fp->id, sizeof fp->id);
  assert_int_equal(strlen(fp->id), 36);
  rp_wr_str(fp->graph, addr);
}

/* Registers a publisher on topic at the server, listening for channels itself. */
static void fake_pub_register(fx *f, fake_pub *fp, const char *topic) {
  fp->data = -1;
  char my_addr[64];
  fp->listener = rp_listen(my_addr, 4);

  fake_pub_announce(f, fp, topic, my_addr);
}

/* Accepts the next channel connection and reads its CHANNEL request (chan_id: its id). */
static int fake_pub_accept(fake_pub *fp, char chan_id[64]) {
  struct pollfd pf = {.fd = fp->listener, .events = POLLIN};
  assert_int_equal(poll(&pf, 1, TMO), 1);
  int fd = accept4(fp->listener, NULL, NULL, SOCK_CLOEXEC);
  assert_true(fd >= 0);
  uint8_t cmd = 0;
  assert_int_equal(rp_rd_exact(fd, &cmd, 1, TMO), 0);
  assert_int_equal(cmd, CHANNEL);
  rp_rd_str(fd, chan_id, 64);
  assert_true(rp_is_uuid(chan_id));
  return fd;
}

/* Accepts a channel and completes its handshake (no segment: TCP) as fp->data. */
static void fake_pub_handshake(fake_pub *fp, uint64_t nbuf, char chan_id[64]) {
  fp->data = fake_pub_accept(fp, chan_id);
  rp_wr_str(fp->data, ""); /* no segment: TCP it is */
  uint8_t cmd = 0;
  assert_int_equal(rp_rd_exact(fp->data, &cmd, 1, TMO), 0);
  assert_int_equal(cmd, SHM_ATTACH_FAILED);
  assert_int_equal(rp_rd_u64(fp->data), (uint64_t)getpid());
  uint8_t done[9] = {COMPLETE};
  ezi_put_u64le(done + 1, nbuf);
  rp_wr(fp->data, done, 9);
  /* An ezmsg-c channel offers to hold a larger TCP window (src/pubwin.c); we play a publisher
   * that keeps the protocol's. */
  assert_int_equal(rp_rd_exact(fp->data, &cmd, 1, TMO), 0);
  assert_int_equal(cmd, EZI_X_WIN_ASK);
}

/* Registers a publisher on topic at the server and completes the channel handshake with the one
 * subscribing process (this one): its channel connects to our listener. */
static void fake_pub_start(fx *f, fake_pub *fp, const char *topic, uint64_t nbuf) {
  fake_pub_register(f, fp, topic);
  /* The server now sends the subscriber an UPDATE; its channel comes to us. */
  char chan_id[64];
  fake_pub_handshake(fp, nbuf, chan_id);
  /* ... and the server completes our registration once the subscriber answered its UPDATE. */
  uint8_t cmd = 0;
  assert_int_equal(rp_rd_exact(fp->graph, &cmd, 1, TMO), 0);
  assert_int_equal(cmd, COMPLETE);
}

/* A TX_TCP frame carrying a bytes payload; *len its size (caller frees). */
static uint8_t *tx_frame(uint64_t msg_id, const char *payload, size_t *len) {
  size_t pl = strlen(payload), ml = EZI_MARSHAL_BYTES_HDR + pl;
  uint8_t *b = malloc(17 + ml);
  assert_non_null(b);
  b[0] = TX_TCP;
  ezi_put_u64le(b + 1, msg_id);
  ezi_put_u64le(b + 9, ml);
  ezi_marshal_bytes_header(b + 17, msg_id, pl);
  memcpy(b + 17 + EZI_MARSHAL_BYTES_HDR, payload, pl);
  *len = 17 + ml;
  return b;
}

static void test_channel_cut_mid_message(void **state) {
  fx *f = *state;
  const char *topic = "/faults/cut";
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(f->addr, &ctx), 0);
  ez_sub *sub = NULL;
  assert_int_equal(ez_sub_create(ctx, topic, NULL, &sub), 0);
  const char *body = "the whole of message one, which never arrives in full";
  size_t full_len;
  uint8_t *probe = tx_frame(1, body, &full_len);
  free(probe);
  /* Where the cut falls: inside the frame header, inside the marshalled header, inside the
   * payload, and one byte short of the end. */
  const size_t cuts[] = {
      1, 5, 9, 16, 17, 18, 17 + 20, 17 + EZI_MARSHAL_BYTES_HDR, full_len / 2, full_len - 1};
  for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
    fake_pub fp;
    fake_pub_start(f, &fp, topic, 4);
    /* A whole message first: it arrives, and its release is acked to us. */
    char first[64];
    snprintf(first, sizeof first, "whole %zu", k);
    size_t n;
    uint8_t *fr = tx_frame(0, first, &n);
    rp_wr(fp.data, fr, n);
    free(fr);
    ez_msg m;
    assert_int_equal(ez_recv(sub, &m, TMO), 0);
    assert_int_equal(m.len, strlen(first));
    assert_memory_equal(m.data, first, m.len);
    assert_int_equal(m.msg_id, 0);
    assert_string_equal(m.pub_id, fp.id);
    ez_msg_release(&m);
    uint8_t ack[9];
    assert_int_equal(rp_rd_exact(fp.data, ack, 9, TMO), 0);
    assert_int_equal(ack[0], RX_ACK);
    assert_int_equal(ezi_get_u64le(ack + 1), 0);

    /* Then part of the next one, and the connection is cut. */
    fr = tx_frame(1, body, &n);
    assert_int_equal(n, full_len);
    rp_wr(fp.data, fr, cuts[k]);
    free(fr);
    th_sleep_ms(50); /* let the channel read the part */
    close(fp.data);
    assert_int_equal(ez_recv(sub, &m, 300), EZ_ETIMEDOUT);
    /* The publisher leaves too; the subscriber drops its channel. */
    close(fp.graph);
    close(fp.listener);
    assert_int_equal(ez_recv(sub, &m, 100), EZ_ETIMEDOUT);
  }

  /* The subscriber is still usable: a real publisher's messages arrive. */
  pid_t pub = fx_spawn(f, "pub", "pub", topic, "--address", f->addr, "--message", "after",
                       "--count", "3", NULL);
  for (int i = 0; i < 3; i++) {
    char buf[16];
    size_t len = 0;
    assert_int_equal(ez_recv_copy(sub, buf, sizeof buf, &len, 20000), 0);
    assert_int_equal(len, 5);
    assert_memory_equal(buf, "after", 5);
  }
  assert_int_equal(fx_wait(f, pub, 20000), 0);
  ez_sub_destroy(sub);
  ez_context_close(ctx);
  fx_finish(f);
}

/* Sends message msg_id over fp's channel, receives it, releases it and reads its ack. */
static void fake_pub_roundtrip(fake_pub *fp, ez_sub *sub, uint64_t msg_id, const char *text) {
  size_t n;
  uint8_t *fr = tx_frame(msg_id, text, &n);
  rp_wr(fp->data, fr, n);
  free(fr);
  ez_msg m;
  assert_int_equal(ez_recv(sub, &m, TMO), 0);
  assert_int_equal(m.msg_id, msg_id);
  assert_int_equal(m.len, strlen(text));
  assert_memory_equal(m.data, text, m.len);
  assert_string_equal(m.pub_id, fp->id);
  ez_msg_release(&m);
  uint8_t ack[9];
  assert_int_equal(rp_rd_exact(fp->data, ack, 9, TMO), 0);
  assert_int_equal(ack[0], RX_ACK);
  assert_int_equal(ezi_get_u64le(ack + 1), msg_id);
}

/* A publisher that is still registered but whose channel fails (closed during the handshake, or
 * cut after it) is joined again, with a new channel, and its messages arrive again; a message that
 * had arrived whole before the cut is not dropped. */
static void test_channel_rejoins(void **state) {
  fx *f = *state;
  const char *topic = "/faults/rejoin";
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(f->addr, &ctx), 0);
  ez_sub *sub = NULL;
  assert_int_equal(ez_sub_create(ctx, topic, NULL, &sub), 0);
  fake_pub fp;
  fake_pub_register(f, &fp, topic);

  /* 1. The first join fails: we hang up on the CHANNEL request. The subscriber still answers the
   * server's UPDATE, so our registration completes. */
  char id1[64], id2[64], id3[64];
  close(fake_pub_accept(&fp, id1));
  uint8_t cmd = 0xff;
  assert_int_equal(rp_rd_exact(fp.graph, &cmd, 1, TMO), 0);
  assert_int_equal(cmd, COMPLETE);

  /* 2. It comes back by itself with a new channel, and messages flow. */
  fake_pub_handshake(&fp, 4, id2);
  assert_string_not_equal(id1, id2);
  fake_pub_roundtrip(&fp, sub, 0, "after a failed join");

  /* 3. The connection is cut after the handshake, with a message that came whole over TCP still
   * queued: that message is still delivered, and the channel comes back again. */
  size_t n;
  uint8_t *fr = tx_frame(1, "queued at the cut", &n);
  rp_wr(fp.data, fr, n);
  free(fr);
  struct pollfd pf = {.fd = ez_sub_fd(sub), .events = POLLIN};
  assert_int_equal(poll(&pf, 1, TMO), 1); /* queued */
  close(fp.data);
  fake_pub_handshake(&fp, 4, id3);
  assert_string_not_equal(id2, id3);
  ez_msg m;
  assert_int_equal(ez_recv(sub, &m, TMO), 0);
  assert_int_equal(m.msg_id, 1);
  assert_int_equal(m.len, strlen("queued at the cut"));
  assert_memory_equal(m.data, "queued at the cut", m.len);
  ez_msg_release(&m);
  fake_pub_roundtrip(&fp, sub, 2, "after a cut");
  fake_pub_roundtrip(&fp, sub, 3, "and on");

  /* 4. The publisher leaves: no more joins (nobody connects to the listener any more). */
  close(fp.graph);
  th_sleep_ms(100); /* the server's UPDATE reaches the subscriber */
  close(fp.data);
  pf = (struct pollfd){.fd = fp.listener, .events = POLLIN};
  assert_int_equal(poll(&pf, 1, 400), 0);
  close(fp.listener);

  ez_sub_destroy(sub);
  ez_context_close(ctx);
  fx_finish(f); /* no fd, segment or process left */
}

/* How many messages `live` receives in one second (a live link keeps delivering). */
static int count_for_1s(ez_sub *live) {
  char buf[16];
  size_t len = 0;
  int got = 0;
  int64_t t0 = th_now_ms();
  while (th_now_ms() - t0 < 1000) {
    int rc = ez_recv_copy(live, buf, sizeof buf, &len, 100);
    if (rc == 0)
      got++;
    else
      assert_int_equal(rc, EZ_ETIMEDOUT);
  }
  return got;
}

/* A 200 Hz `ezmsg pub` process on topic, whose first message has reached `live`: a link that keeps
 * delivering while the test disturbs another one. Returns the publisher's pid. */
static pid_t start_ticker(fx *f, ez_sub *live, const char *topic) {
  pid_t pub = fx_spawn(f, "tick", "pub", topic, "--address", f->addr, "--message", "tick",
                       "--count", "0", "--rate", "200", NULL);
  char buf[16];
  size_t len = 0;
  assert_int_equal(ez_recv_copy(live, buf, sizeof buf, &len, TMO), 0); /* flowing */
  return pub;
}

/* Joining again goes through the graph server (CHANNEL). With the server stopped, that join
 * waits, but on nothing else: the process's other links keep delivering meanwhile (the I/O thread
 * never blocks on the server), and once the server runs again the join completes. */
static void test_rejoin_with_server_stopped(void **state) {
  fx *f = *state;
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(f->addr, &ctx), 0);
  ez_sub *cut = NULL, *live = NULL;
  assert_int_equal(ez_sub_create(ctx, "/faults/frozen/a", NULL, &cut), 0);
  assert_int_equal(ez_sub_create(ctx, "/faults/frozen/b", NULL, &live), 0);
  fake_pub fp;
  fake_pub_start(f, &fp, "/faults/frozen/a", 4);
  pid_t pub = start_ticker(f, live, "/faults/frozen/b");

  stop_process(f->server);
  close(fp.data); /* cut: `cut` joins again, and its registration waits for the server */
  th_sleep_ms(100);
  int got = count_for_1s(live);
  print_message("server stopped: %d messages in 1 s on the other link\n", got);
  assert_true(got >= 20); /* 200 Hz: a blocked I/O thread would deliver none */
  assert_int_equal(kill(f->server, SIGCONT), 0);

  char id[64];
  fake_pub_handshake(&fp, 4, id); /* the join completes */
  fake_pub_roundtrip(&fp, cut, 0, "after the thaw");
  assert_int_equal(fx_kill(f, pub, SIGTERM), 0);
  close(fp.graph);
  close(fp.data);
  close(fp.listener);
  ez_context_close(ctx);
  fx_finish(f);
}

/* ez_sub_create on another thread (a join that waits must not block the test's own checks). */
struct sub_args {
  ez_context *ctx;
  ez_sub **out;
  int rc;
};
static void *sub_create_main(void *arg) {
  struct sub_args *a = arg;
  a->rc = ez_sub_create(a->ctx, "/faults/unreach/stuck", NULL, a->out);
  return NULL;
}

/* A publisher whose channel server never answers a connect (its accept queue is full, so the
 * kernel drops our SYNs): joining it waits, but on nothing else; the process's other links keep
 * delivering (the connect does not block the I/O thread). */
static void test_unreachable_publisher(void **state) {
  fx *f = *state;
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(f->addr, &ctx), 0);
  ez_sub *live = NULL, *stuck = NULL;
  assert_int_equal(ez_sub_create(ctx, "/faults/unreach/live", NULL, &live), 0);
  pid_t pub = start_ticker(f, live, "/faults/unreach/live");

  /* A listener with a full accept queue: connects to it hang in SYN_SENT. */
  fake_pub fp = {.data = -1};
  fp.listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(fp.listener, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t alen = sizeof a;
  getsockname(fp.listener, (struct sockaddr *)&a, &alen);
  assert_int_equal(listen(fp.listener, 0), 0);
  int fill[3];
  for (int i = 0; i < 3; i++) {
    fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    connect(fill[i], (struct sockaddr *)&a, sizeof a); /* EINPROGRESS; the queue fills */
  }
  th_sleep_ms(50);
  char stuck_addr[64];
  snprintf(stuck_addr, sizeof stuck_addr, "127.0.0.1:%u", ntohs(a.sin_port));
  fake_pub_announce(f, &fp, "/faults/unreach/stuck", stuck_addr);

  /* The subscriber joins it: its UPDATE is answered only once the join fails (the 5 s handshake
   * timer), so create it from another thread, and watch the live link meanwhile. */
  pthread_t t;
  struct sub_args sa = {ctx, &stuck, -1};
  assert_int_equal(pthread_create(&t, NULL, sub_create_main, &sa), 0);
  th_sleep_ms(200);
  int got = count_for_1s(live);
  print_message("joining an unreachable publisher: %d messages in 1 s on the other link\n", got);
  assert_true(got >= 60); /* 200 Hz; with the connect blocking the I/O thread: 10 (what was
                           * already queued) */
  pthread_join(t, NULL);
  assert_int_equal(sa.rc, 0); /* created; the unreachable publisher is retried in the background */

  close(fp.graph); /* the publisher leaves: the retries stop */
  for (int i = 0; i < 3; i++)
    close(fill[i]);
  close(fp.listener);
  assert_int_equal(fx_kill(f, pub, SIGTERM), 0);
  ez_context_close(ctx);
  fx_finish(f);
}

/* ---- 5. a subscriber that leaves while messages wait in its queue ------------------------------
 */

/* The scenario runs in a child process (a double free aborts it); the child exits 0 if all went
 * well. A subscriber with received-but-not-taken messages is destroyed: ezi_chan_leave marks its
 * chan_sub gone, then ezi_sub_purge releases the queued messages, and the last release frees the
 * chan_sub, which ezi_chan_leave then reads and frees again (heap-use-after-free at
 * channel.c:580 under ASan, "double free" abort without). `ezmsg sub` on a busy topic hits it on
 * SIGTERM or at the end of --count. */
static void test_sub_leaves_with_queued_messages(void **state) {
  fx *f = *state;
  fflush(NULL);
  pid_t parent = getpid();
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    int code = 0;
    for (int round = 0; round < 20 && !code; round++) {
      ez_context *ctx = NULL;
      ez_pub *pub = NULL;
      ez_sub *sub = NULL, *other = NULL;
      if (ez_context_open(f->addr, &ctx) || ez_pub_create(ctx, "/faults/queued", NULL, &pub) ||
          ez_sub_create(ctx, "/faults/queued", NULL, &sub) ||
          ez_sub_create(ctx, "/faults/queued", NULL, &other))
        _exit(10);
      for (int i = 0; i < 3; i++)
        if (ez_publish(pub, "queued", 6, TMO)) _exit(11);
      ez_sub_destroy(sub); /* three messages wait in its queue */
      char buf[8];
      size_t len;
      for (int i = 0; i < 3; i++) /* the other subscriber is unaffected */
        if (ez_recv_copy(other, buf, sizeof buf, &len, TMO) || len != 6) code = 12;
      if (!code && ez_pub_flush(pub, TMO)) code = 13; /* everything was released */
      ez_context_close(ctx);
    }
    _exit(code);
  }
  f->kids[f->nkids++] = pid;
  watch_add(f, pid);
  int st = fx_wait(f, pid, 60000);
  if (st != 0)
    fail_msg("the child exited with status %d (%s)", st,
             st > 128 ? "killed by a signal" : "an error");
  fx_finish(f);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  if (getenv("EZ_FAULTS_FILTER")) cmocka_set_test_filter(getenv("EZ_FAULTS_FILTER"));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_pub_killed_shm, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pub_killed_tcp, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sub_stopped_shm, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sub_stopped_tcp, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pub_stopped, setup, teardown),
      cmocka_unit_test_setup_teardown(test_server_killed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_server_stopped, setup, teardown),
      cmocka_unit_test_setup_teardown(test_channel_cut_mid_message, setup, teardown),
      cmocka_unit_test_setup_teardown(test_channel_rejoins, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rejoin_with_server_stopped, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unreachable_publisher, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sub_leaves_with_queued_messages, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
