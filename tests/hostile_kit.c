/* The hostile data-plane tests' kit (hostile_kit.h). */
#include "hostile_kit.h"
#include "rawproto.h"

#include "proto/marshal.h"
#include "proto/shm.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- sockets (no cmocka: a forked child uses these too) ------------------------------------ */

bool hk_write(int fd, const void *p, size_t n) {
  const uint8_t *b = p;
  while (n) {
    ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    b += k;
    n -= (size_t)k;
  }
  return true;
}

/* Reads exactly n bytes within timeout_ms. */
static bool rd(int fd, void *buf, size_t n, int timeout_ms) {
  uint8_t *p = buf;
  int64_t end = th_now_ms() + timeout_ms;
  while (n) {
    int left = (int)(end - th_now_ms());
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int r = poll(&pf, 1, left > 0 ? left : 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    ssize_t k = recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= (size_t)k;
  }
  return true;
}

static bool rd_str(int fd, char *out, size_t cap, int timeout_ms) {
  uint8_t b[8];
  if (!rd(fd, b, 8, timeout_ms)) return false;
  uint64_t n = ezi_get_u64le(b);
  if (n >= cap || !rd(fd, out, (size_t)n, timeout_ms)) return false;
  out[n] = 0;
  return true;
}

static bool wr_str(int fd, uint8_t cmd, const char *s) {
  uint8_t b[512];
  size_t n = 0, l = strlen(s);
  if (l > 400) return false;
  if (cmd != 0xff) b[n++] = cmd;
  ezi_put_u64le(b + n, l);
  memcpy(b + n + 8, s, l);
  return hk_write(fd, b, n + 8 + l);
}

static int tcp_to(const char *addr) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)atoi(strrchr(addr, ':') + 1)),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

/* A connection to the graph server whose greeting was read. */
static int graph_open(const char *srv) {
  int fd = tcp_to(srv);
  char ver[64];
  if (fd >= 0 && !rd_str(fd, ver, sizeof ver, HK_TMO)) {
    close(fd);
    return -1;
  }
  return fd;
}

/* ---- the fake publisher ---------------------------------------------------------------------- */

bool hk_pub_register(hk_pub *fp, const char *srv, const char *topic) {
  *fp = (hk_pub){.graph = -1, .listener = -1, .data = -1, .lease = -1};
  fp->listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (fp->listener < 0 || bind(fp->listener, (struct sockaddr *)&a, sizeof a) ||
      listen(fp->listener, 16) || getsockname(fp->listener, (struct sockaddr *)&a, &len))
    return false;
  snprintf(fp->addr, sizeof fp->addr, "127.0.0.1:%u", ntohs(a.sin_port));
  fp->graph = graph_open(srv);
  return fp->graph >= 0 && wr_str(fp->graph, HK_PUBLISH, topic) &&
         rd_str(fp->graph, fp->id, sizeof fp->id, HK_TMO) && wr_str(fp->graph, 0xff, fp->addr);
}

bool hk_pub_registered(hk_pub *fp, int timeout_ms) {
  uint8_t c = 0xff;
  return rd(fp->graph, &c, 1, timeout_ms) && c == HK_COMPLETE;
}

bool hk_pub_segment(hk_pub *fp, const char *srv, uint64_t nbuf, uint64_t size, bool map) {
  fp->lease = graph_open(srv);
  uint8_t m[17] = {HK_SHM_CREATE}, c = 0xff;
  ezi_put_u64le(m + 1, nbuf);
  ezi_put_u64le(m + 9, size);
  if (fp->lease < 0 || !hk_write(fp->lease, m, sizeof m) || !rd(fp->lease, &c, 1, HK_TMO) ||
      c != HK_COMPLETE || !rd_str(fp->lease, fp->seg, sizeof fp->seg, HK_TMO))
    return false;
  fp->nbuf = nbuf;
  fp->stride = size + 16 * nbuf;
  fp->size = (size_t)(nbuf * fp->stride);
  if (!map) return true;
  char path[96];
  snprintf(path, sizeof path, "/%s", fp->seg);
  int fd = shm_open(path, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return false;
  void *b = mmap(NULL, fp->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (b == MAP_FAILED) return false;
  fp->base = b;
  return true;
}

bool hk_pub_accept(hk_pub *fp, int timeout_ms) {
  if (fp->data >= 0) close(fp->data);
  fp->data = rp_accept_talker(fp->listener, timeout_ms);
  int one = 1;
  if (fp->data >= 0) setsockopt(fp->data, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  uint8_t c = 0xff;
  char id[64];
  return fp->data >= 0 && rd(fp->data, &c, 1, HK_TMO) && c == HK_CHANNEL &&
         rd_str(fp->data, id, sizeof id, HK_TMO);
}

bool hk_pub_handshake(hk_pub *fp, const char *seg, uint64_t nbuf, uint8_t *answer) {
  uint8_t b[9];
  if (!wr_str(fp->data, 0xff, seg) || !rd(fp->data, b, 9, HK_TMO)) return false;
  if (answer) *answer = b[0];
  b[0] = HK_COMPLETE;
  ezi_put_u64le(b + 1, nbuf);
  return hk_write(fp->data, b, 9);
}

size_t hk_pub_drain(hk_pub *fp, uint8_t *buf, size_t cap, int ms) {
  size_t n = 0;
  int64_t end = th_now_ms() + ms;
  while (n < cap) {
    int left = (int)(end - th_now_ms());
    struct pollfd pf = {.fd = fp->data, .events = POLLIN};
    if (poll(&pf, 1, left > 0 ? left : 0) != 1) break;
    ssize_t k = recv(fp->data, buf + n, cap - n, MSG_DONTWAIT);
    if (k <= 0) break;
    n += (size_t)k;
  }
  return n;
}

void hk_fill(uint8_t *p, size_t len, uint64_t k) {
  for (size_t i = 0; i < len; i++)
    p[i] = hk_pat(i, k);
}

void hk_pub_put_slot(hk_pub *fp, uint64_t id, size_t len) {
  uint8_t *d = fp->base + (id % fp->nbuf) * fp->stride + 16;
  ezi_marshal_bytes_header(d, id, len);
  hk_fill(d + EZI_MARSHAL_BYTES_HDR, len, id);
}

size_t hk_raw3(uint8_t *d, uint64_t id, size_t len1, size_t len2) {
  static const uint8_t pickle[HK_RAW_B0] = {0x80, 0x05, 'K', 0x07, '.'}; /* the int 7 */
  d[0] = 'E';
  d[1] = 'Z';
  ezi_put_u64le(d + 2, id);
  ezi_put_u64le(d + 10, 3);
  ezi_put_u64le(d + 18, HK_RAW_B0);
  ezi_put_u64le(d + 26, len1);
  ezi_put_u64le(d + 34, len2);
  memcpy(d + 42, pickle, HK_RAW_B0);
  hk_fill(d + 42 + HK_RAW_B0, len1, id);
  hk_fill(d + 42 + HK_RAW_B0 + len1, len2, id + 1);
  return 42 + HK_RAW_B0 + len1 + len2;
}

void hk_pub_put_raw3(hk_pub *fp, uint64_t id, size_t len1, size_t len2) {
  hk_raw3(fp->base + (id % fp->nbuf) * fp->stride + 16, id, len1, len2);
}

bool hk_pub_tx_shm(hk_pub *fp, uint64_t id) {
  uint8_t b[17 + 64];
  size_t n = strlen(fp->seg);
  b[0] = HK_TX_SHM;
  ezi_put_u64le(b + 1, id);
  ezi_put_u64le(b + 9, n);
  memcpy(b + 17, fp->seg, n);
  return hk_write(fp->data, b, 17 + n); /* one segment: no Nagle delay */
}

void hk_pub_close(hk_pub *fp) {
  if (fp->base) munmap(fp->base, fp->size);
  fp->base = NULL;
  int *fds[] = {&fp->data, &fp->listener, &fp->graph, &fp->lease};
  for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
    if (*fds[i] >= 0) {
      close(*fds[i]);
      *fds[i] = -1;
    }
}

/* ---- processes ------------------------------------------------------------------------------- */

static char g_self[512];

void hk_child(void) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
    signal(sigs[i], SIG_DFL);
}

void hk_start(hk_proc *p, const hk_spawn_opts *o, const char *arg0, ...) {
  static int seq;
  hk_spawn_opts none = {0};
  if (!o) o = &none;
  memset(p, 0, sizeof *p);
  snprintf(p->err, sizeof p->err, "/tmp/ez-hostile-%d-%d.err", (int)getpid(), seq++);
  char *argv[32];
  int n = 0;
  argv[n++] = o->self ? g_self : (char *)th_cli();
  va_list ap;
  va_start(ap, arg0);
  for (const char *a = arg0; a && n < 31; a = va_arg(ap, const char *))
    argv[n++] = (char *)a;
  va_end(ap);
  argv[n] = NULL;
  int in[2], out[2];
  assert_int_equal(pipe2(in, O_CLOEXEC), 0);
  assert_int_equal(pipe2(out, O_CLOEXEC), 0);
  pid_t parent = getpid();
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);
    int efd = open(p->err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    dup2(in[0], 0);
    dup2(out[1], 1);
    if (efd >= 0) dup2(efd, 2);
    setenv("EZMSG_LOG_LEVEL", "warn", 1);
    for (int i = 0; i < 8 && o->env[i]; i++)
      putenv((char *)o->env[i]);
    if (o->nofile_soft) {
      struct rlimit rl = {o->nofile_soft, o->nofile_hard ? o->nofile_hard : o->nofile_soft};
      if (setrlimit(RLIMIT_NOFILE, &rl)) _exit(125);
    }
    execv(argv[0], argv);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  p->pid = pid;
  p->in_fd = in[1];
  p->out_fd = out[0];
}

bool hk_expect(hk_proc *p, const char *prefix, char *line, size_t cap, int timeout_ms) {
  int64_t end = th_now_ms() + timeout_ms;
  size_t pl = strlen(prefix);
  for (;;) {
    char *nl;
    while ((nl = memchr(p->buf, '\n', p->len))) {
      size_t l = (size_t)(nl - p->buf);
      bool hit = l >= pl && !memcmp(p->buf, prefix, pl);
      if (hit && line && cap) {
        size_t c = l < cap - 1 ? l : cap - 1;
        memcpy(line, p->buf, c);
        line[c] = 0;
      }
      memmove(p->buf, nl + 1, p->len - l - 1);
      p->len -= l + 1;
      if (hit) return true;
    }
    int left = (int)(end - th_now_ms());
    if (left <= 0 || p->len == sizeof p->buf) return false;
    struct pollfd pf = {.fd = p->out_fd, .events = POLLIN};
    int r = poll(&pf, 1, left);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    ssize_t k = read(p->out_fd, p->buf + p->len, sizeof p->buf - p->len);
    if (k <= 0) return false;
    p->len += (size_t)k;
  }
}

bool hk_scan(hk_proc *p, const char *prefix, char *line, size_t cap, long *got) {
  bool hit = false;
  for (;;) {
    char *nl;
    while ((nl = memchr(p->buf, '\n', p->len))) {
      size_t l = (size_t)(nl - p->buf);
      if (got && l >= 4 && !memcmp(p->buf, "got ", 4)) (*got)++;
      if (!hit && l >= strlen(prefix) && !memcmp(p->buf, prefix, strlen(prefix))) {
        hit = true;
        if (line && cap) {
          size_t c = l < cap - 1 ? l : cap - 1;
          memcpy(line, p->buf, c);
          line[c] = 0;
        }
      }
      memmove(p->buf, nl + 1, p->len - l - 1);
      p->len -= l + 1;
    }
    if (p->len == sizeof p->buf) p->len = 0; /* a line too long: dropped */
    struct pollfd pf = {.fd = p->out_fd, .events = POLLIN};
    if (poll(&pf, 1, 0) != 1) return hit;
    ssize_t k = read(p->out_fd, p->buf + p->len, sizeof p->buf - p->len);
    if (k <= 0) return hit;
    p->len += (size_t)k;
  }
}

bool hk_alive(hk_proc *p) {
  if (p->pid <= 0) return false;
  int st;
  return waitpid(p->pid, &st, WNOHANG) == 0;
}

int hk_stop(hk_proc *p) {
  if (p->pid <= 0) return -1;
  if (p->in_fd >= 0) close(p->in_fd);
  p->in_fd = -1;
  int rc = th_wait_exit(p->pid, 5000);
  if (rc < 0) rc = th_stop(p->pid, SIGKILL, 5000);
  p->pid = 0;
  close(p->out_fd);
  p->out_fd = -1;
  unlink(p->err);
  return rc;
}

char *hk_stderr(const hk_proc *p) {
  FILE *f = fopen(p->err, "r");
  if (!f) return strdup("");
  size_t cap = 1 << 16, n = 0;
  char *s = malloc(cap + 1);
  size_t k;
  while (s && (k = fread(s + n, 1, cap - n, f)) > 0) {
    n += k;
    if (n == cap) {
      char *t = realloc(s, 2 * cap + 1);
      if (!t) break;
      s = t;
      cap *= 2;
    }
  }
  fclose(f);
  if (s) s[n] = 0;
  return s;
}

int hk_count_lines(const hk_proc *p, const char *needle) {
  char *s = hk_stderr(p);
  int n = 0;
  for (char *line = s, *nl; line && *line; line = nl ? nl + 1 : NULL) {
    nl = strchr(line, '\n');
    if (nl) *nl = 0;
    n += strstr(line, needle) != NULL;
  }
  free(s);
  return n;
}

void hk_assert_alive(hk_proc *p, const char *what) {
  int st = 0;
  if (p->pid <= 0 || waitpid(p->pid, &st, WNOHANG) == 0) return;
  char *s = hk_stderr(p), how[64];
  size_t l = strlen(s);
  if (WIFSIGNALED(st))
    snprintf(how, sizeof how, "was killed by signal %d (%s)", WTERMSIG(st),
             strsignal(WTERMSIG(st)));
  else
    snprintf(how, sizeof how, "exited with %d", WEXITSTATUS(st));
  pid_t pid = p->pid;
  p->pid = 0; /* reaped */
  fail_msg("%s (pid %d) %s; the end of its stderr:\n%s", what, (int)pid, how,
           s + (l > 2000 ? l - 2000 : 0));
}

/* ---- /proc ------------------------------------------------------------------------------------
 */

long hk_status_kb(pid_t pid, const char *field) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long kb = -1;
  size_t fl = strlen(field);
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, field, fl) && line[fl] == ':') {
      kb = strtol(line + fl + 1, NULL, 10);
      break;
    }
  fclose(f);
  return kb;
}

long hk_cpu_ms(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* after the command name, fields 3.. */
  if (!p) return -1;
  unsigned long ut = 0, st = 0;
  /* state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
  if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
    return -1;
  long hz = sysconf(_SC_CLK_TCK);
  return (long)((ut + st) * 1000 / (unsigned long)(hz > 0 ? hz : 100));
}

bool hk_nofile(pid_t pid, unsigned long *soft, unsigned long *hard) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/limits", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return false;
  bool ok = false;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "Max open files", 14)) {
      ok = sscanf(line + 14, "%lu %lu", soft, hard) == 2;
      break;
    }
  fclose(f);
  return ok;
}

bool hk_mapped_shm(pid_t pid, const char *prefix, char *name, size_t cap) {
  char path[64], line[1024];
  snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return false;
  bool ok = false;
  size_t pl = strlen(prefix);
  while (!ok && fgets(line, sizeof line, f)) {
    char *s = strstr(line, "/dev/shm/");
    if (!s || strncmp(s + 9, prefix, pl)) continue;
    s += 9;
    s[strcspn(s, " \n")] = 0;
    snprintf(name, cap, "%s", s);
    ok = true;
  }
  fclose(f);
  return ok;
}

/* ---- the victim role ---------------------------------------------------------------------------
 */

/* Whether m is right for `check`: "any", "hk:N" (N bytes of hk_fill) or "cli:N" (`ezmsg pub
 * --size N`: bytes 0..7 its number, byte i >= 8 i mod 256). */
static bool msg_ok(const ez_msg *m, const char *check, char *why, size_t cap) {
  const uint8_t *d = m->data;
  if (!strncmp(check, "hk:", 3)) {
    size_t want = (size_t)strtoul(check + 3, NULL, 10);
    if (m->len != want) {
      snprintf(why, cap, "len %zu of message %llu, want %zu", m->len, (unsigned long long)m->msg_id,
               want);
      return false;
    }
    for (size_t i = 0; i < m->len; i++)
      if (d[i] != hk_pat(i, m->msg_id)) {
        snprintf(why, cap, "byte %zu of message %llu", i, (unsigned long long)m->msg_id);
        return false;
      }
  } else if (!strncmp(check, "mix:", 4)) { /* hk:N, or raw3 (hk_raw3) with N and 16 */
    size_t want = (size_t)strtoul(check + 4, NULL, 10);
    if (!(m->flags & EZ_MSG_RAW_PICKLE)) {
      char hk[32];
      snprintf(hk, sizeof hk, "hk:%zu", want);
      return msg_ok(m, hk, why, cap);
    }
    const ez_iov *b = m->bufs;
    if (m->nbufs != 3 || b[0].len != HK_RAW_B0 || b[1].len != want || b[2].len != 16) {
      snprintf(why, cap, "raw message %llu: %zu buffers of %zu, %zu, %zu bytes",
               (unsigned long long)m->msg_id, m->nbufs, m->nbufs ? b[0].len : 0,
               m->nbufs > 1 ? b[1].len : 0, m->nbufs > 2 ? b[2].len : 0);
      return false;
    }
    for (size_t i = 0; i < want; i++)
      if (((const uint8_t *)b[1].data)[i] != hk_pat(i, m->msg_id)) {
        snprintf(why, cap, "byte %zu of buffer 1 of message %llu", i,
                 (unsigned long long)m->msg_id);
        return false;
      }
  } else if (!strncmp(check, "cli:", 4)) {
    size_t want = (size_t)strtoul(check + 4, NULL, 10);
    if (m->len != want) {
      snprintf(why, cap, "len %zu, want %zu", m->len, want);
      return false;
    }
    for (size_t i = 8; i < m->len; i++)
      if (d[i] != (uint8_t)i) {
        /* A view is the publisher's memory: a segment truncated while we read it reads as zeros
         * from the faulting page on (shmguard.h). That tail is not a bad message. */
        size_t z = i;
        while (z < m->len && d[z] == 0)
          z++;
        if (z == m->len) {
          snprintf(why, cap, "zeroed from byte %zu", i);
          return true;
        }
        snprintf(why, cap, "byte %zu", i);
        return false;
      }
  }
  return true;
}

/* --victim ADDR TOPIC CHECK: subscribes, says "ready", then "got ID LEN" per message (or
 * "bad WHY" and exit 3); ends when its stdin closes. */
static int role_victim(int argc, char **argv) {
  if (argc < 5) return 2;
  signal(SIGPIPE, SIG_IGN);
  ez_context *ctx = NULL;
  ez_sub *s = NULL;
  if (ez_context_open(argv[2], &ctx) || ez_sub_create(ctx, argv[3], NULL, &s)) return 4;
  printf("ready\n");
  fflush(stdout);
  int rc = 0;
  for (;;) {
    struct pollfd pf = {.fd = 0, .events = POLLIN};
    if (poll(&pf, 1, 0) == 1) { /* anything, or EOF, on stdin: the end */
      char c;
      if (read(0, &c, 1) <= 0) break;
    }
    ez_msg m;
    if (ez_recv(s, &m, 100)) continue;
    char why[128] = "";
    bool ok = msg_ok(&m, argv[4], why, sizeof why);
    if (ok) {
      printf("got %llu %zu%s%s\n", (unsigned long long)m.msg_id, m.len, why[0] ? " " : "", why);
    } else { /* (on stderr too: a test that fails on the exit prints the end of stderr) */
      printf("bad %s\n", why);
      fprintf(stderr, "bad message %llu: %s\n", (unsigned long long)m.msg_id, why);
    }
    fflush(stdout);
    ez_msg_release(&m);
    if (!ok) {
      rc = 3;
      break;
    }
  }
  ez_sub_destroy(s);
  ez_context_close(ctx);
  return rc;
}

/* --attach NAME: ezi_shm_attach of NAME; prints "rc N". */
static int role_attach(int argc, char **argv) {
  if (argc < 3) return 2;
  ezi_shm s;
  int rc = ezi_shm_attach(argv[2], &s);
  printf("rc %d\n", rc);
  fflush(stdout);
  ezi_shm_detach(&s);
  return 0;
}

int hk_main(int argc, char **argv, const struct CMUnitTest *tests, size_t n) {
  ssize_t l = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
  if (l > 0) g_self[l] = 0;
  if (argc >= 2 && !strcmp(argv[1], "--victim")) return role_victim(argc, argv);
  if (argc >= 2 && !strcmp(argv[1], "--attach")) return role_attach(argc, argv);
  signal(SIGPIPE, SIG_IGN);
  if (argc >= 2) cmocka_set_test_filter(argv[1]); /* "test_length_*" */
  return _cmocka_run_group_tests("tests", tests, n, NULL, NULL);
}
