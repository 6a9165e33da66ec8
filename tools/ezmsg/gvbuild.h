/* The graph view's build steps (graphview.c reads the document; gvbuild.c orders the endpoints,
 * derives topics, rates and processes; gvjudge.c marks the bottleneck). Internal to the view. */
#ifndef EZ_GVBUILD_H
#define EZ_GVBUILD_H

#include "graphview.h"

typedef struct gvb {
  gv *v;
  int err; /* the first failure */
} gvb;

double gvb_num(const json_t *obj, const char *key);
uint64_t gvb_u64(const json_t *obj, const char *key);

/* Sorts publishers by (topic, pid, id) and subscribers by (topic, handle, pid, id), keeping the
 * channels' indices right. */
void gvb_sort(gvb *b);
/* Topics: those of the topic graph, of every publisher and of every subscriber; sorted; edges
 * from the topic graph; every endpoint's topic_ix. */
void gvb_topics(gvb *b, const ez_graph *dag);
/* Each topic's rate: the publishers whose topic reaches it. */
void gvb_rates(gvb *b);
/* The processes of the endpoints. */
void gvb_procs(gvb *b);
/* Marks the bottleneck of each publisher's stream (gvjudge.c). */
void gvb_judge(gvb *b);

#endif
