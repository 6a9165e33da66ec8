/* The ZeroMQ peer for bench/run.sh: the workloads of `ezmsg perf` (1 -> 1 throughput and
 * request/reply ping-pong) over inproc (threads), ipc and tcp (two processes).
 *
 * Throughput uses PUSH/PULL, which blocks at the high-water mark instead of dropping, and the
 * sink checks the sequence numbers, so nothing is lost silently. Each message starts with the
 * same 32-byte header as ezmsg perf's (flags, sequence number, CLOCK_MONOTONIC send time): the
 * sink measures publish-to-receive latency and the rate over the messages the source marked as
 * measured (after the warm-up) up to its END message. By default the source sends from a user
 * buffer with zmq_send (one copy, like ez_publish); --zerocopy allocates each message with
 * zmq_msg_init_size and writes only the header (like ez_pub_loan). The receiver never copies
 * (zmq_msg_recv), like ez_recv.
 *
 * Every blocking call has a timeout (ZMQ_SNDTIMEO / ZMQ_RCVTIMEO and an overall deadline), every
 * socket lingers 0, and the child process is killed by pid if it does not finish in time.
 *
 * --pin puts the source on the first CPU this process may use and the sink on the second (mod
 * their number), as `ezmsg perf --pin` does with its nodes 0 and 1: for ipc and tcp each whole
 * process (set before its context, so that ZeroMQ's I/O thread is pinned with it), for inproc the
 * two threads.
 *
 *   ez_bench_zmq --mode thr|pingpong --transport inproc|ipc|tcp --size N --duration S
 *                [--warmup S] [--zerocopy] [--pin] [--json] */
#define _GNU_SOURCE
#include <zmq.h>

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cpupin.h"  /* tools/ezmsg: as `ezmsg perf --pin` places its nodes */
#include "latency.h" /* tools/ezmsg: the histogram `ezmsg perf` uses too */
#include "peer.h"

#define POLL_MS 200

typedef struct opts {
  int pingpong;
  const char *transport;
  size_t size;
  double duration, warmup;
  bool zerocopy, json, pin;
} opts;

static opts O = {0, "inproc", 64, 1.0, 0.25, false, false, false};

/* --pin: the calling thread (and the threads it starts from now on) on the index-th CPU allowed. */
static void pin(unsigned index) {
  if (O.pin) pin_nth_cpu(index);
}

static void fail(result *r, const char *what) {
  if (r->rc) return;
  r->rc = -1;
  snprintf(r->err, sizeof r->err, "%s: %s", what, zmq_strerror(zmq_errno()));
}

static uint64_t hard_deadline(uint64_t t_go) {
  return t_go + (uint64_t)((O.warmup + 2 * O.duration + 10.0) * 1e9);
}

static void set_opts(void *s) {
  int v = POLL_MS, zero = 0;
  zmq_setsockopt(s, ZMQ_SNDTIMEO, &v, sizeof v);
  zmq_setsockopt(s, ZMQ_RCVTIMEO, &v, sizeof v);
  zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
}

/* Sends `len` bytes starting with *h (stamped at the last moment); retries until `hard`. */
static int send_hdr(void *s, uint8_t *buf, hdr *h, size_t len, uint64_t hard) {
  for (;;) {
    int rc;
    if (O.zerocopy) {
      zmq_msg_t m;
      if (zmq_msg_init_size(&m, len)) return -1;
      h->t_ns = now_ns();
      memcpy(zmq_msg_data(&m), h, sizeof *h);
      rc = zmq_msg_send(&m, s, 0);
      if (rc < 0) zmq_msg_close(&m);
    } else {
      h->t_ns = now_ns();
      memcpy(buf, h, sizeof *h);
      rc = zmq_send(s, buf, len, 0);
    }
    if (rc >= 0) return 0;
    if (zmq_errno() != EAGAIN && zmq_errno() != EINTR) return -1;
    if (now_ns() > hard) return -1;
  }
}

static int recv_msg(void *s, zmq_msg_t *m, uint64_t hard) {
  for (;;) {
    if (zmq_msg_recv(m, s, 0) >= 0) return 0;
    if (zmq_errno() != EAGAIN && zmq_errno() != EINTR) return -1;
    if (now_ns() > hard) return -1;
  }
}

/* ---- the two sides -------------------------------------------------------------------------- */

/* Throughput source (PUSH) or ping-pong client (REQ). */
static void run_source(void *s, uint64_t t_go, result *r) {
  uint64_t t_meas = t_go + (uint64_t)(O.warmup * 1e9),
           t_stop = t_meas + (uint64_t)(O.duration * 1e9);
  uint64_t hard = hard_deadline(t_go);
  uint8_t *buf = calloc(1, O.size);
  hdr h = {.magic = MAGIC};
  uint64_t now = now_ns();
  if (now < t_go) {
    struct timespec ts = {0, (long)(t_go - now)};
    nanosleep(&ts, NULL);
  }
  /* One clock read per message: the send stamp of the previous one tells the time. */
  for (uint64_t t = now_ns(); !r->rc && t < t_stop; t = O.pingpong ? now_ns() : h.t_ns) {
    h.flags = t >= t_meas ? F_MEASURE : 0;
    if (send_hdr(s, buf, &h, O.size, hard)) {
      fail(r, "send");
      break;
    }
    if (h.flags & F_MEASURE) {
      if (!r->sent) r->t0 = h.t_ns;
      r->sent++;
    }
    if (O.pingpong) {
      zmq_msg_t m;
      zmq_msg_init(&m);
      if (recv_msg(s, &m, hard)) {
        fail(r, "receive reply");
        zmq_msg_close(&m);
        break;
      }
      uint64_t t_back = now_ns();
      hdr back = {0};
      if (zmq_msg_size(&m) >= sizeof back) memcpy(&back, zmq_msg_data(&m), sizeof back);
      if (back.magic != MAGIC || back.seq != h.seq || zmq_msg_size(&m) != O.size) {
        r->corrupt++;
        r->rc = -1;
        snprintf(r->err, sizeof r->err, "reply does not match request %llu",
                 (unsigned long long)h.seq);
      } else if (h.flags & F_MEASURE) {
        if (!r->count) r->t0 = h.t_ns;
        r->count++;
        r->t1 = t_back;
        r->hist[h_index(t_back - h.t_ns)]++;
      }
      zmq_msg_close(&m);
    }
    h.seq++;
  }
  if (!r->rc || !O.pingpong) { /* END (a REQ socket can only send it after a reply) */
    h.flags = F_END;
    if (send_hdr(s, buf, &h, sizeof h, now_ns() + 2000000000u)) fail(r, "send END");
    if (O.pingpong && !r->rc) {
      zmq_msg_t m;
      zmq_msg_init(&m);
      recv_msg(s, &m, now_ns() + 2000000000u);
      zmq_msg_close(&m);
    }
  }
  free(buf);
}

/* Throughput sink (PULL) or ping-pong server (REP). */
static void run_sink(void *s, uint64_t t_go, result *r) {
  uint64_t hard = hard_deadline(t_go);
  bool seen = false;
  uint64_t next = 0;
  for (;;) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (recv_msg(s, &m, hard)) {
      fail(r, "receive");
      zmq_msg_close(&m);
      return;
    }
    uint64_t t = now_ns();
    hdr h = {0};
    size_t len = zmq_msg_size(&m);
    if (len >= sizeof h) memcpy(&h, zmq_msg_data(&m), sizeof h);
    bool end = h.magic == MAGIC && (h.flags & F_END);
    if (O.pingpong) { /* echo it (the END too: the client waits for that reply) */
      if (zmq_msg_send(&m, s, 0) < 0) {
        fail(r, "reply");
        zmq_msg_close(&m);
        return;
      }
      if (end) return;
      continue;
    }
    zmq_msg_close(&m);
    if (h.magic != MAGIC) {
      r->corrupt++;
      continue;
    }
    if (end) {
      r->t1 = t;
      return;
    }
    if (!seen || h.seq == next) {
      seen = true;
      next = h.seq + 1;
    } else if (h.seq > next) {
      r->lost += h.seq - next;
      next = h.seq + 1;
    } else {
      r->late++;
    }
    if (len != O.size) r->corrupt++;
    if (h.flags & F_MEASURE) {
      if (!r->count) r->t0 = t;
      r->count++;
      r->hist[h_index(t > h.t_ns ? t - h.t_ns : 0)]++;
    }
  }
}

/* ---- processes and threads ------------------------------------------------------------------ */

typedef struct sink_arg {
  void *sock;
  uint64_t t_go;
  result *r;
} sink_arg;

static void *sink_thread(void *arg) {
  sink_arg *a = arg;
  pin(1);
  run_sink(a->sock, a->t_go, a->r);
  return NULL;
}

static int run(result *src, result *snk) {
  int sink_type = O.pingpong ? ZMQ_REP : ZMQ_PULL, src_type = O.pingpong ? ZMQ_REQ : ZMQ_PUSH;
  if (!strcmp(O.transport, "inproc")) {
    void *ctx = zmq_ctx_new();
    void *a = zmq_socket(ctx, sink_type), *b = zmq_socket(ctx, src_type);
    set_opts(a);
    set_opts(b);
    if (zmq_bind(a, "inproc://bench") || zmq_connect(b, "inproc://bench")) {
      fail(src, "bind/connect");
      return -1;
    }
    uint64_t t_go = now_ns() + 20000000u;
    sink_arg sa = {a, t_go, snk};
    pthread_t th;
    pthread_create(&th, NULL, sink_thread, &sa);
    pin(0);
    run_source(b, t_go, src);
    pthread_join(th, NULL);
    zmq_close(a);
    zmq_close(b);
    zmq_ctx_term(ctx);
    return 0;
  }
  /* ipc / tcp: the sink is a child process, forked before any ZeroMQ thread exists. */
  int up[2], down[2];
  if (pipe(up) || pipe(down)) return -1;
  char ipc_path[128];
  snprintf(ipc_path, sizeof ipc_path, "ipc:///tmp/ez_bench_zmq.%d.ipc", (int)getpid());
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    pin(1); /* before the context: its I/O thread inherits the CPU */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    alarm((unsigned)(O.warmup + 2 * O.duration + 40));
    close(up[0]);
    close(down[1]);
    result r = {0};
    void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, sink_type);
    set_opts(s);
    char ep[256] = {0};
    size_t eplen = sizeof ep;
    int rc = !strcmp(O.transport, "ipc") ? zmq_bind(s, ipc_path) : zmq_bind(s, "tcp://127.0.0.1:*");
    if (!rc) rc = zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, ep, &eplen);
    if (rc) fail(&r, "bind");
    uint64_t dl = now_ns() + 10000000000u, t_go = 0;
    if (io_full(up[1], ep, sizeof ep, true, dl)) _exit(3);
    if (io_full(down[0], &t_go, sizeof t_go, false, dl) || !t_go) _exit(3);
    if (!rc) run_sink(s, t_go, &r);
    io_full(up[1], &r, sizeof r, true, now_ns() + 5000000000u);
    zmq_close(s);
    zmq_ctx_term(ctx);
    _exit(0);
  }
  pin(0);
  close(up[1]);
  close(down[0]);
  char ep[256];
  int rc = 0;
  uint64_t dl = now_ns() + 10000000000u;
  void *ctx = NULL, *s = NULL;
  if (io_full(up[0], ep, sizeof ep, false, dl)) rc = -1;
  if (!rc) {
    ep[sizeof ep - 1] = 0;
    ctx = zmq_ctx_new();
    s = zmq_socket(ctx, src_type);
    set_opts(s);
    if (zmq_connect(s, ep)) {
      fail(src, "connect");
      rc = -1;
    }
  }
  uint64_t t_go = rc ? 0 : now_ns() + 50000000u;
  io_full(down[1], &t_go, sizeof t_go, true, dl);
  if (!rc) {
    run_source(s, t_go, src);
    if (io_full(up[0], snk, sizeof *snk, false, hard_deadline(t_go) + 5000000000u)) {
      snk->rc = -1;
      snprintf(snk->err, sizeof snk->err, "the sink did not report in time (killed)");
    }
  }
  if (s) zmq_close(s);
  if (ctx) zmq_ctx_term(ctx);
  reap_child(pid);
  close(up[0]);
  close(down[1]);
  if (!strcmp(O.transport, "ipc")) unlink(ipc_path + 6);
  return rc;
}

static void usage(FILE *f) {
  fprintf(f, "usage: ez_bench_zmq [--mode thr|pingpong] [--transport inproc|ipc|tcp] [--size N]\n"
             "                    [--duration S] [--warmup S] [--zerocopy] [--pin] [--json]\n");
}

int main(int argc, char **argv) {
  static const struct option lo[] = {{"mode", 1, 0, 'm'},   {"transport", 1, 0, 'T'},
                                     {"size", 1, 0, 's'},   {"duration", 1, 0, 'd'},
                                     {"warmup", 1, 0, 'w'}, {"zerocopy", 0, 0, 'z'},
                                     {"json", 0, 0, 'j'},   {"pin", 0, 0, 'p'},
                                     {"help", 0, 0, 'h'},   {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "m:T:s:d:w:zjph", lo, NULL)) != -1) {
    switch (c) {
    case 'm': O.pingpong = !strcmp(optarg, "pingpong"); break;
    case 'T': O.transport = optarg; break;
    case 's': O.size = (size_t)strtoull(optarg, NULL, 10); break;
    case 'd': O.duration = strtod(optarg, NULL); break;
    case 'w': O.warmup = strtod(optarg, NULL); break;
    case 'z': O.zerocopy = true; break;
    case 'j': O.json = true; break;
    case 'p': O.pin = true; break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (O.size < sizeof(hdr) || O.duration <= 0 ||
      (strcmp(O.transport, "inproc") && strcmp(O.transport, "ipc") && strcmp(O.transport, "tcp"))) {
    usage(stderr);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  static result src, snk;
  run(&src, &snk);
  result *m = O.pingpong ? &src : &snk; /* who measured */
  bool ok = !src.rc && !snk.rc;
  const char *err = src.rc ? src.err : snk.err;
  if (ok && !O.pingpong && (snk.lost || snk.late || snk.corrupt || snk.count != src.sent)) {
    ok = false;
    err = "delivery errors (lost, late, corrupt or count mismatch)";
  }
  double rate =
      m->count > 1 && m->t1 > m->t0 ? (double)m->count * 1e9 / (double)(m->t1 - m->t0) : 0;
  double p50 = h_quantile(m->hist, 0.5) / 1000.0, p99 = h_quantile(m->hist, 0.99) / 1000.0;
  if (O.json) {
    printf(
        "{\"impl\": \"zeromq\", \"config\": \"%s\", \"transport\": \"%s\", \"n\": 1, \"size\": "
        "%zu, "
        "\"zerocopy\": %s, \"duration_s\": %g, \"ok\": %s, \"msgs\": %llu, \"msgs_per_s\": %.1f, "
        "\"mb_per_s\": %.3f, \"lat_p50_us\": %.2f, \"lat_p99_us\": %.2f, \"lost\": %llu, "
        "\"late\": %llu, \"error\": ",
        O.pingpong ? "pingpong" : "fanout", O.transport, O.size, O.zerocopy ? "true" : "false",
        O.duration, ok ? "true" : "false", (unsigned long long)m->count, rate,
        rate * (double)O.size / 1e6, p50, p99, (unsigned long long)snk.lost,
        (unsigned long long)snk.late);
    json_error_end(ok, err);
  } else {
    printf("zeromq %-8s %-6s %8zu B %13.0f msgs/s %10.1f MB/s  p50 %8.1f us  p99 %8.1f us%s%s\n",
           O.pingpong ? "pingpong" : "thr", O.transport, O.size, rate, rate * (double)O.size / 1e6,
           p50, p99, ok ? "" : "  FAILED: ", ok ? "" : err);
  }
  return ok ? 0 : 1;
}
