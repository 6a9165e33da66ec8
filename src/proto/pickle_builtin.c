/* The builtin types' reductions, as Python's loads turns them back into values: protocols 2 and
 * 3 write sets, frozensets, bytearrays and (protocol 2) bytes as REDUCE of a builtin. */
#include "proto/pickle.h"

#include "ezmsg/ezmsg.h"

#include <stdlib.h>
#include <string.h>

static bool is_str(const ezi_pk *n, const char *s) {
  return n->type == EZI_PK_STR && n->u.s.len == strlen(s) && memcmp(n->u.s.p, s, n->u.s.len) == 0;
}

static bool is_latin1(const ezi_pk *n) { return is_str(n, "latin1") || is_str(n, "latin-1"); }

/* A set or frozenset of the items of list a0 (NULL: empty); NULL if an item is unhashable. */
static ezi_pk *set_of(ezi_pk_doc *d, ezi_pk_type t, const ezi_pk *a0, size_t *made, int *rc) {
  size_t n = a0 ? a0->u.seq.n : 0;
  for (size_t i = 0; i < n; i++)
    if (!a0->u.seq.v[i]->hashable) return NULL;
  ezi_pk *s = ezi_pk_node(d, t);
  for (size_t i = 0; s && i < n; i++)
    if (ezi_pk_append(s, a0->u.seq.v[i])) s = NULL;
  if (!s) *rc = EZ_ENOMEM;
  *made = n + 1;
  return s;
}

/* Bytes of a str whose code points are all below 256 (latin-1); NULL (rc 0) if one is not. */
static ezi_pk *latin1(ezi_pk_doc *d, ezi_pk_type t, const ezi_pk *str, int *rc) {
  const uint8_t *s = (const uint8_t *)str->u.s.p;
  size_t len = str->u.s.len, k = 0;
  uint8_t *out = malloc(len + 1);
  if (!out) return *rc = EZ_ENOMEM, NULL;
  for (size_t i = 0; i < len; i++) {
    if (s[i] < 0x80) {
      out[k++] = s[i];
    } else if ((s[i] == 0xc2 || s[i] == 0xc3) && i + 1 < len) {
      out[k++] = (uint8_t)((s[i] & 3) << 6 | (s[i + 1] & 0x3f));
      i++;
    } else {
      free(out);
      return NULL; /* not latin-1: leave it an object */
    }
  }
  ezi_pk *v = t == EZI_PK_BYTES ? ezi_pk_bytes(d, out, k) : ezi_pk_bytearray(d, out, k);
  free(out);
  if (!v) *rc = EZ_ENOMEM;
  return v;
}

ezi_pk *ezi_pk_reduce_builtin(ezi_pk_doc *d, const ezi_pk *f, const ezi_pk *args, size_t *made,
                              int *rc) {
  *rc = 0;
  *made = 0;
  if (!f || f->type != EZI_PK_GLOBAL || !args || args->type != EZI_PK_TUPLE) return NULL;
  size_t n = args->u.seq.n;
  const ezi_pk *a0 = n ? args->u.seq.v[0] : NULL, *a1 = n > 1 ? args->u.seq.v[1] : NULL;
  bool builtins = strcmp(f->u.g.mod, "builtins") == 0;
  const char *name = f->u.g.name;
  if (builtins && (!strcmp(name, "set") || !strcmp(name, "frozenset"))) {
    if (n > 1 || (n == 1 && a0->type != EZI_PK_LIST)) return NULL;
    return set_of(d, name[0] == 's' ? EZI_PK_SET : EZI_PK_FROZENSET, a0, made, rc);
  }
  ezi_pk_type t;
  const ezi_pk *src = NULL; /* bytes, or a latin-1 str */
  if (builtins && !strcmp(name, "bytearray")) {
    t = EZI_PK_BYTEARRAY;
    if (n == 1 && a0->type == EZI_PK_BYTES)
      src = a0;
    else if (n == 2 && a0->type == EZI_PK_STR && is_latin1(a1))
      src = a0; /* older protocol 2 */
    else if (n != 0)
      return NULL;
  } else if (builtins && !strcmp(name, "bytes") && n == 0) {
    t = EZI_PK_BYTES;
  } else if (!strcmp(f->u.g.mod, "_codecs") && !strcmp(name, "encode") && n == 2 &&
             a0->type == EZI_PK_STR && is_latin1(a1)) {
    t = EZI_PK_BYTES, src = a0;
  } else {
    return NULL;
  }
  *made = 1;
  if (src && src->type == EZI_PK_STR) return latin1(d, t, src, rc);
  const char *p = src ? src->u.s.p : "";
  size_t len = src ? src->u.s.len : 0;
  ezi_pk *v = t == EZI_PK_BYTES ? ezi_pk_bytes(d, p, len) : ezi_pk_bytearray(d, p, len);
  if (!v) *rc = EZ_ENOMEM;
  return v;
}
