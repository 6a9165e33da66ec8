/* The publisher's I/O-thread half: its graph link (PAUSE, RESUME, SYNC, PROFILE) and its channel
 * server (the CHANNEL handshake, then RX_ACKs that free slots). */
#include "pub/pubserve.h"
#include "pub/publisher.h"
#include "chan/channel.h"
#include "pub/pubwait.h"
#include "pub/pubwin.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define CHAN_IN_LIMIT 65536

/* ---- graph link ---------------------------------------------------------------------------- */

static void graph_close(ez_pub *p) {
  if (p->gw.fd < 0) return;
  ezi_loop_del(&p->gw);
  ezi_outbox_close(p->ctx, &p->gout);
  close(p->gw.fd);
  p->gw.fd = -1;
  ezi_buf_free(&p->gin);
  pthread_mutex_lock(&p->mu);
  p->graph_lost = true;
  ezi_pub_broadcast(p);
  pthread_mutex_unlock(&p->mu);
}

static void send_profile(ez_pub *p, uint64_t window_ms) {
  bool poll = window_ms >= EZI_TRACE_POLL_MS; /* `ezmsg profile --trace` (base/trace.h) */
  json_t *j =
      ezi_pub_profile(p, (double)(poll ? window_ms - EZI_TRACE_POLL_MS : window_ms) / 1000.0);
  if (poll) { /* traced a while more; what it recorded goes with the answer */
    json_t *tr = ezi_trace_json(ezi_ctx_trace_poll(p->ctx, &p->trace, p->topic, p->id));
    json_object_set_new(j, "trace", tr ? tr : json_pack("{s[]sI}", "samples", "dropped", 0));
  }
  ezi_outbox_put_profile(p->ctx, &p->gout, j);
}

static void on_graph(ezi_watch *w, uint32_t ev) {
  ez_pub *p = w->arg;
  if (ev & EPOLLOUT) ezi_outbox_flush(&p->gout);
  if (!(ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))) return;
  long n;
  while ((n = ezi_buf_fill(&p->gin, w->fd, 4096)) > 0) {
    while (ezi_buf_pending(&p->gin)) {
      const uint8_t *h = ezi_buf_head(&p->gin);
      uint8_t cmd = h[0];
      size_t used = 1;
      pthread_mutex_lock(&p->mu);
      switch (cmd) {
      case EZI_COMPLETE:
        p->registered = true;
        ezi_pub_broadcast(p);
        break;
      case EZI_PAUSE: p->running = false; break;
      case EZI_RESUME:
        p->running = true;
        ezi_pub_broadcast(p);
        break;
      case EZI_SYNC:
        p->running = false; /* as the reference: it stays paused afterwards */
        p->sync_pending = true;
        ezi_pub_check_sync(p);
        break;
      case EZI_PROFILE:
      case EZI_X_PROFILE_CTX: used = ezi_buf_pending(&p->gin) >= 9 ? 9 : 0; break;
      default: EZI_WARN("publisher %s: unknown command %u from the graph server", p->topic, cmd);
      }
      pthread_mutex_unlock(&p->mu);
      if (!used) break; /* PROFILE's argument not all here yet */
      if (cmd == EZI_PROFILE) send_profile(p, ezi_get_u64le(h + 1));
      if (cmd == EZI_X_PROFILE_CTX) /* the whole context's (proto/ctxprofile.h) */
        ezi_ctx_profile_all(p->ctx, ezi_get_u64le(h + 1), &p->gout);
      ezi_buf_consume(&p->gin, used);
    }
  }
  if (n < 0) {
    EZI_WARN("publisher %s: lost the graph server", p->topic);
    graph_close(p);
    ezi_pub_graph_gone(p); /* if the server died, our segments' names are ours to remove */
  }
}

/* ---- channels ------------------------------------------------------------------------------ */

/* A channel's outbox that a publishing thread waits for went down to its low mark (I/O thread,
 * no lock held). */
static void drained(void *arg) {
  ez_pub *p = arg;
  pthread_mutex_lock(&p->mu);
  ezi_pub_broadcast(p);
  pthread_mutex_unlock(&p->mu);
}

static void chan_close(pub_chan *pc) {
  ez_pub *p = pc->pub;
  uint64_t now = ezi_tel_now();
  if (pc->hs_timer) ezi_loop_cancel(p->ctx->loop, pc->hs_timer);
  pthread_mutex_lock(&p->mu);
  for (size_t i = 0; i < p->n_chans; i++) {
    if (p->chans[i] == pc) {
      p->chans[i] = p->chans[--p->n_chans];
      break;
    }
  }
  ezi_pub_ring_close(p, pc, now);
  ezi_win_close(p, pc, now);
  for (uint32_t i = 0; i < p->nbuf; i++) /* a channel that leaves frees what it held */
    if (pc->t0[i]) ezi_pub_free_locked(p, pc, p->slot_msg[i], now);
  pthread_mutex_unlock(&p->mu);
  ezi_loop_del(&pc->w);
  ezi_outbox_close(p->ctx, &pc->out);
  close(pc->w.fd);
  ezi_buf_free(&pc->in);
  pthread_mutex_lock(&p->mu);
  ezi_pub_chan_free(p, pc); /* (or a publishing thread asleep on its ring's word will) */
  pthread_mutex_unlock(&p->mu);
}

static void chan_error(pub_chan *pc, const char *what) {
  /* Rate-limited: a peer can make as many connections as it likes. */
  EZI_WARN_RL("publisher %s: channel %s: %s; closing it", pc->pub->topic, pc->id[0] ? pc->id : "?",
              what);
  chan_close(pc);
}

/* The handshake's deadline: a connection that has not finished it is closed. */
static void hs_expired(void *arg) {
  pub_chan *pc = arg;
  pc->hs_timer = 0;
  if (pc->state != PC_READY) chan_error(pc, "did not finish the handshake in time");
}

/* Handshake frames; returns bytes used, 0 for more, -1 if pc was closed. */
static long handshake(pub_chan *pc) {
  ez_pub *p = pc->pub;
  ezi_rd r;
  ezi_rd_init(&r, ezi_buf_head(&pc->in), ezi_buf_pending(&pc->in), 64);
  uint8_t cmd = 0;
  uint64_t pid = 0;
  const char *id = NULL;
  size_t n = 0;
  if (pc->state == PC_HANDSHAKE) {
    if (ezi_rd_u8(&r, &cmd)) ezi_rd_str(&r, &id, &n);
  } else {
    if (ezi_rd_u8(&r, &cmd)) ezi_rd_u64(&r, &pid);
  }
  int st = ezi_rd_status(&r);
  if (st == 0) return 0;
  ezi_buf b = {0};
  if (st < 0 || (pc->state == PC_HANDSHAKE && (cmd != EZI_CHANNEL || !ezi_is_uuid(id, n))) ||
      (pc->state == PC_AWAIT_SHM && cmd != EZI_SHM_OK && cmd != EZI_SHM_ATTACH_FAILED)) {
    chan_error(pc, "bad handshake");
    return -1;
  }
  if (pc->state == PC_HANDSHAKE) {
    memcpy(pc->id, id, 36);
    pthread_mutex_lock(&p->mu); /* send_slot reads the state under it */
    /* A channel does not say which dialect it speaks: a released one reads our topic first, a
     * profiling one only the segment's name. Speak the graph server's (dialect.h); an ezmsg-c
     * channel reads either. */
    if (p->ctx->server_peer.dialect == EZ_DIALECT_RELEASED) ezi_buf_put_cstr(&b, p->topic);
    ezi_buf_put_cstr(&b, p->seg->shm.name);
    pc->state = PC_AWAIT_SHM;
    pthread_mutex_unlock(&p->mu);
  } else {
    pc->shm_ok = cmd == EZI_SHM_OK;
    pc->pid = pid;
    ezi_buf_put_u8(&b, EZI_COMPLETE);
    ezi_buf_put_u64(&b, p->nbuf);
    /* Ready as COMPLETE is queued, under the lock publishers send under: whatever is published
     * once the channel has COMPLETE reaches it, and nothing comes before it. */
    pthread_mutex_lock(&p->mu);
    pc->state = PC_READY;
    if (b.data) ezi_outbox_put(p->ctx, &pc->out, b.data, b.len);
    pthread_mutex_unlock(&p->mu);
    ezi_buf_free(&b);
    EZI_DEBUG("publisher %s: channel %s ready (pid %llu, %s)", p->topic, pc->id,
              (unsigned long long)pid, pc->shm_ok ? "shm" : "no shm");
  }
  if (b.data) ezi_outbox_put(p->ctx, &pc->out, b.data, b.len);
  ezi_buf_free(&b);
  return (long)r.pos;
}

static void on_chan(ezi_watch *w, uint32_t ev) {
  pub_chan *pc = w->arg;
  ez_pub *p = pc->pub;
  if ((ev & EPOLLOUT) && ezi_outbox_flush(&pc->out)) return chan_close(pc);
  if (!(ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))) return;
  long n;
  while ((n = ezi_buf_fill(&pc->in, w->fd, CHAN_IN_LIMIT)) > 0) {
    while (pc->state != PC_READY && ezi_buf_pending(&pc->in)) {
      long used = handshake(pc);
      if (used < 0) return;
      if (used == 0) break;
      ezi_buf_consume(&pc->in, (size_t)used);
    }
    if (pc->state != PC_READY) continue;
    if (pc->hs_timer) { /* done in time */
      ezi_loop_cancel(p->ctx->loop, pc->hs_timer);
      pc->hs_timer = 0;
    }
    /* Acks: all that arrived, under one lock. */
    const uint8_t *h = ezi_buf_head(&pc->in);
    size_t avail = ezi_buf_pending(&pc->in), pos = 0;
    uint64_t now = ezi_tel_now();
    pthread_mutex_lock(&p->mu);
    for (;;) {
      if (avail - pos >= 9 && h[pos] == EZI_RX_ACK) {
        ezi_pub_free_locked(p, pc, ezi_get_u64le(h + pos + 1), now);
        pos += 9;
      } else if (avail - pos >= 1 && h[pos] == EZI_X_HELLO) { /* an ezmsg-c channel */
        /* (Only where its messages would go through shared memory: else its X_WIN_ASK follows.) */
        bool shm = p->shm_real && pc->shm_ok && !p->opts.force_tcp;
        if (p->ctx->ring_ok && pc->mode != EZI_SEND_RING && shm) pc->wanted = EZI_SEND_RING;
        pos += 1;
      } else if (avail - pos >= 1 && (h[pos] == EZI_X_WIN_ASK || h[pos] == EZI_X_WIN_ASK_V1)) {
        /* The same, on TCP. (A channel on shared memory has the ring, or TX_SHM: no need to
         * wait for a switch.) */
        bool shm = p->shm_real && pc->shm_ok && !p->opts.force_tcp;
        if (p->ctx->tcp_window > p->nbuf && pc->mode != EZI_SEND_WINDOW && !shm)
          pc->wanted = EZI_SEND_WINDOW;
        pos += 1;
      } else if (avail - pos >= 1 && h[pos] == EZI_X_TCP_ASK) { /* X_TCP frames in a window */
        pc->x_tcp = true;
        pos += 1;
      } else if (avail - pos >= 1 && h[pos] >= EZI_X_ASK_MIN) { /* an ask we do not know */
        pos += 1;
      } else {
        break;
      }
    }
    pthread_mutex_unlock(&p->mu);
    ezi_buf_consume(&pc->in, pos);
    if (ezi_buf_pending(&pc->in) && ezi_buf_head(&pc->in)[0] != EZI_RX_ACK)
      return chan_error(pc, "unexpected bytes");
  }
  if (n < 0) chan_close(pc); /* the channel went away */
}

static void on_accept(ezi_watch *w, uint32_t ev) {
  ez_pub *p = w->arg;
  (void)ev;
  int fd;
  while ((fd = ezi_accept(&p->acc)) >= 0) {
    ezi_sock_setup(fd);
    pub_chan *pc = calloc(1, sizeof *pc);
    if (pc) pc->t0 = calloc(p->nbuf, sizeof *pc->t0);
    if (!pc || !pc->t0) {
      free(pc);
      close(fd);
      continue;
    }
    pc->pub = p;
    pc->w = (ezi_watch){.fd = fd, .fn = on_chan, .arg = pc};
    ezi_outbox_init(&pc->out, &pc->w, EPOLLIN | EPOLLRDHUP);
    pc->out.on_drain = drained;
    pc->out.drain_arg = p;
    pc->hs_timer = ezi_loop_timer(p->ctx->loop, ezi_now_ns() + (uint64_t)EZI_PUB_HS_MS * 1000000u,
                                  hs_expired, pc);
    pthread_mutex_lock(&p->mu);
    pub_chan **v = pc->hs_timer ? realloc(p->chans, (p->n_chans + 1) * sizeof *v) : NULL;
    if (v) {
      p->chans = v;
      p->chans[p->n_chans++] = pc; /* receives nothing until PC_READY */
    }
    pthread_mutex_unlock(&p->mu);
    if (!v || ezi_loop_add(p->ctx->loop, &pc->w, EPOLLIN | EPOLLRDHUP)) {
      if (v) {
        pthread_mutex_lock(&p->mu);
        p->n_chans--;
        pthread_mutex_unlock(&p->mu);
      }
      if (pc->hs_timer) ezi_loop_cancel(p->ctx->loop, pc->hs_timer);
      free(pc->t0);
      free(pc);
      close(fd);
    }
  }
}

/* ---- start / stop -------------------------------------------------------------------------- */

int ezi_pub_serve_start(ez_pub *p, int graph_fd, int listen_fd) {
  p->gw = (ezi_watch){.fd = graph_fd, .fn = on_graph, .arg = p};
  ezi_outbox_init(&p->gout, &p->gw, EPOLLIN | EPOLLRDHUP);
  p->lw = (ezi_watch){.fd = listen_fd, .fn = on_accept, .arg = p};
  if (ezi_loop_add(p->ctx->loop, &p->gw, EPOLLIN | EPOLLRDHUP)) return EZ_ESYS;
  if (ezi_loop_add(p->ctx->loop, &p->lw, EPOLLIN)) {
    ezi_loop_del(&p->gw);
    return EZ_ESYS;
  }
  snprintf(p->acc_who, sizeof p->acc_who, "publisher %.80s", p->topic);
  ezi_acceptor_init(&p->acc, &p->lw, p->ctx->loop, p->acc_who); /* (on this thread: no accept
                                                                 * runs before it) */
  return 0;
}

void ezi_pub_serve_stop(ez_pub *p) {
  if (p->local) ezi_chan_pub_gone(p->local);
  ezi_acceptor_stop(&p->acc);
  ezi_loop_del(&p->lw);
  close(p->lw.fd);
  for (;;) {
    pthread_mutex_lock(&p->mu);
    pub_chan *pc = p->n_chans ? p->chans[p->n_chans - 1] : NULL;
    pthread_mutex_unlock(&p->mu);
    if (!pc) break;
    chan_close(pc);
  }
  graph_close(p);
}
