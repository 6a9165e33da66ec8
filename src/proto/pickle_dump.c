/* The pickle encoder: protocol 4, written the way Python's pickler writes it (the same opcodes,
 * batching of 1000 items, memo and framing rules), so that pickle.loads gives objects equal to
 * the tree. A node reachable twice is written once and fetched with BINGET / LONG_BINGET after
 * that; str, bytes and GLOBAL nodes with equal contents are written once too (Python shares
 * them by identity, which for immutable values is the same thing). */
#include "proto/pickle.h"

#include "ezmsg/ezmsg.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* clang-format off */
enum {
  OP_MARK = '(', OP_STOP = '.', OP_BININT = 'J', OP_BININT1 = 'K', OP_BININT2 = 'M',
  OP_NONE = 'N', OP_REDUCE = 'R', OP_BINUNICODE = 'X', OP_APPEND = 'a', OP_BUILD = 'b',
  OP_EMPTY_DICT = '}', OP_APPENDS = 'e', OP_BINGET = 'h', OP_LONG_BINGET = 'j',
  OP_EMPTY_LIST = ']', OP_SETITEM = 's', OP_TUPLE = 't', OP_EMPTY_TUPLE = ')', OP_SETITEMS = 'u',
  OP_BINFLOAT = 'G', OP_BINBYTES = 'B', OP_SHORT_BINBYTES = 'C', OP_PROTO = 0x80, OP_NEWOBJ = 0x81,
  OP_TUPLE1 = 0x85, OP_NEWTRUE = 0x88, OP_NEWFALSE = 0x89, OP_LONG1 = 0x8a, OP_LONG4 = 0x8b,
  OP_SHORT_BINUNICODE = 0x8c, OP_BINUNICODE8 = 0x8d, OP_BINBYTES8 = 0x8e, OP_EMPTY_SET = 0x8f,
  OP_ADDITEMS = 0x90, OP_FROZENSET = 0x91, OP_NEWOBJ_EX = 0x92, OP_STACK_GLOBAL = 0x93,
  OP_MEMOIZE = 0x94, OP_FRAME = 0x95,
};
/* clang-format on */
enum { BATCH = 1000, FRAME_TARGET = 65536, FRAME_MIN = 4 };
#define IN_PROGRESS UINT32_MAX

typedef struct bbuf {
  uint8_t *p;
  size_t len, cap;
} bbuf;

/* Memo maps: node pointer -> memo index, and contents (str, bytes, global) -> memo index. */
typedef struct slot {
  const void *key; /* a node */
  uint32_t idx;
} slot;

typedef struct map {
  slot *s;
  size_t cap, n;
} map;

typedef struct enc {
  bbuf out, frame;
  bool framing, nomem;
  map by_ptr, by_content;
  uint32_t memo;
  size_t max_depth;
  ezi_pk_err *err;
  void **owned; /* nodes the encoder made for itself (freed at the end) */
  size_t n_owned, cap_owned;
} enc;

static int fail(enc *e, int code, const char *fmt, ...) {
  if (e->err->code) return e->err->code;
  e->err->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->err->msg, sizeof(e->err->msg), fmt, ap);
  va_end(ap);
  return code;
}

/* n bytes of zeroed memory that live until the end of the dump (NULL and an error on ENOMEM). */
static void *own(enc *e, size_t n) {
  void *p = calloc(1, n);
  if (p && e->n_owned == e->cap_owned) {
    size_t nc = e->cap_owned ? e->cap_owned * 2 : 16;
    void **o = realloc(e->owned, nc * sizeof(*o));
    if (o) e->owned = o, e->cap_owned = nc;
  }
  if (!p || e->n_owned == e->cap_owned) {
    free(p);
    fail(e, EZ_ENOMEM, "out of memory");
    return NULL;
  }
  return e->owned[e->n_owned++] = p;
}

static void put_to(enc *e, bbuf *b, const void *s, size_t n) {
  if (e->nomem || n == 0) return;
  if (n > b->cap - b->len) {
    size_t nc = b->cap ? b->cap : 1024;
    while (nc - b->len < n) {
      if (nc > SIZE_MAX / 2) {
        e->nomem = true;
        return;
      }
      nc *= 2;
    }
    uint8_t *np = realloc(b->p, nc);
    if (!np) {
      e->nomem = true;
      return;
    }
    b->p = np;
    b->cap = nc;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
}

static void put(enc *e, const void *s, size_t n) {
  put_to(e, e->framing ? &e->frame : &e->out, s, n);
}
static void put1(enc *e, uint8_t c) { put(e, &c, 1); }
static void put_le(enc *e, uint64_t v, int n) {
  uint8_t t[8];
  for (int i = 0; i < n; i++)
    t[i] = (uint8_t)(v >> (8 * i));
  put(e, t, (size_t)n);
}

/* Moves the current frame to the output, with a FRAME header unless it is tiny. */
static void commit(enc *e, bool force) {
  if (!e->framing || (!force && e->frame.len < FRAME_TARGET) || e->frame.len == 0) return;
  if (e->frame.len >= FRAME_MIN) {
    uint8_t h[9] = {OP_FRAME};
    for (int i = 0; i < 8; i++)
      h[1 + i] = (uint8_t)((uint64_t)e->frame.len >> (8 * i));
    put_to(e, &e->out, h, sizeof(h));
  }
  put_to(e, &e->out, e->frame.p, e->frame.len);
  e->frame.len = 0;
}

/* A header and a payload of 64 KiB or more: outside frames, as Python writes them. */
static void put_large(enc *e, const uint8_t *hdr, size_t hn, const void *p, size_t n) {
  if (!e->framing || n < FRAME_TARGET) {
    put(e, hdr, hn);
    put(e, p, n);
    return;
  }
  commit(e, true);
  put_to(e, &e->out, hdr, hn);
  put_to(e, &e->out, p, n);
}

/* ---- memo maps ------------------------------------------------------------------------------ */

static uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 33);
}

static uint64_t content_hash(const ezi_pk *n) {
  uint64_t h = 1469598103934665603ull ^ n->type;
  const char *parts[2] = {n->u.s.p, NULL};
  size_t lens[2] = {n->u.s.len, 0};
  if (n->type == EZI_PK_GLOBAL) {
    parts[0] = n->u.g.mod, lens[0] = strlen(n->u.g.mod);
    parts[1] = n->u.g.name, lens[1] = strlen(n->u.g.name);
  }
  for (int k = 0; k < 2; k++) {
    for (size_t i = 0; i < lens[k]; i++)
      h = (h ^ (unsigned char)parts[k][i]) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
  }
  return mix(h);
}

static bool same_content(const ezi_pk *a, const ezi_pk *b) {
  if (a->type != b->type) return false;
  if (a->type == EZI_PK_GLOBAL)
    return !strcmp(a->u.g.mod, b->u.g.mod) && !strcmp(a->u.g.name, b->u.g.name);
  return a->u.s.len == b->u.s.len && memcmp(a->u.s.p, b->u.s.p, a->u.s.len) == 0;
}

static uint64_t key_hash(const map *mp, const enc *e, const void *k) {
  return mp == &e->by_ptr ? mix((uint64_t)(uintptr_t)k) : content_hash(k);
}

static bool key_eq(const map *mp, const enc *e, const void *a, const void *b) {
  return mp == &e->by_ptr ? a == b : same_content(a, b);
}

static slot *find(enc *e, map *mp, const void *k) {
  if (!mp->cap) return NULL;
  size_t mask = mp->cap - 1;
  for (size_t j = (size_t)key_hash(mp, e, k) & mask;; j = (j + 1) & mask)
    if (!mp->s[j].key || key_eq(mp, e, mp->s[j].key, k)) return &mp->s[j];
}

static int map_put(enc *e, map *mp, const void *k, uint32_t idx) {
  slot *s = find(e, mp, k);
  if (s && s->key) {
    s->idx = idx;
    return 0;
  }
  if ((mp->n + 1) * 2 > mp->cap) {
    size_t nc = mp->cap ? mp->cap * 2 : 256;
    slot *old = mp->s;
    size_t oc = mp->cap;
    if (!(mp->s = calloc(nc, sizeof(*mp->s)))) {
      mp->s = old;
      return fail(e, EZ_ENOMEM, "out of memory");
    }
    mp->cap = nc;
    for (size_t i = 0; i < oc; i++)
      if (old[i].key) *find(e, mp, old[i].key) = old[i];
    free(old);
  }
  *find(e, mp, k) = (slot){k, idx};
  mp->n++;
  return 0;
}

static void get(enc *e, uint32_t idx) {
  if (idx < 256) {
    put1(e, OP_BINGET);
    put1(e, (uint8_t)idx);
  } else {
    put1(e, OP_LONG_BINGET);
    put_le(e, idx, 4);
  }
}

/* MEMOIZE for node n (and its contents, for str/bytes/global). */
static int memoize(enc *e, const ezi_pk *n, bool by_content) {
  put1(e, OP_MEMOIZE);
  uint32_t idx = e->memo++;
  if (map_put(e, &e->by_ptr, n, idx)) return e->err->code;
  return by_content ? map_put(e, &e->by_content, n, idx) : 0;
}

/* ---- values --------------------------------------------------------------------------------- */

static int save(enc *e, const ezi_pk *n, size_t depth);

/* Minimal little-endian two's complement of v (Python's encode_long). */
static size_t long_bytes(int64_t v, uint8_t out[8]) {
  uint64_t u;
  memcpy(&u, &v, sizeof(u));
  size_t n = 8;
  for (int i = 0; i < 8; i++)
    out[i] = (uint8_t)(u >> (8 * i));
  while (n > 1 &&
         ((out[n - 1] == 0 && !(out[n - 2] & 0x80)) || (out[n - 1] == 0xff && (out[n - 2] & 0x80))))
    n--;
  return n;
}

static void save_int(enc *e, const ezi_pk *n) {
  uint8_t tmp[8];
  const uint8_t *p = tmp;
  size_t len;
  if (!n->big) {
    int64_t v = n->u.i;
    if (v >= 0 && v <= 0xff) {
      put1(e, OP_BININT1);
      put1(e, (uint8_t)v);
      return;
    }
    if (v >= 0 && v <= 0xffff) {
      put1(e, OP_BININT2);
      put_le(e, (uint64_t)v, 2);
      return;
    }
    if (v >= INT32_MIN && v <= INT32_MAX) {
      put1(e, OP_BININT);
      put_le(e, (uint64_t)(uint32_t)(int32_t)v, 4);
      return;
    }
    len = long_bytes(v, tmp);
  } else {
    p = (const uint8_t *)n->u.s.p;
    len = n->u.s.len;
  }
  if (len < 256) {
    put1(e, OP_LONG1);
    put1(e, (uint8_t)len);
  } else {
    put1(e, OP_LONG4);
    put_le(e, len, 4);
  }
  put(e, p, len);
}

/* str and bytes: memoized, and fetched again when equal contents were written before. */
static int save_blob(enc *e, const ezi_pk *n) {
  slot *s = find(e, &e->by_content, n);
  if (s && s->key) {
    get(e, s->idx);
    return map_put(e, &e->by_ptr, n, s->idx);
  }
  uint8_t h[9];
  size_t len = n->u.s.len;
  bool str = n->type == EZI_PK_STR;
  if (len < 256) {
    h[0] = str ? OP_SHORT_BINUNICODE : OP_SHORT_BINBYTES;
    h[1] = (uint8_t)len;
    put(e, h, 2);
    put(e, n->u.s.p, len);
  } else {
    int w = len > UINT32_MAX ? 8 : 4;
    h[0] = str ? (w == 8 ? OP_BINUNICODE8 : OP_BINUNICODE) : (w == 8 ? OP_BINBYTES8 : OP_BINBYTES);
    for (int i = 0; i < w; i++)
      h[1 + i] = (uint8_t)((uint64_t)len >> (8 * i));
    put_large(e, h, (size_t)w + 1, n->u.s.p, len);
  }
  return memoize(e, n, true);
}

/* A GLOBAL's module or name, as save() of a str node with those bytes. */
static int save_name(enc *e, const char *s) {
  ezi_pk *n = own(e, sizeof(*n));
  if (!n) return e->err->code;
  *n = (ezi_pk){.type = EZI_PK_STR, .u.s = {(char *)s, strlen(s)}};
  commit(e, false);
  return save_blob(e, n);
}

static int save_global(enc *e, const ezi_pk *n) {
  slot *s = find(e, &e->by_content, n);
  if (s && s->key) {
    get(e, s->idx);
    return map_put(e, &e->by_ptr, n, s->idx);
  }
  if (save_name(e, n->u.g.mod) || save_name(e, n->u.g.name)) return e->err->code;
  put1(e, OP_STACK_GLOBAL);
  return memoize(e, n, true);
}

/* Items in batches of 1000: MARK items OP (or, for lists and dicts, item OP1 for a batch of one;
 * sets always take the MARK form). v holds `count` entries, `step` per item (2 for pairs). */
static int batches(enc *e, ezi_pk *const *v, size_t count, size_t step, uint8_t op, int op1,
                   size_t depth) {
  for (size_t start = 0; start < count; start += BATCH * step) {
    size_t n = (count - start) / step < BATCH ? (count - start) / step : BATCH;
    bool marked = n > 1 || op1 < 0;
    if (marked) put1(e, OP_MARK);
    for (size_t i = start; i < start + n * step; i++)
      if (save(e, v[i], depth + 1)) return e->err->code;
    put1(e, marked ? op : (uint8_t)op1);
  }
  return 0;
}

static bool keys_hashable(const ezi_pk *c, size_t step) {
  for (size_t i = 0; i < c->u.seq.n; i += step)
    if (!c->u.seq.v[i]->hashable) return false;
  return true;
}

static int save_object(enc *e, const ezi_pk *n, size_t depth) {
  const ezi_pk *o_args = n->u.o.args;
  if (!n->u.o.cls || !o_args || o_args->type != EZI_PK_TUPLE ||
      (n->how == EZI_PK_NEWOBJ_EX && (!n->u.o.kwargs || n->u.o.kwargs->type != EZI_PK_DICT)))
    return fail(e, EZ_EINVAL, "an object without class or argument tuple");
  if (map_put(e, &e->by_ptr, n, IN_PROGRESS)) return e->err->code;
  if (save(e, n->u.o.cls, depth + 1) || save(e, o_args, depth + 1)) return e->err->code;
  if (n->how == EZI_PK_NEWOBJ_EX && save(e, n->u.o.kwargs, depth + 1)) return e->err->code;
  put1(e, n->how == EZI_PK_NEWOBJ      ? OP_NEWOBJ
          : n->how == EZI_PK_NEWOBJ_EX ? OP_NEWOBJ_EX
                                       : OP_REDUCE);
  if (memoize(e, n, false)) return e->err->code;
  const ezi_pk *l = n->u.o.list, *d = n->u.o.dict;
  if (l && batches(e, l->u.seq.v, l->u.seq.n, 1, OP_APPENDS, OP_APPEND, depth)) return e->err->code;
  if (d && !keys_hashable(d, 2)) return fail(e, EZ_EINVAL, "unhashable key");
  if (d && batches(e, d->u.seq.v, d->u.seq.n, 2, OP_SETITEMS, OP_SETITEM, depth))
    return e->err->code;
  if (n->u.o.state) {
    if (save(e, n->u.o.state, depth + 1)) return e->err->code;
    put1(e, OP_BUILD);
  }
  return 0;
}

static int save(enc *e, const ezi_pk *n, size_t depth) {
  commit(e, false); /* Python's pickler may start a new frame before any value */
  if (e->err->code) return e->err->code;
  if (e->nomem) return fail(e, EZ_ENOMEM, "out of memory");
  if (!n) return fail(e, EZ_EINVAL, "a NULL node");
  if (depth > e->max_depth) return fail(e, EZ_EINVAL, "nested deeper than %zu", e->max_depth);
  slot *s = find(e, &e->by_ptr, n);
  if (s && s->key) {
    if (s->idx == IN_PROGRESS)
      return fail(e, EZ_EINVAL, "a cycle through a tuple, frozenset or constructor arguments");
    get(e, s->idx);
    return 0;
  }
  switch (n->type) {
  case EZI_PK_NONE: put1(e, OP_NONE); return 0;
  case EZI_PK_BOOL: put1(e, n->b ? OP_NEWTRUE : OP_NEWFALSE); return 0;
  case EZI_PK_INT: save_int(e, n); return 0;
  case EZI_PK_FLOAT: {
    uint64_t bits;
    memcpy(&bits, &n->u.f, sizeof(bits));
    uint8_t b[9] = {OP_BINFLOAT};
    for (int i = 0; i < 8; i++)
      b[1 + i] = (uint8_t)(bits >> (56 - 8 * i));
    put(e, b, sizeof(b));
    return 0;
  }
  case EZI_PK_STR:
  case EZI_PK_BYTES: return save_blob(e, n);
  case EZI_PK_BYTEARRAY: { /* protocol 4: REDUCE(builtins.bytearray, (bytes,)), or () if empty */
    /* written at this node's depth: for the decoder's depth check a bytearray is a leaf */
    ezi_pk *t = own(e, 2 * sizeof(*t));
    if (!t) return e->err->code;
    t[0] = (ezi_pk){.type = EZI_PK_GLOBAL, .u.g = {"builtins", "bytearray"}};
    t[1] = (ezi_pk){.type = EZI_PK_BYTES, .hashable = true, .u.s = n->u.s};
    if (save_global(e, &t[0])) return e->err->code;
    commit(e, false);
    if (n->u.s.len == 0) {
      put1(e, OP_EMPTY_TUPLE);
    } else {
      if (save_blob(e, &t[1])) return e->err->code;
      put1(e, OP_TUPLE1);
      put1(e, OP_MEMOIZE); /* the argument tuple, never fetched again */
      e->memo++;
    }
    put1(e, OP_REDUCE);
    return memoize(e, n, false);
  }
  case EZI_PK_GLOBAL: return save_global(e, n);
  case EZI_PK_TUPLE:
  case EZI_PK_FROZENSET:
    if (n->type == EZI_PK_TUPLE && n->u.seq.n == 0) {
      put1(e, OP_EMPTY_TUPLE);
      return 0;
    }
    if (n->type == EZI_PK_FROZENSET && !keys_hashable(n, 1))
      return fail(e, EZ_EINVAL, "unhashable set item");
    if (map_put(e, &e->by_ptr, n, IN_PROGRESS)) return e->err->code;
    bool marked = n->type == EZI_PK_FROZENSET || n->u.seq.n > 3;
    if (marked) put1(e, OP_MARK);
    for (size_t i = 0; i < n->u.seq.n; i++)
      if (save(e, n->u.seq.v[i], depth + 1)) return e->err->code;
    put1(e, n->type == EZI_PK_FROZENSET ? OP_FROZENSET
            : marked                    ? OP_TUPLE
                                        : (uint8_t)(OP_TUPLE1 + n->u.seq.n - 1));
    return memoize(e, n, false);
  case EZI_PK_LIST:
    put1(e, OP_EMPTY_LIST);
    if (memoize(e, n, false)) return e->err->code;
    return batches(e, n->u.seq.v, n->u.seq.n, 1, OP_APPENDS, OP_APPEND, depth);
  case EZI_PK_DICT:
    if (!keys_hashable(n, 2)) return fail(e, EZ_EINVAL, "unhashable key");
    put1(e, OP_EMPTY_DICT);
    if (memoize(e, n, false)) return e->err->code;
    return batches(e, n->u.seq.v, n->u.seq.n, 2, OP_SETITEMS, OP_SETITEM, depth);
  case EZI_PK_SET:
    if (!keys_hashable(n, 1)) return fail(e, EZ_EINVAL, "unhashable set item");
    put1(e, OP_EMPTY_SET);
    if (memoize(e, n, false)) return e->err->code;
    return batches(e, n->u.seq.v, n->u.seq.n, 1, OP_ADDITEMS, -1, depth);
  case EZI_PK_OBJECT: return save_object(e, n, depth);
  default: return fail(e, EZ_EINVAL, "a node of unknown type %d", n->type);
  }
}

int ezi_pk_dump(const ezi_pk *root, unsigned flags, const ezi_pk_limits *lim, uint8_t **out,
                size_t *len, ezi_pk_err *err) {
  ezi_pk_err scratch;
  if (!err) err = &scratch;
  *err = (ezi_pk_err){0};
  *out = NULL;
  *len = 0;
  enc e = {.err = err, .max_depth = lim && lim->max_depth ? lim->max_depth : EZI_PK_DEFAULT_DEPTH};
  if (e.max_depth > 1000) e.max_depth = 1000;
  put1(&e, OP_PROTO);
  put1(&e, 4);
  e.framing = !(flags & EZI_PK_NOFRAMES);
  if (!save(&e, root, 1)) {
    put1(&e, OP_STOP);
    commit(&e, true);
    if (e.nomem) fail(&e, EZ_ENOMEM, "out of memory");
  }
  for (size_t i = 0; i < e.n_owned; i++)
    free(e.owned[i]);
  free(e.owned);
  free(e.by_ptr.s);
  free(e.by_content.s);
  free(e.frame.p);
  if (err->code) {
    free(e.out.p);
    return err->code;
  }
  *out = e.out.p;
  *len = e.out.len;
  return 0;
}
