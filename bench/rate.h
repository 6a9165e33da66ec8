/* The harness bench/rate.c (ours) and bench/zmq_rate.c (ZeroMQ) share: fixed-rate runs and the
 * 8-process pipeline, with every process forked and stopped by pid. Header only; the includer
 * defines the transport (the tp_* functions declared below) and calls rb_main.
 *
 * Modes:
 * - rate: a source paced on absolute CLOCK_MONOTONIC deadlines (clock_nanosleep TIMER_ABSTIME,
 *   timer slack 1 ns) -> one sink. A deadline the source wakes up more than a period after is
 *   skipped and counted (`missed`): never a catch-up burst.
 * - pipeline: a source (default 1 kHz, 4 KiB) -> 4 stages in a chain -> 3 sinks fed by the last
 *   stage, each a process. A stage runs `--work` passes of FNV-1a over the frame it received
 *   (a fixed amount of CPU), copies the frame, stamps its checksum and stage count into the
 *   header and publishes the copy.
 * - fanin: `--sources` sources (default 8), each a process paced as above at `--rate` on the same
 *   topic -> one sink: the many-to-one edge of a graph (ZeroMQ: one XPUB per source, the sink's
 *   SUB connected to each). The sink checks each source's sequence on its own and ends after
 *   every source's END.
 * - --null (rate only): the source paces and sends nothing, no sink: the cost of pacing alone.
 *
 * Every message starts with rb_hdr: sequence number and CLOCK_MONOTONIC send time (kept through
 * the stages). Sinks check magic, size, stage count and that the sequence is contiguous (nothing
 * lost, duplicated or reordered) and measure send-to-receive latency of the messages sent after
 * the warm-up. Each process measures its own CPU (getrusage RUSAGE_SELF: every thread), context
 * switches and, with --syscalls, system calls (a perf tracepoint counter inherited by every
 * thread, opened before the transport starts any) over the measured interval: for the source,
 * from waking for the first measured deadline to waking for the first deadline past the end; for
 * the others, from receiving the first measured message to receiving END. Per message = over
 * the messages the source sent in the measured interval. One JSON object per run on stdout. */
#ifndef EZ_BENCH_RATE_H
#define EZ_BENCH_RATE_H

#include <getopt.h>
#include <stdarg.h>
#include <linux/perf_event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include "peer.h" /* io_full, reap_child, json_error_end; latency.h */

#define RB_MAGIC 0x74727a65u /* "ezrt" */
#define RB_MAX_NODES 16
#define RB_POLL_MS 200

typedef struct rb_hdr {
  uint32_t magic, flags; /* F_MEASURE, F_END (peer.h) */
  uint64_t seq, t_ns;    /* sequence number, CLOCK_MONOTONIC send time at the source */
  uint32_t stages, src;  /* stages passed; which source (fanin) */
  uint64_t sum;          /* the last stage's checksum */
} rb_hdr;                /* 40 bytes */

enum { RB_SOURCE, RB_STAGE, RB_SINK };
static const char *const rb_role_names[] = {"source", "stage", "sink"};

typedef struct rb_node {
  int role;
  int in, out;         /* topic numbers, -1: none */
  unsigned downstream; /* subscribers its publisher waits for before the start */
  unsigned idx;        /* a source's number (fanin: 0 .. sources - 1), else 0 */
} rb_node;

static struct {
  bool pipeline, fanin, null, json, syscalls;
  double rate, duration, warmup;
  size_t size;
  unsigned stages, sinks, work, sources;
} O = {false, false, false, false, false, 1000, 2.0, 0.5, 256, 4, 3, 8, 8};

/* A received message: the transport's zero-copy view. */
typedef struct rb_view {
  const void *data;
  size_t len;
  _Alignas(16) unsigned char priv[128];
} rb_view;

typedef struct rb_ep rb_ep; /* one process's endpoints, defined by the transport */

/* ---- the transport: defined by the includer ------------------------------------------------ */
static const char *tp_impl(void);
static void tp_json_extra(void); /* prints `"key": value, ` pairs */
/* In the coordinator, after forking: where the nodes meet (ours: a private graph server). */
static int tp_coord_start(char *where, size_t cap, char *err, size_t errcap);
static void tp_coord_stop(void);
/* In a node: create its subscriber and publisher; wait for `downstream` subscribers. */
static int tp_open(const rb_node *nd, const char *where, rb_ep **out, char *err, size_t errcap);
static int tp_wait(rb_ep *e, const rb_node *nd, uint64_t deadline, char *err, size_t errcap);
static int tp_send(rb_ep *e, const void *buf, size_t len, uint64_t hard); /* 0, or error */
static int tp_recv(rb_ep *e, rb_view *v, uint64_t hard);                  /* 0, or error */
static void tp_release(rb_ep *e, rb_view *v);
static void tp_close(rb_ep *e, uint64_t hard); /* after delivering what was sent */
static const char *tp_strerror(int rc);

/* ---- what a node reports ------------------------------------------------------------------- */
typedef struct rb_result {
  int32_t rc;
  char err[200];
  uint64_t sent, missed, count, lost, late, corrupt;
  uint64_t utime_ns, stime_ns, nvcsw, nivcsw, work_ns;
  int64_t syscalls; /* -1: not counted */
  uint64_t hist[H_N];
} rb_result;

__attribute__((format(printf, 3, 4))) static void rb_fail(rb_result *r, int rc, const char *fmt,
                                                          ...) {
  if (r->rc) return;
  r->rc = rc ? rc : -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->err, sizeof r->err, fmt, ap);
  va_end(ap);
}

/* CPU, context switches and system calls of this process (every thread) at a moment. */
typedef struct rb_usage {
  uint64_t utime_ns, stime_ns, nvcsw, nivcsw;
  int64_t syscalls;
} rb_usage;

static int rb_sys_fd = -1;

/* Opens the system-call counter of this process: before any thread starts (they inherit it). */
static void rb_sys_open(void) {
  FILE *f = fopen("/sys/kernel/tracing/events/raw_syscalls/sys_enter/id", "r");
  if (!f) f = fopen("/sys/kernel/debug/tracing/events/raw_syscalls/sys_enter/id", "r");
  unsigned long long id = 0;
  if (!f) return;
  if (fscanf(f, "%llu", &id) != 1) id = 0;
  fclose(f);
  struct perf_event_attr a = {
      .type = PERF_TYPE_TRACEPOINT, .size = sizeof a, .config = id, .inherit = 1};
  if (id) rb_sys_fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
}

static rb_usage rb_usage_now(void) {
  rb_usage u = {.syscalls = -1};
  struct rusage ru;
  if (!getrusage(RUSAGE_SELF, &ru)) {
    u.utime_ns = (uint64_t)ru.ru_utime.tv_sec * 1000000000u + (uint64_t)ru.ru_utime.tv_usec * 1000u;
    u.stime_ns = (uint64_t)ru.ru_stime.tv_sec * 1000000000u + (uint64_t)ru.ru_stime.tv_usec * 1000u;
    u.nvcsw = (uint64_t)ru.ru_nvcsw;
    u.nivcsw = (uint64_t)ru.ru_nivcsw;
  }
  uint64_t v;
  if (rb_sys_fd >= 0 && read(rb_sys_fd, &v, sizeof v) == (ssize_t)sizeof v) u.syscalls = (int64_t)v;
  return u;
}

static void rb_usage_store(rb_result *r, const rb_usage *a, const rb_usage *b) {
  r->utime_ns = b->utime_ns - a->utime_ns;
  r->stime_ns = b->stime_ns - a->stime_ns;
  r->nvcsw = b->nvcsw - a->nvcsw;
  r->nivcsw = b->nivcsw - a->nivcsw;
  r->syscalls = a->syscalls >= 0 && b->syscalls >= 0 ? b->syscalls - a->syscalls - 2 : -1;
}

/* A stage's fixed work: `passes` rounds of FNV-1a over the frame, each seeded with the last. */
static uint64_t rb_work(const void *data, size_t len, unsigned passes) {
  const uint8_t *p = data;
  uint64_t h = 14695981039346656037ull;
  for (unsigned k = 0; k < passes; k++)
    for (size_t i = 0; i < len; i++)
      h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static uint64_t rb_hard(uint64_t t_go) {
  return t_go + (uint64_t)((O.warmup + 2 * O.duration + 10) * 1e9);
}

/* ---- the roles ----------------------------------------------------------------------------- */

static void rb_sleep_until(uint64_t t) {
  struct timespec ts = {(time_t)(t / 1000000000u), (long)(t % 1000000000u)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

static void rb_source(rb_ep *e, unsigned idx, uint64_t t_go, rb_result *r) {
  uint64_t period = (uint64_t)(1e9 / O.rate), t_meas = t_go + (uint64_t)(O.warmup * 1e9);
  uint64_t t_stop = t_meas + (uint64_t)(O.duration * 1e9), hard = rb_hard(t_go);
  uint8_t *buf = calloc(1, O.size);
  if (!buf) return rb_fail(r, -1, "out of memory");
  rb_hdr h = {.magic = RB_MAGIC, .src = idx};
  rb_usage u0 = {0}, u1;
  bool measuring = false;
  prctl(PR_SET_TIMERSLACK, 1UL);
  for (uint64_t due = t_go;; due += period) {
    uint64_t now = now_ns();
    if (now < due) {
      rb_sleep_until(due);
      now = now_ns();
    }
    if (now >= due + period) { /* woke up a period or more late: skip those deadlines */
      uint64_t skip = (now - due) / period;
      if (measuring) r->missed += skip;
      due += skip * period;
    }
    if (due >= t_stop) break;
    if (due >= t_meas && !measuring) {
      measuring = true;
      u0 = rb_usage_now();
    }
    h.flags = measuring ? F_MEASURE : 0;
    h.t_ns = now_ns();
    memcpy(buf, &h, sizeof h);
    int rc = O.null ? 0 : tp_send(e, buf, O.size, hard);
    if (rc) {
      rb_fail(r, rc, "send %llu: %s", (unsigned long long)h.seq, tp_strerror(rc));
      break;
    }
    if (measuring) r->sent++;
    h.seq++;
  }
  u1 = rb_usage_now();
  rb_usage_store(r, &u0, &u1);
  h.flags = F_END;
  h.t_ns = now_ns();
  int rc = O.null || r->rc ? 0 : tp_send(e, &h, sizeof h, hard);
  if (rc) rb_fail(r, rc, "send END: %s", tp_strerror(rc));
  free(buf);
}

/* A stage (forwards) or a sink (checks and measures), until END. */
static void rb_receiver(rb_ep *e, int role, uint64_t t_go, rb_result *r) {
  uint64_t hard = rb_hard(t_go), next[RB_MAX_NODES] = {0};
  uint8_t *buf = role == RB_STAGE ? calloc(1, O.size) : NULL;
  if (role == RB_STAGE && !buf) return rb_fail(r, -1, "out of memory");
  rb_usage u0 = {0}, u1 = {0};
  bool seen[RB_MAX_NODES] = {false}, measuring = false;
  unsigned want_stages = O.pipeline ? O.stages : 0, ends = 0, sources = O.fanin ? O.sources : 1;
  for (;;) {
    rb_view v;
    int rc = tp_recv(e, &v, hard);
    if (rc) {
      rb_fail(r, rc, "receive (after %llu measured): %s", (unsigned long long)r->count,
              tp_strerror(rc));
      break;
    }
    uint64_t t = now_ns();
    rb_hdr h = {0};
    if (v.len >= sizeof h) memcpy(&h, v.data, sizeof h);
    if (h.magic != RB_MAGIC || h.src >= sources) {
      r->corrupt++;
      tp_release(e, &v);
      continue;
    }
    bool end = (h.flags & F_END) && ++ends == sources; /* (the last source's END) */
    if (end || (!measuring && (h.flags & F_MEASURE))) {
      rb_usage u = rb_usage_now();
      if (end) u1 = u;
      if (!end) u0 = u, measuring = true;
    }
    if (!(h.flags & F_END)) {
      uint64_t *nx = &next[h.src];
      if (!seen[h.src] || h.seq == *nx)
        seen[h.src] = true, *nx = h.seq + 1;
      else if (h.seq > *nx)
        r->lost += h.seq - *nx, *nx = h.seq + 1;
      else
        r->late++;
      if (h.flags & F_MEASURE) r->count++;
    } else if (!end) { /* another source's END: not forwarded (no stage in fanin) */
      tp_release(e, &v);
      continue;
    }
    if (role == RB_STAGE) {
      size_t len = v.len > O.size ? O.size : v.len;
      uint64_t w0 = now_ns();
      if (!end) h.sum = rb_work(v.data, v.len, O.work), h.stages++;
      if (!end && (h.flags & F_MEASURE)) r->work_ns += now_ns() - w0;
      memcpy(buf, v.data, len);
      memcpy(buf, &h, sizeof h);
      tp_release(e, &v);
      if ((rc = tp_send(e, buf, len, hard))) {
        rb_fail(r, rc, "forward %llu: %s", (unsigned long long)h.seq, tp_strerror(rc));
        break;
      }
    } else {
      if (!end && (v.len != O.size || h.stages != want_stages)) r->corrupt++;
      if (!end && (h.flags & F_MEASURE)) r->hist[h_index(t > h.t_ns ? t - h.t_ns : 0)]++;
      tp_release(e, &v);
    }
    if (end) break;
  }
  if (!r->rc) rb_usage_store(r, &u0, &u1);
  free(buf);
}

/* ---- processes ----------------------------------------------------------------------------- */

static rb_node rb_nodes[RB_MAX_NODES];
static unsigned rb_n;

static void rb_topology(void) {
  rb_n = 0;
  if (O.fanin) {
    for (unsigned i = 0; i < O.sources; i++)
      rb_nodes[rb_n++] = (rb_node){RB_SOURCE, -1, 0, 1, i};
    rb_nodes[rb_n++] = (rb_node){RB_SINK, 0, -1, 0, 0};
    return;
  }
  rb_nodes[rb_n++] = (rb_node){RB_SOURCE, -1, 0, O.pipeline ? 1 : O.null ? 0 : 1, 0};
  if (O.null) return;
  unsigned st = O.pipeline ? O.stages : 0;
  for (unsigned i = 0; i < st; i++)
    rb_nodes[rb_n++] = (rb_node){RB_STAGE, (int)i, (int)i + 1, i + 1 == st ? O.sinks : 1, 0};
  for (unsigned i = 0; i < (O.pipeline ? O.sinks : 1); i++)
    rb_nodes[rb_n++] = (rb_node){RB_SINK, (int)st, -1, 0, 0};
}

/* A node's process: setup (answered), wait for its subscribers (answered), run from t_go. */
__attribute__((noreturn)) static void rb_child(const rb_node *nd, int fd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  signal(SIGPIPE, SIG_IGN);
  alarm((unsigned)(O.warmup + 2 * O.duration + 90));
  static rb_result r;
  uint64_t dl = now_ns() + 30000000000u, t_go = 0;
  char where[256];
  if (io_full(fd, where, sizeof where, false, dl)) _exit(3);
  where[sizeof where - 1] = 0;
  if (O.syscalls) rb_sys_open();
  rb_ep *e = NULL;
  int rc = O.null ? 0 : tp_open(nd, where, &e, r.err, sizeof r.err);
  if (rc) r.rc = rc;
  if (io_full(fd, &r, sizeof r, true, dl) || rc) _exit(4);
  uint8_t step;
  if (io_full(fd, &step, 1, false, dl)) _exit(3);
  if (!O.null && (rc = tp_wait(e, nd, dl, r.err, sizeof r.err))) r.rc = rc;
  if (io_full(fd, &r, sizeof r, true, dl) || rc) _exit(4);
  if (io_full(fd, &t_go, sizeof t_go, false, dl + 5000000000u) || !t_go) _exit(3);
  rb_sleep_until(t_go);
  if (nd->role == RB_SOURCE)
    rb_source(e, nd->idx, t_go, &r);
  else
    rb_receiver(e, nd->role, t_go, &r);
  if (!O.null) tp_close(e, rb_hard(t_go));
  io_full(fd, &r, sizeof r, true, rb_hard(t_go) + 5000000000u);
  _exit(0);
}

static rb_result rb_res[RB_MAX_NODES];

/* Forks the nodes, sets them up one at a time, starts them together and collects their results.
 * 0, or -1 with the reason in *err. */
static int rb_run(char *err, size_t errcap) {
  pid_t pid[RB_MAX_NODES];
  int fd[RB_MAX_NODES], rc = 0;
  unsigned forked = 0;
  fflush(stdout);
  for (unsigned i = 0; i < rb_n; i++) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) break;
    if ((pid[i] = fork()) < 0) {
      close(sv[0]), close(sv[1]);
      break;
    }
    if (pid[i] == 0) {
      for (unsigned j = 0; j < i; j++)
        close(fd[j]);
      close(sv[0]);
      rb_child(&rb_nodes[i], sv[1]);
    }
    close(sv[1]);
    fd[forked++] = sv[0];
  }
  if (forked < rb_n) rc = -1, snprintf(err, errcap, "fork: %s", strerror(errno));
  char where[256] = {0};
  if (!rc && tp_coord_start(where, sizeof where, err, errcap)) rc = -1;
  uint64_t dl = now_ns() + 30000000000u;
  for (unsigned i = 0; i < forked && !rc; i++) { /* one at a time: no two join at once */
    if (io_full(fd[i], where, sizeof where, true, dl) ||
        io_full(fd[i], &rb_res[i], sizeof rb_res[i], false, dl))
      rc = -1, snprintf(err, errcap, "node %u did not start", i);
    else if (rb_res[i].rc)
      rc = -1, snprintf(err, errcap, "node %u: %s", i, rb_res[i].err);
  }
  for (unsigned i = 0; i < forked && !rc; i++)
    if (io_full(fd[i], "W", 1, true, dl)) rc = -1;
  for (unsigned i = 0; i < forked && !rc; i++) {
    if (io_full(fd[i], &rb_res[i], sizeof rb_res[i], false, dl))
      rc = -1, snprintf(err, errcap, "node %u did not get ready", i);
    else if (rb_res[i].rc)
      rc = -1, snprintf(err, errcap, "node %u: %s", i, rb_res[i].err);
  }
  uint64_t t_go = rc ? 0 : now_ns() + 50000000u;
  for (unsigned i = 0; i < forked && !rc; i++)
    if (io_full(fd[i], &t_go, sizeof t_go, true, dl)) rc = -1;
  for (unsigned i = 0; i < forked && !rc; i++) {
    if (io_full(fd[i], &rb_res[i], sizeof rb_res[i], false, rb_hard(t_go) + 8000000000u))
      rc = -1, snprintf(err, errcap, "node %u did not report (killed)", i);
    else if (rb_res[i].rc && !err[0])
      snprintf(err, errcap, "node %u (%s): %s", i, rb_role_names[rb_nodes[i].role], rb_res[i].err);
  }
  if (rc && !err[0]) snprintf(err, errcap, "setup failed");
  for (unsigned i = 0; i < forked; i++) {
    close(fd[i]);
    if (rc) kill(pid[i], SIGKILL);
    reap_child(pid[i]);
  }
  tp_coord_stop();
  return rc;
}

/* ---- the report ---------------------------------------------------------------------------- */

static void rb_usage_exit(int code) {
  fprintf(
      code ? stderr : stdout,
      "usage: %s [--mode rate|pipeline|fanin] [--rate HZ] [--size B] [--duration S]\n"
      "       [--warmup S] [--stages N] [--sinks N] [--sources N] [--work PASSES] [--null]\n"
      "       [--syscalls] [--json]\n"
      "  rate: 1 source -> 1 sink at HZ (default 1000, 256 B); fanin: N sources (8), each\n"
      "  at HZ, -> 1 sink; pipeline: source (default\n"
      "  1000 Hz, 4096 B) -> N stages (4) -> N sinks (3), each stage doing PASSES (8)\n"
      "  passes of FNV-1a over the frame. --null: pacing alone, nothing sent. --syscalls:\n"
      "  count system calls too (perf tracepoint). Output: one JSON object (--json: the same).\n",
      program_invocation_short_name);
  exit(code);
}

static void rb_parse(int argc, char **argv) {
  static const struct option lo[] = {
      {"mode", 1, 0, 'm'},     {"rate", 1, 0, 'r'},   {"size", 1, 0, 's'},
      {"duration", 1, 0, 'd'}, {"warmup", 1, 0, 'w'}, {"stages", 1, 0, 'S'},
      {"sinks", 1, 0, 'k'},    {"work", 1, 0, 'W'},   {"null", 0, 0, 'n'},
      {"syscalls", 0, 0, 'y'}, {"json", 0, 0, 'j'},   {"help", 0, 0, 'h'},
      {"sources", 1, 0, 'N'},  {0, 0, 0, 0}};
  bool size_set = false;
  int c;
  while ((c = getopt_long(argc, argv, "m:r:s:d:w:S:k:W:N:nyjh", lo, NULL)) != -1) {
    switch (c) {
    case 'm':
      if (strcmp(optarg, "rate") && strcmp(optarg, "pipeline") && strcmp(optarg, "fanin"))
        rb_usage_exit(2);
      O.pipeline = !strcmp(optarg, "pipeline");
      O.fanin = !strcmp(optarg, "fanin");
      break;
    case 'N': O.sources = (unsigned)strtoul(optarg, NULL, 10); break;
    case 'r': O.rate = strtod(optarg, NULL); break;
    case 's': O.size = (size_t)strtoull(optarg, NULL, 10), size_set = true; break;
    case 'd': O.duration = strtod(optarg, NULL); break;
    case 'w': O.warmup = strtod(optarg, NULL); break;
    case 'S': O.stages = (unsigned)strtoul(optarg, NULL, 10); break;
    case 'k': O.sinks = (unsigned)strtoul(optarg, NULL, 10); break;
    case 'W': O.work = (unsigned)strtoul(optarg, NULL, 10); break;
    case 'n': O.null = true; break;
    case 'y': O.syscalls = true; break;
    case 'j': O.json = true; break;
    case 'h': rb_usage_exit(0); break;
    default: rb_usage_exit(2);
    }
  }
  if (O.pipeline && !size_set) O.size = 4096;
  if (optind != argc || O.size < sizeof(rb_hdr) || O.size > (64u << 20) || !(O.rate >= 1) ||
      O.rate > 1e6 || !(O.duration > 0) || O.duration > 3600 || O.warmup < 0 || O.warmup > 600 ||
      O.stages < 1 || O.sinks < 1 || 1 + O.stages + O.sinks > RB_MAX_NODES || O.sources < 1 ||
      O.sources + 1 > RB_MAX_NODES || (O.null && (O.pipeline || O.fanin)))
    rb_usage_exit(2);
}

static double per(double v, uint64_t n) { return n ? v / (double)n : 0; }

static int rb_main(int argc, char **argv) {
  rb_parse(argc, argv);
  signal(SIGPIPE, SIG_IGN);
  rb_topology();
  char err[300] = {0};
  rb_run(err, sizeof err);
  static uint64_t hist[H_N];
  uint64_t n = 0, missed = 0, lost = 0, late = 0, corrupt = 0, mismatch = 0, cpu = 0, vcs = 0,
           ics = 0;
  int64_t sys = 0;
  for (unsigned i = 0; i < rb_n; i++) /* (fanin: every source's) */
    if (rb_nodes[i].role == RB_SOURCE) n += rb_res[i].sent, missed += rb_res[i].missed;
  for (unsigned i = 0; i < rb_n; i++) {
    const rb_result *r = &rb_res[i];
    lost += r->lost, late += r->late, corrupt += r->corrupt;
    cpu += r->utime_ns + r->stime_ns, vcs += r->nvcsw, ics += r->nivcsw;
    sys = sys < 0 || r->syscalls < 0 ? -1 : sys + r->syscalls;
    if (rb_nodes[i].role == RB_SINK) {
      mismatch += r->count > n ? r->count - n : n - r->count;
      for (unsigned b = 0; b < H_N; b++)
        hist[b] += r->hist[b];
    }
  }
  if (!err[0] && (lost || late || corrupt || mismatch))
    snprintf(err, sizeof err, "delivery errors: %llu lost, %llu late, %llu corrupt, %llu mismatch",
             (unsigned long long)lost, (unsigned long long)late, (unsigned long long)corrupt,
             (unsigned long long)mismatch);
  bool ok = !err[0];
  printf("{\"impl\": \"%s\", \"mode\": \"%s\", \"sources\": %u, ", O.null ? "null" : tp_impl(),
         O.pipeline ? "pipeline"
         : O.fanin  ? "fanin"
                    : "rate",
         O.fanin ? O.sources : 1);
  tp_json_extra();
  printf("\"rate_hz\": %g, \"size\": %zu, \"duration_s\": %g, \"warmup_s\": %g, \"stages\": %u, "
         "\"sinks\": %u, \"work_passes\": %u, \"nprocs\": %u, \"ok\": %s, \"sent\": %llu, "
         "\"missed\": %llu, \"achieved_hz\": %.1f, \"lost\": %llu, \"late\": %llu, "
         "\"corrupt\": %llu, \"mismatch\": %llu, ",
         O.rate, O.size, O.duration, O.warmup, O.pipeline ? O.stages : 0,
         O.fanin ? 1 : rb_n - 1 - O.stages * O.pipeline, O.pipeline ? O.work : 0, rb_n,
         ok ? "true" : "false", (unsigned long long)n, (unsigned long long)missed,
         (double)n / O.duration, (unsigned long long)lost, (unsigned long long)late,
         (unsigned long long)corrupt, (unsigned long long)mismatch);
  printf("\"lat_p50_us\": %.2f, \"lat_p99_us\": %.2f, \"lat_p999_us\": %.2f, \"lat_max_us\": %.2f, "
         "\"cpu_us_per_msg\": %.3f, \"vcsw_per_msg\": %.3f, \"ivcsw_per_msg\": %.3f, "
         "\"syscalls_per_msg\": ",
         h_quantile(hist, 0.5) / 1e3, h_quantile(hist, 0.99) / 1e3, h_quantile(hist, 0.999) / 1e3,
         h_quantile(hist, 1.0) / 1e3, per((double)cpu / 1e3, n), per((double)vcs, n),
         per((double)ics, n));
  if (sys < 0)
    printf("null, \"procs\": [");
  else
    printf("%.3f, \"procs\": [", per((double)sys, n));
  for (unsigned i = 0; i < rb_n; i++) {
    const rb_result *r = &rb_res[i];
    printf("%s{\"role\": \"%s\", \"cpu_us_per_msg\": %.3f, \"user_us_per_msg\": %.3f, "
           "\"sys_us_per_msg\": %.3f, \"work_us_per_msg\": %.3f, \"vcsw_per_msg\": %.3f, "
           "\"ivcsw_per_msg\": %.3f, \"syscalls_per_msg\": ",
           i ? ", " : "", rb_role_names[rb_nodes[i].role],
           per((double)(r->utime_ns + r->stime_ns) / 1e3, n), per((double)r->utime_ns / 1e3, n),
           per((double)r->stime_ns / 1e3, n), per((double)r->work_ns / 1e3, n),
           per((double)r->nvcsw, n), per((double)r->nivcsw, n));
    if (r->syscalls < 0)
      printf("null}");
    else
      printf("%.3f}", per((double)r->syscalls, n));
  }
  printf("], \"error\": ");
  json_error_end(ok, err);
  return ok ? 0 : 1;
}

#endif
