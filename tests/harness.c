#include "harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int th_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0) abort();
  socklen_t len = sizeof a;
  getsockname(fd, (struct sockaddr *)&a, &len);
  close(fd);
  return ntohs(a.sin_port);
}

char *th_free_address(char *buf, size_t cap) {
  snprintf(buf, cap, "127.0.0.1:%d", th_free_port());
  return buf;
}

const char *th_cli(void) {
  const char *c = getenv("EZ_CLI");
  return c ? c : "ezmsg";
}

pid_t th_spawn(char *const argv[], int out_fd, int err_fd) {
  pid_t pid = fork();
  if (pid == 0) {
    /* If the test process dies (a crash, a timeout), its children go too: an orphaned server
     * would hold CTest's output pipe open and turn a failure into a timeout. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (out_fd >= 0) dup2(out_fd, 1);
    if (err_fd >= 0) dup2(err_fd, 2);
    execv(argv[0], argv);
    _exit(127);
  }
  return pid;
}

pid_t th_spawn_cli(int out_fd, const char *arg0, ...) {
  char *argv[32];
  int n = 0;
  argv[n++] = (char *)th_cli();
  va_list ap;
  va_start(ap, arg0);
  for (const char *a = arg0; a && n < 31; a = va_arg(ap, const char *))
    argv[n++] = (char *)a;
  va_end(ap);
  argv[n] = NULL;
  return th_spawn(argv, out_fd, -1);
}

int64_t th_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void th_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

int th_wait_exit(pid_t pid, int timeout_ms) {
  int status = 0;
  for (int waited = 0;; waited += 5) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0) return -1;
    if (waited >= timeout_ms) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    th_sleep_ms(5);
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

int th_stop(pid_t pid, int sig, int timeout_ms) {
  kill(pid, sig);
  return th_wait_exit(pid, timeout_ms);
}

int th_run(char *out, size_t cap, const char *fmt, ...) {
  char cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  size_t n = 0;
  if (out && cap) {
    n = fread(out, 1, cap - 1, p);
    out[n] = 0;
  } else {
    char sink[4096];
    while (fread(sink, 1, sizeof sink, p) > 0) {
    }
  }
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

pid_t th_start_server(const char *addr) {
  pid_t pid = th_spawn_cli(-1, "serve", "--address", addr, NULL);
  for (int i = 0; i < 1000; i++) {
    if (ez_graph_ping(addr, NULL, 0, 200) == 0) return pid;
    th_sleep_ms(10);
  }
  th_stop(pid, SIGKILL, 1000);
  fail_msg("server at %s did not come up", addr);
  return -1;
}

int th_count_shm(void) {
  DIR *d = opendir("/dev/shm");
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    n += strncmp(e->d_name, "psm_", 4) == 0;
  closedir(d);
  return n;
}

ez_context *th_open_ctx(const char *window) {
  if (window) setenv(EZ_TCP_WINDOW_ENV, window, 1);
  ez_context *ctx = NULL;
  assert_int_equal(ez_context_open(th_addr, &ctx), 0);
  unsetenv(EZ_TCP_WINDOW_ENV);
  return ctx;
}

void th_wait_count(long long (*get)(ez_context *), ez_context *ctx, long long n, int timeout_ms) {
  int64_t end = th_now_ms() + timeout_ms;
  while (get(ctx) != n && th_now_ms() < end)
    th_sleep_ms(1);
  assert_int_equal(get(ctx), n);
}

long long th_chan_window(ez_context *ctx) {
  char *json = NULL;
  assert_int_equal(ez_context_profile(ctx, 1.0, &json), 0);
  const char *p = strstr(json, "\"tcp_window\":");
  long long v = p ? strtoll(p + 13, NULL, 10) : -1;
  free(json);
  return v;
}

int th_count_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    n += e->d_name[0] != '.';
  closedir(d);
  return n - 1; /* the DIR's own fd */
}

int th_server_up(char *addr, pid_t *pid) {
  th_free_address(addr, 64);
  *pid = th_start_server(addr);
  return *pid > 0 ? 0 : -1;
}

int th_server_down(pid_t *pid) {
  int rc = *pid > 0 ? th_stop(*pid, SIGTERM, 10000) : 0;
  *pid = 0;
  return rc == 0 ? 0 : -1;
}

char th_addr[64];
static pid_t th_server;

int th_setup(void **state) {
  (void)state;
  return th_server_up(th_addr, &th_server);
}

int th_teardown(void **state) {
  (void)state;
  return th_server_down(&th_server);
}

void th_recv_cli64(ez_sub *s, uint64_t *next, int timeout_ms) {
  ez_msg m;
  int rc = ez_recv(s, &m, timeout_ms);
  if (rc) fail_msg("waiting for message %llu: %s", (unsigned long long)*next, ez_strerror(rc));
  uint64_t k = 0;
  if (m.len >= 8) memcpy(&k, m.data, 8);
  bool ok = m.len == 64 && (*next == UINT64_MAX || k == *next);
  for (size_t i = 8; ok && i < 64; i++)
    ok = ((const uint8_t *)m.data)[i] == (uint8_t)i;
  ez_msg_release(&m);
  if (!ok)
    fail_msg("message %llu (%zu bytes): expected number %llu", (unsigned long long)k, m.len,
             (unsigned long long)*next);
  *next = k + 1;
}
