#define _POSIX_C_SOURCE 200809L
/* A graph of many endpoints in one process, for measuring the dashboard's memory
 * (bench/dashboard_mem.sh): N publishers on topics /many/0 .. /many/N-1, each with one
 * subscriber in this process, every publisher sending a 64-byte message a second. Runs until
 * SIGINT / SIGTERM; prints "ready" on stderr once every endpoint exists.
 *
 *   ez_bench_many N ADDRESS */
#include <ezmsg/ezmsg.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) {
  (void)sig;
  g_stop = 1;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: ez_bench_many N ADDRESS\n");
    return 2;
  }
  int n = atoi(argv[1]);
  if (n < 1 || n > 100000) return 2;
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) { /* ~4 descriptors an endpoint pair */
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  ez_context *ctx;
  int rc = ez_context_open(argv[2], &ctx);
  if (rc) {
    fprintf(stderr, "ez_context_open: %s\n", ez_strerror(rc));
    return 1;
  }
  ez_pub **pubs = calloc((size_t)n, sizeof *pubs);
  ez_sub **subs = calloc((size_t)n, sizeof *subs);
  ez_pub_opts o;
  ez_pub_opts_init(&o);
  o.num_buffers = 2;
  o.buf_size = 256;
  for (int i = 0; i < n && !g_stop; i++) {
    char topic[32], handle[32];
    snprintf(topic, sizeof topic, "/many/%d", i);
    snprintf(handle, sizeof handle, "sub%d", i);
    ez_sub_opts so = {.handle = handle};
    if ((rc = ez_sub_create(ctx, topic, &so, &subs[i])) ||
        (rc = ez_pub_create(ctx, topic, &o, &pubs[i]))) {
      fprintf(stderr, "endpoint %d: %s\n", i, ez_strerror(rc));
      return 1;
    }
  }
  fprintf(stderr, "ready: %d publishers, %d subscribers\n", n, n);
  char msg[64] = {0};
  while (!g_stop) {
    for (int i = 0; i < n && !g_stop; i++) {
      ez_publish(pubs[i], msg, sizeof msg, 100);
      ez_msg m;
      while (ez_recv(subs[i], &m, 0) == 0)
        ez_msg_release(&m);
    }
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL);
  }
  ez_context_close(ctx); /* destroys every endpoint */
  free(pubs);
  free(subs);
  return 0;
}
