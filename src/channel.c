/* Channels: one per (process, publisher), shared by that process's subscribers. A channel receives
 * each message once (in place from the publisher's segment when local or over shared memory, or
 * as TX_TCP bytes), notifies its subscribers, and acks the publisher when the last one releases
 * it. The I/O thread runs its links; user threads view and release messages. */
#include "channel.h"
#include "graphclient.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

const char *ezi_chan_pub_id(const chan *c) { return c->pub_id; }

bool ezi_chan_failed(const chan *c) { return c->state == CH_FAILED; }

bool ezi_chan_msg_owned(chan_sub *cs, uint64_t msg_id) {
  chan *c = cs->ch;
  pthread_mutex_lock(&c->mu);
  const slot *sl = c->slots && c->nbuf ? &c->slots[msg_id % c->nbuf] : NULL;
  bool owned = sl && sl->live && sl->msg_id == msg_id && sl->owned;
  pthread_mutex_unlock(&c->mu);
  return owned;
}

ez_sub *ezi_chan_sub_owner(const chan_sub *cs) { return cs->sub; }

bool ezi_chan_local(const chan_sub *cs) { return !cs->ch->remote; }

bool ezi_chan_sub_idle(chan_sub *cs) {
  pthread_mutex_lock(&cs->ch->mu);
  bool idle = cs->in_flight == 0;
  pthread_mutex_unlock(&cs->ch->mu);
  return idle;
}

/* ---- slots --------------------------------------------------------------------------------- */

static void slot_clear(slot *s) {
  free(s->owned);
  free(s->iov);
  ezi_seg_unref(s->seg);
  *s = (slot){0};
}

void ezi_chan_wake_subs(chan *c) {
  pthread_mutex_lock(&c->mu);
  for (size_t i = 0; i < c->n_subs; i++)
    ezi_sub_wake(c->subs[i]->sub);
  pthread_mutex_unlock(&c->mu);
}

void ezi_chan_ack(chan *c, uint64_t msg_id, uint64_t now) {
  pthread_mutex_lock(&c->mu);
  ez_pub *pub = c->local_pub;
  if (pub) c->pub_users++;
  pthread_mutex_unlock(&c->mu);
  if (pub) {
    ezi_pub_local_free(pub, msg_id, now);
    pthread_mutex_lock(&c->mu);
    if (--c->pub_users == 0) pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return;
  }
  if (!c->remote) return;      /* a local channel whose publisher is gone */
  uint8_t b[9] = {EZI_RX_ACK}; /* a closed link's outbox drops it */
  ezi_put_u64le(b + 1, msg_id);
  ezi_outbox_put(c->ctx, &c->acks, b, 9);
}

int ezi_chan_deliver(chan *c, uint64_t msg_id, const ezi_unmarshalled *um, uint8_t *owned,
                     ezi_seg *seg, uint64_t now) {
  slot *s = &c->slots[msg_id % c->nbuf];
  if (s->live) { /* the publisher broke backpressure: refuse, keep what subscribers hold */
    EZI_WARN("channel %s: publisher reused the slot of message %llu before it was released", c->id,
             (unsigned long long)s->msg_id);
    free(owned);
    return -1;
  }
  size_t holders = 0;
  for (size_t i = 0; i < c->n_subs; i++)
    holders += !c->subs[i]->gone;
  if (!holders) {
    free(owned);
    return 0;
  }
  s->msg_id = msg_id;
  s->live = true;
  s->um = *um;
  s->owned = owned;
  s->seg = seg;
  if (seg) ezi_seg_ref(seg);
  if (um->raw_pickle && (s->iov = calloc((size_t)um->nbuf, sizeof *s->iov))) {
    for (uint64_t i = 0; i < um->nbuf; i++) {
      const uint8_t *d;
      size_t n;
      ezi_unmarshal_buf(um, i, &d, &n);
      s->iov[i] = (ez_iov){d, n};
    }
  }
  for (size_t i = 0; i < c->n_subs; i++) {
    chan_sub *cs = c->subs[i];
    if (cs->gone) continue;
    if (!ezi_sub_push(cs->sub, cs, msg_id, c->remote)) continue; /* it does not hold it */
    cs->t0[msg_id % c->nbuf] = now;
    cs->in_flight++;
    s->refs++;
  }
  if (!s->refs) { /* nobody could take it after all */
    slot_clear(s);
    return 0;
  }
  return 1;
}

bool ezi_chan_put_local(chan *c, uint64_t msg_id, ezi_seg *seg, const uint8_t *data, size_t len,
                        uint64_t now) {
  ezi_unmarshalled um;
  if (ezi_unmarshal(data, len, &um)) return false;
  pthread_mutex_lock(&c->mu);
  c->mode = "local";
  bool took = ezi_chan_deliver(c, msg_id, &um, NULL, seg, now) > 0;
  pthread_mutex_unlock(&c->mu);
  return took;
}

int ezi_chan_view(chan_sub *cs, uint64_t msg_id, ez_msg *m) {
  chan *c = cs->ch;
  pthread_mutex_lock(&c->mu);
  slot *s = &c->slots[msg_id % c->nbuf];
  int rc = s->live && s->msg_id == msg_id ? 0 : EZ_ENOENT;
  if (!rc) {
    m->data = s->um.payload;
    m->len = s->um.payload_len;
    m->msg_id = msg_id;
    m->pub_id = c->pub_id;
    m->flags = s->um.raw_pickle ? EZ_MSG_RAW_PICKLE : 0;
    m->nbufs = s->iov ? (size_t)s->um.nbuf : 0;
    m->bufs = s->iov;
    m->ref_ = cs;
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

static void chan_destroy(chan *c);

static void destroy_task(void *arg) { chan_destroy(arg); }

/* Drops a reference held by a chan_sub; the last one destroys the channel on the I/O thread. */
static void chan_unref(chan *c) {
  pthread_mutex_lock(&c->mu);
  int left = --c->refs;
  pthread_mutex_unlock(&c->mu);
  if (left > 0) return;
  if (ezi_loop_on_thread(c->ctx->loop))
    chan_destroy(c);
  else
    ezi_loop_post(c->ctx->loop, destroy_task, c);
}

void ezi_chan_release(chan_sub *cs, uint64_t msg_id) {
  chan *c = cs->ch;
  uint32_t idx = (uint32_t)(msg_id % c->nbuf);
  uint64_t now = ezi_now_ns();
  bool do_ack = false, free_cs = false;
  pthread_mutex_lock(&c->mu);
  slot *s = &c->slots[idx];
  if (cs->t0[idx] && s->live && s->msg_id == msg_id) {
    ezi_window_add(&cs->proc, now, now - cs->t0[idx]);
    cs->t0[idx] = 0;
    cs->in_flight--;
    if (--s->refs == 0) {
      slot_clear(s);
      do_ack = true;
    }
  }
  free_cs = cs->gone && !cs->leaving && cs->in_flight == 0;
  pthread_mutex_unlock(&c->mu);
  if (do_ack) ezi_chan_ack(c, msg_id, now);
  if (free_cs) {
    free(cs->t0);
    free(cs);
    chan_unref(c);
  }
}

/* ---- graph link ---------------------------------------------------------------------------- */

json_t *ezi_chan_profile(chan *c, double window_s) {
  uint64_t now = ezi_now_ns();
  window_s = ezi_clamp_window(window_s);
  json_t *j = json_object(), *subs = json_array();
  uint64_t in_flight = 0;
  pthread_mutex_lock(&c->mu);
  for (size_t i = 0; i < c->n_subs; i++) {
    chan_sub *cs = c->subs[i];
    json_array_append_new(subs,
                          ezi_sub_tel_json(&cs->proc, ez_sub_id(cs->sub), ezi_sub_handle(cs->sub),
                                           cs->in_flight, now, window_s));
    in_flight += cs->in_flight;
  }
  const char *mode = c->mode;
  pthread_mutex_unlock(&c->mu);
  json_object_set_new(j, "type", json_string("channel"));
  json_object_set_new(j, "channel_id", json_string(c->id));
  json_object_set_new(j, "pub_id", json_string(c->pub_id));
  json_object_set_new(j, "pid", json_integer(c->ctx->pid));
  json_object_set_new(j, "num_buffers", json_integer(c->nbuf));
  json_object_set_new(j, "mode", json_string(mode));
  json_object_set_new(j, "window_s", json_real(window_s));
  json_object_set_new(j, "in_flight", json_integer((json_int_t)in_flight));
  json_object_set_new(j, "subscribers", subs);
  json_object_set_new(j, "host", json_string(c->ctx->host));
  return j;
}

static void graph_link_close(chan *c) {
  if (c->gw.fd < 0) return;
  ezi_loop_del(&c->gw);
  ezi_outbox_close(c->ctx, &c->gout);
  close(c->gw.fd);
  c->gw.fd = -1;
  ezi_buf_free(&c->gin);
}

static void on_register(chan *c, uint32_t ev);

static void on_graph(ezi_watch *w, uint32_t ev) {
  chan *c = w->arg;
  if (c->state == CH_REGISTERING) return on_register(c, ev);
  if (ev & EPOLLOUT) ezi_outbox_flush(&c->gout);
  if (!(ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))) return;
  long n;
  while ((n = ezi_buf_fill(&c->gin, w->fd, 4096)) > 0) {
    while (ezi_buf_pending(&c->gin) >= 9 && ezi_buf_head(&c->gin)[0] == EZI_PROFILE) {
      uint64_t ms = ezi_get_u64le(ezi_buf_head(&c->gin) + 1);
      ezi_buf_consume(&c->gin, 9);
      json_t *j = ezi_chan_profile(c, (double)ms / 1000.0);
      char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
      json_decref(j);
      ezi_buf b = {0};
      ezi_buf_put_u8(&b, EZI_PROFILE_DATA);
      ezi_buf_put_cstr(&b, text ? text : "{}");
      free(text);
      if (b.data) ezi_outbox_put(c->ctx, &c->gout, b.data, b.len);
      ezi_buf_free(&b);
    }
    if (ezi_buf_pending(&c->gin) && ezi_buf_head(&c->gin)[0] != EZI_PROFILE) {
      EZI_WARN("channel %s: unknown command %u from the graph server", c->id,
               ezi_buf_head(&c->gin)[0]);
      ezi_buf_consume(&c->gin, 1);
    }
  }
  if (n < 0) graph_link_close(c);
}

/* ---- creation and destruction (I/O thread) ------------------------------------------------- */

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
    bool ok = b.data && ezi_outbox_put(c->ctx, &c->gout, b.data, b.len);
    ezi_buf_free(&b);
    if (!ok) return reg_fail(c, EZ_ENOMEM);
    return;
  }
  if ((ev & EPOLLOUT) && ezi_outbox_flush(&c->gout)) return reg_fail(c, EZ_ECONNLOST);
  if (!(ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))) return;
  long n;
  while ((n = ezi_buf_fill(&c->gin, c->gw.fd, 1024)) > 0) {
    ezi_rd r;
    ezi_rd_init(&r, ezi_buf_head(&c->gin), ezi_buf_pending(&c->gin), 300);
    const char *ver = NULL, *id = NULL, *addr = NULL;
    size_t nver = 0, nid = 0, naddr = 0;
    uint8_t cmd = 0xff;
    if (ezi_rd_str(&r, &ver, &nver) && ezi_rd_u8(&r, &cmd) && cmd == EZI_COMPLETE &&
        ezi_rd_str(&r, &id, &nid))
      ezi_rd_str(&r, &addr, &naddr);
    int st = ezi_rd_status(&r);
    if (st < 0 || (ver && cmd != 0xff && cmd != EZI_COMPLETE) || (id && !ezi_is_uuid(id, nid)))
      return reg_fail(c, EZ_EPROTO);
    if (st == 0) continue; /* more to come */
    if (nver != strlen(EZ_VERSION) || memcmp(ver, EZ_VERSION, nver))
      EZI_WARN("version mismatch: graph server %.*s, client %s", (int)nver, ver, EZ_VERSION);
    char a[301];
    memcpy(c->id, id, 36);
    c->id[36] = 0;
    memcpy(a, addr, naddr);
    a[naddr] = 0;
    ezi_buf_consume(&c->gin, r.pos);
    return registered(c, a);
  }
  if (n < 0) { /* hung up: before its greeting (client limit), or on an unknown publisher */
    ezi_rd r;
    ezi_rd_init(&r, ezi_buf_head(&c->gin), ezi_buf_pending(&c->gin), 300);
    const char *ver = NULL;
    size_t nver = 0;
    reg_fail(c, ezi_rd_str(&r, &ver, &nver) ? EZ_ENOENT : EZ_EREFUSED);
  }
}

/* The server answered: attach to the publisher in this process (ready now) or start the
 * handshake with the remote one. */
static void registered(chan *c, const char *addr) {
  if (c->hs_timer) ezi_loop_cancel(c->ctx->loop, c->hs_timer);
  c->hs_timer = 0;
  ez_pub *local = ezi_ctx_find_pub(c->ctx, c->pub_id);
  if (local) {
    c->nbuf = ezi_pub_num_buffers(local);
    if (ezi_chan_link_done(c, 0) == 0) { /* slots exist now: the publisher may deliver */
      pthread_mutex_lock(&c->mu);
      c->local_pub = local;
      c->mode = "local";
      pthread_mutex_unlock(&c->mu);
      ezi_pub_set_local(local, c);
    }
    return;
  }
  c->state = CH_CONNECTING;
  c->remote = true;
  int rc = ezi_chan_link_start(c, addr);
  if (rc) ezi_chan_link_done(c, rc);
}

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
  char addr[300], host[256];
  uint16_t port;
  ezi_addr_resolve(ctx->address, addr);
  if (ezi_addr_parse(addr, host, &port)) return EZ_EADDR;
  bool connected = false;
  int fd = ezi_tcp_connect_start(host, port, &connected);
  if (fd < 0) return fd;
  chan *c = calloc(1, sizeof *c);
  if (!c) {
    close(fd);
    return EZ_ENOMEM;
  }
  c->ctx = ctx;
  snprintf(c->pub_id, sizeof c->pub_id, "%s", pub_id);
  c->mode = "unknown";
  c->pw.fd = -1;
  c->state = CH_REGISTERING;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  c->gw = (ezi_watch){.fd = fd, .fn = on_graph, .arg = c};
  ezi_outbox_init(&c->gout, &c->gw, EPOLLIN | EPOLLRDHUP);
  if (ezi_loop_add(ctx->loop, &c->gw, EPOLLOUT | EPOLLIN | EPOLLRDHUP)) {
    close(fd);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
    return EZ_ESYS;
  }
  chan_register(ctx, c);
  c->hs_timer = ezi_loop_timer(ctx->loop, ezi_now_ns() + (uint64_t)EZ_DEFAULT_TIMEOUT_MS * 1000000u,
                               reg_timeout, c);
  *out = c;
  return 0;
}

int ezi_chan_link_done(chan *c, int rc) {
  pthread_mutex_lock(&c->mu);
  size_t n = c->n_subs;
  chan_sub **waiting = malloc((n ? n : 1) * sizeof *waiting);
  if (!rc && (!waiting || !(c->slots = calloc(c->nbuf, sizeof *c->slots)))) rc = EZ_ENOMEM;
  for (size_t i = 0; i < n && !rc; i++)
    if (!(c->subs[i]->t0 = calloc(c->nbuf, sizeof(uint64_t)))) rc = EZ_ENOMEM;
  c->state = rc ? CH_FAILED : CH_READY;
  if (waiting) memcpy(waiting, c->subs, n * sizeof *waiting);
  c->refs++; /* ours while the subscribers hear of it: they may leave, and UPDATEs follow */
  pthread_mutex_unlock(&c->mu);
  if (rc) ezi_chan_link_close(c);
  /* Tell each waiting subscriber; on failure they leave. */
  for (size_t i = 0; waiting && i < n; i++)
    ezi_sub_join_done(waiting[i]->sub, waiting[i], rc);
  free(waiting);
  pthread_mutex_lock(&c->mu);
  int left = --c->refs;
  pthread_mutex_unlock(&c->mu);
  if (left == 0) { /* every subscriber left meanwhile */
    chan_destroy(c);
    return rc ? rc : EZ_ECLOSED;
  }
  return rc;
}

void ezi_chan_link_lost(chan *c) {
  pthread_mutex_lock(&c->mu);
  if (c->state != CH_READY) {
    pthread_mutex_unlock(&c->mu);
    return;
  }
  c->state = CH_FAILED; /* no new subscriber joins it; a new channel is made for them */
  size_t n = c->n_subs;
  chan_sub **subs = n ? malloc(n * sizeof *subs) : NULL;
  if (subs) memcpy(subs, c->subs, n * sizeof *subs);
  pthread_mutex_unlock(&c->mu);
  if (n && !subs) {
    EZI_ERROR("channel %s: out of memory; its subscribers stay on the dead link", c->id);
    return;
  }
  /* Each leaves (the last one frees the channel) and joins the publisher again later. */
  for (size_t i = 0; i < n; i++)
    ezi_sub_chan_lost(subs[i]->sub, subs[i]);
  free(subs);
}

void ezi_chan_pub_gone(chan *c) {
  pthread_mutex_lock(&c->mu);
  c->local_pub = NULL;
  while (c->pub_users)
    pthread_cond_wait(&c->cv, &c->mu); /* acks in progress finish first */
  pthread_mutex_unlock(&c->mu);
}

static void chan_destroy(chan *c) {
  ez_context *ctx = c->ctx;
  pthread_mutex_lock(&ctx->mu);
  for (size_t i = 0; i < ctx->n_chans; i++) {
    if (ctx->chans[i] == c) {
      ctx->chans[i] = ctx->chans[--ctx->n_chans];
      break;
    }
  }
  pthread_mutex_unlock(&ctx->mu);
  pthread_mutex_lock(&c->mu);
  ez_pub *pub = c->local_pub;
  pthread_mutex_unlock(&c->mu);
  if (pub) {
    ezi_pub_set_local(pub, NULL);
    ezi_chan_pub_gone(c);
  }
  ezi_chan_link_close(c);
  graph_link_close(c);
  for (uint32_t i = 0; c->slots && i < c->nbuf; i++)
    slot_clear(&c->slots[i]);
  ezi_seg_unref(c->seg);
  free(c->slots);
  free(c->subs);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
}

int ezi_chan_join(ez_context *ctx, const char *pub_id, ez_sub *sub, chan_sub **out, bool *pending) {
  pthread_mutex_lock(&ctx->mu);
  chan *c = ezi_ctx_find_chan(ctx, pub_id); /* a live one: failed channels are skipped */
  pthread_mutex_unlock(&ctx->mu);
  bool fresh = false;
  if (!c) {
    int rc = chan_create(ctx, pub_id, &c);
    if (rc) return rc;
    fresh = true;
  }
  chan_sub *cs = calloc(1, sizeof *cs);
  if (cs && c->state == CH_READY) cs->t0 = calloc(c->nbuf, sizeof *cs->t0);
  chan_sub **v =
      cs && (cs->t0 || c->state != CH_READY) ? realloc(c->subs, (c->n_subs + 1) * sizeof *v) : NULL;
  if (!v) {
    if (cs) free(cs->t0);
    free(cs);
    if (fresh) chan_destroy(c);
    return EZ_ENOMEM;
  }
  cs->ch = c;
  cs->sub = sub;
  ezi_window_init(&cs->proc);
  pthread_mutex_lock(&c->mu);
  c->subs = v;
  c->subs[c->n_subs++] = cs;
  c->refs++;
  *pending = c->state == CH_REGISTERING || c->state == CH_CONNECTING;
  pthread_mutex_unlock(&c->mu);
  *out = cs;
  return 0;
}

void ezi_chan_leave(chan_sub *cs, bool release_viewed) {
  chan *c = cs->ch;
  pthread_mutex_lock(&c->mu);
  for (size_t i = 0; i < c->n_subs; i++) {
    if (c->subs[i] == cs) {
      c->subs[i] = c->subs[--c->n_subs];
      break;
    }
  }
  cs->gone = true;
  cs->leaving = true;
  pthread_mutex_unlock(&c->mu);
  /* What it had queued is released now; what it is viewing, when the user releases it. */
  ezi_sub_purge(cs->sub, cs, ezi_chan_release);
  if (release_viewed) { /* the subscriber is being destroyed: its views end now */
    for (uint32_t i = 0; cs->t0 && i < c->nbuf; i++) {
      pthread_mutex_lock(&c->mu);
      uint64_t id = c->slots[i].msg_id;
      bool held = cs->t0[i] != 0;
      pthread_mutex_unlock(&c->mu);
      if (held) ezi_chan_release(cs, id);
    }
  }
  pthread_mutex_lock(&c->mu);
  cs->leaving = false;
  bool free_now = cs->in_flight == 0;
  pthread_mutex_unlock(&c->mu);
  if (free_now) {
    free(cs->t0);
    free(cs);
    chan_unref(c);
  }
}
