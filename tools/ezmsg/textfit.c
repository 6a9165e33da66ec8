/* cli_fit (textfit.h). */
#include "textfit.h"

#include <stddef.h>

/* Byte length of the character at s (a whole UTF-8 sequence, else 1). */
static size_t char_len(const unsigned char *s) {
  if (s[0] < 0xc2 || s[0] > 0xf4) return 1;
  size_t want = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : 2, k = 1;
  while (k < want && (s[k] & 0xc0) == 0x80)
    k++;
  return k == want ? want : 1;
}

void cli_fit(char *out, const char *s, int width, bool pad) {
  const unsigned char *u = (const unsigned char *)(s ? s : "");
  int cols = 0;
  for (size_t i = 0; u[i]; i += char_len(u + i))
    cols++;
  int keep = cols > width ? width - 3 : cols, shown = 0;
  size_t o = 0;
  for (size_t i = 0; shown < keep; shown++) {
    size_t n = char_len(u + i);
    if (n > 1)
      for (size_t k = 0; k < n; k++)
        out[o + k] = (char)u[i + k];
    else
      out[o] = u[i] < 0x20 || u[i] == 0x7f || u[i] >= 0x80 ? '?' : (char)u[i];
    o += n;
    i += n;
  }
  if (cols > width)
    for (; shown < width; shown++)
      out[o++] = '.';
  if (pad)
    for (; shown < width; shown++)
      out[o++] = ' ';
  out[o] = 0;
}
