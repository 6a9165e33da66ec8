/* The public topic-graph struct: its single-block allocation (ezi_graph_build / ez_graph_free)
 * and its text renderings (graphviz, mermaid), with topics clustered by '/' path segments. */
#include "proto/dag.h"
#include "base/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ez_graph_free(ez_graph *g) {
  if (!g) return;
  free(g->nodes); /* the node array heads the one block holding everything */
  *g = (ez_graph){0};
}

int ezi_graph_build(ez_graph *out, size_t n, const ezi_strv *names, const size_t *off,
                    const uint32_t *to) {
  *out = (ez_graph){0};
  if (n == 0) return 0;
  size_t e = off[n], bytes = 0;
  for (size_t i = 0; i < n; i++) {
    if (names[i].len >= SIZE_MAX / 2 - bytes) return EZ_ENOMEM;
    bytes += names[i].len + 1;
  }
  if (n > SIZE_MAX / 4 / sizeof(ez_graph_node) || e > SIZE_MAX / 4 / sizeof(char *))
    return EZ_ENOMEM;
  size_t head = n * sizeof(ez_graph_node) + e * sizeof(char *);
  if (bytes > SIZE_MAX - head) return EZ_ENOMEM;
  char *block = malloc(head + bytes);
  if (!block) return EZ_ENOMEM;
  ez_graph_node *nodes = (ez_graph_node *)(void *)block;
  char **tos = (char **)(void *)(block + n * sizeof(ez_graph_node));
  char *str = block + head;
  for (size_t i = 0; i < n; i++) {
    memcpy(str, names[i].p, names[i].len);
    str[names[i].len] = '\0';
    nodes[i].topic = str;
    str += names[i].len + 1;
  }
  for (size_t i = 0; i < n; i++) {
    nodes[i].n_to = off[i + 1] - off[i];
    nodes[i].to = nodes[i].n_to ? tos + off[i] : NULL;
    for (size_t k = off[i]; k < off[i + 1]; k++)
      tos[k] = nodes[to[k]].topic;
  }
  out->n_nodes = n;
  out->nodes = nodes;
  return 0;
}

/* ---- text output ---------------------------------------------------------------------------- */

typedef struct sbuf {
  char *p;
  size_t len, cap;
  bool err;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
  if (b->err) return;
  if (n >= b->cap - b->len) {
    size_t nc = b->cap ? b->cap : 256;
    while (nc - b->len <= n) {
      if (nc > SIZE_MAX / 2) {
        b->err = true;
        return;
      }
      nc *= 2;
    }
    char *np = realloc(b->p, nc);
    if (!np) {
      b->err = true;
      return;
    }
    b->p = np;
    b->cap = nc;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_printf(sbuf *b, const char *fmt, ...) EZI_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...) {
  char tmp[128];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof(tmp))
    b->err = true;
  else
    sb_put(b, tmp, (size_t)n);
}

enum { MAX_CLUSTER_DEPTH = 16 };

static void indent(sbuf *b, size_t depth) {
  static const char sp[] = "                                    ";
  sb_put(b, sp, 2 * (depth + 1 < MAX_CLUSTER_DEPTH + 1 ? depth + 1 : MAX_CLUSTER_DEPTH + 1));
}

/* A quoted graphviz ID: `pre` then s[0..n), quotes and backslashes escaped, line breaks as \n
 * and \r. */
static void put_dot_id(sbuf *b, const char *pre, const char *s, size_t n) {
  sb_put(b, "\"", 1);
  sb_puts(b, pre);
  for (size_t i = 0; i < n; i++) {
    const char *esc = s[i] == '"'    ? "\\\""
                      : s[i] == '\\' ? "\\\\"
                      : s[i] == '\n' ? "\\n"
                      : s[i] == '\r' ? "\\r"
                                     : NULL;
    if (esc)
      sb_puts(b, esc);
    else
      sb_put(b, s + i, 1);
  }
  sb_put(b, "\"", 1);
}

/* A quoted mermaid label: characters mermaid would interpret become entity codes. */
static void put_mmd_quoted(sbuf *b, const char *s, size_t n) {
  sb_put(b, "\"", 1);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    const char *esc = c == '"'   ? "#quot;"
                      : c == '#' ? "#35;"
                      : c == '<' ? "#lt;"
                      : c == '>' ? "#gt;"
                      : c < 0x20 ? " "
                                 : NULL;
    if (esc)
      sb_puts(b, esc);
    else
      sb_put(b, s + i, 1);
  }
  sb_put(b, "\"", 1);
}

static int cmp_strv(const void *x, const void *y) {
  const ezi_strv *a = x, *b = y;
  size_t n = a->len < b->len ? a->len : b->len;
  int c = memcmp(a->p, b->p, n);
  return c ? c : (a->len > b->len) - (a->len < b->len);
}

static int cmp_pair(const void *x, const void *y) {
  const size_t *a = x, *b = y;
  if (a[0] != b[0]) return a[0] < b[0] ? -1 : 1;
  return (a[1] > b[1]) - (a[1] < b[1]);
}

static size_t id_of(const ezi_strv *all, size_t m, const char *s) {
  ezi_strv key = {s, strlen(s)};
  const ezi_strv *f = bsearch(&key, all, m, sizeof(*all), cmp_strv);
  return (size_t)(f - all);
}

/* Renders the sorted, unique topics all[0..m) and the sorted edges (id pairs). Topics sharing a
 * directory ("/a/b/" in "/a/b/c") are grouped in nested clusters; the prefix groups of a sorted
 * list are contiguous, so one pass with a stack of open clusters suffices. */
static void render(sbuf *b, bool dot, const ezi_strv *all, size_t m, const size_t *pairs,
                   size_t np) {
  sb_puts(b, dot ? "digraph EZ {\n  rankdir=\"LR\";\n" : "flowchart LR\n");
  size_t open[MAX_CLUSTER_DEPTH]; /* prefix lengths of the open clusters (of the current name) */
  size_t depth = 0, n_clusters = 0;
  for (size_t i = 0; i < m; i++) {
    const char *s = all[i].p;
    size_t len = all[i].len;
    while (depth > 0) {
      size_t pl = open[depth - 1];
      if (len > pl && s[pl] == '/' && memcmp(s, all[i - 1].p, pl) == 0) break;
      depth--;
      indent(b, depth);
      sb_puts(b, dot ? "}\n" : "end\n");
    }
    size_t seg = depth ? open[depth - 1] + 1 : 0;
    for (size_t p = seg; p < len && depth < MAX_CLUSTER_DEPTH; p++) {
      if (s[p] != '/') continue;
      if (p > seg) { /* a non-empty directory segment s[seg..p) opens a cluster */
        indent(b, depth);
        if (dot) {
          sb_puts(b, "subgraph ");
          put_dot_id(b, "cluster_", s, p);
          sb_puts(b, " {\n");
          indent(b, depth + 1);
          sb_puts(b, "cluster=true;\n");
          indent(b, depth + 1);
          sb_puts(b, "label=");
          put_dot_id(b, "", s + seg, p - seg);
          sb_puts(b, ";\n");
        } else {
          sb_printf(b, "subgraph c%zu [", n_clusters);
          put_mmd_quoted(b, s + seg, p - seg);
          sb_puts(b, "]\n");
        }
        n_clusters++;
        open[depth++] = p;
      }
      seg = p + 1;
    }
    indent(b, depth);
    if (dot) {
      put_dot_id(b, "", s, len);
      sb_puts(b, ";\n");
    } else {
      sb_printf(b, "n%zu[", i);
      put_mmd_quoted(b, s, len);
      sb_puts(b, "]\n");
    }
  }
  while (depth > 0) {
    depth--;
    indent(b, depth);
    sb_puts(b, dot ? "}\n" : "end\n");
  }
  for (size_t k = 0; k < np; k++) {
    const size_t *e = pairs + 2 * k;
    indent(b, 0);
    if (dot) {
      put_dot_id(b, "", all[e[0]].p, all[e[0]].len);
      sb_puts(b, " -> ");
      put_dot_id(b, "", all[e[1]].p, all[e[1]].len);
      sb_puts(b, ";\n");
    } else {
      sb_printf(b, "n%zu --> n%zu\n", e[0], e[1]);
    }
  }
  if (dot) sb_puts(b, "}\n");
}

char *ez_graph_format(const ez_graph *g, const char *fmt) {
  if (!g || !fmt) return NULL;
  bool dot = strcmp(fmt, "graphviz") == 0;
  if (!dot && strcmp(fmt, "mermaid") != 0) return NULL;
  /* Any graph is accepted (unsorted, targets that are not nodes): collect every topic. */
  size_t m = 0, ne = 0;
  for (size_t i = 0; i < g->n_nodes; i++) {
    if (!g->nodes[i].topic) continue;
    m++;
    for (size_t k = 0; k < g->nodes[i].n_to; k++)
      ne += g->nodes[i].to[k] != NULL;
  }
  ezi_strv *all = malloc((m + ne + 1) * sizeof(*all));
  size_t *pairs = malloc((2 * ne + 1) * sizeof(*pairs));
  sbuf b = {0};
  if (!all || !pairs) goto fail;
  size_t k = 0;
  for (size_t i = 0; i < g->n_nodes; i++) {
    const ez_graph_node *nd = &g->nodes[i];
    if (!nd->topic) continue;
    all[k++] = (ezi_strv){nd->topic, strlen(nd->topic)};
    for (size_t j = 0; j < nd->n_to; j++)
      if (nd->to[j]) all[k++] = (ezi_strv){nd->to[j], strlen(nd->to[j])};
  }
  qsort(all, k, sizeof(*all), cmp_strv);
  m = 0;
  for (size_t i = 0; i < k; i++)
    if (m == 0 || cmp_strv(&all[m - 1], &all[i]) != 0) all[m++] = all[i];
  size_t np = 0;
  for (size_t i = 0; i < g->n_nodes; i++) {
    const ez_graph_node *nd = &g->nodes[i];
    if (!nd->topic) continue;
    size_t src = id_of(all, m, nd->topic);
    for (size_t j = 0; j < nd->n_to; j++) {
      if (!nd->to[j]) continue;
      pairs[2 * np] = src;
      pairs[2 * np + 1] = id_of(all, m, nd->to[j]);
      np++;
    }
  }
  qsort(pairs, np, 2 * sizeof(*pairs), cmp_pair);
  size_t u = 0;
  for (size_t i = 0; i < np; i++)
    if (u == 0 || cmp_pair(pairs + 2 * (u - 1), pairs + 2 * i) != 0) {
      pairs[2 * u] = pairs[2 * i];
      pairs[2 * u + 1] = pairs[2 * i + 1];
      u++;
    }
  render(&b, dot, all, m, pairs, u);
  if (b.err) goto fail;
  free(all);
  free(pairs);
  return b.p;
fail:
  free(all);
  free(pairs);
  free(b.p);
  return NULL;
}
