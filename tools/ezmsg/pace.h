/* Pacing `ezmsg pub --rate HZ`: when each message may go, so that no span of time carries more
 * than HZ messages a second (plus two): after a stall (a paused publisher, backpressure, a
 * descheduled process) the schedule is not caught up with a burst; it owes at most one period.
 * Jitter below a period costs nothing: over a long run the rate is HZ. Pure (times are passed
 * in), so it is tested with a made-up clock (tests/test_pace.c). */
#ifndef EZ_PACE_H
#define EZ_PACE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct pace {
  uint64_t period_ns; /* 0: no pacing */
  uint64_t due_ns;    /* when the next message may go */
  bool started;
} pace;

/* A schedule of `rate_hz` messages per second (<= 0: unpaced). */
pace pace_new(double rate_hz);

/* When the next message may go, given the time now (ns, any monotonic origin): now or later.
 * Call pace_sent once it went. */
uint64_t pace_due(pace *p, uint64_t now_ns);

/* Records that the message due by pace_due went. */
void pace_sent(pace *p);

#endif
