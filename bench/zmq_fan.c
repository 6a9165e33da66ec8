/* ZeroMQ's side of the fan-out and fan-in sweeps, the peer of `ezmsg perf -c fanout|fanin -n N`
 * over shm and tcp: every node is a process, and nothing is dropped.
 *
 * fanout: one XPUB -> N SUB processes. Plain PUB drops at its high-water mark; XPUB with
 *   ZMQ_XPUB_NODROP blocks (here: times out and retries) instead, so the publisher is paced by
 *   its slowest subscriber, like ours. The publisher binds and waits for all N subscriptions
 *   (ZMQ_XPUB_VERBOSE reports each) before the start.
 * fanin: N PUSH processes -> one PULL, which binds (PUSH/PULL is lossless).
 *
 * Each message starts with the 32-byte header of ezmsg perf (bench/peer.h); each sink checks the
 * sequence numbers per source and measures publish-to-receive latency over the messages sent
 * after the warm-up. The sink's rate is its measured messages over its own first-to-END interval,
 * summed over the sinks (as ezmsg perf does). CPU: getrusage of every process from the start time
 * to the end of its run, summed, per message received (warm-up included).
 *
 * The parent is the hub (the publisher, or the sink) and forks the N leaves before it creates a
 * ZeroMQ context; every wait has a deadline, every child has an alarm and dies with the parent,
 * and the parent kills by pid what does not finish.
 *
 *   ez_bench_zmq_fan --mode fanout|fanin -n N --transport ipc|tcp --size B --duration S
 *                    [--warmup S] [--hwm N] [--json]
 *
 * --hwm N sets every socket's send and receive high-water marks to N messages (ZeroMQ's default
 * is 1000), for comparing at the queue depth of ezmsg's num_buffers. */
#define _GNU_SOURCE
#include <zmq.h>

#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#include "peer.h"

#define MAX_N 64
#define POLL_MS 200

static struct {
  bool fanin, json;
  unsigned n;
  const char *transport;
  size_t size;
  double duration, warmup;
  int hwm; /* ZMQ_SNDHWM and ZMQ_RCVHWM of every socket (0: ZeroMQ's default, 1000) */
} O = {false, false, 1, "ipc", 64, 1.0, 0.25, 0};

typedef struct fan_result {
  result r;
  uint64_t cpu_ns, received;
} fan_result;

static uint64_t cpu_ns(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru)) return 0;
  return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000u +
         (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000u;
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
  if (O.hwm > 0) {
    zmq_setsockopt(s, ZMQ_SNDHWM, &O.hwm, sizeof O.hwm);
    zmq_setsockopt(s, ZMQ_RCVHWM, &O.hwm, sizeof O.hwm);
  }
}

static void sleep_until(uint64_t t) {
  uint64_t now = now_ns();
  if (now >= t) return;
  struct timespec ts = {(time_t)((t - now) / 1000000000u), (long)((t - now) % 1000000000u)};
  while (nanosleep(&ts, &ts) && errno == EINTR) {
  }
}

/* A source: one copy from its buffer per message (zmq_send, like ez_publish), until the stop
 * time, then END. Sends block at the high-water mark and are retried until the hard deadline. */
static void run_source(void *s, unsigned src, uint64_t t_go, fan_result *fr) {
  result *r = &fr->r;
  uint64_t t_meas = t_go + (uint64_t)(O.warmup * 1e9),
           t_stop = t_meas + (uint64_t)(O.duration * 1e9);
  uint64_t hard = hard_deadline(t_go);
  uint8_t *buf = calloc(1, O.size);
  if (!buf) return fail(r, "out of memory");
  hdr h = {.magic = MAGIC, .src = src};
  sleep_until(t_go);
  for (uint64_t t = now_ns();; t = h.t_ns) {
    bool end = t >= t_stop;
    h.flags = end ? F_END : t >= t_meas ? F_MEASURE : 0;
    size_t len = end ? sizeof h : O.size;
    int rc;
    do {
      h.t_ns = now_ns();
      memcpy(buf, &h, sizeof h);
      rc = zmq_send(s, buf, len, 0);
    } while (rc < 0 && (zmq_errno() == EAGAIN || zmq_errno() == EINTR) && now_ns() < hard);
    if (rc < 0) {
      fail(r, end ? "send END" : "send");
      break;
    }
    if (end) break;
    if (h.flags & F_MEASURE) {
      if (!r->sent) r->t0 = h.t_ns;
      r->sent++;
    }
    h.seq++;
  }
  free(buf);
}

/* A sink: until `ends` ENDs, checking each source's sequence numbers. */
static void run_sink(void *s, unsigned ends, uint64_t t_go, fan_result *fr) {
  result *r = &fr->r;
  uint64_t hard = hard_deadline(t_go), next[MAX_N] = {0};
  bool seen[MAX_N] = {0};
  while (ends) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    int rc;
    while ((rc = zmq_msg_recv(&m, s, 0)) < 0 && (zmq_errno() == EAGAIN || zmq_errno() == EINTR) &&
           now_ns() < hard) {
    }
    if (rc < 0) {
      fail(r, "receive");
      zmq_msg_close(&m);
      return;
    }
    uint64_t t = now_ns();
    hdr h = {0};
    size_t len = zmq_msg_size(&m);
    if (len >= sizeof h) memcpy(&h, zmq_msg_data(&m), sizeof h);
    zmq_msg_close(&m);
    if (h.magic != MAGIC || h.src >= MAX_N) {
      r->corrupt++;
      continue;
    }
    if (h.flags & F_END) {
      r->t1 = t;
      ends--;
      continue;
    }
    fr->received++;
    if (!seen[h.src] || h.seq == next[h.src]) {
      seen[h.src] = true;
      next[h.src] = h.seq + 1;
    } else if (h.seq > next[h.src]) {
      r->lost += h.seq - next[h.src];
      next[h.src] = h.seq + 1;
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

/* A leaf process: a SUB (fanout) or a PUSH (fanin) that connects to the hub's endpoint. */
__attribute__((noreturn)) static void leaf(unsigned index, int up, int down) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  alarm((unsigned)(O.warmup + 2 * O.duration + 60));
  char ep[256];
  uint64_t dl = now_ns() + 20000000000u, t_go = 0;
  if (io_full(down, ep, sizeof ep, false, dl)) _exit(3);
  ep[sizeof ep - 1] = 0;
  fan_result fr = {.cpu_ns = 0};
  void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, O.fanin ? ZMQ_PUSH : ZMQ_SUB);
  set_opts(s);
  if (!O.fanin) zmq_setsockopt(s, ZMQ_SUBSCRIBE, "", 0);
  if (zmq_connect(s, ep)) fail(&fr.r, "connect");
  uint8_t ready = 1;
  if (io_full(up, &ready, 1, true, dl)) _exit(3);
  if (io_full(down, &t_go, sizeof t_go, false, dl) || !t_go) _exit(3);
  uint64_t cpu0 = cpu_ns();
  if (!fr.r.rc) {
    if (O.fanin)
      run_source(s, index, t_go, &fr);
    else
      run_sink(s, 1, t_go, &fr);
  }
  fr.cpu_ns = cpu_ns() - cpu0;
  int linger = 10000; /* a PUSH's last messages (and its END) are still queued: let them go */
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  zmq_close(s);
  io_full(up, &fr, sizeof fr, true, hard_deadline(t_go) + 5000000000u);
  zmq_ctx_term(ctx);
  _exit(0);
}

static fan_result res[MAX_N + 1]; /* 0: the hub */

/* Forks the leaves, then runs the hub. 0, or -1 if the run could not be set up. */
static int run(void) {
  int up[MAX_N][2], down[MAX_N][2];
  pid_t pid[MAX_N];
  unsigned forked = 0;
  char ipc_path[128];
  snprintf(ipc_path, sizeof ipc_path, "ipc:///tmp/ez_bench_zmq_fan.%d.ipc", (int)getpid());
  fflush(stdout);
  for (unsigned i = 0; i < O.n; i++) {
    if (pipe(up[i]) || pipe(down[i])) break;
    pid[i] = fork();
    if (pid[i] < 0) break;
    if (pid[i] == 0) {
      for (unsigned j = 0; j < i; j++)
        close(up[j][0]), close(down[j][1]);
      close(up[i][0]);
      close(down[i][1]);
      leaf(i, up[i][1], down[i][0]);
    }
    close(up[i][1]);
    close(down[i][0]);
    forked++;
  }
  int rc = forked == O.n ? 0 : -1;
  result *hr = &res[0].r;
  void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, O.fanin ? ZMQ_PULL : ZMQ_XPUB);
  set_opts(s);
  int one = 1;
  if (!O.fanin) {
    zmq_setsockopt(s, ZMQ_XPUB_NODROP, &one, sizeof one);
    zmq_setsockopt(s, ZMQ_XPUB_VERBOSE, &one, sizeof one);
  }
  char ep[256] = {0};
  size_t eplen = sizeof ep;
  if (!rc &&
      (!strcmp(O.transport, "ipc") ? zmq_bind(s, ipc_path) : zmq_bind(s, "tcp://127.0.0.1:*")))
    rc = -1, fail(hr, "bind");
  if (!rc && zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, ep, &eplen)) rc = -1, fail(hr, "endpoint");
  uint64_t dl = now_ns() + 20000000000u;
  for (unsigned i = 0; i < forked && !rc; i++)
    if (io_full(down[i][1], ep, sizeof ep, true, dl)) rc = -1;
  for (unsigned i = 0; i < forked && !rc; i++) {
    uint8_t ready;
    if (io_full(up[i][0], &ready, 1, false, dl)) rc = -1;
  }
  for (unsigned subs = 0; !O.fanin && !rc && subs < O.n;) { /* every subscription is in */
    char b[16];
    int k = zmq_recv(s, b, sizeof b, 0);
    if (k >= 1 && b[0] == 1) subs++;
    if (now_ns() > dl) rc = -1, snprintf(hr->err, sizeof hr->err, "subscriptions: timeout");
  }
  uint64_t t_go = rc ? 0 : now_ns() + 50000000u;
  for (unsigned i = 0; i < forked; i++)
    io_full(down[i][1], &t_go, sizeof t_go, true, dl);
  if (!rc) {
    uint64_t cpu0 = cpu_ns();
    if (O.fanin)
      run_sink(s, O.n, t_go, &res[0]);
    else
      run_source(s, 0, t_go, &res[0]);
    res[0].cpu_ns = cpu_ns() - cpu0;
    for (unsigned i = 0; i < forked; i++) {
      if (io_full(up[i][0], &res[i + 1], sizeof res[i + 1], false,
                  hard_deadline(t_go) + 5000000000u)) {
        res[i + 1].r.rc = -1;
        snprintf(res[i + 1].r.err, sizeof res[i + 1].r.err, "leaf %u did not report (killed)", i);
      }
    }
  }
  zmq_close(s);
  zmq_ctx_term(ctx);
  for (unsigned i = 0; i < forked; i++) {
    reap_child(pid[i]);
    close(up[i][0]);
    close(down[i][1]);
  }
  if (!strcmp(O.transport, "ipc")) unlink(ipc_path + 6);
  return rc;
}

static void usage(FILE *f) {
  fprintf(f, "usage: ez_bench_zmq_fan [--mode fanout|fanin] [-n N] [--transport ipc|tcp]\n"
             "                        [--size N] [--duration S] [--warmup S] [--hwm N]\n"
             "                        [--json]\n");
}

int main(int argc, char **argv) {
  static const struct option lo[] = {{"mode", 1, 0, 'm'},      {"clients", 1, 0, 'n'},
                                     {"transport", 1, 0, 'T'}, {"size", 1, 0, 's'},
                                     {"duration", 1, 0, 'd'},  {"warmup", 1, 0, 'w'},
                                     {"json", 0, 0, 'j'},      {"help", 0, 0, 'h'},
                                     {"hwm", 1, 0, 'H'},       {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "m:n:T:s:d:w:H:jh", lo, NULL)) != -1) {
    switch (c) {
    case 'm': O.fanin = !strcmp(optarg, "fanin"); break;
    case 'n': O.n = (unsigned)strtoul(optarg, NULL, 10); break;
    case 'T': O.transport = optarg; break;
    case 's': O.size = (size_t)strtoull(optarg, NULL, 10); break;
    case 'd': O.duration = strtod(optarg, NULL); break;
    case 'w': O.warmup = strtod(optarg, NULL); break;
    case 'j': O.json = true; break;
    case 'H': O.hwm = atoi(optarg); break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (O.size < sizeof(hdr) || O.size > (1u << 30) || O.duration <= 0 || O.duration > 3600 ||
      O.warmup < 0 || O.warmup > 600 || O.n < 1 || O.n > MAX_N ||
      (strcmp(O.transport, "ipc") && strcmp(O.transport, "tcp"))) {
    usage(stderr);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  run();
  static uint64_t hist[H_N];
  uint64_t sent = 0, lost = 0, late = 0, corrupt = 0, msgs = 0, received = 0, mismatch = 0;
  double rate = 0, cpu_s = 0;
  const char *err = NULL;
  for (unsigned i = 0; i <= O.n; i++) {
    result *r = &res[i].r;
    bool sink = O.fanin ? i == 0 : i > 0;
    if (r->rc && !err) err = r->err[0] ? r->err : "failed";
    if (r->rc) fprintf(stderr, "ez_bench_zmq_fan: node %u: %s\n", i, r->err);
    cpu_s += (double)res[i].cpu_ns / 1e9;
    if (!sink) {
      sent += r->sent;
      continue;
    }
    lost += r->lost, late += r->late, corrupt += r->corrupt, msgs += r->count;
    received += res[i].received;
    if (r->count > 1 && r->t1 > r->t0) rate += (double)r->count * 1e9 / (double)(r->t1 - r->t0);
    for (unsigned b = 0; b < H_N; b++)
      hist[b] += r->hist[b];
  }
  for (unsigned i = 0; i <= O.n; i++) { /* every sink got every measured message */
    bool sink = O.fanin ? i == 0 : i > 0;
    if (sink && res[i].r.count != sent)
      mismatch += res[i].r.count > sent ? res[i].r.count - sent : sent - res[i].r.count;
  }
  if (!err && (lost || late || corrupt || mismatch))
    err = "delivery errors (lost, late, corrupt or count mismatch)";
  bool ok = !err;
  double p50 = h_quantile(hist, 0.5) / 1e3, p99 = h_quantile(hist, 0.99) / 1e3,
         mx = h_quantile(hist, 1.0) / 1e3, cpu_per = received ? cpu_s * 1e6 / (double)received : 0;
  if (O.json) {
    printf("{\"impl\": \"zeromq\", \"config\": \"%s\", \"transport\": \"%s\", \"n\": %u, \"size\": "
           "%zu, \"duration_s\": %g, \"ok\": %s, \"msgs\": %llu, \"msgs_per_s\": %.1f, "
           "\"mb_per_s\": %.3f, \"lat_p50_us\": %.2f, \"lat_p99_us\": %.2f, \"lat_max_us\": %.2f, "
           "\"cpu_s\": %.4f, \"cpu_us_per_msg\": %.3f, \"lost\": %llu, \"late\": %llu, "
           "\"mismatch\": %llu, \"error\": ",
           O.fanin ? "fanin" : "fanout", O.transport, O.n, O.size, O.duration,
           ok ? "true" : "false", (unsigned long long)msgs, rate, rate * (double)O.size / 1e6, p50,
           p99, mx, cpu_s, cpu_per, (unsigned long long)lost, (unsigned long long)late,
           (unsigned long long)mismatch);
    json_error_end(ok, err ? err : "");
  } else {
    printf("zeromq %-6s %-4s n=%-3u %8zu B %12.0f msgs/s  p50 %8.1f  p99 %8.1f  max %9.1f us  "
           "cpu %6.2f us/msg%s%s\n",
           O.fanin ? "fanin" : "fanout", O.transport, O.n, O.size, rate, p50, p99, mx, cpu_per,
           ok ? "" : "  FAILED: ", ok ? "" : err);
  }
  return ok ? 0 : 1;
}
