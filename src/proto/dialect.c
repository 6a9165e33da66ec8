/* Which wire dialect a peer speaks (dialect.h). */
#include "proto/dialect.h"
#include "base/internal.h"

#include <stdlib.h>
#include <string.h>

/* Parses "3.<minor>" at the start of s; -1 if it is not that. */
static int minor_of(const char *s, size_t n) {
  if (n < 3 || s[0] != '3' || s[1] != '.') return -1;
  int v = 0;
  size_t i = 2;
  for (; i < n && s[i] >= '0' && s[i] <= '9' && v < 1000; i++)
    v = v * 10 + (s[i] - '0');
  return i == 2 ? -1 : v; /* ("3.9.0", "3.10.1", "3.9.0rc1", "3.9.0+local": what follows is free) */
}

ezi_peer_version ezi_dialect_of_greeting(const char *ver, size_t n) {
  int minor = minor_of(ver, n);
  ezi_peer_version v = {
      .dialect = minor >= 0 && minor <= 6 ? EZ_DIALECT_PROFILING : EZ_DIALECT_RELEASED,
      .minor = minor < 0 ? 0 : minor,
      .sessions = minor >= 9,
  };
  int forced = ezi_dialect_forced();
  if (forced) v.dialect = forced;
  return v;
}

int ezi_dialect_forced(void) {
  const char *e = getenv(EZ_DIALECT_ENV);
  if (!e || !*e || !strcmp(e, "auto")) return 0;
  if (!strcmp(e, "profiling")) return EZ_DIALECT_PROFILING;
  if (!strcmp(e, "released")) return EZ_DIALECT_RELEASED;
  static int warned;
  if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
    EZI_WARN("%s=%s: not profiling, released or auto; deciding from the peers", EZ_DIALECT_ENV, e);
  return 0;
}

const char *ezi_dialect_name(int dialect) {
  return dialect == EZ_DIALECT_PROFILING  ? "profiling"
         : dialect == EZ_DIALECT_RELEASED ? "released"
                                          : "?";
}

bool ezi_dialect_is_segment_name(const char *s, size_t n) {
  if (n == 0) return true; /* no segment (a publisher that has none); no topic is empty */
  if (n <= 4 || n > 64 || memcmp(s, "psm_", 4) != 0) return false;
  for (size_t i = 4; i < n; i++) {
    char c = s[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'))
      return false;
  }
  return true;
}
