/* pace.h */
#include "pace.h"

pace pace_new(double rate_hz) {
  pace p = {0};
  if (rate_hz > 0) {
    double ns = 1e9 / rate_hz;
    p.period_ns = ns < 1 ? 1 : ns > 1e18 ? (uint64_t)1e18 : (uint64_t)ns;
  }
  return p;
}

uint64_t pace_due(pace *p, uint64_t now_ns) {
  if (!p->period_ns) return now_ns;
  if (!p->started) {
    p->started = true;
    p->due_ns = now_ns;
  }
  /* More than a period behind: forgive the rest, so what follows is at most one extra message
   * at once, never a burst of everything the stall held up. */
  if (now_ns > p->due_ns + p->period_ns) p->due_ns = now_ns - p->period_ns;
  return p->due_ns > now_ns ? p->due_ns : now_ns;
}

void pace_sent(pace *p) {
  if (p->period_ns) p->due_ns += p->period_ns;
}
