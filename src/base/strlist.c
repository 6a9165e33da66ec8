/* A growable list of copied strings (strlist.h). */
#include "base/strlist.h"

#include <stdlib.h>
#include <string.h>

void ezi_strlist_add(ezi_strlist *l, const char *s) {
  if (l->nomem) return;
  if (l->n == l->cap) {
    size_t nc = l->cap ? l->cap * 2 : 16;
    char **nv = realloc(l->v, nc * sizeof *nv);
    if (!nv) {
      l->nomem = true;
      return;
    }
    l->v = nv;
    l->cap = nc;
  }
  if (!(l->v[l->n] = strdup(s)))
    l->nomem = true;
  else
    l->n++;
}

bool ezi_strlist_has(const ezi_strlist *l, const char *s) {
  for (size_t i = 0; i < l->n; i++)
    if (!strcmp(l->v[i], s)) return true;
  return false;
}

void ezi_strlist_free(ezi_strlist *l) {
  for (size_t i = 0; i < l->n; i++)
    free(l->v[i]);
  free(l->v);
  *l = (ezi_strlist){0};
}
