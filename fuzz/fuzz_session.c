/* fuzz_session: the graph server's side of the released dialect (gs_session.c, gs_process.c,
 * gs_settings.c, gs_stream.c and their pickles), through real sockets, against an in-process
 * server on 127.0.0.1:0.
 *
 * Input: up to 3 chunks separated by FZ_SEP. Chunk 0 is what a GraphContext session sends once it
 * is open (SESSION answered), chunk 1 what a process connection sends once PROCESS is answered,
 * chunk 2 a fresh connection's bytes (a stream subscription, say). All three are opened first,
 * then the chunks written in order, then each connection shut for writing and read until the
 * server hangs up. Payloads are pickles: the seeds are 3.9.0's, from tests/corpus/meta39.
 *
 * After each input the server must answer a DAG request within 2 s (else abort()); one left with
 * edges (a persistent CONNECT in chunk 2) is started afresh. The server takes a lone 21 for a
 * SESSION at once here (ezi_gs_sniff_ns = 0); the harness waits for its answer before chunk 0. */
#include "fuzz_common.h"
#include "graph/graphserver.h"
#include "base/wire.h"

#define IO_MS 2000

static ez_server *g_srv;
static uint16_t g_port;

static void server_start(void) {
  g_srv = fz_server_start();
  g_port = fz_addr_port(ez_server_address(g_srv));
}

static void init(void) {
  if (g_srv) return;
  fz_quiet();
  ezi_gs_sniff_ns = 0;
  server_start();
}

static void check_server(void) {
  ez_graph g;
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%u", g_port);
  int rc = ez_server_wait(g_srv, 0) == 0 ? EZ_ECLOSED : ez_graph_dag(addr, &g, IO_MS);
  if (rc) {
    if (ez_server_wait(g_srv, 200) == 0) {
      ez_server_stop(g_srv);
      server_start();
      return;
    }
    fz_hang("fuzz_session: the server does not answer DAG any more (%s)", ez_strerror(rc));
  }
  bool dirty = g.n_nodes != 0;
  ez_graph_free(&g);
  if (dirty) {
    ez_server_stop(g_srv);
    server_start();
  }
}

/* Sends cmd and reads `str id, COMPLETE`: 0, or -1 if the server did not answer so. */
static int open_as(int fd, uint8_t cmd) {
  char id[64];
  uint8_t done = 0xff;
  if (fz_write_u8(fd, cmd, IO_MS) || fz_read_str(fd, id, sizeof id, IO_MS) ||
      fz_read(fd, &done, 1, IO_MS) || done != 0)
    return -1;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  init();
  fz_throttle();
  fz_chunk ch[3];
  size_t n = fz_split(data, size, ch, 3);
  int fd[3];
  for (size_t i = 0; i < n; i++) {
    fd[i] = fz_connect(g_port);
    if (fd[i] < 0) fz_die("fuzz_session: cannot connect to the server: %s", strerror(errno));
    if (fz_read_version(fd[i], IO_MS)) fz_hang("fuzz_session: no version from the server");
    if (i < 2 && open_as(fd[i], i == 0 ? EZI_SESSION : EZI_PROCESS))
      fz_hang("fuzz_session: no answer to %s", i == 0 ? "SESSION" : "PROCESS");
  }
  for (size_t i = 0; i < n; i++)
    if (ch[i].n) fz_write(fd[i], ch[i].p, ch[i].n, 200);
  for (size_t i = 0; i < n; i++) {
    shutdown(fd[i], SHUT_WR);
    if (!fz_drain(fd[i], IO_MS) && ez_server_wait(g_srv, 0) != 0)
      fz_hang("fuzz_session: connection %zu still open %d ms after EOF", i, IO_MS);
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
