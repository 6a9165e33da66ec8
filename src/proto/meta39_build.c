/* The engine behind meta39.h, building half: one builder driven by the classes' field tables
 * (meta39_classes.c). Strings and bytes are copied into the new tree; kept subtrees are referenced
 * and their documents kept alive. */
#include "proto/meta39_engine.h"

#include "ezmsg/ezmsg.h"

#include <stddef.h>
#include <string.h>

#define AT EZI_M39_AT
#define CAT EZI_M39_CAT
typedef ezi_m39_ctx ctx;
typedef ezi_m39_span span;
typedef ezi_m39_kspan kspan;

/* ---- building ------------------------------------------------------------------------------- */

static ezi_pk *b_str(ctx *c, const char *s) {
  if (!s) return ezi_m39_fail(c, EZ_EINVAL, "NULL for a str"), NULL;
  ezi_pk *n = ezi_pk_cstr(c->d, s);
  if (!n) ezi_m39_fail(c, EZ_EINVAL, "not UTF-8 (or out of memory)");
  return n;
}

static ezi_pk *b_none(ctx *c) {
  ezi_pk *n = ezi_pk_none(c->d);
  if (!n) ezi_m39_fail(c, EZ_ENOMEM, "out of memory");
  return n;
}

static ezi_pk *nomem(ctx *c, ezi_pk *n) {
  if (!n) ezi_m39_fail(c, EZ_ENOMEM, "out of memory");
  return n;
}

static ezi_pk *b_strs(ctx *c, const ezi_m39_strs *s) {
  ezi_pk *l = nomem(c, ezi_pk_container(c->d, EZI_PK_LIST));
  for (size_t i = 0; l && i < s->n; i++) {
    ezi_pk *v = b_str(c, s->v[i]);
    if (!v || ezi_pk_append(l, v)) return nomem(c, NULL);
  }
  return l;
}

static ezi_pk *b_uuid(ctx *c, const ezi_m39_uuid *u) {
  ezi_pk *n = ezi_pk_uuid(c->d, u->s);
  if (!n) ezi_m39_fail(c, EZ_EINVAL, "not a UUID: %.36s", u->s);
  return n;
}

static ezi_pk *b_enum(ctx *c, const ezi_m39_enum *e, int i) {
  const char *v = ezi_m39_enum_name(e, i);
  if (!v) return ezi_m39_fail(c, EZ_EINVAL, "no %s %d", e->cls, i), NULL;
  return nomem(c, ezi_pk_enum(c->d, EZI_M39_MOD, e->cls, ezi_pk_cstr(c->d, v)));
}

static ezi_pk *b_edge(ctx *c, const ezi_m39_edge *e) {
  ezi_pk *args = nomem(c, ezi_pk_container(c->d, EZI_PK_TUPLE));
  ezi_pk *a = args ? b_str(c, e->from_topic) : NULL, *b = a ? b_str(c, e->to_topic) : NULL;
  if (!b || ezi_pk_append(args, a) || ezi_pk_append(args, b)) return nomem(c, NULL);
  return nomem(c, ezi_pk_namedtuple(c->d, EZI_M39_MOD, "Edge", args));
}

static ezi_pk *b_obj(ctx *c, const ezi_m39_class *k, const void *in);

static ezi_pk *b_dict(ctx *c, const ezi_m39_field *f, const void *base) {
  size_t k = *CAT(base, f->off_n, size_t);
  const char *keys = *CAT(base, f->off_keys, char *), *vals = *CAT(base, f->off, char *);
  ezi_pk *d = nomem(c, ezi_pk_container(c->d, EZI_PK_DICT));
  bool objs = f->type == EZI_M39_F_DICT_STR_OBJ || f->type == EZI_M39_F_DICT_UUID_OBJ;
  size_t vsz = objs ? ((const ezi_m39_class *)f->sub)->size : sizeof(ezi_m39_strs);
  for (size_t i = 0; d && i < k; i++) {
    ezi_pk *kn = f->type == EZI_M39_F_DICT_UUID_OBJ    ? b_uuid(c, (const ezi_m39_uuid *)keys + i)
                 : f->type == EZI_M39_F_DICT_EDGE_STRS ? b_edge(c, (const ezi_m39_edge *)keys + i)
                                                       : b_str(c, ((const char *const *)keys)[i]);
    const char *field = c->field, *cls = c->cls;
    ezi_pk *vn = !kn    ? NULL
                 : objs ? b_obj(c, f->sub, vals + i * vsz)
                        : b_strs(c, (const ezi_m39_strs *)(vals + i * vsz));
    c->field = field, c->cls = cls;
    if (!vn) return NULL;
    if (ezi_pk_dict_add(d, kn, vn)) return nomem(c, NULL);
  }
  return d;
}

static ezi_pk *b_field(ctx *c, const ezi_m39_field *f, const void *base) {
  const void *at = (const char *)base + f->off;
  switch (f->type) {
  case EZI_M39_F_OSTR:
    if (!*(const char *const *)at) return b_none(c);
    /* fall through */
  case EZI_M39_F_STR: return b_str(c, *(const char *const *)at);
  case EZI_M39_F_OINT:
    if (!((const ezi_m39_oint *)at)->has) return b_none(c);
    return nomem(c, ezi_pk_int(c->d, ((const ezi_m39_oint *)at)->v));
  case EZI_M39_F_INT: return nomem(c, ezi_pk_int(c->d, *(const int64_t *)at));
  case EZI_M39_F_OFLOAT:
    if (!((const ezi_m39_ofloat *)at)->has) return b_none(c);
    return nomem(c, ezi_pk_float(c->d, ((const ezi_m39_ofloat *)at)->v));
  case EZI_M39_F_FLOAT: return nomem(c, ezi_pk_float(c->d, *(const double *)at));
  case EZI_M39_F_BOOL: return nomem(c, ezi_pk_bool(c->d, *(const bool *)at));
  case EZI_M39_F_OBYTES: {
    const ezi_m39_bytes *b = at;
    if (!b->has) return b_none(c);
    if (!b->p && b->len) return ezi_m39_fail(c, EZ_EINVAL, "NULL bytes"), NULL;
    return nomem(c, ezi_pk_bytes(c->d, b->p, b->len));
  }
  case EZI_M39_F_OUUID:
    if (!((const ezi_m39_uuid *)at)->has) return b_none(c);
    /* fall through */
  case EZI_M39_F_UUID: return b_uuid(c, at);
  case EZI_M39_F_OSTRS:
    if (!((const ezi_m39_strs *)at)->has) return b_none(c);
    /* fall through */
  case EZI_M39_F_STRS: return b_strs(c, at);
  case EZI_M39_F_OUUIDS: {
    const ezi_m39_uuids *u = at;
    if (!u->has) return b_none(c);
    ezi_pk *l = nomem(c, ezi_pk_container(c->d, EZI_PK_LIST));
    for (size_t i = 0; l && i < u->n; i++) {
      ezi_pk *v = b_uuid(c, &u->v[i]);
      if (!v || ezi_pk_append(l, v)) return nomem(c, NULL);
    }
    return l;
  }
  case EZI_M39_F_OENUM:
    if (*(const int *)at == EZI_M39_NONE) return b_none(c);
    /* fall through */
  case EZI_M39_F_ENUM: return b_enum(c, f->sub, *(const int *)at);
  case EZI_M39_F_OP: {
    const char *op = *(const char *const *)at;
    if (!*CAT(base, f->off_n, bool)) return b_str(c, op);
    int i = ezi_m39_enum_index(&EZI_M39_PROCESS_CONTROL_OPERATION, op);
    return i < 0
               ? (ezi_m39_fail(c, EZ_EINVAL, "no ProcessControlOperation %.32s", op ? op : "NULL"),
                  NULL)
               : b_enum(c, &EZI_M39_PROCESS_CONTROL_OPERATION, i);
  }
  case EZI_M39_F_ONODE:
  case EZI_M39_F_ODICT:
    if (!*(const ezi_pk *const *)at) return b_none(c);
    /* fall through */
  case EZI_M39_F_NODE:
  case EZI_M39_F_REPR: {
    const ezi_pk *n = *(const ezi_pk *const *)at;
    bool ok = n && (f->type == EZI_M39_F_REPR    ? n->type == EZI_PK_DICT || n->type == EZI_PK_STR
                    : f->type == EZI_M39_F_ODICT ? n->type == EZI_PK_DICT
                    : f->sub                     ? ezi_pk_is_class(n, EZI_M39_MOD, f->sub)
                                                 : true);
    if (!ok) return ezi_m39_fail(c, EZ_EINVAL, "a kept value of the wrong kind"), NULL;
    int rc = ezi_pk_doc_keep(c->d, n->doc); /* referenced, not copied: keep its document */
    if (rc) return ezi_m39_fail(c, rc, "cannot keep the value's document"), NULL;
    return (ezi_pk *)n;
  }
  case EZI_M39_F_OBJ: return b_obj(c, f->sub, at);
  case EZI_M39_F_EDGES:
  case EZI_M39_F_OBJS: {
    size_t k = *CAT(base, f->off_n, size_t);
    const char *v = *(const char *const *)at;
    bool edges = f->type == EZI_M39_F_EDGES;
    size_t sz = edges ? sizeof(ezi_m39_edge) : ((const ezi_m39_class *)f->sub)->size;
    ezi_pk *l = nomem(c, ezi_pk_container(c->d, EZI_PK_LIST));
    const char *field = c->field, *cls = c->cls;
    for (size_t i = 0; l && i < k; i++) {
      ezi_pk *x =
          edges ? b_edge(c, (const ezi_m39_edge *)(v + i * sz)) : b_obj(c, f->sub, v + i * sz);
      c->field = field, c->cls = cls;
      if (!x || ezi_pk_append(l, x)) return nomem(c, NULL);
    }
    return l;
  }
  default: return b_dict(c, f, base);
  }
}

static ezi_pk *b_obj(ctx *c, const ezi_m39_class *k, const void *in) {
  c->cls = k->name;
  c->field = "(class)";
  ezi_pk *o = nomem(c, ezi_pk_dataclass(c->d, EZI_M39_MOD, k->name));
  for (size_t i = 0; o && i < k->n_fields; i++) {
    const ezi_m39_field *f = &k->fields[i];
    c->cls = k->name;
    c->field = f->name;
    ezi_pk *v = b_field(c, f, in);
    ezi_pk *key = v ? ezi_pk_cstr(c->d, f->name) : NULL;
    if (!v) return NULL;
    if (!key || ezi_pk_dict_add(o->u.o.state, key, v)) return nomem(c, NULL);
  }
  return o;
}

int ezi_m39_build(ezi_pk_doc *d, const ezi_m39_class *k, const void *in, ezi_pk **out,
                  ezi_pk_err *err) {
  ezi_pk_err scratch;
  ctx c = ezi_m39_ctx_make(d, NULL, err ? err : &scratch);
  *out = b_obj(&c, k, in);
  return *out ? 0 : c.err->code ? c.err->code : EZ_ENOMEM;
}

int ezi_m39_build_list(ezi_pk_doc *d, const ezi_m39_class *k, const void *items, size_t n,
                       ezi_pk **out, ezi_pk_err *err) {
  ezi_pk_err scratch;
  ctx c = ezi_m39_ctx_make(d, NULL, err ? err : &scratch);
  span in = {(void *)items, n};
  ezi_m39_field f = {.name = "(list)",
                     .type = EZI_M39_F_OBJS,
                     .off = offsetof(span, v),
                     .off_n = offsetof(span, n),
                     .sub = k};
  c.cls = "list", c.field = "(items)";
  *out = b_field(&c, &f, &in);
  return *out ? 0 : c.err->code ? c.err->code : EZ_ENOMEM;
}

int ezi_m39_build_dict(ezi_pk_doc *d, const ezi_m39_class *k, const char *const *keys,
                       const void *items, size_t n, ezi_pk **out, ezi_pk_err *err) {
  ezi_pk_err scratch;
  ctx c = ezi_m39_ctx_make(d, NULL, err ? err : &scratch);
  kspan in = {(void *)items, (void *)keys, n};
  ezi_m39_field f = {.name = "(dict)",
                     .type = EZI_M39_F_DICT_STR_OBJ,
                     .off = offsetof(kspan, v),
                     .off_n = offsetof(kspan, n),
                     .off_keys = offsetof(kspan, keys),
                     .sub = k};
  c.cls = "dict", c.field = "(items)";
  *out = b_field(&c, &f, &in);
  return *out ? 0 : c.err->code ? c.err->code : EZ_ENOMEM;
}
