/* A context's trace control (trace.h has the samples): which of its publishers and subscribers
 * record trace samples, until when, and collecting what they recorded. Two tools switch it on:
 * 3.9.0's SET_PROFILING_TRACE, routed to the process (procclient.c), and, in the profiling
 * dialect, `ezmsg profile --trace`'s PROFILE polls (EZI_TRACE_POLL_MS). Either way it switches
 * itself off at its deadline: a housekeeping timer of the I/O thread runs while anything is
 * traced. I/O thread only, except where noted. */
#ifndef EZI_TRACECTL_H
#define EZI_TRACECTL_H

#include "proto/meta39.h"
#include "base/trace.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct ez_context ez_context;

/* 3.9's SET_PROFILING_TRACE: applies the control to every endpoint of ctx, and to those made
 * while it holds (3.9's filters: topics, endpoint ids, metrics; sample_mod; ttl_seconds). */
void ezi_tracectl_set(ez_context *ctx, const ezi_m39_trace_control *c);
/* The profiling dialect's poll: traces the endpoint (topic, id) whose trace is *slot (made if
 * need be) for EZI_TRACE_POLL_TTL_NS more. Returns the trace (NULL when out of memory). */
ezi_trace *ezi_tracectl_poll(ez_context *ctx, ezi_trace **slot, const char *topic, const char *id);
/* True while something is traced (3.9's set, or a poll not expired). */
bool ezi_tracectl_active(ez_context *ctx);
/* Takes up to max samples of every endpoint of ctx (oldest first per endpoint) as 3.9's
 * ProfilingTraceSamples into out (strings point into the context's endpoints: use them before
 * the next I/O thread callback). Returns how many. */
size_t ezi_tracectl_take(ez_context *ctx, ezi_m39_trace_sample *out, size_t max);
/* Stops everything (the context closes). */
void ezi_tracectl_stop(ez_context *ctx);

#endif
