/* fuzz_client: the client-side readers of what a graph server says: the one-shot requests
 * (graphclient.c, segment.c leases), the subscriber's graph link (sublink.c ezi_sub_on_graph: id,
 * UPDATE..., COMPLETE) and the publisher's (pubserve.c on_graph: id, COMPLETE, PAUSE, RESUME,
 * SYNC, PROFILE), against a fake graph server played by the harness.
 *
 * The fake server (a thread per connection, 127.0.0.1:0) sends the version string, waits briefly
 * for the request, sends the fuzz bytes, shuts its side for writing and waits for the client to
 * hang up. Connections other than the one fuzzed get the version and then EOF (so a channel a
 * fuzzed UPDATE asks for is refused at once, without any address from the input being resolved);
 * the SHM_CREATE of a publisher gets a segment name that does not exist (so it falls back to
 * private memory and never maps anything named by the input for writing).
 *
 * Input: byte 0 = the call (mod 8): 0 ez_graph_dag, 1 ez_profile, 2 ez_graph_connect,
 * 3 ez_shm_attach, 4 ez_graph_sync, 5 ez_graph_ping, 6 ez_sub_create, 7 ez_pub_create;
 * byte 1 = flags: bit 0 = send no version (the fuzz bytes start where it would be);
 * the rest = what the server sends.
 * Each call must return within its timeout (+ 2 s), with a known result code. */
#include "core/context.h"
#include "fuzz_common.h"

#include <pthread.h>

#define CALL_MS 300
#define SLACK_MS 2000
#define NO_SEGMENT "psm_fz_absent"

enum { M_DAG, M_PROFILE, M_CONNECT, M_SHM, M_SYNC, M_PING, M_SUB, M_PUB, M_COUNT };

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t acceptor;
  bool started, stop;
  int lfd;
  char addr[64];
  /* the current input (mu) */
  const uint8_t *reply;
  size_t reply_len;
  int fuzz_conn; /* index of the connection that gets the fuzz bytes */
  int pub_mode;  /* connection 0 is a publisher's SHM_CREATE */
  bool raw;
  int next_conn, active;
} fk = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .lfd = -1};

static ez_context *g_ctx;
static unsigned g_count;

typedef struct conn_arg {
  int fd, idx;
} conn_arg;

static void *conn_thread(void *arg) {
  conn_arg a = *(conn_arg *)arg;
  free(arg);
  pthread_mutex_lock(&fk.mu);
  bool fuzzed = a.idx == fk.fuzz_conn, raw = fuzzed && fk.raw, seg = fk.pub_mode && a.idx == 0;
  const uint8_t *reply = fk.reply;
  size_t len = fk.reply_len;
  pthread_mutex_unlock(&fk.mu);

  /* The version, then the request (or the client's EOF, for a ping). Without the version the
   * client sends nothing first: answer at once. */
  if (!raw) {
    fz_write_str(a.fd, EZ_VERSION, 500);
    if (fz_wait(a.fd, POLLIN, fz_now_ms() + 50)) fz_read_avail(a.fd);
  }
  if (seg) {
    fz_write_u8(a.fd, FZ_COMPLETE, 500);
    fz_write_str(a.fd, NO_SEGMENT, 500);
  } else if (fuzzed && len) {
    fz_write(a.fd, reply, len, 500);
  }
  shutdown(a.fd, SHUT_WR);
  fz_drain(a.fd, 5000);
  close(a.fd);
  pthread_mutex_lock(&fk.mu);
  fk.active--;
  pthread_cond_broadcast(&fk.cv);
  pthread_mutex_unlock(&fk.mu);
  return NULL;
}

static void *acceptor(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&fk.mu);
    bool stop = fk.stop;
    pthread_mutex_unlock(&fk.mu);
    if (stop) break;
    int fd = fz_accept(fk.lfd, 50);
    if (fd < 0) continue;
    conn_arg *a = malloc(sizeof *a);
    if (!a) fz_die("fuzz_client: out of memory");
    pthread_mutex_lock(&fk.mu);
    a->fd = fd;
    a->idx = fk.next_conn++;
    fk.active++;
    pthread_mutex_unlock(&fk.mu);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, conn_thread, a)) fz_die("fuzz_client: pthread_create");
    pthread_attr_destroy(&attr);
  }
  return NULL;
}

/* Sets up the fake server for one input. */
static void plan(const uint8_t *reply, size_t len, bool raw, int fuzz_conn, bool pub_mode) {
  pthread_mutex_lock(&fk.mu);
  fk.reply = reply;
  fk.reply_len = len;
  fk.raw = raw;
  fk.fuzz_conn = fuzz_conn;
  fk.pub_mode = pub_mode;
  fk.next_conn = 0;
  pthread_mutex_unlock(&fk.mu);
}

/* Waits for every connection of this input to end. */
static void settle(void) {
  int64_t deadline = fz_now_ms() + 10000;
  pthread_mutex_lock(&fk.mu);
  while (fk.active) {
    pthread_mutex_unlock(&fk.mu);
    if (fz_now_ms() > deadline) fz_hang("fuzz_client: a client connection stayed open for 10 s");
    fz_sleep_ms(1);
    pthread_mutex_lock(&fk.mu);
  }
  fk.reply = NULL;
  fk.reply_len = 0;
  fk.fuzz_conn = -1;
  pthread_mutex_unlock(&fk.mu);
}

static void init(void) {
  if (fk.started) return;
  fz_quiet();
  uint16_t port;
  fk.lfd = fz_listen(&port);
  if (fk.lfd < 0) fz_die("fuzz_client: listen");
  snprintf(fk.addr, sizeof fk.addr, "127.0.0.1:%u", port);
  fk.fuzz_conn = -1;
  if (pthread_create(&fk.acceptor, NULL, acceptor, NULL)) fz_die("fuzz_client: acceptor");
  fk.started = true;
  if (ez_context_open(fk.addr, &g_ctx)) fz_die("fuzz_client: context open");
  settle();
}

static void noop(void *arg) { (void)arg; }

static void check_rc(const char *what, int rc, int64_t t0, int limit_ms) {
  int64_t dt = fz_now_ms() - t0;
  if (dt > limit_ms + SLACK_MS) fz_hang("fuzz_client: %s took %lld ms", what, (long long)dt);
  if (rc > 0 || (rc < 0 && strcmp(ez_strerror(rc), "unknown error") == 0))
    fz_die("fuzz_client: %s returned %d", what, rc);
}

static ez_pub *make_pub(int *rc_out) {
  ez_pub_opts o;
  ez_pub_opts_init(&o);
  o.num_buffers = 2;
  o.buf_size = 64;
  char topic[64];
  snprintf(topic, sizeof topic, "fzcl/%u", g_count++);
  ez_pub *p = NULL;
  o.port = fz_free_port();
  *rc_out = ez_pub_create(g_ctx, topic, &o, &p);
  return *rc_out ? NULL : p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  init();
  fz_throttle();
  if (size < 2) return 0;
  int mode = data[0] % M_COUNT;
  bool raw = data[1] & 1;
  plan(data + 2, size - 2, raw, mode == M_PUB ? 1 : 0, mode == M_PUB);
  int64_t t0 = fz_now_ms();
  int rc = 0;
  switch (mode) {
  case M_DAG: {
    ez_graph g;
    rc = ez_graph_dag(fk.addr, &g, CALL_MS);
    check_rc("ez_graph_dag", rc, t0, CALL_MS);
    if (rc == 0) {
      for (size_t i = 0; i < g.n_nodes; i++)
        for (size_t k = 0; k < g.nodes[i].n_to; k++)
          if (!g.nodes[i].to[k]) fz_die("fuzz_client: NULL edge target");
      free(ez_graph_format(&g, "graphviz"));
    } else if (g.n_nodes || g.nodes) {
      fz_die("fuzz_client: ez_graph_dag failed but filled the graph");
    }
    ez_graph_free(&g);
    break;
  }
  case M_PROFILE: {
    char *json = (char *)1;
    rc = ez_profile(fk.addr, 0.5, &json, CALL_MS);
    check_rc("ez_profile", rc, t0, CALL_MS);
    if (rc == 0) {
      ez_profile_data pd;
      if (ez_profile_parse(json, &pd) == 0) ez_profile_data_free(&pd);
      free(json);
    } else if (json) {
      fz_die("fuzz_client: ez_profile failed but returned a document");
    }
    break;
  }
  case M_CONNECT:
    rc = ez_graph_connect(fk.addr, "a", "b", CALL_MS);
    check_rc("ez_graph_connect", rc, t0, CALL_MS);
    break;
  case M_SHM: {
    ez_shm *s = NULL;
    rc = ez_shm_attach(fk.addr, "psm_fz", &s, CALL_MS);
    check_rc("ez_shm_attach", rc, t0, CALL_MS);
    if (rc == 0) {
      if (!ez_shm_name(s) || ez_shm_num_buffers(s) < 1) fz_die("fuzz_client: bad segment");
      ez_shm_close(s);
    }
    break;
  }
  case M_SYNC:
    rc = ez_graph_sync(fk.addr, CALL_MS);
    check_rc("ez_graph_sync", rc, t0, CALL_MS);
    break;
  case M_PING: {
    char v[8];
    rc = ez_graph_ping(fk.addr, v, sizeof v, CALL_MS);
    check_rc("ez_graph_ping", rc, t0, CALL_MS);
    if (rc == 0 && strnlen(v, sizeof v) == sizeof v) fz_die("fuzz_client: version not terminated");
    break;
  }
  case M_SUB: {
    ez_sub *s = NULL;
    char topic[64];
    snprintf(topic, sizeof topic, "fzcl/%u", g_count++);
    rc = ez_sub_create(g_ctx, topic, NULL, &s);
    check_rc("ez_sub_create", rc, t0, 2 * EZ_DEFAULT_TIMEOUT_MS);
    if (rc == 0) {
      ezi_ctx_call(g_ctx, noop, NULL); /* let it read the rest */
      ez_msg m;
      int r = ez_recv(s, &m, 0);
      if (r == 0) fz_die("fuzz_client: a message from nowhere");
      ez_sub_fd(s);
      ez_sub_destroy(s);
    }
    break;
  }
  case M_PUB: {
    ez_pub *p = make_pub(&rc);
    check_rc("ez_pub_create", rc, t0, EZ_DEFAULT_TIMEOUT_MS);
    if (p) {
      ezi_ctx_call(g_ctx, noop, NULL); /* let it read the rest (PAUSE, SYNC, PROFILE...) */
      ezi_ctx_call(g_ctx, noop, NULL);
      rc = ez_publish(p, "x", 1, 0);
      check_rc("ez_publish", rc, t0, EZ_DEFAULT_TIMEOUT_MS);
      ez_pub_destroy(p);
    }
    break;
  }
  }
  settle();
  return 0;
}

void fuzz_teardown(void) {
  if (!fk.started) return;
  ez_context_close(g_ctx);
  g_ctx = NULL;
  pthread_mutex_lock(&fk.mu);
  fk.stop = true;
  pthread_mutex_unlock(&fk.mu);
  pthread_join(fk.acceptor, NULL);
  settle();
  close(fk.lfd);
  fk.lfd = -1;
  fk.started = false;
  fk.stop = false;
}
