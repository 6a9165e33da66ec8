/* The fault-injection tests' kit: the fixture (a server, child processes by pid, a segment
 * sampler) and file helpers. See faults.h. */
#include "faults.h"

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

/* ---- fixture: a server, child processes by pid, a segment sampler ---------------------------- */

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

/* The start time of process pid (field 22 of /proc/pid/stat, clock ticks since boot), or 0. */
static unsigned long long start_time(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *st = fopen(path, "re");
  if (!st) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, st);
  fclose(st);
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* the command may hold spaces and parentheses */
  unsigned long long t = 0;
  for (int field = 2; p && *p; p++) /* p is at the end of field 2 */
    if (*p == ' ' && ++field == 22) {
      t = strtoull(p + 1, NULL, 10);
      break;
    }
  return t;
}

/* Records every /dev/shm/psm_* that pid maps or holds open, if pid is still the process that
 * started at `start` (0: don't check). On a busy machine (pid_max 32768 here) a child's pid is
 * given to someone else soon after it is reaped, and its segments are not ours to account for. */
static void scan_pid(fx *f, pid_t pid, unsigned long long start) {
  if (start && start_time(pid) != start) return;
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
    unsigned long long starts[MAX_KIDS + 1];
    pthread_mutex_lock(&f->mu);
    int n = f->nwatch;
    memcpy(pids, f->watch, sizeof pids);
    memcpy(starts, f->watch_start, sizeof starts);
    pthread_mutex_unlock(&f->mu);
    for (int i = 0; i < n; i++)
      scan_pid(f, pids[i], starts[i]);
    th_sleep_ms(5);
  }
  return NULL;
}

void watch_add(fx *f, pid_t pid) {
  pthread_mutex_lock(&f->mu);
  if (f->nwatch < MAX_KIDS + 1) {
    f->watch_start[f->nwatch] = start_time(pid);
    f->watch[f->nwatch++] = pid;
  }
  pthread_mutex_unlock(&f->mu);
}

static void watch_del(fx *f, pid_t pid) {
  pthread_mutex_lock(&f->mu);
  unsigned long long start = 0;
  for (int i = 0; i < f->nwatch; i++) {
    if (f->watch[i] == pid) {
      start = f->watch_start[i];
      f->watch[i] = f->watch[--f->nwatch];
      f->watch_start[i] = f->watch_start[f->nwatch];
      break;
    }
  }
  pthread_mutex_unlock(&f->mu);
  if (start) scan_pid(f, pid, start); /* one last look while it may still be there */
}

static void kid_forget(fx *f, pid_t pid) {
  for (int i = 0; i < f->nkids; i++) {
    if (f->kids[i] == pid) {
      f->kids[i] = f->kids[--f->nkids];
      break;
    }
  }
}

char *fx_path(fx *f, const char *name, char *buf, size_t cap) {
  snprintf(buf, cap, "%s/%s", f->dir, name);
  return buf;
}

/* Starts the CLI with the given arguments (NULL-terminated); its stdout goes to <dir>/<tag>.out and
 * its stderr to <dir>/<tag>.err. Returns the pid. */
pid_t fx_spawn(fx *f, const char *tag, const char *arg0, ...) {
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
int fx_kill(fx *f, pid_t pid, int sig) {
  watch_del(f, pid);
  int st = th_stop(pid, sig, TMO);
  kid_forget(f, pid);
  return st;
}

/* Waits (at most timeout_ms) for a child to exit by itself and reaps it; -1 if it did not (it
 * is then killed). */
int fx_wait(fx *f, pid_t pid, int timeout_ms) {
  int st = th_wait_exit(pid, timeout_ms);
  watch_del(f, pid);
  kid_forget(f, pid);
  return st;
}

static bool kid_alive(pid_t pid) {
  int st;
  return waitpid(pid, &st, WNOHANG) == 0;
}

/* Fails the test if the child started under tag has exited, showing the end of its stderr (a
 * sanitizer report, a crash message) so that a failure in CI explains itself. */
void fx_assert_alive(fx *f, pid_t pid, const char *tag) {
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
void stop_process(pid_t pid) {
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

int setup(void **state) {
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
void fx_finish(fx *f) {
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

int teardown(void **state) {
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
char *slurp(const char *path, size_t *len) {
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
void wait_lines(fx *f, const char *name, size_t n, pid_t pid, int timeout_ms) {
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
pid_t start_sub(fx *f, const char *tag, const char *topic, const char *count) {
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
