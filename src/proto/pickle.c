/* The pickle value tree: documents (arenas), builders, accessors and structural equality. The
 * decoder is pickle_load.c, the encoder pickle_dump.c. */
#include "proto/pickle.h"

#include "proto/dag.h" /* ezi_utf8_valid */
#include "ezmsg/ezmsg.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct chunk {
  struct chunk *next;
  size_t cap, used;
  max_align_t data[]; /* cap bytes */
} chunk;

struct ezi_pk_doc {
  atomic_int refs;
  int proto;
  size_t bytes; /* allocated in chunks */
  size_t next;  /* the size of the next chunk: CHUNK0, doubling up to CHUNK */
  chunk *chunks;
  ezi_pk_doc **kept;
  size_t n_kept, cap_kept;
};

/* A document's chunks start small and double: most documents (one event, one small message) fit
 * in a few hundred bytes, and a server may hold thousands of them at once. */
enum { CHUNK0 = 512, CHUNK = 32768 };

ezi_pk_doc *ezi_pk_doc_new(void) {
  ezi_pk_doc *d = calloc(1, sizeof(*d));
  if (d) atomic_init(&d->refs, 1);
  return d;
}

void ezi_pk_doc_free(ezi_pk_doc *d) {
  if (!d || atomic_fetch_sub(&d->refs, 1) != 1) return;
  for (chunk *c = d->chunks, *next; c; c = next) {
    next = c->next;
    free(c);
  }
  for (size_t i = 0; i < d->n_kept; i++)
    ezi_pk_doc_free(d->kept[i]);
  free(d->kept);
  free(d);
}

/* True if d keeps `target`, directly or through documents it keeps (depth-bounded). */
static bool keeps(const ezi_pk_doc *d, const ezi_pk_doc *target, int depth) {
  if (d == target) return true;
  if (depth > 64) return true; /* treat an absurd chain as a cycle: refuse */
  for (size_t i = 0; i < d->n_kept; i++)
    if (keeps(d->kept[i], target, depth + 1)) return true;
  return false;
}

int ezi_pk_doc_keep(ezi_pk_doc *d, ezi_pk_doc *other) {
  if (!d || !other || d == other) return 0;
  for (size_t i = 0; i < d->n_kept; i++)
    if (d->kept[i] == other) return 0;
  if (keeps(other, d, 0)) return EZ_EINVAL;
  if (d->n_kept == d->cap_kept) {
    size_t nc = d->cap_kept ? d->cap_kept * 2 : 4;
    ezi_pk_doc **k = realloc(d->kept, nc * sizeof(*k));
    if (!k) return EZ_ENOMEM;
    d->kept = k;
    d->cap_kept = nc;
  }
  atomic_fetch_add(&other->refs, 1);
  d->kept[d->n_kept++] = other;
  return 0;
}

void *ezi_pk_alloc(ezi_pk_doc *d, size_t n) {
  if (!d || n > SIZE_MAX / 2) return NULL;
  n = (n + 15) & ~(size_t)15;
  chunk *c = d->chunks;
  if (!c || c->cap - c->used < n) {
    size_t size = d->next ? d->next : CHUNK0;
    bool alone = n > size / 4; /* a big block alone, small ones share chunks */
    size_t cap = alone ? n : size;
    chunk *nc = malloc(sizeof(*nc) + cap);
    if (!nc) return NULL;
    nc->cap = cap;
    nc->used = 0;
    d->bytes += cap;
    if (!alone && size < CHUNK) d->next = size * 2;
    if (!alone || !c) { /* becomes the current chunk */
      nc->next = c;
      d->chunks = nc;
    } else { /* behind the current one, which keeps its free room */
      nc->next = c->next;
      c->next = nc;
    }
    c = nc;
  }
  void *p = (char *)c->data + c->used;
  c->used += n;
  memset(p, 0, n);
  return p;
}

int ezi_pk_doc_proto(const ezi_pk_doc *d) { return d ? d->proto : 0; }

size_t ezi_pk_doc_size(const ezi_pk_doc *d) { return d ? d->bytes : 0; }

void ezi_pk_doc_set_proto(ezi_pk_doc *d, int proto) { d->proto = proto; }

/* ---- builders ------------------------------------------------------------------------------- */

ezi_pk *ezi_pk_node(ezi_pk_doc *d, ezi_pk_type t) {
  ezi_pk *n = ezi_pk_alloc(d, sizeof(*n));
  if (!n) return NULL;
  n->type = (uint8_t)t;
  n->doc = d;
  n->hashable = !(t == EZI_PK_LIST || t == EZI_PK_DICT || t == EZI_PK_SET || t == EZI_PK_BYTEARRAY);
  return n;
}

ezi_pk *ezi_pk_none(ezi_pk_doc *d) { return ezi_pk_node(d, EZI_PK_NONE); }

ezi_pk *ezi_pk_bool(ezi_pk_doc *d, bool v) {
  ezi_pk *n = ezi_pk_node(d, EZI_PK_BOOL);
  if (n) n->b = v;
  return n;
}

ezi_pk *ezi_pk_int(ezi_pk_doc *d, int64_t v) {
  ezi_pk *n = ezi_pk_node(d, EZI_PK_INT);
  if (n) n->u.i = v;
  return n;
}

ezi_pk *ezi_pk_bigint(ezi_pk_doc *d, const uint8_t *le, size_t n) {
  /* Minimal two's complement: drop top bytes that only repeat the sign. */
  while (n > 1 &&
         ((le[n - 1] == 0 && !(le[n - 2] & 0x80)) || (le[n - 1] == 0xff && (le[n - 2] & 0x80))))
    n--;
  if (n <= 8) {
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;)
      v = v << 8 | le[i];
    if (n > 0 && n < 8 && (le[n - 1] & 0x80)) v |= UINT64_MAX << (8 * n); /* sign-extend */
    int64_t s;
    memcpy(&s, &v, sizeof(s));
    return ezi_pk_int(d, s);
  }
  ezi_pk *x = ezi_pk_node(d, EZI_PK_INT);
  char *p = x ? ezi_pk_alloc(d, n + 1) : NULL;
  if (!p) return NULL;
  memcpy(p, le, n);
  x->big = true;
  x->u.s.p = p;
  x->u.s.len = n;
  return x;
}

ezi_pk *ezi_pk_float(ezi_pk_doc *d, double v) {
  ezi_pk *n = ezi_pk_node(d, EZI_PK_FLOAT);
  if (n) n->u.f = v;
  return n;
}

static ezi_pk *blob(ezi_pk_doc *d, ezi_pk_type t, const void *p, size_t len) {
  ezi_pk *n = ezi_pk_node(d, t);
  char *c = n ? ezi_pk_alloc(d, len + 1) : NULL;
  if (!c) return NULL;
  if (len) memcpy(c, p, len);
  n->u.s.p = c;
  n->u.s.len = len;
  return n;
}

ezi_pk *ezi_pk_str(ezi_pk_doc *d, const char *s, size_t len) {
  if (!s || !ezi_utf8_valid(s, len)) return NULL;
  return blob(d, EZI_PK_STR, s, len);
}

ezi_pk *ezi_pk_cstr(ezi_pk_doc *d, const char *s) { return s ? ezi_pk_str(d, s, strlen(s)) : NULL; }

ezi_pk *ezi_pk_bytes(ezi_pk_doc *d, const void *p, size_t len) {
  return blob(d, EZI_PK_BYTES, p, len);
}

ezi_pk *ezi_pk_bytearray(ezi_pk_doc *d, const void *p, size_t len) {
  return blob(d, EZI_PK_BYTEARRAY, p, len);
}

ezi_pk *ezi_pk_container(ezi_pk_doc *d, ezi_pk_type t) {
  if (t != EZI_PK_LIST && t != EZI_PK_TUPLE && t != EZI_PK_DICT && t != EZI_PK_SET &&
      t != EZI_PK_FROZENSET)
    return NULL;
  return ezi_pk_node(d, t);
}

ezi_pk *ezi_pk_global(ezi_pk_doc *d, const char *mod, const char *name) {
  if (!mod || !name || !*mod || !*name) return NULL;
  size_t ml = strlen(mod), nl = strlen(name);
  if (!ezi_utf8_valid(mod, ml) || !ezi_utf8_valid(name, nl)) return NULL;
  ezi_pk *n = ezi_pk_node(d, EZI_PK_GLOBAL);
  char *m = n ? ezi_pk_alloc(d, ml + 1) : NULL, *q = m ? ezi_pk_alloc(d, nl + 1) : NULL;
  if (!q) return NULL;
  n->u.g.mod = memcpy(m, mod, ml);
  n->u.g.name = memcpy(q, name, nl);
  return n;
}

ezi_pk *ezi_pk_object(ezi_pk_doc *d, ezi_pk_how how, ezi_pk *cls, ezi_pk *args, ezi_pk *kwargs) {
  if (!cls || how < EZI_PK_NEWOBJ || how > EZI_PK_REDUCE) return NULL;
  if (args && args->type != EZI_PK_TUPLE) return NULL;
  if ((how == EZI_PK_NEWOBJ_EX) != (kwargs != NULL)) return NULL;
  if (kwargs && kwargs->type != EZI_PK_DICT) return NULL;
  if (!args && !(args = ezi_pk_node(d, EZI_PK_TUPLE))) return NULL;
  ezi_pk *n = ezi_pk_node(d, EZI_PK_OBJECT);
  if (!n) return NULL;
  n->how = (uint8_t)how;
  n->u.o.cls = cls;
  n->u.o.args = args;
  n->u.o.kwargs = kwargs;
  return n;
}

/* Room for `more` entries in a container node's array (allocated in its document). */
static int reserve(ezi_pk *c, size_t more) {
  if (c->u.seq.cap - c->u.seq.n >= more) return 0;
  size_t nc = c->u.seq.cap ? c->u.seq.cap : 4;
  while (nc - c->u.seq.n < more) {
    if (nc > SIZE_MAX / 16) return EZ_ENOMEM;
    nc *= 2;
  }
  ezi_pk **v = ezi_pk_alloc(c->doc, nc * sizeof(*v));
  if (!v) return EZ_ENOMEM;
  if (c->u.seq.n) memcpy(v, c->u.seq.v, c->u.seq.n * sizeof(*v));
  c->u.seq.v = v;
  c->u.seq.cap = nc;
  return 0;
}

/* The LIST or DICT an OBJECT keeps its appended / set items in, created on first use. */
static ezi_pk *object_part(ezi_pk *obj, bool dict) {
  ezi_pk **slot = dict ? &obj->u.o.dict : &obj->u.o.list;
  if (!*slot) *slot = ezi_pk_node(obj->doc, dict ? EZI_PK_DICT : EZI_PK_LIST);
  return *slot;
}

int ezi_pk_append(ezi_pk *c, ezi_pk *item) {
  if (!c || !item) return EZ_EINVAL;
  if (c->type == EZI_PK_OBJECT) {
    if (!(c = object_part(c, false))) return EZ_ENOMEM;
  }
  switch (c->type) {
  case EZI_PK_SET:
  case EZI_PK_FROZENSET:
    if (!item->hashable) return EZ_EINVAL;
    break;
  case EZI_PK_LIST: break;
  case EZI_PK_TUPLE: c->hashable = c->hashable && item->hashable; break;
  default: return EZ_EINVAL;
  }
  if (reserve(c, 1)) return EZ_ENOMEM;
  c->u.seq.v[c->u.seq.n++] = item;
  return 0;
}

int ezi_pk_dict_set(ezi_pk *dict, ezi_pk *key, ezi_pk *value) {
  if (!dict || !key || !value) return EZ_EINVAL;
  if (dict->type == EZI_PK_OBJECT && !(dict = object_part(dict, true))) return EZ_ENOMEM;
  if (dict->type != EZI_PK_DICT || !key->hashable) return EZ_EINVAL;
  if (key->type == EZI_PK_STR) {
    for (size_t i = 0; i < dict->u.seq.n; i += 2) {
      const ezi_pk *k = dict->u.seq.v[i];
      if (k->type == EZI_PK_STR && k->u.s.len == key->u.s.len &&
          memcmp(k->u.s.p, key->u.s.p, k->u.s.len) == 0) {
        dict->u.seq.v[i + 1] = value;
        return 0;
      }
    }
  }
  return ezi_pk_dict_add(dict, key, value);
}

int ezi_pk_dict_add(ezi_pk *dict, ezi_pk *key, ezi_pk *value) {
  if (!dict || !key || !value) return EZ_EINVAL;
  if (dict->type == EZI_PK_OBJECT && !(dict = object_part(dict, true))) return EZ_ENOMEM;
  if (dict->type != EZI_PK_DICT || !key->hashable) return EZ_EINVAL;
  if (reserve(dict, 2)) return EZ_ENOMEM;
  dict->u.seq.v[dict->u.seq.n++] = key;
  dict->u.seq.v[dict->u.seq.n++] = value;
  return 0;
}

int ezi_pk_dict_set_str(ezi_pk *dict, const char *key, ezi_pk *value) {
  if (!dict) return EZ_EINVAL;
  ezi_pk *k = ezi_pk_cstr(dict->doc, key);
  return k ? ezi_pk_dict_set(dict, k, value) : key ? EZ_ENOMEM : EZ_EINVAL;
}

ezi_pk *ezi_pk_dataclass(ezi_pk_doc *d, const char *mod, const char *name) {
  ezi_pk *cls = ezi_pk_global(d, mod, name);
  ezi_pk *o = cls ? ezi_pk_object(d, EZI_PK_NEWOBJ, cls, NULL, NULL) : NULL;
  if (o && !(o->u.o.state = ezi_pk_node(d, EZI_PK_DICT))) return NULL;
  return o;
}

int ezi_pk_attr_set(ezi_pk *obj, const char *name, ezi_pk *value) {
  if (!obj || obj->type != EZI_PK_OBJECT || !value) return EZ_EINVAL;
  if (!obj->u.o.state && !(obj->u.o.state = ezi_pk_node(obj->doc, EZI_PK_DICT))) return EZ_ENOMEM;
  if (obj->u.o.state->type != EZI_PK_DICT) return EZ_EINVAL;
  return ezi_pk_dict_set_str(obj->u.o.state, name, value);
}

ezi_pk *ezi_pk_enum(ezi_pk_doc *d, const char *mod, const char *name, ezi_pk *value) {
  ezi_pk *cls = ezi_pk_global(d, mod, name), *args = ezi_pk_node(d, EZI_PK_TUPLE);
  if (!cls || !args || !value || ezi_pk_append(args, value)) return NULL;
  return ezi_pk_object(d, EZI_PK_REDUCE, cls, args, NULL);
}

ezi_pk *ezi_pk_namedtuple(ezi_pk_doc *d, const char *mod, const char *name, ezi_pk *args) {
  ezi_pk *cls = ezi_pk_global(d, mod, name);
  return cls ? ezi_pk_object(d, EZI_PK_NEWOBJ, cls, args, NULL) : NULL;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

ezi_pk *ezi_pk_uuid(ezi_pk_doc *d, const char *s) {
  if (!s || strlen(s) != 36) return NULL;
  uint8_t be[16];
  int k = 0;
  for (int i = 0; i < 36; i++) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (s[i] != '-') return NULL;
      continue;
    }
    int h = hexval(s[i]);
    if (h < 0) return NULL;
    if (k % 2 == 0)
      be[k / 2] = (uint8_t)(h << 4);
    else
      be[k / 2] |= (uint8_t)h;
    k++;
  }
  uint8_t le[17] = {0}; /* the int, non-negative: one more byte for the sign */
  for (int i = 0; i < 16; i++)
    le[i] = be[15 - i];
  ezi_pk *o = ezi_pk_dataclass(d, "uuid", "UUID"), *v = ezi_pk_bigint(d, le, 17);
  if (!o || !v || ezi_pk_attr_set(o, "int", v)) return NULL;
  return o;
}

/* ---- accessors ------------------------------------------------------------------------------ */

bool ezi_pk_is_global(const ezi_pk *n, const char *mod, const char *name) {
  return n && n->type == EZI_PK_GLOBAL && strcmp(n->u.g.mod, mod) == 0 &&
         strcmp(n->u.g.name, name) == 0;
}

bool ezi_pk_is_class(const ezi_pk *n, const char *mod, const char *name) {
  return n && n->type == EZI_PK_OBJECT && ezi_pk_is_global(n->u.o.cls, mod, name);
}

size_t ezi_pk_len(const ezi_pk *n) {
  if (!n) return 0;
  switch (n->type) {
  case EZI_PK_LIST:
  case EZI_PK_TUPLE:
  case EZI_PK_SET:
  case EZI_PK_FROZENSET: return n->u.seq.n;
  case EZI_PK_DICT: return n->u.seq.n / 2;
  default: return 0;
  }
}

const ezi_pk *ezi_pk_item(const ezi_pk *n, size_t i) {
  if (!n || n->type == EZI_PK_DICT || i >= ezi_pk_len(n)) return NULL;
  return n->u.seq.v[i];
}

const ezi_pk *ezi_pk_key(const ezi_pk *n, size_t i) {
  return n && n->type == EZI_PK_DICT && i < n->u.seq.n / 2 ? n->u.seq.v[2 * i] : NULL;
}

const ezi_pk *ezi_pk_value(const ezi_pk *n, size_t i) {
  return n && n->type == EZI_PK_DICT && i < n->u.seq.n / 2 ? n->u.seq.v[2 * i + 1] : NULL;
}

const ezi_pk *ezi_pk_dict_get(const ezi_pk *dict, const char *key) {
  if (!dict || dict->type != EZI_PK_DICT || !key) return NULL;
  size_t kl = strlen(key);
  for (size_t i = dict->u.seq.n / 2; i-- > 0;) {
    const ezi_pk *k = dict->u.seq.v[2 * i];
    if (k->type == EZI_PK_STR && k->u.s.len == kl && memcmp(k->u.s.p, key, kl) == 0)
      return dict->u.seq.v[2 * i + 1];
  }
  return NULL;
}

const ezi_pk *ezi_pk_attr(const ezi_pk *obj, const char *name) {
  return obj && obj->type == EZI_PK_OBJECT ? ezi_pk_dict_get(obj->u.o.state, name) : NULL;
}

const ezi_pk *ezi_pk_enum_value(const ezi_pk *n, const char *mod, const char *name) {
  if (!ezi_pk_is_class(n, mod, name) || n->how != EZI_PK_REDUCE || n->u.o.state || n->u.o.list ||
      n->u.o.dict || ezi_pk_len(n->u.o.args) != 1)
    return NULL;
  return n->u.o.args->u.seq.v[0];
}

const char *ezi_pk_str_of(const ezi_pk *n, size_t *len) {
  if (!n || n->type != EZI_PK_STR) return NULL;
  if (len) *len = n->u.s.len;
  return n->u.s.p;
}

const char *ezi_pk_cstr_of(const ezi_pk *n) {
  size_t len;
  const char *s = ezi_pk_str_of(n, &len);
  return s && strlen(s) == len ? s : NULL;
}

int ezi_pk_int_of(const ezi_pk *n, int64_t *out) {
  if (!n || n->type != EZI_PK_INT || n->big) return EZ_EPROTO;
  *out = n->u.i;
  return 0;
}

int ezi_pk_uuid_of(const ezi_pk *n, char out[37]) {
  if (!ezi_pk_is_class(n, "uuid", "UUID") || n->how != EZI_PK_NEWOBJ ||
      ezi_pk_len(n->u.o.args) != 0 || !n->u.o.state || n->u.o.state->type != EZI_PK_DICT ||
      n->u.o.list || n->u.o.dict)
    return EZ_EPROTO;
  const ezi_pk *st = n->u.o.state, *iv = NULL;
  for (size_t i = 0; i < ezi_pk_len(st); i++) {
    const char *k = ezi_pk_cstr_of(ezi_pk_key(st, i));
    const ezi_pk *v = ezi_pk_value(st, i);
    if (k && strcmp(k, "int") == 0)
      iv = v;
    else if (!(k && strcmp(k, "is_safe") == 0 &&
               (v->type == EZI_PK_NONE ||
                (v->type == EZI_PK_INT && !v->big && (v->u.i == 0 || v->u.i == -1)))))
      return EZ_EPROTO;
  }
  if (!iv || iv->type != EZI_PK_INT) return EZ_EPROTO;
  uint8_t le[16] = {0};
  if (iv->big) { /* at most 16 bytes of value plus a zero sign byte */
    size_t len = iv->u.s.len;
    const uint8_t *p = (const uint8_t *)iv->u.s.p;
    if (p[len - 1] & 0x80) return EZ_EPROTO;
    if (len == 17 && p[16] == 0) len = 16;
    if (len > 16) return EZ_EPROTO;
    memcpy(le, p, len);
  } else {
    if (iv->u.i < 0) return EZ_EPROTO;
    for (int i = 0; i < 8; i++)
      le[i] = (uint8_t)((uint64_t)iv->u.i >> (8 * i));
  }
  static const char hex[] = "0123456789abcdef";
  int k = 0;
  for (int i = 15; i >= 0; i--) {
    for (int half = 0; half < 2; half++) {
      if (k == 8 || k == 13 || k == 18 || k == 23) out[k++] = '-';
      out[k++] = hex[half ? le[i] & 15 : le[i] >> 4];
    }
  }
  out[36] = '\0';
  return 0;
}

const char *ezi_pk_type_name(const ezi_pk *n) {
  static const char *const names[] = {"?",    "None",  "bool",      "int",   "float",
                                      "str",  "bytes", "bytearray", "list",  "tuple",
                                      "dict", "set",   "frozenset", "global"};
  if (!n) return "nothing";
  if (n->type == EZI_PK_OBJECT)
    return n->u.o.cls && n->u.o.cls->type == EZI_PK_GLOBAL ? n->u.o.cls->u.g.name : "object";
  return n->type < sizeof(names) / sizeof(*names) ? names[n->type] : "?";
}

/* ---- equality ------------------------------------------------------------------------------- */

/* Pairs (a, b) assumed equal: an open-addressing set, so that shared and cyclic structure is
 * compared once per pair. */
typedef struct pairs {
  const ezi_pk **k; /* 2 per slot */
  size_t cap, n;
  bool fail;
} pairs;

enum { MAX_PAIRS = 1 << 24 };

static size_t pair_hash(const ezi_pk *a, const ezi_pk *b) {
  uint64_t h = (uint64_t)(uintptr_t)a * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)b;
  return (size_t)(h ^ (h >> 31));
}

/* Adds (a, b); returns true if it was already there. */
static bool pair_seen(pairs *p, const ezi_pk *a, const ezi_pk *b) {
  if (p->n * 2 >= p->cap) {
    size_t nc = p->cap ? p->cap * 2 : 256;
    if (nc > MAX_PAIRS) {
      p->fail = true;
      return true;
    }
    const ezi_pk **nk = calloc(nc * 2, sizeof(*nk));
    if (!nk) {
      p->fail = true;
      return true;
    }
    for (size_t i = 0; i < p->cap; i++) {
      if (!p->k[2 * i]) continue;
      size_t j = pair_hash(p->k[2 * i], p->k[2 * i + 1]) & (nc - 1);
      while (nk[2 * j])
        j = (j + 1) & (nc - 1);
      nk[2 * j] = p->k[2 * i];
      nk[2 * j + 1] = p->k[2 * i + 1];
    }
    free(p->k);
    p->k = nk;
    p->cap = nc;
  }
  size_t j = pair_hash(a, b) & (p->cap - 1);
  for (; p->k[2 * j]; j = (j + 1) & (p->cap - 1))
    if (p->k[2 * j] == a && p->k[2 * j + 1] == b) return true;
  p->k[2 * j] = a;
  p->k[2 * j + 1] = b;
  p->n++;
  return false;
}

static bool eq(pairs *p, const ezi_pk *a, const ezi_pk *b, int depth) {
  if (a == b) return true;
  if (!a || !b || a->type != b->type) return false;
  if (depth > EZI_PK_DEFAULT_DEPTH * 4) return p->fail = true, false;
  switch (a->type) {
  case EZI_PK_NONE: return true;
  case EZI_PK_BOOL: return a->b == b->b;
  case EZI_PK_FLOAT: return memcmp(&a->u.f, &b->u.f, sizeof(double)) == 0;
  case EZI_PK_INT:
    if (a->big != b->big) return false;
    if (!a->big) return a->u.i == b->u.i;
    /* fall through */
  case EZI_PK_STR:
  case EZI_PK_BYTES:
  case EZI_PK_BYTEARRAY:
    return a->u.s.len == b->u.s.len && memcmp(a->u.s.p, b->u.s.p, a->u.s.len) == 0;
  case EZI_PK_GLOBAL: return !strcmp(a->u.g.mod, b->u.g.mod) && !strcmp(a->u.g.name, b->u.g.name);
  default: break;
  }
  if (pair_seen(p, a, b)) return !p->fail;
  if (a->type == EZI_PK_OBJECT) {
    const ezi_pk *pa[] = {a->u.o.cls,   a->u.o.args, a->u.o.kwargs,
                          a->u.o.state, a->u.o.list, a->u.o.dict};
    const ezi_pk *pb[] = {b->u.o.cls,   b->u.o.args, b->u.o.kwargs,
                          b->u.o.state, b->u.o.list, b->u.o.dict};
    if (a->how != b->how) return false;
    for (int i = 0; i < 6; i++) {
      /* an empty item list or dict is no items at all */
      bool ea = !pa[i] || (i >= 4 && pa[i]->u.seq.n == 0);
      bool eb = !pb[i] || (i >= 4 && pb[i]->u.seq.n == 0);
      if (ea && eb) continue;
      if (ea != eb || !eq(p, pa[i], pb[i], depth + 1)) return false;
    }
    return true;
  }
  if (a->u.seq.n != b->u.seq.n) return false;
  for (size_t i = 0; i < a->u.seq.n; i++)
    if (!eq(p, a->u.seq.v[i], b->u.seq.v[i], depth + 1)) return false;
  return true;
}

bool ezi_pk_equal(const ezi_pk *a, const ezi_pk *b) {
  pairs p = {0};
  bool r = eq(&p, a, b, 0);
  free(p.k);
  return r && !p.fail;
}
