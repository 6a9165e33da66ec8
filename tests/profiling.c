/* The profiling tests' kit: the fixture, child processes and their roles, profile helpers and a
 * fake channel. See profiling.h. */
#include "profiling.h"
#include "rawproto.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- fixture: one `ezmsg serve` per test, and the children it started ------------------------ */

pid_t g_children[MAX_CHILDREN];

int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (!f) return -1;
  th_free_address(f->addr, sizeof f->addr);
  f->server = th_start_server(f->addr);
  *state = f;
  return 0;
}

int teardown(void **state) {
  fixture *f = *state;
  int rc = 0;
  for (int i = 0; i < MAX_CHILDREN; i++) {
    if (g_children[i] > 0) th_stop(g_children[i], SIGKILL, TMO); /* left by a failed test */
    g_children[i] = 0;
  }
  if (f->server > 0) {
    kill(f->server, SIGCONT); /* in case a failed test left it stopped */
    int st = th_stop(f->server, SIGTERM, TMO);
    if (st != 0) {
      print_error("server at %s: exit status %d after SIGTERM (want 0)\n", f->addr, st);
      rc = -1;
    }
  }
  free(f);
  return rc;
}

/* ---- children -------------------------------------------------------------------------------- */

/* A line on the report pipe (the child's only voice). */
void child_say(int wfd, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
  line[n++] = '\n';
  ssize_t w = write(wfd, line, (size_t)n);
  (void)w;
}

child spawn_child(child_fn fn, void *arg) {
  int p[2];
  assert_int_equal(pipe2(p, O_CLOEXEC), 0);
  fflush(stdout);
  fflush(stderr);
  pid_t parent = getpid();
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(p[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(4);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    fn(p[1], arg);
    _exit(0);
  }
  close(p[1]);
  for (int i = 0; i < MAX_CHILDREN; i++) {
    if (g_children[i] == 0) {
      g_children[i] = pid;
      break;
    }
  }
  return (child){pid, p[0]};
}

/* Waits for the child's report line; fails the test unless it is "OK ...". The text after "OK "
 * goes to out. */
void child_ready(child *c, char *out, size_t cap) {
  char line[1024];
  size_t n = 0;
  int64_t deadline = th_now_ms() + READY_MS;
  while (n < sizeof line - 1) {
    int left = (int)(deadline - th_now_ms());
    struct pollfd pf = {.fd = c->rfd, .events = POLLIN};
    int r = left > 0 ? poll(&pf, 1, left) : 0;
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) fail_msg("child %d did not report within %d ms", (int)c->pid, READY_MS);
    ssize_t k = read(c->rfd, line + n, 1);
    if (k <= 0) fail_msg("child %d exited without reporting", (int)c->pid);
    if (line[n] == '\n') break;
    n++;
  }
  line[n] = 0;
  if (strncmp(line, "OK", 2) != 0) fail_msg("child %d: %s", (int)c->pid, line);
  if (out && cap) {
    const char *rest = line[2] == ' ' ? line + 3 : "";
    size_t k = strlen(rest) < cap ? strlen(rest) : cap - 1;
    memcpy(out, rest, k);
    out[k] = 0;
  }
}

/* Stops a child by pid (SIGTERM: it is killed in the middle of whatever it does, as a crashed
 * process would be) and checks that it was still running until then. */
void child_stop(child *c) {
  int st = th_stop(c->pid, SIGTERM, TMO);
  for (int i = 0; i < MAX_CHILDREN; i++)
    if (g_children[i] == c->pid) g_children[i] = 0;
  close(c->rfd);
  if (st != 128 + SIGTERM)
    fail_msg("child %d ended with status %d before it was stopped", (int)c->pid, st);
}

void pub_child(int wfd, void *arg) {
  pub_args *a = arg;
  ez_context *ctx = NULL;
  int rc = ez_context_open(a->addr, &ctx);
  CHILD_CHECK(wfd, rc == 0, "ez_context_open: %s", ez_strerror(rc));
  ez_pub *pubs[4] = {0};
  size_t n = 0;
  char ids[4 * 40] = "";
  ez_pub_opts o;
  ez_pub_opts_init(&o);
  o.force_tcp = a->force_tcp;
  for (; n < 4 && a->topics[n]; n++) {
    rc = ez_pub_create(ctx, a->topics[n], &o, &pubs[n]);
    CHILD_CHECK(wfd, rc == 0, "ez_pub_create %s: %s", a->topics[n], ez_strerror(rc));
    strcat(ids, n ? " " : "");
    strcat(ids, ez_pub_id(pubs[n]));
  }
  child_say(wfd, "OK %s", ids);
  while (a->hz <= 0)
    th_sleep_ms(1000); /* an idle publisher: registered, never publishes */
  static uint8_t buf[PAYLOAD];
  memset(buf, 0xa5, sizeof buf);
  struct timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  long period_ns = (long)(1e9 / a->hz);
  for (uint64_t k = 0;; k++) {
    next.tv_nsec += period_ns;
    while (next.tv_nsec >= 1000000000L) {
      next.tv_nsec -= 1000000000L;
      next.tv_sec++;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR) {
    }
    memcpy(buf, &k, sizeof k);
    for (size_t i = 0; i < n; i++) {
      rc = ez_publish(pubs[i], buf, sizeof buf, 2000);
      CHILD_CHECK(wfd, rc == 0 || rc == EZ_ETIMEDOUT, "ez_publish: %s", ez_strerror(rc));
    }
  }
}

void sub_child(int wfd, void *arg) {
  sub_args *a = arg;
  ez_context *ctx = NULL;
  int rc = ez_context_open(a->addr, &ctx);
  CHILD_CHECK(wfd, rc == 0, "ez_context_open: %s", ez_strerror(rc));
  ez_sub *subs[4] = {0};
  struct pollfd pf[4];
  size_t n = 0;
  char ids[4 * 40] = "";
  for (; n < 4 && a->topics[n]; n++) {
    ez_sub_opts o = {.handle = a->handles[n]};
    rc = ez_sub_create(ctx, a->topics[n], a->handles[n] ? &o : NULL, &subs[n]);
    CHILD_CHECK(wfd, rc == 0, "ez_sub_create %s: %s", a->topics[n], ez_strerror(rc));
    pf[n] = (struct pollfd){.fd = ez_sub_fd(subs[n]), .events = POLLIN};
    strcat(ids, n ? " " : "");
    strcat(ids, ez_sub_id(subs[n]));
  }
  child_say(wfd, "OK %s", ids);
  while (a->hold_ms < 0)
    th_sleep_ms(1000); /* never receives: messages stay queued */
  for (;;) {
    if (poll(pf, (nfds_t)n, 200) < 0 && errno != EINTR) _exit(5);
    for (size_t i = 0; i < n; i++) {
      ez_msg m;
      while ((rc = ez_recv(subs[i], &m, 0)) == 0) {
        if (a->hold_ms) th_sleep_ms(a->hold_ms);
        ez_msg_release(&m);
      }
      CHILD_CHECK(wfd, rc == EZ_EAGAIN || rc == EZ_ETIMEDOUT, "ez_recv: %s", ez_strerror(rc));
    }
  }
}

/* ---- profile helpers ------------------------------------------------------------------------- */

json_t *load_json(const char *text) {
  json_error_t err;
  json_t *doc = json_loads(text, 0, &err);
  if (!doc) fail_msg("profile is not JSON (%s): %.200s", err.text, text);
  return doc;
}

char *profile(const char *addr, double window_s) {
  char *json = NULL;
  int rc = ez_profile(addr, window_s, &json, 10000);
  if (rc) fail_msg("ez_profile: %s", ez_strerror(rc));
  assert_non_null(json);
  return json;
}

const ez_profile_pub *find_pub(const ez_profile_data *d, const char *id) {
  for (size_t i = 0; i < d->n_publishers; i++)
    if (d->publishers[i].id && !strcmp(d->publishers[i].id, id)) return &d->publishers[i];
  return NULL;
}

const ez_profile_channel *find_chan_of(const ez_profile_data *d, const char *pub_id, int64_t pid) {
  for (size_t i = 0; i < d->n_channels; i++) {
    const ez_profile_channel *c = &d->channels[i];
    if (c->pub_id && !strcmp(c->pub_id, pub_id) && (pid == 0 || c->pid == pid)) return c;
  }
  return NULL;
}

/* max >= p99 >= p50 > 0, each within the histogram's error: estimates are capped at the exact max
 * and come from one histogram, so the order is exact; the slack only absorbs rounding. */
void check_latency_order(const ez_latency *l) {
  assert_true(l->p50_ms > 0);
  assert_true(l->p99_ms >= l->p50_ms * (1 - 1e-9));
  assert_true(l->max_ms >= l->p99_ms * (1 - 1e-9));
  /* The average lies between the smallest and largest value; the median estimate is within the
   * histogram error of a real value, so it cannot exceed max by more than that either. */
  assert_true(l->avg_ms <= l->max_ms * (1 + 1e-9));
  assert_true(l->p50_ms <= l->max_ms * (1 + HIST_ERR));
}

/* ---- raw protocol (fake clients) ------------------------------------------------------------- */

/* A fake channel of a real publisher: CHANNEL pub_id -> COMPLETE, channel_id, address. */
int fake_channel(const char *addr, const char *pub_id, char id[64]) {
  int fd = rp_connect(addr);
  rp_wr_u8(fd, CHANNEL);
  rp_wr_str(fd, pub_id);
  assert_int_equal(rp_rd_u8(fd), COMPLETE);
  rp_rd_str(fd, id, 64);
  char paddr[300];
  rp_rd_str(fd, paddr, sizeof paddr);
  return fd;
}
