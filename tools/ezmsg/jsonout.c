/* JSON output at a sane precision (jsonout.h). */
#include "jsonout.h"

#include <math.h>

double jo_round(double v) {
  if (!isfinite(v) || v == 0) return 0;
  double e = floor(log10(fabs(v)));
  double scale = pow(10, 5 - e);
  double r = round(v * scale) / scale;
  return isfinite(r) ? r : v;
}

json_t *jo_real(double v) { return json_real(jo_round(v)); }

void jo_round_tree(json_t *j) {
  if (json_is_real(j)) {
    json_real_set(j, jo_round(json_real_value(j)));
  } else if (json_is_object(j)) {
    const char *k;
    json_t *v;
    json_object_foreach(j, k, v) jo_round_tree(v);
  } else if (json_is_array(j)) {
    size_t i;
    json_t *v;
    json_array_foreach(j, i, v) jo_round_tree(v);
  }
}

char *jo_dumps(const json_t *j, bool indent) {
  size_t flags = JSON_REAL_PRECISION(15) | (indent ? JSON_INDENT(2) : JSON_COMPACT);
  return json_dumps(j, flags);
}
