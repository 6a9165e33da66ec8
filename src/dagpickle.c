/* The topic graph as a Python pickle: the encoder writes what Python's pickle.dumps (protocol 4)
 * writes for an ezmsg.core.dag.DAG; the decoder is a small pickle machine that knows only the
 * opcodes and globals of that shape, builds inert objects (strings are views into the input) and
 * never calls anything. Every opcode creates at most one object and pushes at most one entry, so
 * objects, stack, memo and container cells are all bounded by the input length. */
#include "dag.h"

#include <stdlib.h>
#include <string.h>

/* clang-format off */
enum { /* the pickle opcodes we read and write */
  OP_MARK = '(', OP_STOP = '.', OP_EMPTY_TUPLE = ')', OP_REDUCE = 'R', OP_BINUNICODE = 'X',
  OP_BUILD = 'b', OP_GLOBAL = 'c', OP_BINGET = 'h', OP_LONG_BINGET = 'j', OP_SETITEM = 's',
  OP_SETITEMS = 'u', OP_EMPTY_DICT = '}', OP_PROTO = 0x80, OP_NEWOBJ = 0x81, OP_TUPLE1 = 0x85,
  OP_SHORT_BINUNICODE = 0x8c, OP_EMPTY_SET = 0x8f, OP_ADDITEMS = 0x90, OP_STACK_GLOBAL = 0x93,
  OP_MEMOIZE = 0x94, OP_FRAME = 0x95,
};
/* clang-format on */
enum { BATCH = 1000 };       /* Python's pickler batches container items by 1000 */
#define MAX_INPUT (1u << 30) /* indices are 32-bit */

/* ---- encoder -------------------------------------------------------------------------------- */

typedef struct bbuf {
  uint8_t *p;
  size_t len, cap;
  bool err;
} bbuf;

static void put(bbuf *b, const void *s, size_t n) {
  if (b->err) return;
  if (n > b->cap - b->len) {
    size_t nc = b->cap ? b->cap : 1024;
    while (nc - b->len < n) {
      if (nc > SIZE_MAX / 2) {
        b->err = true;
        return;
      }
      nc *= 2;
    }
    uint8_t *np = realloc(b->p, nc);
    if (!np) {
      b->err = true;
      return;
    }
    b->p = np;
    b->cap = nc;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
}

static void put1(bbuf *b, uint8_t c) { put(b, &c, 1); }

static void put_le(bbuf *b, uint64_t v, int n) {
  uint8_t t[8];
  for (int i = 0; i < n; i++)
    t[i] = (uint8_t)(v >> (8 * i));
  put(b, t, (size_t)n);
}

/* A string, memoized as the next memo index (Python memoizes every string it writes). */
static void put_str(bbuf *b, const char *s, size_t n, uint32_t *memo) {
  if (n < 256) {
    put1(b, OP_SHORT_BINUNICODE);
    put1(b, (uint8_t)n);
  } else {
    put1(b, OP_BINUNICODE);
    put_le(b, n, 4);
  }
  put(b, s, n);
  put1(b, OP_MEMOIZE);
  (*memo)++;
}

/* A topic: a reference to its memo entry if already written, else the string. */
static void put_topic(bbuf *b, const ez_graph *g, size_t i, int64_t *memo_of, uint32_t *memo) {
  int64_t m = memo_of[i];
  if (m >= 256) {
    put1(b, OP_LONG_BINGET);
    put_le(b, (uint64_t)m, 4);
  } else if (m >= 0) {
    put1(b, OP_BINGET);
    put1(b, (uint8_t)m);
  } else {
    memo_of[i] = *memo;
    put_str(b, g->nodes[i].topic, strlen(g->nodes[i].topic), memo);
  }
}

static int cmp_topic(const void *key, const void *nd) {
  return strcmp((const char *)key, ((const ez_graph_node *)nd)->topic);
}

/* Writes the body (everything after PROTO and FRAME) for a sorted graph from ezi_dag_export. */
static void put_body(bbuf *b, const ez_graph *g, int64_t *memo_of) {
  uint32_t memo = 0;
  static const char *const hdr[] = {"ezmsg.core.dag", "DAG"};
  for (int i = 0; i < 2; i++)
    put_str(b, hdr[i], strlen(hdr[i]), &memo);
  const uint8_t obj[] = {OP_STACK_GLOBAL, OP_MEMOIZE,    OP_EMPTY_TUPLE, OP_NEWOBJ,
                         OP_MEMOIZE,      OP_EMPTY_DICT, OP_MEMOIZE};
  put(b, obj, sizeof(obj));
  memo += 3;
  static const char *const dd[] = {"graph", "collections", "defaultdict"};
  for (int i = 0; i < 3; i++)
    put_str(b, dd[i], strlen(dd[i]), &memo);
  put(b, obj, 2); /* STACK_GLOBAL, MEMOIZE */
  memo++;
  static const char *const st[] = {"builtins", "set"};
  for (int i = 0; i < 2; i++)
    put_str(b, st[i], strlen(st[i]), &memo);
  const uint8_t red[] = {OP_STACK_GLOBAL, OP_MEMOIZE, OP_TUPLE1, OP_MEMOIZE, OP_REDUCE, OP_MEMOIZE};
  put(b, red, sizeof(red));
  memo += 3;
  for (size_t start = 0; start < g->n_nodes; start += BATCH) {
    size_t n = g->n_nodes - start < BATCH ? g->n_nodes - start : BATCH;
    if (n > 1) put1(b, OP_MARK);
    for (size_t i = start; i < start + n; i++) {
      const ez_graph_node *nd = &g->nodes[i];
      put_topic(b, g, i, memo_of, &memo);
      put1(b, OP_EMPTY_SET);
      put1(b, OP_MEMOIZE);
      memo++;
      for (size_t s0 = 0; s0 < nd->n_to; s0 += BATCH) {
        put1(b, OP_MARK);
        for (size_t k = s0; k < nd->n_to && k < s0 + BATCH; k++) {
          const ez_graph_node *t =
              bsearch(nd->to[k], g->nodes, g->n_nodes, sizeof(*g->nodes), cmp_topic);
          put_topic(b, g, (size_t)(t - g->nodes), memo_of, &memo);
        }
        put1(b, OP_ADDITEMS);
      }
    }
    put1(b, n > 1 ? OP_SETITEMS : OP_SETITEM);
  }
  const uint8_t tail[] = {OP_SETITEM, OP_BUILD, OP_STOP};
  put(b, tail, sizeof(tail));
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
  int64_t *memo_of = malloc((g.n_nodes + 1) * sizeof(*memo_of));
  bbuf body = {0}, b = {0};
  if (memo_of) {
    for (size_t i = 0; i < g.n_nodes; i++)
      memo_of[i] = -1;
    put_body(&body, &g, memo_of);
    /* One frame around the whole body (Python splits frames near 64 KiB; loads takes either). */
    const uint8_t proto[] = {OP_PROTO, 4, OP_FRAME};
    put(&b, proto, sizeof(proto));
    put_le(&b, body.len, 8);
    put(&b, body.p, body.len);
  }
  free(memo_of);
  free(body.p);
  ez_graph_free(&g);
  if (!memo_of || body.err || b.err) {
    free(b.p);
    return EZ_ENOMEM;
  }
  *out = b.p;
  *len = b.len;
  return 0;
}

/* ---- decoder -------------------------------------------------------------------------------- */

enum { K_STR, K_GLOBAL, K_TUPLE, K_DAG, K_DICT, K_DDICT, K_SET };
enum { G_DAG, G_DEFAULTDICT, G_SET };
#define NONE UINT32_MAX /* no object; on the stack: a MARK */

typedef struct obj {
  uint8_t kind, global; /* global: G_* of a K_GLOBAL */
  uint32_t a, b;        /* STR: offset, length. TUPLE: size, item. DAG, DICT: graph or NONE */
  uint32_t head, tail;  /* DDICT, SET: list of cells */
} obj;

typedef struct cell {
  uint32_t k, v, next; /* SET: k = item. DDICT: k = key, v = value */
} cell;

typedef struct vm {
  const uint8_t *buf;
  size_t len, pos, frame_end;
  bool in_frame;
  obj *objs;
  cell *cells;
  uint32_t *stack, *memo;
  uint32_t n_objs, n_cells, n_stack, n_memo;
  uint32_t cap_objs, cap_cells, cap_stack, cap_memo;
} vm;

/* A vm array doubled (or first allocated) for elements of elsz bytes; NULL on ENOMEM (then the
 * array and *cap are unchanged). */
static void *grow(void *arr, uint32_t *cap, size_t elsz) {
  uint32_t nc = *cap ? *cap * 2 : 64;
  void *np = realloc(arr, (size_t)nc * elsz);
  if (np) *cap = nc;
  return np;
}

/* Makes room for element n of a vm array, or returns EZ_ENOMEM from the calling function. */
#define RESERVE(arr, cap, n)                                                                       \
  do {                                                                                             \
    if ((n) == (cap)) {                                                                            \
      void *np_ = grow((arr), &(cap), sizeof(*(arr)));                                             \
      if (!np_) return EZ_ENOMEM;                                                                  \
      (arr) = np_;                                                                                 \
    }                                                                                              \
  } while (0)

/* The next n input bytes (NULL if absent), respecting frames as Python's unpickler does. */
static const uint8_t *take(vm *m, size_t n) {
  if (m->in_frame && m->pos == m->frame_end) m->in_frame = false;
  size_t lim = m->in_frame ? m->frame_end : m->len;
  if (n > lim - m->pos) return NULL;
  m->pos += n;
  return m->buf + m->pos - n;
}

static uint64_t le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

static int push(vm *m, uint32_t o) {
  RESERVE(m->stack, m->cap_stack, m->n_stack);
  m->stack[m->n_stack++] = o;
  return 0;
}

/* Creates an object and pushes it. */
static int new_obj(vm *m, obj o) {
  RESERVE(m->objs, m->cap_objs, m->n_objs);
  m->objs[m->n_objs] = o;
  return push(m, m->n_objs++);
}

/* Pops an object (not a MARK) into *o. */
static int pop(vm *m, uint32_t *o) {
  if (m->n_stack == 0 || m->stack[m->n_stack - 1] == NONE) return EZ_EPROTO;
  *o = m->stack[--m->n_stack];
  return 0;
}

/* The object on top of the stack if it has kind k, else NONE. */
static uint32_t top_of(const vm *m, int k) {
  if (m->n_stack == 0) return NONE;
  uint32_t o = m->stack[m->n_stack - 1];
  return o != NONE && m->objs[o].kind == k ? o : NONE;
}

/* Position of the topmost MARK, or -1. */
static int64_t find_mark(const vm *m) {
  for (int64_t i = (int64_t)m->n_stack - 1; i >= 0; i--)
    if (m->stack[i] == NONE) return i;
  return -1;
}

static int append(vm *m, uint32_t container, uint32_t k, uint32_t v) {
  RESERVE(m->cells, m->cap_cells, m->n_cells);
  m->cells[m->n_cells] = (cell){k, v, NONE};
  obj *c = &m->objs[container];
  if (c->head == NONE)
    c->head = m->n_cells;
  else
    m->cells[c->tail].next = m->n_cells;
  c->tail = m->n_cells++;
  return 0;
}

static bool str_is(const vm *m, uint32_t o, const char *s) {
  const obj *x = &m->objs[o];
  return x->kind == K_STR && x->b == strlen(s) && memcmp(m->buf + x->a, s, x->b) == 0;
}

/* dict[key] = value on the object under the items: the DAG's state dict or the defaultdict. */
static int set_item(vm *m, uint32_t d, uint32_t key, uint32_t val) {
  const obj *k = &m->objs[key], *v = &m->objs[val];
  if (m->objs[d].kind == K_DICT && str_is(m, key, "graph") && v->kind == K_DDICT) {
    m->objs[d].a = val;
    return 0;
  }
  if (m->objs[d].kind == K_DDICT && k->kind == K_STR && v->kind == K_SET)
    return append(m, d, key, val);
  return EZ_EPROTO;
}

static int op_string(vm *m, size_t n) {
  const uint8_t *s = take(m, n);
  if (!s || (n && memchr(s, 0, n)) || !ezi_utf8_valid((const char *)s, n)) return EZ_EPROTO;
  return new_obj(m, (obj){.kind = K_STR, .a = (uint32_t)(s - m->buf), .b = (uint32_t)n});
}

/* The global module.name, if it is one of the three we know; else EZ_EPROTO. */
static int op_global(vm *m, const uint8_t *mod, size_t ml, const uint8_t *name, size_t nl) {
  static const char *const known[3][2] = {
      [G_DAG] = {"ezmsg.core.dag", "DAG"},
      [G_DEFAULTDICT] = {"collections", "defaultdict"},
      [G_SET] = {"builtins", "set"},
  };
  for (uint8_t g = 0; g < 3; g++)
    if (ml == strlen(known[g][0]) && memcmp(mod, known[g][0], ml) == 0 &&
        nl == strlen(known[g][1]) && memcmp(name, known[g][1], nl) == 0)
      return new_obj(m, (obj){.kind = K_GLOBAL, .global = g});
  return EZ_EPROTO;
}

/* A '\n'-terminated line for GLOBAL (without the newline). */
static const uint8_t *take_line(vm *m, size_t *n) {
  if (m->in_frame && m->pos == m->frame_end) m->in_frame = false;
  size_t lim = m->in_frame ? m->frame_end : m->len;
  if (lim == m->pos) return NULL;
  const uint8_t *p = m->buf + m->pos, *nl = memchr(p, '\n', lim - m->pos);
  if (!nl) return NULL;
  *n = (size_t)(nl - p);
  m->pos += *n + 1;
  return p;
}

/* Executes one opcode. Sets *stop at STOP. */
static int step(vm *m, bool *stop) {
  const uint8_t *p = take(m, 1);
  if (!p) return EZ_EPROTO;
  uint8_t op = *p;
  if ((op == OP_PROTO) != (m->pos == 1)) return EZ_EPROTO; /* PROTO first, and only first */
  uint32_t x, y;
  int rc;
  switch (op) {
  case OP_PROTO: return (p = take(m, 1)) && (*p == 4 || *p == 5) ? 0 : EZ_EPROTO;
  case OP_FRAME:
    if (!(p = take(m, 8)) || (m->in_frame && m->pos < m->frame_end)) return EZ_EPROTO;
    if (le(p, 8) > m->len - m->pos) return EZ_EPROTO;
    m->frame_end = m->pos + (size_t)le(p, 8);
    m->in_frame = m->frame_end > m->pos;
    return 0;
  case OP_SHORT_BINUNICODE: return (p = take(m, 1)) ? op_string(m, *p) : EZ_EPROTO;
  case OP_BINUNICODE:
    if (!(p = take(m, 4)) || le(p, 4) > EZ_MAX_CONTROL_STR) return EZ_EPROTO;
    return op_string(m, (size_t)le(p, 4));
  case OP_MEMOIZE:
    if (m->n_stack == 0 || m->stack[m->n_stack - 1] == NONE) return EZ_EPROTO;
    RESERVE(m->memo, m->cap_memo, m->n_memo);
    m->memo[m->n_memo++] = m->stack[m->n_stack - 1];
    return 0;
  case OP_BINGET:
  case OP_LONG_BINGET: {
    int n = op == OP_BINGET ? 1 : 4;
    if (!(p = take(m, (size_t)n)) || le(p, n) >= m->n_memo) return EZ_EPROTO;
    return push(m, m->memo[le(p, n)]);
  }
  case OP_GLOBAL: {
    size_t ml, nl;
    const uint8_t *mod = take_line(m, &ml), *name = mod ? take_line(m, &nl) : NULL;
    return name ? op_global(m, mod, ml, name, nl) : EZ_EPROTO;
  }
  case OP_STACK_GLOBAL:
    if ((rc = pop(m, &y)) || (rc = pop(m, &x))) return rc;
    if (m->objs[x].kind != K_STR || m->objs[y].kind != K_STR) return EZ_EPROTO;
    return op_global(m, m->buf + m->objs[x].a, m->objs[x].b, m->buf + m->objs[y].a, m->objs[y].b);
  case OP_EMPTY_TUPLE: return new_obj(m, (obj){.kind = K_TUPLE, .a = 0, .b = NONE});
  case OP_TUPLE1:
    if ((rc = pop(m, &x))) return rc;
    return new_obj(m, (obj){.kind = K_TUPLE, .a = 1, .b = x});
  case OP_NEWOBJ: /* cls.__new__(cls, *args): only DAG() */
    if ((rc = pop(m, &y)) || (rc = pop(m, &x))) return rc;
    if (m->objs[x].kind != K_GLOBAL || m->objs[x].global != G_DAG || m->objs[y].kind != K_TUPLE ||
        m->objs[y].a != 0)
      return EZ_EPROTO;
    return new_obj(m, (obj){.kind = K_DAG, .a = NONE});
  case OP_REDUCE: /* func(*args): only defaultdict(set) */
    if ((rc = pop(m, &y)) || (rc = pop(m, &x))) return rc;
    if (m->objs[x].kind != K_GLOBAL || m->objs[x].global != G_DEFAULTDICT ||
        m->objs[y].kind != K_TUPLE || m->objs[y].a != 1 || m->objs[m->objs[y].b].kind != K_GLOBAL ||
        m->objs[m->objs[y].b].global != G_SET)
      return EZ_EPROTO;
    return new_obj(m, (obj){.kind = K_DDICT, .head = NONE, .tail = NONE});
  case OP_EMPTY_DICT: return new_obj(m, (obj){.kind = K_DICT, .a = NONE});
  case OP_EMPTY_SET: return new_obj(m, (obj){.kind = K_SET, .head = NONE, .tail = NONE});
  case OP_MARK: return push(m, NONE);
  case OP_SETITEM:
    if ((rc = pop(m, &y)) || (rc = pop(m, &x))) return rc;
    if (m->n_stack == 0 || m->stack[m->n_stack - 1] == NONE) return EZ_EPROTO;
    return set_item(m, m->stack[m->n_stack - 1], x, y);
  case OP_SETITEMS:
  case OP_ADDITEMS: {
    int64_t mk = find_mark(m);
    if (mk < 1 || m->stack[mk - 1] == NONE) return EZ_EPROTO;
    uint32_t c = m->stack[mk - 1];
    if (op == OP_SETITEMS && (m->n_stack - (uint32_t)mk - 1) % 2) return EZ_EPROTO;
    if (op == OP_ADDITEMS && m->objs[c].kind != K_SET) return EZ_EPROTO;
    for (uint32_t i = (uint32_t)mk + 1; i < m->n_stack; i += op == OP_SETITEMS ? 2 : 1) {
      if (op == OP_SETITEMS)
        rc = set_item(m, c, m->stack[i], m->stack[i + 1]);
      else
        rc = m->objs[m->stack[i]].kind == K_STR ? append(m, c, m->stack[i], NONE) : EZ_EPROTO;
      if (rc) return rc;
    }
    m->n_stack = (uint32_t)mk;
    return 0;
  }
  case OP_BUILD: /* setattr(obj, k, v) for the state dict: only DAG.graph */
    if ((rc = pop(m, &y))) return rc;
    if ((x = top_of(m, K_DAG)) == NONE || m->objs[y].kind != K_DICT) return EZ_EPROTO;
    if (m->objs[y].a != NONE) m->objs[x].a = m->objs[y].a;
    return 0;
  case OP_STOP:
    if (m->pos != m->len || m->n_stack != 1 || (x = top_of(m, K_DAG)) == NONE ||
        m->objs[x].a == NONE)
      return EZ_EPROTO;
    *stop = true;
    return 0;
  default: return EZ_EPROTO;
  }
}

static ezi_strv view(const vm *m, uint32_t o) {
  return (ezi_strv){(const char *)m->buf + m->objs[o].a, m->objs[o].b};
}

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

/* Turns the final defaultdict into the sorted single-block ez_graph. */
static int finish(const vm *m, uint32_t dd, ez_graph *out) {
  size_t n_keys = 0, n_edges = 0;
  for (uint32_t c = m->objs[dd].head; c != NONE; c = m->cells[c].next, n_keys++)
    for (uint32_t s = m->objs[m->cells[c].v].head; s != NONE; s = m->cells[s].next)
      if (++n_edges > m->len) return EZ_EPROTO; /* sets shared to blow up the output */
  ezi_strv *names = malloc((n_keys + n_edges + 1) * sizeof(*names));
  uint32_t *entry = malloc((n_keys + n_edges + 1) * sizeof(*entry));
  size_t *off = malloc((n_keys + n_edges + 1) * sizeof(*off));
  uint32_t *to = malloc((n_edges + 1) * sizeof(*to));
  int rc = EZ_ENOMEM;
  if (!names || !entry || !off || !to) goto done;
  size_t k = 0;
  for (uint32_t c = m->objs[dd].head; c != NONE; c = m->cells[c].next)
    names[k++] = view(m, m->cells[c].k);
  qsort(names, k, sizeof(*names), cmp_strv);
  rc = EZ_EPROTO;
  for (size_t i = 1; i < k; i++)
    if (cmp_strv(&names[i - 1], &names[i]) == 0) goto done; /* a dict has unique keys */
  for (uint32_t c = m->objs[dd].head; c != NONE; c = m->cells[c].next)
    for (uint32_t s = m->objs[m->cells[c].v].head; s != NONE; s = m->cells[s].next)
      names[k++] = view(m, m->cells[s].k);
  qsort(names, k, sizeof(*names), cmp_strv);
  size_t n = 0;
  for (size_t i = 0; i < k; i++)
    if (n == 0 || cmp_strv(&names[n - 1], &names[i]) != 0) names[n++] = names[i];
  for (size_t i = 0; i < n; i++)
    entry[i] = NONE;
  for (uint32_t c = m->objs[dd].head; c != NONE; c = m->cells[c].next)
    entry[rank_of(names, n, view(m, m->cells[c].k))] = c;
  size_t e = 0;
  for (size_t i = 0; i < n; i++) {
    off[i] = e;
    if (entry[i] == NONE) continue;
    size_t s0 = e;
    for (uint32_t s = m->objs[m->cells[entry[i]].v].head; s != NONE; s = m->cells[s].next)
      to[e++] = rank_of(names, n, view(m, m->cells[s].k));
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

int ezi_dag_unpickle(const uint8_t *buf, size_t len, ez_graph *out) {
  *out = (ez_graph){0};
  if (!buf || len == 0 || len > MAX_INPUT) return EZ_EPROTO;
  vm m = {.buf = buf, .len = len};
  bool stop = false;
  int rc = 0;
  while (!rc && !stop)
    rc = step(&m, &stop);
  if (!rc) rc = finish(&m, m.objs[m.stack[0]].a, out); /* STOP checked: a DAG with a graph */
  free(m.objs);
  free(m.cells);
  free(m.stack);
  free(m.memo);
  return rc;
}
