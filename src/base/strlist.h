/* A growable list of copied strings, for callbacks that collect names as a walk finds them (the
 * graph server's DAG walks). Any thread, one list per thread. */
#ifndef EZI_STRLIST_H
#define EZI_STRLIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct ezi_strlist {
  char **v; /* v[0..n): copies, owned by the list */
  size_t n, cap;
  bool nomem; /* an add failed: the list misses names (later adds do nothing) */
} ezi_strlist;

/* Appends a copy of s; without memory, sets nomem instead. */
void ezi_strlist_add(ezi_strlist *l, const char *s);
/* Whether s is in the list (a linear search). */
bool ezi_strlist_has(const ezi_strlist *l, const char *s);
/* Frees the copies and the array; the list is empty again. */
void ezi_strlist_free(ezi_strlist *l);

#endif
