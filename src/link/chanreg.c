/* How a channel comes to be: created when a subscriber of this process joins a publisher it has
 * no channel for (ezi_chan_join), then registered at the graph server (CHANNEL, answered with the
 * channel id and the publisher's address), which then fans out PROFILE requests to it; its link
 * to the publisher starts once registered (chanlink.c), or it attaches to the publisher in this
 * process. Everything
 * here runs on the I/O thread and never blocks it: a slow or stopped graph server must not stall
 * this process's other links (test_faults: test_rejoin_with_server_stopped). */
#include "proto/ctxprofile.h"
#include "chan/channel.h"
#include "link/chanreg.h"
#include "link/chanlink.h"
#include "chan/notices.h"
#include "proto/regframe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

void ezi_chan_graph_close(chan *c) {
  if (c->gw.fd < 0) return;
  ezi_loop_del(&c->gw);
  ezi_outbox_close(c->ctx, &c->gout);
  close(c->gw.fd);
  c->gw.fd = -1;
  ezi_buf_free(&c->gin);
}

static void on_register(chan *c, uint32_t ev);

/* A trace poll: the channel's subscribers are traced a while more, and what they recorded goes
 * with the channel's answer, as "trace": {"samples": [...], "dropped": n}. */
static void trace_members(chan *c, json_t *j) {
  json_t *all = NULL;
  uint64_t dropped = 0;
  pthread_mutex_lock(&c->mu);
  size_t n = c->n_subs;
  chan_sub **subs = malloc((n ? n : 1) * sizeof *subs);
  for (size_t i = 0; subs && i < n; i++)
    subs[i] = c->subs[i]->gone ? NULL : c->subs[i];
  pthread_mutex_unlock(&c->mu);
  for (size_t i = 0; subs && i < n; i++) { /* (the I/O thread: none is destroyed meanwhile) */
    if (!subs[i]) continue;
    const char *topic, *id;
    ezi_trace **slot = subs[i]->ops->trace_of(subs[i]->sub, &topic, &id);
    ezi_trace *t = ezi_ctx_trace_poll(c->ctx, slot, topic, id);
    json_t *o = ezi_trace_json(t);
    if (!o) continue;
    if (!all) all = json_array();
    json_array_extend(all, json_object_get(o, "samples"));
    dropped += (uint64_t)json_integer_value(json_object_get(o, "dropped"));
    json_decref(o);
  }
  free(subs);
  json_object_set_new(
      j, "trace",
      json_pack("{sosI}", "samples", all ? all : json_array(), "dropped", (json_int_t)dropped));
}

static void on_graph(ezi_watch *w, uint32_t ev) {
  chan *c = w->arg;
  if (c->state == CH_REGISTERING) return on_register(c, ev);
  if (ev & EPOLLOUT) ezi_outbox_flush(&c->gout);
  if (!(ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))) return;
  long n;
  while ((n = ezi_buf_fill(&c->gin, w->fd, 4096)) > 0) {
    uint8_t cmd;
    while (ezi_buf_pending(&c->gin) >= 9 &&
           ((cmd = ezi_buf_head(&c->gin)[0]) == EZI_PROFILE || cmd == EZI_X_PROFILE_CTX)) {
      uint64_t ms = ezi_get_u64le(ezi_buf_head(&c->gin) + 1);
      ezi_buf_consume(&c->gin, 9);
      if (cmd == EZI_X_PROFILE_CTX) { /* the whole context's (proto/ctxprofile.h) */
        ezi_ctx_profile_all(c->ctx, ms, &c->gout);
        continue;
      }
      bool poll = ms >= EZI_TRACE_POLL_MS; /* `ezmsg profile --trace` (base/trace.h) */
      json_t *j = ezi_chan_profile(c, (double)(poll ? ms - EZI_TRACE_POLL_MS : ms) / 1000.0);
      if (poll) trace_members(c, j);
      ezi_outbox_put_profile(c->ctx, &c->gout, j);
    }
    if (ezi_buf_pending(&c->gin) && (cmd = ezi_buf_head(&c->gin)[0]) != EZI_PROFILE &&
        cmd != EZI_X_PROFILE_CTX) {
      EZI_WARN("channel %s: unknown command %u from the graph server", c->id,
               ezi_buf_head(&c->gin)[0]);
      ezi_buf_consume(&c->gin, 1);
    }
  }
  if (n < 0) ezi_chan_graph_close(c);
}

/* Registration at the graph server runs on the I/O thread without blocking it (a slow or stopped
 * server must not stall this process's other links): connect, send CHANNEL + pub_id, read the
 * server's version, COMPLETE, the channel id and the publisher's address, each as it arrives.
 * The connection then stays open as the channel's graph link (PROFILE). */
static void registered(chan *c, const char *addr);

static void reg_fail(chan *c, int rc) {
  if (c->hs_timer) ezi_loop_cancel(c->ctx->loop, c->hs_timer);
  c->hs_timer = 0;
  if (rc != EZ_ENOENT)
    EZI_WARN("channel for publisher %s: registration at the graph server failed: %s", c->pub_id,
             ez_strerror(rc));
  ezi_chan_link_done(c, rc); /* its subscribers leave (and try again); it may be gone */
}

static void reg_timeout(void *arg) {
  chan *c = arg;
  c->hs_timer = 0;
  reg_fail(c, EZ_ETIMEDOUT);
}

static void on_register(chan *c, uint32_t ev) {
  if (!c->reg_sent) {
    if (!(ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(c->gw.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err)
      return reg_fail(c, EZ_ENOSERVER);
    c->reg_sent = true;
    ezi_loop_mod(&c->gw, EPOLLIN | EPOLLRDHUP);
    ezi_buf b = {0};
    ezi_buf_put_u8(&b, EZI_CHANNEL);
    ezi_buf_put_cstr(&b, c->pub_id);
    ezi_buf_put_u8(&b, EZI_X_CLIENT); /* "an ezmsg-c channel" (wire.h) */
    ezi_xctx_encode(&b, c->ctx->id);  /* and its context (proto/ctxprofile.h) */
    bool ok = b.data && ezi_outbox_put(c->ctx, &c->gout, b.data, b.len);
    ezi_buf_free(&b);
    if (!ok) return reg_fail(c, EZ_ENOMEM);
    return;
  }
  if ((ev & EPOLLOUT) && ezi_outbox_flush(&c->gout)) return reg_fail(c, EZ_ECONNLOST);
  if (!(ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))) return;
  long n;
  while ((n = ezi_buf_fill(&c->gin, c->gw.fd, 1024)) > 0) {
    ezi_reg_answer a;
    int st = ezi_reg_parse(ezi_buf_head(&c->gin), ezi_buf_pending(&c->gin), &a);
    if (st < 0) return reg_fail(c, st);
    if (st == 0) continue; /* more to come */
    char addr[EZI_REG_MAX_STR + 1];
    memcpy(c->id, a.id, 36);
    c->id[36] = 0;
    memcpy(addr, a.addr, a.addr_len);
    addr[a.addr_len] = 0;
    ezi_buf_consume(&c->gin, a.used);
    return registered(c, addr);
  }
  if (n < 0) /* hung up before the whole answer */
    reg_fail(c, ezi_reg_hangup(ezi_buf_head(&c->gin), ezi_buf_pending(&c->gin)));
}

/* The server answered: attach to the publisher in this process (ready now) or start the
 * handshake with the remote one. */
static void registered(chan *c, const char *addr) {
  if (c->hs_timer) ezi_loop_cancel(c->ctx->loop, c->hs_timer);
  c->hs_timer = 0;
  const ezi_local_pubs_ops *lp = c->ctx->local_pubs;
  uint32_t nbuf = 0;
  ez_pub *local = lp ? lp->find(c->ctx, c->pub_id, &nbuf) : NULL;
  if (local) {
    c->nbuf = nbuf;
    pthread_mutex_lock(&c->mu);
    c->local_pub = local;
    c->mode = "local";
    pthread_mutex_unlock(&c->mu);
    ezi_chan_link_done(c, 0); /* attaches it to the publisher */
    return;
  }
  c->state = CH_CONNECTING;
  c->remote = true;
  size_t alen = strlen(addr);
  if (alen < sizeof c->pub_addr) memcpy(c->pub_addr, addr, alen + 1);
  int rc = ezi_chan_link_start(c, addr);
  if (rc) ezi_chan_link_done(c, rc);
}

int ezi_chan_reg_start(chan *c) {
  char host[256];
  uint16_t port;
  if (ezi_addr_parse(c->ctx->server_addr, host, &port)) return EZ_EADDR;
  bool connected = false;
  int fd = ezi_tcp_connect_start(host, port, &connected);
  if (fd < 0) return fd;
  c->gw = (ezi_watch){.fd = fd, .fn = on_graph, .arg = c};
  ezi_outbox_init(&c->gout, &c->gw, EPOLLIN | EPOLLRDHUP);
  if (ezi_loop_add(c->ctx->loop, &c->gw, EPOLLOUT | EPOLLIN | EPOLLRDHUP)) {
    close(fd);
    c->gw.fd = -1;
    return EZ_ESYS;
  }
  c->hs_timer = ezi_loop_timer(
      c->ctx->loop, ezi_now_ns() + (uint64_t)EZ_DEFAULT_TIMEOUT_MS * 1000000u, reg_timeout, c);
  return 0;
}

chan *ezi_chan_find(ez_context *ctx, const char *pub_id) {
  for (size_t i = 0; i < ctx->n_chans; i++)
    if (ctx->chans[i]->state != CH_FAILED && !strcmp(ctx->chans[i]->pub_id, pub_id))
      return ctx->chans[i];
  return NULL;
}

/* ---- creation (I/O thread) ---------------------------------------------------------------- */

static void chan_register(ez_context *ctx, chan *c) {
  pthread_mutex_lock(&ctx->mu);
  chan **v = realloc(ctx->chans, (ctx->n_chans + 1) * sizeof *v);
  if (v) {
    ctx->chans = v;
    ctx->chans[ctx->n_chans++] = c;
  }
  pthread_mutex_unlock(&ctx->mu);
}

/* Starts registering a channel for pub_id at the graph server; it becomes ready (or fails) later,
 * through ezi_chan_link_done. Fails at once only if the server cannot be reached at all. */
static int chan_create(ez_context *ctx, const char *pub_id, chan **out) {
  chan *c = calloc(1, sizeof *c);
  if (!c) return EZ_ENOMEM;
  c->ctx = ctx;
  snprintf(c->pub_id, sizeof c->pub_id, "%s", pub_id);
  c->mode = "unknown";
  c->pw.fd = c->gw.fd = -1;
  c->state = CH_REGISTERING;
  c->rx = &ezi_rx_notices; /* until a local publisher attaches, or a remote one grants a mode */
  c->close_link = ezi_chan_link_close;
  c->close_graph = ezi_chan_graph_close;
  ezi_mutex_init(&c->mu);
  ezi_mutex_init(&c->pull_mu);
  pthread_cond_init(&c->cv, NULL);
  int rc = ezi_chan_reg_start(c);
  if (rc) {
    pthread_mutex_destroy(&c->pull_mu);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
    return rc;
  }
  chan_register(ctx, c);
  *out = c;
  return 0;
}

int ezi_chan_join(ez_context *ctx, const char *pub_id, ez_sub *sub, ezi_lrecv *rv,
                  const ezi_member_ops *ops, chan_sub **out, bool *pending) {
  pthread_mutex_lock(&ctx->mu);
  chan *c = ezi_chan_find(ctx, pub_id); /* a live one: failed channels are skipped */
  pthread_mutex_unlock(&ctx->mu);
  bool fresh = false;
  if (!c) {
    int rc = chan_create(ctx, pub_id, &c);
    if (rc) return rc;
    fresh = true;
  }
  chan_sub *cs = calloc(1, sizeof *cs);
  if (cs) cs->proc = ezi_window_new();
  if (cs && c->state == CH_READY) cs->t0 = calloc(c->lr.ls ? c->lr.lsn : c->nslot, sizeof *cs->t0);
  chan_sub **v = cs && cs->proc && (cs->t0 || c->state != CH_READY)
                     ? realloc(c->subs, (c->n_subs + 1) * sizeof *v)
                     : NULL;
  if (!v) {
    ezi_chan_sub_free(cs);
    if (fresh) ezi_chan_destroy(c);
    return EZ_ENOMEM;
  }
  cs->ch = c;
  cs->sub = sub;
  cs->ops = ops;
  cs->rv = rv;
  cs->done = ezi_chan_sub_done;
  pthread_mutex_lock(&c->mu);
  c->subs = v;
  c->subs[c->n_subs++] = cs;
  c->refs++;
  *pending = c->state == CH_REGISTERING || c->state == CH_CONNECTING;
  const ezi_rx_mode *rx = c->rx;
  pthread_mutex_unlock(&c->mu);
  if (rx->join && rx->join(c, cs)) {
    ezi_chan_leave(cs, false);
    return EZ_ENOMEM;
  }
  *out = cs;
  return 0;
}
