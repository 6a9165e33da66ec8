/* The data plane tests' kit: the message pattern, shared-memory bookkeeping, child processes and
 * their roles, the fixture (one `ezmsg serve` per test) and in-process helpers. See dataplane.h. */
#include "dataplane.h"
#include "pub/pubdebug.h" /* ezi_pub_describe, for a publish that timed out */

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

static const char *g_exe = "/proc/self/exe";

/* ---- the message pattern ------------------------------------------------------------------- */

sizes parse_sizes(const char *s) {
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

size_t size_of(const sizes *z, uint64_t k) { return z->v[k % z->n]; }

static uint8_t pat(size_t i, uint64_t k) { return (uint8_t)(i * 131u + k * 7u + 3u); }

void fill(uint8_t *p, size_t len, uint64_t k) {
  for (size_t i = 0; i < len; i++)
    p[i] = i < 8 && len >= 8 ? (uint8_t)(k >> (8 * i)) : pat(i, k);
}

static int tracker_index(tracker *t, const char *pub_id) {
  for (size_t i = 0; i < t->n; i++)
    if (!strcmp(t->ids[i], pub_id)) return (int)i;
  if (t->n == 16) return -1;
  snprintf(t->ids[t->n], 37, "%s", pub_id);
  t->next[t->n] = 0;
  return (int)t->n++;
}

/* 0 if m holds the right bytes for message k; else a reason in why. */
int check_bytes(const ez_msg *m, uint64_t k, const sizes *z, char *why, size_t cap) {
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
int check_msg(tracker *t, const ez_msg *m, const sizes *z, char *why, size_t cap) {
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
size_t g_nsegs;

static void note_segment(const char *name) {
  for (size_t i = 0; i < g_nsegs; i++)
    if (!strcmp(g_segs[i], name)) return;
  if (g_nsegs < MAX_SEGS) snprintf(g_segs[g_nsegs++], 64, "%s", name);
}

/* Calls fn for every /dev/shm/psm_* mapping of process pid (0: this one). */
void scan_maps(pid_t pid, void (*fn)(const char *name, uintptr_t lo, uintptr_t hi, void *),
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

void note_cb(const char *name, uintptr_t lo, uintptr_t hi, void *arg) {
  (void)lo, (void)hi, (void)arg;
  note_segment(name);
}

/* Records the segments this process maps now. */
void note_own_segments(void) { scan_maps(0, note_cb, NULL); }

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
bool addr_in_shm(const void *p) {
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
void assert_segments_gone(void) {
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

static child g_children[MAX_CHILD];
static size_t g_nchildren;

/* Starts `this-executable --child ARGS...` (ARGS: space-separated words). */
child *child_start(const char *fmt, ...) {
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
void child_expect(child *c, const char *want) {
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

void child_say(child *c, const char *line) {
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
void child_done(child *c) {
  pid_t pid = c->pid;
  int rc = child_wait(c);
  if (rc != 0) fail_msg("child %d exited %d (see its stderr above)", (int)pid, rc);
}

void child_kill(child *c) {
  if (c->pid <= 0) return;
  kill(c->pid, SIGKILL);
  c->status = th_wait_exit(c->pid, TMO);
  c->pid = 0;
  if (c->in_fd >= 0) close(c->in_fd);
  if (c->out_fd >= 0) close(c->out_fd);
  c->in_fd = c->out_fd = -1;
}

/* ---- fixture: one `ezmsg serve` per test ---------------------------------------------------- */

char g_addr[64];
pid_t g_server;

/* Starts the CLI with argv (NULL-terminated) as a child that gets `sig` if this process dies (so
 * a crashed test leaves no server behind to hold CTest's output pipe). */
pid_t spawn_cli(int sig, const char *const *args) {
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

int setup(void **state) {
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

int teardown(void **state) {
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

ez_context *open_ctx(void) {
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(g_addr, &ctx), 0);
  assert_false(ez_context_owns_server(ctx));
  return ctx;
}

ez_pub *make_pub(ez_context *ctx, const char *topic, uint32_t nbuf, bool tcp) {
  ez_pub_opts o;
  ez_pub_opts_init(&o);
  if (nbuf) o.num_buffers = nbuf;
  o.force_tcp = tcp;
  ez_pub *p = NULL;
  assert_int_equal(ez_pub_create(ctx, topic, &o, &p), 0);
  return p;
}

ez_sub *make_sub(ez_context *ctx, const char *topic) {
  ez_sub *s = NULL;
  assert_int_equal(ez_sub_create(ctx, topic, NULL, &s), 0);
  return s;
}

void publish_k(ez_pub *p, const sizes *z, uint64_t k) {
  size_t len = size_of(z, k);
  uint8_t *buf = malloc(len ? len : 1);
  assert_non_null(buf);
  fill(buf, len, k);
  int rc = ez_publish(p, buf, len, TMO);
  free(buf);
  if (rc) { /* say what it waited for: a rare stall is then diagnosed from the log alone */
    char why[4096];
    ezi_pub_describe(p, why, sizeof why);
    fail_msg("publish of message %llu: %s\n%s", (unsigned long long)k, ez_strerror(rc), why);
  }
}

/* Receives n messages on s and checks them against z (order per publisher, content). */
void recv_check(ez_sub *s, tracker *t, const sizes *z, int n) {
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
void assert_quiet(ez_sub *s) {
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
void assert_mode(ez_context *ctx, const char *pub_id, const char *mode) {
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

void send_line(ez_pub *p, const char *text) {
  assert_int_equal(ez_publish(p, text, strlen(text), TMO), 0);
}

void expect_line(ez_sub *s, const char *text, const char *pub_id) {
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

int dp_main(int argc, char **argv, const struct CMUnitTest *tests, size_t n) {
  if (argc > 1 && !strcmp(argv[1], "--child")) return child_main(argc - 2, argv + 2);
  signal(SIGPIPE, SIG_IGN);
  if (argc > 1) cmocka_set_test_filter(argv[1]); /* e.g. "test_kill_*" */
  return _cmocka_run_group_tests(argv[0], tests, n, NULL, NULL);
}
