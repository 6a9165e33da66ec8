/* Fitting labels into terminal columns: UTF-8 aware, control characters shown as '?'. */
#ifndef EZ_TEXTFIT_H
#define EZ_TEXTFIT_H

#include <stdbool.h>

/* Writes `s` (NULL: "") into out as at most `width` columns (one per UTF-8 character; control
 * characters and stray bytes become '?'), cut with "..." when longer; with `pad`, padded with
 * spaces to exactly `width`. out needs 4 * width + 1 bytes. */
void cli_fit(char *out, const char *s, int width, bool pad);

#endif
