/* The bottleneck of each publisher's stream (gvbuild.h), by the rules of docs/profiling.md,
 * "Reading a bottleneck":
 * 1. A channel of the publisher holds at least num_buffers messages its subscribers have not
 *    released: the publisher blocks on them. The subscriber of that channel with the most
 *    messages in flight (then the longest processing) bounds the rate.
 * 2. Else a subscriber it feeds is busy 90% of the time or more (its release rate times its mean
 *    processing time): it bounds the rate.
 * 3. Else the publisher's leases fill 90% of its buffers (Little's law: rate x mean backpressure
 *    per channel) while no subscriber is slow: moving the messages bounds the rate (transport or
 *    I/O bound); the publisher is marked. */
#include "gvbuild.h"

#include <stdio.h>

static void judge_pub(gv *v, size_t pi) {
  gv_pub *p = &v->pubs[pi];
  /* Rule 1. */
  for (size_t i = 0; i < v->n_chans; i++) {
    const gv_chan *c = &v->chans[i];
    if (c->pub_ix != pi || !c->num_buffers || c->in_flight < c->num_buffers || !c->n_subs) continue;
    gv_sub *worst = NULL;
    for (size_t k = 0; k < c->n_subs; k++) {
      gv_sub *s = &v->subs[c->subs[k]];
      if (!worst || s->proc.in_flight > worst->proc.in_flight ||
          (s->proc.in_flight == worst->proc.in_flight && s->proc.avg_ms > worst->proc.avg_ms))
        worst = s;
    }
    if (!worst->bottleneck[0])
      snprintf(worst->bottleneck, sizeof worst->bottleneck,
               "holds %llu messages of %llu buffers of %s",
               (unsigned long long)worst->proc.in_flight, (unsigned long long)c->num_buffers,
               p->topic ? p->topic : "?");
    return;
  }
  /* Rule 2. */
  gv_sub *busiest = NULL;
  double most = 0;
  for (size_t i = 0; i < v->n_chans; i++) {
    const gv_chan *c = &v->chans[i];
    if (c->pub_ix != pi) continue;
    for (size_t k = 0; k < c->n_subs; k++) {
      gv_sub *s = &v->subs[c->subs[k]];
      double busy = s->rate_hz * s->proc.avg_ms / 1000.0;
      if (busy > most) {
        most = busy;
        busiest = s;
      }
    }
  }
  if (busiest && most >= 0.9) {
    unsigned long long pct = (unsigned long long)(most * 100 + 0.5);
    if (!busiest->bottleneck[0])
      snprintf(busiest->bottleneck, sizeof busiest->bottleneck, "busy %llu%% of the time on %s",
               pct > 100 ? 100 : pct, p->topic ? p->topic : "?");
    return;
  }
  /* Rule 3. */
  double leases = p->rate_hz * p->bp.avg_ms / 1000.0;
  if (p->num_buffers && p->num_channels && leases >= 0.9 * (double)p->num_buffers)
    snprintf(p->bottleneck, sizeof p->bottleneck,
             "leases fill its %llu buffers (%.1f in flight on average): transport-bound",
             (unsigned long long)p->num_buffers, leases);
}

void gvb_judge(gvb *b) {
  for (size_t i = 0; i < b->v->n_pubs; i++)
    if (b->v->pubs[i].answered) judge_pub(b->v, i);
}
