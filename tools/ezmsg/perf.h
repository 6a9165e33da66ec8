/* `ezmsg perf`, private: what cmd_perf.c (the command line, the coordinator, the report) and
 * perf_nodes.c (the nodes, their processes and threads) share. See cmd_perf.c for the design. */
#ifndef EZ_PERF_H
#define EZ_PERF_H

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "ezmsg/ezmsg.h"
#include "latency.h"

#define PERF_MAGIC 0x66707a65u /* "ezpf" */
#define PF_MEASURE 1u          /* sent inside the measured interval */
#define PF_END 2u              /* the source's last message */
#define MAX_NODES 66
#define MAX_CLIENTS 64
#define MAX_CASES 256
#define SETUP_GRACE_MS 20000 /* beyond --timeout: for the children to start */
#define STOP_GRACE_S 10.0    /* after the measured interval: for ENDs to arrive */
#define POLL_MS 200          /* each blocking library call waits at most this long */

/* ---- message header and latency histogram -------------------------------------------------- */

typedef struct perf_hdr {
  uint32_t magic, flags;
  uint64_t seq, t_ns;
  uint32_t src, pad;
} perf_hdr; /* 32 bytes: the smallest message size */

/* ---- cases and nodes ------------------------------------------------------------------------ */

enum { CFG_FANOUT, CFG_FANIN, CFG_RELAY, CFG_PINGPONG, N_CFG };
enum { TR_LOCAL, TR_SHM, TR_TCP, N_TR };

typedef struct perf_case {
  int cfg, tr;
  unsigned n;
  size_t size;
  uint32_t nbuf;
  double duration_s, warmup_s;
  bool copy;
  bool pin;          /* node k runs on CPU k mod (CPUs allowed): perf_pin */
  uint64_t buf_size; /* initial slot room; 0: the message size plus framing (no growth) */
} perf_case;

enum { R_SOURCE, R_SINK, R_RELAY, R_PING, R_PONG };

/* What a node reports (sent whole over a socketpair). */
typedef struct node_result {
  int32_t rc; /* 0, an EZ_E* code, or -1 for a harness failure (see err) */
  char err[200];
  uint64_t count;        /* measured messages received (sinks) or round trips (ping) */
  uint64_t sent;         /* measured messages published (sources) */
  uint64_t t0_ns, t1_ns; /* the measured interval as this node saw it */
  uint64_t lost, late, corrupt;
  uint64_t received; /* every message received, warm-up and measured (sinks) */
  uint64_t cpu_ns;   /* CPU time (user + system, every thread) of the node's process from the
                        start time to the end of its run; local: the runner's, in node 0 */
  uint64_t hist[H_N];
} node_result;

typedef struct node {
  int role;
  unsigned index;       /* its place in the topology (perf_pin) */
  unsigned src;         /* source index (in the header) */
  char in[96], out[96]; /* topics, "" for none */
  unsigned ends;        /* sinks: ENDs to wait for */
  unsigned downstream;  /* publishers: channels to wait for (shm / tcp) */
  ez_pub *pub;
  ez_sub *sub;
  node_result res;
} node;

typedef struct topo {
  node nodes[MAX_NODES];
  unsigned n;
} topo;

/* The first thing a node process (shm, tcp) is sent: the graph server to use. */
typedef struct child_setup {
  char address[300];
} child_setup;

/* The coordinator's children: pids and its ends of their socketpairs. */
typedef struct kids {
  pid_t pid[MAX_NODES];
  int fd[MAX_NODES];
  unsigned n;
} kids;

/* ---- small helpers -------------------------------------------------------------------------- */

static inline uint64_t s_to_ns(double s) { return (uint64_t)(s * 1e9); }

static inline void sleep_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* The deadline for everything after the start: the measured run plus a grace period. */
static inline uint64_t hard_deadline(const perf_case *pc, uint64_t t_go) {
  return t_go + s_to_ns(pc->warmup_s + pc->duration_s + STOP_GRACE_S + pc->duration_s);
}

/* Set by SIGINT / SIGTERM in the coordinator (cmd_perf.c); perf_io_full gives up when set. */
extern volatile sig_atomic_t perf_interrupted;

/* CPU time (user + system) of every thread of this process so far. */
uint64_t perf_cpu_ns(void);

/* ---- perf_nodes.c --------------------------------------------------------------------------- */

/* Records a node's failure in r (the first one is kept); rc 0 becomes -1 (a harness failure). */
void perf_fail(node_result *r, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Lays out a case's nodes and their topics (unique per process and tag). */
void perf_build_topo(const perf_case *pc, unsigned tag, topo *t);

/* Reads or writes exactly n bytes before the deadline. 0, or -1 (timeout, EOF, error or
 * interrupted). */
int perf_io_full(int fd, void *buf, size_t n, bool wr, uint64_t deadline);

/* With pc->pin, binds the calling thread (and the threads it creates later) to the index-th
 * CPU, modulo the CPUs this process may use; without, or if that fails, leaves it alone. */
void perf_pin(const perf_case *pc, unsigned index);

/* In a freshly forked child: dies with the coordinator, default signals, an alarm after alarm_s. */
void perf_child_prepare(unsigned alarm_s);

/* The child bodies (they never return): one node in its own process (shm, tcp), or every node as
 * a thread of one process (local). */
__attribute__((noreturn)) void perf_node_child(node *nd, const perf_case *pc, int fd, int setup_ms);
__attribute__((noreturn)) void perf_local_child(topo *t, const perf_case *pc, const char *address,
                                                int fd);

/* Closes the coordinator's ends and waits for the children (5 s, or none if force), then kills
 * what is left. */
void perf_kids_reap(kids *k, bool force);

/* Forks a child with one end of a new socketpair; the child closes the coordinator's ends of the
 * earlier ones. Returns the child's fd in the child (*is_child set), -1 on failure. */
int perf_spawn(kids *k, bool *is_child);

#endif
