/* A context's trace control (tracectl.h). */
#include "proc/tracectl.h"
#include "core/context.h"
#include "pub/pubstate.h"
#include "sub/subscriber.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOUSEKEEPING_NS 250000000ull /* how often deadlines and new endpoints are looked at */

/* 3.9's control, as the context keeps it (its strings copied). */
typedef struct ctl {
  bool set; /* a SET_PROFILING_TRACE holds (enabled) */
  uint32_t metrics, mod;
  uint64_t until_ns; /* 0: no deadline */
  char **lists[4];   /* publisher topics, subscriber topics, publisher ids, subscriber ids */
  size_t n[4];       /* (has[i] false: no filter) */
  bool has[4];
} ctl;

struct ezi_tracectl {
  ctl c;
  uint64_t timer;
};

static struct ezi_tracectl *state(ez_context *ctx) {
  if (!ctx->tracectl) ctx->tracectl = calloc(1, sizeof *ctx->tracectl);
  return ctx->tracectl;
}

static void ctl_clear(ctl *c) {
  for (int i = 0; i < 4; i++) {
    for (size_t j = 0; j < c->n[i]; j++)
      free(c->lists[i][j]);
    free(c->lists[i]);
  }
  *c = (ctl){0};
}

static bool in_list(const ctl *c, int which, const char *s) {
  if (!c->has[which]) return true;
  for (size_t i = 0; i < c->n[which]; i++)
    if (!strcmp(c->lists[which][i], s)) return true;
  return false;
}

/* What the control asks of an endpoint: its metrics (0: none). */
static uint32_t wanted(const ctl *c, bool pub, const char *topic, const char *eid) {
  if (!c->set || !in_list(c, pub ? 0 : 1, topic) || !in_list(c, pub ? 2 : 3, eid)) return 0;
  return c->metrics & (pub ? EZI_TM_PUBLISH_DELTA | EZI_TM_BACKPRESSURE_WAIT : EZI_TM_LEASE_TIME);
}

/* Applies the control to one endpoint; a poll's tracing (until_ns set, no control) is left as is
 * while it lasts. Returns true if it is traced now. */
static bool apply(const ctl *c, ezi_trace **slot, bool pub, const char *topic, const char *id,
                  uint64_t now) {
  ezi_trace *t = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (c->set) {
    char eid[512];
    snprintf(eid, sizeof eid, "%s:%s", topic, id);
    uint32_t m = wanted(c, pub, topic, eid);
    if (m && !t) t = ezi_trace_get(slot, topic, id);
    if (!t) return false;
    if (__atomic_load_n(&t->on, __ATOMIC_RELAXED) != m ||
        __atomic_load_n(&t->mod, __ATOMIC_RELAXED) != c->mod)
      ezi_trace_set(t, m, c->mod);
    t->until_ns = c->until_ns;
    return m != 0;
  }
  if (!t || !__atomic_load_n(&t->on, __ATOMIC_RELAXED)) return false;
  if (t->until_ns && now >= t->until_ns) {
    ezi_trace_set(t, 0, 1);
    t->until_ns = 0;
    return false;
  }
  return true;
}

static void housekeeping(void *arg);

/* Every endpoint against the control and the deadlines; the timer runs while any is traced. */
static void sweep(ez_context *ctx) {
  struct ezi_tracectl *tc = state(ctx);
  if (!tc) return;
  uint64_t now = ezi_now_ns();
  if (tc->c.set && tc->c.until_ns && now >= tc->c.until_ns) { /* 3.9's ttl_seconds passed */
    ctl off = {.set = true};
    pthread_mutex_lock(&ctx->mu);
    for (size_t i = 0; i < ctx->n_pubs; i++)
      apply(&off, &ctx->pubs[i]->trace, true, ctx->pubs[i]->topic, ctx->pubs[i]->id, now);
    for (size_t i = 0; i < ctx->n_subs; i++)
      apply(&off, &ctx->subs[i]->trace, false, ctx->subs[i]->topic, ctx->subs[i]->id, now);
    pthread_mutex_unlock(&ctx->mu);
    ctl_clear(&tc->c);
  }
  bool any = false;
  pthread_mutex_lock(&ctx->mu);
  for (size_t i = 0; i < ctx->n_pubs; i++)
    any |= apply(&tc->c, &ctx->pubs[i]->trace, true, ctx->pubs[i]->topic, ctx->pubs[i]->id, now);
  for (size_t i = 0; i < ctx->n_subs; i++)
    any |= apply(&tc->c, &ctx->subs[i]->trace, false, ctx->subs[i]->topic, ctx->subs[i]->id, now);
  pthread_mutex_unlock(&ctx->mu);
  any |= tc->c.set;
  if (any && !tc->timer)
    tc->timer = ezi_loop_timer(ctx->loop, now + HOUSEKEEPING_NS, housekeeping, ctx);
}

static void housekeeping(void *arg) {
  ez_context *ctx = arg;
  ctx->tracectl->timer = 0;
  sweep(ctx);
}

static int copy_list(ctl *c, int which, const ezi_m39_strs *l) {
  if (!l->has) return 0;
  c->has[which] = true;
  c->lists[which] = calloc(l->n ? l->n : 1, sizeof *c->lists[which]);
  if (!c->lists[which]) return EZ_ENOMEM;
  for (size_t i = 0; i < l->n; i++, c->n[which]++)
    if (!(c->lists[which][i] = strdup(l->v[i]))) return EZ_ENOMEM;
  return 0;
}

void ezi_tracectl_set(ez_context *ctx, const ezi_m39_trace_control *in) {
  struct ezi_tracectl *tc = state(ctx);
  if (!tc) return;
  ctl c = {.set = true, .mod = in->sample_mod > 0 ? (uint32_t)in->sample_mod : 1};
  if (in->enabled) {
    if (in->metrics.has) {
      for (size_t i = 0; i < in->metrics.n; i++)
        c.metrics |= ezi_trace_metric_bit(in->metrics.v[i]);
    } else {
      c.metrics = EZI_TM_PUBLISH_DELTA | EZI_TM_BACKPRESSURE_WAIT | EZI_TM_LEASE_TIME;
    }
    if (in->ttl_seconds.has && in->ttl_seconds.v >= 0)
      c.until_ns =
          ezi_now_ns() + (uint64_t)(in->ttl_seconds.v < 1e6 ? in->ttl_seconds.v * 1e9 : 1e15);
    if (copy_list(&c, 0, &in->publisher_topics) || copy_list(&c, 1, &in->subscriber_topics) ||
        copy_list(&c, 2, &in->publisher_endpoint_ids) ||
        copy_list(&c, 3, &in->subscriber_endpoint_ids))
      c.metrics = 0; /* out of memory: off */
  }
  ctl_clear(&tc->c);
  tc->c = c; /* a disable is a control with no metrics: it turns everything off */
  sweep(ctx);
  if (!c.metrics) ctl_clear(&tc->c);
}

ezi_trace *ezi_tracectl_poll(ez_context *ctx, ezi_trace **slot, const char *topic, const char *id) {
  ezi_trace *t = ezi_trace_get(slot, topic, id);
  if (!t) return NULL;
  struct ezi_tracectl *tc = state(ctx);
  if (!tc) return NULL;
  if (!tc->c.set) { /* (a 3.9 control decides alone while it holds) */
    if (!__atomic_load_n(&t->on, __ATOMIC_RELAXED))
      ezi_trace_set(t, EZI_TM_PUBLISH_DELTA | EZI_TM_BACKPRESSURE_WAIT | EZI_TM_LEASE_TIME, 1);
    t->until_ns = ezi_now_ns() + EZI_TRACE_POLL_TTL_NS;
  }
  if (!tc->timer)
    tc->timer = ezi_loop_timer(ctx->loop, ezi_now_ns() + HOUSEKEEPING_NS, housekeeping, ctx);
  return t;
}

bool ezi_tracectl_active(ez_context *ctx) { return ctx->tracectl && ctx->tracectl->timer; }

/* One endpoint's samples as 3.9's structs (kind -1: None). */
static size_t take_one(ezi_trace *t, ezi_m39_trace_sample *out, size_t max) {
  if (!t || !max) return 0;
  ezi_trace_sample buf[256];
  size_t k = 0;
  while (k < max) {
    size_t n = ezi_trace_take(t, buf, max - k < 256 ? max - k : 256, NULL);
    for (size_t i = 0; i < n; i++)
      out[k + i] =
          (ezi_m39_trace_sample){.timestamp = (double)buf[i].t_ns,
                                 .endpoint_id = t->eid,
                                 .topic = t->topic,
                                 .metric = ezi_trace_metric_name(buf[i].metric),
                                 .value = buf[i].value,
                                 .channel_kind = buf[i].kind < 0 ? EZI_M39_NONE : buf[i].kind,
                                 .sample_seq = {true, (int64_t)buf[i].seq}};
    k += n;
    if (n < 256) break;
  }
  return k;
}

size_t ezi_tracectl_take(ez_context *ctx, ezi_m39_trace_sample *out, size_t max) {
  size_t k = 0;
  pthread_mutex_lock(&ctx->mu);
  for (size_t i = 0; i < ctx->n_pubs && k < max; i++)
    k += take_one(__atomic_load_n(&ctx->pubs[i]->trace, __ATOMIC_ACQUIRE), out + k, max - k);
  for (size_t i = 0; i < ctx->n_subs && k < max; i++)
    k += take_one(__atomic_load_n(&ctx->subs[i]->trace, __ATOMIC_ACQUIRE), out + k, max - k);
  pthread_mutex_unlock(&ctx->mu);
  return k;
}

void ezi_tracectl_stop(ez_context *ctx) {
  struct ezi_tracectl *tc = ctx->tracectl;
  if (!tc) return;
  if (tc->timer) ezi_loop_cancel(ctx->loop, tc->timer);
  ctl_clear(&tc->c);
  free(tc);
  ctx->tracectl = NULL;
}
