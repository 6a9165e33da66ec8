/* A general, bounded Python-pickle codec: a tree of inert values, a decoder of the opcodes
 * Python 3.8-3.13 emit for plain data and dataclasses (protocols 2-5), and a protocol-4 encoder
 * whose bytes Python's pickle.loads turns into equal objects.
 *
 * Nothing is ever executed or resolved: a class or function is a GLOBAL node holding its module
 * and qualified name, and an instance is an OBJECT node that records how it was made (NEWOBJ,
 * NEWOBJ_EX or REDUCE: the callable, its arguments), its BUILD state, and the items appended or
 * set onto it. A few reductions Python uses for builtin types are turned back into those types
 * (set/frozenset/bytearray/bytes through builtins or _codecs, as protocols 2 and 3 write them).
 *
 * Memory. Every node lives in a document (ezi_pk_doc), an arena freed at once. Decoding copies
 * what it keeps (strings, bytes) into the document, so the input may be freed right after
 * ezi_pk_load. Each allocation is proportional to input bytes actually read: a length prefix is
 * checked against what is left of the input before anything is allocated.
 *
 * Lifetime across documents. A builder may put a node of document A into a container of
 * document B (e.g. a session's decoded GraphMetadata inside a GraphSnapshot being built). B then
 * points into A: call ezi_pk_doc_keep(B, A) so that A lives until B is freed (A's own
 * ezi_pk_doc_free only drops the caller's reference). Without it, A must outlive every use of B.
 *
 * Threads. No global state. A document (and the documents it keeps) may be used by one thread
 * at a time; reading a document nobody modifies is safe from any number of threads.
 *
 * Shape of decoded trees. A decoded tree is acyclic and at most limits.max_depth deep: a pickle
 * that builds a cycle through the memo (a list that contains itself) is rejected, so every
 * walk over a decoded tree ends. Sharing is kept: a node fetched twice from the memo is one node.
 * Trees made with the builders may be cyclic through lists, dicts, sets and object items; the
 * encoder and ezi_pk_equal bound their depth and detect cycles. */
#ifndef EZI_PICKLE_H
#define EZI_PICKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum ezi_pk_type {
  EZI_PK_NONE = 1,
  EZI_PK_BOOL,
  EZI_PK_INT,   /* int64 in .i, or (big) little-endian two's complement bytes in .s */
  EZI_PK_FLOAT, /* a double in .f */
  EZI_PK_STR,   /* UTF-8 (surrogates allowed, as Python's 'surrogatepass') in .s, NUL-terminated */
  EZI_PK_BYTES, /* .s */
  EZI_PK_BYTEARRAY, /* .s */
  EZI_PK_LIST,      /* .seq */
  EZI_PK_TUPLE,     /* .seq */
  EZI_PK_DICT,      /* .seq: key k at v[2k], its value at v[2k+1], in insertion order */
  EZI_PK_SET,       /* .seq */
  EZI_PK_FROZENSET, /* .seq */
  EZI_PK_GLOBAL,    /* .g: a name only (module, qualname), never resolved */
  EZI_PK_OBJECT,    /* .o */
} ezi_pk_type;

/* How an OBJECT was made: cls.__new__(cls, *args), cls.__new__(cls, *args, **kwargs), or
 * callable(*args). */
typedef enum ezi_pk_how { EZI_PK_NEWOBJ = 1, EZI_PK_NEWOBJ_EX, EZI_PK_REDUCE } ezi_pk_how;

typedef struct ezi_pk_doc ezi_pk_doc;
typedef struct ezi_pk ezi_pk;

/* A node. Read its fields directly (after checking .type) or through the accessors below;
 * change it only through the builders. */
struct ezi_pk {
  uint8_t type;    /* ezi_pk_type */
  uint8_t how;     /* OBJECT: ezi_pk_how */
  bool b;          /* BOOL: the value */
  bool big;        /* INT: the value is in .s (it does not fit int64) */
  bool hashable;   /* may be a dict key or set item (not list/dict/set/bytearray, nor a tuple of
                      those) */
  uint8_t mark;    /* the decoder's depth check: 1 while visited, 2 when done */
  uint16_t height; /* the decoder's depth check: longest path down from here */
  ezi_pk_doc *doc; /* the document the node lives in */
  union {
    int64_t i;
    double f;
    struct {
      char *p; /* NUL-terminated (the NUL is not counted in len) */
      size_t len;
    } s;
    struct {
      ezi_pk **v;
      size_t n, cap; /* DICT: n counts entries (2 per pair) */
    } seq;
    struct {
      char *mod, *name;
    } g;
    struct {
      ezi_pk *cls;    /* the class (NEWOBJ*) or callable (REDUCE), usually a GLOBAL */
      ezi_pk *args;   /* a TUPLE */
      ezi_pk *kwargs; /* NEWOBJ_EX: a DICT; else NULL */
      ezi_pk *state;  /* BUILD's argument, or NULL */
      ezi_pk *list;   /* items APPENDed onto the object (a LIST node), or NULL */
      ezi_pk *dict;   /* items SETITEMed onto the object (a DICT node), or NULL */
    } o;
  } u;
};

/* Limits for ezi_pk_load and the depth bound of every walk. A zero field takes its default. */
typedef struct ezi_pk_limits {
  size_t max_input; /* input bytes (default 64 MiB) */
  size_t max_nodes; /* nodes created plus container entries (default 4 Mi) */
  size_t max_depth; /* nesting: a container and its items are two levels (default 200) */
  size_t max_memo;  /* memo entries (default 1 Mi) */
  size_t max_str;   /* bytes of one str, bytes, bytearray or int (default 16 MiB) */
} ezi_pk_limits;

#define EZI_PK_DEFAULT_DEPTH 200

/* What went wrong: an EZ_* code (EZ_EPROTO: malformed, unknown or inconsistent; EZ_EMSGSIZE: a
 * limit; EZ_ENOMEM; EZ_EINVAL: a caller's bad tree) and a message naming the opcode and input
 * offset where there is one. */
typedef struct ezi_pk_err {
  int code;
  size_t offset;
  char msg[120];
} ezi_pk_err;

/* ---- documents ------------------------------------------------------------------------------ */

/* A new, empty document (reference count 1). NULL on ENOMEM. */
ezi_pk_doc *ezi_pk_doc_new(void);

/* Drops one reference; the last one frees every node of the document and drops the documents it
 * keeps. NULL is a no-op. */
void ezi_pk_doc_free(ezi_pk_doc *d);

/* Makes d hold a reference on other until d is freed (other's nodes may then be used in d's
 * trees). d == other, NULL, or other already kept: no-op. Returns 0, EZ_ENOMEM, or EZ_EINVAL if
 * other already keeps d (a cycle of documents would never be freed). */
int ezi_pk_doc_keep(ezi_pk_doc *d, ezi_pk_doc *other);

/* n bytes of zeroed memory (8-byte aligned) that lives as long as d. NULL on ENOMEM. */
void *ezi_pk_alloc(ezi_pk_doc *d, size_t n);

/* The protocol of the pickle the document was decoded from (0 for a built document). */
int ezi_pk_doc_proto(const ezi_pk_doc *d);
void ezi_pk_doc_set_proto(ezi_pk_doc *d, int proto); /* the decoder's */

/* Bytes the document has allocated (a measure of its size, for budgets). */
size_t ezi_pk_doc_size(const ezi_pk_doc *d);

/* ---- decoding and encoding ------------------------------------------------------------------ */

/* Decodes one pickle of buf[0, len) (nothing may follow its STOP). On success *doc is a new
 * document (caller frees) and *root its top value. lim may be NULL (defaults); err may be NULL.
 * Returns 0 or the code in err (then *doc and *root are NULL). */
int ezi_pk_load(const uint8_t *buf, size_t len, const ezi_pk_limits *lim, ezi_pk_doc **doc,
                const ezi_pk **root, ezi_pk_err *err);

enum { EZI_PK_NOFRAMES = 1 }; /* ezi_pk_dump flags */

/* Encodes root as a protocol-4 pickle: FRAMEs as Python writes them (a new one at a value
 * boundary past 64 KiB; a str or bytes payload of 64 KiB or more outside frames), or none with
 * EZI_PK_NOFRAMES. Each node reachable twice is written once and fetched from the memo
 * afterwards; equal str, bytes and GLOBAL nodes are written once too. Dataclass instances, enums,
 * named tuples and UUIDs built with the builders below come out as Python writes them. *out is
 * malloc'd (caller frees), *len its length. lim: NULL or its max_depth bounds the nesting.
 * Returns 0; EZ_ENOMEM; EZ_EINVAL for a tree Python could not load (too deep, a cycle through a
 * tuple or constructor arguments, an unhashable key, an OBJECT without class or argument tuple);
 * *out is NULL on error. */
int ezi_pk_dump(const ezi_pk *root, unsigned flags, const ezi_pk_limits *lim, uint8_t **out,
                size_t *len, ezi_pk_err *err);

/* ---- builders: each returns a new node of d, or NULL on ENOMEM (or EINVAL where noted) ------ */

ezi_pk *ezi_pk_none(ezi_pk_doc *d);
ezi_pk *ezi_pk_bool(ezi_pk_doc *d, bool v);
ezi_pk *ezi_pk_int(ezi_pk_doc *d, int64_t v);
/* An int from n bytes of little-endian two's complement (normalized: int64 when it fits). */
ezi_pk *ezi_pk_bigint(ezi_pk_doc *d, const uint8_t *le, size_t n);
ezi_pk *ezi_pk_float(ezi_pk_doc *d, double v);
/* A str copied from s[0, len); NULL also if it is not UTF-8 as Python accepts it. */
ezi_pk *ezi_pk_str(ezi_pk_doc *d, const char *s, size_t len);
ezi_pk *ezi_pk_cstr(ezi_pk_doc *d, const char *s); /* strlen(s); NULL s: NULL */
ezi_pk *ezi_pk_bytes(ezi_pk_doc *d, const void *p, size_t len);
ezi_pk *ezi_pk_bytearray(ezi_pk_doc *d, const void *p, size_t len);
/* An empty container of type t (LIST, TUPLE, DICT, SET or FROZENSET; else NULL). */
ezi_pk *ezi_pk_container(ezi_pk_doc *d, ezi_pk_type t);
/* A GLOBAL mod.name (both copied; NULL if not UTF-8 or empty). */
ezi_pk *ezi_pk_global(ezi_pk_doc *d, const char *mod, const char *name);
/* A bare node of type t (zeroed value; containers empty). The decoder's primitive. */
ezi_pk *ezi_pk_node(ezi_pk_doc *d, ezi_pk_type t);
/* The value Python's loads makes of REDUCE(f, args) when f is one of the builtin types'
 * reductions (builtins.set / frozenset of a list, builtins.bytearray of bytes or of a latin-1 str,
 * builtins.bytes(), _codecs.encode(str, 'latin1')), or NULL if it is not one (*rc 0) or on
 * ENOMEM (*rc EZ_ENOMEM). *made: nodes and entries it made. The decoder's (pickle_builtin.c). */
ezi_pk *ezi_pk_reduce_builtin(ezi_pk_doc *d, const ezi_pk *f, const ezi_pk *args, size_t *made,
                              int *rc);
/* An OBJECT: how, callable/class, args (a TUPLE; NULL: an empty one), kwargs (NEWOBJ_EX only). */
ezi_pk *ezi_pk_object(ezi_pk_doc *d, ezi_pk_how how, ezi_pk *cls, ezi_pk *args, ezi_pk *kwargs);

/* Appends item to a LIST, TUPLE, SET or FROZENSET, or to an OBJECT's appended items. Returns 0,
 * EZ_ENOMEM, or EZ_EINVAL (not a container; unhashable item of a set). Builders do not remove
 * duplicates from sets. */
int ezi_pk_append(ezi_pk *c, ezi_pk *item);
/* Adds key: value to a DICT (or an OBJECT's set items), replacing the value of an equal str key.
 * Returns 0, EZ_ENOMEM, or EZ_EINVAL (not a dict; unhashable key). */
int ezi_pk_dict_set(ezi_pk *dict, ezi_pk *key, ezi_pk *value);
/* Adds key: value to a DICT (or an OBJECT's set items) without looking for an equal key: O(1),
 * for builders that know their keys are unique (the decoder keeps every pair as written too). */
int ezi_pk_dict_add(ezi_pk *dict, ezi_pk *key, ezi_pk *value);
/* dict[key] = value with a str key (copied). */
int ezi_pk_dict_set_str(ezi_pk *dict, const char *key, ezi_pk *value);

/* A dataclass instance as Python pickles it: NEWOBJ(GLOBAL mod.name, ()) with an empty state
 * dict that ezi_pk_attr_set fills (in field order, as Python's __init__ would). */
ezi_pk *ezi_pk_dataclass(ezi_pk_doc *d, const char *mod, const char *name);
/* state[name] = value on an OBJECT (a state dict is created if there is none). 0, EZ_ENOMEM,
 * EZ_EINVAL (not an object, or its state is not a dict). */
int ezi_pk_attr_set(ezi_pk *obj, const char *name, ezi_pk *value);
/* An enum member: REDUCE(GLOBAL mod.name, (value,)). */
ezi_pk *ezi_pk_enum(ezi_pk_doc *d, const char *mod, const char *name, ezi_pk *value);
/* A named tuple: NEWOBJ(GLOBAL mod.name, args). */
ezi_pk *ezi_pk_namedtuple(ezi_pk_doc *d, const char *mod, const char *name, ezi_pk *args);
/* A uuid.UUID from its canonical string (36 characters, hex in any case); NULL if malformed. */
ezi_pk *ezi_pk_uuid(ezi_pk_doc *d, const char *canonical);

/* ---- accessors (NULL-safe: a NULL node is of no type) --------------------------------------- */

/* True if n is an OBJECT whose class is the GLOBAL mod.name. */
bool ezi_pk_is_class(const ezi_pk *n, const char *mod, const char *name);
/* True if n is the GLOBAL mod.name. */
bool ezi_pk_is_global(const ezi_pk *n, const char *mod, const char *name);
/* Items of a LIST, TUPLE, SET or FROZENSET, pairs of a DICT; 0 for anything else. */
size_t ezi_pk_len(const ezi_pk *n);
/* Item i of a LIST, TUPLE, SET or FROZENSET (NULL past the end or for other nodes). */
const ezi_pk *ezi_pk_item(const ezi_pk *n, size_t i);
/* Key and value of pair i of a DICT. */
const ezi_pk *ezi_pk_key(const ezi_pk *n, size_t i);
const ezi_pk *ezi_pk_value(const ezi_pk *n, size_t i);
/* The value of the last pair of a DICT whose key is the str `key`, or NULL. */
const ezi_pk *ezi_pk_dict_get(const ezi_pk *dict, const char *key);
/* state[name] of an OBJECT whose BUILD state is a dict, or NULL. */
const ezi_pk *ezi_pk_attr(const ezi_pk *obj, const char *name);
/* The value of an enum member REDUCE(mod.name, (value,)), or NULL if n is not one. */
const ezi_pk *ezi_pk_enum_value(const ezi_pk *n, const char *mod, const char *name);
/* The str of n, or NULL if n is not a str. *len (may be NULL) gets its length. */
const char *ezi_pk_str_of(const ezi_pk *n, size_t *len);
/* The str of n if it has no NUL inside (usable as a C string), else NULL. */
const char *ezi_pk_cstr_of(const ezi_pk *n);
/* The int64 of n: 0, or EZ_EPROTO if n is not an int (a bool is not) or does not fit. */
int ezi_pk_int_of(const ezi_pk *n, int64_t *out);
/* The canonical (lower-case) string of a uuid.UUID object: 0 or EZ_EPROTO. Accepts the state
 * Python 3.8-3.13 write: {'int': 0 <= i < 2**128} and an optional 'is_safe' (0, -1 or None). */
int ezi_pk_uuid_of(const ezi_pk *n, char out[37]);
/* A short name of a node's type for messages ("str", "ezmsg.core.graphmeta.Edge", ...). */
const char *ezi_pk_type_name(const ezi_pk *n);

/* Structural equality: same types and values (floats bit for bit; bool is not int), same items
 * in the same order, same object parts. Cycle-safe, depth-bounded (EZI_PK_DEFAULT_DEPTH * 4),
 * linear in pairs of nodes compared. False also when the bound or memory runs out. */
bool ezi_pk_equal(const ezi_pk *a, const ezi_pk *b);

#endif
