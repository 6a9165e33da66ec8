/* Test vectors: files under tests/corpus/ (found through $EZ_SRC, or next to this header). */
#ifndef EZ_TEST_VECTORS_H
#define EZ_TEST_VECTORS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The bytes of tests/corpus/<dir>/<name> (malloc'd, exactly *len bytes plus one), or NULL. */
static inline uint8_t *tv_load(const char *dir, const char *name, size_t *len) {
  *len = 0;
  char path[4096];
  const char *src = getenv("EZ_SRC");
  if (src) {
    snprintf(path, sizeof(path), "%s/tests/corpus/%s/%s", src, dir, name);
  } else {
    const char *slash = strrchr(__FILE__, '/');
    int dl = slash ? (int)(slash - __FILE__ + 1) : 0;
    snprintf(path, sizeof(path), "%.*scorpus/%s/%s", dl, __FILE__, dir, name);
  }
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  uint8_t *b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  fclose(f);
  *len = (size_t)n;
  return b;
}

#endif
