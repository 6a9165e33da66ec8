/* Unit tests of the topic graph (src/proto/dag.c), its pickle codec (src/proto/dagpickle.c) and the
 * graph text formats (src/proto/graphfmt.c). The pickle vectors in tests/corpus/dag/ were made by
 * Python's pickle.dumps of the reference DAG; nothing here needs Python at run time. */
#include "harness.h"

#include "proto/dag.h"
#include "base/strlist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers -------------------------------------------------------------------------------- */

static uint8_t *load_corpus(const char *name, size_t *len) {
  char path[4096];
  const char *src = getenv("EZ_SRC");
  if (src) {
    snprintf(path, sizeof(path), "%s/tests/corpus/dag/%s", src, name);
  } else { /* next to this source file */
    const char *slash = strrchr(__FILE__, '/');
    int dl = slash ? (int)(slash - __FILE__ + 1) : 0;
    snprintf(path, sizeof(path), "%.*scorpus/dag/%s", dl, __FILE__, name);
  }
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  uint8_t *b = malloc((size_t)n + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return b;
}

static int cmp_node_topic(const void *key, const void *nd) {
  return strcmp((const char *)key, ((const ez_graph_node *)nd)->topic);
}

/* The layout promised by dag.h: sorted unique nodes and targets, every target a node. */
static void assert_well_formed(const ez_graph *g) {
  for (size_t i = 0; i < g->n_nodes; i++) {
    const ez_graph_node *nd = &g->nodes[i];
    if (i) assert_true(strcmp(g->nodes[i - 1].topic, nd->topic) < 0);
    for (size_t k = 0; k < nd->n_to; k++) {
      if (k) assert_true(strcmp(nd->to[k - 1], nd->to[k]) < 0);
      assert_non_null(bsearch(nd->to[k], g->nodes, g->n_nodes, sizeof(*nd), cmp_node_topic));
    }
  }
}

static void assert_graph_equal(const ez_graph *a, const ez_graph *b) {
  assert_int_equal(a->n_nodes, b->n_nodes);
  for (size_t i = 0; i < a->n_nodes; i++) {
    assert_string_equal(a->nodes[i].topic, b->nodes[i].topic);
    assert_int_equal(a->nodes[i].n_to, b->nodes[i].n_to);
    for (size_t k = 0; k < a->nodes[i].n_to; k++)
      assert_string_equal(a->nodes[i].to[k], b->nodes[i].to[k]);
  }
}

static void assert_dag_graph(const ezi_dag *d, const ez_graph *g) {
  ez_graph e;
  assert_int_equal(ezi_dag_export(d, &e), 0);
  assert_graph_equal(&e, g);
  ez_graph_free(&e);
}

/* Encodes d, decodes it with our decoder, and compares with its export. */
static void assert_roundtrip(const ezi_dag *d) {
  uint8_t *b;
  size_t n;
  ez_graph g;
  assert_int_equal(ezi_dag_pickle(d, &b, &n), 0);
  assert_int_equal(ezi_dag_unpickle(b, n, &g), 0);
  assert_dag_graph(d, &g);
  ez_graph_free(&g);
  free(b);
}

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void) { /* xorshift64: deterministic */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

/* The graphs of the corpus files, built the way the Python generator built them. */
static void long_name(char out[301], int i) {
  int k = snprintf(out, 301, "/long/%03d/", i);
  memset(out + k, 'x', (size_t)(300 - k));
  out[300] = '\0';
}

static ezi_dag *make_long300(void) {
  ezi_dag *d = ezi_dag_new();
  char a[301], b[301];
  for (int i = 0; i < 300; i++) {
    long_name(a, i);
    if (i < 299) {
      long_name(b, i + 1);
      assert_int_equal(ezi_dag_add_edge(d, a, b), 0);
    }
    int j = (i * 7 + 3) % 300;
    if (j > i + 1) {
      long_name(b, j);
      assert_int_equal(ezi_dag_add_edge(d, a, b), 0);
    }
  }
  return d;
}

#define ODD_TOPIC "/q\"uo\\te/\xc3\xbcn\xc3\xaf\xf0\x9f\x98\x80" /* /q"uo\te/ünï😀 */

static ezi_dag *make_star1500(void) {
  ezi_dag *d = ezi_dag_new();
  char a[64], b[64];
  for (int i = 0; i < 1499; i++) {
    snprintf(b, sizeof(b), "/leaf/%04d", i);
    assert_int_equal(ezi_dag_add_edge(d, "/hub", b), 0);
  }
  assert_int_equal(ezi_dag_add_edge(d, "/hub", ODD_TOPIC), 0);
  for (int i = 0; i < 250; i++) {
    snprintf(a, sizeof(a), "/pair/a%03d", i);
    snprintf(b, sizeof(b), "/pair/b%03d", i);
    assert_int_equal(ezi_dag_add_edge(d, a, b), 0);
  }
  return d;
}

static ezi_dag *make_bigname(void) {
  ezi_dag *d = ezi_dag_new();
  char *big = malloc(70006);
  memcpy(big, "/big/", 5);
  memset(big + 5, 'y', 70000);
  big[70005] = '\0';
  assert_int_equal(ezi_dag_add_edge(d, big, "/small"), 0);
  assert_int_equal(ezi_dag_add_edge(d, "/src", big), 0);
  free(big);
  return d;
}

static ezi_dag *make_abc(void) {
  ezi_dag *d = ezi_dag_new();
  assert_int_equal(ezi_dag_add_edge(d, "/a", "/b"), 0);
  assert_int_equal(ezi_dag_add_edge(d, "/b", "/c"), 0);
  return d;
}

/* ---- the graph ------------------------------------------------------------------------------ */

static void test_add_remove_prune(void **state) {
  ezi_dag *d = make_abc();
  assert_int_equal(ezi_dag_num_nodes(d), 3);
  assert_int_equal(ezi_dag_add_edge(d, "/a", "/b"), 0); /* duplicate */
  assert_int_equal(ezi_dag_add_edge(d, "/c", "/x"), 0);
  assert_int_equal(ezi_dag_remove_edge(d, "/c", "/x"), 0); /* /x pruned, /c keeps an in-edge */
  assert_int_equal(ezi_dag_num_nodes(d), 3);
  assert_int_equal(ezi_dag_remove_edge(d, "/a", "/c"), 0); /* absent between existing nodes */
  assert_int_equal(ezi_dag_remove_edge(d, "/b", "/a"), 0); /* reverse of an edge */
  assert_int_equal(ezi_dag_remove_edge(d, "/zz", "/yy"), 0);
  assert_int_equal(ezi_dag_remove_edge(d, "/a", "/a"), 0);
  assert_int_equal(ezi_dag_num_nodes(d), 3);
  ez_graph g;
  assert_int_equal(ezi_dag_export(d, &g), 0);
  assert_int_equal(g.n_nodes, 3);
  assert_int_equal(g.nodes[0].n_to, 1);
  assert_string_equal(g.nodes[0].to[0], "/b");
  assert_ptr_equal(g.nodes[0].to[0], g.nodes[1].topic);
  assert_int_equal(g.nodes[2].n_to, 0);
  ez_graph_free(&g);
  assert_null(g.nodes);
  ez_graph_free(&g); /* zeroed: fine */
  ez_graph_free(NULL);
  assert_int_equal(ezi_dag_remove_edge(d, "/a", "/b"), 0); /* /a pruned, /b feeds /c */
  assert_int_equal(ezi_dag_num_nodes(d), 2);
  assert_false(ezi_dag_reaches(d, "/a", "/c"));
  assert_int_equal(ezi_dag_remove_edge(d, "/b", "/c"), 0);
  assert_int_equal(ezi_dag_num_nodes(d), 0);
  assert_int_equal(ezi_dag_add_edge(d, "/b", "/a"), 0); /* slots are reused */
  assert_true(ezi_dag_reaches(d, "/b", "/a"));
  assert_int_equal(ezi_dag_add_edge(NULL, "/a", "/b"), EZ_EINVAL);
  assert_int_equal(ezi_dag_add_edge(d, NULL, "/b"), EZ_EINVAL);
  ezi_dag_free(d);
  ezi_dag_free(NULL);
}

static void test_cycles(void **state) {
  ezi_dag *d = ezi_dag_new();
  assert_int_equal(ezi_dag_add_edge(d, "/a", "/a"), EZ_ECYCLIC);
  assert_int_equal(ezi_dag_num_nodes(d), 0); /* nothing created */
  const char *chain[] = {"/a", "/b", "/c", "/d"};
  for (int i = 0; i < 3; i++)
    assert_int_equal(ezi_dag_add_edge(d, chain[i], chain[i + 1]), 0);
  ez_graph before;
  assert_int_equal(ezi_dag_export(d, &before), 0);
  for (int i = 0; i < 3; i++)
    for (int j = i + 1; j < 4; j++)
      assert_int_equal(ezi_dag_add_edge(d, chain[j], chain[i]), EZ_ECYCLIC);
  assert_dag_graph(d, &before);                         /* unchanged */
  assert_int_equal(ezi_dag_add_edge(d, "/a", "/d"), 0); /* a shortcut is no cycle */
  assert_int_equal(ezi_dag_add_edge(d, "/x", "/a"), 0);
  assert_int_equal(ezi_dag_add_edge(d, "/d", "/x"), EZ_ECYCLIC);
  assert_int_equal(ezi_dag_num_nodes(d), 5);
  ez_graph_free(&before);
  ezi_dag_free(d);
}

static void test_reaches(void **state) {
  ezi_dag *d = make_abc();
  assert_int_equal(ezi_dag_add_edge(d, "/x", "/c"), 0);
  assert_true(ezi_dag_reaches(d, "/a", "/c"));
  assert_true(ezi_dag_reaches(d, "/a", "/b"));
  assert_true(ezi_dag_reaches(d, "/x", "/c"));
  assert_true(ezi_dag_reaches(d, "/a", "/a"));
  assert_true(ezi_dag_reaches(d, "/nope", "/nope")); /* not a node, still its own */
  assert_false(ezi_dag_reaches(d, "/c", "/a"));
  assert_false(ezi_dag_reaches(d, "/a", "/x"));
  assert_false(ezi_dag_reaches(d, "/nope", "/a"));
  assert_false(ezi_dag_reaches(d, "/a", "/nope"));
  assert_false(ezi_dag_reaches(d, NULL, "/a"));
  ezi_dag_free(d);
}

/* Random adds and removes on 48 topics against an adjacency-matrix model. */
enum { MN = 48 };
static bool model[MN][MN];
static bool model_reach(int a, int b) {
  bool seen[MN] = {0};
  int q[MN], h = 0, t = 0;
  q[t++] = a;
  seen[a] = true;
  while (h < t) {
    int x = q[h++];
    if (x == b) return true;
    for (int y = 0; y < MN; y++)
      if (model[x][y] && !seen[y]) seen[y] = true, q[t++] = y;
  }
  return false;
}

/* ezi_dag_upstream's and ezi_dag_downstream's callback: marks topic "/m/<letter><i>" as seen (a
 * second call fails). */
static void upstream_seen(void *user, const char *topic) {
  bool *seen = user;
  int i = atoi(topic + 4);
  assert_true(i >= 0 && i < MN);
  assert_false(seen[i]);
  seen[i] = true;
}

static void test_model(void **state) {
  ezi_dag *d = ezi_dag_new();
  char names[MN][16];
  for (int i = 0; i < MN; i++)
    snprintf(names[i], sizeof(names[i]), "/m/%c%d", 'z' - i % 26, i);
  memset(model, 0, sizeof(model));
  for (int step = 0; step < 20000; step++) {
    int a = (int)(rnd() % MN), b = (int)(rnd() % MN);
    if (rnd() % 100 < 55) {
      int want = a == b || (!model[a][b] && model_reach(b, a)) ? EZ_ECYCLIC : 0;
      assert_int_equal(ezi_dag_add_edge(d, names[a], names[b]), want);
      if (!want) model[a][b] = true;
    } else {
      assert_int_equal(ezi_dag_remove_edge(d, names[a], names[b]), 0);
      model[a][b] = false;
    }
    size_t n = 0;
    for (int i = 0; i < MN; i++) {
      bool any = false;
      for (int j = 0; j < MN; j++)
        any |= model[i][j] || model[j][i];
      n += any;
    }
    assert_int_equal(ezi_dag_num_nodes(d), n);
    a = (int)(rnd() % MN), b = (int)(rnd() % MN);
    assert_int_equal(ezi_dag_reaches(d, names[a], names[b]), model_reach(a, b));
    bool up[MN] = {0}; /* the topics upstream of b, b among them, each once */
    ezi_dag_upstream(d, names[b], upstream_seen, up);
    for (int i = 0; i < MN; i++)
      assert_int_equal(up[i], model_reach(i, b));
    bool down[MN] = {0}; /* and those downstream of a, a among them */
    ezi_dag_downstream(d, names[a], upstream_seen, down);
    for (int i = 0; i < MN; i++)
      assert_int_equal(down[i], model_reach(a, i));
    if (step % 500 == 0) {
      ez_graph g;
      assert_int_equal(ezi_dag_export(d, &g), 0);
      assert_well_formed(&g);
      size_t edges = 0;
      for (size_t i = 0; i < g.n_nodes; i++)
        edges += g.nodes[i].n_to;
      size_t want_edges = 0;
      for (int i = 0; i < MN; i++)
        for (int j = 0; j < MN; j++)
          want_edges += model[i][j];
      assert_int_equal(edges, want_edges);
      ez_graph_free(&g);
      assert_roundtrip(d);
    }
  }
  ezi_dag_free(d);
}

/* The string list the graph server collects walks' names in (base/strlist.h): copies, in order,
 * past its first growth. */
static void test_strlist(void **state) {
  (void)state;
  ezi_strlist l = {0};
  char name[16];
  for (int i = 0; i < 40; i++) {
    snprintf(name, sizeof name, "/t/%d", i);
    ezi_strlist_add(&l, name);
  }
  name[0] = 0; /* the list holds copies */
  assert_int_equal(l.n, 40);
  assert_false(l.nomem);
  assert_string_equal(l.v[0], "/t/0");
  assert_string_equal(l.v[39], "/t/39");
  assert_true(ezi_strlist_has(&l, "/t/17"));
  assert_false(ezi_strlist_has(&l, "/t/40"));
  ezi_strlist_free(&l);
  assert_int_equal(l.n, 0);
  assert_null(l.v);
}

/* ---- pickles -------------------------------------------------------------------------------- */

/* The older form (seed dialect: graph only) still decodes; what we write is the 3.9 form, the
 * very bytes of Python 3.9.0's pickle of the same DAG (v39_*.bin). */
static void test_vectors_exact(void **state) {
  static const struct {
    const char *old, *v39;
    size_t old_len;
    ezi_dag *(*make)(void);
  } cases[] = {{"empty.bin", "v39_empty.bin", 105, ezi_dag_new},
               {"abc.bin", "v39_abc.bin", 136, make_abc}};
  for (int i = 0; i < 2; i++) {
    size_t n, on, n39;
    uint8_t *b = load_corpus(cases[i].old, &n), *b39 = load_corpus(cases[i].v39, &n39), *ours;
    ezi_dag *d = cases[i].make();
    ez_graph g, g39;
    ezi_dag_owners o;
    assert_int_equal(n, cases[i].old_len);
    assert_int_equal(ezi_dag_unpickle_owned(b, n, &g, &o), 0);
    assert_false(o.present); /* no owners in the older form */
    assert_dag_graph(d, &g);
    assert_int_equal(ezi_dag_unpickle_owned(b39, n39, &g39, &o), 0);
    assert_true(o.present);
    assert_graph_equal(&g, &g39);
    for (size_t e = 0; e < o.n_edges; e++) /* make_abc's edges are persistent */
      assert_true(o.edges[e].n == 1 && o.edges[e].owners[0] == NULL);
    ezi_dag_owners_free(&o);
    assert_int_equal(ezi_dag_pickle(d, &ours, &on), 0);
    assert_int_equal(on, n39);
    assert_memory_equal(ours, b39, n39);
    free(ours);
    ez_graph_free(&g);
    ez_graph_free(&g39);
    free(b);
    free(b39);
    ezi_dag_free(d);
  }
  ez_graph g;
  size_t n;
  uint8_t *b = load_corpus("abc.bin", &n);
  assert_int_equal(ezi_dag_unpickle(b, n, &g), 0);
  assert_int_equal(g.n_nodes, 3);
  assert_string_equal(g.nodes[0].topic, "/a");
  assert_string_equal(g.nodes[0].to[0], "/b");
  assert_string_equal(g.nodes[1].to[0], "/c");
  assert_int_equal(g.nodes[2].n_to, 0);
  ez_graph_free(&g);
  free(b);
}

/* ---- owners --------------------------------------------------------------------------------- */

#define S1 "a0000000-0000-1000-8000-000000000001"
#define S2 "b0000000-0000-1000-8000-000000000002"

static void collect(void *user, const char *from, const char *to) {
  char *acc = user;
  strcat(acc, from);
  strcat(acc, ">");
  strcat(acc, to);
  strcat(acc, " ");
}

static void test_owners(void **state) {
  ezi_dag *d = ezi_dag_new();
  bool ch;
  assert_int_equal(ezi_dag_add_edge_owned(d, "/a", "/b", S1, &ch), 0);
  assert_true(ch);
  assert_int_equal(ezi_dag_add_edge_owned(d, "/a", "/b", S1, &ch), 0);
  assert_false(ch); /* the same owner again */
  assert_int_equal(ezi_dag_add_edge_owned(d, "/a", "/b", NULL, &ch), 0);
  assert_false(ch); /* one more owner: no change of topology */
  assert_int_equal(ezi_dag_add_edge_owned(d, "/b", "/a", S2, &ch), EZ_ECYCLIC);
  assert_int_equal(ezi_dag_add_edge_owned(d, "/b", "/b", S2, &ch), EZ_ECYCLIC);
  assert_int_equal(ezi_dag_add_edge_owned(d, "/b", "/c", S2, &ch), 0);
  assert_true(ch);
  const char *own[4];
  bool p;
  assert_int_equal(ezi_dag_edge_owners(d, "/a", "/b", own, 4, &p), 1);
  assert_true(p);
  assert_string_equal(own[0], S1);
  assert_int_equal(ezi_dag_edge_owners(d, "/a", "/c", own, 4, &p), 0);
  assert_false(p);
  /* DISCONNECT drops the persistent owner; the session still holds the edge */
  assert_int_equal(ezi_dag_remove_edge(d, "/a", "/b"), 0);
  assert_true(ezi_dag_reaches(d, "/a", "/c"));
  assert_int_equal(ezi_dag_remove_edge_owned(d, "/a", "/b", S2, &ch), 0); /* not an owner */
  assert_false(ch);
  assert_true(ezi_dag_reaches(d, "/a", "/b"));
  assert_int_equal(ezi_dag_add_edge_owned(d, "/x", "/c", S1, &ch), 0);
  char acc[256] = "";
  assert_int_equal(ezi_dag_remove_owner(d, S1, collect, acc), 0); /* a session ends */
  assert_true(strstr(acc, "/a>/b ") && strstr(acc, "/x>/c "));
  assert_false(ezi_dag_reaches(d, "/a", "/b"));
  assert_int_equal(ezi_dag_num_nodes(d), 2); /* /a and /x pruned; /b -> /c is S2's */
  assert_int_equal(ezi_dag_remove_edge_owned(d, "/b", "/c", S2, &ch), 0);
  assert_true(ch);
  assert_int_equal(ezi_dag_num_nodes(d), 0);
  ezi_dag_free(d);
}

/* Random owned adds and removes against a model of owner sets (bit 0: persistent). */
static uint8_t omodel[MN][MN];
static void test_owners_model(void **state) {
  ezi_dag *d = ezi_dag_new();
  const char *owners[] = {NULL, S1, S2};
  char names[MN][16];
  for (int i = 0; i < MN; i++)
    snprintf(names[i], sizeof(names[i]), "/o/%d", i);
  memset(omodel, 0, sizeof(omodel));
  memset(model, 0, sizeof(model));
  for (int step = 0; step < 20000; step++) {
    int a = (int)(rnd() % 12), b = (int)(rnd() % 12), o = (int)(rnd() % 3);
    bool ch;
    if (rnd() % 100 < 55) {
      int want = a == b || (!omodel[a][b] && model_reach(b, a)) ? EZ_ECYCLIC : 0;
      assert_int_equal(ezi_dag_add_edge_owned(d, names[a], names[b], owners[o], &ch), want);
      if (!want) {
        assert_int_equal(ch, omodel[a][b] == 0);
        omodel[a][b] |= (uint8_t)(1u << o);
        model[a][b] = true;
      }
    } else if (rnd() % 20) {
      assert_int_equal(ezi_dag_remove_edge_owned(d, names[a], names[b], owners[o], &ch), 0);
      bool had = omodel[a][b] & (1u << o);
      omodel[a][b] &= (uint8_t) ~(1u << o);
      assert_int_equal(ch, had && omodel[a][b] == 0);
      model[a][b] = omodel[a][b] != 0;
    } else {
      assert_int_equal(ezi_dag_remove_owner(d, owners[o], NULL, NULL), 0);
      for (int i = 0; i < MN; i++)
        for (int j = 0; j < MN; j++) {
          omodel[i][j] &= (uint8_t) ~(1u << o);
          model[i][j] = omodel[i][j] != 0;
        }
    }
    if (step % 1000 == 0) { /* the pickle carries the owners */
      uint8_t *pk;
      size_t n;
      ez_graph g;
      ezi_dag_owners ow;
      assert_int_equal(ezi_dag_pickle(d, &pk, &n), 0);
      assert_int_equal(ezi_dag_unpickle_owned(pk, n, &g, &ow), 0);
      assert_dag_graph(d, &g);
      for (size_t e = 0; e < ow.n_edges; e++) {
        int i = atoi(ow.edges[e].from + 3), j = atoi(ow.edges[e].to + 3);
        uint8_t bits = 0;
        for (size_t k = 0; k < ow.edges[e].n; k++) {
          const char *x = ow.edges[e].owners[k];
          bits |= (uint8_t)(1u << (!x ? 0 : !strcmp(x, S1) ? 1 : 2));
        }
        assert_int_equal(bits, omodel[i][j]);
      }
      ezi_dag_owners_free(&ow);
      ez_graph_free(&g);
      free(pk);
    }
  }
  ezi_dag_free(d);
}

/* 3.9.0's own pickles with session owners (one from a real 3.9.0 graph server). */
static void test_v39_vectors(void **state) {
  size_t n;
  uint8_t *b = load_corpus("v39_owners.bin", &n);
  ez_graph g;
  ezi_dag_owners o;
  assert_int_equal(ezi_dag_unpickle_owned(b, n, &g, &o), 0);
  free(b);
  /* /a->/b {None, S1}, /b->/c {S1}, /x->/c {S2, S1} */
  assert_int_equal(o.n_edges, 3);
  assert_string_equal(o.edges[0].from, "/a");
  assert_true(o.edges[0].n == 2 && o.edges[0].owners[0] == NULL);
  assert_string_equal(o.edges[0].owners[1], S1);
  assert_string_equal(o.edges[2].from, "/x");
  assert_int_equal(o.edges[2].n, 2);
  assert_string_equal(o.edges[2].owners[0], S1);
  assert_string_equal(o.edges[2].owners[1], S2);
  /* rebuilt with the same owners: our pickle decodes to the same graph and owners */
  ezi_dag *d = ezi_dag_new();
  for (size_t e = 0; e < o.n_edges; e++)
    for (size_t k = 0; k < o.edges[e].n; k++)
      assert_int_equal(
          ezi_dag_add_edge_owned(d, o.edges[e].from, o.edges[e].to, o.edges[e].owners[k], NULL), 0);
  uint8_t *pk;
  size_t pn;
  assert_int_equal(ezi_dag_pickle(d, &pk, &pn), 0);
  ez_graph g2;
  ezi_dag_owners o2;
  assert_int_equal(ezi_dag_unpickle_owned(pk, pn, &g2, &o2), 0);
  assert_graph_equal(&g, &g2);
  assert_int_equal(o2.n_edges, o.n_edges);
  for (size_t e = 0; e < o.n_edges; e++) {
    assert_int_equal(o2.edges[e].n, o.edges[e].n);
    for (size_t k = 0; k < o.edges[e].n; k++)
      assert_true(o.edges[e].owners[k] == NULL
                      ? o2.edges[e].owners[k] == NULL
                      : strcmp(o.edges[e].owners[k], o2.edges[e].owners[k]) == 0);
  }
  /* exactly tests/corpus/ours/dag_v39_owners.bin, which Python 3.9.0 and feature/profiling load */
  uint8_t *want;
  size_t wn;
  char path[4096];
  const char *src = getenv("EZ_SRC");
  snprintf(path, sizeof(path), "%s/tests/corpus/ours/dag_v39_owners.bin", src ? src : ".");
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s", path);
  want = malloc(4096);
  wn = fread(want, 1, 4096, f);
  fclose(f);
  assert_int_equal(pn, wn);
  assert_memory_equal(pk, want, wn);
  free(want);
  free(pk);
  ezi_dag_owners_free(&o2);
  ez_graph_free(&g2);
  ezi_dag_owners_free(&o);
  ez_graph_free(&g);
  ezi_dag_free(d);
  b = load_corpus("v39_server_sessions.bin", &n);
  assert_int_equal(ezi_dag_unpickle_owned(b, n, &g, &o), 0);
  assert_int_equal(g.n_nodes, 6);
  assert_int_equal(o.n_edges, 3);
  assert_string_equal(o.edges[0].from, "/persist/a");
  assert_true(o.edges[0].n == 2 && o.edges[0].owners[0] == NULL &&
              strlen(o.edges[0].owners[1]) == 36);
  ezi_dag_owners_free(&o);
  ez_graph_free(&g);
  free(b);
  b = load_corpus("v39_big.bin", &n);
  assert_int_equal(ezi_dag_unpickle_owned(b, n, &g, &o), 0);
  assert_int_equal(g.n_nodes, 1501);
  assert_int_equal(o.n_edges, 1500);
  /* leaf i: S1 if i % 3 == 0 else persistent, plus UUID(int=i+1) if i % 5 == 0 */
  assert_string_equal(o.edges[15].to, "/leaf/0015");
  assert_int_equal(o.edges[15].n, 2);
  assert_string_equal(o.edges[15].owners[0], "00000000-0000-0000-0000-000000000010");
  assert_string_equal(o.edges[15].owners[1], S1);
  ezi_dag_owners_free(&o);
  ez_graph_free(&g);
  free(b);
  ezi_dag_owners_free(NULL);
}

static int decode_parts(const char *head, size_t hl, const char *body, size_t bl, const char *tail,
                        ez_graph *g);

/* The 3.9 form's consistency: edge_owners must cover exactly the graph's edges. */
#define HDR39                                                                                      \
  "\x80\x04"                                                                                       \
  "cezmsg.core.dag\nDAG\n)\x81}(\x8c\x05graphccollections\ndefaultdict\n"                          \
  "cbuiltins\nset\n\x85R(\x8c\x02/a\x8f(\x8c\x02/b\x90\x8c\x02/b\x8fu\x8c\x0b"                     \
  "edge_owners}"
static void test_v39_malformed(void **state) {
  static const struct {
    const char *body;
    int rc;
  } cases[] = {
      {"\x8c\x02/a\x8c\x02/b\x86\x8f(N\x90sub.", 0},
      {"\x8c\x02/a\x8c\x02/b\x86\x8f(\x8c\x03s-1\x90sub.", 0},        /* a str owner */
      {"ub.", EZ_EPROTO},                                             /* an edge without owners */
      {"\x8c\x02/a\x8c\x02/b\x86\x8fsub.", EZ_EPROTO},                /* an empty set */
      {"\x8c\x02/a\x8c\x02/b\x86\x8f(NN\x90sub.", EZ_EPROTO},         /* None twice */
      {"\x8c\x02/a\x8c\x02/b\x86\x8f(K\x01\x90sub.", EZ_EPROTO},      /* an int owner */
      {"\x8c\x02/b\x8c\x02/a\x86\x8f(N\x90sub.", EZ_EPROTO},          /* not an edge */
      {"\x8c\x02/a\x8c\x02/b\x8c\x01x\x87\x8f(N\x90sub.", EZ_EPROTO}, /* a 3-tuple */
      {"(\x8c\x02/a\x8c\x02/b\x86\x8f(N\x90\x8c\x02/a\x8c\x02/b\x86\x8f(N\x90uub.", EZ_EPROTO},
      {"\x8c\x02/a\x8c\x02/b\x86\x8f(N\x90s\x8c\x01zNub.", EZ_EPROTO},     /* unknown attr */
      {"\x8c\x02/a\x8c\x02/b\x86\x8f(N\x90s\x8c\x05graphNub.", EZ_EPROTO}, /* graph twice */
  };
  /* 60 edges sharing one set of 300 owners: more owners than input bytes */
  char *big = malloc(65536);
  size_t bigl = 0;
  bigl += (size_t)sprintf(big + bigl, "\x80\x04"
                                      "cezmsg.core.dag\nDAG\n)\x81}(\x8c\x05graph"
                                      "ccollections\ndefaultdict\ncbuiltins\nset\n\x85"
                                      "R(");
  for (int i = 0; i < 60; i++)
    bigl += (size_t)sprintf(big + bigl, "\x8c\x04/s%02d\x8f(\x8c\x04/t%02d\x90", i, i);
  bigl += (size_t)sprintf(big + bigl, "u\x8c\x0b"
                                      "edge_owners}(");
  for (int i = 0; i < 60; i++) {
    bigl += (size_t)sprintf(big + bigl, "\x8c\x04/s%02d\x8c\x04/t%02d\x86", i, i);
    if (i == 0) {
      bigl += (size_t)sprintf(big + bigl, "\x8f\x94(");
      for (int k = 0; k < 300; k++)
        bigl += (size_t)sprintf(big + bigl, "\x8c\x04o%03d", k);
      big[bigl++] = (char)0x90;
    } else {
      big[bigl++] = 'h'; /* the set: memo 0 */
      big[bigl++] = 0;
    }
  }
  bigl += (size_t)sprintf(big + bigl, "uub.");
  ez_graph gb;
  ezi_dag_owners ob;
  assert_true(bigl < 60 * 300);
  assert_int_equal(ezi_dag_unpickle_owned((uint8_t *)big, bigl, &gb, &ob), EZ_EPROTO);
  free(big);
  for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
    ez_graph g;
    ezi_dag_owners o;
    int rc = decode_parts(HDR39, sizeof(HDR39) - 1, cases[i].body, strlen(cases[i].body), "", &g);
    if (rc != cases[i].rc) fail_msg("case %zu: %d", i, rc);
    ez_graph_free(&g);
    size_t hl = sizeof(HDR39) - 1, bl = strlen(cases[i].body);
    uint8_t *b = malloc(hl + bl);
    memcpy(b, HDR39, hl);
    memcpy(b + hl, cases[i].body, bl);
    assert_int_equal(ezi_dag_unpickle_owned(b, hl + bl, &g, &o), cases[i].rc);
    if (!rc)
      assert_true(o.present && o.n_edges == 1);
    else
      assert_true(!o.present && !o.edges && !g.nodes);
    ezi_dag_owners_free(&o);
    ez_graph_free(&g);
    free(b);
  }
}

static void test_corpus_large(void **state) {
  static const char *files[] = {"long300.bin", "star1500.bin", "bigname.bin"};
  ezi_dag *(*makers[])(void) = {make_long300, make_star1500, make_bigname};
  for (int i = 0; i < 3; i++) {
    size_t n;
    uint8_t *b = load_corpus(files[i], &n);
    ezi_dag *d = makers[i]();
    ez_graph g;
    assert_int_equal(ezi_dag_unpickle(b, n, &g), 0);
    assert_well_formed(&g);
    assert_dag_graph(d, &g);
    ez_graph_free(&g);
    assert_roundtrip(d);
    ezi_dag_free(d);
    free(b);
  }
}

/* Small seeds: Python's protocol 5, the GLOBAL ('c') form, and one set shared by two keys. */
static void test_corpus_seeds(void **state) {
  static const struct {
    const char *file;
    size_t nodes;
    const char *first, *first_to;
  } seeds[] = {
      {"py5_mixed.bin", 6, "/a", "/b"},
      {"cform.bin", 2, "/a", "/b"},
      {"shared_set.bin", 3, "/a", "/c"},
  };
  for (size_t i = 0; i < sizeof(seeds) / sizeof(*seeds); i++) {
    size_t n;
    uint8_t *b = load_corpus(seeds[i].file, &n);
    ez_graph g;
    assert_int_equal(ezi_dag_unpickle(b, n, &g), 0);
    assert_well_formed(&g);
    assert_int_equal(g.n_nodes, seeds[i].nodes);
    assert_string_equal(g.nodes[0].topic, seeds[i].first);
    assert_string_equal(g.nodes[0].to[0], seeds[i].first_to);
    ez_graph_free(&g);
    free(b);
  }
}

static void test_roundtrip_misc(void **state) {
  ezi_dag *d = ezi_dag_new();
  assert_roundtrip(d);
  char a[32];
  for (int i = 0; i < 1000; i++) { /* 1001 keys: a last batch of one key (SETITEM) */
    snprintf(a, sizeof(a), "/s/%04d", i);
    assert_int_equal(ezi_dag_add_edge(d, a, "/zsink"), 0);
  }
  assert_int_equal(ezi_dag_add_edge(d, ODD_TOPIC, "/s/0001"), 0);
  assert_roundtrip(d);
  uint8_t *b;
  size_t n;
  assert_int_equal(ezi_dag_add_edge(d, "/bad\xff", "/a"), 0);
  assert_int_equal(ezi_dag_pickle(d, &b, &n), EZ_EINVAL); /* Python could not load it */
  assert_null(b);
  ezi_dag_free(d);
  assert_true(ezi_utf8_valid("\xed\xa0\x80", 3)); /* a lone surrogate, as surrogatepass */
  assert_false(ezi_utf8_valid("\xc0\x80", 2));    /* overlong */
  assert_false(ezi_utf8_valid("\xf4\x90\x80\x80", 4));
  assert_false(ezi_utf8_valid("\xe2\x82", 2));
}

/* Every prefix (all of them for small vectors, a sample for large ones) is EZ_EPROTO. */
static void test_truncations(void **state) {
  static const char *files[] = {"empty.bin", "abc.bin", "star1500.bin", "long300.bin",
                                "bigname.bin"};
  for (int f = 0; f < 5; f++) {
    size_t n;
    uint8_t *b = load_corpus(files[f], &n);
    for (size_t k = 0; k < n; k++) {
      if (n > 1000 && k > 300 && k < n - 300 && k % 211) continue;
      uint8_t *c = malloc(k + 1); /* exact size, so ASan sees any over-read */
      memcpy(c, b, k);
      ez_graph g;
      assert_int_equal(ezi_dag_unpickle(k ? c : NULL, k, &g), EZ_EPROTO);
      assert_null(g.nodes);
      free(c);
    }
    free(b);
  }
}

/* Deterministic random mutations: never a crash or leak; any success is a well-formed graph. */
static void test_mutations(void **state) {
  static const char *files[] = {"abc.bin", "empty.bin", "star1500.bin", "bigname.bin"};
  static const int rounds[] = {4000, 1000, 150, 60};
  static const uint8_t hot[] = {0x28, 0x2e, 0x29, 0x52, 0x58, 0x62, 0x63, 0x68, 0x6a,
                                0x73, 0x75, 0x7d, 0x80, 0x81, 0x85, 0x8c, 0x8f, 0x90,
                                0x93, 0x94, 0x95, 0x00, 0xff, 0x01, 0x04};
  int ok = 0;
  for (int f = 0; f < 4; f++) {
    size_t n;
    uint8_t *b = load_corpus(files[f], &n);
    for (int r = 0; r < rounds[f]; r++) {
      uint8_t *c = malloc(n + 8);
      memcpy(c, b, n);
      size_t len = n;
      int edits = 1 + (int)(rnd() % 4);
      for (int e = 0; e < edits; e++) {
        size_t at = (size_t)(rnd() % len);
        switch (rnd() % 5) {
        case 0: c[at] ^= (uint8_t)(1u << (rnd() % 8)); break;
        case 1: c[at] = (uint8_t)rnd(); break;
        case 2: c[at] = hot[rnd() % sizeof(hot)]; break;
        case 3: memmove(c + at, c + at + 1, len - at - 1), len--; break; /* delete a byte */
        default: memmove(c + at + 1, c + at, len - at), c[at] = hot[rnd() % sizeof(hot)], len++;
        }
        if (len == 0 || len >= n + 4) break;
      }
      ez_graph g;
      int rc = ezi_dag_unpickle(c, len, &g);
      assert_true(rc == 0 || rc == EZ_EPROTO);
      if (rc == 0) assert_well_formed(&g), ok++;
      ez_graph_free(&g);
      free(c);
    }
    free(b);
  }
  print_message("mutations decoded fine: %d\n", ok);
}

/* A hand-made pickle: the DAG/defaultdict header (memo 0..13, no frame), then `body`, then
 * "sb." (set the state's graph, build, stop). */
static const char HDR[] = "\x80\x04\x8c\x0e"
                          "ezmsg.core.dag\x94\x8c\x03"
                          "DAG\x94\x93\x94)\x81\x94}\x94\x8c\x05graph\x94\x8c\x0b"
                          "collections\x94\x8c\x0b"
                          "defaultdict\x94\x93\x94\x8c\x08"
                          "builtins\x94\x8c\x03set\x94\x93\x94\x85\x94R\x94";

static int decode_parts(const char *head, size_t hl, const char *body, size_t bl, const char *tail,
                        ez_graph *g) {
  size_t tl = strlen(tail), n = hl + bl + tl;
  uint8_t *b = malloc(n);
  memcpy(b, head, hl);
  memcpy(b + hl, body, bl);
  memcpy(b + hl + bl, tail, tl);
  int rc = ezi_dag_unpickle(b, n, g);
  free(b);
  return rc;
}
#define BODY(g, lit) decode_parts(HDR, sizeof(HDR) - 1, lit, sizeof(lit) - 1, "sb.", g)

static void test_malformed(void **state) {
  ez_graph g;
  assert_int_equal(BODY(&g, ""), 0); /* the empty graph, unframed */
  assert_int_equal(g.n_nodes, 0);
  /* /a -> {/b} with /b not a key: /b becomes a node */
  assert_int_equal(BODY(&g, "\x8c\x02/a\x8f(\x8c\x02/b\x90s"), 0);
  assert_int_equal(g.n_nodes, 2);
  assert_string_equal(g.nodes[0].to[0], "/b");
  ez_graph_free(&g);
  assert_int_equal(BODY(&g, "(\x8c\x02/a\x8f\x8c\x02/a\x8fu"), EZ_EPROTO); /* dup key */
  assert_int_equal(BODY(&g, "\x8c\x02/\xff\x8fs"), EZ_EPROTO);             /* not UTF-8 */
  assert_int_equal(BODY(&g, "\x8c\x02/\x00\x8fs"), EZ_EPROTO);             /* NUL */
  assert_int_equal(BODY(&g, "\x8c\x02/a\x8c\x02/bs"), EZ_EPROTO);          /* str value */
  assert_int_equal(BODY(&g, "(\x8c\x02/a\x8fs"), EZ_EPROTO);               /* open MARK */
  assert_int_equal(BODY(&g, "(\x8c\x02/a\x8f\x8c\x02/bu"), EZ_EPROTO);     /* odd items */
  assert_int_equal(BODY(&g, "\x8c\x02/a\x8f(\x8f\x90s"), EZ_EPROTO);       /* set in set */
  assert_int_equal(BODY(&g, "h\x0e"), EZ_EPROTO);                          /* no memo 14 */
  assert_int_equal(BODY(&g, "j\x00\x00\x00\x01"), EZ_EPROTO);
  assert_int_equal(BODY(&g, "\x8c\x02/a"), EZ_EPROTO);                           /* extra item */
  assert_int_equal(BODY(&g, "X\xff\xff\xff\xff/a"), EZ_EPROTO);                  /* huge */
  assert_int_equal(BODY(&g, "X\x00\x00\x10\x00"), EZ_EPROTO);                    /* > input */
  assert_int_equal(BODY(&g, "\x95\xff\xff\xff\xff\xff\xff\xff\xff"), EZ_EPROTO); /* frame */
  assert_int_equal(BODY(&g, "\x95\x03\0\0\0\0\0\0\0"), 0); /* a frame around "sb." */
  ez_graph_free(&g);
  /* a new frame before the current one ends */
  assert_int_equal(BODY(&g, "\x95\x0c\0\0\0\0\0\0\0\x95\0\0\0\0\0\0\0\0"), EZ_EPROTO);
  assert_int_equal(BODY(&g, "\x95\x03\0\0\0\0\0\0\0\x8c\x02/a\x8fs"), EZ_EPROTO); /* op spans */
  assert_int_equal(BODY(&g, "\x80\x04"), EZ_EPROTO);                              /* 2nd PROTO */
  assert_int_equal(decode_parts(HDR, sizeof(HDR) - 1, "", 0, "sb..", &g), EZ_EPROTO); /* trailing */
  assert_int_equal(decode_parts("\x80\x03", 2, HDR + 2, sizeof(HDR) - 3, "sb.", &g), EZ_EPROTO);
  assert_int_equal(decode_parts(HDR, sizeof(HDR) - 1, "", 0, "b.", &g), EZ_EPROTO); /* no graph */
  assert_int_equal(decode_parts(HDR, sizeof(HDR) - 1, "", 0, ".", &g), EZ_EPROTO);
  /* many keys sharing one big set: more edges than input bytes */
  char body[4096];
  size_t bl = 0;
  memcpy(body + bl, "(\x8c\x02k0\x8f\x94(", 8), bl += 8;
  for (int i = 0; i < 40; i++)
    bl += (size_t)sprintf(body + bl, "\x8c\x03t%02d", i);
  body[bl++] = (char)0x90;
  for (int i = 1; i < 200; i++)
    bl += (size_t)sprintf(body + bl, "\x8c\x04k%03dh\x0e", i);
  body[bl++] = 'u';
  assert_int_equal(decode_parts(HDR, sizeof(HDR) - 1, body, bl, "sb.", &g), EZ_EPROTO);
  /* unknown opcodes anywhere before STOP */
  static const uint8_t known[] = {0x28, 0x2e, 0x29, 0x52, 0x58, 0x62, 0x63, 0x68, 0x6a, 0x73, 0x75,
                                  0x7d, 0x80, 0x81, 0x85, 0x8c, 0x8f, 0x90, 0x93, 0x94, 0x95};
  for (int op = 0; op < 256; op++) {
    if (memchr(known, op, sizeof(known))) continue;
    char o = (char)op;
    assert_int_equal(decode_parts(HDR, sizeof(HDR) - 1, &o, 1, "sb.", &g), EZ_EPROTO);
  }
}

#define P4 "\x80\x04"
#define DAG_C "cezmsg.core.dag\nDAG\n)\x81}\x8c\x05graph"
#define DDSET_C "ccollections\ndefaultdict\ncbuiltins\nset\n\x85R"

/* Only ezmsg.core.dag.DAG(), collections.defaultdict(builtins.set). (The GLOBAL form of a valid
 * DAG is corpus/dag/cform.bin.) */
static void test_globals(void **state) {
  static const char *bad[] = {
      P4 "cos\nsystem\n)\x81}\x8c\x05graph" DDSET_C,
      P4 "cezmsg.core.dag\nDAX\n)\x81}\x8c\x05graph" DDSET_C,
      P4 "cezmsg.core.dag\nDAG" DDSET_C, /* no newline */
      P4 "\x8c\x05posix\x8c\x06system\x93)\x81}\x8c\x05graph" DDSET_C,
      P4 "\x8c\x08"
         "builtins\x8c\x04"
         "eval\x93)\x81}\x8c\x05graph" DDSET_C,
      P4 "\x8c\x0e"
         "ezmsg.core.dag\x8c\x03"
         "DAG\x93(\x81}\x8c\x05graph" DDSET_C,                      /* args */
      P4 DAG_C "ccollections\ndefaultdict\ncbuiltins\nlist\n\x85R", /* defaultdict(list) */
      P4 DAG_C "cbuiltins\nset\n)R",                                /* set() */
      P4 DAG_C "ccollections\ndefaultdict\n)R",                     /* defaultdict() */
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
    ez_graph g;
    assert_int_equal(decode_parts(bad[i], strlen(bad[i]), "", 0, "sb.", &g), EZ_EPROTO);
  }
  ez_graph g; /* and the same pattern with the right names decodes */
  assert_int_equal(decode_parts(P4 DAG_C DDSET_C, strlen(P4 DAG_C DDSET_C), "", 0, "sb.", &g), 0);
}

/* ---- text formats --------------------------------------------------------------------------- */

static void test_formats(void **state) {
  ezi_dag *d = make_abc();
  assert_int_equal(ezi_dag_add_edge(d, "/sys/u/in", "/sys/u/out"), 0);
  assert_int_equal(ezi_dag_add_edge(d, "/sys/x", "/a"), 0);
  assert_int_equal(ezi_dag_add_edge(d, "/q\"x\\y", "/a"), 0);
  ez_graph g;
  assert_int_equal(ezi_dag_export(d, &g), 0);
  char *s = ez_graph_format(&g, "graphviz");
  assert_non_null(s);
  static const char *dot[] = {"digraph EZ {\n",
                              "  rankdir=\"LR\";\n",
                              "  \"/a\";\n",
                              "  \"/a\" -> \"/b\";\n",
                              "  subgraph \"cluster_/sys\" {\n",
                              "    label=\"sys\";\n",
                              "      \"/sys/u/in\";\n",
                              "  \"/q\\\"x\\\\y\" -> \"/a\";\n",
                              "  \"/sys/u/in\" -> \"/sys/u/out\";\n"};
  for (size_t i = 0; i < sizeof(dot) / sizeof(*dot); i++)
    if (!strstr(s, dot[i])) fail_msg("graphviz lacks %s in:\n%s", dot[i], s);
  assert_string_equal(s + strlen(s) - 2, "}\n");
  free(s);
  s = ez_graph_format(&g, "mermaid");
  assert_non_null(s);
  /* ids follow sorted order: /a /b /c /q"x\y /sys/u/in /sys/u/out /sys/x */
  static const char *mmd[] = {"flowchart LR\n",
                              "  n0[\"/a\"]\n",
                              "  n0 --> n1\n",
                              "  n1 --> n2\n",
                              "  n3[\"/q#quot;x\\y\"]\n",
                              "  n3 --> n0\n",
                              "  subgraph c0 [\"sys\"]\n",
                              "    subgraph c1 [\"u\"]\n",
                              "      n4[\"/sys/u/in\"]\n",
                              "    end\n",
                              "  n4 --> n5\n",
                              "  n6 --> n0\n"};
  for (size_t i = 0; i < sizeof(mmd) / sizeof(*mmd); i++)
    if (!strstr(s, mmd[i])) fail_msg("mermaid lacks %s in:\n%s", mmd[i], s);
  free(s);
  assert_null(ez_graph_format(&g, "svg"));
  assert_null(ez_graph_format(&g, NULL));
  ez_graph_free(&g);
  ezi_dag_free(d);
  ez_graph empty = {0};
  s = ez_graph_format(&empty, "graphviz");
  assert_string_equal(s, "digraph EZ {\n  rankdir=\"LR\";\n}\n");
  free(s);
  s = ez_graph_format(&empty, "mermaid");
  assert_string_equal(s, "flowchart LR\n");
  free(s);
  /* a hand-made graph: unsorted, with a target that is not a node */
  char *to[] = {"/m"};
  ez_graph_node nodes[] = {{"/z", 1, to}, {"/b", 0, NULL}};
  ez_graph hand = {2, nodes};
  s = ez_graph_format(&hand, "mermaid");
  assert_non_null(strstr(s, "n2 --> n1\n"));
  free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_add_remove_prune), cmocka_unit_test(test_cycles),
      cmocka_unit_test(test_reaches),          cmocka_unit_test(test_model),
      cmocka_unit_test(test_vectors_exact),    cmocka_unit_test(test_corpus_large),
      cmocka_unit_test(test_corpus_seeds),     cmocka_unit_test(test_roundtrip_misc),
      cmocka_unit_test(test_truncations),      cmocka_unit_test(test_mutations),
      cmocka_unit_test(test_malformed),        cmocka_unit_test(test_globals),
      cmocka_unit_test(test_formats),          cmocka_unit_test(test_owners),
      cmocka_unit_test(test_owners_model),     cmocka_unit_test(test_v39_vectors),
      cmocka_unit_test(test_v39_malformed),    cmocka_unit_test(test_strlist),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
