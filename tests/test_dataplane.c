/* The data plane end to end: real processes, real sockets, real shared memory.
 *
 * Every test starts its own `ezmsg serve` on a free 127.0.0.1 port (fixture) and stops it by pid.
 * Peer processes are this very executable re-run as a "child" in a role (pub, sub, relay; see
 * child_main at the bottom): they talk to the test over a stdin pipe (commands) and a stdout pipe
 * (lines: "ready", "held", "sent", "unconnected", "seg NAME"), and are stopped by pid, never by
 * name. Every process we start dies with us (PR_SET_PDEATHSIG) if the test itself crashes.
 *
 * Messages follow one pattern everywhere (fill / check): message k of a stream has the size
 * sizes[k % n] from a comma list, bytes 0..7 hold k (little-endian) when it has 8 or more, and
 * the rest are a function of (i, k). A receiver checks, per publisher, that msg_ids come 0, 1,
 * 2, ... (in order, exactly once) and that every byte is right.
 *
 * Shared memory: every segment a test's processes map (read from /proc/PID/maps: children report
 * theirs as "seg NAME" lines) must be gone from /dev/shm once they have all exited. Other tests
 * run in parallel, so only those names are checked. */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TMO 30000    /* for anything that should happen (ms): generous, never a speed test */
#define QUIET_MS 300 /* how long we listen for something that must not come */
#define MAX_CHILD 12
#define MAX_SEGS 256

static const char *g_exe = "/proc/self/exe";

/* ---- the message pattern ------------------------------------------------------------------- */

typedef struct sizes {
  size_t n;
  size_t v[16];
} sizes;

static sizes parse_sizes(const char *s) {
  sizes z = {0};
  while (*s && z.n < 16) {
    char *end;
    z.v[z.n++] = strtoull(s, &end, 10);
    s = *end == ',' ? end + 1 : end;
    if (end == s && *s) break;
  }
  if (!z.n) z.v[z.n++] = 0;
  return z;
}

static size_t size_of(const sizes *z, uint64_t k) { return z->v[k % z->n]; }

static uint8_t pat(size_t i, uint64_t k) { return (uint8_t)(i * 131u + k * 7u + 3u); }

static void fill(uint8_t *p, size_t len, uint64_t k) {
  for (size_t i = 0; i < len; i++)
    p[i] = i < 8 && len >= 8 ? (uint8_t)(k >> (8 * i)) : pat(i, k);
}

/* Per-publisher order and content of received messages. */
typedef struct tracker {
  size_t n;
  char ids[16][37];
  uint64_t next[16];
} tracker;

static int tracker_index(tracker *t, const char *pub_id) {
  for (size_t i = 0; i < t->n; i++)
    if (!strcmp(t->ids[i], pub_id)) return (int)i;
  if (t->n == 16) return -1;
  snprintf(t->ids[t->n], 37, "%s", pub_id);
  t->next[t->n] = 0;
  return (int)t->n++;
}

/* 0 if m holds the right bytes for message k; else a reason in why. */
static int check_bytes(const ez_msg *m, uint64_t k, const sizes *z, char *why, size_t cap) {
  size_t want = size_of(z, k);
  if (m->len != want)
    return snprintf(why, cap, "message %llu: %zu bytes, want %zu", (unsigned long long)k, m->len,
                    want),
           -1;
  const uint8_t *p = m->data;
  for (size_t j = 0; j < m->len; j++) {
    uint8_t w = j < 8 && m->len >= 8 ? (uint8_t)(k >> (8 * j)) : pat(j, k);
    if (p[j] != w)
      return snprintf(why, cap, "message %llu: byte %zu is %u, want %u", (unsigned long long)k, j,
                      p[j], w),
             -1;
  }
  return 0;
}

/* 0 if m is the next message of its publisher, intact; else a reason in why. */
static int check_msg(tracker *t, const ez_msg *m, const sizes *z, char *why, size_t cap) {
  int i = tracker_index(t, m->pub_id);
  if (i < 0) return snprintf(why, cap, "more than 16 publishers"), -1;
  if (m->flags)
    return snprintf(why, cap, "message %llu: flags %u", (unsigned long long)m->msg_id, m->flags),
           -1;
  if (m->msg_id != t->next[i])
    return snprintf(why, cap, "publisher %.8s: got message %llu, want %llu", m->pub_id,
                    (unsigned long long)m->msg_id, (unsigned long long)t->next[i]),
           -1;
  if (check_bytes(m, m->msg_id, z, why, cap)) return -1;
  t->next[i]++;
  return 0;
}

/* ---- shared-memory bookkeeping -------------------------------------------------------------- */

static char g_segs[MAX_SEGS][64];
static size_t g_nsegs;

static void note_segment(const char *name) {
  for (size_t i = 0; i < g_nsegs; i++)
    if (!strcmp(g_segs[i], name)) return;
  if (g_nsegs < MAX_SEGS) snprintf(g_segs[g_nsegs++], 64, "%s", name);
}

/* Calls fn for every /dev/shm/psm_* mapping of process pid (0: this one). */
static void scan_maps(pid_t pid, void (*fn)(const char *name, uintptr_t lo, uintptr_t hi, void *),
                      void *arg) {
  char path[64], line[1024];
  if (pid)
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
  else
    snprintf(path, sizeof path, "/proc/self/maps");
  FILE *f = fopen(path, "r");
  if (!f) return;
  while (fgets(line, sizeof line, f)) {
    char *p = strstr(line, "/dev/shm/psm_");
    if (!p) continue;
    p += strlen("/dev/shm/");
    p[strcspn(p, " \n")] = 0;
    unsigned long lo = 0, hi = 0;
    sscanf(line, "%lx-%lx", &lo, &hi);
    fn(p, (uintptr_t)lo, (uintptr_t)hi, arg);
  }
  fclose(f);
}

static void note_cb(const char *name, uintptr_t lo, uintptr_t hi, void *arg) {
  (void)lo, (void)hi, (void)arg;
  note_segment(name);
}

/* Records the segments this process maps now. */
static void note_own_segments(void) { scan_maps(0, note_cb, NULL); }

typedef struct in_shm {
  uintptr_t p;
  bool found;
} in_shm;

static void in_shm_cb(const char *name, uintptr_t lo, uintptr_t hi, void *arg) {
  in_shm *q = arg;
  (void)name;
  if (q->p >= lo && q->p < hi) q->found = true;
}

/* True if p lies in a mapping of a psm_ segment of this process. */
static bool addr_in_shm(const void *p) {
  in_shm q = {(uintptr_t)p, false};
  scan_maps(0, in_shm_cb, &q);
  return q.found;
}

static bool shm_exists(const char *name) {
  char path[128];
  snprintf(path, sizeof path, "/dev/shm/%s", name);
  return access(path, F_OK) == 0;
}

/* Every segment noted during the test is gone from /dev/shm (waits up to TMO for the graph server
 * to notice the last lease closing). Call once every process of the test has let go. */
static void assert_segments_gone(void) {
  int64_t end = th_now_ms() + TMO;
  for (;;) {
    size_t left = 0;
    const char *one = NULL;
    for (size_t i = 0; i < g_nsegs; i++)
      if (shm_exists(g_segs[i])) left++, one = g_segs[i];
    if (!left) return;
    if (th_now_ms() > end)
      fail_msg("%zu of %zu segments left in /dev/shm, e.g. %s", left, g_nsegs, one);
    th_sleep_ms(20);
  }
}

/* ---- child processes ----------------------------------------------------------------------- */

typedef struct child {
  pid_t pid;
  int in_fd, out_fd; /* its stdin (we write), its stdout (we read) */
  char buf[8192];
  size_t len;
  int status; /* exit code once reaped (child_wait) */
} child;

static child g_children[MAX_CHILD];
static size_t g_nchildren;

/* Starts `this-executable --child ARGS...` (ARGS: space-separated words). */
static child *child_start(const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  char *argv[40];
  int argc = 0;
  argv[argc++] = (char *)g_exe;
  argv[argc++] = "--child";
  for (char *save = NULL, *w = strtok_r(line, " ", &save); w && argc < 39;
       w = strtok_r(NULL, " ", &save))
    argv[argc++] = w;
  argv[argc] = NULL;
  int in[2], out[2];
  assert_int_equal(pipe2(in, O_CLOEXEC), 0);
  assert_int_equal(pipe2(out, O_CLOEXEC), 0);
  assert_true(g_nchildren < MAX_CHILD);
  pid_t parent = getpid();
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a crashed test */
    if (getppid() != parent) _exit(126);
    dup2(in[0], 0);
    dup2(out[1], 1);
    execv(g_exe, argv);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  child *c = &g_children[g_nchildren++];
  *c = (child){.pid = pid, .in_fd = in[1], .out_fd = out[0], .status = -1};
  return c;
}

/* Reads child lines until one equals `want` (noting "seg NAME" lines on the way). Fails the test
 * if the child ends first or TMO passes. want NULL: read to EOF. */
static void child_expect(child *c, const char *want) {
  int64_t end = th_now_ms() + TMO;
  for (;;) {
    char *nl;
    while ((nl = memchr(c->buf, '\n', c->len))) {
      *nl = 0;
      bool hit = want && !strcmp(c->buf, want);
      if (!strncmp(c->buf, "seg ", 4)) note_segment(c->buf + 4);
      size_t used = (size_t)(nl - c->buf) + 1;
      memmove(c->buf, c->buf + used, c->len - used);
      c->len -= used;
      if (hit) return;
    }
    if (c->out_fd < 0) {
      if (!want) return;
      fail_msg("child %d: no '%s' before its output ended", (int)c->pid, want);
    }
    int left = (int)(end - th_now_ms());
    if (th_now_ms() >= end)
      fail_msg("child %d: no '%s' within %d ms", (int)c->pid, want ? want : "EOF", TMO);
    struct pollfd pfd = {c->out_fd, POLLIN, 0};
    if (poll(&pfd, 1, left) <= 0) continue;
    ssize_t n = read(c->out_fd, c->buf + c->len, sizeof c->buf - 1 - c->len);
    if (n > 0) {
      c->len += (size_t)n;
    } else if (n == 0 || errno != EINTR) {
      close(c->out_fd);
      c->out_fd = -1;
      if (!want) return;
    }
  }
}

static void child_say(child *c, const char *line) {
  size_t n = strlen(line);
  assert_int_equal(write(c->in_fd, line, n), (ssize_t)n);
}

/* Waits for the child to exit (reading its output to the end) and returns its exit code. */
static int child_wait(child *c) {
  if (c->pid <= 0) return c->status;
  child_expect(c, NULL);
  c->status = th_wait_exit(c->pid, TMO);
  c->pid = 0;
  if (c->in_fd >= 0) close(c->in_fd);
  c->in_fd = -1;
  return c->status;
}

/* Waits for a clean exit (0), failing the test otherwise. */
static void child_done(child *c) {
  pid_t pid = c->pid;
  int rc = child_wait(c);
  if (rc != 0) fail_msg("child %d exited %d (see its stderr above)", (int)pid, rc);
}

static void child_kill(child *c) {
  if (c->pid <= 0) return;
  kill(c->pid, SIGKILL);
  c->status = th_wait_exit(c->pid, TMO);
  c->pid = 0;
  if (c->in_fd >= 0) close(c->in_fd);
  if (c->out_fd >= 0) close(c->out_fd);
  c->in_fd = c->out_fd = -1;
}

/* ---- fixture: one `ezmsg serve` per test ---------------------------------------------------- */

static char g_addr[64];
static pid_t g_server;

/* Starts the CLI with argv (NULL-terminated) as a child that gets `sig` if this process dies (so
 * a crashed test leaves no server behind to hold CTest's output pipe). */
static pid_t spawn_cli(int sig, const char *const *args) {
  char *argv[16];
  int n = 0;
  argv[n++] = (char *)th_cli();
  for (; *args && n < 15; args++)
    argv[n++] = (char *)*args;
  argv[n] = NULL;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, sig);
    if (getppid() != parent) _exit(126);
    execv(argv[0], argv);
    _exit(127);
  }
  return pid;
}

static int setup(void **state) {
  (void)state;
  g_nsegs = 0;
  g_nchildren = 0;
  th_free_address(g_addr, sizeof g_addr);
  /* as th_start_server, plus the death signal: SIGTERM lets it unlink its segments */
  g_server = spawn_cli(SIGTERM, (const char *const[]){"serve", "--address", g_addr, NULL});
  if (g_server <= 0) return -1;
  for (int i = 0; i < 3000; i++) {
    if (ez_graph_ping(g_addr, NULL, 0, 200) == 0) return 0;
    if (waitpid(g_server, NULL, WNOHANG) == g_server) break;
    th_sleep_ms(10);
  }
  th_stop(g_server, SIGKILL, 1000);
  g_server = 0;
  return -1;
}

static int teardown(void **state) {
  (void)state;
  for (size_t i = 0; i < g_nchildren; i++)
    child_kill(&g_children[i]); /* leftovers of a failure */
  g_nchildren = 0;
  int rc = 0;
  if (g_server > 0) rc = th_stop(g_server, SIGTERM, 10000);
  g_server = 0;
  return rc == 0 ? 0 : -1;
}

/* ---- in-process helpers --------------------------------------------------------------------- */

static ez_context *open_ctx(void) {
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(g_addr, &ctx), 0);
  assert_false(ez_context_owns_server(ctx));
  return ctx;
}

static ez_pub *make_pub(ez_context *ctx, const char *topic, uint32_t nbuf, bool tcp) {
  ez_pub_opts o;
  ez_pub_opts_init(&o);
  if (nbuf) o.num_buffers = nbuf;
  o.force_tcp = tcp;
  ez_pub *p = NULL;
  assert_int_equal(ez_pub_create(ctx, topic, &o, &p), 0);
  return p;
}

static ez_sub *make_sub(ez_context *ctx, const char *topic) {
  ez_sub *s = NULL;
  assert_int_equal(ez_sub_create(ctx, topic, NULL, &s), 0);
  return s;
}

static void publish_k(ez_pub *p, const sizes *z, uint64_t k) {
  size_t len = size_of(z, k);
  uint8_t *buf = malloc(len ? len : 1);
  assert_non_null(buf);
  fill(buf, len, k);
  int rc = ez_publish(p, buf, len, TMO);
  free(buf);
  assert_int_equal(rc, 0);
}

/* Receives n messages on s and checks them against z (order per publisher, content). */
static void recv_check(ez_sub *s, tracker *t, const sizes *z, int n) {
  char why[256];
  for (int i = 0; i < n; i++) {
    ez_msg m;
    int rc = ez_recv(s, &m, TMO);
    if (rc) fail_msg("message %d of %d: ez_recv: %s", i, n, ez_strerror(rc));
    rc = check_msg(t, &m, z, why, sizeof why);
    ez_msg_release(&m);
    if (rc) fail_msg("%s", why);
  }
}

/* Nothing more arrives on s for QUIET_MS. */
static void assert_quiet(ez_sub *s) {
  ez_msg m;
  int rc = ez_recv(s, &m, QUIET_MS);
  if (rc == 0) {
    char head[32] = {0};
    memcpy(head, m.data, m.len < 31 ? m.len : 31);
    ez_msg_release(&m);
    fail_msg("an unexpected message (%zu bytes: '%s')", m.len, head);
  }
  assert_int_equal(rc, EZ_ETIMEDOUT);
}

/* The transport mode of this context's channel for publisher pub_id ("local", "shm", "tcp"). */
static void assert_mode(ez_context *ctx, const char *pub_id, const char *mode) {
  char *json = NULL;
  assert_int_equal(ez_context_profile(ctx, 2.0, &json), 0);
  ez_profile_data pd;
  assert_int_equal(ez_profile_parse(json, &pd), 0);
  const char *got = NULL;
  for (size_t i = 0; i < pd.n_channels; i++)
    if (pd.channels[i].pub_id && !strcmp(pd.channels[i].pub_id, pub_id)) got = pd.channels[i].mode;
  char gotc[32];
  snprintf(gotc, sizeof gotc, "%s", got ? got : "(no channel)");
  ez_profile_data_free(&pd);
  free(json);
  assert_string_equal(gotc, mode);
}

static void send_line(ez_pub *p, const char *text) {
  assert_int_equal(ez_publish(p, text, strlen(text), TMO), 0);
}

static void expect_line(ez_sub *s, const char *text, const char *pub_id) {
  ez_msg m;
  int rc = ez_recv(s, &m, TMO);
  if (rc) fail_msg("waiting for '%s': %s", text, ez_strerror(rc));
  char got[256];
  snprintf(got, sizeof got, "%.*s", (int)(m.len < 255 ? m.len : 255), (const char *)m.data);
  bool same_pub = !pub_id || !strcmp(m.pub_id, pub_id);
  ez_msg_release(&m);
  assert_string_equal(got, text);
  assert_true(same_pub);
}

/* ---- tests: transports ---------------------------------------------------------------------- */

#define SIZES_EDGE "0,1,65536,4194304"

/* local: publisher and subscriber in this process; messages of 0 B, 1 B, 64 KiB and 4 MiB (the
 * segment grows twice), twice over. */
static void test_local_sizes(void **state) {
  (void)state;
  sizes z = parse_sizes(SIZES_EDGE);
  ez_context *ctx = open_ctx();
  ez_sub *s = make_sub(ctx, "/dp/local");
  ez_pub *p = make_pub(ctx, "/dp/local", 4, false);
  tracker t = {0};
  for (uint64_t k = 0; k < 8; k++) {
    publish_k(p, &z, k);
    recv_check(s, &t, &z, 1);
  }
  assert_mode(ctx, ez_pub_id(p), "local");
  /* More messages than slots while the receiver lags by three: slots are reused correctly. */
  for (uint64_t k = 8; k < 11; k++)
    publish_k(p, &z, k);
  for (uint64_t k = 11; k < 40; k++) {
    publish_k(p, &z, k);
    recv_check(s, &t, &z, 1);
  }
  recv_check(s, &t, &z, 3);
  assert_int_equal(ez_pub_flush(p, TMO), 0);
  assert_quiet(s);
  note_own_segments();
  ez_context_close(ctx);
  assert_segments_gone();
}

/* shm / tcp: the publisher in another process (started after the subscriber), this process
 * receives. */
static void remote_sizes(bool tcp) {
  const char *topic = tcp ? "/dp/tcp" : "/dp/shm";
  sizes z = parse_sizes(SIZES_EDGE);
  ez_context *ctx = open_ctx();
  ez_sub *s = make_sub(ctx, topic);
  child *pub =
      child_start("pub %s %s count=16 sizes=%s nbuf=4 tcp=%d", g_addr, topic, SIZES_EDGE, tcp);
  tracker t = {0};
  recv_check(s, &t, &z, 15);
  ez_msg last; /* held: the publisher waits for it (ez_pub_flush), so its channel stays */
  assert_int_equal(ez_recv(s, &last, TMO), 0);
  assert_int_equal(t.n, 1);
  assert_mode(ctx, t.ids[0], tcp ? "tcp" : "shm");
  char why[256];
  int rc = check_msg(&t, &last, &z, why, sizeof why);
  ez_msg_release(&last);
  if (rc) fail_msg("%s", why);
  note_own_segments();
  child_done(pub);
  assert_quiet(s);
  ez_context_close(ctx);
  assert_segments_gone();
}

static void test_shm_sizes(void **state) {
  (void)state;
  remote_sizes(false);
}

static void test_tcp_sizes(void **state) {
  (void)state;
  remote_sizes(true);
}

/* The other direction: this process publishes, a subscriber in another process checks. */
static void test_remote_subscriber(void **state) {
  (void)state;
  sizes z = parse_sizes(SIZES_EDGE);
  for (int tcp = 0; tcp <= 1; tcp++) {
    const char *topic = tcp ? "/dp/rsub/tcp" : "/dp/rsub/shm";
    child *sub = child_start("sub %s %s count=12 sizes=%s mode=%s", g_addr, topic, SIZES_EDGE,
                             tcp ? "tcp" : "shm");
    child_expect(sub, "ready");
    ez_context *ctx = open_ctx();
    ez_pub *p = make_pub(ctx, topic, 4, tcp);
    assert_int_equal(ez_pub_num_channels(p), 1); /* connected before ez_pub_create returned */
    for (uint64_t k = 0; k < 12; k++)
      publish_k(p, &z, k);
    assert_int_equal(ez_pub_flush(p, TMO), 0);
    note_own_segments();
    child_done(sub);
    ez_context_close(ctx);
  }
  assert_segments_gone();
}

/* After a burst that made the I/O thread poll (EZMSG_SPIN_US, on by default), an idle second
 * costs this process next to no CPU time: polling stops with the traffic, and nothing else of the
 * library's busy-loops while a link is idle. */
static void test_idle_costs_nothing(void **state) {
  (void)state;
  sizes z = parse_sizes("64");
  child *sub = child_start("sub %s /dp/idle count=3000 sizes=64 mode=shm", g_addr);
  child_expect(sub, "ready");
  ez_context *ctx = open_ctx();
  ez_pub *p = make_pub(ctx, "/dp/idle", 32, false);
  for (uint64_t k = 0; k < 3000; k++)
    publish_k(p, &z, k);
  assert_int_equal(ez_pub_flush(p, TMO), 0);
  struct timespec c0, c1;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
  th_sleep_ms(1000); /* nothing published: the subscriber is connected and idle too */
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
  double cpu_ms = (double)(c1.tv_sec - c0.tv_sec) * 1e3 + (double)(c1.tv_nsec - c0.tv_nsec) / 1e6;
  print_message("idle second after 3000 messages: %.2f ms of CPU\n", cpu_ms);
  assert_true(cpu_ms < 50.0); /* a thread polling all along would take ~1000 ms */
  note_own_segments();
  child_done(sub);
  ez_context_close(ctx);
  assert_segments_gone();
}

/* ---- zero copy ------------------------------------------------------------------------------ */

/* Loan a slot, fill it in place, commit (possibly fewer bytes); cancel gives the slot back.
 * Received views point straight into the publisher's slot (local) or the mapped segment (shm). */
static void test_zero_copy_local(void **state) {
  (void)state;
  ez_context *ctx = open_ctx();
  ez_sub *s = make_sub(ctx, "/dp/zc");
  ez_pub *p = make_pub(ctx, "/dp/zc", 4, false);
  sizes z = parse_sizes("1000");
  tracker t = {0};
  for (uint64_t k = 0; k < 10; k++) {
    void *buf = NULL;
    assert_int_equal(ez_pub_loan(p, 4000, &buf, TMO), 0);
    assert_non_null(buf);
    /* another publish while loaned is refused */
    assert_int_equal(ez_publish(p, "x", 1, 0), EZ_EINVAL);
    if (k % 3 == 2) { /* give it back unused: the next loan gets the same message id */
      ez_pub_cancel(p);
      assert_int_equal(ez_pub_loan(p, 4000, &buf, TMO), 0);
    }
    fill(buf, 1000, k);
    assert_int_equal(ez_pub_commit(p, 1000), 0);
    assert_int_equal(ez_pub_commit(p, 1000), EZ_EINVAL); /* nothing loaned any more */
    ez_msg m;
    assert_int_equal(ez_recv(s, &m, TMO), 0);
    assert_ptr_equal(m.data, buf); /* the very bytes we wrote: no copy on either side */
    char why[256];
    int rc = check_msg(&t, &m, &z, why, sizeof why);
    ez_msg_release(&m);
    if (rc) fail_msg("%s", why);
  }
  /* commit more than loaned: refused, the loan stays */
  void *buf = NULL;
  assert_int_equal(ez_pub_loan(p, 16, &buf, TMO), 0);
  assert_int_equal(ez_pub_commit(p, 17), EZ_EINVAL);
  ez_pub_cancel(p);
  /* copying receive: a too-small buffer gets EZ_EMSGSIZE, the message is consumed */
  send_line(p, "0123456789");
  char small[4];
  size_t len = 0;
  assert_int_equal(ez_recv_copy(s, small, sizeof small, &len, TMO), EZ_EMSGSIZE);
  assert_int_equal(len, 10);
  send_line(p, "abc");
  char big[16] = {0};
  assert_int_equal(ez_recv_copy(s, big, sizeof big, &len, TMO), 0);
  assert_int_equal(len, 3);
  assert_memory_equal(big, "abc", 3);
  assert_quiet(s);
  note_own_segments();
  ez_context_close(ctx);
  assert_segments_gone();
}

/* A loaning publisher in another process; views over shm point into the mapped segment. */
static void test_zero_copy_remote(void **state) {
  (void)state;
  sizes z = parse_sizes("0,100,70000");
  for (int tcp = 0; tcp <= 1; tcp++) {
    const char *topic = tcp ? "/dp/zcr/tcp" : "/dp/zcr/shm";
    ez_context *ctx = open_ctx();
    ez_sub *s = make_sub(ctx, topic);
    child *pub = child_start("pub %s %s count=30 sizes=0,100,70000 nbuf=4 loan=1 tcp=%d", g_addr,
                             topic, tcp);
    tracker t = {0};
    char why[256];
    for (int i = 0; i < 30; i++) {
      ez_msg m;
      assert_int_equal(ez_recv(s, &m, TMO), 0);
      bool shm = m.len > 0 && addr_in_shm(m.data);
      int rc = check_msg(&t, &m, &z, why, sizeof why);
      ez_msg_release(&m);
      if (rc) fail_msg("%s", why);
      if (m.len > 0 && shm == (bool)tcp)
        fail_msg("message %d (%s): the view %s in a shared-memory segment", i, topic,
                 shm ? "lies" : "does not lie");
    }
    note_own_segments();
    child_done(pub);
    ez_context_close(ctx);
  }
  assert_segments_gone();
}

/* ---- fan-out, fan-in, relays ---------------------------------------------------------------- */

/* One publisher, four subscribers in two processes (two each), mixed sizes. */
static void test_fan_out(void **state) {
  (void)state;
  const char *sz = "1,64,65536,1000";
  child *a = child_start("sub %s /dp/fanout nsubs=2 count=200 sizes=%s", g_addr, sz);
  child *b = child_start("sub %s /dp/fanout nsubs=2 count=200 sizes=%s", g_addr, sz);
  child_expect(a, "ready");
  child_expect(b, "ready");
  child *p = child_start("pub %s /dp/fanout count=200 sizes=%s nbuf=8 wait=2", g_addr, sz);
  child_done(p);
  child_done(a);
  child_done(b);
  assert_segments_gone();
}

/* Four publishers (two over shm, two over TCP) into one subscriber: each in its own order. */
static void test_fan_in(void **state) {
  (void)state;
  const char *sz = "10,20000,3";
  sizes z = parse_sizes(sz);
  ez_context *ctx = open_ctx();
  ez_sub *s = make_sub(ctx, "/dp/fanin");
  child *p[4];
  for (int i = 0; i < 4; i++)
    p[i] = child_start("pub %s /dp/fanin count=150 sizes=%s nbuf=%d tcp=%d", g_addr, sz, 2 + 2 * i,
                       i & 1);
  tracker t = {0};
  recv_check(s, &t, &z, 600);
  assert_int_equal(t.n, 4);
  for (int i = 0; i < 4; i++)
    assert_int_equal(t.next[i], 150);
  note_own_segments();
  for (int i = 0; i < 4; i++)
    child_done(p[i]);
  assert_quiet(s);
  ez_context_close(ctx);
  assert_segments_gone();
}

/* pub -> relay (shm out) -> relay (tcp out) -> this process: content and order survive. */
static void test_relay_chain(void **state) {
  (void)state;
  const char *sz = "5,65536,0,300000";
  sizes z = parse_sizes(sz);
  ez_context *ctx = open_ctx();
  ez_sub *s = make_sub(ctx, "/dp/relay/c");
  child *r2 = child_start("relay %s /dp/relay/b /dp/relay/c count=60 tcp=1", g_addr);
  child_expect(r2, "ready");
  child *r1 = child_start("relay %s /dp/relay/a /dp/relay/b count=60 tcp=0", g_addr);
  child_expect(r1, "ready");
  child *p = child_start("pub %s /dp/relay/a count=60 sizes=%s nbuf=4", g_addr, sz);
  tracker t = {0};
  recv_check(s, &t, &z, 60);
  note_own_segments();
  child_done(p);
  child_done(r1);
  child_done(r2);
  assert_quiet(s);
  ez_context_close(ctx);
  assert_segments_gone();
}

/* ---- routing -------------------------------------------------------------------------------- */

/* A publisher on /a reaches subscribers of /b through the edge /a -> /b, whether they subscribed
 * before or after the edge was made; DISCONNECT stops it. */
static void test_routing_edges(void **state) {
  (void)state;
  ez_context *ctx = open_ctx();
  ez_pub *pa = make_pub(ctx, "/rt/a", 0, false);
  ez_pub *pb = make_pub(ctx, "/rt/b", 0, false);
  ez_sub *before = make_sub(ctx, "/rt/b");
  ez_sub *on_a = make_sub(ctx, "/rt/a");
  assert_int_equal(ez_graph_connect(g_addr, "/rt/a", "/rt/b", TMO), 0);
  ez_sub *after = make_sub(ctx, "/rt/b");
  send_line(pa, "via edge");
  expect_line(before, "via edge", ez_pub_id(pa));
  expect_line(after, "via edge", ez_pub_id(pa));
  expect_line(on_a, "via edge", ez_pub_id(pa));
  send_line(pb, "direct");
  expect_line(before, "direct", ez_pub_id(pb));
  expect_line(after, "direct", ez_pub_id(pb));
  assert_quiet(on_a); /* /b is downstream of /a, not upstream */

  assert_int_equal(ez_graph_disconnect(g_addr, "/rt/a", "/rt/b", TMO), 0);
  send_line(pa, "after disconnect");
  send_line(pb, "marker");
  expect_line(before, "marker", ez_pub_id(pb));
  expect_line(after, "marker", ez_pub_id(pb));
  expect_line(on_a, "after disconnect", ez_pub_id(pa));
  assert_quiet(before);
  assert_quiet(after);
  note_own_segments();
  ez_context_close(ctx);
  assert_segments_gone();
}

/* The same across processes: a publisher in another process on /x, the edge /x -> /y, this
 * process subscribes to /y after the edge exists; DISCONNECT drops the channel (the publisher sees
 * its channel count fall to 0). */
static void test_routing_remote(void **state) {
  (void)state;
  sizes z = parse_sizes("32");
  assert_int_equal(ez_graph_connect(g_addr, "/rt/x", "/rt/y", TMO), 0);
  child *p = child_start("pub %s /rt/x count=20 sizes=32 wait=1 unwait=1", g_addr);
  child_expect(p, "ready");
  ez_context *ctx = open_ctx();
  ez_sub *s = make_sub(ctx, "/rt/y");
  tracker t = {0};
  recv_check(s, &t, &z, 20);
  child_expect(p, "sent");
  assert_int_equal(ez_graph_disconnect(g_addr, "/rt/x", "/rt/y", TMO), 0);
  child_expect(p, "unconnected"); /* it saw its channel go */
  note_own_segments();
  child_done(p);
  assert_quiet(s);
  ez_context_close(ctx);
  assert_segments_gone();
}

/* Subscribers created before and after their publisher, in this process and in another. */
static void test_sub_before_after_pub(void **state) {
  (void)state;
  sizes z = parse_sizes("8");
  ez_context *ctx = open_ctx();
  ez_sub *early = make_sub(ctx, "/dp/ba");
  child *sub_early = child_start("sub %s /dp/ba count=10 sizes=8", g_addr);
  child_expect(sub_early, "ready");
  ez_pub *p = make_pub(ctx, "/dp/ba", 0, false);
  ez_sub *late = make_sub(ctx, "/dp/ba");
  child *sub_late = child_start("sub %s /dp/ba count=10 sizes=8", g_addr);
  child_expect(sub_late, "ready");
  assert_int_equal(ez_pub_num_channels(p), 3); /* local + two processes */
  for (uint64_t k = 0; k < 10; k++)
    publish_k(p, &z, k);
  tracker t1 = {0}, t2 = {0};
  recv_check(early, &t1, &z, 10);
  recv_check(late, &t2, &z, 10);
  assert_int_equal(ez_pub_flush(p, TMO), 0);
  note_own_segments();
  child_done(sub_early);
  child_done(sub_late);
  ez_context_close(ctx);
  assert_segments_gone();
}

/* ---- backpressure --------------------------------------------------------------------------- */

/* A slow subscriber in another process: publish waits, nothing is dropped (with 1 and 2 slots,
 * over shm and TCP). */
static void test_backpressure_slow(void **state) {
  (void)state;
  sizes z = parse_sizes("100,2000");
  for (int v = 0; v < 4; v++) {
    int nbuf = 1 + (v & 1), tcp = v >> 1;
    char topic[64];
    snprintf(topic, sizeof topic, "/dp/slow/%d", v);
    child *sub = child_start("sub %s %s count=60 sizes=100,2000 delay=3", g_addr, topic);
    child_expect(sub, "ready");
    ez_context *ctx = open_ctx();
    ez_pub *p = make_pub(ctx, topic, (uint32_t)nbuf, tcp);
    for (uint64_t k = 0; k < 60; k++)
      publish_k(p, &z, k);
    assert_int_equal(ez_pub_flush(p, TMO), 0);
    note_own_segments();
    child_done(sub);
    ez_context_close(ctx);
  }
  assert_segments_gone();
}

/* Slots held by a subscriber: publish with a timeout returns EZ_ETIMEDOUT (nothing sent), and
 * succeeds once they are released. In this process, then with the holder in another process. */
static void test_publish_timeout_when_held(void **state) {
  (void)state;
  sizes z = parse_sizes("16");
  ez_context *ctx = open_ctx();
  ez_sub *s = make_sub(ctx, "/dp/held");
  ez_pub *p = make_pub(ctx, "/dp/held", 2, false);
  for (uint64_t k = 0; k < 2; k++)
    publish_k(p, &z, k);
  ez_msg m0, m1;
  assert_int_equal(ez_recv(s, &m0, TMO), 0);
  assert_int_equal(ez_recv(s, &m1, TMO), 0);
  uint8_t b[16];
  fill(b, 16, 2);
  assert_int_equal(ez_publish(p, b, 16, 0), EZ_ETIMEDOUT);
  assert_int_equal(ez_publish(p, b, 16, 100), EZ_ETIMEDOUT);
  void *buf;
  assert_int_equal(ez_pub_loan(p, 16, &buf, 50), EZ_ETIMEDOUT);
  assert_int_equal(ez_pub_flush(p, 50), EZ_ETIMEDOUT);
  ez_msg_release(&m0); /* frees slot 0: message 2 goes there */
  assert_int_equal(ez_publish(p, b, 16, TMO), 0);
  assert_int_equal(ez_publish(p, b, 16, 50), EZ_ETIMEDOUT); /* slot 1 still held */
  ez_msg_release(&m1);
  tracker t = {.n = 1, .next = {2}};
  snprintf(t.ids[0], 37, "%s", ez_pub_id(p));
  recv_check(s, &t, &z, 1); /* message 2, exactly once: the timed-out attempts sent nothing */
  assert_quiet(s);
  assert_int_equal(ez_pub_flush(p, TMO), 0);
  note_own_segments();
  ez_context_close(ctx);

  /* Holder in another process. */
  child *sub = child_start("sub %s /dp/held2 count=10 sizes=16 hold=3", g_addr);
  child_expect(sub, "ready");
  ctx = open_ctx();
  p = make_pub(ctx, "/dp/held2", 3, false);
  for (uint64_t k = 0; k < 3; k++)
    publish_k(p, &z, k);
  child_expect(sub, "held");
  fill(b, 16, 3);
  assert_int_equal(ez_publish(p, b, 16, 200), EZ_ETIMEDOUT);
  child_say(sub, "release\n");
  for (uint64_t k = 3; k < 10; k++)
    publish_k(p, &z, k);
  assert_int_equal(ez_pub_flush(p, TMO), 0);
  note_own_segments();
  child_done(sub);
  ez_context_close(ctx);
  assert_segments_gone();
}

/* The publisher grows its segment while subscribers still view messages in the old one: those
 * views stay intact until released, and what follows arrives from the new segment. */
static void test_grow_while_held(void **state) {
  (void)state;
  const char *sz = "100,100,200000,5";
  sizes z = parse_sizes(sz);
  /* in this process */
  ez_context *ctx = open_ctx();
  ez_sub *s = make_sub(ctx, "/dp/grow");
  ez_pub *p = make_pub(ctx, "/dp/grow", 4, false);
  publish_k(p, &z, 0);
  publish_k(p, &z, 1);
  ez_msg m0, m1;
  assert_int_equal(ez_recv(s, &m0, TMO), 0);
  assert_int_equal(ez_recv(s, &m1, TMO), 0);
  publish_k(p, &z, 2); /* grows */
  publish_k(p, &z, 3);
  char why[256];
  if (check_bytes(&m0, 0, &z, why, sizeof why) || check_bytes(&m1, 1, &z, why, sizeof why))
    fail_msg("held across the grow: %s", why);
  ez_msg_release(&m0);
  ez_msg_release(&m1);
  tracker t = {.n = 1, .next = {2}};
  snprintf(t.ids[0], 37, "%s", ez_pub_id(p));
  recv_check(s, &t, &z, 2);
  for (uint64_t k = 4; k < 12; k++) {
    publish_k(p, &z, k);
    recv_check(s, &t, &z, 1);
  }
  note_own_segments();
  ez_context_close(ctx);

  /* a subscriber in another process holds messages 0 and 1 (over shm, then TCP) */
  for (int tcp = 0; tcp <= 1; tcp++) {
    const char *topic = tcp ? "/dp/grow/tcp" : "/dp/grow/shm";
    child *c = child_start("sub %s %s count=12 sizes=%s hold=2", g_addr, topic, sz);
    child_expect(c, "ready");
    ctx = open_ctx();
    p = make_pub(ctx, topic, 4, tcp);
    publish_k(p, &z, 0);
    publish_k(p, &z, 1);
    child_expect(c, "held");
    publish_k(p, &z, 2); /* grows while 0 and 1 are held */
    publish_k(p, &z, 3);
    note_own_segments();
    child_say(c, "release\n");
    for (uint64_t k = 4; k < 12; k++)
      publish_k(p, &z, k);
    assert_int_equal(ez_pub_flush(p, TMO), 0);
    note_own_segments();
    child_done(c);
    ez_context_close(ctx);
  }
  assert_segments_gone();
}

/* A subscriber destroyed while it views and has queued messages gives their slots back. */
static void test_sub_destroy_releases(void **state) {
  (void)state;
  sizes z = parse_sizes("10");
  ez_context *ctx = open_ctx();
  ez_sub *keep = make_sub(ctx, "/dp/destroy");
  ez_sub *s = make_sub(ctx, "/dp/destroy");
  ez_pub *p = make_pub(ctx, "/dp/destroy", 3, false);
  for (uint64_t k = 0; k < 3; k++)
    publish_k(p, &z, k);
  tracker t = {0};
  recv_check(keep, &t, &z, 3);
  ez_msg m;
  assert_int_equal(ez_recv(s, &m, TMO), 0); /* viewed; two more queued */
  assert_int_equal(ez_publish(p, "x", 1, 50), EZ_ETIMEDOUT);
  ez_sub_destroy(s);
  assert_int_equal(ez_pub_flush(p, TMO), 0);
  for (uint64_t k = 3; k < 10; k++) {
    publish_k(p, &z, k);
    recv_check(keep, &t, &z, 1);
  }
  assert_quiet(keep);

  /* More queued than the purge's batch (64): every one of them is released. */
  ez_sub *many = make_sub(ctx, "/dp/destroy/many");
  ez_pub *wide = make_pub(ctx, "/dp/destroy/many", 200, false);
  for (uint64_t k = 0; k < 200; k++)
    publish_k(wide, &z, k);
  assert_int_equal(ez_publish(wide, "x", 1, 50), EZ_ETIMEDOUT); /* all 200 slots held */
  ez_sub_destroy(many);
  assert_int_equal(ez_pub_flush(wide, TMO), 0);

  /* the same with the subscriber in another process that exits while holding */
  child *c = child_start("sub %s /dp/destroy2 count=5 sizes=10 hold=2 quit_held=1", g_addr);
  child_expect(c, "ready");
  ez_pub *q = make_pub(ctx, "/dp/destroy2", 2, false);
  publish_k(q, &z, 0);
  publish_k(q, &z, 1);
  child_expect(c, "held");
  child_say(c, "quit\n");
  child_done(c); /* it destroyed its subscriber and context while holding */
  assert_int_equal(ez_pub_flush(q, TMO), 0);
  publish_k(q, &z, 2);
  note_own_segments();
  ez_context_close(ctx);
  assert_segments_gone();
}

/* ---- pause / resume / sync ------------------------------------------------------------------- */

typedef struct bg_publish {
  ez_pub *p;
  const sizes *z;
  uint64_t k;
  int rc;
  atomic_bool done;
} bg_publish;

static void *bg_publish_fn(void *arg) {
  bg_publish *b = arg;
  size_t len = size_of(b->z, b->k);
  uint8_t buf[64];
  fill(buf, len, b->k);
  b->rc = ez_publish(b->p, buf, len, TMO);
  atomic_store(&b->done, true);
  return NULL;
}

/* A PROFILE round trip reaches every publisher after any PAUSE / RESUME sent before it (same
 * link, in order): when it returns, they have taken effect. */
static void graph_barrier(void) {
  char *json = NULL;
  assert_int_equal(ez_profile(g_addr, 1.0, &json, TMO), 0);
  free(json);
}

static void test_pause_resume_sync(void **state) {
  (void)state;
  sizes z = parse_sizes("40");
  child *sub = child_start("sub %s /dp/pause count=27 sizes=40 delay=10", g_addr);
  child_expect(sub, "ready");
  ez_context *ctx = open_ctx();
  ez_pub *p = make_pub(ctx, "/dp/pause", 32, false);
  uint64_t k = 0;
  for (; k < 5; k++)
    publish_k(p, &z, k);

  /* PAUSE: publish waits (and times out, sending nothing) */
  assert_int_equal(ez_graph_pause(g_addr, TMO), 0);
  graph_barrier();
  uint8_t b[40];
  fill(b, 40, k);
  assert_int_equal(ez_publish(p, b, 40, 200), EZ_ETIMEDOUT);
  /* a publish blocked by the pause goes out on RESUME */
  bg_publish bp = {.p = p, .z = &z, .k = k};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, bg_publish_fn, &bp), 0);
  th_sleep_ms(100);
  assert_false(atomic_load(&bp.done));
  assert_int_equal(ez_graph_resume(g_addr, TMO), 0);
  pthread_join(th, NULL);
  assert_int_equal(bp.rc, 0);
  k++;

  /* SYNC: returns once every buffer is released; publishers stay paused */
  for (int i = 0; i < 20; i++, k++)
    publish_k(p, &z, k);
  assert_int_equal(ez_graph_sync(g_addr, TMO), 0);
  assert_int_equal(ez_pub_flush(p, 0), 0); /* nothing in flight any more */
  fill(b, 40, k);
  assert_int_equal(ez_publish(p, b, 40, 200), EZ_ETIMEDOUT);
  assert_int_equal(ez_graph_resume(g_addr, TMO), 0);
  publish_k(p, &z, k++);
  assert_int_equal(k, 27);
  assert_int_equal(ez_pub_flush(p, TMO), 0);

  /* start_paused: nothing goes out before RESUME */
  ez_pub_opts o;
  ez_pub_opts_init(&o);
  o.start_paused = true;
  ez_pub *q = NULL;
  assert_int_equal(ez_pub_create(ctx, "/dp/pause2", &o, &q), 0);
  assert_int_equal(ez_publish(q, "x", 1, 100), EZ_ETIMEDOUT);
  assert_int_equal(ez_graph_resume(g_addr, TMO), 0);
  assert_int_equal(ez_publish(q, "x", 1, TMO), 0);

  note_own_segments();
  child_done(sub);
  ez_context_close(ctx);
  assert_segments_gone();
}

/* ---- failures ------------------------------------------------------------------------------- */

/* A subscriber process holding slots is SIGKILLed: the publisher gets its slots back and carries
 * on; the other subscriber receives everything. */
static void test_kill_subscriber(void **state) {
  (void)state;
  sizes z = parse_sizes("200,5000");
  child *good = child_start("sub %s /dp/kill/sub count=100 sizes=200,5000", g_addr);
  child *holder = child_start("sub %s /dp/kill/sub count=100 sizes=200,5000 hold=2", g_addr);
  child_expect(good, "ready");
  child_expect(holder, "ready");
  child *holder2 = child_start("sub %s /dp/kill/sub count=100 sizes=200,5000 delay=50", g_addr);
  child_expect(holder2, "ready");
  ez_context *ctx = open_ctx();
  ez_pub *p = make_pub(ctx, "/dp/kill/sub", 4, false);
  uint64_t k = 0;
  for (; k < 4; k++)
    publish_k(p, &z, k);
  child_expect(holder, "held");
  scan_maps(holder->pid, note_cb, NULL);
  scan_maps(holder2->pid, note_cb, NULL);
  child_kill(holder);    /* holding messages 0 and 1 */
  publish_k(p, &z, k++); /* slot 0 again: waits for the dead holder's channel to go */
  child_kill(holder2);   /* mid-stream, slow */
  for (; k < 100; k++)
    publish_k(p, &z, k);
  assert_int_equal(ez_pub_flush(p, TMO), 0);
  assert_true(ez_pub_num_channels(p) <= 1); /* the dead are gone ("good" may be done, too) */
  note_own_segments();
  child_done(good);
  ez_context_close(ctx);
  assert_segments_gone();
}

/* A publisher process is SIGKILLed mid-stream: what it had sent arrives in order (or not at
 * all), nothing hangs, and another publisher on the topic is received in full afterwards. */
static void test_kill_publisher(void **state) {
  (void)state;
  sizes z = parse_sizes("64,70000");
  ez_context *ctx = open_ctx();
  ez_sub *s = make_sub(ctx, "/dp/kill/pub");
  child *p1 = child_start("pub %s /dp/kill/pub count=1000000000 sizes=64,70000 nbuf=4", g_addr);
  child *p2 =
      child_start("pub %s /dp/kill/pub count=1000000000 sizes=64,70000 nbuf=4 tcp=1", g_addr);
  tracker t = {0};
  recv_check(s, &t, &z, 40);
  note_own_segments();
  child_kill(p1);
  recv_check(s, &t, &z, 40);
  child_kill(p2);
  /* drain whatever was already delivered: still in order and intact */
  char why[256];
  ez_msg m;
  int rc;
  while ((rc = ez_recv(s, &m, QUIET_MS)) == 0) {
    rc = check_msg(&t, &m, &z, why, sizeof why);
    ez_msg_release(&m);
    if (rc) fail_msg("after the kill: %s", why);
  }
  assert_int_equal(rc, EZ_ETIMEDOUT);
  child *p3 = child_start("pub %s /dp/kill/pub count=50 sizes=64,70000 nbuf=4", g_addr);
  size_t before = t.n;
  recv_check(s, &t, &z, 50);
  assert_int_equal(t.n, before + 1);
  assert_int_equal(t.next[t.n - 1], 50);
  note_own_segments();
  child_done(p3);
  ez_context_close(ctx);
  assert_segments_gone(); /* the dead publishers' segments too, once nobody leases them */
}

/* ---- fd, lost server ------------------------------------------------------------------------ */

/* ez_sub_fd polls readable exactly while a message waits. */
static void test_sub_fd(void **state) {
  (void)state;
  ez_context *ctx = open_ctx();
  ez_sub *s = make_sub(ctx, "/dp/fd");
  int fd = ez_sub_fd(s);
  assert_true(fd >= 0);
  assert_int_equal(ez_sub_fd(s), fd);
  struct pollfd pfd = {fd, POLLIN, 0};
  assert_int_equal(poll(&pfd, 1, 0), 0);
  ez_pub *p = make_pub(ctx, "/dp/fd", 0, false);
  send_line(p, "one");
  send_line(p, "two");
  assert_int_equal(poll(&pfd, 1, TMO), 1);
  ez_msg m;
  assert_int_equal(ez_recv(s, &m, 0), 0);
  ez_msg_release(&m);
  assert_int_equal(poll(&pfd, 1, 0), 1); /* "two" still waits */
  assert_int_equal(ez_recv(s, &m, 0), 0);
  ez_msg_release(&m);
  pfd.revents = 0;
  assert_int_equal(poll(&pfd, 1, 0), 0);
  assert_int_equal(ez_recv(s, &m, 0), EZ_EAGAIN);

  /* from another process: over shared memory, then over TCP (an ezmsg-c publisher: the TCP
   * ring, whose I/O thread wakes the fd once per read) */
  for (int tcp = 0; tcp < 2; tcp++) {
    child *c = child_start(
        tcp ? "pub %s /dp/fd count=3 sizes=7 tcp=1" : "pub %s /dp/fd count=3 sizes=7", g_addr);
    sizes z = parse_sizes("7");
    tracker t = {0};
    for (int i = 0; i < 3; i++) {
      pfd.revents = 0;
      assert_int_equal(poll(&pfd, 1, TMO), 1);
      assert_true(pfd.revents & POLLIN);
      assert_int_equal(ez_recv(s, &m, 0), 0);
      char why[256];
      int rc = check_msg(&t, &m, &z, why, sizeof why);
      ez_msg_release(&m);
      if (rc) fail_msg("%s", why);
    }
    pfd.revents = 0;
    assert_int_equal(poll(&pfd, 1, 0), 0); /* all taken: not readable */
    note_own_segments();
    child_done(c);
  }
  ez_context_close(ctx);
  assert_segments_gone();
}

/* SIGKILL the graph server: ez_recv returns EZ_ECONNLOST, `ezmsg sub` exits 1, and the
 * segments of this process's publisher are still removed when it closes. */
static void test_server_killed(void **state) {
  (void)state;
  ez_context *ctx = open_ctx();
  ez_sub *s = make_sub(ctx, "/dp/lost");
  ez_pub *p = make_pub(ctx, "/dp/lost/pub", 2, false); /* its segment must not outlive us */
  send_line(p, "before");
  note_own_segments();
  assert_true(g_nsegs > 0);
  char ready[128];
  snprintf(ready, sizeof ready, "/tmp/ez_dp_ready.%d", (int)getpid());
  unlink(ready);
  pid_t cli = spawn_cli(SIGKILL, (const char *const[]){"sub", "/dp/lost", "--address", g_addr,
                                                       "--ready-file", ready, NULL});
  for (int i = 0; i < TMO / 10 && access(ready, F_OK) != 0; i++)
    th_sleep_ms(10);
  assert_int_equal(access(ready, F_OK), 0);
  unlink(ready);
  assert_int_equal(th_stop(g_server, SIGKILL, TMO), 128 + SIGKILL);
  g_server = 0;
  ez_msg m;
  assert_int_equal(ez_recv(s, &m, TMO), EZ_ECONNLOST);
  assert_int_equal(ez_recv(s, &m, 0), EZ_ECONNLOST); /* and stays so */
  assert_int_equal(th_wait_exit(cli, TMO), 1);
  ez_context_close(ctx);
  assert_segments_gone(); /* nobody is left to unlink them but the processes that used them */
}

/* ---- child roles ---------------------------------------------------------------------------- */

static void say(const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n > sizeof line - 2) n = (int)sizeof line - 2;
  line[n++] = '\n';
  if (write(1, line, (size_t)n) != n) _exit(120);
}

static void say_segments_cb(const char *name, uintptr_t lo, uintptr_t hi, void *arg) {
  (void)lo, (void)hi, (void)arg;
  say("seg %s", name);
}

static void say_segments(void) { scan_maps(0, say_segments_cb, NULL); }

/* Blocks until a line (or EOF) arrives on stdin. */
static void await_stdin(void) {
  char c;
  while (read(0, &c, 1) == 1 && c != '\n') {
  }
}

static int die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "child %d: ", (int)getpid());
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  return 1;
}

typedef struct opts {
  const char *addr, *topic, *topic2, *sizes, *mode;
  long count, nbuf, tcp, loan, wait, unwait, nsubs, delay, hold, quit_held;
} opts;

static opts parse_child(int argc, char **argv) {
  opts o = {.count = 1, .nbuf = 32, .nsubs = 1, .sizes = "8"};
  const struct {
    const char *key;
    long *val;
  } nums[] = {{"count", &o.count},        {"nbuf", &o.nbuf},   {"tcp", &o.tcp},
              {"loan", &o.loan},          {"wait", &o.wait},   {"unwait", &o.unwait},
              {"nsubs", &o.nsubs},        {"delay", &o.delay}, {"hold", &o.hold},
              {"quit_held", &o.quit_held}};
  int pos = 0;
  for (int i = 0; i < argc; i++) {
    char *eq = strchr(argv[i], '=');
    if (!eq) { /* positional: address, topic, second topic */
      const char **slot = pos == 0 ? &o.addr : pos == 1 ? &o.topic : &o.topic2;
      *slot = argv[i];
      pos++;
      continue;
    }
    *eq = 0;
    const char *k = argv[i], *v = eq + 1;
    if (!strcmp(k, "sizes")) o.sizes = v;
    if (!strcmp(k, "mode")) o.mode = v;
    for (size_t n = 0; n < sizeof nums / sizeof nums[0]; n++)
      if (!strcmp(k, nums[n].key)) *nums[n].val = strtol(v, NULL, 10);
  }
  return o;
}

/* pub ADDR TOPIC [count= sizes= nbuf= tcp= loan= wait=N (channels before publishing)
 *   unwait=1 (after publishing, wait until no channel is left)] */
static int role_pub(const opts *o) {
  ez_context *ctx;
  int rc = ez_context_open(o->addr, &ctx);
  if (rc) return die("context: %s", ez_strerror(rc));
  ez_pub_opts po;
  ez_pub_opts_init(&po);
  po.num_buffers = (uint32_t)o->nbuf;
  po.force_tcp = o->tcp;
  ez_pub *p;
  rc = ez_pub_create(ctx, o->topic, &po, &p);
  if (rc) return die("pub: %s", ez_strerror(rc));
  say("ready");
  int64_t end = th_now_ms() + TMO;
  while (ez_pub_num_channels(p) < (size_t)o->wait) {
    if (th_now_ms() > end) return die("no %ld channels", o->wait);
    th_sleep_ms(5);
  }
  sizes z = parse_sizes(o->sizes);
  size_t maxlen = 0;
  for (size_t i = 0; i < z.n; i++)
    maxlen = z.v[i] > maxlen ? z.v[i] : maxlen;
  uint8_t *buf = malloc(maxlen + 1);
  for (long k = 0; k < o->count; k++) {
    size_t len = size_of(&z, (uint64_t)k);
    if (o->loan) {
      void *slot;
      rc = ez_pub_loan(p, len, &slot, TMO);
      if (!rc) {
        fill(slot, len, (uint64_t)k);
        rc = ez_pub_commit(p, len);
      }
    } else {
      fill(buf, len, (uint64_t)k);
      rc = ez_publish(p, buf, len, TMO);
    }
    if (rc) return die("publish %ld: %s", k, ez_strerror(rc));
    if (k == 0) say_segments();
  }
  free(buf);
  rc = ez_pub_flush(p, TMO);
  if (rc) return die("flush: %s", ez_strerror(rc));
  say_segments();
  say("sent");
  if (o->unwait) {
    end = th_now_ms() + TMO;
    while (ez_pub_num_channels(p) > 0) {
      if (th_now_ms() > end) return die("%zu channels stay", ez_pub_num_channels(p));
      th_sleep_ms(5);
    }
    say("unconnected");
  }
  ez_context_close(ctx);
  return 0;
}

typedef struct sub_thread {
  const opts *o;
  ez_sub *s;
  int index;
  int rc;
  bool quit;
} sub_thread;

static void *sub_thread_fn(void *arg) {
  sub_thread *st = arg;
  const opts *o = st->o;
  sizes z = parse_sizes(o->sizes);
  tracker t = {0};
  ez_msg held[64];
  long nheld = 0, total = o->count;
  char why[256];
  for (long i = 0; i < total; i++) {
    ez_msg m;
    int rc = ez_recv(st->s, &m, TMO);
    if (rc) {
      st->rc = die("sub %d: message %ld of %ld: %s", st->index, i, total, ez_strerror(rc));
      return NULL;
    }
    if (check_msg(&t, &m, &z, why, sizeof why)) {
      st->rc = die("sub %d: %s", st->index, why);
      return NULL;
    }
    if (o->delay) th_sleep_ms((int)o->delay);
    if (st->index == 0 && nheld < o->hold && nheld < 64) {
      held[nheld++] = m;
      if (nheld == o->hold) {
        say("held");
        await_stdin();
        if (o->quit_held) { /* leave them held: the context goes with them */
          st->quit = true;
          return NULL;
        }
        for (long h = 0; h < nheld; h++) { /* still intact (the publisher may have grown) */
          if (check_bytes(&held[h], held[h].msg_id, &z, why, sizeof why)) {
            st->rc = die("sub %d: held %s", st->index, why);
            return NULL;
          }
          ez_msg_release(&held[h]);
        }
      }
      continue;
    }
    ez_msg_release(&m);
  }
  if (t.n != 1) st->rc = die("sub %d: %zu publishers", st->index, t.n);
  return NULL;
}

/* sub ADDR TOPIC [count= (per subscriber, from one publisher) sizes= nsubs= delay=MS (per
 *   message) hold=N (first subscriber keeps N messages until a stdin line, then checks them
 *   again and releases them; with quit_held=1 closes its context instead) mode=shm|tcp] */
static int role_sub(const opts *o) {
  ez_context *ctx;
  int rc = ez_context_open(o->addr, &ctx);
  if (rc) return die("context: %s", ez_strerror(rc));
  sub_thread st[8];
  pthread_t th[8];
  int n = o->nsubs < 8 ? (int)o->nsubs : 8;
  for (int i = 0; i < n; i++) {
    st[i] = (sub_thread){.o = o, .index = i};
    rc = ez_sub_create(ctx, o->topic, NULL, &st[i].s);
    if (rc) return die("sub: %s", ez_strerror(rc));
  }
  say("ready");
  for (int i = 0; i < n; i++)
    pthread_create(&th[i], NULL, sub_thread_fn, &st[i]);
  int bad = 0;
  bool quit = false;
  for (int i = 0; i < n; i++) {
    pthread_join(th[i], NULL);
    bad |= st[i].rc;
    quit |= st[i].quit;
  }
  if (quit) {
    ez_context_close(ctx); /* with messages still held */
    return bad;
  }
  if (!bad && o->mode) {
    char *json = NULL;
    ez_profile_data pd;
    if (ez_context_profile(ctx, 2.0, &json) || ez_profile_parse(json, &pd))
      return die("no profile");
    bool ok = pd.n_channels == 1 && pd.channels[0].mode && !strcmp(pd.channels[0].mode, o->mode);
    if (!ok)
      bad =
          die("channel mode %s, want %s", pd.n_channels ? pd.channels[0].mode : "(none)", o->mode);
    ez_profile_data_free(&pd);
    free(json);
  }
  say_segments();
  ez_context_close(ctx);
  return bad;
}

/* relay ADDR IN OUT [count= tcp=]: forwards count messages unchanged (zero copy both ways). */
static int role_relay(const opts *o) {
  ez_context *ctx;
  int rc = ez_context_open(o->addr, &ctx);
  if (rc) return die("context: %s", ez_strerror(rc));
  ez_pub_opts po;
  ez_pub_opts_init(&po);
  po.force_tcp = o->tcp;
  po.num_buffers = 4;
  ez_pub *p;
  ez_sub *s;
  rc = ez_pub_create(ctx, o->topic2, &po, &p);
  if (!rc) rc = ez_sub_create(ctx, o->topic, NULL, &s);
  if (rc) return die("relay: %s", ez_strerror(rc));
  say("ready");
  for (long k = 0; k < o->count; k++) {
    ez_msg m;
    rc = ez_recv(s, &m, TMO);
    if (rc) return die("relay: message %ld: %s", k, ez_strerror(rc));
    if (m.msg_id != (uint64_t)k)
      return die("relay: got message %llu, want %ld", (unsigned long long)m.msg_id, k);
    void *slot;
    rc = ez_pub_loan(p, m.len, &slot, TMO);
    if (!rc) {
      if (m.len) memcpy(slot, m.data, m.len);
      rc = ez_pub_commit(p, m.len);
    }
    ez_msg_release(&m);
    if (rc) return die("relay: publish %ld: %s", k, ez_strerror(rc));
  }
  rc = ez_pub_flush(p, TMO);
  if (rc) return die("relay: flush: %s", ez_strerror(rc));
  say_segments();
  ez_context_close(ctx);
  return 0;
}

static int child_main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc < 1) return die("no role");
  opts o = parse_child(argc - 1, argv + 1);
  if (!o.addr || !o.topic) return die("usage");
  if (!strcmp(argv[0], "pub")) return role_pub(&o);
  if (!strcmp(argv[0], "sub")) return role_sub(&o);
  if (!strcmp(argv[0], "relay")) return o.topic2 ? role_relay(&o) : die("usage");
  return die("unknown role %s", argv[0]);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--child")) return child_main(argc - 2, argv + 2);
  signal(SIGPIPE, SIG_IGN);
  if (argc > 1) cmocka_set_test_filter(argv[1]); /* e.g. "test_kill_*" */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_local_sizes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_shm_sizes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_tcp_sizes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_remote_subscriber, setup, teardown),
      cmocka_unit_test_setup_teardown(test_idle_costs_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_zero_copy_local, setup, teardown),
      cmocka_unit_test_setup_teardown(test_zero_copy_remote, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fan_out, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fan_in, setup, teardown),
      cmocka_unit_test_setup_teardown(test_relay_chain, setup, teardown),
      cmocka_unit_test_setup_teardown(test_routing_edges, setup, teardown),
      cmocka_unit_test_setup_teardown(test_routing_remote, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sub_before_after_pub, setup, teardown),
      cmocka_unit_test_setup_teardown(test_backpressure_slow, setup, teardown),
      cmocka_unit_test_setup_teardown(test_publish_timeout_when_held, setup, teardown),
      cmocka_unit_test_setup_teardown(test_grow_while_held, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sub_destroy_releases, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pause_resume_sync, setup, teardown),
      cmocka_unit_test_setup_teardown(test_kill_subscriber, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sub_fd, setup, teardown),
      cmocka_unit_test_setup_teardown(test_server_killed, setup, teardown),
      /* last: a library crash here would end the run */
      cmocka_unit_test_setup_teardown(test_kill_publisher, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
