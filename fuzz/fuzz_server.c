/* fuzz_server: the graph server's command reader (graphserver.c parse_one and the handlers behind
 * it), through real sockets, against an in-process server on 127.0.0.1:0.
 *
 * Input: up to 3 chunks separated by FZ_SEP. Each chunk goes to its own connection: all are opened
 * (and their version strings read) first, then each chunk is written in order, then each
 * connection is shut for writing and its answers read until the server hangs up. So one input can
 * register a subscriber on one connection and a publisher on another and see the UPDATEs flow.
 *
 * After each input the server must answer a DAG request within 2 s (else abort()); a SHUTDOWN in
 * the input stops it and it is started afresh; so is one left with edges in its graph, so that
 * every input starts from the same state (a clean server: the connections are all closed).
 * Segments: SHM_CREATE makes real ones; RLIMIT_FSIZE keeps them small (16 MiB). */
#include "fuzz_common.h"

#include <sys/resource.h>

#define MAX_CONNS 3
#define IO_MS 2000 /* the server must hang up within this long after our EOF */

static ez_server *g_srv;
static uint16_t g_port;

static void server_start(void) {
  g_srv = fz_server_start();
  g_port = fz_addr_port(ez_server_address(g_srv));
}

static void init(void) {
  if (g_srv) return;
  fz_quiet();
  signal(SIGXFSZ, SIG_IGN);
  struct rlimit rl = {16u << 20, 16u << 20};
  setrlimit(RLIMIT_FSIZE, &rl);
  server_start();
}

/* The server answers, and has no edges left (restarted if it stopped or has some). */
static void check_server(void) {
  ez_graph g;
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%u", g_port);
  int64_t t0 = fz_now_ms();
  /* A SHUTDOWN in the input: the listening socket stays open (until ez_server_stop) but nobody
   * answers. Try briefly first, then give a live server the full IO_MS. */
  int rc = ez_server_wait(g_srv, 0) == 0 ? EZ_ECLOSED : ez_graph_dag(addr, &g, 50);
  if (rc && ez_server_wait(g_srv, 0) != 0) rc = ez_graph_dag(addr, &g, IO_MS);
  if (rc) {
    if (ez_server_wait(g_srv, 200) == 0) {
      ez_server_stop(g_srv);
      server_start();
      return;
    }
    fz_hang("fuzz_server: the server does not answer DAG any more (%s after %lld ms)",
            ez_strerror(rc), (long long)(fz_now_ms() - t0));
  }
  bool dirty = g.n_nodes != 0;
  ez_graph_free(&g);
  if (dirty) {
    ez_server_stop(g_srv);
    server_start();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  init();
  fz_throttle();
  fz_chunk ch[MAX_CONNS];
  size_t n = fz_split(data, size, ch, MAX_CONNS);
  int fd[MAX_CONNS];
  for (size_t i = 0; i < n; i++) {
    fd[i] = fz_connect(g_port);
    if (fd[i] < 0) fz_die("fuzz_server: cannot connect to the server: %s", strerror(errno));
    if (fz_read_version(fd[i], IO_MS)) fz_hang("fuzz_server: no version from the server");
  }
  for (size_t i = 0; i < n; i++) {
    /* A server that stops reading (it closed us for a protocol error) is fine: stop writing. */
    if (ch[i].n) fz_write(fd[i], ch[i].p, ch[i].n, 200);
  }
  for (size_t i = 0; i < n; i++) {
    shutdown(fd[i], SHUT_WR);
    if (!fz_drain(fd[i], IO_MS)) {
      /* A stopped server (SHUTDOWN) closes nothing until ez_server_stop; anything else is a bug. */
      if (ez_server_wait(g_srv, 0) != 0)
        fz_hang("fuzz_server: connection %zu still open %d ms after EOF", i, IO_MS);
    }
  }
  for (size_t i = 0; i < n; i++)
    close(fd[i]);
  check_server();
  return 0;
}

void fuzz_teardown(void) {
  ez_server_stop(g_srv);
  g_srv = NULL;
}
