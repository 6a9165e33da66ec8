/* JSON output shared by the commands: numbers at a sane precision and documents either indented
 * (for people) or on one line (for logs: one document per line). */
#ifndef EZ_JSONOUT_H
#define EZ_JSONOUT_H

#include <jansson.h>
#include <stdbool.h>

/* v rounded to 6 significant digits (0, NaN and infinities become 0). */
double jo_round(double v);

/* A JSON real of jo_round(v). */
json_t *jo_real(double v);

/* Rounds every real in the tree (jo_round), in place. */
void jo_round_tree(json_t *j);

/* The document as text (caller frees): indented by two spaces, or on one line; reals printed
 * shortest (after jo_round they have at most 6 significant digits). NULL without memory. */
char *jo_dumps(const json_t *j, bool indent);

#endif
