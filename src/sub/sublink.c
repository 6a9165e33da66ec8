/* A subscriber's graph link: the UPDATEs that list its upstream publishers, joining and leaving
 * their channels, and answering each UPDATE once its joins are done.
 *
 * Links are supervised: a publisher listed by the graph server that cannot be reached, or whose
 * connection is cut, is joined again after a backoff (50 ms doubling to 2 s) for as long as it
 * stays listed, so a transient failure never leaves a subscriber deaf to a live publisher.
 * After a cut, before asking the graph server for a new channel, the subscriber knocks at the
 * address the publisher served it on: while nothing listens there, the publisher is not asked
 * for, and after ~3 s of that it is taken as gone (a released-dialect server does not tell
 * subscribers that a publisher left, and logs a warning for each channel requested of one it
 * dropped).
 * Everything here runs on the I/O thread. */
#include "sub/subscriber.h"
#include "sub/sublink.h"
#include "chan/channel.h"
#include "chan/notices.h"
#include "link/chanreg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define RETRY_FIRST_MS 50
#define RETRY_MAX_MS 2000
/* Refused knocks after a cut (50 ms doubling: ~3 s) before a publisher is taken as gone. */
#define KNOCKS_MAX 6

static bool listed(const char *ids, size_t n, const char *id) {
  for (size_t i = 0; i + 36 <= n; i += 37)
    if (!memcmp(ids + i, id, 36)) return true;
  return false;
}

static pub_link *find_link(ez_sub *s, chan_sub *cs) {
  for (size_t i = 0; i < s->n_links; i++)
    if (s->links[i].cs == cs) return &s->links[i];
  return NULL;
}

static void retry_fire(void *arg);

/* Leaves the cut channels of l: all of them, or (only_idle) those whose messages were all
 * released. release_viewed as ezi_chan_leave. */
static void drop_dead(pub_link *l, bool release_viewed, bool only_idle) {
  for (size_t i = 0; i < l->n_dead;) {
    if (only_idle && !ezi_chan_sub_idle(l->dead[i])) {
      i++;
      continue;
    }
    chan_sub *cs = l->dead[i];
    l->dead[i] = l->dead[--l->n_dead];
    ezi_chan_leave(cs, release_viewed);
  }
  if (!l->n_dead) {
    free(l->dead);
    l->dead = NULL;
  }
}

/* Removes links[i] (its channels already left or to be left by the caller). */
static void remove_link_at(ez_sub *s, size_t i, bool release_viewed) {
  pub_link *l = &s->links[i];
  if (l->cs) ezi_chan_leave(l->cs, release_viewed);
  drop_dead(l, release_viewed, false);
  s->links[i] = s->links[--s->n_links];
}

/* Arms the retry timer for the earliest scheduled link (I/O thread). */
static void arm_retry(ez_sub *s) {
  uint64_t at = 0;
  for (size_t i = 0; i < s->n_links; i++)
    if (!s->links[i].cs && s->links[i].retry_at && (!at || s->links[i].retry_at < at))
      at = s->links[i].retry_at;
  if (s->retry_timer) ezi_loop_cancel(s->ctx->loop, s->retry_timer);
  s->retry_timer = at ? ezi_loop_timer(s->ctx->loop, at, retry_fire, s) : 0;
}

/* The backoff before the n-th retry in a row (n >= 1): 50 ms doubling to 2 s. */
static uint64_t backoff_ms(unsigned n) {
  uint64_t ms = (uint64_t)RETRY_FIRST_MS << (n - 1 < 6 ? n - 1 : 6);
  return ms < RETRY_MAX_MS ? ms : RETRY_MAX_MS;
}

/* A join of l's publisher failed (rc), or (cut) its channel's link was cut: schedule another. */
static void link_failed(ez_sub *s, pub_link *l, int rc, bool cut) {
  l->cs = NULL;
  l->retry_join = false;
  l->failures++;
  if (s->gw.fd < 0) { /* the graph server is gone: so is the subscriber (recv says so) */
    l->retry_at = 0;
    return;
  }
  if (rc == EZ_ENOENT) { /* the graph server no longer knows it: wait for an UPDATE */
    l->retry_at = 0;
    EZI_INFO("subscriber %s: publisher %s is gone", s->topic, l->pub_id);
    return;
  }
  uint64_t ms = backoff_ms(l->failures);
  l->retry_at = ezi_now_ns() + ms * 1000000u;
  /* A publisher that exits closes its links: that first cut is routine (the join that follows
   * finds it gone), so it is only noted. A second failure in a row, or any other first one, is
   * worth a warning; then every 30th. */
  bool routine = l->failures == 1 && cut;
  if (routine)
    EZI_INFO("subscriber %s: publisher %s closed its link; joining again in %u ms", s->topic,
             l->pub_id, (unsigned)ms);
  else if (l->failures <= 2 || l->failures % 30 == 0)
    EZI_WARN("subscriber %s: publisher %s: %s (%u failure%s in a row); joining again in %u ms",
             s->topic, l->pub_id, ez_strerror(rc), l->failures, l->failures == 1 ? "" : "s",
             (unsigned)ms);
  arm_retry(s);
}

/* What a channel calls in its members' subscribers (chan/channel.h). */
static const ezi_member_ops member_ops = {
    .joined = ezi_sub_join_done,
    .lost = ezi_sub_chan_lost,
    .push = ezi_sub_push,
    .wake = ezi_sub_wake,
    .purge = ezi_sub_purge,
    .take_if = ezi_sub_take_if,
    .profile = ezi_sub_member_json,
    .trace_of = ezi_sub_trace_of,
};

/* Joins l's publisher; with pending, the join finishes in ezi_sub_join_done. */
static int link_join(ez_sub *s, pub_link *l, bool *pending) {
  chan_sub *cs = NULL;
  *pending = false;
  int rc = ezi_chan_join(s->ctx, l->pub_id, s, &s->lr, &member_ops, &cs, pending);
  if (rc) return rc;
  l->cs = cs;
  l->retry_at = 0;
  if (!*pending) l->failures = 0;
  drop_dead(l, false, true);
  return 0;
}

/* After a cut: knocks at the publisher's address; true if the join is not to be asked for now.
 * Accepted, or not settled within the call (a remote address): false, the join goes ahead. Refused
 * (nothing listens there any more): knocked again on the retry's backoff, and after KNOCKS_MAX
 * refusals in a row (~3 s: a local forwarder that restarts is not taken for an exit) the publisher
 * is gone, joined again only if an UPDATE lists it again (a released-dialect server sends none
 * when a publisher exits; ours does, before the first knock is due). */
static bool knock_refused(ez_sub *s, pub_link *l) {
  char host[256];
  uint16_t port;
  int r = ezi_addr_parse(l->knock, host, &port) ? -1 : ezi_tcp_knock(host, port);
  drop_dead(l, false, true); /* the cut's memberships the user released meanwhile */
  if (r != 0) {
    l->knock[0] = 0;
    return false;
  }
  if (++l->knocks < KNOCKS_MAX) { /* (the cut's own retry came after the first backoff) */
    l->retry_at = ezi_now_ns() + backoff_ms(l->knocks + 1) * 1000000u;
    return true;
  }
  EZI_INFO("subscriber %s: publisher %s is gone (nothing listens at %s any more)", s->topic,
           l->pub_id, l->knock);
  l->retry_at = 0;
  l->knock[0] = 0;
  return true;
}

static void retry_fire(void *arg) {
  ez_sub *s = arg;
  s->retry_timer = 0;
  uint64_t now = ezi_now_ns();
  for (size_t i = 0; i < s->n_links; i++) {
    pub_link *l = &s->links[i];
    if (l->cs || !l->retry_at || l->retry_at > now) continue;
    if (l->knock[0] && knock_refused(s, l)) continue;
    bool pending;
    int rc = link_join(s, l, &pending);
    if (rc)
      link_failed(s, l, rc, false);
    else
      l->retry_join = pending;
  }
  arm_retry(s);
}

/* UPDATE: join channels of new publishers, leave those no longer listed. Joins that must shake
 * hands with a remote publisher finish later (ezi_sub_join_done); the UPDATE is answered when the
 * last one has. */
static void apply_update(ez_sub *s, const char *ids, size_t n) {
  for (size_t i = 0; i < s->n_links;) {
    pub_link *l = &s->links[i];
    if (listed(ids, n, l->pub_id)) {
      if (!l->cs && !l->retry_at) l->retry_at = ezi_now_ns(); /* listed again: try again now */
      i++;
      continue;
    }
    remove_link_at(s, i, false);
  }
  for (size_t i = 0; i + 36 <= n; i += 37) {
    if (!ezi_is_uuid(ids + i, 36) || (i + 36 < n && ids[i + 36] != ',')) {
      EZI_WARN("subscriber %s: malformed UPDATE", s->topic);
      break;
    }
    char id[37];
    memcpy(id, ids + i, 36);
    id[36] = 0;
    bool have = false;
    for (size_t k = 0; k < s->n_links && !have; k++)
      have = !strcmp(s->links[k].pub_id, id);
    if (have) continue;
    pub_link *v = realloc(s->links, (s->n_links + 1) * sizeof *v);
    if (!v) continue;
    s->links = v;
    pub_link *l = &s->links[s->n_links++];
    *l = (pub_link){0};
    memcpy(l->pub_id, id, 37);
    bool pending;
    int rc = link_join(s, l, &pending);
    if (rc)
      link_failed(s, l, rc, false);
    else
      s->joins_pending += pending;
  }
  arm_retry(s);
}

static void graph_close(ez_sub *s) {
  if (s->gw.fd < 0) return;
  ezi_loop_del(&s->gw);
  ezi_outbox_close(s->ctx, &s->gout);
  close(s->gw.fd);
  s->gw.fd = -1;
  ezi_buf_free(&s->gin);
}

static void lost(ez_sub *s) {
  graph_close(s);
  pthread_mutex_lock(&s->mu);
  s->lost = true;
  ezi_sub_signal_ready(s);
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

static void answer_update(ez_sub *s) {
  uint8_t c = EZI_COMPLETE;
  ezi_outbox_put(s->ctx, &s->gout, &c, 1);
}

/* Handles buffered graph messages, one UPDATE at a time. Returns false on a protocol error. */
static bool process(ez_sub *s) {
  while (!s->joins_pending) {
    ezi_rd r;
    ezi_rd_init(&r, ezi_buf_head(&s->gin), ezi_buf_pending(&s->gin), EZ_MAX_CONTROL_STR);
    uint8_t cmd;
    const char *ids = NULL;
    size_t nid = 0;
    if (ezi_rd_u8(&r, &cmd) && cmd == EZI_UPDATE) ezi_rd_str(&r, &ids, &nid);
    int st = ezi_rd_status(&r);
    if (st == 0) return true;
    if (st < 0 || (cmd != EZI_UPDATE && cmd != EZI_COMPLETE)) {
      EZI_WARN("subscriber %s: protocol error from the graph server", s->topic);
      return false;
    }
    if (cmd == EZI_UPDATE) {
      apply_update(s, ids, nid);
      if (!s->joins_pending) answer_update(s);
    } else {
      pthread_mutex_lock(&s->mu);
      s->initialized = true;
      pthread_cond_broadcast(&s->cv);
      pthread_mutex_unlock(&s->mu);
    }
    ezi_buf_consume(&s->gin, r.pos);
  }
  return true;
}

#define GRAPH_IN_LIMIT (EZ_MAX_CONTROL_STR + 16)

void ezi_sub_on_graph(ezi_watch *w, uint32_t ev) {
  ez_sub *s = w->arg;
  if (ev & EPOLLOUT) ezi_outbox_flush(&s->gout);
  if (!(ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))) return;
  long n;
  while ((n = ezi_buf_fill(&s->gin, w->fd, GRAPH_IN_LIMIT)) > 0)
    if (!process(s)) return lost(s);
  if (n < 0) return lost(s);
  if (s->joins_pending && ezi_buf_pending(&s->gin) >= GRAPH_IN_LIMIT) {
    /* Full while an UPDATE waits for its channels: stop reading until it is answered. */
    s->gout.base_events = EPOLLRDHUP;
    ezi_loop_mod(&s->gw, EPOLLRDHUP | (w->events & EPOLLOUT));
  }
}

void ezi_sub_join_done(ez_sub *s, chan_sub *cs, int rc) {
  pub_link *l = find_link(s, cs);
  bool retry = l && l->retry_join;
  if (l) l->retry_join = false;
  if (rc) {
    ezi_chan_leave(cs, false);
    if (l) link_failed(s, l, rc, false);
  } else if (l) {
    l->failures = 0;
    drop_dead(l, false, true);
  }
  if (retry || !s->joins_pending || --s->joins_pending) return;
  answer_update(s);
  if (s->gw.fd < 0) return;
  if (!(s->gout.base_events & EPOLLIN)) {
    s->gout.base_events = EPOLLIN | EPOLLRDHUP;
    ezi_loop_mod(&s->gw, EPOLLIN | EPOLLRDHUP | (s->gw.events & EPOLLOUT));
  }
  if (!process(s)) lost(s);
}

void ezi_sub_chan_lost(ez_sub *s, chan_sub *cs) {
  pub_link *l = find_link(s, cs);
  if (l) { /* knocked at before joining again (empty: the publisher was not reached over TCP) */
    snprintf(l->knock, sizeof l->knock, "%s", cs->ch->pub_addr);
    l->knocks = 0;
  }
  /* Queued messages in the publisher's shared memory are dropped (their slots may be overwritten
   * now); those that came whole over TCP stay queued. What the user views or still has queued
   * stays valid until released, or until the subscriber goes (ez_sub_destroy ends views), so a
   * membership that holds messages is kept until then. */
  ezi_chan_drop_unowned(cs);
  ezi_chan_sub_cut(cs); /* a TCP ring's queue drains before what a new channel brings */
  chan_sub **v = l && !ezi_chan_sub_idle(cs) ? realloc(l->dead, (l->n_dead + 1) * sizeof *v) : NULL;
  if (v) {
    l->dead = v;
    l->dead[l->n_dead++] = cs;
  } else {
    ezi_chan_leave(cs, false);
  }
  if (l) link_failed(s, l, EZ_ECONNLOST, true);
}

void ezi_sub_links_close(ez_sub *s) {
  graph_close(s);
  if (s->retry_timer) ezi_loop_cancel(s->ctx->loop, s->retry_timer);
  s->retry_timer = 0;
  while (s->n_links)
    remove_link_at(s, s->n_links - 1, true);
  ezi_sub_purge_all(s);    /* what channels left earlier (by an UPDATE) had queued */
  ezi_lchan_purge(&s->lr); /* the same, of TCP rings */
}
