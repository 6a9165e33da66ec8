/* Unit tests of the ezmsg 3.9.0 dataclasses (src/meta39*.c): every vector of
 * tests/corpus/meta39/ (Python's pickle.dumps of reference objects, see its README.md) parses
 * to the fields it was made with, and every struct built and decoded again is the same struct. */
#include "harness.h"

#include "proto/meta39.h"
#include "vectors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define U1 "12345678-1234-5678-1234-567812345678"
#define U2 "a95b0ce0-ee13-11f1-86b5-02fc00000001"
#define U3 "00000000-0000-0000-0000-000000000005"
#define TS 1764650000.25

static uint8_t *must_load(const char *name, size_t *len) {
  uint8_t *b = tv_load("meta39", name, len);
  if (!b) fail_msg("cannot open tests/corpus/meta39/%s", name);
  return b;
}

/* The canonical bytes of a struct: what we write for it. */
static uint8_t *dump(const ezi_m39_class *c, const void *s, size_t *n) {
  uint8_t *b;
  ezi_pk_err err;
  int rc = ezi_m39_dump(c, s, &b, n, &err);
  if (rc) fail_msg("dump of %s failed: %d %s", c->name, rc, err.msg);
  return b;
}

/* x -> bytes -> struct y: y writes the same bytes as x (so decode(build(x)) == x). */
static void assert_rebuild(const ezi_m39_class *c, const void *x) {
  size_t n, n2;
  uint8_t *b = dump(c, x, &n);
  void *y = malloc(c->size);
  ezi_pk_doc *d;
  ezi_pk_err err;
  int rc = ezi_m39_load(c, b, n, &d, y, &err);
  if (rc) fail_msg("reload of %s failed: %d %s", c->name, rc, err.msg);
  uint8_t *b2 = dump(c, y, &n2);
  assert_int_equal(n, n2);
  assert_memory_equal(b, b2, n);
  free(b2);
  ezi_pk_doc_free(d);
  free(y);
  free(b);
}

/* Loads a vector into *out (struct of class c); *doc to free. Also checks its rebuild. */
static void load_vec(const char *name, const ezi_m39_class *c, void *out, ezi_pk_doc **doc) {
  size_t n = 0;
  uint8_t *b = must_load(name, &n);
  ezi_pk_err err;
  int rc = ezi_m39_load(c, b, n, doc, out, &err);
  if (rc) fail_msg("%s: %d %s", name, rc, err.msg);
  free(b); /* the struct lives in *doc alone */
  assert_rebuild(c, out);
}

static void test_process(void **state) {
  ezi_pk_doc *d;
  ezi_m39_process_registration reg;
  load_vec("process_registration.bin", &EZI_M39_PROCESS_REGISTRATION, &reg, &d);
  assert_int_equal(reg.pid, 4242);
  assert_string_equal(reg.host, "host-a");
  assert_int_equal(reg.units.n, 2);
  assert_string_equal(reg.units.v[1], "SYS/U2");
  ezi_pk_doc_free(d);
  ezi_m39_ownership_update own;
  load_vec("ownership_update.bin", &EZI_M39_PROCESS_OWNERSHIP_UPDATE, &own, &d);
  assert_true(own.added_units.n == 1 && own.removed_units.n == 0 && own.removed_units.has);
  assert_string_equal(own.added_units.v[0], "SYS/U3");
  ezi_pk_doc_free(d);
  ezi_m39_control_request rq;
  load_vec("control_request_enum.bin", &EZI_M39_PROCESS_CONTROL_REQUEST, &rq, &d);
  assert_string_equal(rq.request_id, "r-1");
  assert_string_equal(rq.unit_address, "SYS/U1");
  assert_true(rq.operation_is_enum && !rq.payload.has);
  assert_string_equal(rq.operation, "GET_PROCESS_STATS");
  ezi_pk_doc_free(d);
  load_vec("control_request_str.bin", &EZI_M39_PROCESS_CONTROL_REQUEST, &rq, &d);
  assert_false(rq.operation_is_enum);
  assert_string_equal(rq.operation, "PING");
  assert_true(rq.payload.has && rq.payload.len == 2 && rq.payload.p[1] == 2);
  ezi_pk_doc_free(d);
  ezi_m39_control_response rs;
  load_vec("control_response_ok.bin", &EZI_M39_PROCESS_CONTROL_RESPONSE, &rs, &d);
  assert_true(rs.ok && rs.payload.has && !rs.error && rs.error_code == EZI_M39_NONE);
  assert_true(rs.process_id.has);
  assert_string_equal(rs.process_id.s, U2);
  ezi_m39_ping ping; /* the payload is a pickled ProcessPing */
  ezi_pk_doc *d2;
  ezi_pk_err err;
  assert_int_equal(
      ezi_m39_load(&EZI_M39_PROCESS_PING, rs.payload.p, rs.payload.len, &d2, &ping, &err), 0);
  assert_string_equal(ping.process_id.s, U1);
  assert_true(ping.pid == 7 && ping.timestamp == TS);
  ezi_pk_doc_free(d2);
  ezi_pk_doc_free(d);
  load_vec("control_response_err.bin", &EZI_M39_PROCESS_CONTROL_RESPONSE, &rs, &d);
  assert_true(!rs.ok && !rs.payload.has && !rs.process_id.has);
  assert_int_equal(rs.error_code, EZI_M39_ERR_UNROUTABLE_UNIT);
  assert_string_equal(rs.error, "no route");
  ezi_pk_doc_free(d);
  load_vec("ping.bin", &EZI_M39_PROCESS_PING, &ping, &d);
  assert_string_equal(ping.process_id.s, U2); /* its state has is_safe */
  assert_string_equal(ping.host, "host-b");
  assert_int_equal(ping.pid, 99);
  ezi_pk_doc_free(d);
  ezi_m39_stats st;
  load_vec("stats.bin", &EZI_M39_PROCESS_STATS, &st, &d);
  assert_string_equal(st.process_id.s, U3); /* a small int in its state */
  assert_true(st.owned_units.n == 2 && st.timestamp == TS);
  ezi_pk_doc_free(d);
}

static void test_settings(void **state) {
  ezi_pk_doc *d;
  ezi_m39_settings_update up;
  load_vec("settings_update.bin", &EZI_M39_PROCESS_SETTINGS_UPDATE, &up, &d);
  assert_string_equal(up.component_address, "SYS/U1");
  ezi_m39_settings_value sv;
  ezi_pk_err err;
  assert_int_equal(ezi_m39_parse(d, &EZI_M39_SETTINGS_SNAPSHOT_VALUE, up.value, &sv, &err), 0);
  assert_true(sv.serialized.has && sv.serialized.len == 4);
  assert_int_equal(sv.repr_value->type, EZI_PK_DICT);
  assert_true(ezi_pk_dict_get(sv.repr_value, "gain")->u.f == 2.0);
  assert_non_null(sv.structured_value);
  assert_null(sv.settings_schema);
  ezi_m39_settings_event ev = {.seq = 9,
                               .event_type = EZI_M39_SETTINGS_UPDATED,
                               .component_address = up.component_address,
                               .timestamp = up.timestamp,
                               .source_process_id = {true, U1},
                               .value = sv}; /* the server re-emits an update as an event */
  assert_rebuild(&EZI_M39_SETTINGS_CHANGED_EVENT, &ev);
  ezi_pk_doc_free(d);
  load_vec("settings_event.bin", &EZI_M39_SETTINGS_CHANGED_EVENT, &ev, &d);
  assert_true(ev.seq == 3 && ev.event_type == EZI_M39_SETTINGS_UPDATED && ev.timestamp == TS);
  assert_string_equal(ev.source_session_id, U1);
  assert_string_equal(ev.source_process_id.s, U2);
  assert_string_equal(ezi_pk_str_of(ezi_pk_dict_get(ev.value.repr_value, "name"), NULL), "g");
  ezi_pk_doc_free(d);
  /* the settings events answer: a list of events */
  size_t n = 0;
  uint8_t *b = must_load("settings_events_list.bin", &n);
  const ezi_pk *root;
  assert_int_equal(ezi_pk_load(b, n, NULL, &d, &root, &err), 0);
  ezi_m39_settings_event *evs;
  size_t k;
  assert_int_equal(
      ezi_m39_parse_list(d, &EZI_M39_SETTINGS_CHANGED_EVENT, root, (void **)&evs, &k, &err), 0);
  assert_int_equal(k, 3);
  assert_true(evs[2].seq == 2 && evs[2].event_type == EZI_M39_INITIAL_SETTINGS);
  assert_null(evs[2].source_session_id);
  assert_false(evs[2].source_process_id.has);
  assert_string_equal(ezi_pk_str_of(evs[1].value.repr_value, NULL), "repr");
  ezi_pk_doc *d2 = ezi_pk_doc_new();
  ezi_pk *l;
  assert_int_equal(ezi_m39_build_list(d2, &EZI_M39_SETTINGS_CHANGED_EVENT, evs, k, &l, &err), 0);
  ezi_pk_doc_free(d); /* d2 keeps d's repr values alive */
  free(b);
  uint8_t *o;
  size_t on;
  assert_int_equal(ezi_pk_dump(l, 0, NULL, &o, &on, &err), 0);
  assert_int_equal(ezi_pk_load(o, on, NULL, &d, &root, &err), 0);
  assert_true(ezi_pk_equal(root, l));
  free(o);
  ezi_pk_doc_free(d);
  ezi_pk_doc_free(d2);
  /* the settings snapshot answer: dict[str, SettingsSnapshotValue] */
  d = ezi_pk_doc_new();
  ezi_m39_settings_value vals[2] = {{.repr_value = ezi_pk_cstr(d, "a")},
                                    {.serialized = {true, (const uint8_t *)"xy", 2},
                                     .repr_value = ezi_pk_container(d, EZI_PK_DICT)}};
  const char *keys[] = {"SYS/A", "SYS/B"};
  ezi_pk *dict;
  assert_int_equal(
      ezi_m39_build_dict(d, &EZI_M39_SETTINGS_SNAPSHOT_VALUE, keys, vals, 2, &dict, &err), 0);
  const char **k2;
  ezi_m39_settings_value *v2;
  assert_int_equal(
      ezi_m39_parse_dict(d, &EZI_M39_SETTINGS_SNAPSHOT_VALUE, dict, &k2, (void **)&v2, &n, &err),
      0);
  assert_int_equal(n, 2);
  assert_string_equal(k2[1], "SYS/B");
  assert_true(v2[1].serialized.len == 2 && v2[1].repr_value->type == EZI_PK_DICT);
  ezi_pk_doc_free(d);
}

static void test_topology(void **state) {
  ezi_pk_doc *d;
  ezi_m39_topology_event te;
  load_vec("topology_event.bin", &EZI_M39_TOPOLOGY_CHANGED_EVENT, &te, &d);
  assert_true(te.seq == 5 && te.event_type == EZI_M39_GRAPH_CHANGED && te.changed_topics.n == 2);
  assert_string_equal(te.changed_topics.v[1], "/b");
  assert_string_equal(te.source_session_id, U1);
  assert_false(te.source_process_id.has);
  ezi_pk_doc_free(d);
  ezi_m39_edge e;
  size_t n = 0;
  uint8_t *b = must_load("edge.bin", &n);
  (void)e;
  free(b);
}

/* The snapshot a real 3.9.0 graph server sent: one session with metadata, a process. */
static void test_graph_snapshot(void **state) {
  ezi_pk_doc *d;
  ezi_m39_graph_snapshot gs;
  load_vec("graph_snapshot.bin", &EZI_M39_GRAPH_SNAPSHOT, &gs, &d);
  assert_int_equal(gs.n_graph, 6);
  assert_string_equal(gs.graph_keys[0], "/persist/a");
  assert_true(gs.graph_values[0].n == 1 && gs.graph_values[1].n == 0);
  assert_string_equal(gs.graph_values[0].v[0], "/persist/b");
  assert_int_equal(gs.n_edge_owners, 3);
  assert_string_equal(gs.edge_owner_keys[0].from_topic, "/persist/a");
  assert_int_equal(gs.edge_owners[0].n, 2);
  assert_string_equal(gs.edge_owners[0].v[0], "persistent");
  assert_int_equal(gs.n_sessions, 1);
  const char *sid = gs.session_keys[0];
  assert_string_equal(gs.edge_owners[0].v[1], sid);
  assert_int_equal(gs.sessions[0].n_edges, 3);
  assert_string_equal(gs.sessions[0].edges[2].to_topic, "SYS/G/INPUT");
  assert_int_equal(gs.n_processes, 1);
  assert_string_equal(gs.process_keys[0].s, gs.processes[0].process_id.s);
  assert_true(gs.processes[0].pid.has && gs.processes[0].host);
  assert_int_equal(gs.processes[0].units.n, 1);
  assert_string_equal(gs.processes[0].units.v[0], "SYS/G");
  /* the session's GraphMetadata, through the accessors */
  const ezi_pk *meta = gs.sessions[0].metadata;
  size_t nc;
  ezi_pk_err err;
  assert_int_equal(ezi_m39_meta_check(meta, &nc, &err), 0);
  assert_int_equal(nc, 2);
  ezi_m39_component c;
  assert_int_equal(ezi_m39_meta_component(meta, 0, &c, &err), 0);
  assert_string_equal(c.address, "SYS");
  assert_false(c.dynamic_enabled);
  assert_null(c.dynamic_input_topic);
  assert_int_equal(ezi_m39_meta_find(meta, "SYS/G", &c, &err), 0);
  assert_true(c.dynamic_enabled);
  assert_string_equal(c.dynamic_input_topic, "SYS/G/INPUT_SETTINGS");
  assert_string_equal(c.component_type, "__main__.Gain");
  assert_true(c.initial_serialized.has && c.initial_serialized.len > 20);
  assert_true(ezi_pk_dict_get(c.initial_repr, "gain")->u.f == 3.0);
  assert_true(ezi_pk_is_class(c.settings_schema, EZI_M39_MOD, "SettingsSchemaMetadata"));
  assert_int_equal(ezi_m39_meta_find(meta, "SYS/NOPE", &c, &err), EZ_ENOENT);
  /* the settings value the server derives from it equals 3.9's own */
  assert_int_equal(ezi_m39_meta_find(meta, "SYS/G", &c, &err), 0);
  ezi_m39_settings_value sv;
  ezi_m39_initial_settings(&c, &sv);
  size_t n = 0;
  uint8_t *b = must_load("settings_value_from_meta.bin", &n);
  ezi_pk_doc *d2;
  const ezi_pk *want;
  assert_int_equal(ezi_pk_load(b, n, NULL, &d2, &want, &err), 0);
  ezi_pk_doc *d3 = ezi_pk_doc_new();
  ezi_pk *ours;
  assert_int_equal(ezi_m39_build(d3, &EZI_M39_SETTINGS_SNAPSHOT_VALUE, &sv, &ours, &err), 0);
  assert_true(ezi_pk_equal(ours, want));
  /* the same metadata on its own, as a session registers it */
  ezi_pk_doc *d4;
  const ezi_pk *m2;
  uint8_t *mb = must_load("graph_metadata.bin", &n);
  assert_int_equal(ezi_pk_load(mb, n, NULL, &d4, &m2, &err), 0);
  assert_int_equal(ezi_m39_meta_check(m2, &nc, &err), 0);
  assert_true(ezi_pk_equal(m2, meta));
  /* a snapshot built from the parsed struct re-emits the session's metadata subtree */
  ezi_pk *snap;
  assert_int_equal(ezi_m39_build(d3, &EZI_M39_GRAPH_SNAPSHOT, &gs, &snap, &err), 0);
  ezi_pk_doc_free(d); /* d3 keeps what it references */
  uint8_t *o;
  size_t on;
  assert_int_equal(ezi_pk_dump(snap, 0, NULL, &o, &on, &err), 0);
  ezi_m39_graph_snapshot gs2;
  ezi_pk_doc *d5;
  assert_int_equal(ezi_m39_load(&EZI_M39_GRAPH_SNAPSHOT, o, on, &d5, &gs2, &err), 0);
  assert_true(ezi_pk_equal(gs2.sessions[0].metadata, m2));
  assert_int_equal(gs2.n_edge_owners, 3);
  free(o);
  ezi_pk_doc_free(d5);
  ezi_pk_doc_free(d4);
  ezi_pk_doc_free(d3);
  ezi_pk_doc_free(d2);
  free(mb);
  free(b);
}

static void test_profiling(void **state) {
  ezi_pk_doc *d;
  ezi_m39_stream_control sc;
  load_vec("stream_control.bin", &EZI_M39_PROFILING_STREAM_CONTROL, &sc, &d);
  assert_true(sc.interval == 0.1 && sc.max_samples == 50 && sc.include_empty_batches);
  assert_true(sc.process_ids.has && sc.process_ids.n == 2);
  assert_string_equal(sc.process_ids.v[1].s, U2);
  ezi_pk_doc_free(d);
  load_vec("stream_control_default.bin", &EZI_M39_PROFILING_STREAM_CONTROL, &sc, &d);
  assert_true(sc.interval == 0.05 && sc.max_samples == 1000 && !sc.process_ids.has &&
              !sc.include_empty_batches);
  ezi_pk_doc_free(d);
  ezi_m39_trace_control tc;
  load_vec("trace_control.bin", &EZI_M39_PROFILING_TRACE_CONTROL, &tc, &d);
  assert_true(tc.enabled && tc.sample_mod == 4 && tc.publisher_topics.n == 1);
  assert_true(!tc.subscriber_topics.has && !tc.publisher_endpoint_ids.has && tc.metrics.has);
  assert_true(tc.ttl_seconds.has && tc.ttl_seconds.v == 30.0);
  ezi_pk_doc_free(d);
  ezi_m39_trace_batch tb;
  load_vec("trace_batch.bin", &EZI_M39_PROCESS_PROFILING_TRACE_BATCH, &tb, &d);
  assert_int_equal(tb.n_samples, 5);
  for (size_t i = 0; i < 5; i++) {
    assert_int_equal(tb.samples[i].channel_kind, (int)i - 1); /* None, LOCAL, SHM, TCP, UNKNOWN */
    assert_true(tb.samples[i].sample_seq.has == (i % 2 == 1));
    assert_true(tb.samples[i].value == i * 1.5);
  }
  assert_string_equal(tb.samples[4].metric, "lease_time_ns");
  ezi_pk_doc_free(d);
  load_vec("trace_batch_1500.bin", &EZI_M39_PROCESS_PROFILING_TRACE_BATCH, &tb, &d);
  assert_int_equal(tb.n_samples, 1500);
  assert_string_equal(tb.samples[1499].topic, "/t2");
  assert_true(tb.samples[1499].sample_seq.v == 1499);
  ezi_pk_doc_free(d);
  ezi_m39_trace_stream_batch sb;
  load_vec("trace_stream_batch.bin", &EZI_M39_PROFILING_TRACE_STREAM_BATCH, &sb, &d);
  assert_int_equal(sb.n_batches, 2);
  assert_string_equal(sb.batch_keys[1].s, U3);
  assert_true(sb.batches[0].n_samples == 5 && sb.batches[1].n_samples == 0);
  ezi_pk_doc_free(d);
  ezi_m39_profiling_snapshot ps;
  load_vec("profiling_snapshot.bin", &EZI_M39_PROCESS_PROFILING_SNAPSHOT, &ps, &d);
  assert_true(ps.n_publishers == 2 && ps.n_subscribers == 1 && ps.window_seconds == 2.0);
  assert_string_equal(ps.publishers[1].topic, "/p1");
  assert_true(ps.publishers[1].messages_published_total == 1001 &&
              ps.publishers[1].publish_rate_hz_window == 99.5 &&
              ps.publishers[1].num_buffers == 32);
  assert_int_equal(ps.subscribers[0].channel_kind_last, EZI_M39_CH_SHM);
  assert_string_equal(ps.subscriber_keys[0], ps.subscribers[0].endpoint_id);
  ezi_pk_doc_free(d);
  load_vec("profiling_snapshot_big.bin", &EZI_M39_PROCESS_PROFILING_SNAPSHOT, &ps, &d);
  assert_true(ps.n_publishers == 1100 && ps.n_subscribers == 1300);
  assert_int_equal(ps.subscribers[1299].channel_kind_last, EZI_M39_CH_SHM);
  ezi_pk_doc_free(d);
}

/* Structs made in C: built, decoded, compared; bad structs are refused. */
static void test_build_from_c(void **state) {
  const char *units[] = {"SYS/A", "SYS/B\xc3\xa9"};
  ezi_m39_process_registration reg = {.pid = 1, .host = "h", .units = {true, 2, units}};
  assert_rebuild(&EZI_M39_PROCESS_REGISTRATION, &reg);
  ezi_m39_trace_sample samples[3] = {{.timestamp = 1,
                                      .endpoint_id = "e",
                                      .topic = "t",
                                      .metric = "m",
                                      .value = 2,
                                      .channel_kind = EZI_M39_CH_TCP,
                                      .sample_seq = {true, 5}},
                                     {.timestamp = 2,
                                      .endpoint_id = "e",
                                      .topic = "t",
                                      .metric = "m",
                                      .value = 3,
                                      .channel_kind = EZI_M39_NONE},
                                     {.timestamp = 3,
                                      .endpoint_id = "",
                                      .topic = "",
                                      .metric = "",
                                      .value = -1,
                                      .channel_kind = EZI_M39_CH_UNKNOWN}};
  ezi_m39_trace_batch tb = {.process_id = {true, U1},
                            .pid = 3,
                            .host = "x",
                            .timestamp = 4,
                            .n_samples = 3,
                            .samples = samples};
  ezi_m39_uuid keys[1] = {{true, U3}};
  ezi_m39_trace_stream_batch sb = {
      .timestamp = 5, .n_batches = 1, .batch_keys = keys, .batches = &tb};
  assert_rebuild(&EZI_M39_PROFILING_TRACE_STREAM_BATCH, &sb);
  ezi_m39_control_request rq = {
      .request_id = "1", .unit_address = "u", .operation = "PING", .operation_is_enum = true};
  assert_rebuild(&EZI_M39_PROCESS_CONTROL_REQUEST, &rq);
  uint8_t *b;
  size_t n = 0;
  ezi_pk_err err;
  rq.operation = "NOT_AN_OP";
  assert_int_equal(ezi_m39_dump(&EZI_M39_PROCESS_CONTROL_REQUEST, &rq, &b, &n, &err), EZ_EINVAL);
  rq.operation_is_enum = false; /* any str is fine as a str */
  assert_rebuild(&EZI_M39_PROCESS_CONTROL_REQUEST, &rq);
  rq.unit_address = NULL;
  assert_int_equal(ezi_m39_dump(&EZI_M39_PROCESS_CONTROL_REQUEST, &rq, &b, &n, &err), EZ_EINVAL);
  assert_null(b);
  ezi_m39_control_response rs = {.request_id = "1", .error_code = 99};
  assert_int_equal(ezi_m39_dump(&EZI_M39_PROCESS_CONTROL_RESPONSE, &rs, &b, &n, &err), EZ_EINVAL);
  rs.error_code = EZI_M39_ERR_INVALID_RESPONSE;
  rs.process_id = (ezi_m39_uuid){true, "not-a-uuid"};
  assert_int_equal(ezi_m39_dump(&EZI_M39_PROCESS_CONTROL_RESPONSE, &rs, &b, &n, &err), EZ_EINVAL);
  rs.process_id.has = false;
  assert_rebuild(&EZI_M39_PROCESS_CONTROL_RESPONSE, &rs);
  reg.host = "\xff";
  assert_int_equal(ezi_m39_dump(&EZI_M39_PROCESS_REGISTRATION, &reg, &b, &n, &err), EZ_EINVAL);
  assert_non_null(strstr(err.msg, "host"));
}

/* Wrong classes, wrong field types, missing fields, duplicate keys: EZ_EPROTO with a message. */
static void test_refused(void **state) {
  ezi_pk_doc *d = ezi_pk_doc_new();
  ezi_pk_err err;
  ezi_m39_ping ping;
  ezi_pk *o = ezi_pk_dataclass(d, EZI_M39_MOD, "ProcessPing");
  assert_int_equal(ezi_m39_parse(d, &EZI_M39_PROCESS_PING, o, &ping, &err), EZ_EPROTO);
  assert_non_null(strstr(err.msg, "process_id: missing"));
  ezi_pk_attr_set(o, "process_id", ezi_pk_uuid(d, U1));
  ezi_pk_attr_set(o, "pid", ezi_pk_bool(d, true)); /* a bool is not an int here */
  ezi_pk_attr_set(o, "host", ezi_pk_cstr(d, "h"));
  ezi_pk_attr_set(o, "timestamp", ezi_pk_int(d, 3)); /* an int is a float */
  assert_int_equal(ezi_m39_parse(d, &EZI_M39_PROCESS_PING, o, &ping, &err), EZ_EPROTO);
  assert_non_null(strstr(err.msg, "pid"));
  ezi_pk_attr_set(o, "pid", ezi_pk_int(d, 3));
  ezi_pk_attr_set(o, "extra", ezi_pk_none(d)); /* ignored */
  assert_int_equal(ezi_m39_parse(d, &EZI_M39_PROCESS_PING, o, &ping, &err), 0);
  assert_true(ping.timestamp == 3.0);
  ezi_pk_attr_set(o, "host", ezi_pk_str(d, "a\0b", 3));
  assert_int_equal(ezi_m39_parse(d, &EZI_M39_PROCESS_PING, o, &ping, &err), EZ_EPROTO);
  ezi_pk *wrong = ezi_pk_dataclass(d, "other.module", "ProcessPing");
  assert_int_equal(ezi_m39_parse(d, &EZI_M39_PROCESS_PING, wrong, &ping, &err), EZ_EPROTO);
  ezi_m39_stats st;
  assert_int_equal(ezi_m39_parse(d, &EZI_M39_PROCESS_STATS, o, &st, &err), EZ_EPROTO);
  /* an enum member that does not exist */
  ezi_m39_sub_profile sp;
  ezi_pk *s = ezi_pk_dataclass(d, EZI_M39_MOD, "SubscriberProfileSnapshot");
  const char *f[] = {"endpoint_id", "topic"};
  for (int i = 0; i < 2; i++)
    ezi_pk_attr_set(s, f[i], ezi_pk_cstr(d, "x"));
  ezi_pk_attr_set(s, "messages_received_total", ezi_pk_int(d, 1));
  ezi_pk_attr_set(s, "messages_received_window", ezi_pk_int(d, 1));
  ezi_pk_attr_set(s, "timestamp", ezi_pk_float(d, 1));
  ezi_pk_attr_set(s, "channel_kind_last",
                  ezi_pk_enum(d, EZI_M39_MOD, "ProfileChannelType", ezi_pk_cstr(d, "UDP")));
  assert_int_equal(ezi_m39_parse(d, &EZI_M39_SUBSCRIBER_PROFILE_SNAPSHOT, s, &sp, &err), EZ_EPROTO);
  ezi_pk_attr_set(s, "channel_kind_last",
                  ezi_pk_enum(d, EZI_M39_MOD, "ProfileChannelType", ezi_pk_cstr(d, "TCP")));
  assert_int_equal(ezi_m39_parse(d, &EZI_M39_SUBSCRIBER_PROFILE_SNAPSHOT, s, &sp, &err), 0);
  assert_int_equal(sp.channel_kind_last, EZI_M39_CH_TCP);
  /* a dict with a key twice */
  ezi_pk *ps = ezi_pk_dataclass(d, EZI_M39_MOD, "ProcessProfilingSnapshot");
  ezi_pk_attr_set(ps, "process_id", ezi_pk_uuid(d, U1));
  ezi_pk_attr_set(ps, "pid", ezi_pk_int(d, 1));
  ezi_pk_attr_set(ps, "host", ezi_pk_cstr(d, "h"));
  ezi_pk_attr_set(ps, "window_seconds", ezi_pk_float(d, 1));
  ezi_pk_attr_set(ps, "timestamp", ezi_pk_float(d, 1));
  ezi_pk *pubs = ezi_pk_container(d, EZI_PK_DICT);
  ezi_pk_attr_set(ps, "publishers", pubs);
  ezi_pk *subs = ezi_pk_container(d, EZI_PK_DICT);
  ezi_pk_dict_add(subs, ezi_pk_cstr(d, "k"), s);
  ezi_pk_dict_add(subs, ezi_pk_cstr(d, "k"), s);
  ezi_pk_attr_set(ps, "subscribers", subs);
  ezi_m39_profiling_snapshot pp;
  assert_int_equal(ezi_m39_parse(d, &EZI_M39_PROCESS_PROFILING_SNAPSHOT, ps, &pp, &err), EZ_EPROTO);
  assert_non_null(strstr(err.msg, "duplicate"));
  ezi_pk_doc_free(d);
  /* every vector parsed as every other class is refused */
  static const char *files[] = {"ping.bin",           "stats.bin",       "edge.bin",
                                "graph_metadata.bin", "trace_batch.bin", "topology_event.bin"};
  const ezi_m39_class *classes[] = {&EZI_M39_PROCESS_REGISTRATION, &EZI_M39_GRAPH_SNAPSHOT,
                                    &EZI_M39_PROCESS_PROFILING_SNAPSHOT,
                                    &EZI_M39_SETTINGS_CHANGED_EVENT};
  for (int i = 0; i < 6; i++) {
    size_t n;
    uint8_t *b = must_load(files[i], &n);
    for (int c = 0; c < 4; c++) {
      char out[512];
      ezi_pk_doc *dd;
      assert_int_equal(ezi_m39_load(classes[c], b, n, &dd, out, &err), EZ_EPROTO);
      assert_null(dd);
    }
    free(b);
  }
}

/* Shared subtrees cannot make a parser allocate more than the pickle holds: a dict of 2000 keys
 * all mapping to one list of 2000 topics is 4M entries from a few kilobytes. */
static void test_blowup(void **state) {
  ezi_pk_doc *d = ezi_pk_doc_new();
  ezi_pk *gs = ezi_pk_dataclass(d, EZI_M39_MOD, "GraphSnapshot");
  ezi_pk *graph = ezi_pk_container(d, EZI_PK_DICT), *l = ezi_pk_container(d, EZI_PK_LIST);
  for (int i = 0; i < 2000; i++) {
    char k[16];
    snprintf(k, sizeof(k), "/t%d", i);
    ezi_pk_append(l, ezi_pk_cstr(d, k));
    ezi_pk_dict_add(graph, ezi_pk_cstr(d, k), l);
  }
  ezi_pk_attr_set(gs, "graph", graph);
  ezi_pk_attr_set(gs, "edge_owners", ezi_pk_container(d, EZI_PK_DICT));
  ezi_pk_attr_set(gs, "sessions", ezi_pk_container(d, EZI_PK_DICT));
  ezi_pk_attr_set(gs, "processes", ezi_pk_container(d, EZI_PK_DICT));
  uint8_t *b;
  size_t n = 0;
  ezi_pk_err err;
  assert_int_equal(ezi_pk_dump(gs, 0, NULL, &b, &n, &err), 0);
  assert_true(n < 60000);
  ezi_pk_doc_free(d);
  ezi_m39_graph_snapshot g;
  assert_int_equal(ezi_m39_load(&EZI_M39_GRAPH_SNAPSHOT, b, n, &d, &g, &err), EZ_EPROTO);
  assert_non_null(strstr(err.msg, "more entries"));
  free(b);
}

/* Our bytes for these structs are exactly tests/corpus/ours/ (which Python 3.9.0 was seen to load
 * to objects equal to the originals: tests/corpus/ours/README.md). */
static void test_ours(void **state) {
  static const struct {
    const char *file;
    const ezi_m39_class *c;
  } cases[] = {{"graph_snapshot.bin", &EZI_M39_GRAPH_SNAPSHOT},
               {"trace_batch_1500.bin", &EZI_M39_PROCESS_PROFILING_TRACE_BATCH},
               {"settings_event.bin", &EZI_M39_SETTINGS_CHANGED_EVENT},
               {"control_response_ok.bin", &EZI_M39_PROCESS_CONTROL_RESPONSE}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
    char out[1024];
    ezi_pk_doc *d;
    load_vec(cases[i].file, cases[i].c, out, &d);
    size_t n, wn;
    uint8_t *ours = dump(cases[i].c, out, &n), *want = tv_load("ours", cases[i].file, &wn);
    assert_non_null(want);
    assert_int_equal(n, wn);
    assert_memory_equal(ours, want, n);
    free(ours);
    free(want);
    ezi_pk_doc_free(d);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_process),   cmocka_unit_test(test_settings),
      cmocka_unit_test(test_topology),  cmocka_unit_test(test_graph_snapshot),
      cmocka_unit_test(test_profiling), cmocka_unit_test(test_build_from_c),
      cmocka_unit_test(test_refused),   cmocka_unit_test(test_blowup),
      cmocka_unit_test(test_ours),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
