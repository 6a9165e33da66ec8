/* The engine behind meta39.h, parsing half (building: meta39_build.c): one parser driven by the
 * classes' field tables (meta39_classes.c); also load / dump and the enums. */
#include "proto/meta39_engine.h"

#include "ezmsg/ezmsg.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AT EZI_M39_AT
typedef ezi_m39_ctx ctx;
typedef ezi_m39_span span;
typedef ezi_m39_kspan kspan;

int ezi_m39_fail(ezi_m39_ctx *c, int code, const char *fmt, ...) {
  if (c->err->code) return c->err->code;
  c->err->code = code;
  char what[64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  snprintf(c->err->msg, sizeof(c->err->msg), "%.24s.%.24s: %.64s", c->cls ? c->cls : "?",
           c->field ? c->field : "?", what);
  return code;
}

static int bad(ctx *c, const char *want, const ezi_pk *got) {
  return ezi_m39_fail(c, EZ_EPROTO, "expected %s, got %.40s", want, ezi_pk_type_name(got));
}

/* An array of n entries of sz bytes in the document, within the budget. */
static void *arr(ctx *c, size_t n, size_t sz) {
  if (n > c->budget) return ezi_m39_fail(c, EZ_EPROTO, "more entries than the pickle holds"), NULL;
  c->budget -= n;
  void *p = ezi_pk_alloc(c->d, (n ? n : 1) * sz);
  if (!p) ezi_m39_fail(c, EZ_ENOMEM, "out of memory");
  return p;
}

static bool is_none(const ezi_pk *n) { return n && n->type == EZI_PK_NONE; }

static bool is_seq(const ezi_pk *n) {
  return n && (n->type == EZI_PK_LIST || n->type == EZI_PK_TUPLE);
}

ezi_m39_ctx ezi_m39_ctx_make(ezi_pk_doc *d, const ezi_pk *n, ezi_pk_err *err) {
  ezi_m39_ctx c = {.d = d, .err = err};
  *err = (ezi_pk_err){0};
  size_t size = ezi_pk_doc_size(d) + (n ? ezi_pk_doc_size(n->doc) : 0);
  c.budget = size / 4 + 4096; /* entries of >= 8 bytes: about twice the documents' bytes */
  return c;
}

/* ---- parsing -------------------------------------------------------------------------------- */

static int p_str(ctx *c, const ezi_pk *n, const char **out) {
  const char *s = ezi_pk_cstr_of(n);
  if (!s)
    return n && n->type == EZI_PK_STR ? ezi_m39_fail(c, EZ_EPROTO, "a str with a NUL")
                                      : bad(c, "str", n);
  *out = s;
  return 0;
}

static int p_strs(ctx *c, const ezi_pk *n, ezi_m39_strs *out) {
  if (!is_seq(n)) return bad(c, "list[str]", n);
  size_t k = ezi_pk_len(n);
  const char **v = arr(c, k, sizeof(*v));
  if (!v) return c->err->code;
  for (size_t i = 0; i < k; i++)
    if (p_str(c, ezi_pk_item(n, i), &v[i])) return c->err->code;
  *out = (ezi_m39_strs){.has = true, .n = k, .v = v};
  return 0;
}

static int p_uuid(ctx *c, const ezi_pk *n, ezi_m39_uuid *out) {
  if (ezi_pk_uuid_of(n, out->s)) return bad(c, "uuid.UUID", n);
  out->has = true;
  return 0;
}

static int p_enum(ctx *c, const ezi_m39_enum *e, const ezi_pk *n, int *out) {
  const ezi_pk *v = ezi_pk_enum_value(n, EZI_M39_MOD, e->cls);
  int i = ezi_m39_enum_index(e, ezi_pk_cstr_of(v));
  if (i < 0) return bad(c, e->cls, n);
  *out = i;
  return 0;
}

static int p_edge(ctx *c, const ezi_pk *n, ezi_m39_edge *out) {
  if (!ezi_pk_is_class(n, EZI_M39_MOD, "Edge") || n->how != EZI_PK_NEWOBJ ||
      ezi_pk_len(n->u.o.args) != 2 || n->u.o.state || ezi_pk_len(n->u.o.list) ||
      ezi_pk_len(n->u.o.dict))
    return bad(c, "Edge", n);
  if (p_str(c, ezi_pk_item(n->u.o.args, 0), &out->from_topic) ||
      p_str(c, ezi_pk_item(n->u.o.args, 1), &out->to_topic))
    return c->err->code;
  return 0;
}

static int p_obj(ctx *c, const ezi_m39_class *k, const ezi_pk *n, void *out);

static int cmp_cstr(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}
static int cmp_uuid(const void *a, const void *b) {
  return strcmp(((const ezi_m39_uuid *)a)->s, ((const ezi_m39_uuid *)b)->s);
}
static int cmp_edge(const void *a, const void *b) {
  const ezi_m39_edge *x = a, *y = b;
  int r = strcmp(x->from_topic, y->from_topic);
  return r ? r : strcmp(x->to_topic, y->to_topic);
}

/* Fails if two of the n keys (of sz bytes each) are equal. */
static int unique(ctx *c, const void *keys, size_t n, size_t sz,
                  int (*cmp)(const void *, const void *)) {
  if (n < 2) return 0;
  char *t = malloc(n * sz);
  if (!t) return ezi_m39_fail(c, EZ_ENOMEM, "out of memory");
  memcpy(t, keys, n * sz);
  qsort(t, n, sz, cmp);
  int rc = 0;
  for (size_t i = 1; i < n && !rc; i++)
    if (cmp(t + (i - 1) * sz, t + i * sz) == 0) rc = ezi_m39_fail(c, EZ_EPROTO, "a duplicate key");
  free(t);
  return rc;
}

static int p_dict(ctx *c, const ezi_m39_field *f, const ezi_pk *n, void *base) {
  if (!n || n->type != EZI_PK_DICT) return bad(c, "dict", n);
  size_t k = ezi_pk_len(n), ksz = 0, vsz = 0;
  int (*cmp)(const void *, const void *) = NULL;
  switch (f->type) {
  case EZI_M39_F_DICT_STR_OBJ: ksz = sizeof(char *), cmp = cmp_cstr; break;
  case EZI_M39_F_DICT_STR_STRS: ksz = sizeof(char *), cmp = cmp_cstr; break;
  case EZI_M39_F_DICT_UUID_OBJ: ksz = sizeof(ezi_m39_uuid), cmp = cmp_uuid; break;
  default: ksz = sizeof(ezi_m39_edge), cmp = cmp_edge; break;
  }
  bool objs = f->type == EZI_M39_F_DICT_STR_OBJ || f->type == EZI_M39_F_DICT_UUID_OBJ;
  vsz = objs ? ((const ezi_m39_class *)f->sub)->size : sizeof(ezi_m39_strs);
  char *keys = arr(c, k, ksz), *vals = keys ? arr(c, k, vsz) : NULL;
  if (!vals) return c->err->code;
  const char *field = c->field;
  for (size_t i = 0; i < k; i++) {
    const ezi_pk *kn = ezi_pk_key(n, i), *vn = ezi_pk_value(n, i);
    int rc = ksz == sizeof(char *) ? p_str(c, kn, (const char **)(keys + i * ksz))
             : cmp == cmp_uuid     ? p_uuid(c, kn, (ezi_m39_uuid *)(keys + i * ksz))
                                   : p_edge(c, kn, (ezi_m39_edge *)(keys + i * ksz));
    if (rc) return rc;
    rc = objs ? p_obj(c, f->sub, vn, vals + i * vsz)
              : p_strs(c, vn, (ezi_m39_strs *)(vals + i * vsz));
    c->field = field;
    if (rc) return rc;
  }
  if (unique(c, keys, k, ksz, cmp)) return c->err->code;
  *AT(base, f->off_keys, void *) = keys;
  *AT(base, f->off, void *) = vals;
  *AT(base, f->off_n, size_t) = k;
  return 0;
}

static int p_field(ctx *c, const ezi_m39_field *f, const ezi_pk *n, void *base) {
  void *at = (char *)base + f->off;
  bool none = is_none(n);
  int64_t iv;
  switch (f->type) {
  case EZI_M39_F_OSTR:
    if (none) return *(const char **)at = NULL, 0;
    /* fall through */
  case EZI_M39_F_STR: return p_str(c, n, at);
  case EZI_M39_F_OINT:
    if (none) return *(ezi_m39_oint *)at = (ezi_m39_oint){0}, 0;
    if (ezi_pk_int_of(n, &iv)) return bad(c, "int", n);
    return *(ezi_m39_oint *)at = (ezi_m39_oint){true, iv}, 0;
  case EZI_M39_F_INT:
    if (ezi_pk_int_of(n, &iv)) return bad(c, "int", n);
    return *(int64_t *)at = iv, 0;
  case EZI_M39_F_OFLOAT:
  case EZI_M39_F_FLOAT: {
    if (none && f->type == EZI_M39_F_OFLOAT) return *(ezi_m39_ofloat *)at = (ezi_m39_ofloat){0}, 0;
    double v;
    if (n && n->type == EZI_PK_FLOAT)
      v = n->u.f;
    else if (ezi_pk_int_of(n, &iv) == 0)
      v = (double)iv;
    else
      return bad(c, "float", n);
    if (f->type == EZI_M39_F_FLOAT)
      *(double *)at = v;
    else
      *(ezi_m39_ofloat *)at = (ezi_m39_ofloat){true, v};
    return 0;
  }
  case EZI_M39_F_BOOL:
    if (!n || n->type != EZI_PK_BOOL) return bad(c, "bool", n);
    return *(bool *)at = n->b, 0;
  case EZI_M39_F_OBYTES:
    if (none) return *(ezi_m39_bytes *)at = (ezi_m39_bytes){0}, 0;
    if (!n || n->type != EZI_PK_BYTES) return bad(c, "bytes", n);
    return *(ezi_m39_bytes *)at = (ezi_m39_bytes){true, (const uint8_t *)n->u.s.p, n->u.s.len}, 0;
  case EZI_M39_F_OUUID:
    if (none) return *(ezi_m39_uuid *)at = (ezi_m39_uuid){0}, 0;
    /* fall through */
  case EZI_M39_F_UUID: return p_uuid(c, n, at);
  case EZI_M39_F_OSTRS:
    if (none) return *(ezi_m39_strs *)at = (ezi_m39_strs){0}, 0;
    /* fall through */
  case EZI_M39_F_STRS: return p_strs(c, n, at);
  case EZI_M39_F_OUUIDS: {
    ezi_m39_uuids *u = at;
    if (none) return *u = (ezi_m39_uuids){0}, 0;
    if (!is_seq(n)) return bad(c, "list[UUID]", n);
    size_t k = ezi_pk_len(n);
    ezi_m39_uuid *v = arr(c, k, sizeof(*v));
    if (!v) return c->err->code;
    for (size_t i = 0; i < k; i++)
      if (p_uuid(c, ezi_pk_item(n, i), &v[i])) return c->err->code;
    return *u = (ezi_m39_uuids){true, k, v}, 0;
  }
  case EZI_M39_F_OENUM:
    if (none) return *(int *)at = EZI_M39_NONE, 0;
    /* fall through */
  case EZI_M39_F_ENUM: return p_enum(c, f->sub, n, at);
  case EZI_M39_F_OP: {
    const ezi_pk *v = ezi_pk_enum_value(n, EZI_M39_MOD, "ProcessControlOperation");
    bool is_enum = v != NULL;
    if (is_enum) {
      int i;
      if (p_enum(c, &EZI_M39_PROCESS_CONTROL_OPERATION, n, &i)) return c->err->code;
    }
    *AT(base, f->off_n, bool) = is_enum;
    return p_str(c, is_enum ? v : n, at);
  }
  case EZI_M39_F_ONODE:
    if (none) return *(const ezi_pk **)at = NULL, 0;
    /* fall through */
  case EZI_M39_F_NODE:
    if (!n) return bad(c, "a value", n);
    if (f->sub && !ezi_pk_is_class(n, EZI_M39_MOD, f->sub)) return bad(c, f->sub, n);
    return *(const ezi_pk **)at = n, 0;
  case EZI_M39_F_REPR:
    if (!n || (n->type != EZI_PK_DICT && n->type != EZI_PK_STR)) return bad(c, "dict or str", n);
    return *(const ezi_pk **)at = n, 0;
  case EZI_M39_F_ODICT:
    if (none) return *(const ezi_pk **)at = NULL, 0;
    if (!n || n->type != EZI_PK_DICT) return bad(c, "dict", n);
    return *(const ezi_pk **)at = n, 0;
  case EZI_M39_F_OBJ: return p_obj(c, f->sub, n, at);
  case EZI_M39_F_EDGES:
  case EZI_M39_F_OBJS: {
    if (!is_seq(n)) return bad(c, "list", n);
    size_t k = ezi_pk_len(n);
    size_t sz =
        f->type == EZI_M39_F_EDGES ? sizeof(ezi_m39_edge) : ((const ezi_m39_class *)f->sub)->size;
    char *v = arr(c, k, sz);
    if (!v) return c->err->code;
    const char *field = c->field, *cls = c->cls;
    for (size_t i = 0; i < k; i++) {
      int rc = f->type == EZI_M39_F_EDGES
                   ? p_edge(c, ezi_pk_item(n, i), (ezi_m39_edge *)(v + i * sz))
                   : p_obj(c, f->sub, ezi_pk_item(n, i), v + i * sz);
      c->field = field, c->cls = cls;
      if (rc) return rc;
    }
    *(void **)at = v;
    *AT(base, f->off_n, size_t) = k;
    return 0;
  }
  default: {
    const char *cls = c->cls;
    int rc = p_dict(c, f, n, base);
    c->cls = cls;
    return rc;
  }
  }
}

static int p_obj(ctx *c, const ezi_m39_class *k, const ezi_pk *n, void *out) {
  const char *outer_cls = c->cls, *outer_field = c->field;
  c->cls = k->name;
  c->field = "(class)";
  memset(out, 0, k->size);
  if (!ezi_pk_is_class(n, EZI_M39_MOD, k->name) || n->how != EZI_PK_NEWOBJ ||
      ezi_pk_len(n->u.o.args) != 0 || ezi_pk_len(n->u.o.list) || ezi_pk_len(n->u.o.dict))
    return bad(c, k->name, n);
  const ezi_pk *st = n->u.o.state;
  if (!st || st->type != EZI_PK_DICT) return bad(c, "a state dict", st);
  for (size_t i = 0; i < k->n_fields; i++) {
    const ezi_m39_field *f = &k->fields[i];
    c->cls = k->name;
    c->field = f->name;
    const ezi_pk *v = ezi_pk_dict_get(st, f->name);
    if (!v) return ezi_m39_fail(c, EZ_EPROTO, "missing");
    if (p_field(c, f, v, out)) return c->err->code;
  }
  c->cls = outer_cls, c->field = outer_field;
  return 0;
}

int ezi_m39_parse(ezi_pk_doc *d, const ezi_m39_class *k, const ezi_pk *n, void *out,
                  ezi_pk_err *err) {
  ezi_pk_err scratch;
  ctx c = ezi_m39_ctx_make(d, n, err ? err : &scratch);
  int rc = p_obj(&c, k, n, out);
  if (rc) memset(out, 0, k->size);
  return rc;
}

int ezi_m39_parse_list(ezi_pk_doc *d, const ezi_m39_class *k, const ezi_pk *list, void **items,
                       size_t *n, ezi_pk_err *err) {
  ezi_pk_err scratch;
  ctx c = ezi_m39_ctx_make(d, list, err ? err : &scratch);
  span out = {0};
  ezi_m39_field f = {.name = "(list)",
                     .type = EZI_M39_F_OBJS,
                     .off = offsetof(span, v),
                     .off_n = offsetof(span, n),
                     .sub = k};
  c.cls = "list", c.field = "(items)";
  int rc = p_field(&c, &f, list, &out);
  *items = rc ? NULL : out.v;
  *n = rc ? 0 : out.n;
  return rc;
}

int ezi_m39_parse_dict(ezi_pk_doc *d, const ezi_m39_class *k, const ezi_pk *dict,
                       const char ***keys, void **items, size_t *n, ezi_pk_err *err) {
  ezi_pk_err scratch;
  ctx c = ezi_m39_ctx_make(d, dict, err ? err : &scratch);
  kspan out = {0};
  ezi_m39_field f = {.name = "(dict)",
                     .type = EZI_M39_F_DICT_STR_OBJ,
                     .off = offsetof(kspan, v),
                     .off_n = offsetof(kspan, n),
                     .off_keys = offsetof(kspan, keys),
                     .sub = k};
  c.cls = "dict", c.field = "(items)";
  int rc = p_field(&c, &f, dict, &out);
  *keys = rc ? NULL : out.keys;
  *items = rc ? NULL : out.v;
  *n = rc ? 0 : out.n;
  return rc;
}

int ezi_m39_load(const ezi_m39_class *k, const uint8_t *buf, size_t len, ezi_pk_doc **doc,
                 void *out, ezi_pk_err *err) {
  const ezi_pk *root;
  memset(out, 0, k->size);
  int rc = ezi_pk_load(buf, len, NULL, doc, &root, err);
  if (rc) return rc;
  rc = ezi_m39_parse(*doc, k, root, out, err);
  if (rc) {
    ezi_pk_doc_free(*doc);
    *doc = NULL;
  }
  return rc;
}

int ezi_m39_dump(const ezi_m39_class *k, const void *in, uint8_t **out, size_t *len,
                 ezi_pk_err *err) {
  *out = NULL;
  *len = 0;
  ezi_pk_doc *d = ezi_pk_doc_new();
  if (!d) return EZ_ENOMEM;
  ezi_pk *root;
  int rc = ezi_m39_build(d, k, in, &root, err);
  if (!rc) rc = ezi_pk_dump(root, 0, NULL, out, len, err);
  ezi_pk_doc_free(d);
  return rc;
}

/* ---- enums ---------------------------------------------------------------------------------- */

const char *ezi_m39_enum_name(const ezi_m39_enum *e, int i) {
  return e && i >= 0 && i < e->n ? e->values[i] : NULL;
}

int ezi_m39_enum_index(const ezi_m39_enum *e, const char *value) {
  for (int i = 0; e && value && i < e->n; i++)
    if (strcmp(e->values[i], value) == 0) return i;
  return -1;
}
