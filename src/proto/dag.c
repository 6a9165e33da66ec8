/* The topic graph: nodes in slots found through an open-addressing hash table, out-edges as
 * arrays of slot indices with each edge's owners alongside, in-edges as a count (enough for
 * pruning). Cycle checks and reachability are a breadth-first search over scratch arrays kept as
 * large as the slot array. */
#include "proto/dag.h"

#include <stdlib.h>
#include <string.h>

/* Who holds an edge: the persistent owner (CONNECT) and sessions, by their strings. */
typedef struct owners {
  bool persistent;
  uint32_t n, cap;
  char **s; /* malloc'd strings */
} owners;

typedef struct node {
  char *name; /* NULL: a free slot */
  size_t len;
  uint64_t hash;
  uint32_t *out; /* targets (slot indices), unordered */
  owners *own;   /* own[k]: the owners of the edge to out[k] (never none) */
  uint32_t n_out, cap_out;
  uint32_t *in; /* sources (slot indices), unordered: for ezi_dag_upstream */
  uint32_t n_in, cap_in;
} node;

struct ezi_dag {
  node *nodes;
  uint32_t cap;     /* room in nodes, free_slots, queue and seen */
  uint32_t n_slots; /* slots ever used (live or free) */
  uint32_t n_live;  /* nodes */
  uint32_t *free_slots;
  uint32_t n_free;
  uint32_t *table; /* slot + 1, 0 = empty; size tcap, a power of two */
  size_t tcap;
  uint32_t *queue; /* BFS scratch */
  uint8_t *seen;   /* all zero between calls */
  size_t n_edges;
};

static uint64_t hash_bytes(const char *s, size_t len) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < len; i++) {
    h ^= (unsigned char)s[i];
    h *= 1099511628211ull;
  }
  return h ^ (h >> 29);
}

ezi_dag *ezi_dag_new(void) { return calloc(1, sizeof(ezi_dag)); }

static void free_owners(owners *o) {
  for (uint32_t i = 0; i < o->n; i++)
    free(o->s[i]);
  free(o->s);
  *o = (owners){0};
}

static void free_node_parts(node *nd) {
  for (uint32_t k = 0; k < nd->n_out; k++)
    free_owners(&nd->own[k]);
  free(nd->name);
  free(nd->out);
  free(nd->own);
  free(nd->in);
}

void ezi_dag_free(ezi_dag *d) {
  if (!d) return;
  for (uint32_t i = 0; i < d->n_slots; i++) {
    free_node_parts(&d->nodes[i]);
  }
  free(d->nodes);
  free(d->free_slots);
  free(d->table);
  free(d->queue);
  free(d->seen);
  free(d);
}

/* Table position holding the node named s, or of the empty entry where it would go. */
static size_t probe(const ezi_dag *d, const char *s, size_t len, uint64_t h) {
  size_t mask = d->tcap - 1;
  for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
    uint32_t e = d->table[i];
    if (e == 0) return i;
    const node *nd = &d->nodes[e - 1];
    if (nd->hash == h && nd->len == len && memcmp(nd->name, s, len) == 0) return i;
  }
}

/* Slot of the node named s, or -1. */
static int64_t find(const ezi_dag *d, const char *s, size_t len, uint64_t h) {
  if (d->tcap == 0) return -1;
  uint32_t e = d->table[probe(d, s, len, h)];
  return e ? (int64_t)e - 1 : -1;
}

/* Makes room for `extra` more nodes (slots, scratch and table). Growth alone never changes the
 * graph, so a failure half-way is harmless. */
static int reserve(ezi_dag *d, uint32_t extra) {
  if (d->n_live > UINT32_MAX / 4 - extra) return EZ_ENOMEM;
  uint32_t need = d->n_slots + extra;
  if (need > d->cap) {
    uint32_t nc = d->cap ? d->cap : 16;
    while (nc < need)
      nc *= 2;
    node *nn = realloc(d->nodes, (size_t)nc * sizeof(*nn));
    if (!nn) return EZ_ENOMEM;
    d->nodes = nn;
    uint32_t *fs = realloc(d->free_slots, (size_t)nc * sizeof(*fs));
    if (!fs) return EZ_ENOMEM;
    d->free_slots = fs;
    uint32_t *q = realloc(d->queue, (size_t)nc * sizeof(*q));
    if (!q) return EZ_ENOMEM;
    d->queue = q;
    uint8_t *sn = realloc(d->seen, nc);
    if (!sn) return EZ_ENOMEM;
    memset(sn + d->cap, 0, nc - d->cap);
    d->seen = sn;
    d->cap = nc;
  }
  size_t want = 2 * ((size_t)d->n_live + extra);
  if (want > d->tcap) {
    size_t tc = d->tcap ? d->tcap : 32;
    while (tc < want)
      tc *= 2;
    uint32_t *old = d->table;
    size_t oldcap = d->tcap;
    d->table = calloc(tc, sizeof(uint32_t));
    if (!d->table) {
      d->table = old;
      return EZ_ENOMEM;
    }
    d->tcap = tc;
    for (size_t i = 0; i < oldcap; i++) {
      if (old[i] == 0) continue;
      const node *nd = &d->nodes[old[i] - 1];
      d->table[probe(d, nd->name, nd->len, nd->hash)] = old[i];
    }
    free(old);
  }
  return 0;
}

/* Inserts a prepared node (name already allocated) into a slot; room was reserved. */
static uint32_t insert_node(ezi_dag *d, char *name, size_t len, uint64_t h, uint32_t *out,
                            owners *own, uint32_t cap_out, uint32_t *in, uint32_t cap_in) {
  uint32_t slot = d->n_free ? d->free_slots[--d->n_free] : d->n_slots++;
  d->nodes[slot] = (node){.name = name,
                          .len = len,
                          .hash = h,
                          .out = out,
                          .own = own,
                          .cap_out = cap_out,
                          .in = in,
                          .cap_in = cap_in};
  d->table[probe(d, name, len, h)] = slot + 1;
  d->n_live++;
  return slot;
}

/* Removes the node in `slot` (backward-shift deletion keeps probe chains intact). */
static void delete_node(ezi_dag *d, uint32_t slot) {
  node *nd = &d->nodes[slot];
  size_t mask = d->tcap - 1;
  size_t i = probe(d, nd->name, nd->len, nd->hash);
  for (size_t j = (i + 1) & mask; d->table[j] != 0; j = (j + 1) & mask) {
    size_t home = (size_t)d->nodes[d->table[j] - 1].hash & mask;
    /* Move entry j back to the hole at i unless its home lies cyclically in (i, j]. */
    bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (stays) continue;
    d->table[i] = d->table[j];
    i = j;
  }
  d->table[i] = 0;
  free_node_parts(nd);
  *nd = (node){0};
  d->free_slots[d->n_free++] = slot;
  d->n_live--;
}

/* Breadth-first search from slot a for slot b over the scratch arrays. */
static bool reach(const ezi_dag *d, uint32_t a, uint32_t b) {
  uint32_t *q = d->queue;
  uint8_t *seen = d->seen;
  size_t head = 0, tail = 0;
  bool found = a == b;
  q[tail++] = a;
  seen[a] = 1;
  while (!found && head < tail) {
    const node *nd = &d->nodes[q[head++]];
    for (uint32_t k = 0; k < nd->n_out; k++) {
      uint32_t t = nd->out[k];
      if (t == b) {
        found = true;
        break;
      }
      if (!seen[t]) {
        seen[t] = 1;
        q[tail++] = t;
      }
    }
  }
  for (size_t k = 0; k < tail; k++)
    seen[q[k]] = 0;
  return found;
}

/* Position of the edge to t in nd's out-edges, or -1. */
static int64_t edge_at(const node *nd, uint32_t t) {
  for (uint32_t k = 0; k < nd->n_out; k++)
    if (nd->out[k] == t) return k;
  return -1;
}

static bool owner_has(const owners *o, const char *owner) {
  if (!owner) return o->persistent;
  for (uint32_t i = 0; i < o->n; i++)
    if (strcmp(o->s[i], owner) == 0) return true;
  return false;
}

/* Adds owner (not there yet). */
static int owner_add(owners *o, const char *owner) {
  if (!owner) return o->persistent = true, 0;
  if (o->n == o->cap) {
    if (o->cap > UINT32_MAX / 2) return EZ_ENOMEM;
    uint32_t nc = o->cap ? o->cap * 2 : 2;
    char **ns = realloc(o->s, (size_t)nc * sizeof(*ns));
    if (!ns) return EZ_ENOMEM;
    o->s = ns;
    o->cap = nc;
  }
  size_t n = strlen(owner);
  char *c = malloc(n + 1);
  if (!c) return EZ_ENOMEM;
  o->s[o->n++] = memcpy(c, owner, n + 1);
  return 0;
}

static void owner_remove(owners *o, const char *owner) {
  if (!owner) {
    o->persistent = false;
    return;
  }
  for (uint32_t i = 0; i < o->n; i++) {
    if (strcmp(o->s[i], owner) != 0) continue;
    free(o->s[i]);
    o->s[i] = o->s[--o->n];
    return;
  }
}

/* Room for one more out-edge of nd (targets and owners grow together). */
static int grow_out(node *nd) {
  if (nd->n_out < nd->cap_out) return 0;
  if (nd->cap_out > UINT32_MAX / 2) return EZ_ENOMEM;
  uint32_t nc = nd->cap_out ? nd->cap_out * 2 : 4;
  uint32_t *o = realloc(nd->out, (size_t)nc * sizeof(*o));
  if (!o) return EZ_ENOMEM;
  nd->out = o;
  owners *w = realloc(nd->own, (size_t)nc * sizeof(*w));
  if (!w) return EZ_ENOMEM;
  nd->own = w;
  nd->cap_out = nc;
  return 0;
}

/* Room for one more in-edge of nd. */
static int grow_in(node *nd) {
  if (nd->n_in < nd->cap_in) return 0;
  if (nd->cap_in > UINT32_MAX / 2) return EZ_ENOMEM;
  uint32_t nc = nd->cap_in ? nd->cap_in * 2 : 4;
  uint32_t *p = realloc(nd->in, (size_t)nc * sizeof(*p));
  if (!p) return EZ_ENOMEM;
  nd->in = p;
  nd->cap_in = nc;
  return 0;
}

int ezi_dag_add_edge_owned(ezi_dag *d, const char *from, const char *to, const char *owner,
                           bool *changed) {
  if (changed) *changed = false;
  if (!d || !from || !to) return EZ_EINVAL;
  if (strcmp(from, to) == 0) return EZ_ECYCLIC;
  size_t lf = strlen(from), lt = strlen(to);
  uint64_t hf = hash_bytes(from, lf), ht = hash_bytes(to, lt);
  int64_t fi = find(d, from, lf, hf), ti = find(d, to, lt, ht);
  if (fi >= 0 && ti >= 0) {
    int64_t k = edge_at(&d->nodes[fi], (uint32_t)ti);
    if (k >= 0) { /* the edge exists: at most a new owner, no change of topology */
      owners *o = &d->nodes[fi].own[k];
      return owner_has(o, owner) ? 0 : owner_add(o, owner);
    }
    if (reach(d, (uint32_t)ti, (uint32_t)fi)) return EZ_ECYCLIC;
  }
  /* Allocate everything first, then commit: on failure nothing has changed. */
  int rc = reserve(d, (fi < 0) + (ti < 0));
  if (rc) return rc;
  char *nf = NULL, *nt = NULL;
  uint32_t *fout = NULL, *tin = NULL;
  owners *fown = NULL, first = {0};
  uint32_t fcap = 0;
  if (fi < 0) {
    nf = malloc(lf + 1);
    fout = malloc(4 * sizeof(uint32_t));
    fown = malloc(4 * sizeof(owners));
    fcap = 4;
  } else if ((rc = grow_out(&d->nodes[fi]))) {
    return rc;
  }
  if (ti < 0) {
    nt = malloc(lt + 1);
    tin = malloc(4 * sizeof(uint32_t));
  } else if ((rc = grow_in(&d->nodes[ti]))) {
    free(nf);
    free(fout);
    free(fown);
    return rc;
  }
  if ((fi < 0 && (!nf || !fout || !fown)) || (ti < 0 && (!nt || !tin)) ||
      owner_add(&first, owner)) {
    free(nf);
    free(nt);
    free(tin);
    free(fout);
    free(fown);
    free_owners(&first);
    return EZ_ENOMEM;
  }
  if (fi < 0) fi = insert_node(d, memcpy(nf, from, lf + 1), lf, hf, fout, fown, fcap, NULL, 0);
  if (ti < 0) ti = insert_node(d, memcpy(nt, to, lt + 1), lt, ht, NULL, NULL, 0, tin, 4);
  node *fn = &d->nodes[fi], *tn = &d->nodes[ti];
  fn->own[fn->n_out] = first;
  fn->out[fn->n_out++] = (uint32_t)ti;
  tn->in[tn->n_in++] = (uint32_t)fi;
  d->n_edges++;
  if (changed) *changed = true;
  return 0;
}

int ezi_dag_add_edge(ezi_dag *d, const char *from, const char *to) {
  return ezi_dag_add_edge_owned(d, from, to, NULL, NULL);
}

int ezi_dag_remove_edge_owned(ezi_dag *d, const char *from, const char *to, const char *owner,
                              bool *changed) {
  if (changed) *changed = false;
  if (!d || !from || !to) return EZ_EINVAL;
  size_t lf = strlen(from), lt = strlen(to);
  int64_t fi = find(d, from, lf, hash_bytes(from, lf));
  int64_t ti = find(d, to, lt, hash_bytes(to, lt));
  if (fi < 0 || ti < 0) return 0;
  node *fn = &d->nodes[fi];
  int64_t k = edge_at(fn, (uint32_t)ti);
  if (k < 0 || !owner_has(&fn->own[k], owner)) return 0;
  owner_remove(&fn->own[k], owner);
  if (fn->own[k].persistent || fn->own[k].n) return 0; /* still owned: no change */
  free_owners(&fn->own[k]);
  fn->out[k] = fn->out[fn->n_out - 1];
  fn->own[k] = fn->own[fn->n_out - 1];
  fn->n_out--;
  node *tn = &d->nodes[ti];
  for (uint32_t j = 0; j < tn->n_in; j++)
    if (tn->in[j] == (uint32_t)fi) {
      tn->in[j] = tn->in[--tn->n_in];
      break;
    }
  d->n_edges--;
  if (changed) *changed = true;
  /* Only the two ends can have lost their last edge (no other node is ever edgeless). */
  if (fn->n_out == 0 && fn->n_in == 0) delete_node(d, (uint32_t)fi);
  tn = &d->nodes[ti];
  if (tn->name && tn->n_out == 0 && tn->n_in == 0) delete_node(d, (uint32_t)ti);
  return 0;
}

int ezi_dag_remove_edge(ezi_dag *d, const char *from, const char *to) {
  return ezi_dag_remove_edge_owned(d, from, to, NULL, NULL);
}

int ezi_dag_remove_owner(ezi_dag *d, const char *owner,
                         void (*removed)(void *user, const char *from, const char *to),
                         void *user) {
  if (!d) return EZ_EINVAL;
  /* First the owner's edges, copied (removing one may free its nodes' names). */
  size_t n = 0, cap = 0;
  char **pairs = NULL; /* from, to, from, to, ... */
  int rc = 0;
  for (uint32_t i = 0; i < d->n_slots && !rc; i++) {
    const node *nd = &d->nodes[i];
    for (uint32_t k = 0; nd->name && k < nd->n_out && !rc; k++) {
      if (!owner_has(&nd->own[k], owner)) continue;
      if (n + 2 > cap) {
        size_t nc = cap ? cap * 2 : 16;
        char **np = realloc(pairs, nc * sizeof(*np));
        if (!np) {
          rc = EZ_ENOMEM;
          break;
        }
        pairs = np;
        cap = nc;
      }
      pairs[n] = strdup(nd->name);
      pairs[n + 1] = strdup(d->nodes[nd->out[k]].name);
      n += 2;
      if (!pairs[n - 2] || !pairs[n - 1]) rc = EZ_ENOMEM;
    }
  }
  for (size_t i = 0; i < n && !rc; i += 2) {
    bool changed;
    ezi_dag_remove_edge_owned(d, pairs[i], pairs[i + 1], owner, &changed);
    if (changed && removed) removed(user, pairs[i], pairs[i + 1]);
  }
  for (size_t i = 0; i < n; i++)
    free(pairs[i]);
  free(pairs);
  return rc;
}

size_t ezi_dag_edge_owners(const ezi_dag *d, const char *from, const char *to,
                           const char **owners_out, size_t cap, bool *persistent) {
  if (persistent) *persistent = false;
  if (!d || !from || !to) return 0;
  size_t lf = strlen(from), lt = strlen(to);
  int64_t fi = find(d, from, lf, hash_bytes(from, lf));
  int64_t ti = find(d, to, lt, hash_bytes(to, lt));
  if (fi < 0 || ti < 0) return 0;
  int64_t k = edge_at(&d->nodes[fi], (uint32_t)ti);
  if (k < 0) return 0;
  const owners *o = &d->nodes[fi].own[k];
  if (persistent) *persistent = o->persistent;
  for (uint32_t i = 0; i < o->n && i < cap; i++)
    owners_out[i] = o->s[i];
  return o->n;
}

bool ezi_dag_reaches(const ezi_dag *d, const char *a, const char *b) {
  if (!a || !b) return false;
  if (strcmp(a, b) == 0) return true;
  if (!d) return false;
  size_t la = strlen(a), lb = strlen(b);
  int64_t ai = find(d, a, la, hash_bytes(a, la));
  if (ai < 0) return false;
  int64_t bi = find(d, b, lb, hash_bytes(b, lb));
  if (bi < 0) return false;
  return reach(d, (uint32_t)ai, (uint32_t)bi);
}

/* Breadth-first from topic along the in-edges (up) or the out-edges; fn for each topic reached. */
static void walk(const ezi_dag *d, const char *topic, bool up,
                 void (*fn)(void *user, const char *topic), void *user) {
  if (!topic) return;
  size_t len = strlen(topic);
  int64_t t = d ? find(d, topic, len, hash_bytes(topic, len)) : -1;
  if (t < 0) {
    fn(user, topic);
    return;
  }
  uint32_t *q = d->queue;
  uint8_t *seen = d->seen;
  size_t head = 0, tail = 0;
  q[tail++] = (uint32_t)t;
  seen[t] = 1;
  while (head < tail) {
    const node *nd = &d->nodes[q[head++]];
    const uint32_t *next = up ? nd->in : nd->out;
    uint32_t n = up ? nd->n_in : nd->n_out;
    for (uint32_t k = 0; k < n; k++)
      if (!seen[next[k]]) {
        seen[next[k]] = 1;
        q[tail++] = next[k];
      }
  }
  for (size_t k = 0; k < tail; k++) {
    seen[q[k]] = 0;
    fn(user, d->nodes[q[k]].name);
  }
}

void ezi_dag_upstream(const ezi_dag *d, const char *topic,
                      void (*fn)(void *user, const char *topic), void *user) {
  walk(d, topic, true, fn, user);
}

void ezi_dag_downstream(const ezi_dag *d, const char *topic,
                        void (*fn)(void *user, const char *topic), void *user) {
  walk(d, topic, false, fn, user);
}

size_t ezi_dag_num_nodes(const ezi_dag *d) { return d ? d->n_live : 0; }

bool ezi_utf8_valid(const char *str, size_t len) {
  const unsigned char *s = (const unsigned char *)str;
  for (size_t i = 0; i < len;) {
    unsigned c = s[i];
    size_t n;
    unsigned lo = 0x80, hi = 0xbf; /* range of the first continuation byte */
    if (c < 0x80)
      n = 0;
    else if (c >= 0xc2 && c <= 0xdf)
      n = 1;
    else if (c >= 0xe0 && c <= 0xef)
      n = 2, lo = c == 0xe0 ? 0xa0 : 0x80; /* surrogates pass */
    else if (c >= 0xf0 && c <= 0xf4)
      n = 3, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    else
      return false;
    if (n > len - i - 1) return false;
    for (size_t k = 1; k <= n; k++) {
      unsigned b = s[i + k];
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xbf)) return false;
    }
    i += n + 1;
  }
  return true;
}

static int cmp_node_ptr(const void *x, const void *y) {
  const node *a = *(const node *const *)x, *b = *(const node *const *)y;
  size_t n = a->len < b->len ? a->len : b->len;
  int c = memcmp(a->name, b->name, n);
  return c ? c : (a->len > b->len) - (a->len < b->len);
}

static int cmp_u32(const void *x, const void *y) {
  uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
  return (a > b) - (a < b);
}

int ezi_dag_export(const ezi_dag *d, ez_graph *out) {
  *out = (ez_graph){0};
  if (!d || d->n_live == 0) return 0;
  size_t n = d->n_live;
  const node **order = malloc(n * sizeof(*order));
  uint32_t *rank = malloc((size_t)d->n_slots * sizeof(*rank));
  ezi_strv *names = malloc(n * sizeof(*names));
  size_t *off = malloc((n + 1) * sizeof(*off));
  uint32_t *to = malloc((d->n_edges ? d->n_edges : 1) * sizeof(*to));
  int rc = EZ_ENOMEM;
  if (!order || !rank || !names || !off || !to) goto done;
  size_t k = 0;
  for (uint32_t i = 0; i < d->n_slots; i++)
    if (d->nodes[i].name) order[k++] = &d->nodes[i];
  qsort(order, n, sizeof(*order), cmp_node_ptr);
  for (size_t i = 0; i < n; i++) {
    rank[order[i] - d->nodes] = (uint32_t)i;
    names[i] = (ezi_strv){order[i]->name, order[i]->len};
  }
  size_t e = 0;
  for (size_t i = 0; i < n; i++) {
    off[i] = e;
    for (uint32_t j = 0; j < order[i]->n_out; j++)
      to[e + j] = rank[order[i]->out[j]];
    qsort(to + e, order[i]->n_out, sizeof(*to), cmp_u32);
    e += order[i]->n_out;
  }
  off[n] = e;
  rc = ezi_graph_build(out, n, names, off, to);
done:
  free(order);
  free(rank);
  free(names);
  free(off);
  free(to);
  return rc;
}
