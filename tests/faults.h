/* The fault-injection tests' kit (tests/faults.c), shared by test_faults.c (processes and graph
 * servers SIGKILLed or SIGSTOPped) and test_faults_links.c (a publisher played over raw sockets
 * that cuts its channel or cannot be reached, and a subscriber that leaves with messages queued).
 *
 * Every test starts its own `ezmsg serve` on a free 127.0.0.1 port and stops every process it
 * started by pid. At the end of each test (fx_finish) it checks that
 *  - every child was reaped (no zombie, no child left),
 *  - every shared-memory segment that one of its processes mapped is gone from /dev/shm (a sampler
 *    thread records the psm_* names in /proc/<pid>/maps and /proc/<pid>/fd of the test's own
 *    processes while they run, because other tests create segments concurrently),
 *  - this process has as many fds open as before the test.
 * No timing assertion other than generous upper bounds on "returns within its timeout".
 * EZ_FAULTS_FILTER=<glob> runs only the matching tests; EZ_FAULTS_VERBOSE=1 lists the segments. */
#ifndef EZ_TEST_FAULTS_H
#define EZ_TEST_FAULTS_H

#include "harness.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/types.h>

#define TMO 5000   /* generous bound for anything that should be quick (ms) */
#define SLACK 4000 /* what a loaded machine may add to a call's own timeout (ms) */
#define MAX_KIDS 32
#define MAX_NAMES 256

enum {
  COMPLETE = 0,
  PUBLISH = 1,
  TX_TCP = 13,
  RX_ACK = 14,
  CHANNEL = 18,
  SHM_OK = 19,
  SHM_ATTACH_FAILED = 20,
};

/* ---- fixture: a server, child processes by pid, a segment sampler ---------------------------- */

typedef struct fx {
  char addr[64];
  char dir[64]; /* private temp dir for the children's output */
  pid_t server;
  pid_t kids[MAX_KIDS]; /* children not reaped yet (the server included) */
  int nkids;
  int fds0;
  bool finished;
  /* sampler */
  pthread_t sampler;
  atomic_bool stop;
  pthread_mutex_t mu;
  pid_t watch[MAX_KIDS + 1];
  unsigned long long watch_start[MAX_KIDS + 1]; /* each one's start time: a pid reused by another
                                                 * process (after it was reaped) is not sampled */
  int nwatch;
  char names[MAX_NAMES][40];
  int nnames;
} fx;

/* The sampler also watches pid's mappings (a child this test did not start through fx_spawn). */
void watch_add(fx *f, pid_t pid);

/* <dir>/<name> into buf; returns buf. */
char *fx_path(fx *f, const char *name, char *buf, size_t cap);

/* Starts the CLI with the given arguments (NULL-terminated); its stdout goes to <dir>/<tag>.out and
 * its stderr to <dir>/<tag>.err. Returns the pid. */
pid_t fx_spawn(fx *f, const char *tag, const char *arg0, ...);

/* Sends sig to a child and reaps it; returns its exit code (128+signal if killed). */
int fx_kill(fx *f, pid_t pid, int sig);

/* Waits (at most timeout_ms) for a child to exit by itself and reaps it; -1 if it did not (it
 * is then killed). */
int fx_wait(fx *f, pid_t pid, int timeout_ms);

/* Fails the test if the child started under tag has exited, showing the end of its stderr (a
 * sanitizer report, a crash message) so that a failure in CI explains itself. */
void fx_assert_alive(fx *f, pid_t pid, const char *tag);

/* SIGSTOPs pid and waits until every one of its threads has stopped: kill() returns before a
 * multi-threaded process is stopped (the thread that takes the signal stops the others once it
 * runs), so until then its other threads may still work. */
void stop_process(pid_t pid);

/* cmocka setup: a private temp dir, a server of its own (state: an fx), the segment sampler, and
 * the fd count to compare with at the end. */
int setup(void **state);

/* The end of every test: stops what is left and checks for zombies, segments and fds. */
void fx_finish(fx *f);

/* cmocka teardown: if the test failed before fx_finish, stops what is left; removes the temp dir.
 */
int teardown(void **state);

/* ---- files ----------------------------------------------------------------------------------- */

/* The whole file (NUL-terminated; caller frees); *len its size. */
char *slurp(const char *path, size_t *len);

/* Waits until the file at <dir>/<name> has at least n lines; fails if `pid` exits first or
 * timeout_ms passes. */
void wait_lines(fx *f, const char *name, size_t n, pid_t pid, int timeout_ms);

/* Starts `ezmsg sub TOPIC [extra args]` and waits until it has subscribed (--ready-file). */
pid_t start_sub(fx *f, const char *tag, const char *topic, const char *count);

#endif
