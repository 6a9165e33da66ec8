/* The topic graph as a Python pickle, on top of the general codec (pickle.h): the encoder builds
 * the tree of an ezmsg 3.9 DAG (graph and edge_owners) and lets ezi_pk_dump write it as Python
 * does; the decoder lets ezi_pk_load read any pickle and then accepts only the DAG's exact shape,
 * in the older form (graph only) or 3.9's. */
#include "proto/dag.h"
#include "proto/pickle.h"

#include <stdlib.h>
#include <string.h>

#define MAX_INPUT (1u << 30) /* indices are 32-bit */

/* ---- encoder -------------------------------------------------------------------------------- */

static int cmp_topic(const void *key, const void *nd) {
  return strcmp((const char *)key, ((const ez_graph_node *)nd)->topic);
}

static int cmp_cstr(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The set of an edge's owners: None for the persistent owner, then a UUID or str per session. */
static ezi_pk *owner_set(ezi_pk_doc *doc, const ezi_dag *d, const char *from, const char *to,
                         int *rc) {
  bool persistent;
  size_t n = ezi_dag_edge_owners(d, from, to, NULL, 0, &persistent);
  const char **s = malloc((n ? n : 1) * sizeof(*s));
  ezi_pk *set = ezi_pk_container(doc, EZI_PK_SET);
  *rc = EZ_ENOMEM;
  if (!s || !set || (persistent && ezi_pk_append(set, ezi_pk_none(doc)))) goto done;
  ezi_dag_edge_owners(d, from, to, s, n, NULL);
  qsort(s, n, sizeof(*s), cmp_cstr);
  for (size_t i = 0; i < n; i++) {
    if (!ezi_utf8_valid(s[i], strlen(s[i]))) {
      *rc = EZ_EINVAL;
      goto done;
    }
    ezi_pk *o = ezi_pk_uuid(doc, s[i]);
    if (!o) o = ezi_pk_cstr(doc, s[i]);
    if (!o || ezi_pk_append(set, o)) goto done;
  }
  *rc = 0;
done:
  free(s);
  return *rc ? NULL : set;
}

/* The tree of an ezmsg.core.dag.DAG for the sorted graph g. */
static int build(ezi_pk_doc *doc, const ezi_dag *d, const ez_graph *g, ezi_pk **out) {
  ezi_pk **names = malloc((g->n_nodes + 1) * sizeof(*names));
  if (!names) return EZ_ENOMEM;
  int rc = EZ_ENOMEM;
  for (size_t i = 0; i < g->n_nodes; i++)
    if (!(names[i] = ezi_pk_cstr(doc, g->nodes[i].topic))) goto done;
  ezi_pk *dag = ezi_pk_dataclass(doc, "ezmsg.core.dag", "DAG");
  ezi_pk *args = ezi_pk_container(doc, EZI_PK_TUPLE),
         *set_cls = ezi_pk_global(doc, "builtins", "set");
  if (!dag || !args || !set_cls || ezi_pk_append(args, set_cls)) goto done;
  ezi_pk *dd = ezi_pk_object(doc, EZI_PK_REDUCE, ezi_pk_global(doc, "collections", "defaultdict"),
                             args, NULL);
  ezi_pk *eo = ezi_pk_container(doc, EZI_PK_DICT);
  if (!dd || !eo) goto done;
  for (size_t i = 0; i < g->n_nodes; i++) {
    const ez_graph_node *nd = &g->nodes[i];
    ezi_pk *targets = ezi_pk_container(doc, EZI_PK_SET);
    if (!targets) goto done;
    for (size_t k = 0; k < nd->n_to; k++) {
      const ez_graph_node *t =
          bsearch(nd->to[k], g->nodes, g->n_nodes, sizeof(*g->nodes), cmp_topic);
      ezi_pk *edge = ezi_pk_container(doc, EZI_PK_TUPLE);
      ezi_pk *owners = owner_set(doc, d, nd->topic, nd->to[k], &rc);
      if (!owners) goto done;
      rc = EZ_ENOMEM;
      if (ezi_pk_append(targets, names[t - g->nodes]) || !edge || ezi_pk_append(edge, names[i]) ||
          ezi_pk_append(edge, names[t - g->nodes]) || ezi_pk_dict_add(eo, edge, owners))
        goto done;
    }
    if (ezi_pk_dict_add(dd, names[i], targets)) goto done;
  }
  if (ezi_pk_attr_set(dag, "graph", dd) || ezi_pk_attr_set(dag, "edge_owners", eo)) goto done;
  *out = dag;
  rc = 0;
done:
  free(names);
  return rc;
}

int ezi_dag_pickle(const ezi_dag *d, uint8_t **out, size_t *len) {
  *out = NULL;
  *len = 0;
  ez_graph g;
  int rc = ezi_dag_export(d, &g);
  if (rc) return rc;
  for (size_t i = 0; i < g.n_nodes; i++) {
    size_t n = strlen(g.nodes[i].topic);
    if (n > UINT32_MAX || !ezi_utf8_valid(g.nodes[i].topic, n)) {
      ez_graph_free(&g);
      return EZ_EINVAL;
    }
  }
  ezi_pk_doc *doc = ezi_pk_doc_new();
  ezi_pk *dag = NULL;
  rc = doc ? build(doc, d, &g, &dag) : EZ_ENOMEM;
  if (!rc) rc = ezi_pk_dump(dag, 0, NULL, out, len, NULL);
  ezi_pk_doc_free(doc);
  ez_graph_free(&g);
  return rc;
}

/* ---- decoder -------------------------------------------------------------------------------- */

static ezi_strv view(const ezi_pk *s) { return (ezi_strv){s->u.s.p, s->u.s.len}; }

static int cmp_strv(const void *x, const void *y) {
  const ezi_strv *a = x, *b = y;
  size_t n = a->len < b->len ? a->len : b->len;
  int c = memcmp(a->p, b->p, n);
  return c ? c : (a->len > b->len) - (a->len < b->len);
}

static int cmp_u32(const void *x, const void *y) {
  uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
  return (a > b) - (a < b);
}

static uint32_t rank_of(const ezi_strv *names, size_t n, ezi_strv s) {
  return (uint32_t)((const ezi_strv *)bsearch(&s, names, n, sizeof(s), cmp_strv) - names);
}

/* A str usable as a topic: no NUL (the codec already checked UTF-8 and the length limit). */
static bool is_topic(const ezi_pk *n) { return n && n->type == EZI_PK_STR && ezi_pk_cstr_of(n); }

/* The defaultdict(set) of the graph: its key / value pairs (n pairs at kv), checked. */
static int graph_items(const ezi_pk *dd, ezi_pk *const **kv, size_t *n) {
  if (!ezi_pk_is_class(dd, "collections", "defaultdict") || dd->how != EZI_PK_REDUCE ||
      ezi_pk_len(dd->u.o.args) != 1 ||
      !ezi_pk_is_global(ezi_pk_item(dd->u.o.args, 0), "builtins", "set") || dd->u.o.state ||
      ezi_pk_len(dd->u.o.list))
    return EZ_EPROTO;
  const ezi_pk *items = dd->u.o.dict;
  *n = ezi_pk_len(items);
  *kv = items ? items->u.seq.v : NULL;
  for (size_t i = 0; i < *n; i++) {
    const ezi_pk *k = (*kv)[2 * i], *v = (*kv)[2 * i + 1];
    if (!is_topic(k) || v->type != EZI_PK_SET) return EZ_EPROTO;
    for (size_t j = 0; j < v->u.seq.n; j++)
      if (!is_topic(v->u.seq.v[j])) return EZ_EPROTO;
  }
  return 0;
}

/* Turns the graph's pairs into the sorted single-block ez_graph. */
static int finish(ezi_pk *const *kv, size_t n_keys, size_t len, ez_graph *out) {
  size_t n_edges = 0;
  for (size_t c = 0; c < n_keys; c++)
    if ((n_edges += kv[2 * c + 1]->u.seq.n) > len) return EZ_EPROTO; /* sets shared to blow up */
  ezi_strv *names = malloc((n_keys + n_edges + 1) * sizeof(*names));
  const ezi_pk **entry = malloc((n_keys + n_edges + 1) * sizeof(*entry));
  size_t *off = malloc((n_keys + n_edges + 1) * sizeof(*off));
  uint32_t *to = malloc((n_edges + 1) * sizeof(*to));
  int rc = EZ_ENOMEM;
  if (!names || !entry || !off || !to) goto done;
  size_t k = 0;
  for (size_t c = 0; c < n_keys; c++)
    names[k++] = view(kv[2 * c]);
  qsort(names, k, sizeof(*names), cmp_strv);
  rc = EZ_EPROTO;
  for (size_t i = 1; i < k; i++)
    if (cmp_strv(&names[i - 1], &names[i]) == 0) goto done; /* a dict has unique keys */
  for (size_t c = 0; c < n_keys; c++)
    for (size_t s = 0; s < kv[2 * c + 1]->u.seq.n; s++)
      names[k++] = view(kv[2 * c + 1]->u.seq.v[s]);
  qsort(names, k, sizeof(*names), cmp_strv);
  size_t n = 0;
  for (size_t i = 0; i < k; i++)
    if (n == 0 || cmp_strv(&names[n - 1], &names[i]) != 0) names[n++] = names[i];
  for (size_t i = 0; i < n; i++)
    entry[i] = NULL;
  for (size_t c = 0; c < n_keys; c++)
    entry[rank_of(names, n, view(kv[2 * c]))] = kv[2 * c + 1];
  size_t e = 0;
  for (size_t i = 0; i < n; i++) {
    off[i] = e;
    if (!entry[i]) continue;
    size_t s0 = e;
    for (size_t s = 0; s < entry[i]->u.seq.n; s++)
      to[e++] = rank_of(names, n, view(entry[i]->u.seq.v[s]));
    qsort(to + s0, e - s0, sizeof(*to), cmp_u32);
    size_t u = s0;
    for (size_t j = s0; j < e; j++)
      if (u == s0 || to[u - 1] != to[j]) to[u++] = to[j];
    e = u;
  }
  off[n] = e;
  rc = ezi_graph_build(out, n, names, off, to);
done:
  free(names);
  free(entry);
  free(off);
  free(to);
  return rc;
}

/* One edge's owners while decoding: views into the tree, NULL for the persistent owner. */
typedef struct edge_rec {
  const char *from, *to;
  size_t n, first; /* owners[first .. first + n) of the flat array */
} edge_rec;

static int cmp_owner(const void *x, const void *y) {
  const char *a = *(const char *const *)x, *b = *(const char *const *)y;
  if (!a || !b) return (a != NULL) - (b != NULL);
  return strcmp(a, b);
}

static int cmp_edge_rec(const void *x, const void *y) {
  const edge_rec *a = x, *b = y;
  int c = strcmp(a->from, b->from);
  return c ? c : strcmp(a->to, b->to);
}

static bool has_edge(const ez_graph *g, const char *from, const char *to) {
  const ez_graph_node *f = bsearch(from, g->nodes, g->n_nodes, sizeof(*g->nodes), cmp_topic);
  if (!f) return false;
  for (size_t lo = 0, hi = f->n_to; lo < hi;) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(f->to[mid], to);
    if (c == 0) return true;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return false;
}

/* Checks edge_owners against the decoded graph and packs it into one allocation. */
static int owners_of(const ezi_pk *eo, const ez_graph *g, size_t len, ezi_dag_owners *out) {
  size_t n = ezi_pk_len(eo), total = 0, edges = 0;
  if (!eo || eo->type != EZI_PK_DICT) return EZ_EPROTO;
  for (size_t i = 0; i < g->n_nodes; i++)
    edges += g->nodes[i].n_to;
  if (n != edges) return EZ_EPROTO; /* (with unique keys, all edges: checked below) */
  for (size_t i = 0; i < n; i++)
    if ((total += ezi_pk_len(ezi_pk_value(eo, i))) > len) return EZ_EPROTO; /* shared sets */
  edge_rec *r = malloc((n + 1) * sizeof(*r));
  const char **flat = malloc((total + 1) * sizeof(*flat));
  char(*uuids)[37] = malloc((total + 1) * sizeof(*uuids));
  int rc = EZ_ENOMEM;
  if (!r || !flat || !uuids) goto done;
  rc = EZ_EPROTO;
  size_t at = 0, bytes = 0;
  for (size_t i = 0; i < n; i++) {
    const ezi_pk *k = ezi_pk_key(eo, i), *v = ezi_pk_value(eo, i);
    if (!k || k->type != EZI_PK_TUPLE || ezi_pk_len(k) != 2 || !is_topic(ezi_pk_item(k, 0)) ||
        !is_topic(ezi_pk_item(k, 1)) || v->type != EZI_PK_SET || ezi_pk_len(v) == 0)
      goto done;
    r[i] = (edge_rec){ezi_pk_item(k, 0)->u.s.p, ezi_pk_item(k, 1)->u.s.p, ezi_pk_len(v), at};
    if (!has_edge(g, r[i].from, r[i].to)) goto done;
    bytes += strlen(r[i].from) + strlen(r[i].to) + 2;
    for (size_t j = 0; j < ezi_pk_len(v); j++, at++) {
      const ezi_pk *o = ezi_pk_item(v, j);
      if (o->type == EZI_PK_NONE)
        flat[at] = NULL;
      else if (ezi_pk_uuid_of(o, uuids[at]) == 0)
        flat[at] = uuids[at];
      else if (is_topic(o))
        flat[at] = o->u.s.p;
      else
        goto done;
      bytes += flat[at] ? strlen(flat[at]) + 1 : 0;
    }
    qsort(flat + r[i].first, r[i].n, sizeof(*flat), cmp_owner);
    for (size_t j = 1; j < r[i].n; j++)
      if (cmp_owner(&flat[r[i].first + j - 1], &flat[r[i].first + j]) == 0) goto done;
  }
  qsort(r, n, sizeof(*r), cmp_edge_rec);
  for (size_t i = 1; i < n; i++)
    if (cmp_edge_rec(&r[i - 1], &r[i]) == 0) goto done; /* a key twice */
  /* one block: edges, owner pointers, strings */
  size_t head = n * sizeof(ezi_dag_edge_own) + total * sizeof(char *);
  char *blk = malloc(head + bytes + 1);
  rc = EZ_ENOMEM;
  if (!blk) goto done;
  ezi_dag_edge_own *e = (ezi_dag_edge_own *)blk;
  const char **ptrs = (const char **)(blk + n * sizeof(ezi_dag_edge_own));
  char *str = blk + head;
  for (size_t i = 0; i < n; i++) {
    const char *src[2] = {r[i].from, r[i].to};
    const char *dst[2];
    for (int s = 0; s < 2; s++) {
      size_t l = strlen(src[s]) + 1;
      dst[s] = memcpy(str, src[s], l);
      str += l;
    }
    e[i] = (ezi_dag_edge_own){dst[0], dst[1], r[i].n, ptrs};
    for (size_t j = 0; j < r[i].n; j++) {
      const char *o = flat[r[i].first + j];
      if (o) {
        size_t l = strlen(o) + 1;
        o = memcpy(str, o, l);
        str += l;
      }
      *ptrs++ = o;
    }
  }
  *out = (ezi_dag_owners){.present = true, .n_edges = n, .edges = n ? e : NULL};
  if (!n) free(blk);
  rc = 0;
done:
  free(r);
  free(flat);
  free(uuids);
  return rc;
}

int ezi_dag_unpickle_owned(const uint8_t *buf, size_t len, ez_graph *out, ezi_dag_owners *owners) {
  *out = (ez_graph){0};
  if (owners) *owners = (ezi_dag_owners){0};
  if (!buf || len == 0 || len > MAX_INPUT) return EZ_EPROTO;
  ezi_pk_limits lim = {.max_input = MAX_INPUT, .max_str = EZ_MAX_CONTROL_STR, .max_depth = 16};
  ezi_pk_doc *doc;
  const ezi_pk *dag;
  int rc = ezi_pk_load(buf, len, &lim, &doc, &dag, NULL);
  if (rc) return rc == EZ_ENOMEM ? rc : EZ_EPROTO;
  rc = EZ_EPROTO;
  const ezi_pk *st = NULL, *graph = NULL, *eo = NULL;
  int proto = ezi_pk_doc_proto(doc);
  if ((proto != 4 && proto != 5) || !ezi_pk_is_class(dag, "ezmsg.core.dag", "DAG") ||
      dag->how != EZI_PK_NEWOBJ || ezi_pk_len(dag->u.o.args) || ezi_pk_len(dag->u.o.list) ||
      ezi_pk_len(dag->u.o.dict) || !(st = dag->u.o.state) || st->type != EZI_PK_DICT)
    goto done;
  for (size_t i = 0; i < ezi_pk_len(st); i++) {
    const char *k = ezi_pk_cstr_of(ezi_pk_key(st, i));
    const ezi_pk **slot = !k                          ? NULL
                          : !strcmp(k, "graph")       ? &graph
                          : !strcmp(k, "edge_owners") ? &eo
                                                      : NULL;
    if (!slot || *slot) goto done; /* an unknown or repeated attribute */
    *slot = ezi_pk_value(st, i);
  }
  ezi_pk *const *kv;
  size_t n_keys;
  if (!graph || graph_items(graph, &kv, &n_keys)) goto done;
  if ((rc = finish(kv, n_keys, len, out))) goto done;
  if (eo) {
    ezi_dag_owners o;
    if ((rc = owners_of(eo, out, len, &o))) goto done;
    if (owners)
      *owners = o;
    else
      ezi_dag_owners_free(&o);
  }
done:
  if (rc) ez_graph_free(out);
  ezi_pk_doc_free(doc);
  return rc;
}

int ezi_dag_unpickle(const uint8_t *buf, size_t len, ez_graph *out) {
  return ezi_dag_unpickle_owned(buf, len, out, NULL);
}

void ezi_dag_owners_free(ezi_dag_owners *owners) {
  if (!owners) return;
  free(owners->edges);
  *owners = (ezi_dag_owners){0};
}
