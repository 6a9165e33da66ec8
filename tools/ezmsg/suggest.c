/* "Did you mean": the closest of a list of names to a mistyped one (cli.h, cli_closest). */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

/* Edit distance (insertions, deletions, substitutions, and swaps of two neighbours), or a large
 * number for strings too long to bother with. */
static size_t distance(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  if (na > 256 || nb > 256) return (size_t)-1;
  size_t *d = malloc((na + 1) * (nb + 1) * sizeof *d);
  if (!d) return (size_t)-1;
#define D(i, j) d[(i) * (nb + 1) + (j)]
  for (size_t i = 0; i <= na; i++)
    D(i, 0) = i;
  for (size_t j = 0; j <= nb; j++)
    D(0, j) = j;
  for (size_t i = 1; i <= na; i++) {
    for (size_t j = 1; j <= nb; j++) {
      size_t best = D(i - 1, j - 1) + (a[i - 1] != b[j - 1]);
      if (D(i - 1, j) + 1 < best) best = D(i - 1, j) + 1;
      if (D(i, j - 1) + 1 < best) best = D(i, j - 1) + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          D(i - 2, j - 2) + 1 < best)
        best = D(i - 2, j - 2) + 1;
      D(i, j) = best;
    }
  }
  size_t r = D(na, nb);
#undef D
  free(d);
  return r;
}

const char *cli_closest(const char *word, const char *const *names, size_t n) {
  const char *best = NULL;
  size_t best_d = (size_t)-1, len = strlen(word);
  size_t limit = len <= 4 ? 1 : len <= 8 ? 2 : 3;
  for (size_t i = 0; i < n; i++) {
    if (!names[i]) continue;
    size_t d = distance(word, names[i]);
    /* A prefix of a name counts as near ("prof" -> "profile"). */
    if (len >= 3 && !strncmp(names[i], word, len)) d = 1;
    if (d < best_d) {
      best_d = d;
      best = names[i];
    }
  }
  return best_d <= limit ? best : NULL;
}
