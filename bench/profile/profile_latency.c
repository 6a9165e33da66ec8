/* How long `ez_profile` takes on a busy graph: the graph server fans PROFILE out to every
 * publisher and channel at once and answers when the last one has; this measures that round trip
 * from the caller's side.
 *
 * Setup (defaults): a graph server in its own process, and 4 worker processes. Worker k creates
 * 25 publishers on /bench/k/0..24 and 25 subscribers on the topics of worker (k+1) % 4, so every
 * worker also holds 25 channels (one per remote publisher): 100 publishers + 100 channels = 200
 * profiled endpoints. Every publisher sends 256-byte messages at 20 Hz (2000 messages/s in all),
 * so the telemetry windows are not empty. Once the profile shows every endpoint, the bench calls
 * ez_profile(window 2.0) 50 times back to back and reports the median, p90 and max wall time, the
 * document size, and how many of the calls saw all 200 endpoints. Everything is stopped by pid.
 *
 *   profile_latency [--processes P] [--per-process N] [--calls C] [--window S] [--rate HZ]
 *                   [--payload BYTES] [--header | --json]
 *
 * Output: one markdown table row (with --header, the header lines first), or with --json one JSON
 * object (what `make bench` reads: bench/run.sh). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "ezmsg/ezmsg.h"
#include "../benchutil.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_PROCS 16
#define MAX_PER_PROC 256

static int g_procs = 4, g_per = 25, g_calls = 50, g_payload = 256;
static double g_window = 2.0, g_rate = 20.0;
static bool g_header;
static bool g_json;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("profile_latency: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(1);
}

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0) die("no free port");
  socklen_t len = sizeof a;
  getsockname(fd, (struct sockaddr *)&a, &len);
  close(fd);
  return ntohs(a.sin_port);
}

/* ---- children ------------------------------------------------------------------------------ */

/* Forks a child that dies with us; fn never returns. */
static pid_t fork_child(void (*fn)(int wfd, int k, const char *addr), int wfd, int k,
                        const char *addr) {
  fflush(NULL);
  pid_t parent = getpid(), pid = fork();
  if (pid < 0) die("fork: %s", strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(4);
    fn(wfd, k, addr);
    _exit(0);
  }
  return pid;
}

static void server_child(int wfd, int k, const char *addr) {
  (void)k;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, NULL); /* before the server thread exists */
  ez_server *srv = NULL;
  int rc = ez_server_start(addr, &srv);
  char c = rc == 0 ? 'R' : 'E';
  if (write(wfd, &c, 1) != 1 || rc) _exit(2);
  int sig;
  sigwait(&set, &sig);
  ez_server_stop(srv);
  _exit(0);
}

typedef struct worker {
  ez_pub *pubs[MAX_PER_PROC];
  int n;
} worker;

static void *publish_thread(void *arg) {
  worker *w = arg;
  uint8_t *buf = calloc(1, (size_t)g_payload);
  if (!buf) _exit(5);
  double period = 1.0 / g_rate, next = bu_now_s();
  for (uint64_t k = 0;; k++) {
    next += period;
    double left = next - bu_now_s();
    if (left > 0) bu_sleep_s(left, NULL);
    memcpy(buf, &k, sizeof k < (size_t)g_payload ? sizeof k : (size_t)g_payload);
    for (int i = 0; i < w->n; i++)
      ez_publish(w->pubs[i], buf, (size_t)g_payload, 1000);
  }
  return NULL;
}

static int g_go[MAX_PROCS][2]; /* parent -> worker k: "create your subscribers now" */

static void worker_child(int wfd, int k, const char *addr) {
  static worker w;
  ez_sub *subs[MAX_PER_PROC];
  struct pollfd pf[MAX_PER_PROC];
  ez_context *ctx = NULL;
  char topic[64], fail = 'E';
  if (ez_context_open(addr, &ctx)) goto bad;
  for (int i = 0; i < g_per; i++) {
    snprintf(topic, sizeof topic, "/bench/%d/%d", k, i);
    if (ez_pub_create(ctx, topic, NULL, &w.pubs[i])) goto bad;
    w.n++;
  }
  char ok = 'R', go;
  if (write(wfd, &ok, 1) != 1 || read(g_go[k][0], &go, 1) != 1) _exit(2);
  for (int i = 0; i < g_per; i++) {
    snprintf(topic, sizeof topic, "/bench/%d/%d", (k + 1) % g_procs, i);
    char handle[64];
    snprintf(handle, sizeof handle, "worker%d-sub%d", k, i);
    ez_sub_opts o = {.handle = handle};
    if (ez_sub_create(ctx, topic, &o, &subs[i])) goto bad;
    pf[i] = (struct pollfd){.fd = ez_sub_fd(subs[i]), .events = POLLIN};
  }
  pthread_t t;
  if (pthread_create(&t, NULL, publish_thread, &w)) goto bad;
  if (write(wfd, &ok, 1) != 1) _exit(2);
  for (;;) {
    if (poll(pf, (nfds_t)g_per, 500) < 0 && errno != EINTR) _exit(3);
    for (int i = 0; i < g_per; i++) {
      ez_msg m;
      while (ez_recv(subs[i], &m, 0) == 0)
        ez_msg_release(&m);
    }
  }
bad:
  if (write(wfd, &fail, 1) != 1) _exit(2);
  _exit(2);
}

/* Waits for one readiness byte per child on rfd. */
static void await_ready(int rfd, int n, double timeout_s, const char *what) {
  double deadline = bu_now_s() + timeout_s;
  for (int got = 0; got < n;) {
    int left = (int)((deadline - bu_now_s()) * 1000);
    struct pollfd pf = {.fd = rfd, .events = POLLIN};
    if (left <= 0 || poll(&pf, 1, left) <= 0) die("%s: not ready after %.0f s", what, timeout_s);
    char c;
    if (read(rfd, &c, 1) != 1) die("%s: pipe closed", what);
    if (c != 'R') die("%s: a child failed to set up", what);
    got++;
  }
}

/* ---- measurement --------------------------------------------------------------------------- */

/* Nearest rank: the ceil(p * n)-th smallest. */
static double pct(const double *sorted, int n, double p) {
  int r = (int)(p * n + 0.999999);
  if (r < 1) r = 1;
  if (r > n) r = n;
  return sorted[r - 1];
}

/* Endpoints in a profile document: publishers and channels. */
static int count_endpoints(const char *json, size_t *pubs, size_t *chans) {
  ez_profile_data d;
  int rc = ez_profile_parse(json, &d);
  if (rc) return rc;
  *pubs = d.n_publishers;
  *chans = d.n_channels;
  ez_profile_data_free(&d);
  return 0;
}

static void usage(FILE *f) {
  fprintf(f, "usage: profile_latency [--processes P] [--per-process N] [--calls C] [--window S]\n"
             "                       [--rate HZ] [--payload BYTES] [--header | --json]\n");
}

int main(int argc, char **argv) {
  static const struct option opts[] = {
      {"processes", required_argument, NULL, 'p'},
      {"per-process", required_argument, NULL, 'n'},
      {"calls", required_argument, NULL, 'c'},
      {"window", required_argument, NULL, 'w'},
      {"rate", required_argument, NULL, 'r'},
      {"payload", required_argument, NULL, 'b'},
      {"header", no_argument, NULL, 'H'},
      {"json", no_argument, NULL, 'J'},
      {"help", no_argument, NULL, 'h'},
      {0},
  };
  int c;
  while ((c = getopt_long(argc, argv, "p:n:c:w:r:b:HJh", opts, NULL)) != -1) {
    switch (c) {
    case 'p': g_procs = atoi(optarg); break;
    case 'n': g_per = atoi(optarg); break;
    case 'c': g_calls = atoi(optarg); break;
    case 'w': g_window = atof(optarg); break;
    case 'r': g_rate = atof(optarg); break;
    case 'b': g_payload = atoi(optarg); break;
    case 'H': g_header = true; break;
    case 'J': g_json = true; break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (g_procs < 2 || g_procs > MAX_PROCS || g_per < 1 || g_per > MAX_PER_PROC || g_calls < 1 ||
      !(g_rate > 0) || g_payload < 1 || !(g_window >= 0)) {
    usage(stderr);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);

  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
  int p[2];
  if (pipe(p)) die("pipe: %s", strerror(errno));
  pid_t server = fork_child(server_child, p[1], 0, addr);
  await_ready(p[0], 1, 10, "graph server");
  pid_t workers[MAX_PROCS];
  for (int k = 0; k < g_procs; k++)
    if (pipe(g_go[k])) die("pipe: %s", strerror(errno));
  for (int k = 0; k < g_procs; k++)
    workers[k] = fork_child(worker_child, p[1], k, addr);
  close(p[1]);
  await_ready(p[0], g_procs, 60, "workers' publishers");
  /* Subscribers one worker at a time. At commit 4c6c706 a subscriber's channel handshake blocked
   * its process's I/O thread, which also serves that process's publishers, so workers subscribing
   * to each other's publishers at the same moment waited for each other until the 5 s handshake
   * timeout and then gave up on those publishers for good (tests/test_profiling.c,
   * test_mutual_subscription). Setting up one worker at a time keeps the bench independent of
   * that; it measures profiling, not setup. */
  for (int k = 0; k < g_procs; k++) {
    if (write(g_go[k][1], "g", 1) != 1) die("go: %s", strerror(errno));
    await_ready(p[0], 1, 60, "a worker's subscribers");
  }

  /* Every endpoint registered and answering, then one more window of traffic. */
  size_t want = (size_t)g_procs * (size_t)g_per, np = 0, nc = 0;
  double deadline = bu_now_s() + 60;
  for (;;) {
    char *json = NULL;
    if (ez_profile(addr, 0.1, &json, 10000) == 0 && count_endpoints(json, &np, &nc) == 0 &&
        np == want && nc == want) {
      free(json);
      break;
    }
    free(json);
    if (bu_now_s() > deadline) die("only %zu publishers / %zu channels after 60 s", np, nc);
    bu_sleep_s(0.2, NULL);
  }
  bu_sleep_s(g_window, NULL);

  double *ms = calloc((size_t)g_calls, sizeof *ms);
  if (!ms) die("out of memory");
  int complete = 0, failed = 0;
  size_t doc_bytes = 0;
  for (int i = 0; i < g_calls; i++) {
    char *json = NULL;
    double t0 = bu_now_s();
    int rc = ez_profile(addr, g_window, &json, 10000);
    ms[i] = (bu_now_s() - t0) * 1e3;
    if (rc) {
      failed++;
      fprintf(stderr, "profile_latency: call %d: %s\n", i, ez_strerror(rc));
      continue;
    }
    doc_bytes = strlen(json);
    if (count_endpoints(json, &np, &nc) == 0 && np == want && nc == want) complete++;
    free(json);
  }
  qsort(ms, (size_t)g_calls, sizeof *ms, bu_cmp_double);

  if (g_json) {
    printf("{\"ok\": %s, \"endpoints\": %zu, \"processes\": %d, \"window_s\": %.1f, \"calls\": %d, "
           "\"median_ms\": %.3f, \"p90_ms\": %.3f, \"max_ms\": %.3f, \"doc_kib\": %.1f, "
           "\"complete\": %d}\n",
           failed ? "false" : "true", 2 * want, g_procs, g_window, g_calls, pct(ms, g_calls, 0.5),
           pct(ms, g_calls, 0.9), ms[g_calls - 1], (double)doc_bytes / 1024.0, complete);
    fflush(stdout);
  } else if (g_header) {
    printf("| endpoints | processes | window s | calls | median ms | p90 ms | max ms | doc KiB "
           "| complete |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  if (!g_json)
    printf("| %zu | %d | %.1f | %d | %.2f | %.2f | %.2f | %.1f | %d/%d |\n", 2 * want, g_procs,
           g_window, g_calls, pct(ms, g_calls, 0.5), pct(ms, g_calls, 0.9), ms[g_calls - 1],
           (double)doc_bytes / 1024.0, complete, g_calls);
  fflush(stdout);
  free(ms);

  /* Stop the workers together (none is left to react to the others' publishers going away),
   * then the server; all by pid. */
  for (int k = 0; k < g_procs; k++)
    kill(workers[k], SIGTERM);
  for (int k = 0; k < g_procs; k++)
    waitpid(workers[k], NULL, 0);
  kill(server, SIGTERM);
  int st = 0;
  waitpid(server, &st, 0);
  close(p[0]);
  return failed ? 1 : 0;
}
