/* `ezmsg perf`: throughput and latency of the data plane, after the reference's `ezmsg-perf`.
 *
 * A case is a configuration (fanout: 1 publisher -> N subscribers; fanin: N -> 1; relay: a source,
 * N relay stages and a sink; pingpong: one message back and forth), a transport (local: threads of
 * one process; shm / tcp: one process per node, tcp through ez_pub_opts.force_tcp), a message size
 * and a number of buffers. Every message carries a header (magic, flags, source, sequence number,
 * CLOCK_MONOTONIC send time), so the sinks measure publish-to-receive latency and check that
 * nothing was lost, duplicated or reordered.
 *
 * Process model: this process only coordinates and never runs a library thread when it forks.
 * Each case forks its nodes (shm, tcp) or one runner that holds every node as a thread (local);
 * the children talk to the coordinator over socketpairs: the graph server address (down), a ready
 * report (up), the start time (down) and the results (up). Every wait has a deadline, every child
 * has an alarm() and dies with the coordinator (PR_SET_PDEATHSIG), and the coordinator kills what
 * does not finish in time, by pid. Unless --address names one, each case gets a private graph
 * server (started in the coordinator after the fork, stopped after the case; for local, in the
 * runner). */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PERF_MAGIC 0x66707a65u /* "ezpf" */
#define PF_MEASURE 1u          /* sent inside the measured interval */
#define PF_END 2u              /* the source's last message */
#define MAX_NODES 66
#define MAX_CLIENTS 64
#define MAX_CASES 256
#define SETUP_GRACE_MS 20000 /* beyond --timeout: for the children to start */
#define STOP_GRACE_S 10.0    /* after the measured interval: for ENDs to arrive */
#define POLL_MS 200          /* each blocking library call waits at most this long */

/* ---- message header and latency histogram -------------------------------------------------- */

typedef struct perf_hdr {
  uint32_t magic, flags;
  uint64_t seq, t_ns;
  uint32_t src, pad;
} perf_hdr; /* 32 bytes: the smallest message size */

/* Log-linear buckets: 32 per power of two (about 3% resolution), values in nanoseconds. */
#define H_SUB_BITS 5
#define H_SUB (1u << H_SUB_BITS)
#define H_N ((64 - H_SUB_BITS) * H_SUB)

static unsigned h_index(uint64_t v) {
  if (v < H_SUB) return (unsigned)v;
  unsigned e = 63u - (unsigned)__builtin_clzll(v);
  return (e - H_SUB_BITS + 1) * H_SUB + (unsigned)((v >> (e - H_SUB_BITS)) & (H_SUB - 1));
}

static double h_value(unsigned i) { /* a bucket's midpoint */
  if (i < H_SUB) return (double)i;
  unsigned e = i / H_SUB + H_SUB_BITS - 1, sub = i % H_SUB;
  double lo = (double)((uint64_t)(H_SUB + sub) << (e - H_SUB_BITS));
  return lo + (double)((uint64_t)1 << (e - H_SUB_BITS)) / 2.0;
}

static double h_quantile(const uint64_t *h, double q) {
  uint64_t total = 0;
  for (unsigned i = 0; i < H_N; i++)
    total += h[i];
  if (!total) return 0;
  uint64_t want = (uint64_t)(q * (double)total);
  if (want < 1) want = 1;
  uint64_t acc = 0;
  for (unsigned i = 0; i < H_N; i++) {
    acc += h[i];
    if (acc >= want) return h_value(i);
  }
  return h_value(H_N - 1);
}

/* ---- cases and nodes ------------------------------------------------------------------------ */

enum { CFG_FANOUT, CFG_FANIN, CFG_RELAY, CFG_PINGPONG, N_CFG };
enum { TR_LOCAL, TR_SHM, TR_TCP, N_TR };
static const char *const cfg_names[] = {"fanout", "fanin", "relay", "pingpong"};
static const char *const tr_names[] = {"local", "shm", "tcp"};

typedef struct perf_case {
  int cfg, tr;
  unsigned n;
  size_t size;
  uint32_t nbuf;
  double duration_s, warmup_s;
  bool copy;
  uint64_t buf_size; /* initial slot room; 0: the message size plus framing (no growth) */
} perf_case;

enum { R_SOURCE, R_SINK, R_RELAY, R_PING, R_PONG };

/* What a node reports (sent whole over a socketpair). */
typedef struct node_result {
  int32_t rc; /* 0, an EZ_E* code, or -1 for a harness failure (see err) */
  char err[200];
  uint64_t count;        /* measured messages received (sinks) or round trips (ping) */
  uint64_t sent;         /* measured messages published (sources) */
  uint64_t t0_ns, t1_ns; /* the measured interval as this node saw it */
  uint64_t lost, late, corrupt;
  uint64_t hist[H_N];
} node_result;

typedef struct node {
  int role;
  unsigned src;         /* source index (in the header) */
  char in[96], out[96]; /* topics, "" for none */
  unsigned ends;        /* sinks: ENDs to wait for */
  unsigned downstream;  /* publishers: channels to wait for (shm / tcp) */
  ez_pub *pub;
  ez_sub *sub;
  node_result res;
} node;

typedef struct topo {
  node nodes[MAX_NODES];
  unsigned n;
} topo;

static void fail(node_result *r, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(node_result *r, int rc, const char *fmt, ...) {
  if (r->rc) return; /* keep the first failure */
  r->rc = rc ? rc : -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->err, sizeof r->err, fmt, ap);
  va_end(ap);
}

static void build_topo(const perf_case *pc, unsigned tag, topo *t) {
  memset(t, 0, sizeof *t);
  char base[64];
  snprintf(base, sizeof base, "perf/%d/%u", (int)getpid(), tag);
  node *v = t->nodes;
  unsigned k = 0;
  switch (pc->cfg) {
  case CFG_FANOUT:
    v[k] = (node){.role = R_SOURCE, .downstream = pc->n};
    snprintf(v[k++].out, sizeof v->out, "%s/t", base);
    for (unsigned i = 0; i < pc->n; i++) {
      v[k] = (node){.role = R_SINK, .ends = 1};
      snprintf(v[k++].in, sizeof v->in, "%s/t", base);
    }
    break;
  case CFG_FANIN:
    for (unsigned i = 0; i < pc->n; i++) {
      v[k] = (node){.role = R_SOURCE, .src = i, .downstream = 1};
      snprintf(v[k++].out, sizeof v->out, "%s/t", base);
    }
    v[k] = (node){.role = R_SINK, .ends = pc->n};
    snprintf(v[k++].in, sizeof v->in, "%s/t", base);
    break;
  case CFG_RELAY:
    v[k] = (node){.role = R_SOURCE, .downstream = 1};
    snprintf(v[k++].out, sizeof v->out, "%s/r0", base);
    for (unsigned i = 0; i < pc->n; i++) {
      v[k] = (node){.role = R_RELAY, .downstream = 1};
      snprintf(v[k].in, sizeof v->in, "%s/r%u", base, i);
      snprintf(v[k++].out, sizeof v->out, "%s/r%u", base, i + 1);
    }
    v[k] = (node){.role = R_SINK, .ends = 1};
    snprintf(v[k++].in, sizeof v->in, "%s/r%u", base, pc->n);
    break;
  default: /* pingpong */
    v[k] = (node){.role = R_PING, .downstream = 1};
    snprintf(v[k].out, sizeof v->out, "%s/ping", base);
    snprintf(v[k++].in, sizeof v->in, "%s/pong", base);
    v[k] = (node){.role = R_PONG, .downstream = 1};
    snprintf(v[k].in, sizeof v->in, "%s/ping", base);
    snprintf(v[k++].out, sizeof v->out, "%s/pong", base);
    break;
  }
  t->n = k;
}

/* ---- small helpers -------------------------------------------------------------------------- */

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t s_to_ns(double s) { return (uint64_t)(s * 1e9); }

static void sleep_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* SIGINT / SIGTERM in the coordinator: the running case fails fast (its children are killed and
 * its graph server stopped) and no further case starts. */
static volatile sig_atomic_t g_interrupted;
static void on_interrupt(int sig) { g_interrupted = sig; }

/* Reads or writes exactly n bytes before the deadline. 0, or -1 (timeout, EOF, error or
 * interrupted). */
static int io_full(int fd, void *buf, size_t n, bool wr, uint64_t deadline) {
  uint8_t *p = buf;
  while (n) {
    if (g_interrupted) return -1;
    uint64_t now = now_ns();
    if (now >= deadline) return -1;
    struct pollfd pfd = {fd, wr ? POLLOUT : POLLIN, 0};
    uint64_t left_ms = (deadline - now) / 1000000u + 1;
    int pr = poll(&pfd, 1, left_ms > 1000 ? 1000 : (int)left_ms);
    if (pr < 0 && errno != EINTR) return -1;
    if (pr <= 0) continue;
    ssize_t k = wr ? send(fd, p, n, MSG_NOSIGNAL) : read(fd, p, n);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* The deadline for everything after the start: the measured run plus a grace period. */
static uint64_t hard_deadline(const perf_case *pc, uint64_t t_go) {
  return t_go + s_to_ns(pc->warmup_s + pc->duration_s + STOP_GRACE_S + pc->duration_s);
}

/* ---- node setup ----------------------------------------------------------------------------- */

static int make_pub(ez_context *ctx, node *nd, const perf_case *pc) {
  if (!nd->out[0]) return 0;
  ez_pub_opts o;
  ez_pub_opts_init(&o);
  o.num_buffers = pc->nbuf;
  o.buf_size = pc->buf_size ? pc->buf_size : pc->size + 128; /* + framing: no segment growth */
  o.force_tcp = pc->tr == TR_TCP;
  int rc = ez_pub_create(ctx, nd->out, &o, &nd->pub);
  if (rc) fail(&nd->res, rc, "publisher on %s: %s", nd->out, ez_strerror(rc));
  return rc;
}

static int make_sub(ez_context *ctx, node *nd) {
  if (!nd->in[0]) return 0;
  int rc = ez_sub_create(ctx, nd->in, NULL, &nd->sub);
  if (rc) fail(&nd->res, rc, "subscriber on %s: %s", nd->in, ez_strerror(rc));
  return rc;
}

static void node_close(node *nd) {
  ez_sub_destroy(nd->sub);
  ez_pub_destroy(nd->pub);
  nd->sub = NULL;
  nd->pub = NULL;
}

/* ---- the roles ------------------------------------------------------------------------------ */

/* Publishes `len` bytes starting with *h (stamped at the last moment); retries through
 * backpressure until `hard`. */
static int publish_hdr(ez_pub *pub, const perf_case *pc, uint8_t *copybuf, perf_hdr *h, size_t len,
                       uint64_t hard) {
  for (;;) {
    int rc;
    if (pc->copy) {
      h->t_ns = now_ns();
      memcpy(copybuf, h, sizeof *h);
      rc = ez_publish(pub, copybuf, len, POLL_MS);
    } else {
      void *b = NULL;
      rc = ez_pub_loan(pub, len, &b, POLL_MS);
      if (!rc) {
        h->t_ns = now_ns();
        memcpy(b, h, sizeof *h);
        rc = ez_pub_commit(pub, len);
      }
    }
    if (rc != EZ_ETIMEDOUT) return rc;
    if (now_ns() > hard) return EZ_ETIMEDOUT;
  }
}

/* Forwards bytes as they are (a relay or the pong side), retrying through backpressure. */
static int forward(ez_pub *pub, const void *data, size_t len, uint64_t hard) {
  for (;;) {
    int rc = ez_publish(pub, data, len, POLL_MS);
    if (rc != EZ_ETIMEDOUT) return rc;
    if (now_ns() > hard) return EZ_ETIMEDOUT;
  }
}

/* Waits for the next message until `hard`. */
static int recv_until(ez_sub *sub, ez_msg *m, uint64_t hard) {
  for (;;) {
    int rc = ez_recv(sub, m, POLL_MS);
    if (rc != EZ_ETIMEDOUT && rc != EZ_EAGAIN) return rc;
    if (now_ns() > hard) return EZ_ETIMEDOUT;
  }
}

static bool read_hdr(const ez_msg *m, perf_hdr *h) {
  if (m->len < sizeof *h) return false;
  memcpy(h, m->data, sizeof *h);
  return h->magic == PERF_MAGIC;
}

static void run_source(node *nd, const perf_case *pc, uint64_t t_go) {
  node_result *r = &nd->res;
  uint64_t t_meas = t_go + s_to_ns(pc->warmup_s), t_stop = t_meas + s_to_ns(pc->duration_s);
  uint64_t hard = hard_deadline(pc, t_go);
  uint8_t *copybuf = pc->copy ? calloc(1, pc->size) : NULL;
  if (pc->copy && !copybuf) return fail(r, EZ_ENOMEM, "out of memory");
  perf_hdr h = {.magic = PERF_MAGIC, .src = nd->src};
  int rc = 0;
  /* One clock read per message: the send stamp of the previous one tells the time. */
  for (uint64_t t = now_ns(); t < t_stop; t = h.t_ns) {
    h.flags = t >= t_meas ? PF_MEASURE : 0;
    if ((rc = publish_hdr(nd->pub, pc, copybuf, &h, pc->size, hard))) break;
    if (h.flags & PF_MEASURE) {
      if (!r->sent) r->t0_ns = h.t_ns;
      r->sent++;
    }
    h.seq++;
  }
  r->t1_ns = now_ns();
  if (rc) {
    fail(r, rc, "publish %llu: %s", (unsigned long long)h.seq, ez_strerror(rc));
  } else {
    h.flags = PF_END;
    rc = publish_hdr(nd->pub, pc, copybuf, &h, sizeof h, hard);
    if (!rc) {
      uint64_t now = now_ns();
      rc = ez_pub_flush(nd->pub, now < hard ? (int)((hard - now) / 1000000u) + 1 : 0);
    }
    if (rc) fail(r, rc, "end of run (publish END, flush): %s", ez_strerror(rc));
  }
  free(copybuf);
}

typedef struct seqstate {
  bool seen;
  uint64_t next;
} seqstate;

static void run_sink(node *nd, const perf_case *pc, uint64_t t_go) {
  node_result *r = &nd->res;
  uint64_t hard = hard_deadline(pc, t_go);
  seqstate seqs[MAX_CLIENTS] = {{0}};
  unsigned ends = 0;
  while (ends < nd->ends) {
    ez_msg m;
    int rc = recv_until(nd->sub, &m, hard);
    if (rc) {
      fail(r, rc, "receive (after %llu messages, %u of %u ENDs): %s", (unsigned long long)r->count,
           ends, nd->ends, ez_strerror(rc));
      break;
    }
    uint64_t t = now_ns();
    perf_hdr h;
    if (!read_hdr(&m, &h) || h.src >= MAX_CLIENTS) {
      r->corrupt++;
      ez_msg_release(&m);
      continue;
    }
    if (h.flags & PF_END) {
      ends++;
      r->t1_ns = t;
      ez_msg_release(&m);
      continue;
    }
    seqstate *s = &seqs[h.src];
    if (!s->seen || h.seq == s->next) {
      s->seen = true;
      s->next = h.seq + 1;
    } else if (h.seq > s->next) {
      r->lost += h.seq - s->next;
      s->next = h.seq + 1;
    } else {
      r->late++; /* a duplicate or a reordered message */
    }
    if (m.len != pc->size) r->corrupt++;
    if (h.flags & PF_MEASURE) {
      if (!r->count) r->t0_ns = t;
      r->count++;
      r->hist[h_index(t > h.t_ns ? t - h.t_ns : 0)]++;
    }
    ez_msg_release(&m);
  }
}

static void run_relay(node *nd, const perf_case *pc, uint64_t t_go) {
  node_result *r = &nd->res;
  uint64_t hard = hard_deadline(pc, t_go);
  for (;;) {
    ez_msg m;
    int rc = recv_until(nd->sub, &m, hard);
    if (rc) return fail(r, rc, "relay receive: %s", ez_strerror(rc));
    perf_hdr h;
    bool end = read_hdr(&m, &h) && (h.flags & PF_END);
    rc = forward(nd->pub, m.data, m.len, hard);
    ez_msg_release(&m);
    if (rc) return fail(r, rc, "relay publish: %s", ez_strerror(rc));
    if (end) break;
  }
  uint64_t now = now_ns();
  int rc = ez_pub_flush(nd->pub, now < hard ? (int)((hard - now) / 1000000u) + 1 : 0);
  if (rc) fail(r, rc, "relay flush: %s", ez_strerror(rc));
}

static void run_ping(node *nd, const perf_case *pc, uint64_t t_go) {
  node_result *r = &nd->res;
  uint64_t t_meas = t_go + s_to_ns(pc->warmup_s), t_stop = t_meas + s_to_ns(pc->duration_s);
  uint64_t hard = hard_deadline(pc, t_go);
  uint8_t *copybuf = pc->copy ? calloc(1, pc->size) : NULL;
  if (pc->copy && !copybuf) return fail(r, EZ_ENOMEM, "out of memory");
  perf_hdr h = {.magic = PERF_MAGIC};
  int rc = 0;
  while (!rc && now_ns() < t_stop) {
    h.flags = now_ns() >= t_meas ? PF_MEASURE : 0;
    if ((rc = publish_hdr(nd->pub, pc, copybuf, &h, pc->size, hard))) {
      fail(r, rc, "ping publish: %s", ez_strerror(rc));
      break;
    }
    ez_msg m;
    if ((rc = recv_until(nd->sub, &m, hard))) {
      fail(r, rc, "ping receive (seq %llu): %s", (unsigned long long)h.seq, ez_strerror(rc));
      break;
    }
    uint64_t t = now_ns();
    perf_hdr back = {0};
    if (!read_hdr(&m, &back) || back.seq != h.seq || m.len != pc->size) {
      r->corrupt++;
      rc = -1;
      fail(r, -1, "ping: reply %llu does not match request %llu", (unsigned long long)back.seq,
           (unsigned long long)h.seq);
    } else if (h.flags & PF_MEASURE) {
      if (!r->count) r->t0_ns = h.t_ns;
      r->count++;
      r->t1_ns = t;
      r->hist[h_index(t - h.t_ns)]++;
    }
    ez_msg_release(&m);
    h.seq++;
  }
  h.flags = PF_END; /* the pong side stops at END, also after a failure here */
  int erc = publish_hdr(nd->pub, pc, copybuf, &h, sizeof h, now_ns() + 2000000000u);
  if (!erc) erc = ez_pub_flush(nd->pub, 2000);
  if (erc && !rc) fail(r, erc, "ping END: %s", ez_strerror(erc));
  free(copybuf);
}

static void run_pong(node *nd, const perf_case *pc, uint64_t t_go) {
  node_result *r = &nd->res;
  uint64_t hard = hard_deadline(pc, t_go);
  for (;;) {
    ez_msg m;
    int rc = recv_until(nd->sub, &m, hard);
    if (rc) return fail(r, rc, "pong receive: %s", ez_strerror(rc));
    perf_hdr h;
    if (read_hdr(&m, &h) && (h.flags & PF_END)) {
      ez_msg_release(&m);
      return;
    }
    rc = forward(nd->pub, m.data, m.len, hard);
    ez_msg_release(&m);
    if (rc) return fail(r, rc, "pong publish: %s", ez_strerror(rc));
  }
}

static void run_node(node *nd, const perf_case *pc, uint64_t t_go) {
  uint64_t now = now_ns();
  if (t_go > now) sleep_ns(t_go - now);
  switch (nd->role) {
  case R_SOURCE: run_source(nd, pc, t_go); break;
  case R_SINK: run_sink(nd, pc, t_go); break;
  case R_RELAY: run_relay(nd, pc, t_go); break;
  case R_PING: run_ping(nd, pc, t_go); break;
  default: run_pong(nd, pc, t_go); break;
  }
}

/* ---- children ------------------------------------------------------------------------------- */

typedef struct child_setup {
  char address[300];
} child_setup;

static void child_prepare(unsigned alarm_s) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  signal(SIGPIPE, SIG_IGN);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  alarm(alarm_s);
}

/* One node in its own process (shm, tcp). Setup runs in three steps, each answered with a
 * node_result: create (the coordinator does one node at a time), wait for the downstream channels
 * (all at once), then run from the start time it sends. */
static void node_child(node *nd, const perf_case *pc, int fd, int setup_ms) {
  uint64_t deadline = now_ns() + (uint64_t)setup_ms * 1000000u;
  node_result *r = &nd->res;
  child_setup cs;
  ez_context *ctx = NULL;
  if (io_full(fd, &cs, sizeof cs, false, deadline)) _exit(3);
  cs.address[sizeof cs.address - 1] = 0;
  int rc = ez_context_open(cs.address, &ctx);
  if (rc) fail(r, rc, "context on %s: %s", cs.address, ez_strerror(rc));
  /* The pong side subscribes first, so that no two processes join each other's channels at the
   * same moment (see "Where the time goes" in bench/RESULTS.md: that can stall both for 5 s). */
  if (!rc && nd->role == R_PONG) rc = make_sub(ctx, nd);
  if (!rc) rc = make_pub(ctx, nd, pc);
  if (!rc && nd->role != R_PONG) rc = make_sub(ctx, nd);
  if (io_full(fd, r, sizeof *r, true, deadline) || rc) _exit(rc ? 4 : 3);
  uint8_t step = 0;
  if (io_full(fd, &step, 1, false, deadline) || step != 'W') _exit(3);
  /* Every edge is up before the start: wait until each downstream process has its channel. */
  while (!rc && nd->pub && ez_pub_num_channels(nd->pub) < nd->downstream) {
    if (now_ns() > deadline) {
      rc = EZ_ETIMEDOUT;
      fail(r, rc, "publisher %s: %zu of %u channels after setup", nd->out,
           ez_pub_num_channels(nd->pub), nd->downstream);
    }
    sleep_ns(1000000);
  }
  if (io_full(fd, r, sizeof *r, true, deadline) || rc) _exit(rc ? 4 : 3);
  uint64_t t_go = 0;
  if (io_full(fd, &t_go, sizeof t_go, false, deadline + s_to_ns(5)) || !t_go) _exit(3);
  run_node(nd, pc, t_go);
  if (io_full(fd, r, sizeof *r, true, hard_deadline(pc, t_go) + s_to_ns(5))) _exit(3);
  node_close(nd);
  ez_context_close(ctx);
  _exit(0);
}

typedef struct thread_arg {
  node *nd;
  const perf_case *pc;
  uint64_t t_go;
} thread_arg;

static void *node_thread(void *arg) {
  thread_arg *ta = arg;
  run_node(ta->nd, ta->pc, ta->t_go);
  return NULL;
}

/* Every node as a thread of one process (local), with its own graph server unless given one. */
static void local_child(topo *t, const perf_case *pc, const char *address, int fd) {
  ez_server *srv = NULL;
  ez_context *ctx = NULL;
  node_result *r0 = &t->nodes[0].res;
  int rc = 0;
  if (!address) {
    rc = ez_server_start("127.0.0.1:0", &srv);
    if (rc)
      fail(r0, rc, "graph server: %s", ez_strerror(rc));
    else
      address = ez_server_address(srv);
  }
  if (!rc && (rc = ez_context_open(address, &ctx)))
    fail(r0, rc, "context on %s: %s", address, ez_strerror(rc));
  for (unsigned i = 0; i < t->n && !rc; i++)
    rc = make_pub(ctx, &t->nodes[i], pc);
  for (unsigned i = 0; i < t->n && !rc; i++)
    rc = make_sub(ctx, &t->nodes[i]);
  thread_arg ta[MAX_NODES];
  pthread_t th[MAX_NODES];
  unsigned started = 0;
  uint64_t t_go = now_ns() + 20000000u;
  for (unsigned i = 0; i < t->n && !rc; i++) {
    ta[i] = (thread_arg){&t->nodes[i], pc, t_go};
    if (pthread_create(&th[i], NULL, node_thread, &ta[i])) {
      fail(&t->nodes[i].res, -1, "cannot start a thread");
      rc = -1;
      break;
    }
    started++;
  }
  for (unsigned i = 0; i < started; i++)
    pthread_join(th[i], NULL);
  uint64_t send_by = now_ns() + s_to_ns(5);
  for (unsigned i = 0; i < t->n; i++)
    if (io_full(fd, &t->nodes[i].res, sizeof t->nodes[i].res, true, send_by)) _exit(3);
  for (unsigned i = 0; i < t->n; i++)
    node_close(&t->nodes[i]);
  ez_context_close(ctx);
  ez_server_stop(srv);
  _exit(0);
}

/* ---- the coordinator ------------------------------------------------------------------------ */

typedef struct case_result {
  bool ok;
  char err[240];
  uint64_t msgs, lost, late, corrupt, mismatch;
  double msgs_per_s, mb_per_s, p50_us, p99_us, max_us;
} case_result;

typedef struct kids {
  pid_t pid[MAX_NODES];
  int fd[MAX_NODES];
  unsigned n;
} kids;

static void kids_reap(kids *k, bool force) {
  uint64_t deadline = now_ns() + (force ? 0 : s_to_ns(5));
  for (unsigned i = 0; i < k->n; i++) {
    if (k->fd[i] >= 0) close(k->fd[i]);
    k->fd[i] = -1;
  }
  for (unsigned i = 0; i < k->n; i++) {
    if (k->pid[i] <= 0) continue;
    for (;;) {
      pid_t w = waitpid(k->pid[i], NULL, WNOHANG);
      if (w == k->pid[i] || (w < 0 && errno != EINTR)) break;
      if (now_ns() >= deadline) {
        kill(k->pid[i], SIGKILL);
        while (waitpid(k->pid[i], NULL, 0) < 0 && errno == EINTR) {
        }
        break;
      }
      sleep_ns(2000000);
    }
    k->pid[i] = 0;
  }
}

/* Forks a child with one end of a new socketpair; the child closes the coordinator's ends of the
 * earlier ones. Returns the child's fd in the child (*is_child set), -1 on failure. */
static int spawn(kids *k, bool *is_child) {
  int sv[2];
  *is_child = false;
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) return -1;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    close(sv[0]);
    close(sv[1]);
    return -1;
  }
  if (pid == 0) {
    for (unsigned i = 0; i < k->n; i++)
      if (k->fd[i] >= 0) close(k->fd[i]);
    close(sv[0]);
    *is_child = true;
    return sv[1];
  }
  close(sv[1]);
  k->pid[k->n] = pid;
  k->fd[k->n++] = sv[0];
  return 0;
}

static void summarize(const perf_case *pc, topo *t, case_result *cr) {
  static uint64_t hist[H_N];
  memset(hist, 0, sizeof hist);
  uint64_t sent = 0;
  for (unsigned i = 0; i < t->n; i++) {
    node_result *r = &t->nodes[i].res;
    if (r->rc && cr->ok) {
      cr->ok = false;
      snprintf(cr->err, sizeof cr->err, "node %u: %s", i, r->err);
    }
    if (t->nodes[i].role == R_SOURCE) sent += r->sent;
    cr->lost += r->lost;
    cr->late += r->late;
    cr->corrupt += r->corrupt;
  }
  for (unsigned i = 0; i < t->n; i++) {
    node *nd = &t->nodes[i];
    node_result *r = &nd->res;
    if (nd->role != R_SINK && nd->role != R_PING) continue;
    for (unsigned b = 0; b < H_N; b++)
      hist[b] += r->hist[b];
    cr->msgs += r->count;
    if (r->count > 1 && r->t1_ns > r->t0_ns)
      cr->msgs_per_s += (double)r->count * 1e9 / (double)(r->t1_ns - r->t0_ns);
    if (nd->role == R_SINK && r->count != sent)
      cr->mismatch += r->count > sent ? r->count - sent : sent - r->count;
  }
  cr->mb_per_s = cr->msgs_per_s * (double)pc->size / 1e6;
  cr->p50_us = h_quantile(hist, 0.50) / 1000.0;
  cr->p99_us = h_quantile(hist, 0.99) / 1000.0;
  cr->max_us = h_quantile(hist, 1.0) / 1000.0;
  if (cr->ok && (cr->lost || cr->late || cr->corrupt || cr->mismatch)) {
    cr->ok = false;
    snprintf(cr->err, sizeof cr->err,
             "delivery errors: %llu lost, %llu late (duplicated or reordered), %llu corrupt, "
             "%llu sent-vs-received mismatch",
             (unsigned long long)cr->lost, (unsigned long long)cr->late,
             (unsigned long long)cr->corrupt, (unsigned long long)cr->mismatch);
  }
}

static void run_case(const perf_case *pc, unsigned tag, const char *address, int setup_ms,
                     case_result *cr) {
  static topo t;
  build_topo(pc, tag, &t);
  memset(cr, 0, sizeof *cr);
  cr->ok = true;
  kids k = {.n = 0};
  bool is_child;
  unsigned alarm_s =
      (unsigned)(setup_ms / 1000 + pc->warmup_s + 2 * pc->duration_s + STOP_GRACE_S + 30);
  ez_server *srv = NULL;

  if (pc->tr == TR_LOCAL) {
    int fd = spawn(&k, &is_child);
    if (is_child) {
      child_prepare(alarm_s);
      local_child(&t, pc, address, fd);
    }
    if (fd < 0) {
      snprintf(cr->err, sizeof cr->err, "fork: %s", strerror(errno));
      cr->ok = false;
      return;
    }
    uint64_t deadline = now_ns() + (uint64_t)setup_ms * 1000000u +
                        s_to_ns(pc->warmup_s + 2 * pc->duration_s + STOP_GRACE_S + 5);
    for (unsigned i = 0; i < t.n; i++) {
      if (io_full(k.fd[0], &t.nodes[i].res, sizeof t.nodes[i].res, false, deadline)) {
        snprintf(cr->err, sizeof cr->err, "the local runner did not report in time (killed)");
        cr->ok = false;
        kids_reap(&k, true);
        return;
      }
    }
    kids_reap(&k, false);
    summarize(pc, &t, cr);
    return;
  }

  /* shm / tcp: one process per node, forked before this process starts any thread. */
  for (unsigned i = 0; i < t.n; i++) {
    int fd = spawn(&k, &is_child);
    if (is_child) {
      child_prepare(alarm_s);
      node_child(&t.nodes[i], pc, fd, setup_ms);
    }
    if (fd < 0) {
      snprintf(cr->err, sizeof cr->err, "fork: %s", strerror(errno));
      cr->ok = false;
      kids_reap(&k, true);
      return;
    }
  }
  child_setup cs = {{0}};
  int rc = 0;
  if (!address) {
    rc = ez_server_start("127.0.0.1:0", &srv);
    if (rc)
      snprintf(cr->err, sizeof cr->err, "graph server: %s", ez_strerror(rc));
    else
      snprintf(cs.address, sizeof cs.address, "%s", ez_server_address(srv));
  } else {
    snprintf(cs.address, sizeof cs.address, "%s", address);
  }
  uint64_t deadline = now_ns() + (uint64_t)setup_ms * 1000000u;
  /* Create one node at a time (see node_child), then let all wait for their channels. */
  for (unsigned i = 0; i < k.n && !rc; i++) {
    if (io_full(k.fd[i], &cs, sizeof cs, true, deadline) ||
        io_full(k.fd[i], &t.nodes[i].res, sizeof t.nodes[i].res, false, deadline)) {
      rc = -1;
      snprintf(cr->err, sizeof cr->err, "node %u did not start in time", i);
    } else if (t.nodes[i].res.rc) {
      rc = -1;
      snprintf(cr->err, sizeof cr->err, "node %u: %s", i, t.nodes[i].res.err);
    }
  }
  uint8_t wait_step = 'W';
  for (unsigned i = 0; i < k.n && !rc; i++)
    if (io_full(k.fd[i], &wait_step, 1, true, deadline)) rc = -1;
  for (unsigned i = 0; i < k.n && !rc; i++) {
    if (io_full(k.fd[i], &t.nodes[i].res, sizeof t.nodes[i].res, false, deadline)) {
      rc = -1;
      snprintf(cr->err, sizeof cr->err, "node %u did not get ready in time", i);
    } else if (t.nodes[i].res.rc) {
      rc = -1;
      snprintf(cr->err, sizeof cr->err, "node %u: %s", i, t.nodes[i].res.err);
    }
  }
  uint64_t t_go = rc ? 0 : now_ns() + 20000000u;
  for (unsigned i = 0; i < k.n && !rc; i++)
    if (io_full(k.fd[i], &t_go, sizeof t_go, true, deadline)) rc = -1;
  if (!rc) {
    uint64_t end = hard_deadline(pc, t_go) + s_to_ns(5);
    for (unsigned i = 0; i < k.n; i++) {
      if (io_full(k.fd[i], &t.nodes[i].res, sizeof t.nodes[i].res, false, end)) {
        fail(&t.nodes[i].res, -1, "node %u did not report in time (killed)", i);
        rc = -1;
      }
    }
  }
  if (rc && !cr->err[0]) snprintf(cr->err, sizeof cr->err, "setup failed (a node did not answer)");
  kids_reap(&k, rc != 0);
  ez_server_stop(srv);
  if (rc && cr->err[0]) {
    cr->ok = false;
    return;
  }
  summarize(pc, &t, cr);
}

/* ---- command line --------------------------------------------------------------------------- */

typedef struct perf_opts {
  unsigned cfg_mask, tr_mask;
  size_t sizes[16];
  unsigned n_sizes;
  long n;
  long nbuf;
  double duration, warmup;
  bool json, quiet, copy;
  size_t buf_size;
} perf_opts;

static int parse_list(const char *arg, const char *const *names, int count, unsigned *mask) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", arg);
  *mask = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int found = -1;
    for (int i = 0; i < count; i++)
      if (!strcmp(tok, names[i])) found = i;
    if (!strcmp(tok, "all"))
      *mask = (1u << count) - 1;
    else if (found < 0)
      return -1;
    else
      *mask |= 1u << found;
  }
  return *mask ? 0 : -1;
}

static int parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return -1;
  if (*end == 'k' || *end == 'K')
    v <<= 10, end++;
  else if (*end == 'm' || *end == 'M')
    v <<= 20, end++;
  if (*end == 'i' || *end == 'B') end++;
  if (*end == 'B') end++;
  if (*end || v < sizeof(perf_hdr) || v > (1ull << 30)) return -1;
  *out = (size_t)v;
  return 0;
}

static int parse_double(const char *s, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= lo && v <= hi)) return -1;
  *out = v;
  return 0;
}

static int parse_long(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

enum { OPT_JSON = 'j', OPT_COPY = 2000, OPT_BUFSIZE, OPT_WARMUP = 'w' };

static int on_opt(int opt, const char *arg, void *user) {
  perf_opts *o = user;
  switch (opt) {
  case 'c': return parse_list(arg, cfg_names, N_CFG, &o->cfg_mask);
  case 'T': return parse_list(arg, tr_names, N_TR, &o->tr_mask);
  case 's': {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", arg);
    o->n_sizes = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
      if (o->n_sizes == 16 || parse_size(tok, &o->sizes[o->n_sizes])) {
        fprintf(stderr, "ezmsg perf: sizes are %zu bytes to 1G, at most 16 of them\n",
                sizeof(perf_hdr));
        return -1;
      }
      o->n_sizes++;
    }
    return o->n_sizes ? 0 : -1;
  }
  case 'n': return parse_long(arg, 1, MAX_CLIENTS, &o->n);
  case 'b': return parse_long(arg, 1, 65536, &o->nbuf);
  case 'd': return parse_double(arg, 0.01, 3600, &o->duration);
  case OPT_WARMUP: return parse_double(arg, 0, 600, &o->warmup);
  case OPT_JSON: o->json = true; return 0;
  case 'q': o->quiet = true; return 0;
  case OPT_COPY: o->copy = true; return 0;
  case OPT_BUFSIZE: return parse_size(arg, &o->buf_size);
  default: return -1;
  }
}

static const struct option perf_options[] = {
    {"config", required_argument, NULL, 'c'},
    {"transport", required_argument, NULL, 'T'},
    {"size", required_argument, NULL, 's'},
    {"clients", required_argument, NULL, 'n'},
    {"num-buffers", required_argument, NULL, 'b'},
    {"duration", required_argument, NULL, 'd'},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"copy", no_argument, NULL, OPT_COPY},
    {"buf-size", required_argument, NULL, OPT_BUFSIZE},
    {"json", no_argument, NULL, OPT_JSON},
    {"quiet", no_argument, NULL, 'q'},
    {0},
};

static const cli_spec perf_spec = {
    .name = "perf",
    .args = "",
    .about =
        "Measures the data plane: messages/s, MB/s and publish-to-receive latency (p50/p99) for\n"
        "every combination of the configurations, transports and sizes given. Each message\n"
        "carries a sequence number and a CLOCK_MONOTONIC send time; the sinks check that nothing\n"
        "was lost, duplicated or reordered (a case with delivery errors fails).\n"
        "  fanout    1 publisher -> N subscribers     fanin  N publishers -> 1 subscriber\n"
        "  relay     source -> N relays -> sink       pingpong  request/reply round trips\n"
        "Transports: local (threads of one process), shm and tcp (one process per node; tcp\n"
        "forces TCP). msgs/s is the delivery rate summed over the sinks (round trips/s for\n"
        "pingpong, whose latency is the round-trip time); throughput latency is measured under\n"
        "full load, so it includes queueing behind num_buffers messages. Publishing is zero-copy\n"
        "(ez_pub_loan: only the 32-byte header is written) unless --copy. Without --address each\n"
        "case gets a private graph server. Exit status 1 if any case failed.",
    .min_args = 0,
    .max_args = 0,
    .timeout_ms = 10000,
    .opts = perf_options,
    .opts_short = "c:T:s:n:b:d:w:jq",
    .opts_help =
        "  -c, --config LIST  fanout,fanin,relay,pingpong or all (default fanout)\n"
        "  -T, --transport LIST  local,shm,tcp or all (default all)\n"
        "  -s, --size LIST    message sizes in bytes, K/M suffixes (default 64,4K,1M; min 32)\n"
        "  -n, --clients N    subscribers (fanout), publishers (fanin), relays (relay) (default "
        "1)\n"
        "  -b, --num-buffers N  publisher ring slots (default 32)\n"
        "  -d, --duration S   measured seconds per case (default 2)\n"
        "  -w, --warmup S     unmeasured seconds before that (default 0.25)\n"
        "      --copy         publish with ez_publish (one copy) instead of a loan\n"
        "      --buf-size N   initial slot room (default: the size plus framing, so no growth)\n"
        "  -j, --json         print JSON instead of the table\n"
        "  -q, --quiet        no progress line\n"
        "  (--timeout MS bounds each case's setup)\n",
};

static void fmt_size(size_t s, char *out, size_t cap) {
  if (s >= (1u << 20) && s % (1u << 20) == 0)
    snprintf(out, cap, "%zu MiB", s >> 20);
  else if (s >= 1024 && s % 1024 == 0)
    snprintf(out, cap, "%zu KiB", s >> 10);
  else
    snprintf(out, cap, "%zu B", s);
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

int cmd_perf(int argc, char **argv) {
  perf_opts o = {.cfg_mask = 1u << CFG_FANOUT,
                 .tr_mask = (1u << N_TR) - 1,
                 .sizes = {64, 4096, 1u << 20},
                 .n_sizes = 3,
                 .n = 1,
                 .nbuf = 32,
                 .duration = 2.0,
                 .warmup = 0.25};
  cli_ctx ctx;
  int rc = cli_parse(&perf_spec, argc, argv, &ctx, on_opt, &o);
  if (rc >= 0) return rc;
  int setup_ms = (ctx.timeout_ms < 0 ? 60000 : ctx.timeout_ms) + SETUP_GRACE_MS;

  static perf_case cases[MAX_CASES];
  unsigned nc = 0;
  for (int c = 0; c < N_CFG; c++) {
    if (!(o.cfg_mask & (1u << c))) continue;
    for (int tr = 0; tr < N_TR; tr++) {
      if (!(o.tr_mask & (1u << tr))) continue;
      for (unsigned s = 0; s < o.n_sizes && nc < MAX_CASES; s++)
        cases[nc++] = (perf_case){.cfg = c,
                                  .tr = tr,
                                  .n = c == CFG_PINGPONG ? 1 : (unsigned)o.n,
                                  .size = o.sizes[s],
                                  .nbuf = (uint32_t)o.nbuf,
                                  .duration_s = o.duration,
                                  .warmup_s = o.warmup,
                                  .copy = o.copy,
                                  .buf_size = o.buf_size};
    }
  }
  static case_result res[MAX_CASES];
  bool progress = !o.quiet && isatty(STDERR_FILENO) && nc * (o.duration + o.warmup) > 3.0;
  int failures = 0;
  struct sigaction sa = {.sa_handler = on_interrupt}, old_int, old_term; /* no SA_RESTART */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  for (unsigned i = 0; i < nc; i++) {
    if (g_interrupted) {
      nc = i; /* report what ran */
      break;
    }
    const perf_case *pc = &cases[i];
    char sz[32];
    fmt_size(pc->size, sz, sizeof sz);
    if (progress) {
      fprintf(stderr, "\r\033[Kezmsg perf: %u/%u %s %s x%u %s ...", i + 1, nc, cfg_names[pc->cfg],
              tr_names[pc->tr], pc->n, sz);
      fflush(stderr);
    }
    run_case(pc, i, ctx.address, setup_ms, &res[i]);
    if (g_interrupted && !res[i].ok) snprintf(res[i].err, sizeof res[i].err, "interrupted");
    if (!res[i].ok) failures++;
  }
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  if (progress) fprintf(stderr, "\r\033[K");

  if (o.json) {
    printf("{\"tool\": \"ezmsg perf\", \"version\": \"%s\", \"results\": [", EZ_VERSION);
    for (unsigned i = 0; i < nc; i++) {
      const perf_case *pc = &cases[i];
      const case_result *cr = &res[i];
      printf("%s\n  {\"impl\": \"ezmsg-c\", \"config\": \"%s\", \"transport\": \"%s\", \"n\": %u, "
             "\"size\": %zu, \"num_buffers\": %u, \"duration_s\": %g, \"copy\": %s, \"ok\": %s, ",
             i ? "," : "", cfg_names[pc->cfg], tr_names[pc->tr], pc->n, pc->size, pc->nbuf,
             pc->duration_s, pc->copy ? "true" : "false", cr->ok ? "true" : "false");
      printf("\"msgs\": %llu, \"msgs_per_s\": %.1f, \"mb_per_s\": %.3f, \"lat_p50_us\": %.2f, "
             "\"lat_p99_us\": %.2f, \"lat_max_us\": %.2f, \"lost\": %llu, \"late\": %llu, "
             "\"corrupt\": %llu, \"mismatch\": %llu, \"error\": ",
             (unsigned long long)cr->msgs, cr->msgs_per_s, cr->mb_per_s, cr->p50_us, cr->p99_us,
             cr->max_us, (unsigned long long)cr->lost, (unsigned long long)cr->late,
             (unsigned long long)cr->corrupt, (unsigned long long)cr->mismatch);
      if (cr->ok)
        printf("null}");
      else {
        json_str(stdout, cr->err);
        printf("}");
      }
    }
    printf("\n]}\n");
  } else {
    printf("%-8s %-6s %3s %8s %5s %13s %10s %11s %11s\n", "config", "trans", "n", "size", "bufs",
           "msgs/s", "MB/s", "p50 us", "p99 us");
    for (unsigned i = 0; i < nc; i++) {
      const perf_case *pc = &cases[i];
      const case_result *cr = &res[i];
      char sz[32];
      fmt_size(pc->size, sz, sizeof sz);
      printf("%-8s %-6s %3u %8s %5u ", cfg_names[pc->cfg], tr_names[pc->tr], pc->n, sz, pc->nbuf);
      if (cr->ok)
        printf("%13.0f %10.1f %11.1f %11.1f\n", cr->msgs_per_s, cr->mb_per_s, cr->p50_us,
               cr->p99_us);
      else
        printf("FAILED: %s\n", cr->err);
    }
    printf("(msgs/s: deliveries summed over sinks; pingpong: round trips/s and round-trip "
           "latency%s)\n",
           o.copy ? "; --copy" : "");
  }
  if (g_interrupted) return 128 + g_interrupted;
  return failures ? 1 : 0;
}
