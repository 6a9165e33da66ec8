/* Internals shared by the two halves of the meta39 engine: parsing (meta39.c) and building
 * (meta39_build.c). */
#ifndef EZI_META39_ENGINE_H
#define EZI_META39_ENGINE_H

#include "proto/meta39.h"

typedef struct ezi_m39_ctx {
  ezi_pk_doc *d;
  ezi_pk_err *err;
  size_t budget; /* array entries the parser may still allocate */
  const char *cls, *field;
} ezi_m39_ctx;

/* Sets err (if not set yet) to code and "<class>.<field>: <what>"; returns the code kept. */
int ezi_m39_fail(ezi_m39_ctx *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A context for documents d (where arrays go) and n's (NULL: none), err zeroed. */
ezi_m39_ctx ezi_m39_ctx_make(ezi_pk_doc *d, const ezi_pk *n, ezi_pk_err *err);

/* The places the list and dict helpers parse into and build from. */
typedef struct ezi_m39_span {
  void *v;
  size_t n;
} ezi_m39_span;
typedef struct ezi_m39_kspan {
  void *v, *keys;
  size_t n;
} ezi_m39_kspan;

#define EZI_M39_AT(base, off, T) ((T *)((char *)(base) + (off)))
#define EZI_M39_CAT(base, off, T) ((const T *)((const char *)(base) + (off)))

#endif
