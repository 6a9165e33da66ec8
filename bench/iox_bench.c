/* The iceoryx peer for bench/run.sh: 1 -> 1 zero-copy throughput between two processes over
 * iceoryx's shared memory (the C binding, through a RouDi daemon that run.sh starts with
 * bench/iox_roudi.toml), the counterpart of `ezmsg perf -T shm` with `ez_pub_loan`.
 *
 * The source loans a chunk of --size bytes, writes only the 32-byte header ezmsg perf and
 * bench/zmq_bench.c use (flags, sequence number, CLOCK_MONOTONIC send time) and publishes it; the
 * sink takes each chunk, reads the header and releases it. Lossless: the publisher waits for a
 * slow consumer and the subscriber's queue blocks the producer, and the sink checks the sequence
 * numbers. Both sides poll (iceoryx's fastest mode; ours polls too while polling pays), yielding
 * the CPU when there is nothing to do. The rate counts the messages the source marked as measured
 * (after the warm-up) up to its END message.
 *
 *   ez_bench_iox --size N --duration S [--warmup S] [--json]
 * Exit status 0, or 1 with the reason in the output (no RouDi, delivery errors, timeouts). */
#define _GNU_SOURCE
#include "iceoryx_binding_c/enums.h"
#include "iceoryx_binding_c/publisher.h"
#include "iceoryx_binding_c/runtime.h"
#include "iceoryx_binding_c/subscriber.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <sched.h>
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

#include "latency.h" /* tools/ezmsg: the histogram `ezmsg perf` uses too */
#include "peer.h"

static size_t g_size = 1048576;
static double g_duration = 1.0, g_warmup = 0.25;
static char g_instance[32];

static uint64_t hard_deadline(uint64_t t_go) {
  return t_go + (uint64_t)((g_warmup + 2 * g_duration + 10.0) * 1e9);
}

static void fail(result *r, const char *what) {
  if (r->rc) return;
  r->rc = -1;
  snprintf(r->err, sizeof r->err, "%s", what);
}

/* The sink process: subscribes, says so, then takes chunks until END (or the deadline). */
static void run_sink(int up, int down) {
  static result r;
  char name[64];
  snprintf(name, sizeof name, "ezbench-sink-%d", (int)getpid());
  iox_runtime_init(name);
  iox_sub_options_t o;
  iox_sub_options_init(&o);
  o.queueCapacity = 256;
  o.historyRequest = 0;
  o.queueFullPolicy = QueueFullPolicy_BLOCK_PRODUCER;
  iox_sub_storage_t st;
  iox_sub_t sub = iox_sub_init(&st, "ezbench", g_instance, "thr", &o);
  uint64_t dl = now_ns() + 10000000000u, t_go = 0;
  while (iox_sub_get_subscription_state(sub) != SubscribeState_SUBSCRIBED && now_ns() < dl)
    usleep(1000);
  char ready = 1;
  if (io_full(up, &ready, 1, true, dl) || io_full(down, &t_go, sizeof t_go, false, dl) || !t_go)
    _exit(3);
  uint64_t hard = hard_deadline(t_go), next = 0;
  bool seen = false;
  for (unsigned idle = 0;;) {
    const void *p = NULL;
    if (iox_sub_take_chunk(sub, &p) != ChunkReceiveResult_SUCCESS) {
      if (++idle % 64 == 0) {
        if (now_ns() > hard) {
          fail(&r, "the sink timed out");
          break;
        }
        sched_yield();
      }
      continue;
    }
    idle = 0;
    uint64_t t = now_ns();
    hdr h;
    memcpy(&h, p, sizeof h);
    iox_sub_release_chunk(sub, p);
    if (h.magic != MAGIC) {
      r.corrupt++;
      continue;
    }
    if (h.flags & F_END) {
      r.t1 = t;
      break;
    }
    if (!seen || h.seq == next) {
      seen = true;
      next = h.seq + 1;
    } else if (h.seq > next) {
      r.lost += h.seq - next;
      next = h.seq + 1;
    } else {
      r.late++;
    }
    if (h.flags & F_MEASURE) {
      if (!r.count) r.t0 = t;
      r.count++;
      r.hist[h_index(t > h.t_ns ? t - h.t_ns : 0)]++;
    }
  }
  io_full(up, &r, sizeof r, true, now_ns() + 5000000000u);
  iox_sub_deinit(sub);
  iox_runtime_shutdown();
  exit(0); /* not _exit: the runtime leaves RouDi in its static destructor */
}

/* Loans, stamps and publishes one message; retries while every chunk is in flight. */
static int send_one(iox_pub_t pub, hdr *h, uint64_t hard) {
  for (;;) {
    void *p = NULL;
    enum iox_AllocationResult a = iox_pub_loan_chunk(pub, &p, (uint32_t)g_size);
    if (a == AllocationResult_SUCCESS) {
      h->t_ns = now_ns();
      memcpy(p, h, sizeof *h);
      iox_pub_publish_chunk(pub, p);
      return 0;
    }
    if (a != AllocationResult_RUNNING_OUT_OF_CHUNKS &&
        a != AllocationResult_TOO_MANY_CHUNKS_ALLOCATED_IN_PARALLEL)
      return -1;
    if (now_ns() > hard) return -1;
    sched_yield();
  }
}

static void run_source(iox_pub_t pub, uint64_t t_go, result *r) {
  uint64_t t_meas = t_go + (uint64_t)(g_warmup * 1e9),
           t_stop = t_meas + (uint64_t)(g_duration * 1e9);
  uint64_t hard = hard_deadline(t_go);
  hdr h = {.magic = MAGIC};
  uint64_t now = now_ns();
  if (now < t_go) {
    struct timespec ts = {0, (long)(t_go - now)};
    nanosleep(&ts, NULL);
  }
  for (uint64_t t = now_ns(); t < t_stop; t = h.t_ns) {
    h.flags = t >= t_meas ? F_MEASURE : 0;
    if (send_one(pub, &h, hard)) {
      fail(r, "loan failed (is the RouDi config's mempool large enough?)");
      return;
    }
    if (h.flags & F_MEASURE) r->sent++;
    h.seq++;
  }
  h.flags = F_END;
  if (send_one(pub, &h, hard)) fail(r, "send END");
}

static void usage(FILE *f) {
  fprintf(f, "usage: ez_bench_iox [--size N] [--duration S] [--warmup S] [--json]\n");
}

int main(int argc, char **argv) {
  static const struct option lo[] = {{"size", 1, 0, 's'},   {"duration", 1, 0, 'd'},
                                     {"warmup", 1, 0, 'w'}, {"json", 0, 0, 'j'},
                                     {"help", 0, 0, 'h'},   {0, 0, 0, 0}};
  bool json = false;
  int c;
  while ((c = getopt_long(argc, argv, "s:d:w:jh", lo, NULL)) != -1) {
    switch (c) {
    case 's': g_size = (size_t)strtoull(optarg, NULL, 10); break;
    case 'd': g_duration = strtod(optarg, NULL); break;
    case 'w': g_warmup = strtod(optarg, NULL); break;
    case 'j': json = true; break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (g_size < sizeof(hdr) || g_size > UINT32_MAX || g_duration <= 0) {
    usage(stderr);
    return 2;
  }
  snprintf(g_instance, sizeof g_instance, "i%d", (int)getpid());
  static result src, snk;
  int up[2], down[2];
  if (pipe(up) || pipe(down)) return 1;
  fflush(stdout);
  pid_t pid = fork(); /* before any iceoryx thread exists */
  if (pid < 0) return 1;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    alarm((unsigned)(g_warmup + 2 * g_duration + 40));
    close(up[0]);
    close(down[1]);
    run_sink(up[1], down[0]);
  }
  close(up[1]);
  close(down[0]);
  char name[64];
  snprintf(name, sizeof name, "ezbench-src-%d", (int)getpid());
  iox_runtime_init(name); /* (it terminates the process if RouDi does not answer) */
  iox_pub_options_t o;
  iox_pub_options_init(&o);
  o.historyCapacity = 0;
  o.subscriberTooSlowPolicy = ConsumerTooSlowPolicy_WAIT_FOR_CONSUMER;
  iox_pub_storage_t st;
  iox_pub_t pub = iox_pub_init(&st, "ezbench", g_instance, "thr", &o);
  uint64_t dl = now_ns() + 10000000000u;
  char ready = 0;
  if (io_full(up[0], &ready, 1, false, dl)) fail(&src, "the sink did not subscribe");
  while (!src.rc && !iox_pub_has_subscribers(pub) && now_ns() < dl)
    usleep(1000);
  uint64_t t_go = src.rc ? 0 : now_ns() + 50000000u;
  io_full(down[1], &t_go, sizeof t_go, true, dl);
  if (!src.rc) {
    run_source(pub, t_go, &src);
    if (io_full(up[0], &snk, sizeof snk, false, hard_deadline(t_go) + 5000000000u)) {
      snk.rc = -1;
      snprintf(snk.err, sizeof snk.err, "the sink did not report in time (killed)");
    }
  }
  reap_child(pid);
  iox_pub_deinit(pub);
  iox_runtime_shutdown();
  char lock[96]; /* the sink's runtime leaves its lock file behind: it is ours to remove */
  snprintf(lock, sizeof lock, "/tmp/ezbench-sink-%d.lock", (int)pid);
  unlink(lock);

  bool ok = !src.rc && !snk.rc;
  const char *err = src.rc ? src.err : snk.err;
  if (ok && (snk.lost || snk.late || snk.corrupt || snk.count != src.sent)) {
    ok = false;
    err = "delivery errors (lost, late, corrupt or count mismatch)";
  }
  double rate =
      snk.count > 1 && snk.t1 > snk.t0 ? (double)snk.count * 1e9 / (double)(snk.t1 - snk.t0) : 0;
  double p50 = h_quantile(snk.hist, 0.5) / 1000.0, p99 = h_quantile(snk.hist, 0.99) / 1000.0;
  if (json) {
    printf("{\"impl\": \"iceoryx\", \"config\": \"fanout\", \"transport\": \"shm\", \"n\": 1, "
           "\"size\": %zu, \"zerocopy\": true, \"duration_s\": %g, \"ok\": %s, \"msgs\": %llu, "
           "\"msgs_per_s\": %.1f, \"mb_per_s\": %.3f, \"lat_p50_us\": %.2f, \"lat_p99_us\": %.2f, "
           "\"lost\": %llu, \"late\": %llu, \"error\": ",
           g_size, g_duration, ok ? "true" : "false", (unsigned long long)snk.count, rate,
           rate * (double)g_size / 1e6, p50, p99, (unsigned long long)snk.lost,
           (unsigned long long)snk.late);
    json_error_end(ok, err);
  } else {
    printf("iceoryx thr shm %8zu B %13.0f msgs/s %10.1f MB/s  p50 %8.1f us  p99 %8.1f us%s%s\n",
           g_size, rate, rate * (double)g_size / 1e6, p50, p99,
           ok ? "" : "  FAILED: ", ok ? "" : err);
  }
  return ok ? 0 : 1;
}
