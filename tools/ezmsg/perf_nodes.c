/* `ezmsg perf`: the nodes (source, sink, relay, ping, pong), the processes and threads that run
 * them, and the forking and reaping of those processes. The coordinator (run_case) and the report
 * are in cmd_perf.c, which also describes the design; perf.h has what both share. */
#include "perf.h"
#include "cpupin.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- topology ------------------------------------------------------------------------------- */

void perf_fail(node_result *r, int rc, const char *fmt, ...) {
  if (r->rc) return; /* keep the first failure */
  r->rc = rc ? rc : -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->err, sizeof r->err, fmt, ap);
  va_end(ap);
}

void perf_build_topo(const perf_case *pc, unsigned tag, topo *t) {
  memset(t, 0, sizeof *t);
  char base[64];
  snprintf(base, sizeof base, "perf/%d/%u", (int)getpid(), tag);
  node *v = t->nodes;
  unsigned k = 0;
  switch (pc->cfg) {
  case CFG_FANOUT:
    v[k] = (node){.role = R_SOURCE, .downstream = pc->n};
    snprintf(v[k++].out, sizeof v->out, "%s/t", base);
    for (unsigned i = 0; i < pc->n; i++) {
      v[k] = (node){.role = R_SINK, .ends = 1};
      snprintf(v[k++].in, sizeof v->in, "%s/t", base);
    }
    break;
  case CFG_FANIN:
    for (unsigned i = 0; i < pc->n; i++) {
      v[k] = (node){.role = R_SOURCE, .src = i, .downstream = 1};
      snprintf(v[k++].out, sizeof v->out, "%s/t", base);
    }
    v[k] = (node){.role = R_SINK, .ends = pc->n};
    snprintf(v[k++].in, sizeof v->in, "%s/t", base);
    break;
  case CFG_RELAY:
    v[k] = (node){.role = R_SOURCE, .downstream = 1};
    snprintf(v[k++].out, sizeof v->out, "%s/r0", base);
    for (unsigned i = 0; i < pc->n; i++) {
      v[k] = (node){.role = R_RELAY, .downstream = 1};
      snprintf(v[k].in, sizeof v->in, "%s/r%u", base, i);
      snprintf(v[k++].out, sizeof v->out, "%s/r%u", base, i + 1);
    }
    v[k] = (node){.role = R_SINK, .ends = 1};
    snprintf(v[k++].in, sizeof v->in, "%s/r%u", base, pc->n);
    break;
  default: /* pingpong */
    v[k] = (node){.role = R_PING, .downstream = 1};
    snprintf(v[k].out, sizeof v->out, "%s/ping", base);
    snprintf(v[k++].in, sizeof v->in, "%s/pong", base);
    v[k] = (node){.role = R_PONG, .downstream = 1};
    snprintf(v[k].in, sizeof v->in, "%s/ping", base);
    snprintf(v[k++].out, sizeof v->out, "%s/pong", base);
    break;
  }
  t->n = k;
  for (unsigned i = 0; i < k; i++)
    v[i].index = i;
}

uint64_t perf_cpu_ns(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru)) return 0;
  return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000u +
         (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000u;
}

/* ---- small helpers -------------------------------------------------------------------------- */

/* Reads or writes exactly n bytes before the deadline. 0, or -1 (timeout, EOF, error or
 * interrupted). */
int perf_io_full(int fd, void *buf, size_t n, bool wr, uint64_t deadline) {
  uint8_t *p = buf;
  while (n) {
    if (perf_interrupted) return -1;
    uint64_t now = now_ns();
    if (now >= deadline) return -1;
    struct pollfd pfd = {fd, wr ? POLLOUT : POLLIN, 0};
    uint64_t left_ms = (deadline - now) / 1000000u + 1;
    int pr = poll(&pfd, 1, left_ms > 1000 ? 1000 : (int)left_ms);
    if (pr < 0 && errno != EINTR) return -1;
    if (pr <= 0) continue;
    ssize_t k = wr ? send(fd, p, n, MSG_NOSIGNAL) : read(fd, p, n);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* ---- node setup ----------------------------------------------------------------------------- */

static int make_pub(ez_context *ctx, node *nd, const perf_case *pc) {
  if (!nd->out[0]) return 0;
  ez_pub_opts o;
  ez_pub_opts_init(&o);
  o.num_buffers = pc->nbuf;
  o.buf_size = pc->buf_size ? pc->buf_size : pc->size + 128; /* + framing: no segment growth */
  o.force_tcp = pc->tr == TR_TCP;
  int rc = ez_pub_create(ctx, nd->out, &o, &nd->pub);
  if (rc) perf_fail(&nd->res, rc, "publisher on %s: %s", nd->out, ez_strerror(rc));
  return rc;
}

static int make_sub(ez_context *ctx, node *nd) {
  if (!nd->in[0]) return 0;
  int rc = ez_sub_create(ctx, nd->in, NULL, &nd->sub);
  if (rc) perf_fail(&nd->res, rc, "subscriber on %s: %s", nd->in, ez_strerror(rc));
  return rc;
}

static void node_close(node *nd) {
  ez_sub_destroy(nd->sub);
  ez_pub_destroy(nd->pub);
  nd->sub = NULL;
  nd->pub = NULL;
}

/* ---- the roles ------------------------------------------------------------------------------ */

/* Publishes `len` bytes starting with *h (stamped at the last moment); retries through
 * backpressure until `hard`. */
static int publish_hdr(ez_pub *pub, const perf_case *pc, uint8_t *copybuf, perf_hdr *h, size_t len,
                       uint64_t hard) {
  for (;;) {
    int rc;
    if (pc->copy) {
      h->t_ns = now_ns();
      memcpy(copybuf, h, sizeof *h);
      rc = ez_publish(pub, copybuf, len, POLL_MS);
    } else {
      void *b = NULL;
      rc = ez_pub_loan(pub, len, &b, POLL_MS);
      if (!rc) {
        h->t_ns = now_ns();
        memcpy(b, h, sizeof *h);
        rc = ez_pub_commit(pub, len);
      }
    }
    if (rc != EZ_ETIMEDOUT) return rc;
    if (now_ns() > hard) return EZ_ETIMEDOUT;
  }
}

/* Forwards bytes as they are (a relay or the pong side), retrying through backpressure. */
static int forward(ez_pub *pub, const void *data, size_t len, uint64_t hard) {
  for (;;) {
    int rc = ez_publish(pub, data, len, POLL_MS);
    if (rc != EZ_ETIMEDOUT) return rc;
    if (now_ns() > hard) return EZ_ETIMEDOUT;
  }
}

/* Waits for the next message until `hard`. */
static int recv_until(ez_sub *sub, ez_msg *m, uint64_t hard) {
  for (;;) {
    int rc = ez_recv(sub, m, POLL_MS);
    if (rc != EZ_ETIMEDOUT && rc != EZ_EAGAIN) return rc;
    if (now_ns() > hard) return EZ_ETIMEDOUT;
  }
}

static bool read_hdr(const ez_msg *m, perf_hdr *h) {
  if (m->len < sizeof *h) return false;
  memcpy(h, m->data, sizeof *h);
  return h->magic == PERF_MAGIC;
}

static void run_source(node *nd, const perf_case *pc, uint64_t t_go) {
  node_result *r = &nd->res;
  uint64_t t_meas = t_go + s_to_ns(pc->warmup_s), t_stop = t_meas + s_to_ns(pc->duration_s);
  uint64_t hard = hard_deadline(pc, t_go);
  uint8_t *copybuf = pc->copy ? calloc(1, pc->size) : NULL;
  if (pc->copy && !copybuf) return perf_fail(r, EZ_ENOMEM, "out of memory");
  perf_hdr h = {.magic = PERF_MAGIC, .src = nd->src};
  int rc = 0;
  /* One clock read per message: the send stamp of the previous one tells the time. */
  for (uint64_t t = now_ns(); t < t_stop; t = h.t_ns) {
    h.flags = t >= t_meas ? PF_MEASURE : 0;
    if ((rc = publish_hdr(nd->pub, pc, copybuf, &h, pc->size, hard))) break;
    if (h.flags & PF_MEASURE) {
      if (!r->sent) r->t0_ns = h.t_ns;
      r->sent++;
    }
    h.seq++;
  }
  r->t1_ns = now_ns();
  if (rc) {
    perf_fail(r, rc, "publish %llu: %s", (unsigned long long)h.seq, ez_strerror(rc));
  } else {
    h.flags = PF_END;
    rc = publish_hdr(nd->pub, pc, copybuf, &h, sizeof h, hard);
    if (!rc) {
      uint64_t now = now_ns();
      rc = ez_pub_flush(nd->pub, now < hard ? (int)((hard - now) / 1000000u) + 1 : 0);
    }
    if (rc) perf_fail(r, rc, "end of run (publish END, flush): %s", ez_strerror(rc));
  }
  free(copybuf);
}

typedef struct seqstate {
  bool seen;
  uint64_t next;
} seqstate;

static void run_sink(node *nd, const perf_case *pc, uint64_t t_go) {
  node_result *r = &nd->res;
  uint64_t hard = hard_deadline(pc, t_go);
  seqstate seqs[MAX_CLIENTS] = {{0}};
  unsigned ends = 0;
  while (ends < nd->ends) {
    ez_msg m;
    int rc = recv_until(nd->sub, &m, hard);
    if (rc) {
      perf_fail(r, rc, "receive (after %llu messages, %u of %u ENDs): %s",
                (unsigned long long)r->count, ends, nd->ends, ez_strerror(rc));
      break;
    }
    uint64_t t = now_ns();
    perf_hdr h;
    if (!read_hdr(&m, &h) || h.src >= MAX_CLIENTS) {
      r->corrupt++;
      ez_msg_release(&m);
      continue;
    }
    if (h.flags & PF_END) {
      ends++;
      r->t1_ns = t;
      ez_msg_release(&m);
      continue;
    }
    r->received++;
    seqstate *s = &seqs[h.src];
    if (!s->seen || h.seq == s->next) {
      s->seen = true;
      s->next = h.seq + 1;
    } else if (h.seq > s->next) {
      r->lost += h.seq - s->next;
      s->next = h.seq + 1;
    } else {
      r->late++; /* a duplicate or a reordered message */
    }
    if (m.len != pc->size) r->corrupt++;
    if (h.flags & PF_MEASURE) {
      if (!r->count) r->t0_ns = t;
      r->count++;
      r->hist[h_index(t > h.t_ns ? t - h.t_ns : 0)]++;
    }
    ez_msg_release(&m);
  }
}

static void run_relay(node *nd, const perf_case *pc, uint64_t t_go) {
  node_result *r = &nd->res;
  uint64_t hard = hard_deadline(pc, t_go);
  for (;;) {
    ez_msg m;
    int rc = recv_until(nd->sub, &m, hard);
    if (rc) return perf_fail(r, rc, "relay receive: %s", ez_strerror(rc));
    perf_hdr h;
    bool end = read_hdr(&m, &h) && (h.flags & PF_END);
    rc = forward(nd->pub, m.data, m.len, hard);
    ez_msg_release(&m);
    if (rc) return perf_fail(r, rc, "relay publish: %s", ez_strerror(rc));
    if (end) break;
  }
  uint64_t now = now_ns();
  int rc = ez_pub_flush(nd->pub, now < hard ? (int)((hard - now) / 1000000u) + 1 : 0);
  if (rc) perf_fail(r, rc, "relay flush: %s", ez_strerror(rc));
}

static void run_ping(node *nd, const perf_case *pc, uint64_t t_go) {
  node_result *r = &nd->res;
  uint64_t t_meas = t_go + s_to_ns(pc->warmup_s), t_stop = t_meas + s_to_ns(pc->duration_s);
  uint64_t hard = hard_deadline(pc, t_go);
  uint8_t *copybuf = pc->copy ? calloc(1, pc->size) : NULL;
  if (pc->copy && !copybuf) return perf_fail(r, EZ_ENOMEM, "out of memory");
  perf_hdr h = {.magic = PERF_MAGIC};
  int rc = 0;
  while (!rc && now_ns() < t_stop) {
    h.flags = now_ns() >= t_meas ? PF_MEASURE : 0;
    if ((rc = publish_hdr(nd->pub, pc, copybuf, &h, pc->size, hard))) {
      perf_fail(r, rc, "ping publish: %s", ez_strerror(rc));
      break;
    }
    ez_msg m;
    if ((rc = recv_until(nd->sub, &m, hard))) {
      perf_fail(r, rc, "ping receive (seq %llu): %s", (unsigned long long)h.seq, ez_strerror(rc));
      break;
    }
    uint64_t t = now_ns();
    perf_hdr back = {0};
    if (!read_hdr(&m, &back) || back.seq != h.seq || m.len != pc->size) {
      r->corrupt++;
      rc = -1;
      perf_fail(r, -1, "ping: reply %llu does not match request %llu", (unsigned long long)back.seq,
                (unsigned long long)h.seq);
    } else if (h.flags & PF_MEASURE) {
      if (!r->count) r->t0_ns = h.t_ns;
      r->count++;
      r->t1_ns = t;
      r->hist[h_index(t - h.t_ns)]++;
    }
    ez_msg_release(&m);
    h.seq++;
  }
  h.flags = PF_END; /* the pong side stops at END, also after a failure here */
  int erc = publish_hdr(nd->pub, pc, copybuf, &h, sizeof h, now_ns() + 2000000000u);
  if (!erc) erc = ez_pub_flush(nd->pub, 2000);
  if (erc && !rc) perf_fail(r, erc, "ping END: %s", ez_strerror(erc));
  free(copybuf);
}

static void run_pong(node *nd, const perf_case *pc, uint64_t t_go) {
  node_result *r = &nd->res;
  uint64_t hard = hard_deadline(pc, t_go);
  for (;;) {
    ez_msg m;
    int rc = recv_until(nd->sub, &m, hard);
    if (rc) return perf_fail(r, rc, "pong receive: %s", ez_strerror(rc));
    perf_hdr h;
    if (read_hdr(&m, &h) && (h.flags & PF_END)) {
      ez_msg_release(&m);
      return;
    }
    rc = forward(nd->pub, m.data, m.len, hard);
    ez_msg_release(&m);
    if (rc) return perf_fail(r, rc, "pong publish: %s", ez_strerror(rc));
  }
}

static void run_node(node *nd, const perf_case *pc, uint64_t t_go) {
  uint64_t now = now_ns();
  if (t_go > now) sleep_ns(t_go - now);
  switch (nd->role) {
  case R_SOURCE: run_source(nd, pc, t_go); break;
  case R_SINK: run_sink(nd, pc, t_go); break;
  case R_RELAY: run_relay(nd, pc, t_go); break;
  case R_PING: run_ping(nd, pc, t_go); break;
  default: run_pong(nd, pc, t_go); break;
  }
}

/* ---- children ------------------------------------------------------------------------------- */

void perf_child_prepare(unsigned alarm_s) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  signal(SIGPIPE, SIG_IGN);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  alarm(alarm_s);
}

/* One node in its own process (shm, tcp). Setup runs in three steps, each answered with a
 * node_result: create (the coordinator does one node at a time), wait for the downstream channels
 * (all at once), then run from the start time it sends. */
void perf_node_child(node *nd, const perf_case *pc, int fd, int setup_ms) {
  uint64_t deadline = now_ns() + (uint64_t)setup_ms * 1000000u;
  node_result *r = &nd->res;
  child_setup cs;
  ez_context *ctx = NULL;
  if (perf_io_full(fd, &cs, sizeof cs, false, deadline)) _exit(3);
  cs.address[sizeof cs.address - 1] = 0;
  perf_pin(pc, nd->index); /* before the context: its I/O thread inherits the CPU */
  int rc = ez_context_open(cs.address, &ctx);
  if (rc) perf_fail(r, rc, "context on %s: %s", cs.address, ez_strerror(rc));
  /* The pong side subscribes first, so that no two processes join each other's channels at the
   * same moment (see "Where the time goes" in bench/RESULTS.md: that can stall both for 5 s). */
  if (!rc && nd->role == R_PONG) rc = make_sub(ctx, nd);
  if (!rc) rc = make_pub(ctx, nd, pc);
  if (!rc && nd->role != R_PONG) rc = make_sub(ctx, nd);
  if (perf_io_full(fd, r, sizeof *r, true, deadline) || rc) _exit(rc ? 4 : 3);
  uint8_t step = 0;
  if (perf_io_full(fd, &step, 1, false, deadline) || step != 'W') _exit(3);
  /* Every edge is up before the start: wait until each downstream process has its channel. */
  while (!rc && nd->pub && ez_pub_num_channels(nd->pub) < nd->downstream) {
    if (now_ns() > deadline) {
      rc = EZ_ETIMEDOUT;
      perf_fail(r, rc, "publisher %s: %zu of %u channels after setup", nd->out,
                ez_pub_num_channels(nd->pub), nd->downstream);
    }
    sleep_ns(1000000);
  }
  if (perf_io_full(fd, r, sizeof *r, true, deadline) || rc) _exit(rc ? 4 : 3);
  uint64_t t_go = 0;
  if (perf_io_full(fd, &t_go, sizeof t_go, false, deadline + s_to_ns(5)) || !t_go) _exit(3);
  uint64_t cpu0 = perf_cpu_ns();
  run_node(nd, pc, t_go);
  r->cpu_ns = perf_cpu_ns() - cpu0;
  if (perf_io_full(fd, r, sizeof *r, true, hard_deadline(pc, t_go) + s_to_ns(5))) _exit(3);
  node_close(nd);
  ez_context_close(ctx);
  _exit(0);
}

typedef struct thread_arg {
  node *nd;
  const perf_case *pc;
  uint64_t t_go;
} thread_arg;

void perf_pin(const perf_case *pc, unsigned index) {
  if (pc->pin) pin_nth_cpu(index);
}

static void *node_thread(void *arg) {
  thread_arg *ta = arg;
  perf_pin(ta->pc, ta->nd->index);
  run_node(ta->nd, ta->pc, ta->t_go);
  return NULL;
}

/* Every node as a thread of one process (local), with its own graph server unless given one. */
void perf_local_child(topo *t, const perf_case *pc, const char *address, int fd) {
  ez_server *srv = NULL;
  ez_context *ctx = NULL;
  node_result *r0 = &t->nodes[0].res;
  int rc = 0;
  if (!address) {
    rc = ez_server_start("127.0.0.1:0", &srv);
    if (rc)
      perf_fail(r0, rc, "graph server: %s", ez_strerror(rc));
    else
      address = ez_server_address(srv);
  }
  if (!rc && (rc = ez_context_open(address, &ctx)))
    perf_fail(r0, rc, "context on %s: %s", address, ez_strerror(rc));
  for (unsigned i = 0; i < t->n && !rc; i++)
    rc = make_pub(ctx, &t->nodes[i], pc);
  for (unsigned i = 0; i < t->n && !rc; i++)
    rc = make_sub(ctx, &t->nodes[i]);
  thread_arg ta[MAX_NODES];
  pthread_t th[MAX_NODES];
  unsigned started = 0;
  uint64_t t_go = now_ns() + 20000000u, cpu0 = perf_cpu_ns();
  for (unsigned i = 0; i < t->n && !rc; i++) {
    ta[i] = (thread_arg){&t->nodes[i], pc, t_go};
    if (pthread_create(&th[i], NULL, node_thread, &ta[i])) {
      perf_fail(&t->nodes[i].res, -1, "cannot start a thread");
      rc = -1;
      break;
    }
    started++;
  }
  for (unsigned i = 0; i < started; i++)
    pthread_join(th[i], NULL);
  r0->cpu_ns = perf_cpu_ns() - cpu0; /* every node's thread and the I/O thread, together */
  uint64_t send_by = now_ns() + s_to_ns(5);
  for (unsigned i = 0; i < t->n; i++)
    if (perf_io_full(fd, &t->nodes[i].res, sizeof t->nodes[i].res, true, send_by)) _exit(3);
  for (unsigned i = 0; i < t->n; i++)
    node_close(&t->nodes[i]);
  ez_context_close(ctx);
  ez_server_stop(srv);
  _exit(0);
}

/* ---- processes ------------------------------------------------------------------------------ */

void perf_kids_reap(kids *k, bool force) {
  uint64_t deadline = now_ns() + (force ? 0 : s_to_ns(5));
  for (unsigned i = 0; i < k->n; i++) {
    if (k->fd[i] >= 0) close(k->fd[i]);
    k->fd[i] = -1;
  }
  for (unsigned i = 0; i < k->n; i++) {
    if (k->pid[i] <= 0) continue;
    for (;;) {
      pid_t w = waitpid(k->pid[i], NULL, WNOHANG);
      if (w == k->pid[i] || (w < 0 && errno != EINTR)) break;
      if (now_ns() >= deadline) {
        kill(k->pid[i], SIGKILL);
        while (waitpid(k->pid[i], NULL, 0) < 0 && errno == EINTR) {
        }
        break;
      }
      sleep_ns(2000000);
    }
    k->pid[i] = 0;
  }
}

/* Forks a child with one end of a new socketpair; the child closes the coordinator's ends of the
 * earlier ones. Returns the child's fd in the child (*is_child set), -1 on failure. */
int perf_spawn(kids *k, bool *is_child) {
  int sv[2];
  *is_child = false;
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) return -1;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    close(sv[0]);
    close(sv[1]);
    return -1;
  }
  if (pid == 0) {
    for (unsigned i = 0; i < k->n; i++)
      if (k->fd[i] >= 0) close(k->fd[i]);
    close(sv[0]);
    *is_child = true;
    return sv[1];
  }
  close(sv[1]);
  k->pid[k->n] = pid;
  k->fd[k->n++] = sv[0];
  return 0;
}
