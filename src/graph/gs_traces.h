/* A process's profiling trace samples as the graph server keeps them for the streams that read
 * them (gs_traces.c): at most TRACE_SAMPLES samples and TRACE_BYTES of them, the oldest going
 * first, numbered in sequence from 1. Server thread only. */
#ifndef EZI_GS_TRACES_H
#define EZI_GS_TRACES_H

#include "graph/gs.h"
#include "proto/meta39.h"

/* An empty buffer (NULL when out of memory); freed with its samples by ezi_gs_traces_free
 * (NULL: no-op). */
gs_traces *ezi_gs_traces_new(void);
void ezi_gs_traces_free(gs_traces *t);
/* The process's registration, which every batch carries: its pid and host (borrowed: the caller
 * keeps host alive and calls this again when it changes). Until then pid -1, host "". */
void ezi_gs_traces_owner(gs_traces *t, int64_t pid, const char *host);
/* Copies sample s in (the oldest go when the buffer is full; a sample larger than TRACE_BYTES,
 * or one that finds no memory, is not kept). */
void ezi_gs_traces_add(gs_traces *t, const ezi_m39_trace_sample *s);
/* Up to max samples after sequence number `after` (an `after` older than what is kept starts at
 * the oldest kept) into *b, as a batch of process `process_id` (b->samples malloc'd: the caller
 * frees it; its strings live in t until the next add or free), *upto the sequence number of the
 * last one, *lost how many after `after` went before this reader took them (a reader too slow; 0
 * for a reader's first batch, `after` 0). 0 or EZ_ENOMEM. */
int ezi_gs_traces_batch(const gs_traces *t, const char *process_id, int64_t after, size_t max,
                        ezi_m39_trace_batch *b, int64_t *upto, uint64_t *lost);

#endif
