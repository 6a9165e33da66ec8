/* Our graph server in the released dialect (ezmsg 3.9.0), driven by fake 3.9 clients speaking its
 * bytes by hand: GraphContext sessions (their own edges, metadata, snapshots, settings), process
 * connections (units, routed requests and their bounds, settings, traces), the event streams, and
 * bad input in each. Payloads are built and read with meta39 (src/proto/meta39.h), and checked
 * against pickles Python 3.9.0 made (tests/corpus/meta39/). docs/protocol39.md describes the bytes.
 */
#include "fake39.h"
#include "harness.h"
#include "proto/meta39.h"
#include "rawproto.h"
#include "vectors.h"
#include "base/wire.h"

#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TMO 5000
#define TRACE_SAMPLES_ 200000 /* the server's buffer per process (src/gs.h: TRACE_SAMPLES) */

/* ---- sessions ------------------------------------------------------------------------------- */

/* A session's edge is its own: another session's ownership keeps it, and it goes with its last
 * owner's session; the snapshot says who owns what, and the persistent CONNECT is an owner too. */
static void test_session_edges(void **state) {
  (void)state;
  char a[64], b[64];
  int s1 = f39_session(a), s2 = f39_session(b);
  assert_int_equal(f39_sess_edge(s1, EZI_SESSION_CONNECT, "/a", "/b"), EZI_COMPLETE);
  assert_int_equal(f39_sess_edge(s2, EZI_SESSION_CONNECT, "/a", "/b"), EZI_COMPLETE);
  assert_int_equal(f39_sess_edge(s1, EZI_SESSION_CONNECT, "/b", "/a"), EZI_CYCLIC);
  assert_int_equal(f39_sess_edge(s1, EZI_SESSION_CONNECT, "/b", "/b"), EZI_CYCLIC);
  assert_int_equal(ez_graph_connect(th_addr, "/b", "/c", TMO), 0); /* persistent */

  ezi_pk_doc *d;
  ezi_m39_graph_snapshot gs;
  f39_snapshot(s1, &d, &gs);
  const ezi_m39_strs *o = f39_owners_of(&gs, "/a", "/b");
  assert_non_null(o);
  assert_int_equal(o->n, 2);
  assert_true(strcmp(a, b) < 0 ? !strcmp(o->v[0], a) && !strcmp(o->v[1], b)
                               : !strcmp(o->v[0], b) && !strcmp(o->v[1], a));
  o = f39_owners_of(&gs, "/b", "/c");
  assert_non_null(o);
  assert_int_equal(o->n, 1);
  assert_string_equal(o->v[0], "persistent");
  assert_int_equal(gs.n_sessions, 2);
  for (size_t i = 0; i < gs.n_sessions; i++) {
    assert_int_equal(gs.sessions[i].n_edges, 1);
    assert_string_equal(gs.sessions[i].edges[0].from_topic, "/a");
    assert_null(gs.sessions[i].metadata);
  }
  size_t ng = gs.n_graph;
  ezi_pk_doc_free(d);
  assert_int_equal(ng, 3);

  close(s1); /* s2 still owns /a -> /b */
  ez_graph g;
  th_sleep_ms(100);
  assert_int_equal(ez_graph_dag(th_addr, &g, TMO), 0);
  assert_int_equal(g.n_nodes, 3);
  ez_graph_free(&g);
  /* SESSION_DISCONNECT removes only this session's ownership; the edge goes with it now. */
  assert_int_equal(f39_sess_edge(s2, EZI_SESSION_DISCONNECT, "/a", "/b"), EZI_COMPLETE);
  assert_int_equal(ez_graph_dag(th_addr, &g, TMO), 0);
  assert_int_equal(g.n_nodes, 2); /* /b -> /c, persistent */
  ez_graph_free(&g);
  assert_int_equal(f39_sess_edge(s2, EZI_SESSION_CONNECT, "/x", "/y"), EZI_COMPLETE);
  close(s2);
  for (int i = 0; i < 100; i++) { /* the session's close removes its edges */
    assert_int_equal(ez_graph_dag(th_addr, &g, TMO), 0);
    size_t n = g.n_nodes;
    ez_graph_free(&g);
    if (n == 2) return;
    th_sleep_ms(20);
  }
  fail_msg("a closed session's edge stayed");
}

/* An edge a session adds reaches a real subscriber downstream before the session's COMPLETE:
 * the session waits for the subscriber's UPDATE answer, as 3.9.0's server does. SESSION_CLEAR
 * takes the edge away again, and a publisher on the upstream topic stops reaching it. */
static void test_session_edge_reaches_subscriber(void **state) {
  (void)state;
  ez_context *ctx;
  assert_int_equal(ez_context_open(th_addr, &ctx), 0);
  ez_sub *sub;
  assert_int_equal(ez_sub_create(ctx, "/down", NULL, &sub), 0);
  ez_pub *pub;
  assert_int_equal(ez_pub_create(ctx, "/up", NULL, &pub), 0);
  char id[64];
  int s = f39_session(id);
  assert_int_equal(f39_sess_edge(s, EZI_SESSION_CONNECT, "/up", "/down"), EZI_COMPLETE);
  assert_int_equal(ez_publish(pub, "hi", 2, TMO), 0); /* the subscriber has its channel now */
  ez_msg m;
  assert_int_equal(ez_recv(sub, &m, TMO), 0);
  assert_int_equal(m.len, 2);
  ez_msg_release(&m);
  rp_wr_u8(s, EZI_SESSION_CLEAR);
  rp_expect_u8(s, EZI_COMPLETE);
  assert_int_equal(ez_publish(pub, "no", 2, TMO), 0);
  assert_int_equal(ez_recv(sub, &m, 300), EZ_ETIMEDOUT);
  close(s);
  ez_context_close(ctx);
}

/* A lone 21 is a SESSION; 21 and its u64 in two writes (Python's profile client) a PROFILE; 21
 * with a shorter request behind it in one write (ours, ezi_sess_open) a SESSION and its request,
 * also when that request comes after the 21 in a write of its own. */
static void test_session_or_profile(void **state) {
  (void)state;
  int fd = f39_open();
  rp_wr_u8(fd, EZI_PROFILE);
  th_sleep_ms(5);
  rp_wr_u64(fd, 500);
  rp_expect_u8(fd, EZI_PROFILE_DATA);
  char json[4096];
  rp_rd_str(fd, json, sizeof json);
  assert_non_null(strstr(json, "\"publishers\""));
  close(fd);
  char id[64];
  close(f39_session(id));
  for (int split = 0; split < 2; split++) {
    fd = f39_open();
    uint8_t both[2] = {EZI_SESSION, EZI_SESSION_CLEAR};
    if (split) {
      rp_wr_u8(fd, both[0]);
      th_sleep_ms(5);
      rp_wr_u8(fd, both[1]);
    } else {
      rp_wr(fd, both, 2);
    }
    rp_rd_str(fd, id, 64);
    assert_true(rp_is_uuid(id));
    rp_expect_u8(fd, EZI_COMPLETE);     /* the session's */
    rp_expect_u8(fd, EZI_COMPLETE);     /* the clear's */
    rp_wr_u8(fd, EZI_SESSION_SNAPSHOT); /* and it is a session */
    size_t n;
    free(f39_rd_pickle(fd, &n));
    rp_expect_u8(fd, EZI_COMPLETE);
    close(fd);
  }
}

/* Metadata: registered (its components' initial settings become the settings, with events),
 * seen in the snapshot, refused to a second session that claims the same component, and gone
 * with its session. The metadata is a real 3.9.0 GraphMetadata (a Collection with a Unit). */
static void test_session_metadata_and_settings(void **state) {
  (void)state;
  size_t n, nmeta;
  uint8_t *meta = tv_load("meta39", "graph_metadata.bin", &nmeta);
  assert_non_null(meta);
  char a[64], b[64];
  int s1 = f39_session(a), s2 = f39_session(b);
  f39_wr_payload(s1, EZI_SESSION_REGISTER, meta, nmeta);
  rp_expect_u8(s1, EZI_COMPLETE);
  f39_wr_payload(s2, EZI_SESSION_REGISTER, meta, nmeta); /* the same component addresses */
  rp_expect_u8(s2, EZI_ERROR);

  ezi_pk_doc *d;
  ezi_m39_graph_snapshot gs;
  f39_snapshot(s2, &d, &gs);
  size_t with_meta = 0;
  for (size_t i = 0; i < gs.n_sessions; i++)
    if (gs.sessions[i].metadata) {
      with_meta++;
      assert_string_equal(gs.session_keys[i], a);
      assert_int_equal(ezi_m39_meta_check(gs.sessions[i].metadata, &n, NULL), 0);
      assert_true(n > 0);
    }
  assert_int_equal(with_meta, 1);
  size_t n_components = n;
  ezi_pk_doc_free(d);

  /* The settings snapshot: one value per component, the initial ones. */
  rp_wr_u8(s2, EZI_SESSION_SETTINGS_SNAPSHOT);
  size_t len;
  uint8_t *pk = f39_rd_pickle(s2, &len);
  rp_expect_u8(s2, EZI_COMPLETE);
  const ezi_pk *root;
  assert_int_equal(ezi_pk_load(pk, len, NULL, &d, &root, NULL), 0);
  const char **keys;
  ezi_m39_settings_value *vals;
  size_t nv;
  assert_int_equal(ezi_m39_parse_dict(d, &EZI_M39_SETTINGS_SNAPSHOT_VALUE, root, &keys,
                                      (void **)&vals, &nv, NULL),
                   0);
  assert_int_equal(nv, n_components);
  for (size_t i = 1; i < nv; i++)
    assert_true(strcmp(keys[i - 1], keys[i]) < 0); /* sorted, as 3.9.0 */
  ezi_pk_doc_free(d);
  free(pk);

  /* The settings events: an INITIAL_SETTINGS per component, from session a. */
  rp_wr_u8(s2, EZI_SESSION_SETTINGS_EVENTS);
  rp_wr_str(s2, "0");
  pk = f39_rd_pickle(s2, &len);
  rp_expect_u8(s2, EZI_COMPLETE);
  assert_int_equal(ezi_pk_load(pk, len, NULL, &d, &root, NULL), 0);
  ezi_m39_settings_event *ev;
  size_t ne;
  assert_int_equal(
      ezi_m39_parse_list(d, &EZI_M39_SETTINGS_CHANGED_EVENT, root, (void **)&ev, &ne, NULL), 0);
  assert_int_equal(ne, n_components);
  for (size_t i = 0; i < ne; i++) {
    assert_int_equal(ev[i].event_type, EZI_M39_INITIAL_SETTINGS);
    assert_string_equal(ev[i].source_session_id, a);
    assert_int_equal(ev[i].seq, (int64_t)i + 1);
  }
  ezi_pk_doc_free(d);
  free(pk);

  close(s1); /* its metadata and settings go with it; s2 may register now */
  for (int i = 0; i < 100; i++) {
    f39_wr_payload(s2, EZI_SESSION_REGISTER, meta, nmeta);
    if (rp_rd_u8(s2) == EZI_COMPLETE) break;
    th_sleep_ms(20);
  }
  f39_snapshot(s2, &d, &gs);
  assert_int_equal(gs.n_sessions, 1);
  assert_non_null(gs.sessions[0].metadata);
  ezi_pk_doc_free(d);
  close(s2);
  free(meta);
}

/* The settings events after `after` (SESSION_SETTINGS_EVENTS on session fd), into *ev (in *d). */
static size_t settings_events(int fd, const char *after, ezi_pk_doc **d,
                              ezi_m39_settings_event **ev) {
  rp_wr_u8(fd, EZI_SESSION_SETTINGS_EVENTS);
  rp_wr_str(fd, after);
  size_t len, n;
  uint8_t *pk = f39_rd_pickle(fd, &len);
  rp_expect_u8(fd, EZI_COMPLETE);
  const ezi_pk *root;
  assert_int_equal(ezi_pk_load(pk, len, NULL, d, &root, NULL), 0);
  free(pk);
  assert_int_equal(
      ezi_m39_parse_list(*d, &EZI_M39_SETTINGS_CHANGED_EVENT, root, (void **)ev, &n, NULL), 0);
  return n;
}

/* The "gain" of a settings value's repr (a dict, as 3.9.0 makes it). */
static double gain_of(const ezi_m39_settings_value *v) {
  assert_int_equal(v->repr_value->type, EZI_PK_DICT);
  const ezi_pk *g = ezi_pk_dict_get(v->repr_value, "gain");
  assert_non_null(g);
  return g->u.f;
}

/* A process's settings update wins over the metadata's initial value and says whose it is; one
 * for a unit the process does not own is refused; when the process leaves, the initial value
 * comes back with an event that names the session and no process. */
static void test_process_settings(void **state) {
  (void)state;
  size_t nmeta, n;
  uint8_t *meta = tv_load("meta39", "graph_metadata.bin", &nmeta);
  uint8_t *upd = tv_load("meta39", "settings_update.bin", &n);
  assert_non_null(meta);
  assert_non_null(upd);
  char sid[64], pid_[64];
  int s = f39_session(sid);
  f39_wr_payload(s, EZI_SESSION_REGISTER, meta, nmeta);
  rp_expect_u8(s, EZI_COMPLETE);
  ezi_pk_doc *d;
  ezi_m39_settings_event *ev;
  size_t first = settings_events(s, "0", &d, &ev); /* the INITIAL_SETTINGS ones */
  double initial = -1;
  for (size_t i = 0; i < first; i++)
    if (!strcmp(ev[i].component_address, "SYS/G")) initial = gain_of(&ev[i].value);
  assert_true(initial == 3.0); /* Gain(GainSettings(gain=3.0)) */
  ezi_pk_doc_free(d);

  const char *units[] = {"SYS/G"};
  int p = f39_process(pid_, units, 1, EZI_COMPLETE);
  ezi_m39_settings_update up;
  ezi_pk_doc *ud;
  assert_int_equal(ezi_m39_load(&EZI_M39_PROCESS_SETTINGS_UPDATE, upd, n, &ud, &up, NULL), 0);
  f39_wr_payload(p, EZI_PROCESS_SETTINGS_UPDATE, upd, n); /* SYS/U1: not its unit */
  rp_expect_u8(p, EZI_ERROR);
  up.component_address = "SYS/G";
  uint8_t *pk;
  size_t len;
  assert_int_equal(ezi_m39_dump(&EZI_M39_PROCESS_SETTINGS_UPDATE, &up, &pk, &len, NULL), 0);
  ezi_pk_doc_free(ud);
  f39_wr_payload(p, EZI_PROCESS_SETTINGS_UPDATE, pk, len);
  rp_expect_u8(p, EZI_COMPLETE);
  free(pk);

  char after[32];
  snprintf(after, sizeof after, "%zu", first);
  assert_int_equal(settings_events(s, after, &d, &ev), 1);
  assert_int_equal(ev[0].event_type, EZI_M39_SETTINGS_UPDATED);
  assert_string_equal(ev[0].component_address, "SYS/G");
  assert_string_equal(ev[0].source_session_id, sid); /* the metadata's session */
  assert_string_equal(ev[0].source_process_id.s, pid_);
  assert_true(gain_of(&ev[0].value) == 2.0); /* the process's value */
  ezi_pk_doc_free(d);

  close(p); /* the metadata's value comes back */
  snprintf(after, sizeof after, "%zu", first + 1);
  size_t k = 0;
  for (int i = 0; i < 500 && !k; i++) {
    k = settings_events(s, after, &d, &ev);
    if (!k) {
      ezi_pk_doc_free(d);
      th_sleep_ms(10);
    }
  }
  assert_int_equal(k, 1);
  assert_int_equal(ev[0].event_type, EZI_M39_SETTINGS_UPDATED);
  assert_string_equal(ev[0].source_session_id, sid);
  assert_false(ev[0].source_process_id.has);
  assert_true(gain_of(&ev[0].value) == initial);
  ezi_pk_doc_free(d);
  close(s);
  free(meta);
  free(upd);
}

/* ---- processes and routed requests ---------------------------------------------------------- */

/* A session's request reaches the process owning the unit as Python's server sends it, and the
 * process's answer comes back to the session byte for byte. A unit nobody owns is answered
 * UNROUTABLE_UNIT by the server; a unit another process owns cannot be registered. */
static void test_route_request(void **state) {
  (void)state;
  const char *units[] = {"SYS/UNIT_B", "SYS/UNIT_A"};
  char pid_[64], sid[64];
  int p = f39_process(pid_, units, 2, EZI_COMPLETE);
  const char *clash[] = {"SYS/UNIT_A", "SYS/OTHER"};
  char pid2[64];
  int p2 = f39_process(pid2, clash, 2, EZI_ERROR);
  int s = f39_session(sid);

  f39_route(s, "SYS/UNIT_A", "PING", "2.0", "\x80\x04N.", 4);
  rp_expect_u8(p, EZI_PROCESS_ROUTE_REQUEST);
  size_t n;
  uint8_t *b = f39_rd_pickle(p, &n);
  ezi_pk_doc *d;
  ezi_m39_control_request req;
  assert_int_equal(ezi_m39_load(&EZI_M39_PROCESS_CONTROL_REQUEST, b, n, &d, &req, NULL), 0);
  assert_true(rp_is_uuid(req.request_id));
  assert_string_equal(req.unit_address, "SYS/UNIT_A");
  assert_string_equal(req.operation, "PING");
  assert_true(req.payload.has);
  assert_memory_equal(req.payload.p, "\x80\x04N.", 4);
  free(b);
  ezi_m39_control_response resp = {.request_id = req.request_id,
                                   .ok = true,
                                   .payload = {.has = true, .p = (const uint8_t *)"pong", .len = 4},
                                   .error_code = EZI_M39_NONE};
  resp.process_id.has = true;
  memcpy(resp.process_id.s, pid_, 37);
  uint8_t *pk;
  size_t len;
  assert_int_equal(ezi_m39_dump(&EZI_M39_PROCESS_CONTROL_RESPONSE, &resp, &pk, &len, NULL), 0);
  ezi_pk_doc_free(d);
  f39_wr_payload(p, EZI_PROCESS_ROUTE_RESPONSE, pk, len);
  b = f39_rd_pickle(s, &n);
  rp_expect_u8(s, EZI_COMPLETE);
  assert_int_equal(n, len);
  assert_memory_equal(b, pk, n); /* forwarded as the process wrote it */
  free(b);
  free(pk);

  f39_route(s, "SYS/NOBODY", "PING", "2.0", NULL, 0);
  ezi_m39_control_response r;
  f39_rd_answer(s, &EZI_M39_PROCESS_CONTROL_RESPONSE, &d, &r);
  assert_false(r.ok);
  assert_int_equal(r.error_code, EZI_M39_ERR_UNROUTABLE_UNIT);
  ezi_pk_doc_free(d);

  /* The snapshot lists the process with its registration; the refused one without. */
  ezi_m39_graph_snapshot gs;
  f39_snapshot(s, &d, &gs);
  assert_int_equal(gs.n_processes, 2);
  for (size_t i = 0; i < gs.n_processes; i++) {
    const ezi_m39_snapshot_process *x = &gs.processes[i];
    if (!strcmp(x->process_id.s, pid_)) {
      assert_true(x->pid.has);
      assert_int_equal(x->pid.v, 4242);
      assert_string_equal(x->host, "testhost");
      assert_int_equal(x->units.n, 2);
      assert_string_equal(x->units.v[0], "SYS/UNIT_A"); /* sorted */
    } else {
      assert_string_equal(x->process_id.s, pid2);
      assert_false(x->pid.has);
      assert_null(x->host);
    }
  }
  ezi_pk_doc_free(d);
  close(s);
  close(p2);
  close(p);
}

/* Our server answers its own unit (EZI_GS_SERVER_UNIT): the profile targets are the first units
 * of the processes that are not ezmsg-c's; another operation is UNSUPPORTED_OPERATION. */
static void test_server_unit(void **state) {
  (void)state;
  const char *py[] = {"SYS/PY_B", "SYS/PY_A"}, *ours[] = {EZI_PROC_UNIT_PREFIX "host/1"};
  char pid1[64], pid2[64], sid[64];
  int p1 = f39_process(pid1, py, 2, EZI_COMPLETE);
  int p2 = f39_process(pid2, ours, 1, EZI_COMPLETE);
  int s = f39_session(sid);
  ezi_pk_doc *d;
  ezi_m39_control_response r;
  f39_route(s, EZI_GS_SERVER_UNIT, EZI_GS_OP_PROFILE_TARGETS, "1.0", NULL, 0);
  f39_rd_answer(s, &EZI_M39_PROCESS_CONTROL_RESPONSE, &d, &r);
  assert_true(r.ok);
  assert_true(r.payload.has);
  json_t *doc = json_loadb((const char *)r.payload.p, r.payload.len, 0, NULL);
  json_t *f = json_object_get(doc, "foreign");
  assert_int_equal(json_array_size(f), 1);
  assert_string_equal(json_string_value(json_array_get(f, 0)), "SYS/PY_A"); /* (sorted: first) */
  json_decref(doc);
  ezi_pk_doc_free(d);
  f39_route(s, EZI_GS_SERVER_UNIT, "SOMETHING_ELSE", "1.0", NULL, 0);
  f39_rd_answer(s, &EZI_M39_PROCESS_CONTROL_RESPONSE, &d, &r);
  assert_false(r.ok);
  assert_int_equal(r.error_code, EZI_M39_ERR_UNSUPPORTED_OPERATION);
  ezi_pk_doc_free(d);
  close(s);
  close(p2);
  close(p1);
}

/* A process that never answers costs the session its timeout (TIMEOUT), one that leaves
 * mid-request PROCESS_DISCONNECTED, and an answer from the wrong process INVALID_RESPONSE; the
 * session goes on with its next request each time. */
static void test_route_bounds(void **state) {
  (void)state;
  const char *u1[] = {"SYS/SILENT"}, *u2[] = {"SYS/LEAVER"}, *u3[] = {"SYS/OTHER"};
  char p1id[64], p2id[64], p3id[64], sid[64];
  int p1 = f39_process(p1id, u1, 1, EZI_COMPLETE);
  int p2 = f39_process(p2id, u2, 1, EZI_COMPLETE);
  int p3 = f39_process(p3id, u3, 1, EZI_COMPLETE);
  int s = f39_session(sid);
  ezi_pk_doc *d;
  ezi_m39_control_response r;

  int64_t t0 = th_now_ms();
  f39_route(s, "SYS/SILENT", "GET_PROFILING_SNAPSHOT", "0.3", NULL, 0);
  f39_rd_answer(s, &EZI_M39_PROCESS_CONTROL_RESPONSE, &d, &r);
  assert_int_equal(r.error_code, EZI_M39_ERR_TIMEOUT);
  assert_true(th_now_ms() - t0 >= 250);
  assert_string_equal(r.process_id.s, p1id);
  ezi_pk_doc_free(d);
  rp_expect_u8(p1, EZI_PROCESS_ROUTE_REQUEST); /* it did get the request */
  free(f39_rd_pickle(p1, &(size_t){0}));

  f39_route(s, "SYS/LEAVER", "PING", "30", NULL, 0);
  rp_expect_u8(p2, EZI_PROCESS_ROUTE_REQUEST);
  size_t n;
  uint8_t *b = f39_rd_pickle(p2, &n);
  close(p2);
  f39_rd_answer(s, &EZI_M39_PROCESS_CONTROL_RESPONSE, &d, &r);
  assert_int_equal(r.error_code, EZI_M39_ERR_PROCESS_DISCONNECTED);
  ezi_pk_doc_free(d);

  /* p3 answers the request that went to p1. */
  f39_route(s, "SYS/SILENT", "PING", "30", NULL, 0);
  rp_expect_u8(p1, EZI_PROCESS_ROUTE_REQUEST);
  free(b);
  b = f39_rd_pickle(p1, &n);
  ezi_m39_control_request req;
  assert_int_equal(ezi_m39_load(&EZI_M39_PROCESS_CONTROL_REQUEST, b, n, &d, &req, NULL), 0);
  ezi_m39_control_response wrong = {
      .request_id = req.request_id, .ok = true, .error_code = EZI_M39_NONE};
  uint8_t *pk;
  size_t len;
  assert_int_equal(ezi_m39_dump(&EZI_M39_PROCESS_CONTROL_RESPONSE, &wrong, &pk, &len, NULL), 0);
  ezi_pk_doc_free(d);
  f39_wr_payload(p3, EZI_PROCESS_ROUTE_RESPONSE, pk, len);
  free(pk);
  f39_rd_answer(s, &EZI_M39_PROCESS_CONTROL_RESPONSE, &d, &r);
  assert_int_equal(r.error_code, EZI_M39_ERR_INVALID_RESPONSE);
  ezi_pk_doc_free(d);
  free(b);
  close(s);
  close(p1);
  close(p3);
}

/* ---- streams -------------------------------------------------------------------------------- */

static int stream(uint8_t cmd, const char *after) {
  int fd = f39_open();
  rp_wr_u8(fd, cmd);
  rp_wr_str(fd, after);
  char id[64];
  rp_rd_str(fd, id, sizeof id);
  assert_true(rp_is_uuid(id));
  rp_expect_u8(fd, EZI_COMPLETE);
  return fd;
}

/* Topology events reach a subscriber as they happen (a session's edge, a process), and a later
 * subscriber gets the history after its after_seq. */
static void test_topology_stream(void **state) {
  (void)state;
  int t = stream(EZI_SESSION_TOPOLOGY_SUBSCRIBE, "0");
  char sid[64], pid_[64];
  int s = f39_session(sid);
  assert_int_equal(f39_sess_edge(s, EZI_SESSION_CONNECT, "/t1", "/t2"), EZI_COMPLETE);
  size_t n;
  uint8_t *b = f39_rd_pickle(t, &n);
  ezi_pk_doc *d;
  ezi_m39_topology_event ev;
  assert_int_equal(ezi_m39_load(&EZI_M39_TOPOLOGY_CHANGED_EVENT, b, n, &d, &ev, NULL), 0);
  assert_int_equal(ev.event_type, EZI_M39_GRAPH_CHANGED);
  assert_int_equal(ev.changed_topics.n, 1);
  assert_string_equal(ev.changed_topics.v[0], "/t2");
  assert_string_equal(ev.source_session_id, sid);
  int64_t first = ev.seq;
  ezi_pk_doc_free(d);
  free(b);
  const char *units[] = {"SYS/T"};
  int p = f39_process(pid_, units, 1, EZI_COMPLETE);
  b = f39_rd_pickle(t, &n);
  assert_int_equal(ezi_m39_load(&EZI_M39_TOPOLOGY_CHANGED_EVENT, b, n, &d, &ev, NULL), 0);
  assert_int_equal(ev.event_type, EZI_M39_PROCESS_CHANGED);
  assert_string_equal(ev.source_process_id.s, pid_);
  assert_int_equal(ev.seq, first + 1);
  ezi_pk_doc_free(d);
  free(b);
  char after[32];
  snprintf(after, sizeof after, "%lld", (long long)first);
  int t2 = stream(EZI_SESSION_TOPOLOGY_SUBSCRIBE, after); /* only the process event */
  b = f39_rd_pickle(t2, &n);
  assert_int_equal(ezi_m39_load(&EZI_M39_TOPOLOGY_CHANGED_EVENT, b, n, &d, &ev, NULL), 0);
  assert_int_equal(ev.seq, first + 1);
  ezi_pk_doc_free(d);
  free(b);
  assert_true(rp_quiet_for(t2, 100));
  close(t2);
  close(t);
  close(p);
  close(s);
}

/* A profiling stream (SESSION_PROFILING_SUBSCRIBE) with this interval and max_samples: its fd. */
static int trace_stream(double interval, int64_t max_samples) {
  ezi_m39_stream_control ctl = {.interval = interval, .max_samples = max_samples};
  uint8_t *pk;
  size_t len;
  assert_int_equal(ezi_m39_dump(&EZI_M39_PROFILING_STREAM_CONTROL, &ctl, &pk, &len, NULL), 0);
  int st = f39_open();
  f39_wr_payload(st, EZI_SESSION_PROFILING_SUBSCRIBE, pk, len);
  free(pk);
  char id[64];
  rp_rd_str(st, id, sizeof id);
  rp_expect_u8(st, EZI_COMPLETE);
  return st;
}

/* Trace samples a process pushes reach a profiling stream, each once, in order. The batch is
 * one Python 3.9.0 made. */
static void test_profiling_stream(void **state) {
  (void)state;
  size_t n;
  uint8_t *batch = tv_load("meta39", "trace_batch.bin", &n);
  assert_non_null(batch);
  ezi_pk_doc *d;
  ezi_m39_trace_batch tb;
  assert_int_equal(ezi_m39_load(&EZI_M39_PROCESS_PROFILING_TRACE_BATCH, batch, n, &d, &tb, NULL),
                   0);
  size_t want = tb.n_samples;
  assert_true(want > 0);
  char metric0[64];
  snprintf(metric0, sizeof metric0, "%s", tb.samples[0].metric);
  ezi_pk_doc_free(d);

  int st = trace_stream(0.02, 1000);
  size_t len;
  const char *units[] = {"SYS/TRACER"};
  char pid_[64];
  int p = f39_process(pid_, units, 1, EZI_COMPLETE);
  f39_wr_payload(p, EZI_PROCESS_PROFILING_TRACE_UPDATE, batch, n);
  size_t got = 0;
  while (got < want) {
    uint8_t *b = f39_rd_pickle(st, &len);
    ezi_m39_trace_stream_batch sb;
    assert_int_equal(ezi_m39_load(&EZI_M39_PROFILING_TRACE_STREAM_BATCH, b, len, &d, &sb, NULL), 0);
    assert_int_equal(sb.n_batches, 1);
    assert_string_equal(sb.batch_keys[0].s, pid_);
    assert_int_equal(sb.batches[0].pid, 4242);
    if (!got) assert_string_equal(sb.batches[0].samples[0].metric, metric0);
    got += sb.batches[0].n_samples;
    ezi_pk_doc_free(d);
    free(b);
  }
  assert_int_equal(got, want);
  assert_true(rp_quiet_for(st, 100)); /* nothing twice */
  close(st);
  close(p);
  free(batch);
}

/* A trace batch of n samples numbered from seq (sample_seq), pickled. */
static uint8_t *trace_batch(const char *pid_, int64_t seq, size_t n, size_t *len) {
  ezi_m39_trace_sample *v = calloc(n, sizeof *v);
  assert_non_null(v);
  for (size_t i = 0; i < n; i++)
    v[i] = (ezi_m39_trace_sample){.timestamp = 1.0,
                                  .endpoint_id = "/slow:p",
                                  .topic = "/slow",
                                  .metric = "publish_delta_ns",
                                  .value = 1000,
                                  .channel_kind = EZI_M39_NONE,
                                  .sample_seq = {true, seq + (int64_t)i}};
  ezi_m39_trace_batch b = {
      .pid = 4242, .host = "h", .timestamp = 1.0, .samples = v, .n_samples = n};
  b.process_id.has = true;
  assert_int_equal(strlen(pid_), sizeof b.process_id.s - 1); /* a UUID's 36 characters */
  memcpy(b.process_id.s, pid_, sizeof b.process_id.s);
  uint8_t *pk = NULL;
  assert_int_equal(ezi_m39_dump(&EZI_M39_PROCESS_PROFILING_TRACE_BATCH, &b, &pk, len, NULL), 0);
  free(v);
  return pk;
}

/* A stream batch's samples of one process: the first and last sample_seq, how many, and what
 * the server said this reader lost before them (EZI_M39_DROPPED_ATTR). */
static size_t read_stream_batch(int st, int64_t *first, int64_t *last, int64_t *lost) {
  size_t len;
  uint8_t *b = f39_rd_pickle(st, &len);
  ezi_pk_doc *d = NULL;
  const ezi_pk *root = NULL;
  assert_int_equal(ezi_pk_load(b, len, NULL, &d, &root, NULL), 0);
  ezi_m39_trace_stream_batch sb;
  assert_int_equal(ezi_m39_parse(d, &EZI_M39_PROFILING_TRACE_STREAM_BATCH, root, &sb, NULL), 0);
  *lost = 0;
  const ezi_pk *l = ezi_pk_dict_get(root->u.o.state, EZI_M39_DROPPED_ATTR);
  if (l) assert_int_equal(ezi_pk_int_of(l, lost), 0);
  assert_int_equal(sb.n_batches, 1);
  size_t n = sb.batches[0].n_samples;
  if (n) {
    *first = sb.batches[0].samples[0].sample_seq.v;
    *last = sb.batches[0].samples[n - 1].sample_seq.v;
  }
  ezi_pk_doc_free(d);
  free(b);
  return n;
}

/* A reader slower than the samples: the server keeps a bounded buffer per process (the oldest go
 * first), and tells the reader how many it lost, so that what it got and what it lost add up. */
static void test_profiling_stream_slow_reader(void **state) {
  (void)state;
  int st = trace_stream(0.05, 100); /* 100 samples every 50 ms at most: far slower than the flood */
  uint8_t *pk;
  size_t len;
  char pid_[64];
  const char *units[] = {"SYS/SLOW"};
  int p = f39_process(pid_, units, 1, EZI_COMPLETE);
  /* the reader's first batch: 10 samples, nothing lost */
  pk = trace_batch(pid_, 1, 10, &len);
  f39_wr_payload(p, EZI_PROCESS_PROFILING_TRACE_UPDATE, pk, len);
  free(pk);
  int64_t first = 0, last = 0, lost = 0;
  assert_int_equal(read_stream_batch(st, &first, &last, &lost), 10);
  assert_int_equal(first, 1);
  assert_int_equal(last, 10);
  assert_int_equal(lost, 0);
  /* then TRACE_SAMPLES + 100 000 at once: more than the buffer holds */
  const size_t per = 1000, total = TRACE_SAMPLES_ + 100000;
  for (size_t k = 0; k < total / per; k++) {
    pk = trace_batch(pid_, 11 + (int64_t)(k * per), per, &len);
    f39_wr_payload(p, EZI_PROCESS_PROFILING_TRACE_UPDATE, pk, len);
    free(pk);
  }
  /* read on until a batch says samples were lost, and a few more: each batch follows the
   * previous one, or says by how many it does not */
  int64_t prev = last, got = 10, lost_all = 0;
  for (int after_loss = 0; after_loss < 5;) {
    size_t n = read_stream_batch(st, &first, &last, &lost);
    assert_true(n > 0);
    assert_int_equal(first, prev + lost + 1);
    got += (int64_t)n;
    lost_all += lost;
    prev = last;
    after_loss += lost_all > 0;
  }
  assert_true(lost_all > 0);
  assert_int_equal(got + lost_all, last); /* every sample up to the last one: got, or counted */
  print_message("slow reader: got %lld samples, was told %lld were lost\n", (long long)got,
                (long long)lost_all);
  close(st);
  close(p);
}

/* ---- bad input ------------------------------------------------------------------------------ */

/* The connection is closed (after any answer it gets), and the server serves others. */
static void closed(int fd) {
  assert_true(rp_hung_up(fd, TMO));
  close(fd);
  char id[64];
  close(f39_session(id));
}

static void test_bad_session_input(void **state) {
  (void)state;
  char id[64];
  int s = f39_session(id);
  f39_wr_payload(s, EZI_SESSION_REGISTER, (const uint8_t *)"\x80\x04\x95garbage", 10);
  rp_expect_u8(s, EZI_ERROR);
  closed(s);
  s = f39_session(id); /* a pickle of another class */
  size_t n;
  uint8_t *ping = tv_load("meta39", "ping.bin", &n);
  assert_non_null(ping);
  f39_wr_payload(s, EZI_SESSION_REGISTER, ping, n);
  free(ping);
  rp_expect_u8(s, EZI_ERROR);
  closed(s);
  s = f39_session(id); /* lists nested past the decoder's depth: MARK x 2000, then LIST x 2000 */
  uint8_t deep[2 + 4000 + 1];
  deep[0] = 0x80;
  deep[1] = 4;
  memset(deep + 2, '(', 2000);
  memset(deep + 2002, 'l', 2000);
  deep[4002] = '.';
  f39_wr_payload(s, EZI_SESSION_REGISTER, deep, sizeof deep);
  rp_expect_u8(s, EZI_ERROR);
  closed(s);
  s = f39_session(id); /* a payload past its limit: refused before it arrives */
  rp_wr_u8(s, EZI_SESSION_REGISTER);
  rp_wr_u64(s, (uint64_t)1 << 40);
  closed(s);
  s = f39_session(id);
  rp_wr_u8(s, 0x7f); /* an unknown command */
  closed(s);
  s = f39_session(id);
  rp_wr_u8(s, EZI_SESSION_SETTINGS_EVENTS);
  rp_wr_str(s, "twelve");
  closed(s);
  s = f39_session(id);
  f39_route(s, "SYS/U", "PING", "soon", NULL, 0);
  closed(s);
}

static void test_bad_process_input(void **state) {
  (void)state;
  const char *units[] = {"SYS/BAD"};
  char id[64];
  int p = f39_process(id, units, 1, EZI_COMPLETE);
  size_t n;
  uint8_t *ping = tv_load("meta39", "ping.bin", &n);
  assert_non_null(ping);
  f39_wr_payload(p, EZI_PROCESS_UPDATE_OWNERSHIP, ping, n); /* not a ProcessOwnershipUpdate */
  rp_expect_u8(p, EZI_ERROR);
  closed(p);
  p = f39_process(id, units, 1, EZI_COMPLETE);                    /* the unit is free again */
  f39_wr_payload(p, EZI_PROCESS_PROFILING_TRACE_UPDATE, ping, n); /* no answer, closed */
  closed(p);
  p = f39_process(id, units, 1, EZI_COMPLETE);
  f39_wr_payload(p, EZI_PROCESS_ROUTE_RESPONSE, (const uint8_t *)"\x80\x04K\x01.", 5); /* an int */
  closed(p);
  free(ping);
  /* A ProfilingStreamControl past its 64 KiB limit. */
  int st = f39_open();
  rp_wr_u8(st, EZI_SESSION_PROFILING_SUBSCRIBE);
  rp_wr_u64(st, 1 << 20);
  closed(st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_session_edges, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_session_edge_reaches_subscriber, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_session_or_profile, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_session_metadata_and_settings, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_process_settings, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_route_request, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_route_bounds, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_server_unit, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_topology_stream, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_profiling_stream, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_profiling_stream_slow_reader, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_bad_session_input, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_bad_process_input, th_setup, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
