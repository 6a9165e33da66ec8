/* The profiling tests' kit (tests/profiling.c), shared by test_profiling.c (rates, processing
 * times, modes, sampling, window edges, the parsed document, the CLI) and
 * test_profiling_graph.c (profiles while clients stay silent, leave, subscribe to each other or
 * come and go).
 *
 * child processes, and the aggregated profile read back through ez_profile, ez_context_profile,
 * ez_profile_parse and the `ezmsg profile` CLI.
 *
 * Every test starts its own server on a free 127.0.0.1 port (fixture). Children run library code
 * only (never cmocka: a failed check in a child prints "ERR ..." on its report pipe and exits 3),
 * report "OK <ids>" once their endpoints exist, and run until the test stops them by pid with
 * SIGTERM. The teardown SIGKILLs any child a failed test left behind, and children die with the
 * test process (PR_SET_PDEATHSIG), so a failure never leaves a publisher running.
 *
 * The parent process never holds a context (or any library thread) while it forks, so children
 * start from a single-threaded copy.
 *
 * Tolerances are generous on purpose: this runs on a loaded 2-core machine next to other test
 * suites, and under ASan/UBSan. Each one is explained where it is asserted. */
#ifndef EZ_TEST_PROFILING_H
#define EZ_TEST_PROFILING_H

#include "harness.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <sys/types.h>

#define TMO 5000        /* generous timeout for anything that should be quick (ms) */
#define READY_MS 20000  /* how long a child may take to create its endpoints */
#define PAYLOAD 4096    /* bytes per published message */
#define HIST_ERR 0.0905 /* the telemetry histogram's relative error bound (telemetry.h) */

/* Built with -DEZ_TELEMETRY=OFF, every windowed figure reads 0: the tests that measure them are
 * skipped, the others still check the shape, ids, totals and modes. */
#ifdef EZ_NO_TELEMETRY
#define NEEDS_TELEMETRY() skip()
#define TELEMETRY 0
#else
#define NEEDS_TELEMETRY() ((void)0)
#define TELEMETRY 1
#endif

enum { COMPLETE = 0, PUBLISH = 1, CHANNEL = 18, PROFILE = 21, PROFILE_DATA = 22 };

/* ---- fixture: one `ezmsg serve` per test, and the children it started ------------------------ */

#define MAX_CHILDREN 16

typedef struct fixture {
  char addr[64];
  pid_t server;
} fixture;

/* Children a test started (stopped by the teardown if a failed test left them). */
extern pid_t g_children[MAX_CHILDREN];

/* cmocka setup / teardown: a server of its own (state: a fixture); the teardown stops it, and any
 * child a failed test left, by pid. */
int setup(void **state);
int teardown(void **state);

/* ---- children -------------------------------------------------------------------------------- */

typedef struct child {
  pid_t pid;
  int rfd; /* the read end of its report pipe */
} child;

/* A line on the report pipe (the child's only voice). */
void child_say(int wfd, const char *fmt, ...);

#define CHILD_CHECK(wfd, cond, ...)                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      child_say(wfd, "ERR " __VA_ARGS__);                                                          \
      _exit(3);                                                                                    \
    }                                                                                              \
  } while (0)

typedef void (*child_fn)(int wfd, void *arg);

/* Forks a child that runs fn(its report pipe's write end, arg), then exits 0; it is killed if
 * this process dies (PR_SET_PDEATHSIG). Noted in g_children. */
child spawn_child(child_fn fn, void *arg);

/* Waits for the child's report line; fails the test unless it is "OK ...". The text after "OK "
 * goes to out. */
void child_ready(child *c, char *out, size_t cap);

/* Stops a child by pid (SIGTERM: it is killed in the middle of whatever it does, as a crashed
 * process would be) and checks that it was still running until then. */
void child_stop(child *c);

/* A publishing child: publishers on up to 4 topics, each publishing PAYLOAD bytes at `hz` on
 * absolute deadlines (so a late wake-up is caught up and the average rate stays exact); hz <= 0:
 * they never publish. */
typedef struct pub_args {
  const char *addr;
  const char *topics[4];
  double hz;
  bool force_tcp;
} pub_args;

void pub_child(int wfd, void *arg);

/* A subscribing child: subscribers on up to 4 topics (with handles; NULL: the default), each
 * message held `hold_ms` before it is released (negative: never received at all). */
typedef struct sub_args {
  const char *addr;
  const char *topics[4];
  const char *handles[4];
  int hold_ms;
} sub_args;

void sub_child(int wfd, void *arg);

/* ---- profile helpers ------------------------------------------------------------------------- */

/* The JSON document in text (fails the test if it does not parse). */
json_t *load_json(const char *text);
/* ez_profile of the graph at addr over window_s, within 10 s (fails the test on an error);
 * caller frees. */
char *profile(const char *addr, double window_s);
/* The publisher with this id in d, or NULL. */
const ez_profile_pub *find_pub(const ez_profile_data *d, const char *id);
/* The channel of publisher pub_id in process pid, or NULL. */
const ez_profile_channel *find_chan_of(const ez_profile_data *d, const char *pub_id, int64_t pid);

/* |x - want| <= tol. */
static inline bool near(double x, double want, double tol) { return fabs(x - want) <= tol; }

/* max >= p99 >= p50 > 0, each within the histogram's error: estimates are capped at the exact max
 * and come from one histogram, so the order is exact; the slack only absorbs rounding. */
void check_latency_order(const ez_latency *l);

/* ---- raw protocol (fake clients) ------------------------------------------------------------- */

/* A fake channel of a real publisher: CHANNEL pub_id -> COMPLETE, channel_id, address. */
int fake_channel(const char *addr, const char *pub_id, char id[64]);

#endif
