/* fuzz_pickle: ezi_pk_load on arbitrary bytes, then the encoder on whatever decoded.
 * Input: a pickle. An input of odd length is decoded with small limits (so that every limit is
 * reached often), an even one with the defaults. A failed decode must leave no document and a
 * message. A decoded tree must dump (framed and unframed) to bytes that decode to an equal tree,
 * and dumping that tree again must give the same bytes (the encoder is deterministic and
 * idempotent). The accessors are walked over the tree's top levels. */
#include "fuzz_common.h"
#include "proto/pickle.h"

#define CHECK(c)                                                                                   \
  do {                                                                                             \
    if (!(c)) fz_die("fuzz_pickle: invariant failed: %s (line %d)", #c, __LINE__);                 \
  } while (0)

/* Touches what the accessors give for n and its items, two levels down. */
static void walk(const ezi_pk *n, int depth) {
  if (!n) return;
  char u[37];
  int64_t v;
  size_t len;
  (void)ezi_pk_type_name(n);
  (void)ezi_pk_uuid_of(n, u);
  (void)ezi_pk_int_of(n, &v);
  (void)ezi_pk_str_of(n, &len);
  (void)ezi_pk_cstr_of(n);
  (void)ezi_pk_attr(n, "int");
  (void)ezi_pk_dict_get(n, "graph");
  (void)ezi_pk_enum_value(n, "ezmsg.core.graphmeta", "ProfileChannelType");
  if (depth == 2) return;
  size_t k = ezi_pk_len(n);
  for (size_t i = 0; i < k && i < 64; i++) {
    if (n->type == EZI_PK_DICT) {
      CHECK(ezi_pk_key(n, i) && ezi_pk_value(n, i));
      walk(ezi_pk_key(n, i), depth + 1);
      walk(ezi_pk_value(n, i), depth + 1);
    } else {
      CHECK(ezi_pk_item(n, i));
      walk(ezi_pk_item(n, i), depth + 1);
    }
  }
  if (n->type == EZI_PK_OBJECT) {
    CHECK(n->u.o.cls && n->u.o.args && n->u.o.args->type == EZI_PK_TUPLE);
    walk(n->u.o.state, depth + 1);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_quiet();
  ezi_pk_limits small = {.max_nodes = 2000, .max_depth = 24, .max_memo = 64, .max_str = 300};
  const ezi_pk_limits *lim = size % 2 ? &small : NULL;
  ezi_pk_doc *d = (ezi_pk_doc *)1;
  const ezi_pk *x = (const ezi_pk *)1;
  ezi_pk_err err;
  int rc = ezi_pk_load(data, size, lim, &d, &x, &err);
  CHECK(rc == 0 || rc == EZ_EPROTO || rc == EZ_EMSGSIZE || rc == EZ_ENOMEM);
  if (rc) {
    CHECK(d == NULL && x == NULL && err.code == rc && err.msg[0]);
    return 0;
  }
  CHECK(d && x && ezi_pk_doc_proto(d) >= 2 && ezi_pk_doc_proto(d) <= 5);
  walk(x, 0);
  uint8_t *b1 = NULL;
  size_t n1 = 0;
  for (unsigned flags = 0; flags < 2; flags++) {
    uint8_t *b;
    size_t n;
    rc = ezi_pk_dump(x, flags ? EZI_PK_NOFRAMES : 0, lim, &b, &n, &err);
    CHECK(rc == 0 || rc == EZ_ENOMEM);
    if (rc) continue;
    ezi_pk_doc *d2;
    const ezi_pk *y;
    ezi_pk_limits big = {.max_depth = 1000};
    rc = ezi_pk_load(b, n, lim ? &big : NULL, &d2, &y, &err);
    if (rc) fz_die("fuzz_pickle: our own bytes do not decode: %d %s", rc, err.msg);
    CHECK(ezi_pk_equal(x, y));
    uint8_t *b2;
    size_t n2;
    rc = ezi_pk_dump(y, flags ? EZI_PK_NOFRAMES : 0, lim ? &big : NULL, &b2, &n2, &err);
    CHECK(rc == 0 || rc == EZ_ENOMEM);
    if (rc == 0) {
      CHECK(n2 == n && memcmp(b, b2, n) == 0);
      free(b2);
    }
    ezi_pk_doc_free(d2);
    if (flags == 0) {
      b1 = b;
      n1 = n;
    } else {
      free(b);
    }
  }
  (void)n1;
  free(b1);
  ezi_pk_doc_free(d);
  return 0;
}

void fuzz_teardown(void) {}
