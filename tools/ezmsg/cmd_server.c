/* `ezmsg serve` (a graph server in the foreground) and `ezmsg start` (one in the background). */
#include "cli.h"
#include "metrics.h"
#include "base/wire.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define START_TIMEOUT_MS 5000

enum { OPT_METRICS = 4000 };

static const struct option server_opts[] = {
    {"max-clients", required_argument, NULL, 'c'}, {"dialect", required_argument, NULL, 'd'}, {0}};
static const struct option serve_opts[] = {{"max-clients", required_argument, NULL, 'c'},
                                           {"dialect", required_argument, NULL, 'd'},
                                           {"metrics", required_argument, NULL, OPT_METRICS},
                                           {0}};
#define SERVER_OPTS_HELP                                                                           \
  "  -c, --max-clients N  serve at most N clients at once (default 4096); one more is\n"           \
  "                     refused, and it reports that the server is at its client limit\n"          \
  "  -d, --dialect D    released (default: greets as ezmsg " EZ_VERSION ", for ezmsg 3.7-3.9)\n"   \
  "                     or profiling (greets as " EZ_VERSION_PROFILING ", for the\n"               \
  "                     feature/profiling branch): which Python ezmsg the server takes its\n"      \
  "                     Python clients to be. Both dialects' requests are served either way,\n"    \
  "                     and ezmsg-c clients are served in full either way. Default:\n"             \
  "                     $" EZ_DIALECT_ENV ", else released\n"

typedef struct server_args {
  ez_server_opts opts;
  const char *metrics; /* --metrics H:P */
} server_args;

/* --max-clients and --dialect into an ez_server_opts; --metrics. */
static int server_opt(int opt, const char *arg, void *user) {
  server_args *a = user;
  ez_server_opts *o = &a->opts;
  if (opt == OPT_METRICS) {
    a->metrics = arg;
    return 0;
  }
  if (opt == 'd') {
    o->dialect = !strcmp(arg, "released")    ? EZ_DIALECT_RELEASED
                 : !strcmp(arg, "profiling") ? EZ_DIALECT_PROFILING
                                             : -1;
    return o->dialect < 0 ? -1 : 0;
  }
  char *end;
  errno = 0;
  long v = opt == 'c' ? strtol(arg, &end, 10) : -1;
  if (opt != 'c' || errno || end == arg || *end || v < 1 || v > 1000000) return -1;
  a->opts.max_clients = (int)v;
  return 0;
}

/* Why a server could not listen on addr: the library says only "bad or unusable address", so
 * try to bind it here and name the reason ("address already in use", ...). */
static const char *bind_reason(const char *addr, int rc) {
  char host[256];
  uint16_t port;
  if (rc != EZ_EADDR || ezi_addr_parse(addr, host, &port)) return ez_strerror(rc);
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *ai = NULL;
  char ps[8];
  snprintf(ps, sizeof ps, "%u", port);
  if (getaddrinfo(host, ps, &hints, &ai) || !ai) return "cannot resolve the host";
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, e = 0;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) e = errno;
  if (fd >= 0) close(fd);
  freeaddrinfo(ai);
  if (e == EADDRINUSE) return "address already in use";
  if (e == EADDRNOTAVAIL) return "no such address on this host";
  if (e == EACCES) return "permission denied (a port below 1024?)";
  return e ? strerror(e) : ez_strerror(rc);
}

static const cli_spec serve_spec = {
    .name = "serve",
    .args = "",
    .about = "Runs a graph server in the foreground until SIGINT or SIGTERM, or until a shutdown\n"
             "request stops it (exit 0 either way). A port of 0 picks a free port; the address\n"
             "is announced on stderr. It raises its open-files limit to the hard limit.",
    .min_args = 0,
    .max_args = 0,
    .listen = true,
    .opts = serve_opts,
    .opts_short = "c:d:",
    .opts_help = SERVER_OPTS_HELP
    "      --metrics H:P  also serve /metrics (Prometheus text format) on H:P, from this\n"
    "                     server's profile, asked at each scrape (docs/dashboard.md)\n",
};

static const cli_spec start_spec = {
    .name = "start",
    .args = "",
    .about = "Starts a graph server in the background (a new session, stdio on /dev/null) and\n"
             "returns once it answers, printing its pid on stdout. Stop it with `ezmsg shutdown`\n"
             "or by signalling that pid.",
    .min_args = 0,
    .max_args = 0,
    .opts = server_opts,
    .opts_short = "c:d:",
    .opts_help = SERVER_OPTS_HELP,
};

/* Raises this process's soft limit on open files to its hard limit (at most 1 Mi). A server
 * holds a descriptor per client connection and one per shared-memory segment, and a soft limit
 * of 1024 (the usual default) would cap a large graph long before the hard limit does. Failure
 * leaves the limit as it was. */
static void raise_fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl)) return;
  rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > (1u << 20) ? (1u << 20) : rl.rlim_max;
  if (rl.rlim_cur >= want) return;
  rl.rlim_cur = want;
  setrlimit(RLIMIT_NOFILE, &rl);
}

/* Blocks SIGINT and SIGTERM (taken with sigtimedwait instead), then resets their dispositions:
 * a shell starts background jobs with SIGINT ignored, and an ignored signal is discarded even
 * while blocked, but `ezmsg serve &` must still stop on SIGINT. */
static void block_stop_signals(sigset_t *set) {
  sigemptyset(set);
  sigaddset(set, SIGINT);
  sigaddset(set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, set, NULL);
  signal(SIGINT, SIG_DFL); /* blocked already, so a signal now stays pending */
  signal(SIGTERM, SIG_DFL);
}

/* Runs a started server until a stop signal (taken with sigtimedwait; the signals are blocked in
 * every thread) or until it stops by itself (a SHUTDOWN request), then stops it. */
static void run_until_stopped(ez_server *srv, const sigset_t *set) {
  for (;;) {
    struct timespec ts = {0, 100 * 1000000L};
    int sig = sigtimedwait(set, NULL, &ts);
    if (sig == SIGINT || sig == SIGTERM) break;
    if (ez_server_wait(srv, 0) == 0) break;
  }
  ez_server_stop(srv);
}

int cmd_serve(int argc, char **argv) {
  cli_ctx ctx;
  server_args a = {0};
  int rc = cli_parse(&serve_spec, argc, argv, &ctx, server_opt, &a);
  if (rc >= 0) return rc;
  char maddr[300];
  if (a.metrics && cli_check_address(a.metrics, true, maddr))
    return cli_usage_error(&serve_spec, "bad --metrics '%s' (want HOST:PORT)", a.metrics);
  sigset_t set;
  block_stop_signals(&set); /* before the server thread exists, so it inherits the mask */
  raise_fd_limit();
  ez_server *srv = NULL;
  rc = ez_server_start_opts(ctx.address, &a.opts, &srv);
  if (rc) {
    fprintf(stderr, "ezmsg: cannot serve on %s: %s\n", ctx.shown, bind_reason(ctx.shown, rc));
    return 1;
  }
  metrics_server *m = NULL;
  if (a.metrics) {
    char err[400];
    m = metrics_start(maddr, ez_server_address(srv), err, sizeof err);
    if (!m) {
      fprintf(stderr, "ezmsg: --metrics: %s\n", err);
      ez_server_stop(srv);
      return 1;
    }
  }
  fprintf(stderr, "graph server listening on %s\n", ez_server_address(srv));
  if (m)
    fprintf(stderr, "metrics on http://%s/metrics%s\n", metrics_address(m),
            metrics_loopback(m) ? "" : "; NOT loopback: anyone who reaches it sees the graph");
  run_until_stopped(srv, &set);
  metrics_stop(m);
  return 0;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Closes every fd above 2 except `keep` (so the daemon holds no pipe of whoever started it). */
static void close_other_fds(int keep) {
  int fds[1024], n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (!d) {
    for (int fd = 3; fd < 1024; fd++)
      if (fd != keep) close(fd);
    return;
  }
  struct dirent *e;
  while ((e = readdir(d)) && n < 1024) {
    int fd = atoi(e->d_name);
    if (fd > 2 && fd != keep && fd != dirfd(d)) fds[n++] = fd;
  }
  closedir(d);
  for (int i = 0; i < n; i++)
    close(fds[i]);
}

/* The background server process: reports ez_server_start's result through `report`. */
static void daemon_main(const cli_ctx *ctx, const ez_server_opts *opts, int report) {
  close_other_fds(report);
  setsid();
  int null = open("/dev/null", O_RDWR);
  if (null >= 0) {
    dup2(null, 0);
    dup2(null, 1);
    dup2(null, 2);
    if (null > 2) close(null);
  }
  if (chdir("/") != 0) { /* not fatal */
  }
  sigset_t set;
  block_stop_signals(&set);
  raise_fd_limit();
  ez_server *srv = NULL;
  int32_t rc = ez_server_start_opts(ctx->address, opts, &srv);
  ssize_t w;
  do
    w = write(report, &rc, sizeof rc);
  while (w < 0 && errno == EINTR);
  close(report);
  if (rc) _exit(1);
  run_until_stopped(srv, &set);
  _exit(0);
}

int cmd_start(int argc, char **argv) {
  cli_ctx ctx;
  server_args a = {0};
  int rc = cli_parse(&start_spec, argc, argv, &ctx, server_opt, &a);
  const ez_server_opts opts = a.opts;
  if (rc >= 0) return rc;
  if (ez_graph_ping(ctx.address, NULL, 0, 1000) == 0) {
    fprintf(stderr, "ezmsg: a graph server already answers at %s\n", ctx.shown);
    return 1;
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    fprintf(stderr, "ezmsg: pipe: %s\n", strerror(errno));
    return 1;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "ezmsg: fork: %s\n", strerror(errno));
    return 1;
  }
  if (pid == 0) {
    close(fds[0]);
    daemon_main(&ctx, &opts, fds[1]);
  }
  close(fds[1]);

  int64_t deadline = now_ms() + START_TIMEOUT_MS;
  int32_t status = 0;
  size_t got = 0;
  while (got < sizeof status) {
    int left = (int)(deadline - now_ms());
    struct pollfd p = {.fd = fds[0], .events = POLLIN};
    int r = left > 0 ? poll(&p, 1, left) : 0;
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    ssize_t n = read(fds[0], (char *)&status + got, sizeof status - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t)n;
  }
  close(fds[0]);
  if (got < sizeof status || status != 0) {
    if (got < sizeof status) status = EZ_ETIMEDOUT;
    fprintf(stderr, "ezmsg: cannot start a graph server on %s: %s\n", ctx.shown,
            bind_reason(ctx.shown, status));
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return 1;
  }
  /* Listening; now it must answer like a graph server. */
  for (;;) {
    int left = (int)(deadline - now_ms());
    if (left <= 0) break;
    if (ez_graph_ping(ctx.address, NULL, 0, left < 1000 ? left : 1000) == 0) {
      printf("%ld\n", (long)pid);
      return 0;
    }
    if (waitpid(pid, NULL, WNOHANG) == pid) {
      fprintf(stderr, "ezmsg: the graph server on %s exited at once\n", ctx.shown);
      return 1;
    }
    sleep_ms(20);
  }
  fprintf(stderr, "ezmsg: the graph server on %s did not answer within %d s\n", ctx.shown,
          START_TIMEOUT_MS / 1000);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return 1;
}
