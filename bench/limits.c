/* The machine's limits for bench/run.sh: what no messaging library can beat here.
 *
 *   memcpy      copies/s and MB/s for each size: "hot" copies one buffer to another (both in
 *               cache when they fit), "cold" walks 64 MiB of sources and destinations so every
 *               copy comes from and goes to memory.
 *   socketpair  64-byte ping-pong between two processes over an AF_UNIX socketpair (two system
 *               calls and one wake-up per direction): round trips/s and round-trip p50/p99.
 *   condvar     ping-pong between two threads of one process through a mutex and condition
 *               variable (one futex wake-up per direction).
 *   handoff     a cache line passed back and forth between two threads pinned to the first two
 *               CPUs (each spins until the other wrote it): the cost of moving one line between
 *               those cores, in ns per handoff (lat_p50_us holds the mean). On a VM this moves
 *               with where the host puts the virtual CPUs (sibling threads of one core, or cores
 *               that share no cache), and everything that polls shared memory moves with it:
 *               bench/run.sh records it next to its runs.
 *   hiccup      (--hiccup only) every CPU busy, one thread pinned to each reading the clock in a
 *               loop for S seconds: the longest gap any of them saw is the longest time the
 *               machine (its kernel threads, other jobs, the host) took a busy CPU away. No
 *               latency measured on a fully loaded machine can have a smaller maximum, whatever
 *               carries the messages: bench/fan.sh records it each round, next to the maxima of
 *               its runs.
 *
 *   ez_bench_limits [--duration S] [--json] [--handoff | --hiccup]
 *       (S per measurement, 0 < S < 60, default 0.3; --handoff: only that, ~20 ms; --hiccup:
 *       only that, S) */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
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

#include "latency.h" /* tools/ezmsg: the histogram `ezmsg perf` uses too */

#define COLD_BYTES ((size_t)64 << 20)

static double g_duration = 0.3;
static bool g_json;

static void report(const char *config, const char *variant, size_t size, double per_s,
                   const uint64_t *hist) {
  double p50 = hist ? h_quantile(hist, 0.5) / 1000.0 : 0,
         p99 = hist ? h_quantile(hist, 0.99) / 1000.0 : 0;
  if (g_json)
    printf("{\"impl\": \"machine\", \"config\": \"%s\", \"transport\": \"%s\", \"n\": 1, "
           "\"size\": %zu, \"ok\": true, \"msgs_per_s\": %.1f, \"mb_per_s\": %.3f, "
           "\"lat_p50_us\": %.3f, \"lat_p99_us\": %.3f, \"error\": null}\n",
           config, variant, size, per_s, per_s * (double)size / 1e6, p50, p99);
  else if (hist)
    printf("%-10s %-10s %8zu B %13.0f /s  p50 %8.2f us  p99 %8.2f us\n", config, variant, size,
           per_s, p50, p99);
  else
    printf("%-10s %-10s %8zu B %13.0f /s %12.1f MB/s\n", config, variant, size, per_s,
           per_s * (double)size / 1e6);
  fflush(stdout);
}

/* ---- memcpy --------------------------------------------------------------------------------- */

static void bench_memcpy(size_t size, bool cold) {
  size_t n = cold ? COLD_BYTES / size : 1;
  if (n < 1) n = 1;
  uint8_t *src = malloc(n * size), *dst = malloc(n * size);
  if (!src || !dst) {
    fprintf(stderr, "ez_bench_limits: out of memory\n");
    exit(1);
  }
  memset(src, 1, n * size);
  memset(dst, 2, n * size);
  uint64_t copies = 0, t0 = now_ns(), stop = t0 + (uint64_t)(g_duration * 1e9), t = t0;
  size_t i = 0;
  while (t < stop) {
    for (int k = 0; k < 64; k++) {
      memcpy(dst + i * size, src + i * size, size);
      __asm__ volatile("" ::"r"(dst) : "memory"); /* the copy is not dead code */
      if (++i == n) i = 0;
    }
    copies += 64;
    t = now_ns();
  }
  report("memcpy", cold ? "cold" : "hot", size, (double)copies * 1e9 / (double)(t - t0), NULL);
  free(src);
  free(dst);
}

/* ---- socketpair ping-pong between processes -------------------------------------------------- */

static int full(int fd, void *buf, size_t n, bool wr) {
  uint8_t *p = buf;
  while (n) {
    struct pollfd pfd = {fd, wr ? POLLOUT : POLLIN, 0};
    if (poll(&pfd, 1, 2000) <= 0) return -1; /* never hang */
    ssize_t k = wr ? write(fd, p, n) : read(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static void bench_socketpair(void) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return;
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    alarm(30);
    close(sv[0]);
    uint8_t b[64];
    while (full(sv[1], b, sizeof b, false) == 0 && full(sv[1], b, sizeof b, true) == 0) {
    }
    _exit(0);
  }
  close(sv[1]);
  static uint64_t hist[H_N];
  memset(hist, 0, sizeof hist);
  uint8_t b[64] = {0};
  uint64_t n = 0, t0 = now_ns(), warm = t0 + 50000000u, stop = warm + (uint64_t)(g_duration * 1e9);
  uint64_t m0 = 0;
  for (;;) {
    uint64_t t = now_ns();
    if (t >= stop) break;
    if (full(sv[0], b, sizeof b, true) || full(sv[0], b, sizeof b, false)) break;
    uint64_t t2 = now_ns();
    if (t >= warm) {
      if (!n) m0 = t;
      n++;
      hist[h_index(t2 - t)]++;
    }
  }
  uint64_t t1 = now_ns();
  close(sv[0]);
  waitpid(pid, NULL, 0);
  report("pingpong", "socketpair", 64, n ? (double)n * 1e9 / (double)(t1 - m0) : 0, hist);
}

/* ---- condvar ping-pong between threads ----------------------------------------------------- */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_turn; /* 0: ping's turn, 1: pong's, 2: stop */

static void *pong_thread(void *arg) {
  (void)arg;
  pthread_mutex_lock(&g_mu);
  for (;;) {
    while (g_turn == 0)
      pthread_cond_wait(&g_cv, &g_mu);
    if (g_turn == 2) break;
    g_turn = 0;
    pthread_cond_broadcast(&g_cv);
  }
  pthread_mutex_unlock(&g_mu);
  return NULL;
}

static void bench_condvar(void) {
  pthread_t th;
  g_turn = 0;
  pthread_create(&th, NULL, pong_thread, NULL);
  static uint64_t hist[H_N];
  memset(hist, 0, sizeof hist);
  uint64_t n = 0, t0 = now_ns(), warm = t0 + 50000000u, stop = warm + (uint64_t)(g_duration * 1e9);
  uint64_t m0 = 0;
  for (;;) {
    uint64_t t = now_ns();
    if (t >= stop) break;
    pthread_mutex_lock(&g_mu);
    g_turn = 1;
    pthread_cond_broadcast(&g_cv);
    while (g_turn == 1)
      pthread_cond_wait(&g_cv, &g_mu);
    pthread_mutex_unlock(&g_mu);
    uint64_t t2 = now_ns();
    if (t >= warm) {
      if (!n) m0 = t;
      n++;
      hist[h_index(t2 - t)]++;
    }
  }
  uint64_t t1 = now_ns();
  pthread_mutex_lock(&g_mu);
  g_turn = 2;
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
  pthread_join(th, NULL);
  report("pingpong", "condvar", 64, n ? (double)n * 1e9 / (double)(t1 - m0) : 0, hist);
}

/* ---- cache-line handoff ---------------------------------------------------------------------- */

#define HANDOFFS 400000u

static _Alignas(64) volatile uint64_t g_line;

/* Pins the calling thread to the k-th CPU it may run on; false if there is none. */
static bool pin_nth(cpu_set_t *allowed, int k) {
  for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
    if (!CPU_ISSET(cpu, allowed) || k--) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    return pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0;
  }
  return false;
}

static void *handoff_thread(void *arg) {
  pin_nth(arg, 1); /* best effort: unpinned, both loops still finish (with wake-ups between) */
  for (uint64_t i = 1; i < 2 * HANDOFFS; i += 2) {
    while (g_line != i) {
    }
    g_line = i + 1;
  }
  return NULL;
}

static void bench_handoff(void) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) || CPU_COUNT(&allowed) < 2) return;
  g_line = 0;
  pthread_t th;
  if (pthread_create(&th, NULL, handoff_thread, &allowed)) return;
  pin_nth(&allowed, 0);
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < 2 * HANDOFFS; i += 2) {
    while (g_line != i) {
    }
    g_line = i + 1;
  }
  uint64_t ns = now_ns() - t0;
  pthread_join(th, NULL);
  double per = (double)ns / (2.0 * HANDOFFS);
  if (g_json)
    printf("{\"impl\": \"machine\", \"config\": \"handoff\", \"transport\": \"cacheline\", "
           "\"n\": 1, \"size\": 64, \"ok\": true, \"msgs_per_s\": %.1f, \"mb_per_s\": 0, "
           "\"lat_p50_us\": %.4f, \"lat_p99_us\": 0, \"error\": null}\n",
           1e9 / per, per / 1000.0);
  else
    printf("%-10s %-10s %8d B %13.0f /s %10.1f ns per handoff\n", "handoff", "cacheline", 64,
           1e9 / per, per);
  fflush(stdout);
}

/* ---- hiccup: what the machine takes from a busy CPU ------------------------------------------ */

typedef struct {
  cpu_set_t *allowed;
  int k;             /* the CPU (k-th allowed) this thread spins on */
  uint64_t max_gap;  /* ns */
  uint64_t over_1ms; /* gaps longer than 1 ms */
  uint64_t over_0_1ms;
  bool ran;
} hiccup_arg;

static void *hiccup_thread(void *arg) {
  hiccup_arg *h = arg;
  pin_nth(h->allowed, h->k); /* best effort: unpinned, the spinners still fill the CPUs */
  uint64_t t0 = now_ns(), stop = t0 + (uint64_t)(g_duration * 1e9), prev = t0;
  uint64_t max_gap = 0, over_1ms = 0, over_0_1ms = 0; /* (locals: no line shared while spinning) */
  for (uint64_t t = t0; t < stop; prev = t) {
    t = now_ns();
    uint64_t gap = t - prev;
    if (gap > max_gap) max_gap = gap;
    over_1ms += gap > 1000000u;
    over_0_1ms += gap > 100000u;
  }
  h->max_gap = max_gap;
  h->over_1ms = over_1ms;
  h->over_0_1ms = over_0_1ms;
  return NULL;
}

static void bench_hiccup(void) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed)) CPU_ZERO(&allowed);
  int n = CPU_COUNT(&allowed) > 0 ? CPU_COUNT(&allowed) : 1;
  hiccup_arg *h = calloc((size_t)n, sizeof *h);
  pthread_t *th = calloc((size_t)n, sizeof *th);
  if (!h || !th) {
    fprintf(stderr, "ez_bench_limits: out of memory\n");
    exit(1);
  }
  for (int i = 0; i < n; i++) {
    h[i] = (hiccup_arg){.allowed = &allowed, .k = i};
    h[i].ran = i == 0 || pthread_create(&th[i], NULL, hiccup_thread, &h[i]) == 0;
  }
  hiccup_thread(&h[0]); /* this thread spins on the first CPU */
  int busy = 0;
  uint64_t max = 0, o1 = 0, o01 = 0;
  for (int i = 0; i < n; i++) {
    if (!h[i].ran) continue;
    if (i > 0) pthread_join(th[i], NULL);
    busy++;
    max = h[i].max_gap > max ? h[i].max_gap : max;
    o1 += h[i].over_1ms;
    o01 += h[i].over_0_1ms;
  }
  if (g_json)
    printf("{\"impl\": \"machine\", \"config\": \"hiccup\", \"transport\": \"busy-cpus\", "
           "\"n\": %d, \"size\": 0, \"ok\": true, \"seconds\": %.3f, \"lat_max_us\": %.1f, "
           "\"gaps_over_1ms\": %llu, \"gaps_over_100us\": %llu, \"error\": null}\n",
           busy, g_duration, (double)max / 1000.0, (unsigned long long)o1, (unsigned long long)o01);
  else
    printf("%-10s %-10s %d CPUs busy %.2f s: longest gap %.3f ms, %llu over 1 ms, %llu over 0.1 "
           "ms\n",
           "hiccup", "busy-cpus", busy, g_duration, (double)max / 1e6, (unsigned long long)o1,
           (unsigned long long)o01);
  fflush(stdout);
  free(h);
  free(th);
}

int main(int argc, char **argv) {
  static const struct option lo[] = {{"duration", 1, 0, 'd'}, {"json", 0, 0, 'j'},
                                     {"handoff", 0, 0, 'H'},  {"hiccup", 0, 0, 'C'},
                                     {"help", 0, 0, 'h'},     {0, 0, 0, 0}};
  int c;
  bool only_handoff = false, only_hiccup = false;
  while ((c = getopt_long(argc, argv, "d:jh", lo, NULL)) != -1) {
    if (c == 'd')
      g_duration = strtod(optarg, NULL);
    else if (c == 'j')
      g_json = true;
    else if (c == 'H')
      only_handoff = true;
    else if (c == 'C')
      only_hiccup = true;
    else {
      fprintf(c == 'h' ? stdout : stderr,
              "usage: ez_bench_limits [--duration S] [--json] [--handoff | --hiccup]\n");
      return c == 'h' ? 0 : 2;
    }
  }
  if (only_handoff) {
    bench_handoff();
    return 0;
  }
  if (!(g_duration > 0 && g_duration < 60)) g_duration = 0.3;
  if (only_hiccup) {
    bench_hiccup();
    return 0;
  }
  signal(SIGPIPE, SIG_IGN);
  bench_memcpy(64, false);
  bench_memcpy(4096, false);
  bench_memcpy((size_t)1 << 20, false);
  bench_memcpy((size_t)1 << 20, true);
  bench_socketpair();
  bench_condvar();
  bench_handoff();
  return 0;
}
