/* Unit tests of the general pickle codec (src/pickle*.c). The vectors in tests/corpus/pickle/,
 * tests/corpus/meta39/ and tests/corpus/dag/v39_* were made by Python 3.11's pickle.dumps of
 * reference ezmsg 3.9.0 objects (see the README.md of each directory); nothing here needs Python
 * at run time. */
#include "harness.h"

#include "proto/pickle.h"
#include "vectors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint8_t *must_load(const char *dir, const char *name, size_t *len) {
  uint8_t *b = tv_load(dir, name, len);
  if (!b) fail_msg("cannot open tests/corpus/%s/%s", dir, name);
  return b;
}

static const ezi_pk *decode(const uint8_t *b, size_t n, ezi_pk_doc **doc) {
  const ezi_pk *root;
  ezi_pk_err err;
  int rc = ezi_pk_load(b, n, NULL, doc, &root, &err);
  if (rc) fail_msg("decode failed: %d %s", rc, err.msg);
  return root;
}

/* dump(x) decodes to a tree equal to x, with and without frames; returns the framed bytes. */
static uint8_t *assert_roundtrip(const ezi_pk *x, size_t *len) {
  uint8_t *out = NULL;
  for (unsigned flags = 0; flags < 2; flags++) {
    uint8_t *b;
    size_t n;
    ezi_pk_err err;
    int rc = ezi_pk_dump(x, flags ? EZI_PK_NOFRAMES : 0, NULL, &b, &n, &err);
    if (rc) fail_msg("dump failed: %d %s", rc, err.msg);
    ezi_pk_doc *d2;
    const ezi_pk *y = decode(b, n, &d2);
    assert_true(ezi_pk_equal(x, y));
    assert_true(ezi_pk_equal(y, x));
    ezi_pk_doc_free(d2);
    if (flags == 0) {
      out = b;
      *len = n;
    } else {
      free(b);
    }
  }
  return out;
}

static const struct {
  const char *dir, *name;
  bool exact; /* our re-encoding gives Python's very bytes */
} vectors[] = {
    {"pickle", "basic_p2.bin", false},
    {"pickle", "basic_p3.bin", false},
    {"pickle", "basic_p4.bin", false},
    {"pickle", "basic_p5.bin", false},
    {"pickle", "big.bin", true},
    {"pickle", "int.bin", true},
    {"pickle", "uuid.bin", true},
    {"pickle", "uuid_safe.bin", true},
    {"pickle", "enum.bin", true},
    {"pickle", "dataclass.bin", true},
    {"meta39", "edge.bin", true},
    {"meta39", "ping.bin", true},
    {"meta39", "graph_metadata.bin", false},
    {"meta39", "graph_snapshot.bin", false},
    {"meta39", "trace_batch_1500.bin", false},
    {"meta39", "profiling_snapshot_big.bin", false},
    {"dag", "v39_empty.bin", true},
    {"dag", "v39_abc.bin", true},
    {"dag", "v39_owners.bin", false},
    {"dag", "v39_big.bin", false},
    {"dag", "star1500.bin", false},
    {"dag", "bigname.bin", false},
};

static void test_vectors(void **state) {
  int exact = 0;
  for (size_t i = 0; i < sizeof(vectors) / sizeof(*vectors); i++) {
    size_t n, on;
    uint8_t *b = must_load(vectors[i].dir, vectors[i].name, &n);
    ezi_pk_doc *d;
    const ezi_pk *x = decode(b, n, &d);
    uint8_t *ours = assert_roundtrip(x, &on);
    bool same = on == n && memcmp(ours, b, n) == 0;
    if (vectors[i].exact && !same) fail_msg("%s: our bytes differ from Python's", vectors[i].name);
    exact += same;
    free(ours);
    ezi_pk_doc_free(d);
    free(b);
  }
  print_message("vectors re-encoded to Python's exact bytes: %d\n", exact);
}

/* Our re-encoding of basic_p4.bin is exactly tests/corpus/ours/generic_basic_p4.bin, which
 * Python 3.9.0 loads to a list equal to the original (tests/corpus/ours/README.md). */
static void test_ours(void **state) {
  size_t n, on, wn;
  uint8_t *b = must_load("pickle", "basic_p4.bin", &n),
          *want = must_load("ours", "generic_basic_p4.bin", &wn);
  ezi_pk_doc *d;
  uint8_t *ours = assert_roundtrip(decode(b, n, &d), &on);
  assert_int_equal(on, wn);
  assert_memory_equal(ours, want, wn);
  free(ours);
  free(want);
  free(b);
  ezi_pk_doc_free(d);
}

/* The same list pickled with protocols 2 to 5 decodes to one tree. */
static void test_protocols_agree(void **state) {
  ezi_pk_doc *docs[4];
  const ezi_pk *roots[4];
  for (int p = 2; p <= 5; p++) {
    char name[32];
    snprintf(name, sizeof(name), "basic_p%d.bin", p);
    size_t n;
    uint8_t *b = must_load("pickle", name, &n);
    roots[p - 2] = decode(b, n, &docs[p - 2]);
    assert_int_equal(ezi_pk_doc_proto(docs[p - 2]), p);
    free(b);
  }
  for (int p = 1; p < 4; p++)
    if (!ezi_pk_equal(roots[0], roots[p])) fail_msg("protocol %d differs from protocol 2", p + 2);
  for (int p = 0; p < 4; p++)
    ezi_pk_doc_free(docs[p]);
}

/* Field by field: the list of basic values (see the generator in corpus/pickle/README.md). */
static void test_basic_values(void **state) {
  size_t n = 0;
  uint8_t *b = must_load("pickle", "basic_p4.bin", &n);
  ezi_pk_doc *d;
  const ezi_pk *l = decode(b, n, &d);
  assert_int_equal(l->type, EZI_PK_LIST);
  assert_int_equal(ezi_pk_len(l), 43);
  size_t k = 0;
  assert_int_equal(ezi_pk_item(l, k++)->type, EZI_PK_NONE);
  assert_true(ezi_pk_item(l, k)->type == EZI_PK_BOOL && ezi_pk_item(l, k++)->b);
  assert_true(ezi_pk_item(l, k)->type == EZI_PK_BOOL && !ezi_pk_item(l, k++)->b);
  static const int64_t ints[] = {0,          255,         256,        65535,     65536,    -1,
                                 2147483647, -2147483648, 2147483648, INT64_MAX, INT64_MIN};
  for (size_t i = 0; i < sizeof(ints) / sizeof(*ints); i++) {
    int64_t v;
    assert_int_equal(ezi_pk_int_of(ezi_pk_item(l, k++), &v), 0);
    assert_true(v == ints[i]);
  }
  const ezi_pk *x = ezi_pk_item(l, k++); /* 2**64 */
  int64_t v;
  assert_true(x->type == EZI_PK_INT && x->big);
  assert_int_equal(ezi_pk_int_of(x, &v), EZ_EPROTO);
  assert_int_equal(x->u.s.len, 9);
  assert_memory_equal(x->u.s.p, "\0\0\0\0\0\0\0\0\1", 9);
  x = ezi_pk_item(l, k++); /* -2**100: 13 bytes, all zero but the top 0xf0 */
  assert_true(x->big && x->u.s.len == 13 && (uint8_t)x->u.s.p[12] == 0xf0);
  x = ezi_pk_item(l, k++); /* 2**70 */
  assert_true(x->big && x->u.s.len == 9 && x->u.s.p[8] == 0x40);
  assert_true(ezi_pk_item(l, k++)->u.f == 1.5);
  x = ezi_pk_item(l, k++);
  assert_true(x->type == EZI_PK_FLOAT && x->u.f == 0.0 && signbit(x->u.f));
  assert_true(isinf(ezi_pk_item(l, k++)->u.f));
  assert_true(ezi_pk_item(l, k++)->u.f == 1e-300);
  size_t sl;
  assert_string_equal(ezi_pk_str_of(ezi_pk_item(l, k++), &sl), "");
  assert_string_equal(ezi_pk_str_of(ezi_pk_item(l, k++), &sl), "\xc3\xa9\xf0\x9f\x98\x80");
  assert_string_equal(ezi_pk_str_of(ezi_pk_item(l, k++), &sl), "\xed\xa0\x80x"); /* surrogate */
  x = ezi_pk_item(l, k++);
  assert_true(x->type == EZI_PK_BYTES && x->u.s.len == 0);
  x = ezi_pk_item(l, k++);
  assert_true(x->type == EZI_PK_BYTES && x->u.s.len == 2 && !memcmp(x->u.s.p, "\0\xff", 2));
  x = ezi_pk_item(l, k++);
  assert_true(x->type == EZI_PK_BYTEARRAY && x->u.s.len == 2 && !memcmp(x->u.s.p, "ab", 2));
  x = ezi_pk_item(l, k++);
  assert_true(x->type == EZI_PK_BYTEARRAY && x->u.s.len == 0);
  for (size_t t = 0; t <= 4; t++) {
    x = ezi_pk_item(l, k++);
    assert_true(x->type == EZI_PK_TUPLE && ezi_pk_len(x) == t);
  }
  x = ezi_pk_item(l, k++);
  assert_true(x->type == EZI_PK_LIST && ezi_pk_len(x) == 0);
  const ezi_pk *dict = ezi_pk_item(l, k++);
  assert_int_equal(ezi_pk_len(dict), 6);
  assert_int_equal(ezi_pk_int_of(ezi_pk_dict_get(dict, "a"), &v), 0);
  assert_true(v == 1);
  assert_int_equal(ezi_pk_key(dict, 1)->type, EZI_PK_INT);
  assert_int_equal(ezi_pk_key(dict, 2)->type, EZI_PK_TUPLE);
  assert_int_equal(ezi_pk_key(dict, 3)->type, EZI_PK_NONE);
  assert_int_equal(ezi_pk_key(dict, 4)->type, EZI_PK_BOOL);
  assert_int_equal(ezi_pk_key(dict, 5)->type, EZI_PK_FLOAT);
  assert_null(ezi_pk_dict_get(dict, "zz"));
  x = ezi_pk_item(l, k++);
  assert_true(x->type == EZI_PK_SET && ezi_pk_len(x) == 3);
  x = ezi_pk_item(l, k++);
  assert_true(x->type == EZI_PK_FROZENSET && ezi_pk_len(x) == 0);
  x = ezi_pk_item(l, k++);
  assert_true(x->type == EZI_PK_FROZENSET && ezi_pk_len(x) == 1);
  assert_ptr_equal(ezi_pk_item(l, k), ezi_pk_item(l, k + 1)); /* one list, twice */
  k += 2;
  x = ezi_pk_item(l, k++); /* deque([1, 2]): REDUCE(collections.deque, ()) + APPENDS */
  assert_true(ezi_pk_is_class(x, "collections", "deque") && x->how == EZI_PK_REDUCE);
  assert_int_equal(ezi_pk_len(x->u.o.list), 2);
  x = ezi_pk_item(l, k++); /* defaultdict(set, {'k': {'v'}}) */
  assert_true(ezi_pk_is_class(x, "collections", "defaultdict"));
  assert_true(ezi_pk_is_global(ezi_pk_item(x->u.o.args, 0), "builtins", "set"));
  assert_int_equal(ezi_pk_dict_get(x->u.o.dict, "k")->type, EZI_PK_SET);
  x = ezi_pk_item(l, k++);
  assert_true(ezi_pk_is_class(x, "collections", "OrderedDict"));
  assert_int_equal(ezi_pk_len(x->u.o.dict), 1);
  assert_int_equal(k, 43);
  ezi_pk_doc_free(d);
  free(b);
}

/* Builders give Python's own bytes for a dataclass, an enum, a UUID and a named tuple. */
static void test_builders_exact(void **state) {
  ezi_pk_doc *d = ezi_pk_doc_new();
  ezi_pk *ping = ezi_pk_dataclass(d, "ezmsg.core.graphmeta", "ProcessPing");
  assert_int_equal(
      ezi_pk_attr_set(ping, "process_id", ezi_pk_uuid(d, "12345678-1234-5678-1234-567812345678")),
      0);
  assert_int_equal(ezi_pk_attr_set(ping, "pid", ezi_pk_int(d, 7)), 0);
  assert_int_equal(ezi_pk_attr_set(ping, "host", ezi_pk_cstr(d, "h")), 0);
  assert_int_equal(ezi_pk_attr_set(ping, "timestamp", ezi_pk_float(d, 1.5)), 0);
  ezi_pk *en =
      ezi_pk_enum(d, "ezmsg.core.graphmeta", "ProcessControlErrorCode", ezi_pk_cstr(d, "TIMEOUT"));
  ezi_pk *args = ezi_pk_container(d, EZI_PK_TUPLE);
  assert_int_equal(ezi_pk_append(args, ezi_pk_cstr(d, "/a")), 0);
  assert_int_equal(ezi_pk_append(args, ezi_pk_cstr(d, "/b")), 0);
  ezi_pk *edge = ezi_pk_namedtuple(d, "ezmsg.core.graphmeta", "Edge", args);
  ezi_pk *u = ezi_pk_uuid(d, "12345678-1234-5678-1234-567812345678");
  const struct {
    const char *dir, *file;
    const ezi_pk *node;
  } cases[] = {{"pickle", "dataclass.bin", ping},
               {"pickle", "enum.bin", en},
               {"meta39", "edge.bin", edge},
               {"pickle", "uuid.bin", u}};
  for (int i = 0; i < 4; i++) {
    size_t n, on;
    uint8_t *want = must_load(cases[i].dir, cases[i].file, &n);
    uint8_t *ours = assert_roundtrip(cases[i].node, &on);
    assert_int_equal(on, n);
    assert_memory_equal(ours, want, n);
    free(ours);
    free(want);
  }
  char s[37];
  assert_int_equal(ezi_pk_uuid_of(u, s), 0);
  assert_string_equal(s, "12345678-1234-5678-1234-567812345678");
  assert_null(ezi_pk_uuid(d, "12345678-1234-5678-1234-56781234567"));
  assert_null(ezi_pk_uuid(d, "12345678-1234-5678-1234-56781234567g"));
  assert_null(ezi_pk_uuid(d, "12345678+1234-5678-1234-567812345678"));
  ezi_pk *top = ezi_pk_uuid(d, "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF"),
         *zero = ezi_pk_uuid(d, "00000000-0000-0000-0000-000000000000");
  assert_int_equal(ezi_pk_uuid_of(top, s), 0);
  assert_string_equal(s, "ffffffff-ffff-ffff-ffff-ffffffffffff");
  assert_int_equal(ezi_pk_uuid_of(zero, s), 0);
  assert_string_equal(s, "00000000-0000-0000-0000-000000000000");
  assert_ptr_equal(ezi_pk_enum_value(en, "ezmsg.core.graphmeta", "ProcessControlErrorCode"),
                   en->u.o.args->u.seq.v[0]);
  assert_null(ezi_pk_enum_value(en, "ezmsg.core.graphmeta", "Other"));
  assert_null(ezi_pk_str(d, "\xff", 1)); /* not UTF-8 */
  assert_null(ezi_pk_global(d, "", "x"));
  ezi_pk_doc_free(d);
  /* the decoded UUIDs, with and without is_safe */
  static const char *files[] = {"uuid.bin", "uuid_safe.bin"};
  static const char *want[] = {"12345678-1234-5678-1234-567812345678",
                               "a95b0ce0-ee13-11f1-86b5-02fc00000001"};
  for (int i = 0; i < 2; i++) {
    size_t n;
    uint8_t *b = must_load("pickle", files[i], &n);
    ezi_pk_doc *dd;
    const ezi_pk *x = decode(b, n, &dd);
    assert_int_equal(ezi_pk_uuid_of(x, s), 0);
    assert_string_equal(s, want[i]);
    ezi_pk_doc_free(dd);
    free(b);
  }
}

static int load_bytes(const void *p, size_t n, const ezi_pk_limits *lim, ezi_pk_err *err);

/* Values at every size boundary of the encoder survive a round trip. */
static void test_builders_roundtrip(void **state) {
  ezi_pk_doc *d = ezi_pk_doc_new();
  ezi_pk *l = ezi_pk_container(d, EZI_PK_LIST);
  static const int64_t ints[] = {0,
                                 1,
                                 255,
                                 256,
                                 65535,
                                 65536,
                                 -1,
                                 -128,
                                 -129,
                                 INT32_MAX,
                                 INT32_MIN,
                                 (int64_t)INT32_MAX + 1,
                                 (int64_t)INT32_MIN - 1,
                                 1ll << 40,
                                 -(1ll << 40),
                                 INT64_MAX,
                                 INT64_MIN};
  for (size_t i = 0; i < sizeof(ints) / sizeof(*ints); i++)
    assert_int_equal(ezi_pk_append(l, ezi_pk_int(d, ints[i])), 0);
  uint8_t big[300];
  for (int i = 0; i < 300; i++)
    big[i] = (uint8_t)(i * 7);
  big[299] = 0x12;
  assert_int_equal(ezi_pk_append(l, ezi_pk_bigint(d, big, 300)), 0); /* LONG4 */
  uint8_t m1[12];
  memset(m1, 0xff, sizeof(m1)); /* -1 in 12 bytes: normalized to an int64 */
  ezi_pk *minus1 = ezi_pk_bigint(d, m1, 12);
  assert_true(!minus1->big && minus1->u.i == -1);
  char *s = malloc(70000);
  memset(s, 'z', 70000);
  for (size_t len = 0; len <= 70000; len = len ? len * 4 : 1) {
    assert_int_equal(ezi_pk_append(l, ezi_pk_str(d, s, len)), 0);
    assert_int_equal(ezi_pk_append(l, ezi_pk_bytes(d, s, len)), 0);
    assert_int_equal(ezi_pk_append(l, ezi_pk_bytearray(d, s, len)), 0);
  }
  assert_int_equal(ezi_pk_append(l, ezi_pk_str(d, s, 70000)), 0);
  free(s);
  ezi_pk *fs = ezi_pk_container(d, EZI_PK_FROZENSET), *set = ezi_pk_container(d, EZI_PK_SET);
  ezi_pk *dict = ezi_pk_container(d, EZI_PK_DICT), *tup = ezi_pk_container(d, EZI_PK_TUPLE);
  for (int i = 0; i < 2345; i++) {
    assert_int_equal(ezi_pk_append(fs, ezi_pk_int(d, i)), 0);
    assert_int_equal(ezi_pk_append(set, ezi_pk_int(d, -i)), 0);
    assert_int_equal(ezi_pk_dict_add(dict, ezi_pk_int(d, i), ezi_pk_none(d)), 0);
    assert_int_equal(ezi_pk_append(tup, ezi_pk_float(d, i / 3.0)), 0);
  }
  ezi_pk *nested = ezi_pk_container(d, EZI_PK_LIST);
  assert_int_equal(ezi_pk_append(l, fs), 0);
  assert_int_equal(ezi_pk_append(l, set), 0);
  assert_int_equal(ezi_pk_append(l, dict), 0);
  assert_int_equal(ezi_pk_append(l, tup), 0);
  assert_int_equal(ezi_pk_append(l, nested), 0);
  assert_int_equal(ezi_pk_append(set, nested), EZ_EINVAL); /* unhashable */
  assert_int_equal(ezi_pk_dict_set(dict, nested, l), EZ_EINVAL);
  ezi_pk *kw = ezi_pk_container(d, EZI_PK_DICT);
  assert_int_equal(ezi_pk_dict_set_str(kw, "x", ezi_pk_int(d, 1)), 0);
  assert_int_equal(ezi_pk_dict_set_str(kw, "x", ezi_pk_int(d, 2)), 0); /* replaces */
  assert_int_equal(ezi_pk_len(kw), 1);
  ezi_pk *ex = ezi_pk_object(d, EZI_PK_NEWOBJ_EX, ezi_pk_global(d, "m", "C"), NULL, kw);
  assert_int_equal(ezi_pk_append(ex, ezi_pk_int(d, 1)), 0);
  assert_int_equal(ezi_pk_dict_set_str(ex, "k", ezi_pk_int(d, 2)), 0);
  assert_int_equal(ezi_pk_append(l, ex), 0);
  size_t n = 0;
  free(assert_roundtrip(l, &n));
  assert_true(n > 200000);
  /* a cycle through lists: written (Python loads it), refused by our decoder */
  assert_int_equal(ezi_pk_append(nested, l), 0);
  uint8_t *b;
  ezi_pk_err err;
  assert_int_equal(ezi_pk_dump(l, 0, NULL, &b, &n, &err), 0);
  assert_int_equal(load_bytes(b, n, NULL, &err), EZ_EPROTO);
  assert_non_null(strstr(err.msg, "cycle"));
  free(b);
  ezi_pk_doc_free(d);
}

/* A tree whose nodes are shared 2^60 ways: equality and the encoder stay linear. */
static void test_sharing(void **state) {
  ezi_pk_doc *d = ezi_pk_doc_new();
  ezi_pk *x = ezi_pk_cstr(d, "leaf");
  for (int i = 0; i < 60; i++) {
    ezi_pk *t = ezi_pk_container(d, i % 2 ? EZI_PK_TUPLE : EZI_PK_LIST);
    assert_int_equal(ezi_pk_append(t, x), 0);
    assert_int_equal(ezi_pk_append(t, x), 0);
    x = t;
  }
  size_t n = 0;
  uint8_t *b = assert_roundtrip(x, &n);
  assert_true(n < 2000);
  free(b);
  ezi_pk *t = ezi_pk_container(d, EZI_PK_TUPLE), *inner = ezi_pk_container(d, EZI_PK_LIST);
  assert_int_equal(ezi_pk_append(t, inner), 0);
  assert_int_equal(ezi_pk_append(inner, t), 0);
  ezi_pk_err err;
  assert_int_equal(ezi_pk_dump(t, 0, NULL, &b, &n, &err), EZ_EINVAL); /* cycle through a tuple */
  assert_null(b);
  ezi_pk *deep = ezi_pk_none(d);
  for (int i = 0; i < 300; i++) {
    ezi_pk *c = ezi_pk_container(d, EZI_PK_LIST);
    assert_int_equal(ezi_pk_append(c, deep), 0);
    deep = c;
  }
  assert_int_equal(ezi_pk_dump(deep, 0, NULL, &b, &n, &err), EZ_EINVAL); /* too deep */
  /* a bytearray is a leaf for the depth check: one at the limit dumps within it */
  ezi_pk *ba = ezi_pk_bytearray(d, "xy", 2), *ba0 = ezi_pk_bytearray(d, "", 0);
  ezi_pk *pair = ezi_pk_container(d, EZI_PK_LIST);
  assert_int_equal(ezi_pk_append(pair, ba), 0);
  assert_int_equal(ezi_pk_append(pair, ba0), 0);
  ezi_pk_limits two = {.max_depth = 2};
  assert_int_equal(ezi_pk_dump(pair, 0, &two, &b, &n, &err), 0);
  ezi_pk_doc *d3;
  const ezi_pk *r3;
  assert_int_equal(ezi_pk_load(b, n, &two, &d3, &r3, &err), 0);
  assert_true(ezi_pk_equal(r3, pair));
  ezi_pk_doc_free(d3);
  free(b);
  ezi_pk_limits lim = {.max_depth = 400};
  assert_int_equal(ezi_pk_dump(deep, 0, &lim, &b, &n, &err), 0);
  ezi_pk_doc *d2;
  const ezi_pk *r;
  assert_int_equal(ezi_pk_load(b, n, NULL, &d2, &r, &err), EZ_EMSGSIZE);
  assert_int_equal(ezi_pk_load(b, n, &lim, &d2, &r, &err), 0);
  assert_true(ezi_pk_equal(r, deep));
  ezi_pk_doc_free(d2);
  free(b);
  ezi_pk_doc_free(d);
}

/* Documents that keep each other alive. */
static void test_keep(void **state) {
  ezi_pk_doc *a = ezi_pk_doc_new(), *b = ezi_pk_doc_new();
  ezi_pk *s = ezi_pk_cstr(a, "from a");
  ezi_pk *l = ezi_pk_container(b, EZI_PK_LIST);
  assert_int_equal(ezi_pk_append(l, s), 0);
  assert_int_equal(ezi_pk_doc_keep(b, a), 0);
  assert_int_equal(ezi_pk_doc_keep(b, a), 0); /* once is enough */
  assert_int_equal(ezi_pk_doc_keep(a, b), EZ_EINVAL);
  ezi_pk_doc_free(a); /* b keeps it */
  size_t n = 0;
  free(assert_roundtrip(l, &n));
  assert_string_equal(ezi_pk_str_of(ezi_pk_item(l, 0), NULL), "from a");
  ezi_pk_doc_free(b);
}

/* ---- hostile input -------------------------------------------------------------------------- */

static int load_bytes(const void *p, size_t n, const ezi_pk_limits *lim, ezi_pk_err *err) {
  uint8_t *c = malloc(n + 1); /* exactly n readable bytes for ASan */
  memcpy(c, p, n);
  ezi_pk_doc *d;
  const ezi_pk *r;
  int rc = ezi_pk_load(n ? c : NULL, n, lim, &d, &r, err);
  if (rc == 0)
    ezi_pk_doc_free(d);
  else
    assert_true(d == NULL && r == NULL && err->msg[0]);
  free(c);
  return rc;
}
#define LOAD(lit) load_bytes(lit, sizeof(lit) - 1, NULL, &err)

static void test_malformed(void **state) {
  ezi_pk_err err;
  assert_int_equal(LOAD("\x80\x04N."), 0);
  assert_int_equal(LOAD(""), EZ_EPROTO);
  assert_int_equal(LOAD("N."), EZ_EPROTO);         /* no PROTO */
  assert_int_equal(LOAD("\x80\x01N."), EZ_EPROTO); /* protocol 1 */
  assert_int_equal(LOAD("\x80\x06N."), EZ_EPROTO); /* protocol 6 */
  assert_int_equal(LOAD("\x80\x04\x80\x04N."), EZ_EPROTO);
  assert_int_equal(LOAD("\x80\x04N.N"), EZ_EPROTO); /* trailing */
  assert_int_equal(LOAD("\x80\x04NN."), EZ_EPROTO); /* two values left */
  assert_int_equal(LOAD("\x80\x04(N."), EZ_EPROTO); /* an open MARK */
  assert_int_equal(LOAD("\x80\x04."), EZ_EPROTO);   /* nothing */
  assert_int_equal(LOAD("\x80\x04N0."), EZ_EPROTO);
  assert_int_equal(LOAD("\x80\x04(0N."), 0);            /* POP of an empty mark pops the mark */
  assert_int_equal(LOAD("\x80\x04N(N1."), 0);           /* POP_MARK */
  assert_int_equal(LOAD("\x80\x04N2\x86."), 0);         /* DUP */
  assert_int_equal(LOAD("\x80\x04(2."), EZ_EPROTO);     /* DUP of nothing above the mark */
  assert_int_equal(LOAD("\x80\x04(\x85N."), EZ_EPROTO); /* TUPLE1 across a mark */
  assert_int_equal(LOAD("\x80\x04]\x94h\x00"
                        "a."),
                   EZ_EPROTO); /* a list in itself: a cycle */
  assert_int_equal(LOAD("\x80\x04]\x94h\x00\x85"
                        "a."),
                   EZ_EPROTO);                           /* through a tuple */
  assert_int_equal(LOAD("\x80\x04}\x94]s."), EZ_EPROTO); /* odd SETITEM */
  assert_int_equal(LOAD("\x80\x04}]Ns."), EZ_EPROTO);    /* unhashable key */
  assert_int_equal(LOAD("\x80\x04\x8f(]\x90."), EZ_EPROTO);
  assert_int_equal(LOAD("\x80\x04(]\x91."), EZ_EPROTO);
  assert_int_equal(LOAD("\x80\x04N(Na."), EZ_EPROTO); /* APPEND across a mark */
  assert_int_equal(LOAD("\x80\x04Na."), EZ_EPROTO);   /* APPEND onto None */
  assert_int_equal(LOAD("\x80\x04\x8c\x01x(Ne."), EZ_EPROTO);
  assert_int_equal(LOAD("\x80\x04}(Nu."), EZ_EPROTO); /* odd SETITEMS */
  assert_int_equal(LOAD("\x80\x04N}b."), EZ_EPROTO);  /* BUILD on None */
  assert_int_equal(LOAD("\x80\x04\x8c\x01m\x8c\x01"
                        "C\x93)\x81}b}b."),
                   EZ_EPROTO); /* 2 BUILDs */
  assert_int_equal(LOAD("\x80\x04\x8c\x01m\x8c\x01"
                        "C\x93)\x81}b."),
                   0);
  assert_int_equal(LOAD("\x80\x04\x8c\x01m\x8c\x01"
                        "C\x93N\x81."),
                   EZ_EPROTO); /* args not tuple */
  assert_int_equal(LOAD("\x80\x04\x8c\x01m\x8c\x01"
                        "C\x93)N\x92."),
                   EZ_EPROTO); /* kwargs */
  assert_int_equal(LOAD("\x80\x04\x8c\x01m\x8c\x01"
                        "C\x93)}\x92."),
                   0);
  assert_int_equal(LOAD("\x80\x04N\x8c\x01"
                        "C\x93."),
                   EZ_EPROTO); /* STACK_GLOBAL of None */
  assert_int_equal(LOAD("\x80\x04\x8c\x00\x8c\x01"
                        "C\x93."),
                   EZ_EPROTO); /* empty module */
  assert_int_equal(LOAD("\x80\x04"
                        "cos\nsystem\n."),
                   0); /* a name only: never resolved */
  assert_int_equal(LOAD("\x80\x04"
                        "cos\nsystem."),
                   EZ_EPROTO);
  assert_int_equal(LOAD("\x80\x04h\x00."), EZ_EPROTO); /* no memo */
  assert_int_equal(LOAD("\x80\x04N\x94h\x01."), EZ_EPROTO);
  assert_int_equal(LOAD("\x80\x04Nr\xff\xff\xff\xff"
                        "0j\xff\xff\xff\xff."),
                   0); /* sparse memo */
  assert_int_equal(LOAD("\x80\x04Np4294967296\n."), EZ_EPROTO);
  assert_int_equal(LOAD("\x80\x04Np7\ng7\n\x86."), 0);
  assert_int_equal(LOAD("\x80\x04Np7x\n."), EZ_EPROTO);
  assert_int_equal(LOAD("\x80\x04\x8c\x01\xff."), EZ_EPROTO);         /* not UTF-8 */
  assert_int_equal(LOAD("\x80\x04\x8b\xff\xff\xff\xff."), EZ_EPROTO); /* negative LONG4 */
  /* length prefixes far beyond the input allocate nothing */
  assert_int_equal(LOAD("\x80\x04X\xff\xff\xff\x7f."), EZ_EMSGSIZE);
  assert_int_equal(LOAD("\x80\x04X\x00\x00\x10\x00."), EZ_EPROTO);
  assert_int_equal(LOAD("\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\xff."), EZ_EMSGSIZE);
  assert_int_equal(LOAD("\x80\x04\x8e\x00\x00\x00\x00\x01\x00\x00\x00."), EZ_EMSGSIZE);
  assert_int_equal(LOAD("\x80\x04\x96\x10\x00\x00\x00\x00\x00\x00\x00."), EZ_EPROTO);
  assert_int_equal(LOAD("\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\xffN."), EZ_EPROTO);
  assert_int_equal(LOAD("\x80\x04\x95\x02\0\0\0\0\0\0\0N."), 0);
  /* an argument may start where a frame ends (as Python's _Unframer reads), not cross it */
  assert_int_equal(LOAD("\x80\x04\x95\x01\0\0\0\0\0\0\0K\x01."), 0);
  assert_int_equal(LOAD("\x80\x04\x95\x03\0\0\0\0\0\0\0\x8c\x02/a."), EZ_EPROTO);
  assert_int_equal(LOAD("\x80\x04\x95\x0a\0\0\0\0\0\0\0\x95\0\0\0\0\0\0\0\0N."), EZ_EPROTO);
  /* every opcode we do not know, after a valid value */
  static const uint8_t known[] = "(.012JKMNRXabcd}eghjl]pqrst)uGBC\x80\x81\x85\x86\x87\x88\x89"
                                 "\x8a\x8b\x8c\x8d\x8e\x8f\x90\x91\x92\x93\x94\x95\x96";
  int unknown = 0;
  for (int op = 0; op < 256; op++) {
    if (memchr(known, op, sizeof(known) - 1)) continue;
    uint8_t b[4] = {0x80, 4, (uint8_t)op, '.'};
    assert_int_equal(load_bytes(b, 4, NULL, &err), EZ_EPROTO);
    assert_non_null(strstr(err.msg, "unknown"));
    unknown++;
  }
  assert_true(unknown > 180);
}

static void test_limits(void **state) {
  ezi_pk_err err;
  ezi_pk_limits lim = {.max_str = 3};
  assert_int_equal(load_bytes("\x80\x04\x8c\x03"
                              "abc.",
                              8, &lim, &err),
                   0);
  assert_int_equal(load_bytes("\x80\x04\x8c\x04"
                              "abcd.",
                              9, &lim, &err),
                   EZ_EMSGSIZE);
  lim = (ezi_pk_limits){.max_input = 4};
  assert_int_equal(load_bytes("\x80\x04N.", 4, &lim, &err), 0);
  assert_int_equal(load_bytes("\x80\x04K\x01.", 5, &lim, &err), EZ_EMSGSIZE);
  lim = (ezi_pk_limits){.max_nodes = 5}; /* nodes and container entries */
  assert_int_equal(load_bytes("\x80\x04NN\x86.", 6, &lim, &err),
                   0); /* 2 values, a tuple, 2 entries */
  assert_int_equal(load_bytes("\x80\x04NNN\x87.", 7, &lim, &err), EZ_EMSGSIZE);
  lim = (ezi_pk_limits){.max_memo = 2};
  assert_int_equal(load_bytes("\x80\x04N\x94\x94q\x00.", 8, &lim, &err), 0); /* same index */
  assert_int_equal(load_bytes("\x80\x04N\x94\x94\x94.", 7, &lim, &err), EZ_EMSGSIZE);
  /* nesting: 5000 lists, each in the one before */
  size_t n = 2 + 5000 * 2 + 5000 + 1;
  uint8_t *b = malloc(n);
  size_t k = 0;
  b[k++] = 0x80, b[k++] = 4;
  for (int i = 0; i < 5000; i++)
    b[k++] = ']', b[k++] = '(';
  b[k - 1] = 'N'; /* the innermost list holds None */
  for (int i = 0; i < 5000; i++)
    b[k++] = i == 0 ? 'a' : 'e';
  b[k++] = '.';
  assert_int_equal(load_bytes(b, k, NULL, &err), EZ_EMSGSIZE);
  assert_non_null(strstr(err.msg, "deeper"));
  lim = (ezi_pk_limits){.max_depth = 100000}; /* capped: still refused, and no stack overflow */
  assert_int_equal(load_bytes(b, k, &lim, &err), EZ_EMSGSIZE);
  free(b);
}

/* Every prefix of the vectors fails cleanly (all of them for small ones, a sample for big). */
static void test_truncations(void **state) {
  for (size_t i = 0; i < sizeof(vectors) / sizeof(*vectors); i++) {
    size_t n;
    uint8_t *b = must_load(vectors[i].dir, vectors[i].name, &n);
    for (size_t k = 0; k < n; k++) {
      if (n > 2000 && k > 300 && k < n - 300 && k % (n / 64 + 1)) continue;
      ezi_pk_err err;
      int rc = load_bytes(b, k, NULL, &err);
      if (rc != EZ_EPROTO) fail_msg("%s cut at %zu: %d", vectors[i].name, k, rc);
    }
    free(b);
  }
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* Random edits of small vectors: never a crash or leak; whatever decodes round-trips. */
static void test_mutations(void **state) {
  static const char *files[][2] = {{"pickle", "basic_p2.bin"},    {"pickle", "basic_p4.bin"},
                                   {"pickle", "basic_p5.bin"},    {"meta39", "graph_snapshot.bin"},
                                   {"meta39", "trace_batch.bin"}, {"dag", "v39_owners.bin"}};
  static const uint8_t hot[] =
      "(.012NRXabeghjqstu)}]\x80\x81\x85\x86\x8c\x8f\x90\x91\x92\x93\x94\x95";
  int ok = 0;
  for (size_t f = 0; f < sizeof(files) / sizeof(*files); f++) {
    size_t n;
    uint8_t *b = must_load(files[f][0], files[f][1], &n);
    for (int r = 0; r < 700; r++) {
      uint8_t *c = malloc(n + 8);
      memcpy(c, b, n);
      size_t len = n;
      for (int e = 1 + (int)(rnd() % 3); e > 0 && len > 1 && len < n + 4; e--) {
        size_t at = (size_t)(rnd() % len);
        switch (rnd() % 4) {
        case 0: c[at] ^= (uint8_t)(1u << (rnd() % 8)); break;
        case 1: c[at] = hot[rnd() % (sizeof(hot) - 1)]; break;
        case 2: memmove(c + at, c + at + 1, len - at - 1), len--; break;
        default:
          memmove(c + at + 1, c + at, len - at), c[at] = hot[rnd() % (sizeof(hot) - 1)], len++;
        }
      }
      ezi_pk_doc *d;
      const ezi_pk *x;
      ezi_pk_err err;
      int rc = ezi_pk_load(c, len, NULL, &d, &x, &err);
      assert_true(rc == 0 || rc == EZ_EPROTO || rc == EZ_EMSGSIZE);
      if (rc == 0) {
        size_t on;
        free(assert_roundtrip(x, &on));
        ezi_pk_doc_free(d);
        ok++;
      }
      free(c);
    }
    free(b);
  }
  print_message("mutations that decoded (and round-tripped): %d\n", ok);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vectors),
      cmocka_unit_test(test_protocols_agree),
      cmocka_unit_test(test_basic_values),
      cmocka_unit_test(test_builders_exact),
      cmocka_unit_test(test_builders_roundtrip),
      cmocka_unit_test(test_sharing),
      cmocka_unit_test(test_keep),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_limits),
      cmocka_unit_test(test_truncations),
      cmocka_unit_test(test_mutations),
      cmocka_unit_test(test_ours),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
