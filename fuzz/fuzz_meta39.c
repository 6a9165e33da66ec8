/* fuzz_meta39: each ezmsg 3.9 parser (meta39.h) and the DAG decoder on arbitrary pickles.
 * Input: one byte choosing the parser (below), then a pickle. A parse either fails with
 * EZ_EPROTO / EZ_ENOMEM and a message, or gives a struct that builds, dumps and parses again to
 * a struct that dumps to the very same bytes. GraphMetadata goes through its accessors and the
 * settings value the graph server derives from each component; the DAG through
 * ezi_dag_unpickle_owned, whose owners must name edges of the graph it returns. */
#include "proto/dag.h"
#include "fuzz_common.h"
#include "proto/meta39.h"

#define CHECK(c)                                                                                   \
  do {                                                                                             \
    if (!(c)) fz_die("fuzz_meta39: invariant failed: %s (line %d)", #c, __LINE__);                 \
  } while (0)

static const ezi_m39_class *const classes[] = {
    &EZI_M39_PROCESS_REGISTRATION,
    &EZI_M39_PROCESS_OWNERSHIP_UPDATE,
    &EZI_M39_SETTINGS_SNAPSHOT_VALUE,
    &EZI_M39_PROCESS_SETTINGS_UPDATE,
    &EZI_M39_PROCESS_CONTROL_REQUEST,
    &EZI_M39_PROCESS_CONTROL_RESPONSE,
    &EZI_M39_PROCESS_PING,
    &EZI_M39_PROCESS_STATS,
    &EZI_M39_SETTINGS_CHANGED_EVENT,
    &EZI_M39_TOPOLOGY_CHANGED_EVENT,
    &EZI_M39_SNAPSHOT_SESSION,
    &EZI_M39_SNAPSHOT_PROCESS,
    &EZI_M39_GRAPH_SNAPSHOT,
    &EZI_M39_PROFILING_STREAM_CONTROL,
    &EZI_M39_PROFILING_TRACE_CONTROL,
    &EZI_M39_PROFILING_TRACE_SAMPLE,
    &EZI_M39_PROCESS_PROFILING_TRACE_BATCH,
    &EZI_M39_PROFILING_TRACE_STREAM_BATCH,
    &EZI_M39_PUBLISHER_PROFILE_SNAPSHOT,
    &EZI_M39_SUBSCRIBER_PROFILE_SNAPSHOT,
    &EZI_M39_PROCESS_PROFILING_SNAPSHOT,
};
enum { N_CLASSES = sizeof(classes) / sizeof(*classes) };
/* selector: 0..N_CLASSES-1 one class; then: */
enum { SEL_META = N_CLASSES, SEL_LIST, SEL_DICT, SEL_DAG, N_SEL };

/* The struct s of class c: dump, load, parse, dump again: the same bytes. */
static void rebuild(const ezi_m39_class *c, const void *s) {
  uint8_t *b;
  size_t n;
  ezi_pk_err err;
  int rc = ezi_m39_dump(c, s, &b, &n, &err);
  CHECK(rc == 0 || rc == EZ_ENOMEM);
  if (rc) return;
  void *t = malloc(c->size);
  ezi_pk_doc *d;
  rc = ezi_m39_load(c, b, n, &d, t, &err);
  if (rc == EZ_ENOMEM) goto out;
  if (rc) fz_die("fuzz_meta39: %s: our bytes do not parse: %d %s", c->name, rc, err.msg);
  uint8_t *b2;
  size_t n2;
  rc = ezi_m39_dump(c, t, &b2, &n2, &err);
  CHECK(rc == 0 || rc == EZ_ENOMEM);
  if (rc == 0) {
    CHECK(n == n2 && memcmp(b, b2, n) == 0);
    free(b2);
  }
  ezi_pk_doc_free(d);
out:
  free(t);
  free(b);
}

static void meta(ezi_pk_doc *d, const ezi_pk *x) {
  size_t n;
  ezi_pk_err err;
  int rc = ezi_m39_meta_check(x, &n, &err);
  CHECK(rc == 0 || rc == EZ_EPROTO);
  if (rc) return;
  for (size_t i = 0; i < n; i++) {
    ezi_m39_component c, c2;
    CHECK(ezi_m39_meta_component(x, i, &c, &err) == 0);
    CHECK(c.address && c.name && c.initial_repr);
    CHECK(ezi_m39_meta_find(x, c.address, &c2, &err) == 0); /* the last one of that address */
    ezi_m39_settings_value v;
    ezi_m39_initial_settings(&c, &v);
    ezi_pk *node;
    rc = ezi_m39_build(d, &EZI_M39_SETTINGS_SNAPSHOT_VALUE, &v, &node, &err);
    CHECK(rc == 0 || rc == EZ_ENOMEM);
    if (rc == 0) rebuild(&EZI_M39_SETTINGS_SNAPSHOT_VALUE, &v);
  }
}

static void dag(const uint8_t *p, size_t n) {
  ez_graph g;
  ezi_dag_owners o;
  int rc = ezi_dag_unpickle_owned(p, n, &g, &o);
  CHECK(rc == 0 || rc == EZ_EPROTO || rc == EZ_ENOMEM);
  if (rc) {
    CHECK(!g.nodes && !o.present && !o.edges);
    return;
  }
  size_t edges = 0;
  for (size_t i = 0; i < g.n_nodes; i++)
    edges += g.nodes[i].n_to;
  CHECK(!o.present || o.n_edges == edges);
  for (size_t e = 0; e < o.n_edges; e++) {
    CHECK(o.edges[e].n > 0);
    if (e) CHECK(strcmp(o.edges[e - 1].from, o.edges[e].from) <= 0);
  }
  ezi_dag_owners_free(&o);
  ez_graph_free(&g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_quiet();
  if (size < 1) return 0;
  int sel = data[0] % N_SEL, cls = data[0] / N_SEL % N_CLASSES;
  const uint8_t *p = data + 1;
  size_t n = size - 1;
  if (sel == SEL_DAG) {
    dag(p, n);
    return 0;
  }
  ezi_pk_doc *d;
  const ezi_pk *x;
  ezi_pk_err err;
  if (ezi_pk_load(p, n, NULL, &d, &x, &err)) return 0;
  char out[1024]; /* every struct is smaller */
  if (sel < N_CLASSES) {
    CHECK(classes[sel]->size <= sizeof(out));
    int rc = ezi_m39_parse(d, classes[sel], x, out, &err);
    CHECK(rc == 0 || rc == EZ_EPROTO || rc == EZ_ENOMEM);
    if (rc)
      CHECK(err.code == rc && err.msg[0]);
    else
      rebuild(classes[sel], out);
  } else if (sel == SEL_META) {
    meta(d, x);
  } else {
    /* the list and dict answers, of a class the selector byte also chooses */
    const ezi_m39_class *c = classes[cls];
    void *items;
    const char **keys = NULL;
    size_t k;
    int rc = sel == SEL_LIST ? ezi_m39_parse_list(d, c, x, &items, &k, &err)
                             : ezi_m39_parse_dict(d, c, x, &keys, &items, &k, &err);
    CHECK(rc == 0 || rc == EZ_EPROTO || rc == EZ_ENOMEM);
    if (rc == 0) {
      ezi_pk *built;
      rc = sel == SEL_LIST ? ezi_m39_build_list(d, c, items, k, &built, &err)
                           : ezi_m39_build_dict(d, c, keys, items, k, &built, &err);
      CHECK(rc == 0 || rc == EZ_ENOMEM);
      for (size_t i = 0; i < k && i < 8; i++)
        rebuild(c, (const char *)items + i * c->size);
    }
  }
  ezi_pk_doc_free(d);
  return 0;
}

void fuzz_teardown(void) {}
