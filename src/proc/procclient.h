/* An ezmsg-c process in a released-dialect graph (3.9.0): the context registers as a backend
 * process (PROCESS, PROCESS_REGISTER of one unit of its own) and answers what 3.9's tools ask of
 * processes: PING, GET_PROCESS_STATS, GET_PROFILING_SNAPSHOT (its publishers and subscribers in
 * 3.9's ProcessProfilingSnapshot, from our telemetry), SET_PROFILING_TRACE and
 * GET_PROFILING_TRACE_BATCH. I/O thread only. */
#ifndef EZI_PROCCLIENT_H
#define EZI_PROCCLIENT_H

#include <stdbool.h>

typedef struct ez_context ez_context;
typedef struct ezi_proc ezi_proc;

/* Starts the context's process link if its server has sessions (3.9 or later), without blocking:
 * the registration completes in the background (a failure is logged once, and the context goes
 * on without it). Disabled by $EZMSG_REGISTER_PROCESS=0. 0 or EZ_ENOMEM. */
int ezi_proc_start(ez_context *ctx);
/* Closes it (the context is closing). */
void ezi_proc_stop(ez_context *ctx);

#endif
