/* `ezmsg perf`: throughput and latency of the data plane, after the reference's `ezmsg-perf`.
 *
 * A case is a configuration (fanout: 1 publisher -> N subscribers; fanin: N -> 1; relay: a source,
 * N relay stages and a sink; pingpong: one message back and forth), a transport (local: threads of
 * one process; shm / tcp: one process per node, tcp through ez_pub_opts.force_tcp), a message size
 * and a number of buffers. Every message carries a header (magic, flags, source, sequence number,
 * CLOCK_MONOTONIC send time), so the sinks measure publish-to-receive latency and check that
 * nothing was lost, duplicated or reordered.
 *
 * Process model: this process only coordinates and never runs a library thread when it forks.
 * Each case forks its nodes (shm, tcp) or one runner that holds every node as a thread (local);
 * the children talk to the coordinator over socketpairs: the graph server address (down), a ready
 * report (up), the start time (down) and the results (up). Every wait has a deadline, every child
 * has an alarm() and dies with the coordinator (PR_SET_PDEATHSIG), and the coordinator kills what
 * does not finish in time, by pid. Unless --address names one, each case gets a private graph
 * server (started in the coordinator after the fork, stopped after the case; for local, in the
 * runner). The nodes and their processes are in perf_nodes.c; what the two files share, in perf.h.
 */
#include "cli.h"
#include "perf.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const cfg_names[] = {"fanout", "fanin", "relay", "pingpong"};
static const char *const tr_names[] = {"local", "shm", "tcp"};

/* SIGINT / SIGTERM in the coordinator: the running case fails fast (its children are killed and
 * its graph server stopped) and no further case starts. */
volatile sig_atomic_t perf_interrupted;
static void on_interrupt(int sig) { perf_interrupted = sig; }

/* ---- the coordinator ------------------------------------------------------------------------ */

typedef struct case_result {
  bool ok;
  char err[240];
  uint64_t msgs, lost, late, corrupt, mismatch;
  uint64_t received;
  double msgs_per_s, mb_per_s, p50_us, p99_us, max_us;
  double cpu_s, cpu_us_per_msg; /* every node process's CPU; per message received by a sink */
} case_result;

static void summarize(const perf_case *pc, topo *t, case_result *cr) {
  static uint64_t hist[H_N];
  memset(hist, 0, sizeof hist);
  uint64_t sent = 0;
  for (unsigned i = 0; i < t->n; i++) {
    node_result *r = &t->nodes[i].res;
    if (r->rc && cr->ok) {
      cr->ok = false;
      snprintf(cr->err, sizeof cr->err, "node %u: %s", i, r->err);
    }
    if (t->nodes[i].role == R_SOURCE) sent += r->sent;
    cr->lost += r->lost;
    cr->late += r->late;
    cr->corrupt += r->corrupt;
    cr->received += r->received;
    cr->cpu_s += (double)r->cpu_ns / 1e9;
  }
  if (cr->received) cr->cpu_us_per_msg = cr->cpu_s * 1e6 / (double)cr->received;
  for (unsigned i = 0; i < t->n; i++) {
    node *nd = &t->nodes[i];
    node_result *r = &nd->res;
    if (nd->role != R_SINK && nd->role != R_PING) continue;
    for (unsigned b = 0; b < H_N; b++)
      hist[b] += r->hist[b];
    cr->msgs += r->count;
    if (r->count > 1 && r->t1_ns > r->t0_ns)
      cr->msgs_per_s += (double)r->count * 1e9 / (double)(r->t1_ns - r->t0_ns);
    if (nd->role == R_SINK && r->count != sent)
      cr->mismatch += r->count > sent ? r->count - sent : sent - r->count;
  }
  cr->mb_per_s = cr->msgs_per_s * (double)pc->size / 1e6;
  cr->p50_us = h_quantile(hist, 0.50) / 1000.0;
  cr->p99_us = h_quantile(hist, 0.99) / 1000.0;
  cr->max_us = h_quantile(hist, 1.0) / 1000.0;
  if (cr->ok && (cr->lost || cr->late || cr->corrupt || cr->mismatch)) {
    cr->ok = false;
    snprintf(cr->err, sizeof cr->err,
             "delivery errors: %llu lost, %llu late (duplicated or reordered), %llu corrupt, "
             "%llu sent-vs-received mismatch",
             (unsigned long long)cr->lost, (unsigned long long)cr->late,
             (unsigned long long)cr->corrupt, (unsigned long long)cr->mismatch);
  }
}

static void run_case(const perf_case *pc, unsigned tag, const char *address, int setup_ms,
                     case_result *cr) {
  static topo t;
  perf_build_topo(pc, tag, &t);
  memset(cr, 0, sizeof *cr);
  cr->ok = true;
  kids k = {.n = 0};
  bool is_child;
  unsigned alarm_s =
      (unsigned)(setup_ms / 1000 + pc->warmup_s + 2 * pc->duration_s + STOP_GRACE_S + 30);
  ez_server *srv = NULL;

  if (pc->tr == TR_LOCAL) {
    int fd = perf_spawn(&k, &is_child);
    if (is_child) {
      perf_child_prepare(alarm_s);
      perf_local_child(&t, pc, address, fd);
    }
    if (fd < 0) {
      snprintf(cr->err, sizeof cr->err, "fork: %s", strerror(errno));
      cr->ok = false;
      return;
    }
    uint64_t deadline = now_ns() + (uint64_t)setup_ms * 1000000u +
                        s_to_ns(pc->warmup_s + 2 * pc->duration_s + STOP_GRACE_S + 5);
    for (unsigned i = 0; i < t.n; i++) {
      if (perf_io_full(k.fd[0], &t.nodes[i].res, sizeof t.nodes[i].res, false, deadline)) {
        snprintf(cr->err, sizeof cr->err, "the local runner did not report in time (killed)");
        cr->ok = false;
        perf_kids_reap(&k, true);
        return;
      }
    }
    perf_kids_reap(&k, false);
    summarize(pc, &t, cr);
    return;
  }

  /* shm / tcp: one process per node, forked before this process starts any thread. */
  for (unsigned i = 0; i < t.n; i++) {
    int fd = perf_spawn(&k, &is_child);
    if (is_child) {
      perf_child_prepare(alarm_s);
      perf_node_child(&t.nodes[i], pc, fd, setup_ms);
    }
    if (fd < 0) {
      snprintf(cr->err, sizeof cr->err, "fork: %s", strerror(errno));
      cr->ok = false;
      perf_kids_reap(&k, true);
      return;
    }
  }
  child_setup cs = {{0}};
  int rc = 0;
  if (!address) {
    rc = ez_server_start("127.0.0.1:0", &srv);
    if (rc)
      snprintf(cr->err, sizeof cr->err, "graph server: %s", ez_strerror(rc));
    else
      snprintf(cs.address, sizeof cs.address, "%s", ez_server_address(srv));
  } else {
    snprintf(cs.address, sizeof cs.address, "%s", address);
  }
  uint64_t deadline = now_ns() + (uint64_t)setup_ms * 1000000u;
  /* Create one node at a time (see perf_node_child), then let all wait for their channels. */
  for (unsigned i = 0; i < k.n && !rc; i++) {
    if (perf_io_full(k.fd[i], &cs, sizeof cs, true, deadline) ||
        perf_io_full(k.fd[i], &t.nodes[i].res, sizeof t.nodes[i].res, false, deadline)) {
      rc = -1;
      snprintf(cr->err, sizeof cr->err, "node %u did not start in time", i);
    } else if (t.nodes[i].res.rc) {
      rc = -1;
      snprintf(cr->err, sizeof cr->err, "node %u: %s", i, t.nodes[i].res.err);
    }
  }
  uint8_t wait_step = 'W';
  for (unsigned i = 0; i < k.n && !rc; i++)
    if (perf_io_full(k.fd[i], &wait_step, 1, true, deadline)) rc = -1;
  for (unsigned i = 0; i < k.n && !rc; i++) {
    if (perf_io_full(k.fd[i], &t.nodes[i].res, sizeof t.nodes[i].res, false, deadline)) {
      rc = -1;
      snprintf(cr->err, sizeof cr->err, "node %u did not get ready in time", i);
    } else if (t.nodes[i].res.rc) {
      rc = -1;
      snprintf(cr->err, sizeof cr->err, "node %u: %s", i, t.nodes[i].res.err);
    }
  }
  uint64_t t_go = rc ? 0 : now_ns() + 20000000u;
  for (unsigned i = 0; i < k.n && !rc; i++)
    if (perf_io_full(k.fd[i], &t_go, sizeof t_go, true, deadline)) rc = -1;
  if (!rc) {
    uint64_t end = hard_deadline(pc, t_go) + s_to_ns(5);
    for (unsigned i = 0; i < k.n; i++) {
      if (perf_io_full(k.fd[i], &t.nodes[i].res, sizeof t.nodes[i].res, false, end)) {
        perf_fail(&t.nodes[i].res, -1, "node %u did not report in time (killed)", i);
        rc = -1;
      }
    }
  }
  if (rc && !cr->err[0]) snprintf(cr->err, sizeof cr->err, "setup failed (a node did not answer)");
  perf_kids_reap(&k, rc != 0);
  ez_server_stop(srv);
  if (rc && cr->err[0]) {
    cr->ok = false;
    return;
  }
  summarize(pc, &t, cr);
}

/* ---- command line --------------------------------------------------------------------------- */

typedef struct perf_opts {
  unsigned cfg_mask, tr_mask;
  size_t sizes[16];
  unsigned n_sizes;
  long n;
  long nbuf;
  double duration, warmup;
  bool json, quiet, copy, pin;
  size_t buf_size;
} perf_opts;

static int parse_list(const char *arg, const char *const *names, int count, unsigned *mask) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", arg);
  *mask = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int found = -1;
    for (int i = 0; i < count; i++)
      if (!strcmp(tok, names[i])) found = i;
    if (!strcmp(tok, "all"))
      *mask = (1u << count) - 1;
    else if (found < 0)
      return -1;
    else
      *mask |= 1u << found;
  }
  return *mask ? 0 : -1;
}

static int parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return -1;
  if (*end == 'k' || *end == 'K')
    v <<= 10, end++;
  else if (*end == 'm' || *end == 'M')
    v <<= 20, end++;
  if (*end == 'i' || *end == 'B') end++;
  if (*end == 'B') end++;
  if (*end || v < sizeof(perf_hdr) || v > (1ull << 30)) return -1;
  *out = (size_t)v;
  return 0;
}

static int parse_double(const char *s, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= lo && v <= hi)) return -1;
  *out = v;
  return 0;
}

static int parse_long(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

enum { OPT_JSON = 'j', OPT_COPY = 2000, OPT_BUFSIZE, OPT_PIN, OPT_WARMUP = 'w' };

static int on_opt(int opt, const char *arg, void *user) {
  perf_opts *o = user;
  switch (opt) {
  case 'c': return parse_list(arg, cfg_names, N_CFG, &o->cfg_mask);
  case 'T': return parse_list(arg, tr_names, N_TR, &o->tr_mask);
  case 's': {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", arg);
    o->n_sizes = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
      if (o->n_sizes == 16 || parse_size(tok, &o->sizes[o->n_sizes])) {
        cli_opt_error("bad --size '%s' (sizes are %zu bytes to 1G, at most 16 of them)", arg,
                      sizeof(perf_hdr));
        return -1;
      }
      o->n_sizes++;
    }
    return o->n_sizes ? 0 : -1;
  }
  case 'n': return parse_long(arg, 1, MAX_CLIENTS, &o->n);
  case 'b': return parse_long(arg, 1, 65536, &o->nbuf);
  case 'd': return parse_double(arg, 0.01, 3600, &o->duration);
  case OPT_WARMUP: return parse_double(arg, 0, 600, &o->warmup);
  case OPT_JSON: o->json = true; return 0;
  case 'q': o->quiet = true; return 0;
  case OPT_COPY: o->copy = true; return 0;
  case OPT_PIN: o->pin = true; return 0;
  case OPT_BUFSIZE: return parse_size(arg, &o->buf_size);
  default: return -1;
  }
}

static const struct option perf_options[] = {
    {"config", required_argument, NULL, 'c'},
    {"transport", required_argument, NULL, 'T'},
    {"size", required_argument, NULL, 's'},
    {"clients", required_argument, NULL, 'n'},
    {"num-buffers", required_argument, NULL, 'b'},
    {"duration", required_argument, NULL, 'd'},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"copy", no_argument, NULL, OPT_COPY},
    {"pin", no_argument, NULL, OPT_PIN},
    {"buf-size", required_argument, NULL, OPT_BUFSIZE},
    {"json", no_argument, NULL, OPT_JSON},
    {"quiet", no_argument, NULL, 'q'},
    {0},
};

static const cli_spec perf_spec = {
    .name = "perf",
    .args = "",
    .about =
        "Measures the data plane: messages/s, MB/s and publish-to-receive latency (p50/p99) for\n"
        "every combination of the configurations, transports and sizes given. Each message\n"
        "carries a sequence number and a CLOCK_MONOTONIC send time; the sinks check that nothing\n"
        "was lost, duplicated or reordered (a case with delivery errors fails).\n"
        "  fanout    1 publisher -> N subscribers     fanin  N publishers -> 1 subscriber\n"
        "  relay     source -> N relays -> sink       pingpong  request/reply round trips\n"
        "Transports: local (threads of one process), shm and tcp (one process per node; tcp\n"
        "forces TCP). msgs/s is the delivery rate summed over the sinks (round trips/s for\n"
        "pingpong, whose latency is the round-trip time); throughput latency is measured under\n"
        "full load, so it includes queueing behind num_buffers messages. Publishing is zero-copy\n"
        "(ez_pub_loan: only the 32-byte header is written) unless --copy. Without --address each\n"
        "case gets a private graph server. Exit status 1 if any case failed.",
    .min_args = 0,
    .max_args = 0,
    .timeout_ms = 10000,
    .opts = perf_options,
    .opts_short = "c:T:s:n:b:d:w:jq",
    .opts_help =
        "  -c, --config LIST  fanout,fanin,relay,pingpong or all (default fanout)\n"
        "  -T, --transport LIST  local,shm,tcp or all (default all)\n"
        "  -s, --size LIST    message sizes in bytes, K/M suffixes (default 64,4K,1M; min 32)\n"
        "  -n, --clients N    subscribers (fanout), publishers (fanin), relays (relay) (default "
        "1)\n"
        "  -b, --num-buffers N  publisher ring slots (default 32)\n"
        "  -d, --duration S   measured seconds per case (default 2)\n"
        "  -w, --warmup S     unmeasured seconds before that (default 0.25)\n"
        "      --copy         publish with ez_publish (one copy) instead of a loan\n"
        "      --buf-size N   initial slot room (default: the size plus framing, so no growth)\n"
        "      --pin          run node k on CPU k mod the CPUs allowed (its thread for local,\n"
        "                     its process otherwise): steadier numbers for A/B comparisons\n"
        "  -j, --json         print JSON instead of the table\n"
        "  -q, --quiet        no progress line\n"
        "  (--timeout S bounds each case's setup)\n",
};

static void fmt_size(size_t s, char *out, size_t cap) {
  if (s >= (1u << 20) && s % (1u << 20) == 0)
    snprintf(out, cap, "%zu MiB", s >> 20);
  else if (s >= 1024 && s % 1024 == 0)
    snprintf(out, cap, "%zu KiB", s >> 10);
  else
    snprintf(out, cap, "%zu B", s);
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

int cmd_perf(int argc, char **argv) {
  perf_opts o = {.cfg_mask = 1u << CFG_FANOUT,
                 .tr_mask = (1u << N_TR) - 1,
                 .sizes = {64, 4096, 1u << 20},
                 .n_sizes = 3,
                 .n = 1,
                 .nbuf = 32,
                 .duration = 2.0,
                 .warmup = 0.25};
  cli_ctx ctx;
  int rc = cli_parse(&perf_spec, argc, argv, &ctx, on_opt, &o);
  if (rc >= 0) return rc;
  int setup_ms = (ctx.timeout_ms < 0 ? 60000 : ctx.timeout_ms) + SETUP_GRACE_MS;

  static perf_case cases[MAX_CASES];
  unsigned nc = 0;
  for (int c = 0; c < N_CFG; c++) {
    if (!(o.cfg_mask & (1u << c))) continue;
    for (int tr = 0; tr < N_TR; tr++) {
      if (!(o.tr_mask & (1u << tr))) continue;
      for (unsigned s = 0; s < o.n_sizes && nc < MAX_CASES; s++)
        cases[nc++] = (perf_case){.cfg = c,
                                  .tr = tr,
                                  .n = c == CFG_PINGPONG ? 1 : (unsigned)o.n,
                                  .size = o.sizes[s],
                                  .nbuf = (uint32_t)o.nbuf,
                                  .duration_s = o.duration,
                                  .warmup_s = o.warmup,
                                  .copy = o.copy,
                                  .pin = o.pin,
                                  .buf_size = o.buf_size};
    }
  }
  static case_result res[MAX_CASES];
  bool progress = !o.quiet && isatty(STDERR_FILENO) && nc * (o.duration + o.warmup) > 3.0;
  int failures = 0;
  struct sigaction sa = {.sa_handler = on_interrupt}, old_int, old_term; /* no SA_RESTART */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  for (unsigned i = 0; i < nc; i++) {
    if (perf_interrupted) {
      nc = i; /* report what ran */
      break;
    }
    const perf_case *pc = &cases[i];
    char sz[32];
    fmt_size(pc->size, sz, sizeof sz);
    if (progress) {
      fprintf(stderr, "\r\033[Kezmsg perf: %u/%u %s %s x%u %s ...", i + 1, nc, cfg_names[pc->cfg],
              tr_names[pc->tr], pc->n, sz);
      fflush(stderr);
    }
    run_case(pc, i, ctx.address, setup_ms, &res[i]);
    if (perf_interrupted && !res[i].ok) snprintf(res[i].err, sizeof res[i].err, "interrupted");
    if (!res[i].ok) failures++;
  }
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  if (progress) fprintf(stderr, "\r\033[K");

  if (o.json) {
    printf("{\"tool\": \"ezmsg perf\", \"version\": \"%s\", \"results\": [", EZ_VERSION);
    for (unsigned i = 0; i < nc; i++) {
      const perf_case *pc = &cases[i];
      const case_result *cr = &res[i];
      printf("%s\n  {\"impl\": \"ezmsg-c\", \"config\": \"%s\", \"transport\": \"%s\", \"n\": %u, "
             "\"size\": %zu, \"num_buffers\": %u, \"duration_s\": %g, \"copy\": %s, \"ok\": %s, ",
             i ? "," : "", cfg_names[pc->cfg], tr_names[pc->tr], pc->n, pc->size, pc->nbuf,
             pc->duration_s, pc->copy ? "true" : "false", cr->ok ? "true" : "false");
      printf("\"msgs\": %llu, \"msgs_per_s\": %.1f, \"mb_per_s\": %.3f, \"lat_p50_us\": %.2f, "
             "\"lat_p99_us\": %.2f, \"lat_max_us\": %.2f, \"cpu_s\": %.4f, "
             "\"cpu_us_per_msg\": %.3f, \"lost\": %llu, \"late\": %llu, "
             "\"corrupt\": %llu, \"mismatch\": %llu, \"error\": ",
             (unsigned long long)cr->msgs, cr->msgs_per_s, cr->mb_per_s, cr->p50_us, cr->p99_us,
             cr->max_us, cr->cpu_s, cr->cpu_us_per_msg, (unsigned long long)cr->lost,
             (unsigned long long)cr->late, (unsigned long long)cr->corrupt,
             (unsigned long long)cr->mismatch);
      if (cr->ok)
        printf("null}");
      else {
        json_str(stdout, cr->err);
        printf("}");
      }
    }
    printf("\n]}\n");
  } else {
    printf("%-8s %-6s %3s %8s %5s %13s %10s %11s %11s %11s %9s\n", "config", "trans", "n", "size",
           "bufs", "msgs/s", "MB/s", "p50 us", "p99 us", "max us", "cpu us/m");
    for (unsigned i = 0; i < nc; i++) {
      const perf_case *pc = &cases[i];
      const case_result *cr = &res[i];
      char sz[32];
      fmt_size(pc->size, sz, sizeof sz);
      printf("%-8s %-6s %3u %8s %5u ", cfg_names[pc->cfg], tr_names[pc->tr], pc->n, sz, pc->nbuf);
      if (cr->ok)
        printf("%13.0f %10.1f %11.1f %11.1f %11.1f %9.2f\n", cr->msgs_per_s, cr->mb_per_s,
               cr->p50_us, cr->p99_us, cr->max_us, cr->cpu_us_per_msg);
      else
        printf("FAILED: %s\n", cr->err);
    }
    printf("(msgs/s: deliveries summed over sinks; pingpong: round trips/s and round-trip "
           "latency; cpu us/m: CPU of every node process over the run, per message a sink "
           "received%s)\n",
           o.copy ? "; --copy" : "");
  }
  if (perf_interrupted) return 128 + perf_interrupted;
  return failures ? 1 : 0;
}
