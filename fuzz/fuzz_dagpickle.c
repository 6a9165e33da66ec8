/* fuzz_dagpickle: ezi_dag_unpickle on arbitrary bytes.
 * A decoded graph must satisfy the layout promises of dag.h (nodes and 'to' lists sorted, unique,
 * NUL-free UTF-8; every target a node, pointing at that node's topic string), render in both text
 * formats, and - when its edges form a DAG - survive ezi_dag_add_edge / ezi_dag_pickle /
 * ezi_dag_unpickle with the same edges. A failed decode must leave the output zeroed. */
#include "proto/dag.h"
#include "fuzz_common.h"

#define CHECK(c)                                                                                   \
  do {                                                                                             \
    if (!(c)) fz_die("fuzz_dagpickle: invariant failed: %s (line %d)", #c, __LINE__);              \
  } while (0)

static const ez_graph_node *find(const ez_graph *g, const char *topic) {
  size_t lo = 0, hi = g->n_nodes;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(g->nodes[mid].topic, topic);
    if (c == 0) return &g->nodes[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

static void check_layout(const ez_graph *g) {
  CHECK(g->n_nodes == 0 || g->nodes);
  for (size_t i = 0; i < g->n_nodes; i++) {
    const ez_graph_node *n = &g->nodes[i];
    CHECK(n->topic);
    size_t len = strlen(n->topic);
    CHECK(ezi_utf8_valid(n->topic, len));
    if (i) CHECK(strcmp(g->nodes[i - 1].topic, n->topic) < 0);
    CHECK(n->n_to == 0 || n->to);
    for (size_t k = 0; k < n->n_to; k++) {
      if (k) CHECK(strcmp(n->to[k - 1], n->to[k]) < 0);
      const ez_graph_node *t = find(g, n->to[k]);
      CHECK(t && t->topic == n->to[k]);
    }
  }
}

/* Every edge of a is in b and vice versa; nodes without edges may differ. */
static bool same_edges(const ez_graph *a, const ez_graph *b) {
  for (int pass = 0; pass < 2; pass++) {
    const ez_graph *x = pass ? b : a, *y = pass ? a : b;
    for (size_t i = 0; i < x->n_nodes; i++) {
      const ez_graph_node *n = &x->nodes[i];
      if (!n->n_to) continue;
      const ez_graph_node *m = find(y, n->topic);
      if (!m || m->n_to != n->n_to) return false;
      for (size_t k = 0; k < n->n_to; k++)
        if (strcmp(n->to[k], m->to[k])) return false;
    }
  }
  return true;
}

static void check_roundtrip(const ez_graph *g) {
  size_t edges = 0;
  for (size_t i = 0; i < g->n_nodes; i++)
    edges += g->nodes[i].n_to;
  if (edges > 256) return; /* add_edge checks cycles in O(V + E): keep it cheap */
  ezi_dag *d = ezi_dag_new();
  if (!d) return;
  for (size_t i = 0; i < g->n_nodes; i++) {
    for (size_t k = 0; k < g->nodes[i].n_to; k++) {
      int rc = ezi_dag_add_edge(d, g->nodes[i].topic, g->nodes[i].to[k]);
      CHECK(rc == 0 || rc == EZ_ECYCLIC || rc == EZ_ENOMEM);
      if (rc) { /* not a DAG (the pickle's edges may form cycles): nothing to compare */
        ezi_dag_free(d);
        return;
      }
    }
  }
  uint8_t *pk = NULL;
  size_t n = 0;
  int rc = ezi_dag_pickle(d, &pk, &n);
  CHECK(rc == 0 || rc == EZ_ENOMEM);
  if (rc == 0) {
    ez_graph h;
    rc = ezi_dag_unpickle(pk, n, &h);
    CHECK(rc == 0 || rc == EZ_ENOMEM);
    if (rc == 0) {
      check_layout(&h);
      CHECK(same_edges(g, &h));
      ez_graph_free(&h);
    }
    /* The library's own export must agree as well. */
    ez_graph e;
    if (ezi_dag_export(d, &e) == 0) {
      check_layout(&e);
      CHECK(same_edges(g, &e));
      ez_graph_free(&e);
    }
  }
  free(pk);
  ezi_dag_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_quiet();
  ez_graph g;
  memset(&g, 0xa5, sizeof g); /* must be overwritten either way */
  int rc = ezi_dag_unpickle(data, size, &g);
  CHECK(rc == 0 || rc == EZ_EPROTO || rc == EZ_ENOMEM);
  if (rc) {
    CHECK(g.n_nodes == 0 && g.nodes == NULL);
    ez_graph_free(&g);
    return 0;
  }
  check_layout(&g);
  const char *fmts[] = {"graphviz", "mermaid"};
  for (size_t i = 0; i < 2; i++) {
    char *s = ez_graph_format(&g, fmts[i]);
    CHECK(s);
    free(s);
  }
  CHECK(ez_graph_format(&g, "nonsense") == NULL);
  check_roundtrip(&g);
  ez_graph_free(&g);
  return 0;
}

void fuzz_teardown(void) {}
