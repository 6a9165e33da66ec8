/* The graph server, run as a real `ezmsg serve` process: the one-shot graph calls, and the
 * long-lived registrations (subscribers, publishers, channels, leases) spoken by hand over raw
 * sockets, byte for byte as protocol.md describes them.
 *
 * Every test starts its own server on a free 127.0.0.1 port (fixture) and stops it by pid with
 * SIGTERM at the end, expecting exit status 0. */
#include "harness.h"
#include "rawproto.h"
#include "base/wire.h"
#include "base/internal.h"
#include "base/trace.h"
#include "graph/graphclient.h"
#include "proto/ctxprofile.h"
#include "proto/shm.h"

#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TMO 5000 /* generous timeout for anything that should be quick (ms) */

enum {
  COMPLETE = 0,
  PUBLISH = 1,
  SUBSCRIBE = 2,
  CONNECT = 3,
  DISCONNECT = 4,
  CYCLIC = 5,
  PAUSE = 6,
  SYNC = 7,
  RESUME = 8,
  UPDATE = 9,
  DAG = 10,
  SHM_CREATE = 15,
  SHM_ATTACH = 16,
  SHUTDOWN = 17,
  CHANNEL = 18,
  PROFILE = 21,
  PROFILE_DATA = 22,
};

/* ---- fixture: one `ezmsg serve` per test ------------------------------------------------------
 */

typedef struct fixture {
  char addr[64];
  pid_t pid; /* 0 once the test has reaped it itself */
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (!f) return -1;
  th_free_address(f->addr, sizeof f->addr);
  f->pid = th_start_server(f->addr);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  int rc = 0;
  if (f->pid > 0) {
    int st = th_stop(f->pid, SIGTERM, TMO);
    if (st != 0) {
      print_error("server at %s: exit status %d after SIGTERM (want 0)\n", f->addr, st);
      rc = -1;
    }
  }
  free(f);
  return rc;
}

/* ---- graph helpers ------------------------------------------------------------------------------
 */

static const ez_graph_node *find_node(const ez_graph *g, const char *topic) {
  for (size_t i = 0; i < g->n_nodes; i++)
    if (strcmp(g->nodes[i].topic, topic) == 0) return &g->nodes[i];
  return NULL;
}

static bool has_edge(const ez_graph *g, const char *from, const char *to) {
  const ez_graph_node *n = find_node(g, from);
  if (!n) return false;
  for (size_t i = 0; i < n->n_to; i++)
    if (strcmp(n->to[i], to) == 0) return true;
  return false;
}

static size_t n_edges(const ez_graph *g) {
  size_t e = 0;
  for (size_t i = 0; i < g->n_nodes; i++)
    e += g->nodes[i].n_to;
  return e;
}

/* ---- tests ------------------------------------------------------------------------------------
 */

static void test_version_ping(void **state) {
  fixture *f = *state;
  char ver[32] = "";
  assert_int_equal(ez_graph_ping(f->addr, ver, sizeof ver, TMO), 0);
  assert_string_equal(ver, EZ_VERSION); /* the released dialect, by default */
  /* A raw connection gets the same version string first; hanging up right away is a ping. */
  int fd = rp_connect(f->addr);
  close(fd);
  assert_int_equal(ez_graph_ping(f->addr, NULL, 0, TMO), 0);
}

static void test_connect_disconnect_prune(void **state) {
  fixture *f = *state;
  ez_graph g;
  assert_int_equal(ez_graph_dag(f->addr, &g, TMO), 0);
  assert_int_equal(g.n_nodes, 0);
  ez_graph_free(&g);

  assert_int_equal(ez_graph_connect(f->addr, "/a", "/b", TMO), 0);
  assert_int_equal(ez_graph_connect(f->addr, "/b", "/c", TMO), 0);
  assert_int_equal(ez_graph_connect(f->addr, "/a", "/b", TMO), 0); /* again: no change */
  assert_int_equal(ez_graph_dag(f->addr, &g, TMO), 0);
  assert_int_equal(g.n_nodes, 3);
  assert_int_equal(n_edges(&g), 2);
  assert_true(has_edge(&g, "/a", "/b"));
  assert_true(has_edge(&g, "/b", "/c"));
  ez_graph_free(&g);

  /* Cycles: a self edge, a two-edge and a three-edge cycle; the graph stays as it was. */
  assert_int_equal(ez_graph_connect(f->addr, "/x", "/x", TMO), EZ_ECYCLIC);
  assert_int_equal(ez_graph_connect(f->addr, "/b", "/b", TMO), EZ_ECYCLIC);
  assert_int_equal(ez_graph_connect(f->addr, "/b", "/a", TMO), EZ_ECYCLIC);
  assert_int_equal(ez_graph_connect(f->addr, "/c", "/a", TMO), EZ_ECYCLIC);
  assert_int_equal(ez_graph_dag(f->addr, &g, TMO), 0);
  assert_int_equal(g.n_nodes, 3);
  assert_int_equal(n_edges(&g), 2);
  assert_null(find_node(&g, "/x"));
  ez_graph_free(&g);

  /* Absent edges (between known and unknown topics) are fine to remove. */
  assert_int_equal(ez_graph_disconnect(f->addr, "/q", "/r", TMO), 0);
  assert_int_equal(ez_graph_disconnect(f->addr, "/b", "/a", TMO), 0);
  assert_int_equal(ez_graph_dag(f->addr, &g, TMO), 0);
  assert_int_equal(g.n_nodes, 3);
  assert_null(find_node(&g, "/q"));
  ez_graph_free(&g);

  /* Removing /b -> /c leaves /c unconnected: pruned. */
  assert_int_equal(ez_graph_disconnect(f->addr, "/b", "/c", TMO), 0);
  assert_int_equal(ez_graph_dag(f->addr, &g, TMO), 0);
  assert_int_equal(g.n_nodes, 2);
  assert_true(has_edge(&g, "/a", "/b"));
  assert_null(find_node(&g, "/c"));
  ez_graph_free(&g);
  /* With /b -> /c gone, /c -> /a is no longer a cycle. */
  assert_int_equal(ez_graph_connect(f->addr, "/c", "/a", TMO), 0);
  assert_int_equal(ez_graph_disconnect(f->addr, "/c", "/a", TMO), 0);
  assert_int_equal(ez_graph_disconnect(f->addr, "/a", "/b", TMO), 0);
  assert_int_equal(ez_graph_dag(f->addr, &g, TMO), 0);
  assert_int_equal(g.n_nodes, 0);
  ez_graph_free(&g);

  /* Over a raw connection: CONNECT answers COMPLETE / CYCLIC, then the server hangs up. */
  int fd = rp_connect(f->addr);
  rp_wr_cmd(fd, CONNECT, "/r1", "/r2");
  rp_expect_u8(fd, COMPLETE);
  assert_true(rp_closed_silently(fd, TMO));
  close(fd);
  fd = rp_connect(f->addr);
  rp_wr_cmd(fd, CONNECT, "/r2", "/r1");
  rp_expect_u8(fd, CYCLIC);
  assert_true(rp_closed_silently(fd, TMO));
  close(fd);
  /* DAG over a raw connection: DAG, u64 n, n bytes (a pickle), COMPLETE. */
  fd = rp_connect(f->addr);
  rp_wr_u8(fd, DAG);
  rp_expect_u8(fd, DAG);
  uint64_t n = rp_rd_u64(fd);
  assert_true(n > 2 && n < 4096);
  uint8_t pk[4096];
  assert_int_equal(rp_rd_exact(fd, pk, (size_t)n, TMO), 0);
  assert_int_equal(pk[0], 0x80);    /* PROTO */
  assert_int_equal(pk[n - 1], '.'); /* STOP */
  rp_expect_u8(fd, COMPLETE);
  close(fd);
}

static void test_shutdown_request(void **state) {
  fixture *f = *state;
  assert_int_equal(ez_graph_shutdown(f->addr, TMO), 0);
  assert_int_equal(th_wait_exit(f->pid, TMO), 0);
  f->pid = 0;
  assert_int_equal(ez_graph_ping(f->addr, NULL, 0, 1000), EZ_ENOSERVER);
}

/* A fake subscriber, a fake publisher on its topic, a channel for that publisher, then the
 * publisher leaves. */
static void test_raw_sub_pub_channel(void **state) {
  fixture *f = *state;
  char sub_id[37], pub_id[37], ids[512];
  int sub = rp_fake_sub(f->addr, "/t", sub_id, ids, sizeof ids);
  assert_string_equal(ids, "");
  rp_wr_u8(sub, EZI_X_CLIENT); /* an ezmsg-c subscriber: told when a publisher leaves */

  int pub = rp_fake_pub_begin(f->addr, "/t", "127.0.0.1:45678", pub_id);
  assert_string_not_equal(pub_id, sub_id);
  rp_expect_u8(sub, UPDATE);
  rp_rd_str(sub, ids, sizeof ids);
  assert_string_equal(ids, pub_id);
  /* The publisher's COMPLETE waits for the subscriber's. */
  assert_true(rp_quiet_for(pub, 200));
  rp_wr_u8(sub, COMPLETE);
  rp_expect_u8(pub, COMPLETE);

  /* CHANNEL for that publisher: COMPLETE, channel id, the publisher's address. */
  int chan = rp_connect(f->addr);
  rp_wr_cmd(chan, CHANNEL, pub_id, NULL);
  rp_expect_u8(chan, COMPLETE);
  char chan_id[64];
  rp_rd_str(chan, chan_id, sizeof chan_id);
  assert_true(rp_is_uuid(chan_id));
  assert_string_not_equal(chan_id, pub_id);
  rp_expect_str(chan, "127.0.0.1:45678");

  /* A second subscriber on the same topic sees the publisher at once. */
  char sub2_id[37];
  int sub2 = rp_fake_sub(f->addr, "/t", sub2_id, ids, sizeof ids);
  assert_string_equal(ids, pub_id);
  /* ...and a subscriber elsewhere does not. */
  char sub3_id[37];
  int sub3 = rp_fake_sub(f->addr, "/elsewhere", sub3_id, ids, sizeof ids);
  assert_string_equal(ids, "");

  /* The publisher leaves: its ezmsg-c subscriber gets UPDATE "" (our extension); the other one
   * (as a Python subscriber, which neither reference server tells) and the one elsewhere get
   * nothing. */
  close(pub);
  rp_sub_update(sub, ids, sizeof ids);
  assert_string_equal(ids, "");
  assert_true(rp_quiet_for(sub2, 200));
  assert_true(rp_quiet_for(sub3, 100));
  /* The channel is not told anything by the server (it would notice on the data plane). */
  assert_true(rp_quiet_for(chan, 100));

  /* A CHANNEL for the departed publisher: closed without an answer. */
  int chan2 = rp_connect(f->addr);
  rp_wr_cmd(chan2, CHANNEL, pub_id, NULL);
  assert_true(rp_closed_silently(chan2, TMO));
  close(chan2);

  close(chan);
  close(sub);
  close(sub2);
  close(sub3);
}

/* Two publishers, one subscriber: UPDATE lists both, comma-joined. */
static void test_update_lists_all_publishers(void **state) {
  fixture *f = *state;
  char sub_id[37], p1[37], p2[37], ids[512];
  int sub = rp_fake_sub(f->addr, "/m", sub_id, ids, sizeof ids);
  rp_wr_u8(sub, EZI_X_CLIENT); /* (told when a publisher leaves) */
  int a = rp_fake_pub_begin(f->addr, "/m", "127.0.0.1:40001", p1);
  rp_sub_update(sub, ids, sizeof ids);
  assert_string_equal(ids, p1);
  rp_expect_u8(a, COMPLETE);
  int b = rp_fake_pub_begin(f->addr, "/m", "127.0.0.1:40002", p2);
  rp_sub_update(sub, ids, sizeof ids);
  assert_int_equal(strlen(ids), 73);
  assert_int_equal(ids[36], ',');
  assert_non_null(strstr(ids, p1));
  assert_non_null(strstr(ids, p2));
  rp_expect_u8(b, COMPLETE);
  /* A publisher whose channel address is not host:port breaks the protocol: closed. */
  int bad = rp_connect(f->addr);
  char bad_id[37];
  rp_wr_cmd(bad, PUBLISH, "/m", NULL);
  rp_rd_str(bad, bad_id, sizeof bad_id);
  rp_wr_str(bad, "no port here");
  assert_true(rp_closed_silently(bad, TMO));
  close(bad);
  assert_true(rp_quiet_for(sub, 100)); /* it never counted as a publisher */
  close(a);
  rp_sub_update(sub, ids, sizeof ids);
  assert_string_equal(ids, p2);
  close(b);
  rp_sub_update(sub, ids, sizeof ids);
  assert_string_equal(ids, "");
  close(sub);
}

typedef struct edge_call {
  const char *addr, *from, *to;
  bool connect;
  int rc;
  atomic_int done;
} edge_call;

static void *edge_thread(void *arg) {
  edge_call *e = arg;
  e->rc = e->connect ? ez_graph_connect(e->addr, e->from, e->to, 20000)
                     : ez_graph_disconnect(e->addr, e->from, e->to, 20000);
  atomic_store(&e->done, 1);
  return NULL;
}

/* Publisher on /a, subscriber on /b: connecting /a -> /b routes the publisher to the subscriber,
 * and the CONNECT is answered only after the subscriber has acknowledged its UPDATE. */
static void test_edge_routing(void **state) {
  fixture *f = *state;
  char sub_id[37], pub_id[37], ids[512];
  int pub = rp_fake_pub(f->addr, "/a", pub_id);
  int sub = rp_fake_sub(f->addr, "/b", sub_id, ids, sizeof ids);
  assert_string_equal(ids, "");

  edge_call e = {.addr = f->addr, .from = "/a", .to = "/b", .connect = true};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, edge_thread, &e), 0);
  rp_expect_u8(sub, UPDATE);
  rp_rd_str(sub, ids, sizeof ids);
  assert_string_equal(ids, pub_id);
  th_sleep_ms(300); /* the connect must still be waiting for us */
  assert_int_equal(atomic_load(&e.done), 0);
  rp_wr_u8(sub, COMPLETE);
  pthread_join(t, NULL);
  assert_int_equal(e.rc, 0);

  /* Longer chain: /a -> /b -> /c; a subscriber on /c sees the publisher on /a. */
  char sub_c_id[37];
  int sub_c = rp_fake_sub(f->addr, "/c", sub_c_id, ids, sizeof ids);
  assert_string_equal(ids, "");
  edge_call e2 = {.addr = f->addr, .from = "/b", .to = "/c", .connect = true};
  assert_int_equal(pthread_create(&t, NULL, edge_thread, &e2), 0);
  rp_sub_update(sub_c, ids, sizeof ids);
  assert_string_equal(ids, pub_id);
  pthread_join(t, NULL);
  assert_int_equal(e2.rc, 0);
  assert_true(rp_quiet_for(sub, 100)); /* /b is upstream of the change: not told */

  /* Disconnect /a -> /b: both downstream subscribers get UPDATE "", answered before COMPLETE. */
  edge_call e3 = {.addr = f->addr, .from = "/a", .to = "/b", .connect = false};
  assert_int_equal(pthread_create(&t, NULL, edge_thread, &e3), 0);
  rp_expect_u8(sub, UPDATE);
  rp_rd_str(sub, ids, sizeof ids);
  assert_string_equal(ids, "");
  rp_sub_update(sub_c, ids, sizeof ids);
  assert_string_equal(ids, "");
  th_sleep_ms(200);
  assert_int_equal(atomic_load(&e3.done), 0);
  rp_wr_u8(sub, COMPLETE);
  pthread_join(t, NULL);
  assert_int_equal(e3.rc, 0);

  /* A subscriber that leaves instead of answering also lets the request finish. */
  edge_call e4 = {.addr = f->addr, .from = "/a", .to = "/b", .connect = true};
  assert_int_equal(pthread_create(&t, NULL, edge_thread, &e4), 0);
  rp_expect_u8(sub, UPDATE);
  rp_rd_str(sub, ids, sizeof ids);
  rp_sub_update(sub_c, ids, sizeof ids);
  assert_string_equal(ids, pub_id);
  close(sub);
  pthread_join(t, NULL);
  assert_int_equal(e4.rc, 0);

  close(sub_c);
  close(pub);
}

static json_t *load_json(const char *text) {
  json_error_t err;
  json_t *doc = json_loads(text, 0, &err);
  if (!doc) fail_msg("bad JSON (%s): %s", err.text, text);
  return doc;
}

static void test_profile_empty(void **state) {
  fixture *f = *state;
  char *text = NULL;
  assert_int_equal(ez_profile(f->addr, 2.0, &text, TMO), 0);
  assert_non_null(text);
  json_t *doc = load_json(text);
  assert_true(json_is_object(doc));
  json_t *w = json_object_get(doc, "window_s");
  assert_true(json_is_number(w));
  assert_true(json_number_value(w) > 1.99 && json_number_value(w) < 2.01);
  assert_true(json_is_array(json_object_get(doc, "publishers")));
  assert_int_equal(json_array_size(json_object_get(doc, "publishers")), 0);
  assert_true(json_is_array(json_object_get(doc, "channels")));
  assert_int_equal(json_array_size(json_object_get(doc, "channels")), 0);
  json_decref(doc);
  free(text);
  /* The parser accepts it too. */
  assert_int_equal(ez_profile(f->addr, 0.5, &text, TMO), 0);
  ez_profile_data pd;
  assert_int_equal(ez_profile_parse(text, &pd), 0);
  assert_int_equal(pd.n_publishers, 0);
  assert_int_equal(pd.n_channels, 0);
  assert_true(pd.window_s > 0.49 && pd.window_s < 0.51);
  ez_profile_data_free(&pd);
  free(text);
}

typedef struct profile_call {
  const char *addr;
  int rc;
  char *json;
  int64_t elapsed_ms;
} profile_call;

static void *profile_thread(void *arg) {
  profile_call *p = arg;
  int64_t t0 = th_now_ms();
  p->rc = ez_profile(p->addr, 2.0, &p->json, 10000);
  p->elapsed_ms = th_now_ms() - t0;
  return NULL;
}

/* Reads a PROFILE request on a registered client; returns its window_ms. */
static uint64_t read_profile_req(int fd) {
  rp_expect_u8(fd, PROFILE);
  return rp_rd_u64(fd);
}

static void send_profile_data(int fd, const char *json) {
  rp_wr_u8(fd, PROFILE_DATA);
  rp_wr_str(fd, json);
}

/* Three publishers and a channel: one publisher answers, one never does, one disconnects
 * mid-request; the channel answers without a topic (the server adds it). */
static void test_profile_partial_answers(void **state) {
  fixture *f = *state;
  char good_id[37], silent_id[37], gone_id[37], json[1024];
  int good = rp_fake_pub(f->addr, "/p/good", good_id);
  int silent = rp_fake_pub(f->addr, "/p/silent", silent_id);
  int gone = rp_fake_pub(f->addr, "/p/gone", gone_id);
  int chan = rp_connect(f->addr);
  rp_wr_cmd(chan, CHANNEL, good_id, NULL);
  rp_expect_u8(chan, COMPLETE);
  char chan_id[64], paddr[64];
  rp_rd_str(chan, chan_id, sizeof chan_id);
  rp_rd_str(chan, paddr, sizeof paddr);
  /* ezmsg-c clients, all of them: PROFILE goes to those in either dialect */
  rp_mark_ezc(good);
  rp_mark_ezc(silent);
  rp_mark_ezc(gone);
  rp_mark_ezc(chan);

  profile_call p = {.addr = f->addr};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, profile_thread, &p), 0);
  assert_int_equal(read_profile_req(good), 2000);
  assert_int_equal(read_profile_req(silent), 2000);
  assert_int_equal(read_profile_req(gone), 2000);
  assert_int_equal(read_profile_req(chan), 2000);
  snprintf(json, sizeof json,
           "{\"type\":\"publisher\",\"id\":\"%s\",\"topic\":\"/p/good\",\"pid\":%d,"
           "\"num_buffers\":32,\"window_s\":2.0,\"message_rate_hz\":1.5}",
           good_id, (int)getpid());
  send_profile_data(good, json);
  snprintf(json, sizeof json,
           "{\"type\":\"channel\",\"channel_id\":\"%s\",\"pub_id\":\"%s\",\"pid\":%d,"
           "\"num_buffers\":32,\"mode\":\"tcp\",\"window_s\":2.0,\"in_flight\":0,"
           "\"subscribers\":[]}",
           chan_id, good_id, (int)getpid());
  send_profile_data(chan, json);
  close(gone);
  pthread_join(t, NULL);
  assert_int_equal(p.rc, 0);
  /* The server waits at most 1 s for the silent one. */
  assert_true(p.elapsed_ms < 1500);

  json_t *doc = load_json(p.json);
  json_t *pubs = json_object_get(doc, "publishers"), *chans = json_object_get(doc, "channels");
  assert_int_equal(json_array_size(pubs), 1);
  json_t *p0 = json_array_get(pubs, 0);
  assert_string_equal(json_string_value(json_object_get(p0, "id")), good_id);
  assert_string_equal(json_string_value(json_object_get(p0, "type")), "publisher");
  assert_true(json_number_value(json_object_get(p0, "message_rate_hz")) == 1.5);
  assert_int_equal(json_array_size(chans), 1);
  json_t *c0 = json_array_get(chans, 0);
  assert_string_equal(json_string_value(json_object_get(c0, "channel_id")), chan_id);
  assert_string_equal(json_string_value(json_object_get(c0, "topic")), "/p/good");
  json_decref(doc);
  free(p.json);

  /* A late answer from the silent one is ignored; the next profile works and counts it. */
  send_profile_data(silent, "{\"type\":\"publisher\",\"id\":\"late\"}");
  p = (profile_call){.addr = f->addr};
  assert_int_equal(pthread_create(&t, NULL, profile_thread, &p), 0);
  read_profile_req(good);
  read_profile_req(silent);
  read_profile_req(chan);
  snprintf(json, sizeof json, "{\"type\":\"publisher\",\"id\":\"%s\"}", silent_id);
  send_profile_data(silent, json);
  /* A publisher that answers with the wrong type of document is left out. */
  send_profile_data(good, "{\"type\":\"channel\"}");
  send_profile_data(chan, "not json");
  pthread_join(t, NULL);
  assert_int_equal(p.rc, 0);
  doc = load_json(p.json);
  pubs = json_object_get(doc, "publishers");
  assert_int_equal(json_array_size(pubs), 1);
  assert_string_equal(json_string_value(json_object_get(json_array_get(pubs, 0), "id")), silent_id);
  assert_int_equal(json_array_size(json_object_get(doc, "channels")), 0);
  json_decref(doc);
  free(p.json);
  /* Everybody is still registered: a SYNC-free check through PAUSE. */
  assert_int_equal(ez_graph_pause(f->addr, TMO), 0);
  rp_expect_u8(good, PAUSE);
  rp_expect_u8(silent, PAUSE);
  close(good);
  close(silent);
  close(chan);
}

typedef struct simple_call {
  const char *addr;
  int rc;
  atomic_int done;
} simple_call;

static void *sync_thread(void *arg) {
  simple_call *s = arg;
  s->rc = ez_graph_sync(s->addr, 20000);
  atomic_store(&s->done, 1);
  return NULL;
}

/* A profile that traces (`ezmsg profile --trace`'s poll: base/trace.h). */
static void *traced_profile_thread(void *arg) {
  profile_call *p = arg;
  p->rc = ezi_profile_request(p->addr, (double)(EZI_TRACE_POLL_MS + 100) / 1000.0, &p->json,
                              ezi_deadline(10000));
  return NULL;
}

/* X_CTX for a context whose id is 16 bytes of `fill` (proto/ctxprofile.h). */
static void send_xctx(int fd, uint8_t fill) {
  uint8_t b[1 + EZI_X_CTX_PAYLOAD] = {EZI_X_CTX};
  for (size_t i = 0; i < EZI_X_CTX_PAYLOAD; i++)
    b[1 + i] = (uint8_t)(0xf0 | ((i % 2 ? fill : fill >> 4) & 0x0f));
  rp_wr(fd, b, sizeof b);
}

static void send_part(int fd, const char *json) {
  rp_wr_u8(fd, EZI_X_PROFILE_PART);
  rp_wr_str(fd, json);
}

/* Endpoints that told the server their context (X_CTX) are profiled through it: one of each
 * context's connections gets X_PROFILE_CTX and answers for all (parts, then the end); the others
 * get nothing. A part of the wrong kind or beyond the context's bound is left out, a traced
 * profile still asks each endpoint, and a malformed X_CTX closes its connection. */
static void test_profile_by_context(void **state) {
  fixture *f = *state;
  char a_id[37], b_id[37], c_id[37], json[512];
  int a = rp_fake_pub(f->addr, "/ctx/a", a_id), b = rp_fake_pub(f->addr, "/ctx/b", b_id);
  int c = rp_fake_pub(f->addr, "/ctx/c", c_id); /* a context of its own */
  rp_mark_ezc(a);
  rp_mark_ezc(b);
  rp_mark_ezc(c);
  send_xctx(a, 0x5a);
  send_xctx(b, 0x5a);
  send_xctx(c, 0x11);
  /* Parts and ends nobody asked for are ignored (the profile below counts what
   * is kept; the SYNC's answers after them on a mean they were read first). */
  send_part(a, "{\"type\":\"publisher\",\"id\":\"unasked\"}");
  rp_wr_u8(a, EZI_X_PROFILE_END);
  /* A SYNC answered on each connection: once it returns, the server has read the marks, which
   * came before the answers on the same connections. */
  simple_call sc = {.addr = f->addr};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, sync_thread, &sc), 0);
  int all[3] = {a, b, c};
  for (int k = 0; k < 3; k++) {
    rp_expect_u8(all[k], SYNC);
    rp_wr_u8(all[k], COMPLETE);
  }
  pthread_join(t, NULL);
  assert_int_equal(sc.rc, 0);
  profile_call p = {.addr = f->addr};
  assert_int_equal(pthread_create(&t, NULL, profile_thread, &p), 0);
  /* Context 0x5a: a or b is asked (whichever the server lists first), the other nothing. */
  struct pollfd pf[2] = {{.fd = a, .events = POLLIN}, {.fd = b, .events = POLLIN}};
  assert_true(poll(pf, 2, TMO) > 0);
  int asked = pf[0].revents ? a : b, other = asked == a ? b : a;
  rp_expect_u8(asked, EZI_X_PROFILE_CTX);
  assert_int_equal(rp_rd_u64(asked), 2000);
  for (int i = 0; i < 2; i++) {
    snprintf(json, sizeof json, "{\"type\":\"publisher\",\"id\":\"%s\",\"topic\":\"%s\"}",
             i ? b_id : a_id, i ? "/ctx/b" : "/ctx/a");
    send_part(asked, json);
  }
  send_part(asked, "{\"type\":\"subscriber\"}"); /* no such kind: left out */
  send_part(asked, "[1,2]");                     /* not an object: left out */
  rp_wr_u8(asked, EZI_X_PROFILE_END);
  rp_expect_u8(c, EZI_X_PROFILE_CTX);
  rp_rd_u64(c);
  snprintf(json, sizeof json, "{\"type\":\"publisher\",\"id\":\"%s\",\"topic\":\"/ctx/c\"}", c_id);
  for (size_t i = 0; i < EZI_CTX_PARTS_MAX(1) + 5; i++) /* beyond its bound: the rest dropped */
    send_part(c, json);
  rp_wr_u8(c, EZI_X_PROFILE_END);
  pthread_join(t, NULL);
  assert_int_equal(p.rc, 0);
  json_t *doc = load_json(p.json);
  json_t *pubs = json_object_get(doc, "publishers");
  assert_int_equal(json_array_size(pubs), 2 + EZI_CTX_PARTS_MAX(1));
  size_t i;
  json_t *e;
  json_array_foreach(pubs, i, e) {
    assert_string_equal(json_string_value(json_object_get(e, "dialect")), "profiling");
  }
  json_decref(doc);
  free(p.json);
  struct pollfd po = {.fd = other, .events = POLLIN};
  assert_int_equal(poll(&po, 1, 0), 0); /* never asked */

  /* A traced profile asks each endpoint with PROFILE. */
  p = (profile_call){.addr = f->addr};
  assert_int_equal(pthread_create(&t, NULL, traced_profile_thread, &p), 0);
  int fds[3] = {a, b, c};
  for (int k = 0; k < 3; k++) {
    rp_expect_u8(fds[k], PROFILE);
    assert_true(rp_rd_u64(fds[k]) >= EZI_TRACE_POLL_MS);
    send_profile_data(fds[k], "{\"type\":\"publisher\"}");
  }
  pthread_join(t, NULL);
  assert_int_equal(p.rc, 0);
  doc = load_json(p.json);
  assert_int_equal(json_array_size(json_object_get(doc, "publishers")), 3);
  json_decref(doc);
  free(p.json);

  /* A malformed X_CTX (a byte that is not 0xf0 | nibble) closes the connection. */
  uint8_t bad[1 + EZI_X_CTX_PAYLOAD];
  memset(bad, 0xf3, sizeof bad);
  bad[0] = EZI_X_CTX;
  bad[7] = 0xe3;
  rp_wr(c, bad, sizeof bad);
  uint8_t x;
  assert_int_equal(rp_rd_exact(c, &x, 1, TMO), -2); /* EOF: closed by the server */
  close(a);
  close(b);
  close(c);
}

static void test_sync(void **state) {
  fixture *f = *state;
  /* No publishers: answered at once. */
  assert_int_equal(ez_graph_sync(f->addr, TMO), 0);

  char id1[37], id2[37];
  int p1 = rp_fake_pub(f->addr, "/s1", id1);
  int p2 = rp_fake_pub(f->addr, "/s2", id2);
  simple_call s = {.addr = f->addr};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, sync_thread, &s), 0);
  rp_expect_u8(p1, SYNC);
  rp_expect_u8(p2, SYNC);
  rp_wr_u8(p1, COMPLETE);
  th_sleep_ms(300); /* still waiting for p2 */
  assert_int_equal(atomic_load(&s.done), 0);
  rp_wr_u8(p2, COMPLETE);
  pthread_join(t, NULL);
  assert_int_equal(s.rc, 0);

  /* A publisher that leaves instead of answering counts as done. */
  s = (simple_call){.addr = f->addr};
  assert_int_equal(pthread_create(&t, NULL, sync_thread, &s), 0);
  rp_expect_u8(p1, SYNC);
  rp_expect_u8(p2, SYNC);
  rp_wr_u8(p2, COMPLETE);
  th_sleep_ms(200);
  assert_int_equal(atomic_load(&s.done), 0);
  close(p1);
  pthread_join(t, NULL);
  assert_int_equal(s.rc, 0);
  close(p2);
}

static void test_pause_resume(void **state) {
  fixture *f = *state;
  char id1[37], id2[37], sid[37], ids[128];
  int p1 = rp_fake_pub(f->addr, "/pr1", id1);
  int p2 = rp_fake_pub(f->addr, "/pr2", id2);
  int sub = rp_fake_sub(f->addr, "/pr1", sid, ids, sizeof ids);
  assert_string_equal(ids, id1);
  assert_int_equal(ez_graph_pause(f->addr, TMO), 0);
  rp_expect_u8(p1, PAUSE);
  rp_expect_u8(p2, PAUSE);
  assert_int_equal(ez_graph_resume(f->addr, TMO), 0);
  rp_expect_u8(p1, RESUME);
  rp_expect_u8(p2, RESUME);
  /* Exactly one byte each, and nothing to subscribers. */
  assert_true(rp_quiet_for(p1, 100));
  assert_true(rp_quiet_for(p2, 50));
  assert_true(rp_quiet_for(sub, 50));
  /* Raw: PAUSE gets no answer; the server just hangs up. */
  int fd = rp_connect(f->addr);
  rp_wr_u8(fd, PAUSE);
  assert_true(rp_closed_silently(fd, TMO));
  close(fd);
  rp_expect_u8(p1, PAUSE);
  rp_expect_u8(p2, PAUSE);
  close(p1);
  close(p2);
  close(sub);
}

static bool shm_exists(const char *name) {
  char path[128];
  snprintf(path, sizeof path, "/dev/shm/%s", name);
  return access(path, F_OK) == 0;
}

static bool shm_gone_within(const char *name, int ms) {
  for (int waited = 0; waited < ms; waited += 10) {
    if (!shm_exists(name)) return true;
    th_sleep_ms(10);
  }
  return !shm_exists(name);
}

/* A raw SHM_CREATE lease: returns the fd, name in name. */
static int raw_shm_create(const char *addr, uint64_t nbuf, uint64_t size, char name[64]) {
  int fd = rp_connect(addr);
  rp_wr_u8(fd, SHM_CREATE);
  rp_wr_u64(fd, nbuf);
  rp_wr_u64(fd, size);
  rp_expect_u8(fd, COMPLETE);
  rp_rd_str(fd, name, 64);
  return fd;
}

static void test_shm_leases(void **state) {
  fixture *f = *state;
  char name[64], name2[64];
  int lease1 = raw_shm_create(f->addr, 4, 1000, name);
  assert_true(strncmp(name, "psm_ez", 6) == 0 && strlen(name) == 14);
  assert_true(shm_exists(name));
  ezi_shm m;
  assert_int_equal(ezi_shm_attach(name, &m), 0);
  assert_int_equal(m.num_buffers, 4);
  assert_int_equal(m.stride, 1000 + 16 * 4);
  assert_int_equal(m.size, 4 * (1000 + 16 * 4));
  ezi_shm_detach(&m);

  /* A second lease through SHM_ATTACH. */
  int lease2 = rp_connect(f->addr);
  rp_wr_cmd(lease2, SHM_ATTACH, name, NULL);
  rp_expect_u8(lease2, COMPLETE);
  rp_expect_str(lease2, name);
  close(lease1);
  assert_true(rp_quiet_for(lease2, 200));
  assert_true(shm_exists(name)); /* one lease left */
  close(lease2);
  assert_true(shm_gone_within(name, TMO));
  /* A name no longer leased is unknown. */
  int late = rp_connect(f->addr);
  rp_wr_cmd(late, SHM_ATTACH, name, NULL);
  assert_true(rp_closed_silently(late, TMO));
  close(late);

  /* Segments still leased when the server stops are removed by it. */
  int lease3 = raw_shm_create(f->addr, 2, 64, name2);
  assert_true(shm_exists(name2));
  assert_int_equal(th_stop(f->pid, SIGTERM, TMO), 0);
  f->pid = 0;
  assert_false(shm_exists(name2));
  assert_true(rp_closed_silently(lease3, TMO));
  close(lease3);
}

/* The same through the public ez_shm_* calls. */
static void test_shm_api(void **state) {
  fixture *f = *state;
  ez_shm *a = NULL, *b = NULL;
  assert_int_equal(ez_shm_create(f->addr, 8, 4096, &a, TMO), 0);
  char name[64];
  snprintf(name, sizeof name, "%s", ez_shm_name(a));
  assert_true(shm_exists(name));
  assert_int_equal(ez_shm_num_buffers(a), 8);
  assert_true(ez_shm_buffer_size(a) >= 4096);
  assert_null(ez_shm_buffer(a, 8));
  memcpy(ez_shm_buffer(a, 3), "hello", 6);
  assert_int_equal(ez_shm_attach(f->addr, name, &b, TMO), 0);
  assert_string_equal(ez_shm_name(b), name);
  assert_int_equal(ez_shm_num_buffers(b), 8);
  assert_string_equal((const char *)ez_shm_buffer(b, 3), "hello");
  assert_int_equal(ez_shm_attach(f->addr, "psm_00000000", &(ez_shm *){NULL}, TMO), EZ_ENOENT);
  ez_shm_close(a);
  assert_true(shm_exists(name));
  ez_shm_close(b);
  assert_true(shm_gone_within(name, TMO));

  ez_shm *c = NULL;
  assert_int_equal(ez_shm_create(f->addr, 1, 16, &c, TMO), 0);
  snprintf(name, sizeof name, "%s", ez_shm_name(c));
  assert_int_equal(th_stop(f->pid, SIGTERM, TMO), 0);
  f->pid = 0;
  assert_false(shm_exists(name));
  ez_shm_close(c);
}

/* `ezmsg serve --max-clients 2`: a third client is refused (EZ_EREFUSED, not "no server"), the
 * clients served are unaffected, and once one leaves a new client is served again. */
/* A raw client that the server greeted (its version string read), or -1 if the server closed
 * the connection at once (its client limit). */
static int greeted_client(const char *addr) {
  int fd = rp_open(addr);
  uint64_t n = 0;
  char ver[64];
  if (rp_rd_exact(fd, &n, 8, TMO) == 0 && n < sizeof ver && rp_rd_exact(fd, ver, n, TMO) == 0) {
    ver[n] = 0;
    assert_string_equal(ver, EZ_VERSION);
    return fd;
  }
  close(fd);
  return -1;
}

static void test_client_limit(void **state) {
  fixture *f = *state;
  th_stop(f->pid, SIGTERM, TMO); /* this test needs its own server, with a limit */
  f->pid = th_spawn_cli(-1, "serve", "--address", f->addr, "--max-clients", "2", NULL);
  int rc = EZ_ENOSERVER;
  for (int i = 0; i < 500 && rc == EZ_ENOSERVER; i++) { /* until it listens */
    rc = ez_graph_ping(f->addr, NULL, 0, TMO);
    if (rc) th_sleep_ms(10);
  }
  assert_int_equal(rc, 0);
  /* Two clients; the ping's connection may not have been counted out yet, hence the retries. */
  int a = -1, b = -1;
  for (int i = 0; i < 500 && (a < 0 || b < 0); i++) {
    if (a < 0) a = greeted_client(f->addr);
    if (a >= 0 && b < 0) b = greeted_client(f->addr);
    if (a < 0 || b < 0) th_sleep_ms(10);
  }
  assert_true(a >= 0 && b >= 0);
  assert_int_equal(ez_graph_ping(f->addr, NULL, 0, TMO), EZ_EREFUSED);
  assert_int_equal(ez_graph_connect(f->addr, "/x", "/y", TMO), EZ_EREFUSED);
  assert_string_equal(ez_strerror(EZ_EREFUSED),
                      "the graph server refused the connection (at its client limit?)");

  rp_wr_cmd(b, CONNECT, "/a", "/b"); /* the clients served still are */
  uint8_t c = 0xff;
  assert_int_equal(rp_rd_exact(b, &c, 1, TMO), 0);
  assert_int_equal(c, COMPLETE);

  /* The server hangs up after a CONNECT: b's slot frees up once it has. */
  rc = EZ_EREFUSED;
  for (int i = 0; i < 500 && rc == EZ_EREFUSED; i++) {
    rc = ez_graph_ping(f->addr, NULL, 0, TMO);
    if (rc == EZ_EREFUSED) th_sleep_ms(10);
  }
  assert_int_equal(rc, 0);
  assert_true(rp_quiet_for(a, 50)); /* a was never disturbed */
  close(a);
  close(b);
}

static void test_no_server(void **state) {
  (void)state;
  char addr[64];
  th_free_address(addr, sizeof addr);
  assert_int_equal(ez_graph_ping(addr, NULL, 0, TMO), EZ_ENOSERVER);
  assert_int_equal(ez_graph_connect(addr, "/a", "/b", TMO), EZ_ENOSERVER);
  ez_graph g;
  assert_int_equal(ez_graph_dag(addr, &g, TMO), EZ_ENOSERVER);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_version_ping, setup, teardown),
      cmocka_unit_test_setup_teardown(test_connect_disconnect_prune, setup, teardown),
      cmocka_unit_test_setup_teardown(test_shutdown_request, setup, teardown),
      cmocka_unit_test_setup_teardown(test_raw_sub_pub_channel, setup, teardown),
      cmocka_unit_test_setup_teardown(test_update_lists_all_publishers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_edge_routing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_profile_empty, setup, teardown),
      cmocka_unit_test_setup_teardown(test_profile_by_context, setup, teardown),
      cmocka_unit_test_setup_teardown(test_profile_partial_answers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sync, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pause_resume, setup, teardown),
      cmocka_unit_test_setup_teardown(test_shm_leases, setup, teardown),
      cmocka_unit_test_setup_teardown(test_shm_api, setup, teardown),
      cmocka_unit_test_setup_teardown(test_client_limit, setup, teardown),
      cmocka_unit_test(test_no_server),
  };
  signal(SIGPIPE, SIG_IGN);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
