/* The pickle decoder: a pickle machine over an inert value tree. It knows the opcodes Python
 * 3.8-3.13 emit for plain data, dataclasses, enums and UUIDs with protocols 2 to 5, and refuses
 * every other one. Each opcode reads its arguments from what is left of the input (or of the
 * current frame) before anything is allocated, creates at most one node and pushes at most one
 * entry, so nodes, stack, marks and memo are all bounded by the input length as well as by the
 * caller's limits. At STOP the tree is checked to be acyclic and no deeper than max_depth. */
#include "proto/pickle.h"

#include "proto/dag.h" /* ezi_utf8_valid */
#include "ezmsg/ezmsg.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* clang-format off */
enum {
  OP_MARK = '(', OP_STOP = '.', OP_POP = '0', OP_POP_MARK = '1', OP_DUP = '2', OP_BININT = 'J',
  OP_BININT1 = 'K', OP_BININT2 = 'M', OP_NONE = 'N', OP_REDUCE = 'R', OP_BINUNICODE = 'X',
  OP_APPEND = 'a', OP_BUILD = 'b', OP_GLOBAL = 'c', OP_DICT = 'd', OP_EMPTY_DICT = '}',
  OP_APPENDS = 'e', OP_GET = 'g', OP_BINGET = 'h', OP_LONG_BINGET = 'j', OP_LIST = 'l',
  OP_EMPTY_LIST = ']', OP_PUT = 'p', OP_BINPUT = 'q', OP_LONG_BINPUT = 'r', OP_SETITEM = 's',
  OP_TUPLE = 't', OP_EMPTY_TUPLE = ')', OP_SETITEMS = 'u', OP_BINFLOAT = 'G', OP_BINBYTES = 'B',
  OP_SHORT_BINBYTES = 'C', OP_PROTO = 0x80, OP_NEWOBJ = 0x81, OP_TUPLE1 = 0x85, OP_TUPLE2 = 0x86,
  OP_TUPLE3 = 0x87, OP_NEWTRUE = 0x88, OP_NEWFALSE = 0x89, OP_LONG1 = 0x8a, OP_LONG4 = 0x8b,
  OP_SHORT_BINUNICODE = 0x8c, OP_BINUNICODE8 = 0x8d, OP_BINBYTES8 = 0x8e, OP_EMPTY_SET = 0x8f,
  OP_ADDITEMS = 0x90, OP_FROZENSET = 0x91, OP_NEWOBJ_EX = 0x92, OP_STACK_GLOBAL = 0x93,
  OP_MEMOIZE = 0x94, OP_FRAME = 0x95, OP_BYTEARRAY8 = 0x96,
};
/* clang-format on */

#define MAX_DEPTH_CAP                                                                              \
  1000 /* the depth check recurses: bound its stack whatever the caller asks                       \
        */

typedef struct memo_slot {
  uint32_t idx;
  bool used;
  ezi_pk *v;
} memo_slot;

typedef struct vm {
  const uint8_t *buf;
  size_t len, pos, frame_end;
  bool in_frame;
  ezi_pk_limits lim;
  ezi_pk_doc *doc;
  ezi_pk_err *err;
  int proto;
  uint8_t op;
  size_t op_at;
  ezi_pk **stack;
  size_t n_stack, cap_stack;
  size_t *marks;
  size_t n_marks, cap_marks;
  memo_slot *memo;
  size_t n_memo, cap_memo; /* cap: a power of two */
  size_t nodes;
} vm;

static int fail(vm *m, int code, const char *fmt, ...) {
  if (m->err->code) return m->err->code; /* keep the first */
  m->err->code = code;
  m->err->offset = m->op_at;
  va_list ap;
  va_start(ap, fmt);
  char what[72];
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  snprintf(m->err->msg, sizeof(m->err->msg), "pickle opcode 0x%02x at %zu: %s", m->op, m->op_at,
           what);
  return code;
}

/* Counts n more nodes or container entries against max_nodes. */
static int count(vm *m, size_t n) {
  if (n > m->lim.max_nodes - m->nodes)
    return fail(m, EZ_EMSGSIZE, "more than %zu nodes", m->lim.max_nodes);
  m->nodes += n;
  return 0;
}

static ezi_pk *mk(vm *m, ezi_pk_type t) {
  if (count(m, 1)) return NULL;
  ezi_pk *n = ezi_pk_node(m->doc, t);
  if (!n) fail(m, EZ_ENOMEM, "out of memory");
  return n;
}

/* The next n input bytes, or NULL (and an error) if the input or the current frame ends first. */
static const uint8_t *take(vm *m, size_t n) {
  if (m->in_frame && m->pos == m->frame_end) m->in_frame = false;
  size_t lim = m->in_frame ? m->frame_end : m->len;
  if (n > lim - m->pos) {
    fail(m, EZ_EPROTO, m->in_frame ? "argument crosses the end of its frame" : "truncated");
    return NULL;
  }
  m->pos += n;
  return m->buf + m->pos - n;
}

static uint64_t le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

/* A '\n'-terminated line (GLOBAL, GET, PUT), without the newline. */
static const uint8_t *take_line(vm *m, size_t *n) {
  if (m->in_frame && m->pos == m->frame_end) m->in_frame = false;
  size_t lim = m->in_frame ? m->frame_end : m->len;
  const uint8_t *p = m->buf + m->pos, *nl = memchr(p, '\n', lim - m->pos);
  if (!nl) return fail(m, EZ_EPROTO, "line without newline"), NULL;
  *n = (size_t)(nl - p);
  m->pos += *n + 1;
  return p;
}

static int push(vm *m, ezi_pk *v) {
  if (!v) return m->err->code ? m->err->code : fail(m, EZ_ENOMEM, "out of memory");
  if (m->n_stack == m->cap_stack) {
    size_t nc = m->cap_stack ? m->cap_stack * 2 : 64;
    ezi_pk **s = realloc(m->stack, nc * sizeof(*s));
    if (!s) return fail(m, EZ_ENOMEM, "out of memory");
    m->stack = s;
    m->cap_stack = nc;
  }
  m->stack[m->n_stack++] = v;
  return 0;
}

static size_t fence(const vm *m) { return m->n_marks ? m->marks[m->n_marks - 1] : 0; }

/* The top of the stack above the topmost mark, or NULL (and an error). */
static ezi_pk *top(vm *m) {
  if (m->n_stack <= fence(m)) return fail(m, EZ_EPROTO, "stack underflow"), NULL;
  return m->stack[m->n_stack - 1];
}

static ezi_pk *pop(vm *m) {
  ezi_pk *v = top(m);
  if (v) m->n_stack--;
  return v;
}

/* Removes the topmost mark; *at gets its stack position. */
static int pop_mark(vm *m, size_t *at) {
  *at = 0;
  if (!m->n_marks) return fail(m, EZ_EPROTO, "no MARK");
  *at = m->marks[--m->n_marks];
  return 0;
}

/* ---- memo ----------------------------------------------------------------------------------- */

static memo_slot *memo_find(const vm *m, uint32_t idx) {
  if (!m->cap_memo) return NULL;
  size_t mask = m->cap_memo - 1;
  for (size_t j = (idx * 0x9e3779b1u) & mask;; j = (j + 1) & mask) {
    if (!m->memo[j].used) return &m->memo[j];
    if (m->memo[j].idx == idx) return &m->memo[j];
  }
}

static int memo_put(vm *m, uint64_t idx) {
  ezi_pk *v = top(m);
  if (!v) return m->err->code;
  if (idx > UINT32_MAX) return fail(m, EZ_EPROTO, "memo index too large");
  memo_slot *s = memo_find(m, (uint32_t)idx);
  if (s && s->used) {
    s->v = v;
    return 0;
  }
  if (m->n_memo >= m->lim.max_memo)
    return fail(m, EZ_EMSGSIZE, "more than %zu memo entries", m->lim.max_memo);
  if ((m->n_memo + 1) * 2 > m->cap_memo) {
    size_t nc = m->cap_memo ? m->cap_memo * 2 : 64;
    memo_slot *old = m->memo;
    size_t oc = m->cap_memo;
    m->memo = calloc(nc, sizeof(*m->memo));
    if (!m->memo) {
      m->memo = old;
      return fail(m, EZ_ENOMEM, "out of memory");
    }
    m->cap_memo = nc;
    for (size_t i = 0; i < oc; i++)
      if (old[i].used) *memo_find(m, old[i].idx) = old[i];
    free(old);
  }
  s = memo_find(m, (uint32_t)idx);
  *s = (memo_slot){.idx = (uint32_t)idx, .used = true, .v = v};
  m->n_memo++;
  return 0;
}

static int memo_get(vm *m, uint64_t idx) {
  memo_slot *s = idx <= UINT32_MAX ? memo_find(m, (uint32_t)idx) : NULL;
  if (!s || !s->used) return fail(m, EZ_EPROTO, "no memo entry %llu", (unsigned long long)idx);
  return push(m, s->v);
}

/* A decimal memo index on a line (GET, PUT). */
static int line_index(vm *m, uint64_t *idx) {
  size_t n;
  const uint8_t *p = take_line(m, &n);
  if (!p) return m->err->code;
  if (n == 0 || n > 10) return fail(m, EZ_EPROTO, "bad memo index");
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (p[i] < '0' || p[i] > '9') return fail(m, EZ_EPROTO, "bad memo index");
    v = v * 10 + (p[i] - '0');
  }
  *idx = v;
  return 0;
}

/* ---- values --------------------------------------------------------------------------------- */

static int op_blob(vm *m, ezi_pk_type t, uint64_t n) {
  if (n > m->lim.max_str)
    return fail(m, EZ_EMSGSIZE, "%llu bytes, over the limit of %zu", (unsigned long long)n,
                m->lim.max_str);
  const uint8_t *p = take(m, (size_t)n);
  if (!p) return m->err->code;
  if (t == EZI_PK_STR && !ezi_utf8_valid((const char *)p, (size_t)n))
    return fail(m, EZ_EPROTO, "str is not UTF-8");
  if (count(m, 1)) return m->err->code;
  ezi_pk *v = t == EZI_PK_STR     ? ezi_pk_str(m->doc, (const char *)p, (size_t)n)
              : t == EZI_PK_BYTES ? ezi_pk_bytes(m->doc, p, (size_t)n)
                                  : ezi_pk_bytearray(m->doc, p, (size_t)n);
  return push(m, v);
}

static int op_long(vm *m, uint64_t n) {
  if (n > m->lim.max_str) return fail(m, EZ_EMSGSIZE, "int of %llu bytes", (unsigned long long)n);
  const uint8_t *p = take(m, (size_t)n);
  if (!p || count(m, 1)) return m->err->code;
  return push(m, ezi_pk_bigint(m->doc, p, (size_t)n));
}

static int op_int(vm *m, int64_t v) {
  if (count(m, 1)) return m->err->code;
  return push(m, ezi_pk_int(m->doc, v));
}

/* Appends the stack's entries [from, n_stack) to container c (pairs for a dict) and drops them. */
static int fill(vm *m, ezi_pk *c, size_t from) {
  size_t k = m->n_stack - from;
  bool dict = c->type == EZI_PK_DICT;
  if (dict && k % 2) return fail(m, EZ_EPROTO, "odd number of dict items");
  if (count(m, k)) return m->err->code;
  for (size_t i = from; i < m->n_stack; i += dict ? 2 : 1) {
    int rc =
        dict ? ezi_pk_dict_add(c, m->stack[i], m->stack[i + 1]) : ezi_pk_append(c, m->stack[i]);
    if (rc == EZ_EINVAL)
      return fail(m, EZ_EPROTO, "unhashable %s as a key or set item",
                  ezi_pk_type_name(m->stack[i]));
    if (rc) return fail(m, EZ_ENOMEM, "out of memory");
  }
  m->n_stack = from;
  return 0;
}

/* A new container of type t from the items above the topmost mark (TUPLE, LIST, DICT,
 * FROZENSET). */
static int op_from_mark(vm *m, ezi_pk_type t) {
  size_t at = 0;
  if (pop_mark(m, &at)) return m->err->code;
  ezi_pk *c = mk(m, t);
  if (!c || fill(m, c, at)) return m->err->code;
  return push(m, c);
}

/* The container under a mark (APPENDS, SETITEMS, ADDITEMS) gets the items above it. */
static int op_items(vm *m) {
  size_t at = 0;
  if (pop_mark(m, &at)) return m->err->code;
  if (at == 0) return fail(m, EZ_EPROTO, "nothing under the MARK");
  ezi_pk *c = m->stack[at - 1];
  bool ok = m->op == OP_APPENDS    ? c->type == EZI_PK_LIST || c->type == EZI_PK_OBJECT
            : m->op == OP_SETITEMS ? c->type == EZI_PK_DICT || c->type == EZI_PK_OBJECT
                                   : c->type == EZI_PK_SET;
  if (!ok) return fail(m, EZ_EPROTO, "items onto a %s", ezi_pk_type_name(c));
  if (c->type == EZI_PK_OBJECT) {
    ezi_pk **part = m->op == OP_APPENDS ? &c->u.o.list : &c->u.o.dict;
    if (!*part && !(*part = mk(m, m->op == OP_APPENDS ? EZI_PK_LIST : EZI_PK_DICT)))
      return m->err->code;
    c = *part;
  }
  return fill(m, c, at);
}

/* APPEND and SETITEM: one item (or pair) onto the entry under it. */
static int op_item(vm *m) {
  size_t k = m->op == OP_APPEND ? 1 : 2;
  if (m->n_stack < fence(m) + k + 1) return fail(m, EZ_EPROTO, "stack underflow");
  ezi_pk *c = m->stack[m->n_stack - k - 1];
  bool ok = m->op == OP_APPEND ? c->type == EZI_PK_LIST || c->type == EZI_PK_OBJECT
                               : c->type == EZI_PK_DICT || c->type == EZI_PK_OBJECT;
  if (!ok) return fail(m, EZ_EPROTO, "item onto a %s", ezi_pk_type_name(c));
  if (c->type == EZI_PK_OBJECT) {
    ezi_pk **part = m->op == OP_APPEND ? &c->u.o.list : &c->u.o.dict;
    if (!*part && !(*part = mk(m, m->op == OP_APPEND ? EZI_PK_LIST : EZI_PK_DICT)))
      return m->err->code;
    c = *part;
  }
  return fill(m, c, m->n_stack - k);
}

static int op_tuple_n(vm *m, size_t k) {
  if (m->n_stack < fence(m) + k) return fail(m, EZ_EPROTO, "stack underflow");
  ezi_pk *t = mk(m, EZI_PK_TUPLE);
  if (!t || fill(m, t, m->n_stack - k)) return m->err->code;
  return push(m, t);
}

/* GLOBAL's and STACK_GLOBAL's name; protocols 2 and lower use Python 2's module names. */
static int op_global(vm *m, const uint8_t *mod, size_t ml, const uint8_t *name, size_t nl) {
  if (ml > m->lim.max_str || nl > m->lim.max_str || !ml || !nl || memchr(mod, 0, ml) ||
      memchr(name, 0, nl) || !ezi_utf8_valid((const char *)mod, ml) ||
      !ezi_utf8_valid((const char *)name, nl))
    return fail(m, EZ_EPROTO, "bad global name");
  const char *mp = NULL;
  if (m->proto < 3 && ml == 11 && memcmp(mod, "__builtin__", 11) == 0) mp = "builtins";
  if (m->proto < 3 && ml == 8 && memcmp(mod, "copy_reg", 8) == 0) mp = "copyreg";
  if (count(m, 1)) return m->err->code;
  ezi_pk *g = ezi_pk_node(m->doc, EZI_PK_GLOBAL);
  char *a = g ? ezi_pk_alloc(m->doc, (mp ? strlen(mp) : ml) + 1) : NULL;
  char *b = a ? ezi_pk_alloc(m->doc, nl + 1) : NULL;
  if (!b) return fail(m, EZ_ENOMEM, "out of memory");
  if (mp)
    memcpy(a, mp, strlen(mp));
  else
    memcpy(a, mod, ml);
  memcpy(b, name, nl);
  g->u.g.mod = a;
  g->u.g.name = b;
  return push(m, g);
}

/* NEWOBJ, NEWOBJ_EX and REDUCE. */
static int op_object(vm *m) {
  ezi_pk *kw = m->op == OP_NEWOBJ_EX ? pop(m) : NULL;
  if (m->op == OP_NEWOBJ_EX && !kw) return m->err->code;
  ezi_pk *args = pop(m), *cls = args ? pop(m) : NULL;
  if (!cls) return m->err->code;
  if (args->type != EZI_PK_TUPLE)
    return fail(m, EZ_EPROTO, "arguments are a %s, not a tuple", ezi_pk_type_name(args));
  if (kw && kw->type != EZI_PK_DICT) return fail(m, EZ_EPROTO, "keyword arguments not a dict");
  if (m->op == OP_REDUCE) {
    size_t made = 0;
    int rc = 0;
    ezi_pk *v = ezi_pk_reduce_builtin(m->doc, cls, args, &made, &rc);
    if (rc) return fail(m, rc, "out of memory");
    if (v) return count(m, made) ? m->err->code : push(m, v);
  }
  if (count(m, 1)) return m->err->code;
  ezi_pk_how how = m->op == OP_NEWOBJ      ? EZI_PK_NEWOBJ
                   : m->op == OP_NEWOBJ_EX ? EZI_PK_NEWOBJ_EX
                                           : EZI_PK_REDUCE;
  return push(m, ezi_pk_object(m->doc, how, cls, args, kw));
}

/* Executes one opcode; *stop at STOP. */
static int step(vm *m, bool *stop) {
  m->op_at = m->pos;
  m->op = 0;
  const uint8_t *p = take(m, 1);
  if (!p) return m->err->code;
  uint8_t op = m->op = *p;
  if ((op == OP_PROTO) != (m->op_at == 0)) /* PROTO first, and only first */
    return fail(m, EZ_EPROTO, op == OP_PROTO ? "second PROTO" : "no PROTO (protocol 2 or later)");
  ezi_pk *x;
  size_t at = 0;
  uint64_t idx;
  switch (op) {
  case OP_PROTO:
    if (!(p = take(m, 1))) return m->err->code;
    if (*p < 2 || *p > 5) return fail(m, EZ_EPROTO, "protocol %d", *p);
    m->proto = *p;
    return 0;
  case OP_FRAME:
    if (!(p = take(m, 8))) return m->err->code;
    if (m->in_frame && m->pos < m->frame_end) return fail(m, EZ_EPROTO, "FRAME inside a frame");
    if (le(p, 8) > m->len - m->pos) return fail(m, EZ_EPROTO, "frame beyond the input");
    m->frame_end = m->pos + (size_t)le(p, 8);
    m->in_frame = m->frame_end > m->pos;
    return 0;
  case OP_STOP:
    if (m->n_marks || m->n_stack != 1)
      return fail(m, EZ_EPROTO, "STOP with %zu values, %zu marks", m->n_stack, m->n_marks);
    if (m->pos != m->len) return fail(m, EZ_EPROTO, "%zu bytes after STOP", m->len - m->pos);
    *stop = true;
    return 0;
  case OP_MARK:
    if (m->n_marks == m->cap_marks) {
      size_t nc = m->cap_marks ? m->cap_marks * 2 : 16;
      size_t *mk2 = realloc(m->marks, nc * sizeof(*mk2));
      if (!mk2) return fail(m, EZ_ENOMEM, "out of memory");
      m->marks = mk2;
      m->cap_marks = nc;
    }
    m->marks[m->n_marks++] = m->n_stack;
    return 0;
  case OP_POP:
    if (m->n_stack > fence(m)) return m->n_stack--, 0;
    return pop_mark(m, &at);
  case OP_POP_MARK:
    if (pop_mark(m, &at)) return m->err->code;
    m->n_stack = at;
    return 0;
  case OP_DUP: return (x = top(m)) ? push(m, x) : m->err->code;
  case OP_NONE: return push(m, mk(m, EZI_PK_NONE));
  case OP_NEWTRUE:
  case OP_NEWFALSE:
    if (count(m, 1)) return m->err->code;
    return push(m, ezi_pk_bool(m->doc, op == OP_NEWTRUE));
  case OP_BININT: return (p = take(m, 4)) ? op_int(m, (int32_t)(uint32_t)le(p, 4)) : m->err->code;
  case OP_BININT1: return (p = take(m, 1)) ? op_int(m, *p) : m->err->code;
  case OP_BININT2: return (p = take(m, 2)) ? op_int(m, (int64_t)le(p, 2)) : m->err->code;
  case OP_LONG1: return (p = take(m, 1)) ? op_long(m, *p) : m->err->code;
  case OP_LONG4:
    if (!(p = take(m, 4))) return m->err->code;
    if ((int32_t)(uint32_t)le(p, 4) < 0) return fail(m, EZ_EPROTO, "negative length");
    return op_long(m, le(p, 4));
  case OP_BINFLOAT: {
    if (!(p = take(m, 8))) return m->err->code;
    uint64_t bits = 0;
    for (int i = 0; i < 8; i++)
      bits = bits << 8 | p[i]; /* big-endian */
    double f;
    memcpy(&f, &bits, sizeof(f));
    if (count(m, 1)) return m->err->code;
    return push(m, ezi_pk_float(m->doc, f));
  }
  case OP_SHORT_BINUNICODE: return (p = take(m, 1)) ? op_blob(m, EZI_PK_STR, *p) : m->err->code;
  case OP_BINUNICODE: return (p = take(m, 4)) ? op_blob(m, EZI_PK_STR, le(p, 4)) : m->err->code;
  case OP_BINUNICODE8: return (p = take(m, 8)) ? op_blob(m, EZI_PK_STR, le(p, 8)) : m->err->code;
  case OP_SHORT_BINBYTES: return (p = take(m, 1)) ? op_blob(m, EZI_PK_BYTES, *p) : m->err->code;
  case OP_BINBYTES: return (p = take(m, 4)) ? op_blob(m, EZI_PK_BYTES, le(p, 4)) : m->err->code;
  case OP_BINBYTES8: return (p = take(m, 8)) ? op_blob(m, EZI_PK_BYTES, le(p, 8)) : m->err->code;
  case OP_BYTEARRAY8:
    return (p = take(m, 8)) ? op_blob(m, EZI_PK_BYTEARRAY, le(p, 8)) : m->err->code;
  case OP_EMPTY_LIST: return push(m, mk(m, EZI_PK_LIST));
  case OP_EMPTY_TUPLE: return push(m, mk(m, EZI_PK_TUPLE));
  case OP_EMPTY_DICT: return push(m, mk(m, EZI_PK_DICT));
  case OP_EMPTY_SET: return push(m, mk(m, EZI_PK_SET));
  case OP_TUPLE1: return op_tuple_n(m, 1);
  case OP_TUPLE2: return op_tuple_n(m, 2);
  case OP_TUPLE3: return op_tuple_n(m, 3);
  case OP_TUPLE: return op_from_mark(m, EZI_PK_TUPLE);
  case OP_LIST: return op_from_mark(m, EZI_PK_LIST);
  case OP_DICT: return op_from_mark(m, EZI_PK_DICT);
  case OP_FROZENSET: return op_from_mark(m, EZI_PK_FROZENSET);
  case OP_APPEND:
  case OP_SETITEM: return op_item(m);
  case OP_APPENDS:
  case OP_SETITEMS:
  case OP_ADDITEMS: return op_items(m);
  case OP_GLOBAL: {
    size_t ml, nl;
    const uint8_t *mod = take_line(m, &ml), *name = mod ? take_line(m, &nl) : NULL;
    return name ? op_global(m, mod, ml, name, nl) : m->err->code;
  }
  case OP_STACK_GLOBAL: {
    ezi_pk *name = pop(m), *mod = name ? pop(m) : NULL;
    if (!mod) return m->err->code;
    if (mod->type != EZI_PK_STR || name->type != EZI_PK_STR)
      return fail(m, EZ_EPROTO, "STACK_GLOBAL of a %s", ezi_pk_type_name(mod));
    return op_global(m, (const uint8_t *)mod->u.s.p, mod->u.s.len, (const uint8_t *)name->u.s.p,
                     name->u.s.len);
  }
  case OP_NEWOBJ:
  case OP_NEWOBJ_EX:
  case OP_REDUCE: return op_object(m);
  case OP_BUILD: {
    ezi_pk *st = pop(m), *o = st ? top(m) : NULL;
    if (!o) return m->err->code;
    if (o->type != EZI_PK_OBJECT) return fail(m, EZ_EPROTO, "BUILD on a %s", ezi_pk_type_name(o));
    if (o->u.o.state) return fail(m, EZ_EPROTO, "second BUILD on one object");
    o->u.o.state = st;
    return 0;
  }
  case OP_MEMOIZE: return memo_put(m, m->n_memo);
  case OP_BINPUT: return (p = take(m, 1)) ? memo_put(m, *p) : m->err->code;
  case OP_LONG_BINPUT: return (p = take(m, 4)) ? memo_put(m, le(p, 4)) : m->err->code;
  case OP_PUT: return line_index(m, &idx) ? m->err->code : memo_put(m, idx);
  case OP_BINGET: return (p = take(m, 1)) ? memo_get(m, *p) : m->err->code;
  case OP_LONG_BINGET: return (p = take(m, 4)) ? memo_get(m, le(p, 4)) : m->err->code;
  case OP_GET: return line_index(m, &idx) ? m->err->code : memo_get(m, idx);
  default: return fail(m, EZ_EPROTO, "unknown or unsupported opcode");
  }
}

/* ---- the depth check ------------------------------------------------------------------------ */

/* Sets n->height (1 for a leaf); fails on a cycle or a height over max_depth. */
static int height(vm *m, ezi_pk *n, size_t depth) {
  if (n->mark == 2) return 0;
  if (n->mark == 1) return fail(m, EZ_EPROTO, "the pickle builds a cycle");
  if (depth > m->lim.max_depth)
    return fail(m, EZ_EMSGSIZE, "nested deeper than %zu", m->lim.max_depth);
  n->mark = 1;
  size_t h = 0;
  ezi_pk *kids[6];
  ezi_pk **v = kids;
  size_t k = 0;
  switch (n->type) {
  case EZI_PK_LIST:
  case EZI_PK_TUPLE:
  case EZI_PK_DICT:
  case EZI_PK_SET:
  case EZI_PK_FROZENSET:
    v = n->u.seq.v;
    k = n->u.seq.n;
    break;
  case EZI_PK_OBJECT:
    kids[0] = n->u.o.cls, kids[1] = n->u.o.args, kids[2] = n->u.o.kwargs;
    kids[3] = n->u.o.state, kids[4] = n->u.o.list, kids[5] = n->u.o.dict;
    k = 6;
    break;
  default: break;
  }
  for (size_t i = 0; i < k; i++) {
    if (!v[i]) continue;
    if (height(m, v[i], depth + 1)) return m->err->code;
    if (v[i]->height > h) h = v[i]->height;
  }
  if (h + 1 + depth > m->lim.max_depth + 1)
    return fail(m, EZ_EMSGSIZE, "nested deeper than %zu", m->lim.max_depth);
  n->height = (uint16_t)(h + 1);
  n->mark = 2;
  return 0;
}

int ezi_pk_load(const uint8_t *buf, size_t len, const ezi_pk_limits *lim, ezi_pk_doc **doc,
                const ezi_pk **root, ezi_pk_err *err) {
  ezi_pk_err scratch;
  if (!err) err = &scratch;
  *err = (ezi_pk_err){0};
  *doc = NULL;
  *root = NULL;
  vm m = {.buf = buf, .len = len, .err = err};
  if (lim) m.lim = *lim;
  if (!m.lim.max_input) m.lim.max_input = 64u << 20;
  if (!m.lim.max_nodes) m.lim.max_nodes = 4u << 20;
  if (!m.lim.max_depth) m.lim.max_depth = EZI_PK_DEFAULT_DEPTH;
  if (m.lim.max_depth > MAX_DEPTH_CAP) m.lim.max_depth = MAX_DEPTH_CAP;
  if (!m.lim.max_memo) m.lim.max_memo = 1u << 20;
  if (!m.lim.max_str) m.lim.max_str = 16u << 20;
  if (!buf || len == 0) return fail(&m, EZ_EPROTO, "empty input");
  if (len > m.lim.max_input)
    return fail(&m, EZ_EMSGSIZE, "%zu bytes of input, over %zu", len, m.lim.max_input);
  if (!(m.doc = ezi_pk_doc_new())) return fail(&m, EZ_ENOMEM, "out of memory");
  bool stop = false;
  while (!err->code && !stop)
    step(&m, &stop);
  ezi_pk *top_value = NULL;
  if (!err->code) {
    m.op_at = len - 1;
    m.op = OP_STOP;
    top_value = m.stack[0];
    height(&m, top_value, 1);
  }
  free(m.stack);
  free(m.marks);
  free(m.memo);
  if (err->code) {
    ezi_pk_doc_free(m.doc);
    return err->code;
  }
  ezi_pk_doc_set_proto(m.doc, m.proto);
  *doc = m.doc;
  *root = top_value;
  return 0;
}
