/* How the graph server's operations grow with the graph (bench/graphsize.sh runs it at 100, 1000
 * and 10000 topics). The graph server is one the caller started (`ezmsg serve`); this builds on
 * it, in P worker processes forked here, a graph of T topics and C clients:
 *
 *   C/2 publishers /gs/p/i (in process i % P) and C/2 subscribers /gs/s/j (in process j % P);
 *   CONNECT /gs/p/(j+1..j+3) -> /gs/s/j, so each subscriber reads three publishers, from other
 *   processes when P >= 4 and P divides C/2: 3C/2 channels, and C/2 + 3C/2 = 2C profiled
 *   endpoints (publishers and channels); /gs/fan -> every /gs/s/j; and the rest of the T topics
 *   as chains of 10 (/gs/f/0 -> /gs/f/1 -> ...) that no endpoint uses.
 *
 * Every publisher sends 64 bytes at --rate Hz, so the profile windows are not empty. Once the
 * profile shows every endpoint, this measures, each --calls times (median, p90, max, and the
 * server's CPU per call from /proc/PID/task/ * /schedstat, summed over its threads):
 *
 *   connect  ez_graph_connect of a new topic into a filler chain (no subscriber downstream), then
 *            its DISCONNECT (not timed)
 *   join     ez_sub_create of a subscriber of this process on a topic nobody publishes, destroyed
 *            after each (the server's SUBSCRIBE, its UPDATE and the COMPLETE)
 *   fanout   ez_graph_connect of a new topic to /gs/fan: every subscriber is downstream, so the
 *            call returns once all C/2 of them have had their UPDATE and answered it
 *   profile  ez_profile(window) over all 2C endpoints (and how many calls saw all of them)
 *   dag      ez_graph_dag: the whole topic graph, pickled and read back
 *
 * and the server's VmRSS / VmHWM before the graph was built and after the measurements. Prints
 * one JSON object. Workers are stopped by pid (SIGTERM: they close their context; SIGKILL after
 * 10 s).
 *
 *   ez_bench_graphsize --address H:P --server-pid PID --topics T [--clients C] [--processes P]
 *                      [--calls N] [--rate HZ] [--window S] [--hold S]
 *
 * --hold keeps the graph S seconds after printing, for a profiler to look at. */
#define _GNU_SOURCE
#include <ezmsg/ezmsg.h>
#include "benchutil.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
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
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_PROCS 256
#define TMO 30000 /* ms, every graph request */

static const char *g_addr;
static int g_topics, g_clients, g_procs, g_calls = 20, g_srv_pid;
static int g_npub, g_nsub, g_filler;
static double g_rate = 2.0, g_window = 2.0, g_hold;
static int g_ready[2], g_go[2];
static pid_t g_pids[MAX_PROCS];
static int g_spawned;
static volatile sig_atomic_t g_stop;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("ez_bench_graphsize: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  for (int k = 0; k < g_spawned; k++) /* (they would die with us anyway: SIGKILL, below) */
    kill(g_pids[k], SIGTERM);
  exit(1);
}

/* ---- the server's resources ---------------------------------------------------------------- */

/* CPU time of every thread of the server, in ns (the first field of each task's schedstat). */
static uint64_t server_cpu_ns(void) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task", g_srv_pid);
  DIR *d = opendir(path);
  if (!d) return 0;
  uint64_t sum = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char p[300];
    snprintf(p, sizeof p, "/proc/%d/task/%s/schedstat", g_srv_pid, e->d_name);
    FILE *f = fopen(p, "r");
    unsigned long long ns = 0;
    if (f && fscanf(f, "%llu", &ns) == 1) sum += ns;
    if (f) fclose(f);
  }
  closedir(d);
  return sum;
}

/* A "Vm...:" line of the server's /proc status, in KiB (-1: unknown). */
static long server_status_kib(const char *key) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", g_srv_pid);
  FILE *f = fopen(path, "r");
  long v = -1;
  size_t n = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, key, n) && line[n] == ':') v = strtol(line + n + 1, NULL, 10);
  if (f) fclose(f);
  return v;
}

static int server_fds(void) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd", g_srv_pid);
  DIR *d = opendir(path);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    n += e->d_name[0] != '.';
  if (d) closedir(d);
  return n;
}

/* ---- workers ------------------------------------------------------------------------------- */

typedef struct worker {
  ez_pub **pubs;
  int n;
} worker;

static void on_term(int sig) {
  (void)sig;
  g_stop = 1;
}

static void *publish_thread(void *arg) {
  worker *w = arg;
  char msg[64] = {0};
  double next = bu_now_s();
  while (!g_stop) {
    next += 1.0 / g_rate;
    double left = next - bu_now_s();
    if (left > 0) bu_sleep_s(left, &g_stop);
    for (int i = 0; i < w->n && !g_stop; i++)
      ez_publish(w->pubs[i], msg, sizeof msg, 200);
  }
  return NULL;
}

/* Worker k: its publishers, then (on "go") its subscribers, then traffic until SIGTERM. */
static void worker_main(int k) {
  char name[64], ok = 'R', go;
  ez_context *ctx = NULL;
  worker w = {calloc((size_t)g_npub / g_procs + 1, sizeof(ez_pub *)), 0};
  ez_sub **subs = calloc((size_t)g_nsub / g_procs + 1, sizeof *subs);
  struct pollfd *pf = calloc((size_t)g_nsub / g_procs + 1, sizeof *pf);
  int ns = 0, rc = ez_context_open(g_addr, &ctx);
  if (rc || !w.pubs || !subs || !pf) goto bad;
  ez_pub_opts o;
  ez_pub_opts_init(&o);
  o.num_buffers = 2;
  o.buf_size = 256;
  for (int i = k; i < g_npub; i += g_procs) {
    snprintf(name, sizeof name, "/gs/p/%d", i);
    if ((rc = ez_pub_create(ctx, name, &o, &w.pubs[w.n]))) goto bad;
    w.n++;
  }
  if (write(g_ready[1], &ok, 1) != 1 || read(g_go[0], &go, 1) != 1) _exit(2);
  for (int j = k; j < g_nsub; j += g_procs) {
    char handle[64];
    snprintf(name, sizeof name, "/gs/s/%d", j);
    snprintf(handle, sizeof handle, "gs-s%d", j);
    ez_sub_opts so = {.handle = handle};
    if ((rc = ez_sub_create(ctx, name, &so, &subs[ns]))) goto bad;
    pf[ns] = (struct pollfd){.fd = ez_sub_fd(subs[ns]), .events = POLLIN};
    ns++;
  }
  pthread_t t;
  bool th = g_rate > 0 && w.n > 0 && pthread_create(&t, NULL, publish_thread, &w) == 0;
  if (write(g_ready[1], &ok, 1) != 1) _exit(2);
  while (!g_stop) {
    poll(pf, (nfds_t)ns, 200);
    for (int i = 0; i < ns; i++) {
      ez_msg m;
      while (ez_recv(subs[i], &m, 0) == 0)
        ez_msg_release(&m);
    }
  }
  if (th) pthread_join(t, NULL);
  ez_context_close(ctx);
  _exit(0);
bad:
  fprintf(stderr, "ez_bench_graphsize: worker %d: %s\n", k, ez_strerror(rc));
  ok = 'E';
  if (write(g_ready[1], &ok, 1) != 1) _exit(2);
  _exit(2);
}

static pid_t spawn_worker(int k) {
  fflush(NULL);
  pid_t parent = getpid(), pid = fork();
  if (pid < 0) die("fork: %s", strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(4);
    signal(SIGTERM, on_term);
    worker_main(k);
  }
  return pid;
}

static void await_ready(int n, double timeout_s, const char *what) {
  double deadline = bu_now_s() + timeout_s;
  for (int got = 0; got < n; got++) {
    int left = (int)((deadline - bu_now_s()) * 1000);
    struct pollfd pf = {.fd = g_ready[0], .events = POLLIN};
    char c;
    if (left <= 0 || poll(&pf, 1, left) <= 0) die("%s: not ready after %.0f s", what, timeout_s);
    if (read(g_ready[0], &c, 1) != 1 || c != 'R') die("%s: a worker failed", what);
  }
}

/* ---- the graph ----------------------------------------------------------------------------- */

static void edge(const char *from, const char *to) {
  int rc = ez_graph_connect(g_addr, from, to, TMO);
  if (rc) die("CONNECT %s -> %s: %s", from, to, ez_strerror(rc));
}

/* The filler: `n` topics in chains of 10 (a chain of one would have no edge: it joins the one
 * before). */
static void build_filler(int n) {
  char a[64], b[64];
  for (int i = 1; i < n; i++) {
    if (i % 10 == 0 && i != n - 1) continue;
    snprintf(a, sizeof a, "/gs/f/%d", i - 1);
    snprintf(b, sizeof b, "/gs/f/%d", i);
    edge(a, b);
  }
}

static void build_endpoint_edges(void) {
  char a[64], b[64];
  for (int j = 0; j < g_nsub; j++) {
    snprintf(b, sizeof b, "/gs/s/%d", j);
    edge("/gs/fan", b);
    for (int d = 1; d <= 3; d++) {
      snprintf(a, sizeof a, "/gs/p/%d", (j + d) % g_npub);
      edge(a, b);
    }
  }
}

/* Channels the graph makes: one per (process, publisher) that a subscriber there reads. */
static size_t expected_channels(void) {
  uint8_t *seen = calloc((size_t)g_npub * (size_t)g_procs, 1);
  size_t n = 0;
  for (int j = 0; seen && j < g_nsub; j++)
    for (int d = 1; d <= 3; d++) {
      size_t at = (size_t)((j + d) % g_npub) * (size_t)g_procs + (size_t)(j % g_procs);
      n += !seen[at];
      seen[at] = 1;
    }
  free(seen);
  return n;
}

static bool profile_counts(const char *json, size_t *pubs, size_t *chans) {
  ez_profile_data d;
  if (ez_profile_parse(json, &d)) return false;
  *pubs = d.n_publishers;
  *chans = d.n_channels;
  ez_profile_data_free(&d);
  return true;
}

/* ---- measurements -------------------------------------------------------------------------- */

typedef struct series {
  double *ms;
  int n;
  uint64_t cpu_ns;
} series;

static void print_series(const char *key, series *s) {
  qsort(s->ms, (size_t)s->n, sizeof *s->ms, bu_cmp_double);
  int r90 = (int)(0.9 * s->n + 0.999999);
  printf("\"%s\": {\"median_ms\": %.3f, \"p90_ms\": %.3f, \"max_ms\": %.3f, \"server_cpu_us\": "
         "%.1f}, ",
         key, s->ms[(s->n - 1) / 2], s->ms[(r90 < 1 ? 1 : r90) - 1], s->ms[s->n - 1],
         (double)s->cpu_ns / 1e3 / s->n);
}

/* kind: 0 connect, 1 join, 2 fanout, 3 dag. */
static series run_ops(int kind, ez_context *ctx) {
  static const char *names[] = {"connect", "join", "fanout", "dag"};
  fprintf(stderr, "ez_bench_graphsize: %s from %.6f\n", names[kind], bu_now_s());
  series s = {calloc((size_t)g_calls, sizeof(double)), g_calls, 0};
  char a[64], b[64];
  for (int i = 0; i < g_calls; i++) {
    snprintf(a, sizeof a, "/gs/x/%d/%d", kind, i);
    int chains = g_filler / 10; /* into the head of a chain, else between two new topics */
    if (chains)
      snprintf(b, sizeof b, "/gs/f/%d", 10 * (i % chains));
    else
      snprintf(b, sizeof b, "/gs/y/%d", i);
    uint64_t c0 = server_cpu_ns();
    double t0 = bu_now_s();
    int rc = 0;
    if (kind == 0) rc = ez_graph_connect(g_addr, a, b, TMO);
    if (kind == 2) rc = ez_graph_connect(g_addr, a, "/gs/fan", TMO);
    ez_sub *sub = NULL;
    if (kind == 1) rc = ez_sub_create(ctx, a, NULL, &sub);
    ez_graph gr;
    if (kind == 3 && !(rc = ez_graph_dag(g_addr, &gr, TMO))) ez_graph_free(&gr);
    s.ms[i] = (bu_now_s() - t0) * 1e3;
    s.cpu_ns += server_cpu_ns() - c0;
    if (rc) die("operation %d: %s", kind, ez_strerror(rc));
    if (kind == 0 || kind == 2) rc = ez_graph_disconnect(g_addr, a, kind ? "/gs/fan" : b, TMO);
    if (rc) die("DISCONNECT: %s", ez_strerror(rc));
    ez_sub_destroy(sub);
  }
  return s;
}

static void usage(FILE *f) {
  fprintf(f, "usage: ez_bench_graphsize --address H:P --server-pid PID --topics T [--clients C]\n"
             "                          [--processes P] [--calls N] [--rate HZ] [--window S] "
             "[--hold S]\n");
}

int main(int argc, char **argv) {
  static const struct option opts[] = {{"address", required_argument, NULL, 'a'},
                                       {"server-pid", required_argument, NULL, 's'},
                                       {"topics", required_argument, NULL, 't'},
                                       {"clients", required_argument, NULL, 'c'},
                                       {"processes", required_argument, NULL, 'p'},
                                       {"calls", required_argument, NULL, 'n'},
                                       {"rate", required_argument, NULL, 'r'},
                                       {"window", required_argument, NULL, 'w'},
                                       {"hold", required_argument, NULL, 'H'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
  int c;
  while ((c = getopt_long(argc, argv, "a:s:t:c:p:n:r:w:H:h", opts, NULL)) != -1) {
    switch (c) {
    case 'a': g_addr = optarg; break;
    case 's': g_srv_pid = atoi(optarg); break;
    case 't': g_topics = atoi(optarg); break;
    case 'c': g_clients = atoi(optarg); break;
    case 'p': g_procs = atoi(optarg); break;
    case 'n': g_calls = atoi(optarg); break;
    case 'r': g_rate = atof(optarg); break;
    case 'w': g_window = atof(optarg); break;
    case 'H': g_hold = atof(optarg); break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (!g_clients) g_clients = g_topics / 10;
  g_npub = g_clients / 2;
  g_nsub = g_clients - g_npub;
  if (!g_procs) g_procs = g_npub < 50 ? g_npub : 50;
  int filler = g_filler = g_topics - g_npub - g_nsub - 1; /* and /gs/fan */
  if (!g_addr || g_srv_pid <= 0 || g_npub < 1 || g_procs < 1 || g_procs > MAX_PROCS ||
      g_calls < 1 || g_rate < 0 || (filler != 0 && filler < 2)) {
    usage(stderr);
    return 2;
  }
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) { /* every endpoint, channel and link a descriptor */
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  signal(SIGPIPE, SIG_IGN);
  for (double t0 = bu_now_s(); ez_graph_ping(g_addr, NULL, 0, 1000) != 0;)
    if (bu_now_s() - t0 > 10) die("no graph server at %s", g_addr);
  long rss0 = server_status_kib("VmRSS");
  if (pipe(g_ready) || pipe(g_go)) die("pipe: %s", strerror(errno));

  double t_setup = bu_now_s();
  build_filler(filler);
  for (int k = 0; k < g_procs; k++, g_spawned++)
    g_pids[k] = spawn_worker(k);
  await_ready(g_procs, 120, "publishers");
  build_endpoint_edges();
  for (int k = 0; k < g_procs; k++)
    if (write(g_go[1], "g", 1) != 1) die("go: %s", strerror(errno));
  await_ready(g_procs, 120, "subscribers");
  size_t want_ch = expected_channels(), np = 0, nc = 0;
  for (double deadline = bu_now_s() + 60;;) {
    char *json = NULL;
    bool ok = ez_profile(g_addr, 0.1, &json, TMO) == 0 && profile_counts(json, &np, &nc) &&
              np == (size_t)g_npub && nc == want_ch;
    free(json);
    if (ok) break;
    if (bu_now_s() > deadline) die("%zu publishers, %zu channels after 60 s", np, nc);
    bu_sleep_s(0.2, &g_stop);
  }
  t_setup = bu_now_s() - t_setup;
  bu_sleep_s(g_window, &g_stop); /* a window of traffic */
  ez_graph g;
  if (ez_graph_dag(g_addr, &g, TMO)) die("DAG");
  size_t nodes = g.n_nodes;
  ez_graph_free(&g);

  ez_context *ctx = NULL;
  if (ez_context_open(g_addr, &ctx)) die("ez_context_open");
  series conn = run_ops(0, ctx), join = run_ops(1, ctx), fan = run_ops(2, ctx),
         dag = run_ops(3, ctx);
  series prof = {calloc((size_t)g_calls, sizeof(double)), g_calls, 0};
  int complete = 0;
  size_t doc = 0;
  fprintf(stderr, "ez_bench_graphsize: profile from %.6f\n", bu_now_s());
  for (int i = 0; i < g_calls; i++) {
    char *json = NULL;
    uint64_t c0 = server_cpu_ns();
    double t0 = bu_now_s();
    int rc = ez_profile(g_addr, g_window, &json, TMO);
    prof.ms[i] = (bu_now_s() - t0) * 1e3;
    prof.cpu_ns += server_cpu_ns() - c0;
    if (rc) die("ez_profile: %s", ez_strerror(rc));
    doc = strlen(json);
    complete += profile_counts(json, &np, &nc) && np == (size_t)g_npub && nc == want_ch;
    free(json);
  }
  fprintf(stderr, "ez_bench_graphsize: done at %.6f\n", bu_now_s());
  int fds = server_fds();
  long rss = server_status_kib("VmRSS"), hwm = server_status_kib("VmHWM");
  ez_context_close(ctx);

  printf("{\"topics\": %d, \"dag_nodes\": %zu, \"clients\": %d, \"publishers\": %d, "
         "\"subscribers\": %d, \"channels\": %zu, \"processes\": %d, \"endpoints\": %zu, "
         "\"server_fds\": %d, \"setup_s\": %.2f, \"calls\": %d, ",
         g_topics, nodes, g_clients, g_npub, g_nsub, want_ch, g_procs, (size_t)g_npub + want_ch,
         fds, t_setup, g_calls);
  print_series("connect", &conn);
  print_series("join", &join);
  print_series("fanout", &fan);
  print_series("dag", &dag);
  print_series("profile", &prof);
  printf("\"profile_complete\": %d, \"profile_doc_kib\": %.1f, \"rss_idle_kib\": %ld, "
         "\"rss_kib\": %ld, \"hwm_kib\": %ld}\n",
         complete, (double)doc / 1024.0, rss0, rss, hwm);
  fflush(stdout);
  bu_sleep_s(g_hold, &g_stop); /* the graph stays for a profiler's look */

  for (int k = 0; k < g_procs; k++)
    kill(g_pids[k], SIGTERM);
  double deadline = bu_now_s() + 10;
  for (int k = 0; k < g_procs; k++) {
    while (waitpid(g_pids[k], NULL, WNOHANG) == 0) {
      if (bu_now_s() > deadline) {
        kill(g_pids[k], SIGKILL);
        waitpid(g_pids[k], NULL, 0);
        break;
      }
      bu_sleep_s(0.02, &g_stop);
    }
  }
  free(conn.ms);
  free(join.ms);
  free(fan.ms);
  free(dag.ms);
  free(prof.ms);
  return 0;
}
