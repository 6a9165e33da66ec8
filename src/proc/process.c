/* A process's membership of a graph, as the user opens and closes it: the context (core/), and
 * what the process adds over all its endpoints: in a released graph its process link
 * (procclient.c), the trace control whose poll the endpoints' PROFILE answers call (tracectl.c,
 * registered here as ctx->trace_poll), and the profile of all its endpoints that answers our
 * server's X_PROFILE_CTX (ctx->profile_all). */
#include "proc/procclient.h"
#include "proc/tracectl.h"
#include "core/context.h"
#include "chan/channel.h"
#include "pub/publisher.h"

/* One endpoint's profile as an X_PROFILE_PART frame, into b. */
static void put_part(ezi_buf *b, json_t *j) {
  char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  if (text && !ezi_buf_put_u8(b, EZI_X_PROFILE_PART)) ezi_buf_put_cstr(b, text);
  free(text);
}

/* ctx->profile_all (core/context.h): the registered publishers and channels, each as its own
 * PROFILE answer would be (I/O thread, where they are added and removed). */
static void profile_all(ez_context *ctx, uint64_t window_ms, ezi_outbox *ob) {
  double w = (double)window_ms / 1000.0;
  ezi_buf b = {0};
  for (size_t i = 0; i < ctx->n_pubs; i++) {
    if (ezi_pub_registered(ctx->pubs[i])) put_part(&b, ezi_pub_profile(ctx->pubs[i], w));
  }
  for (size_t i = 0; i < ctx->n_chans; i++) {
    chan *c = ctx->chans[i];
    /* (registered, and still a client of the server: what it would ask itself) */
    if (c->state != CH_REGISTERING && c->gw.fd >= 0) put_part(&b, ezi_chan_profile(c, w));
  }
  uint8_t end = EZI_X_PROFILE_END;
  if (ezi_buf_put(&b, &end, 1)) { /* out of memory: the end alone, so the server is not kept */
    ezi_buf_free(&b);
    ezi_outbox_put(ctx, ob, &end, 1);
    return;
  }
  ezi_outbox_put(ctx, ob, b.data, b.len);
  ezi_buf_free(&b);
}

/* On the I/O thread: the trace control's poll and the context's profile, then a released graph's
 * process link. */
static void proc_start(void *arg) {
  ez_context *ctx = arg;
  ctx->trace_poll = ezi_tracectl_poll;
  ctx->profile_all = profile_all;
  ezi_proc_start(ctx);
}

static void proc_stop(void *arg) {
  ez_context *ctx = arg;
  ezi_proc_stop(ctx);
  ezi_tracectl_stop(ctx);
  ctx->trace_poll = NULL;
  ctx->profile_all = NULL;
}

int ez_context_open(const char *address, ez_context **out) {
  if (!out) return EZ_EINVAL;
  ez_context *ctx;
  int rc = ezi_ctx_new(address, &ctx);
  if (rc) return rc;
  ezi_ctx_call(ctx, proc_start, ctx);
  *out = ctx;
  return 0;
}

void ez_context_close(ez_context *ctx) {
  if (!ctx) return;
  /* Subscribers first (they leave their channels), then publishers. */
  for (;;) {
    pthread_mutex_lock(&ctx->mu);
    ez_sub *s = ctx->n_subs ? ctx->subs[ctx->n_subs - 1] : NULL;
    pthread_mutex_unlock(&ctx->mu);
    if (!s) break;
    ez_sub_destroy(s);
  }
  for (;;) {
    pthread_mutex_lock(&ctx->mu);
    ez_pub *p = ctx->n_pubs ? ctx->pubs[ctx->n_pubs - 1] : NULL;
    pthread_mutex_unlock(&ctx->mu);
    if (!p) break;
    ez_pub_destroy(p);
  }
  ezi_ctx_call(ctx, proc_stop, ctx);
  ezi_ctx_free(ctx);
}

/* ---- the profile of this process's endpoints
 * ------------------------------------------------------------------------- */

typedef struct {
  ez_context *ctx;
  double window_s;
  json_t *doc;
} prof_call;

static void do_profile(void *arg) {
  prof_call *pc = arg;
  json_t *pubs = json_array(), *chans = json_array();
  for (size_t i = 0; i < pc->ctx->n_pubs; i++)
    json_array_append_new(pubs, ezi_pub_profile(pc->ctx->pubs[i], pc->window_s));
  for (size_t i = 0; i < pc->ctx->n_chans; i++)
    json_array_append_new(chans, ezi_chan_profile(pc->ctx->chans[i], pc->window_s));
  pc->doc = json_object();
  json_object_set_new(pc->doc, "window_s", json_real(pc->window_s));
  json_object_set_new(pc->doc, "publishers", pubs);
  json_object_set_new(pc->doc, "channels", chans);
}

int ez_context_profile(ez_context *ctx, double window_s, char **json) {
  if (!ctx || !json) return EZ_EINVAL;
  prof_call pc = {ctx, ezi_clamp_window(window_s), NULL};
  ezi_ctx_call(ctx, do_profile, &pc);
  *json = pc.doc ? json_dumps(pc.doc, JSON_COMPACT) : NULL;
  json_decref(pc.doc);
  return *json ? 0 : EZ_ENOMEM;
}
