/* The data plane tests' kit (tests/dataplane.c), shared by test_dataplane.c (transports, zero
 * copy, fan-out / fan-in / relays, routing) and test_dataplane_flow.c (backpressure, pause /
 * resume / sync, killed peers, the subscriber's fd, a lost server).
 *
 * Every test starts its own `ezmsg serve` on a free 127.0.0.1 port (fixture) and stops it by pid.
 * Peer processes are this very executable re-run as a "child" in a role (pub, sub, relay; see
 * child_main in dataplane.c): they talk to the test over a stdin pipe (commands) and a stdout pipe
 * (lines: "ready", "held", "sent", "unconnected", "seg NAME"), and are stopped by pid, never by
 * name. Every process we start dies with us (PR_SET_PDEATHSIG) if the test itself crashes.
 *
 * Messages follow one pattern everywhere (fill / check): message k of a stream has the size
 * sizes[k % n] from a comma list, bytes 0..7 hold k (little-endian) when it has 8 or more, and
 * the rest are a function of (i, k). A receiver checks, per publisher, that msg_ids come 0, 1,
 * 2, ... (in order, exactly once) and that every byte is right.
 *
 * Shared memory: every segment a test's processes map (read from /proc/PID/maps: children report
 * theirs as "seg NAME" lines) must be gone from /dev/shm once they have all exited. Other tests
 * run in parallel, so only those names are checked. */
#ifndef EZ_TEST_DATAPLANE_H
#define EZ_TEST_DATAPLANE_H

#include "harness.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define TMO 30000    /* for anything that should happen (ms): generous, never a speed test */
#define QUIET_MS 300 /* how long we listen for something that must not come */
#define MAX_CHILD 12
#define MAX_SEGS 256

typedef struct sizes {
  size_t n;
  size_t v[16];
} sizes;

/* Per-publisher order and content of received messages. */
typedef struct tracker {
  size_t n;
  char ids[16][37];
  uint64_t next[16];
} tracker;

typedef struct child {
  pid_t pid;
  int in_fd, out_fd; /* its stdin (we write), its stdout (we read) */
  char buf[8192];
  size_t len;
  int status; /* exit code once reaped (child_wait) */
} child;

/* The fixture's graph server (setup / teardown), and the segments noted so far. */
extern char g_addr[64];
extern pid_t g_server;
extern size_t g_nsegs;

/* ---- the message pattern */
sizes parse_sizes(const char *s);
size_t size_of(const sizes *z, uint64_t k);
void fill(uint8_t *p, size_t len, uint64_t k);
/* 0 if m holds the right bytes for message k; else a reason in why. */
int check_bytes(const ez_msg *m, uint64_t k, const sizes *z, char *why, size_t cap);
/* 0 if m is the next message of its publisher, intact; else a reason in why. */
int check_msg(tracker *t, const ez_msg *m, const sizes *z, char *why, size_t cap);

/* ---- shared-memory bookkeeping */
/* Calls fn for every /dev/shm/psm_* mapping of process pid (0: this one). */
void scan_maps(pid_t pid, void (*fn)(const char *name, uintptr_t lo, uintptr_t hi, void *),
               void *arg);
/* For scan_maps: notes each segment. */
void note_cb(const char *name, uintptr_t lo, uintptr_t hi, void *arg);
/* Records the segments this process maps now. */
void note_own_segments(void);
/* True if p lies in a mapping of a psm_ segment of this process. */
bool addr_in_shm(const void *p);
/* Every segment noted during the test is gone from /dev/shm (waits up to TMO for the graph server
 * to notice the last lease closing). Call once every process of the test has let go. */
void assert_segments_gone(void);

/* ---- child processes (this executable re-run with --child) */
/* Starts `this-executable --child ARGS...` (ARGS: space-separated words). */
child *child_start(const char *fmt, ...);
/* Reads child lines until one equals `want` (noting "seg NAME" lines on the way). Fails the test
 * if the child ends first or TMO passes. want NULL: read to EOF. */
void child_expect(child *c, const char *want);
void child_say(child *c, const char *line);
/* Waits for a clean exit (0), failing the test otherwise. */
void child_done(child *c);
void child_kill(child *c);

/* ---- the fixture: one `ezmsg serve` per test */
/* Starts the CLI with argv (NULL-terminated) as a child that gets `sig` if this process dies (so
 * a crashed test leaves no server behind to hold CTest's output pipe). */
pid_t spawn_cli(int sig, const char *const *args);
int setup(void **state);
int teardown(void **state);

/* ---- in-process helpers */
ez_context *open_ctx(void);
ez_pub *make_pub(ez_context *ctx, const char *topic, uint32_t nbuf, bool tcp);
ez_sub *make_sub(ez_context *ctx, const char *topic);
void publish_k(ez_pub *p, const sizes *z, uint64_t k);
/* Receives n messages on s and checks them against z (order per publisher, content). */
void recv_check(ez_sub *s, tracker *t, const sizes *z, int n);
/* Nothing more arrives on s for QUIET_MS. */
void assert_quiet(ez_sub *s);
/* The transport mode of this context's channel for publisher pub_id ("local", "shm", "tcp"). */
void assert_mode(ez_context *ctx, const char *pub_id, const char *mode);
void send_line(ez_pub *p, const char *text);
void expect_line(ez_sub *s, const char *text, const char *pub_id);

/* main() of a data plane test binary: runs the role when re-run as a child (--child), else the
 * tests (argv[1], if any, filters them by name: "test_kill_*"). */
int dp_main(int argc, char **argv, const struct CMUnitTest *tests, size_t n);

#endif
