/* The graph view's derived parts: order, topics, rates and processes (gvbuild.h). */
#include "gvbuild.h"

#include <stdlib.h>
#include <string.h>

static int cmp_str(const char *a, const char *b) { return strcmp(a ? a : "", b ? b : ""); }

static int cmp_i64(int64_t a, int64_t b) { return a < b ? -1 : a > b; }

/* ---- order --------------------------------------------------------------------------------- */

/* qsort_r comparators of indices into the view `arg`. */
static int cmp_pub_ix(const void *a, const void *b, void *arg) {
  const gv *v = arg;
  const gv_pub *x = &v->pubs[*(const size_t *)a], *y = &v->pubs[*(const size_t *)b];
  int r = cmp_str(x->topic, y->topic);
  if (!r) r = cmp_i64(x->pid, y->pid);
  return r ? r : cmp_str(x->id, y->id);
}

static int cmp_sub_ix(const void *a, const void *b, void *arg) {
  const gv *v = arg;
  const gv_sub *x = &v->subs[*(const size_t *)a], *y = &v->subs[*(const size_t *)b];
  int r = cmp_str(x->topic, y->topic);
  if (!r) r = cmp_str(x->handle, y->handle);
  if (!r) r = cmp_i64(x->pid, y->pid);
  return r ? r : cmp_str(x->id, y->id);
}

/* Reorders arr (n elements of `size` bytes) by the permutation `order` and returns the inverse
 * (old index -> new index), or NULL without memory. */
static size_t *permute(void *arr, size_t n, size_t size, const size_t *order) {
  char *tmp = malloc(n * size + 1);
  size_t *inv = malloc((n + 1) * sizeof *inv);
  if (!tmp || !inv) {
    free(tmp);
    free(inv);
    return NULL;
  }
  for (size_t i = 0; i < n; i++) {
    memcpy(tmp + i * size, (char *)arr + order[i] * size, size);
    inv[order[i]] = i;
  }
  if (n) memcpy(arr, tmp, n * size);
  free(tmp);
  return inv;
}

static size_t *sorted_order(size_t n, int (*cmp)(const void *, const void *, void *), gv *v) {
  size_t *o = malloc((n + 1) * sizeof *o);
  if (!o) return NULL;
  for (size_t i = 0; i < n; i++)
    o[i] = i;
  qsort_r(o, n, sizeof *o, cmp, v);
  return o;
}

void gvb_sort(gvb *b) {
  gv *v = b->v;
  size_t *po = sorted_order(v->n_pubs, cmp_pub_ix, v), *so = sorted_order(v->n_subs, cmp_sub_ix, v);
  size_t *pinv = po ? permute(v->pubs, v->n_pubs, sizeof *v->pubs, po) : NULL;
  size_t *sinv = so ? permute(v->subs, v->n_subs, sizeof *v->subs, so) : NULL;
  if (pinv && sinv) {
    for (size_t i = 0; i < v->n_chans; i++) {
      gv_chan *c = &v->chans[i];
      if (c->pub_ix != GV_NONE) c->pub_ix = pinv[c->pub_ix];
      for (size_t k = 0; k < c->n_subs; k++)
        c->subs[k] = sinv[c->subs[k]];
    }
  } else {
    b->err = EZ_ENOMEM;
  }
  free(po);
  free(so);
  free(pinv);
  free(sinv);
}

/* ---- topics -------------------------------------------------------------------------------- */

static int cmp_pstr(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static size_t topic_ix(const gv *v, const char *name) {
  if (!name) return GV_NONE;
  const gv_topic *t = gv_find_topic(v, name);
  return t ? (size_t)(t - v->topics) : GV_NONE;
}

void gvb_topics(gvb *b, const ez_graph *dag) {
  gv *v = b->v;
  size_t nd = dag ? dag->n_nodes : 0, cap = nd + v->n_pubs + v->n_subs, n = 0;
  const char **names = malloc((cap + 1) * sizeof *names);
  if (!names) {
    b->err = EZ_ENOMEM;
    return;
  }
  for (size_t i = 0; i < nd; i++)
    names[n++] = dag->nodes[i].topic;
  for (size_t i = 0; i < v->n_pubs; i++)
    if (v->pubs[i].topic) names[n++] = v->pubs[i].topic;
  for (size_t i = 0; i < v->n_subs; i++)
    if (v->subs[i].topic) names[n++] = v->subs[i].topic;
  qsort(names, n, sizeof *names, cmp_pstr);
  v->topics = calloc(n + 1, sizeof *v->topics);
  if (!v->topics) {
    free(names);
    b->err = EZ_ENOMEM;
    return;
  }
  for (size_t i = 0; i < n; i++) {
    if (i && !strcmp(names[i], names[i - 1])) continue;
    gv_topic *t = &v->topics[v->n_topics++];
    t->name = strdup(names[i]);
    if (!t->name) b->err = EZ_ENOMEM;
  }
  free(names);
  if (b->err) return;
  for (size_t i = 0; i < nd; i++) {
    gv_topic *t = &v->topics[topic_ix(v, dag->nodes[i].topic)];
    if (!dag->nodes[i].n_to) continue;
    size_t *to = realloc(t->to, (t->n_to + dag->nodes[i].n_to) * sizeof *to);
    if (!to) {
      b->err = EZ_ENOMEM;
      return;
    }
    t->to = to;
    for (size_t k = 0; k < dag->nodes[i].n_to; k++) {
      size_t ix = topic_ix(v, dag->nodes[i].to[k]);
      if (ix != GV_NONE) t->to[t->n_to++] = ix;
    }
  }
  for (size_t i = 0; i < v->n_pubs; i++) {
    v->pubs[i].topic_ix = topic_ix(v, v->pubs[i].topic);
    if (v->pubs[i].topic_ix != GV_NONE) v->topics[v->pubs[i].topic_ix].n_pubs++;
  }
  for (size_t i = 0; i < v->n_subs; i++) {
    v->subs[i].topic_ix = topic_ix(v, v->subs[i].topic);
    if (v->subs[i].topic_ix != GV_NONE) v->topics[v->subs[i].topic_ix].n_subs++;
  }
}

void gvb_rates(gvb *b) {
  gv *v = b->v;
  size_t n = v->n_topics;
  size_t *mark = calloc(n + 1, sizeof *mark), *stack = malloc((n + 1) * sizeof *stack);
  if (!mark || !stack) {
    free(mark);
    free(stack);
    b->err = EZ_ENOMEM;
    return;
  }
  for (size_t i = 0; i < v->n_pubs; i++) {
    const gv_pub *p = &v->pubs[i];
    if (!p->answered || p->topic_ix == GV_NONE) continue;
    size_t sp = 0, stamp = i + 1; /* a topic is visited once per publisher */
    stack[sp++] = p->topic_ix;
    mark[p->topic_ix] = stamp;
    while (sp) {
      gv_topic *t = &v->topics[stack[--sp]];
      t->rate_hz += p->rate_hz;
      t->bytes_per_s += p->bytes_per_s;
      for (size_t k = 0; k < t->n_to; k++) {
        if (mark[t->to[k]] == stamp) continue;
        mark[t->to[k]] = stamp;
        stack[sp++] = t->to[k];
      }
    }
  }
  free(mark);
  free(stack);
}

/* ---- processes ----------------------------------------------------------------------------- */

static int cmp_proc(const void *a, const void *b) {
  const gv_proc *x = a, *y = b;
  int r = cmp_i64(x->pid, y->pid);
  return r ? r : cmp_str(x->host, y->host);
}

static gv_proc *find_proc(gv *v, int64_t pid, const char *host) {
  gv_proc key = {.pid = pid, .host = (char *)host};
  return bsearch(&key, v->procs, v->n_procs, sizeof key, cmp_proc);
}

void gvb_procs(gvb *b) {
  gv *v = b->v;
  size_t cap = v->n_pubs + v->n_subs, n = 0;
  v->procs = calloc(cap + 1, sizeof *v->procs);
  if (!v->procs) {
    b->err = EZ_ENOMEM;
    return;
  }
  /* Borrowed hosts first, owned copies once unique. */
  for (size_t i = 0; i < v->n_pubs; i++)
    v->procs[n++] = (gv_proc){v->pubs[i].pid, v->pubs[i].host, 0, 0};
  for (size_t i = 0; i < v->n_subs; i++)
    v->procs[n++] = (gv_proc){v->subs[i].pid, v->subs[i].host, 0, 0};
  qsort(v->procs, n, sizeof *v->procs, cmp_proc);
  size_t u = 0;
  for (size_t i = 0; i < n; i++)
    if (!u || cmp_proc(&v->procs[u - 1], &v->procs[i])) v->procs[u++] = v->procs[i];
  v->n_procs = u;
  for (size_t i = 0; i < u; i++) {
    const char *h = v->procs[i].host;
    v->procs[i].host = h && !b->err ? strdup(h) : NULL; /* never left borrowed */
    if (h && !v->procs[i].host) b->err = EZ_ENOMEM;
  }
  for (size_t i = 0; i < v->n_pubs; i++) {
    gv_proc *p = find_proc(v, v->pubs[i].pid, v->pubs[i].host);
    if (p) p->n_pubs++;
  }
  for (size_t i = 0; i < v->n_subs; i++) {
    gv_proc *p = find_proc(v, v->subs[i].pid, v->subs[i].host);
    if (p) p->n_subs++;
  }
}
