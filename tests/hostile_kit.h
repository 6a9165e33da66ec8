/* The hostile data-plane tests' kit (tests/hostile_kit.c), shared by test_hostile_shm.c (shared
 * memory: another user's ring, a length flipped while it is read, segments truncated) and
 * test_hostile_links.c (descriptors, handshakes, memory, deadlines, log storms, many buffers,
 * limits of the graph server).
 *
 * - A fake publisher spoken by hand over raw sockets: it registers at a real `ezmsg serve`,
 *   listens for channels, optionally gets a real segment from the server (SHM_CREATE) and maps
 *   it, and answers a channel's handshake with whatever a test wants.
 * - Peer processes: the CLI, or this very executable re-run in a role (hk_main): a "victim"
 *   subscriber that checks every message it gets and reports it on stdout ("ready", "got ID LEN",
 *   "bad ..."), so that a crash of the victim fails the test instead of killing it. Every process
 *   gets a stderr file of its own (its log lines, read by the tests) and dies with us
 *   (PR_SET_PDEATHSIG); tests stop them by pid.
 * - /proc readings: resident and virtual memory, CPU time, limits, mappings. */
#ifndef EZ_TEST_HOSTILE_KIT_H
#define EZ_TEST_HOSTILE_KIT_H

#include "harness.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define HK_TMO 20000 /* for anything that should happen (ms): generous, never a speed test */

enum {
  HK_COMPLETE = 0,
  HK_PUBLISH = 1,
  HK_TX_SHM = 12,
  HK_TX_TCP = 13,
  HK_RX_ACK = 14,
  HK_SHM_CREATE = 15,
  HK_CHANNEL = 18,
  HK_SHM_OK = 19,
  HK_SHM_ATTACH_FAILED = 20,
};

/* ---- a fake publisher -------------------------------------------------------------------- */

typedef struct hk_pub {
  int graph, listener, data; /* graph link, channel listener, the channel's connection (-1) */
  char id[64], addr[64];     /* its id; where it listens */
  /* its segment, when it asked for one (hk_pub_segment) */
  int lease;
  char seg[64];
  uint8_t *base;
  size_t size;
  uint64_t nbuf, stride;
} hk_pub;

/* Listens on a free port and registers as a publisher of `topic` at server `srv` (PUBLISH, id,
 * address). The server's COMPLETE comes once the subscribers answered their UPDATE: read it with
 * hk_pub_registered. No cmocka in here: usable in a forked child (returns false on failure). */
bool hk_pub_register(hk_pub *fp, const char *srv, const char *topic);
bool hk_pub_registered(hk_pub *fp, int timeout_ms);
/* SHM_CREATE nbuf x size at srv (the lease stays open in fp->lease); maps it if `map`. */
bool hk_pub_segment(hk_pub *fp, const char *srv, uint64_t nbuf, uint64_t size, bool map);
/* Accepts the next channel connection (as fp->data) and reads its CHANNEL request. */
bool hk_pub_accept(hk_pub *fp, int timeout_ms);
/* The handshake's rest: sends segment name `seg` ("" for none), reads SHM_OK / SHM_ATTACH_FAILED
 * (into *answer) and the pid, sends COMPLETE nbuf. The channel's one-byte asks that follow
 * (X_HELLO, X_WIN_ASK, X_TCP_ASK) are left for the caller. */
bool hk_pub_handshake(hk_pub *fp, const char *seg, uint64_t nbuf, uint8_t *answer);
/* Reads the bytes that arrive on fp->data within ms (asks, acks) into buf (up to cap): count. */
size_t hk_pub_drain(hk_pub *fp, uint8_t *buf, size_t cap, int ms);
/* Writes message id (a bytes payload of len bytes, hk_fill pattern) into slot id % nbuf of the
 * mapped segment, as an ezmsg-c publisher would. */
void hk_pub_put_slot(hk_pub *fp, uint64_t id, size_t len);
/* A raw-pickle message (EZ_MSG_RAW_PICKLE for the receiver) of three buffers: a HK_RAW_B0-byte
 * pickle of the int 7, len1 bytes of hk_fill(id), len2 of hk_fill(id + 1), marshalled into d
 * (room for 42 + HK_RAW_B0 + len1 + len2 bytes): its size. hk_pub_put_raw3: into the slot. */
#define HK_RAW_B0 5
size_t hk_raw3(uint8_t *d, uint64_t id, size_t len1, size_t len2);
void hk_pub_put_raw3(hk_pub *fp, uint64_t id, size_t len1, size_t len2);
/* Sends TX_SHM id naming fp->seg; false if the connection is gone. */
bool hk_pub_tx_shm(hk_pub *fp, uint64_t id);
/* Closes everything (the lease too: the server unlinks the segment). */
void hk_pub_close(hk_pub *fp);

/* The payload pattern: byte i of message k. */
static inline uint8_t hk_pat(size_t i, uint64_t k) { return (uint8_t)(i * 31u + k * 7u + 1u); }
void hk_fill(uint8_t *p, size_t len, uint64_t k);

/* Writes all n bytes; false if the peer is gone (no SIGPIPE). */
bool hk_write(int fd, const void *p, size_t n);

/* ---- processes --------------------------------------------------------------------------- */

typedef struct hk_proc {
  pid_t pid;
  int in_fd, out_fd; /* its stdin (we write; -1: /dev/null) and stdout (we read) */
  char err[128];     /* its stderr file */
  char buf[8192];
  size_t len;
} hk_proc;

typedef struct hk_spawn_opts {
  const char *env[8];        /* "NAME=value" set in the child (NULL-terminated) */
  unsigned long nofile_soft; /* RLIMIT_NOFILE in the child (0: unchanged) */
  unsigned long nofile_hard;
  bool self; /* argv[0] is this executable (a role of hk_main), else the CLI */
} hk_spawn_opts;

/* In a child forked by a test (not exec'd): dies with us, and a crash is a crash (cmocka's
 * handlers, which would longjmp into the test runner of the child, are reset). */
void hk_child(void);
/* Starts a process; args NULL-terminated. Its stderr goes to a file of its own (p->err), with
 * EZMSG_LOG_LEVEL=warn unless o->env says otherwise. Fails the test if it cannot. */
void hk_start(hk_proc *p, const hk_spawn_opts *o, const char *arg0, ...);
/* Reads stdout lines until one starts with `prefix` (into line, cap bytes); false if the process
 * ends first or timeout_ms passes. */
bool hk_expect(hk_proc *p, const char *prefix, char *line, size_t cap, int timeout_ms);
/* Reads what its stdout holds now, without waiting: true if a line starting with `prefix` came
 * (the first into line), and *got (if not NULL) counts the "got " lines. */
bool hk_scan(hk_proc *p, const char *prefix, char *line, size_t cap, long *got);
/* True if the process is still running (not reaped). */
bool hk_alive(hk_proc *p);
/* Stops it: closes its stdin, waits up to 5 s, then SIGKILL; returns its exit code (128+sig). */
int hk_stop(hk_proc *p);
/* Its stderr so far (NUL-terminated, caller frees), and how many lines contain `needle`. */
char *hk_stderr(const hk_proc *p);
int hk_count_lines(const hk_proc *p, const char *needle);
/* Fails the test, showing the end of its stderr, if the process has exited. */
void hk_assert_alive(hk_proc *p, const char *what);

/* ---- /proc ------------------------------------------------------------------------------- */

/* A "Vm...:" value of pid's status in kB (-1 if unknown), e.g. "VmRSS", "VmHWM", "VmPeak". */
long hk_status_kb(pid_t pid, const char *field);
/* CPU time (user + system) of pid in ms. */
long hk_cpu_ms(pid_t pid);
/* The soft and hard "Max open files" of pid (false if unknown). */
bool hk_nofile(pid_t pid, unsigned long *soft, unsigned long *hard);
/* The name of the first /dev/shm/<prefix>* mapping of pid (false if none). */
bool hk_mapped_shm(pid_t pid, const char *prefix, char *name, size_t cap);

/* main() of the hostile tests: runs a role when re-run by hk_start (self), else the tests. */
int hk_main(int argc, char **argv, const struct CMUnitTest *tests, size_t n);

#endif
