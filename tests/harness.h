/* Helpers shared by the C tests: free ports, child processes stopped by pid, /dev/shm checks. */
#ifndef EZ_TEST_HARNESS_H
#define EZ_TEST_HARNESS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <cmocka.h>

#include "ezmsg/ezmsg.h"

/* A free TCP port on 127.0.0.1 (bound with port 0, then released). */
int th_free_port(void);
/* "127.0.0.1:<free port>" into buf; returns buf. */
char *th_free_address(char *buf, size_t cap);

/* Starts argv (argv[0] a path) as a child process; stdout/stderr go to the given fds if >= 0
 * (else inherited). Returns the pid. */
pid_t th_spawn(char *const argv[], int out_fd, int err_fd);
/* Starts the CLI ($EZ_CLI) with arguments, NULL-terminated. */
pid_t th_spawn_cli(int out_fd, const char *arg0, ...);
/* Sends sig to pid and reaps it; returns its wait status. Waits at most timeout_ms, then
 * SIGKILLs. */
int th_stop(pid_t pid, int sig, int timeout_ms);
/* Waits for pid to exit (at most timeout_ms; -1 on timeout, the process is then killed);
 * returns the exit code (or 128+signal). */
int th_wait_exit(pid_t pid, int timeout_ms);

/* Runs a shell command line, capturing stdout into out (NUL-terminated, truncated to cap).
 * Returns the exit status (or -1). */
int th_run(char *out, size_t cap, const char *fmt, ...);

/* Starts `ezmsg serve --address addr` and waits until it answers. Returns the pid. */
pid_t th_start_server(const char *addr);

/* For cmocka setup / teardown: a server of its own on a free address (written to addr, 64 bytes)
 * for each test, and stopping it (SIGTERM, so it removes its segments). 0 on success. */
int th_server_up(char *addr, pid_t *pid);
int th_server_down(pid_t *pid);

/* The same as a cmocka setup / teardown pair: th_setup starts a graph server of its own for the
 * test on a free address, th_addr; th_teardown stops it by pid, which cmocka does after a failed
 * test too. 0 on success. */
extern char th_addr[64];
int th_setup(void **state);
int th_teardown(void **state);

/* Number of entries in /dev/shm whose names begin with "psm_". */
int th_count_shm(void);
/* The TCP window of this process's channel, read from its profile (-1: none). */
long long th_chan_window(ez_context *ctx);
/* A context on th_addr whose TCP window setting is `window` (NULL: the default), which
 * $EZMSG_TCP_WINDOW sets as it opens; asserts it opened. */
ez_context *th_open_ctx(const char *window);
/* Polls get(ctx), a count (from the context's profile, say) that changes on another thread,
 * until it is n; fails the test if it is not within timeout_ms. */
void th_wait_count(long long (*get)(ez_context *), ez_context *ctx, long long n, int timeout_ms);
/* Number of open fds of this process. */
int th_count_fds(void);

/* Monotonic milliseconds, and a sleep that resumes after signals. */
int64_t th_now_ms(void);
void th_sleep_ms(int ms);

/* Receives the next message of an `ezmsg pub --size 64` stream on s (within timeout_ms) and
 * checks it: 64 bytes, its number (the first 8 bytes) *next, or any for the first one (*next
 * UINT64_MAX), then byte i == i. Fails the test otherwise; *next becomes its number + 1. */
void th_recv_cli64(ez_sub *s, uint64_t *next, int timeout_ms);

/* Path of the CLI binary ($EZ_CLI). */
const char *th_cli(void);

#endif
