/* Repeating a command every few seconds until SIGINT / SIGTERM (profile --watch, hz, bw, the
 * dashboard's foreground): the stop signals are blocked and taken synchronously between rounds,
 * so a request in progress is never cut and the exit status is 0. */
#ifndef EZ_WATCH_H
#define EZ_WATCH_H

#include <signal.h>
#include <stdbool.h>
#include <time.h>

/* Blocks SIGINT and SIGTERM in this thread (and the threads it starts later), then resets their
 * dispositions: a shell starts background jobs with SIGINT ignored, and an ignored signal is
 * discarded even while blocked. */
void watch_begin(sigset_t *stop);

/* The monotonic time now. */
struct timespec watch_now(void);

/* Sleeps until period_s after t0, or until a stop signal. False if a stop signal came. */
bool watch_sleep(const sigset_t *stop, struct timespec t0, double period_s);

#endif
