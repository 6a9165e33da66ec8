/* ZeroMQ's side of the fixed-rate and pipeline benchmarks (bench/rate.sh), the peer of
 * bench/rate.c: the same harness (bench/rate.h), the same processes, the same work per stage.
 *
 * Every edge is a topic, as with ezmsg: its publisher binds an XPUB with ZMQ_XPUB_NODROP (it
 * blocks instead of dropping at the high-water mark, so nothing is lost, like our backpressure)
 * on ipc:///tmp/ez_bench_zmq_rate.<coordinator pid>.t<k>, and its subscribers connect SUB
 * sockets to it. A publisher waits for all its subscriptions (ZMQ_XPUB_VERBOSE reports each)
 * before the start. In fan-in every source binds an XPUB of its own (.t0.s<k>: two cannot bind one
 * address) and the sink's SUB connects to each. Sends copy from the caller's buffer (zmq_send, like
 * ez_publish); receives are zero-copy (zmq_msg_recv, like ez_recv), closed after use. One ZeroMQ
 * context per process with its default single I/O thread.
 *
 *   ez_bench_zmq_rate [--mode rate|pipeline] [--rate HZ] [--size B] [--duration S] [--warmup S]
 *                     [--stages N] [--sinks N] [--work PASSES] [--null] [--syscalls] */
#define _GNU_SOURCE
#include <zmq.h>

#include "rate.h"

struct rb_ep {
  void *ctx, *pub, *sub;
};

static char ipc_base[128];

static const char *tp_impl(void) { return "zeromq"; }
static void tp_json_extra(void) { printf("\"transport\": \"ipc\", "); }
static const char *tp_strerror(int rc) { return rc == -1 ? "harness failure" : zmq_strerror(-rc); }

static int tp_coord_start(char *where, size_t cap, char *err, size_t errcap) {
  (void)err, (void)errcap;
  snprintf(ipc_base, sizeof ipc_base, "ipc:///tmp/ez_bench_zmq_rate.%d", (int)getpid());
  snprintf(where, cap, "%s", ipc_base);
  return 0;
}

static void tp_coord_stop(void) {
  for (unsigned k = 0; ipc_base[0] && k <= O.stages; k++) {
    char path[160];
    snprintf(path, sizeof path, "%s.t%u", ipc_base + 6, k);
    unlink(path);
  }
  for (unsigned k = 0; ipc_base[0] && O.fanin && k < O.sources; k++) {
    char path[160];
    snprintf(path, sizeof path, "%s.t0.s%u", ipc_base + 6, k);
    unlink(path);
  }
}

static int zfail(char *err, size_t errcap, const char *what) {
  int e = zmq_errno();
  snprintf(err, errcap, "%s: %s", what, zmq_strerror(e));
  return e ? -e : -1;
}

static void set_opts(void *s) {
  int v = RB_POLL_MS, zero = 0;
  zmq_setsockopt(s, ZMQ_SNDTIMEO, &v, sizeof v);
  zmq_setsockopt(s, ZMQ_RCVTIMEO, &v, sizeof v);
  zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
}

static int tp_open(const rb_node *nd, const char *where, rb_ep **out, char *err, size_t errcap) {
  static rb_ep e;
  char ep[300];
  e.ctx = zmq_ctx_new();
  if (!e.ctx) return zfail(err, errcap, "context");
  if (nd->out >= 0) {
    int one = 1;
    e.pub = zmq_socket(e.ctx, ZMQ_XPUB);
    if (!e.pub) return zfail(err, errcap, "XPUB socket");
    set_opts(e.pub);
    zmq_setsockopt(e.pub, ZMQ_XPUB_NODROP, &one, sizeof one);
    zmq_setsockopt(e.pub, ZMQ_XPUB_VERBOSE, &one, sizeof one);
    if (O.fanin)
      snprintf(ep, sizeof ep, "%s.t%d.s%u", where, nd->out, nd->idx);
    else
      snprintf(ep, sizeof ep, "%s.t%d", where, nd->out);
    if (zmq_bind(e.pub, ep)) return zfail(err, errcap, "bind");
  }
  if (nd->in >= 0) {
    e.sub = zmq_socket(e.ctx, ZMQ_SUB);
    if (!e.sub) return zfail(err, errcap, "SUB socket");
    set_opts(e.sub);
    zmq_setsockopt(e.sub, ZMQ_SUBSCRIBE, "", 0);
    for (unsigned k = 0; k < (O.fanin ? O.sources : 1); k++) {
      if (O.fanin)
        snprintf(ep, sizeof ep, "%s.t%d.s%u", where, nd->in, k);
      else
        snprintf(ep, sizeof ep, "%s.t%d", where, nd->in);
      if (zmq_connect(e.sub, ep)) return zfail(err, errcap, "connect");
    }
  }
  *out = &e;
  return 0;
}

static int tp_wait(rb_ep *e, const rb_node *nd, uint64_t deadline, char *err, size_t errcap) {
  for (unsigned subs = 0; e->pub && subs < nd->downstream;) {
    char b[16];
    int k = zmq_recv(e->pub, b, sizeof b, 0);
    if (k >= 1 && b[0] == 1) subs++;
    if (now_ns() > deadline) {
      snprintf(err, errcap, "%u of %u subscriptions", subs, nd->downstream);
      return -ETIMEDOUT;
    }
  }
  return 0;
}

static int tp_send(rb_ep *e, const void *buf, size_t len, uint64_t hard) {
  for (;;) {
    if (zmq_send(e->pub, buf, len, 0) >= 0) return 0;
    int en = zmq_errno();
    if ((en != EAGAIN && en != EINTR) || now_ns() > hard) return -en;
  }
}

_Static_assert(sizeof(zmq_msg_t) <= sizeof((rb_view *)0)->priv, "rb_view holds a zmq_msg_t");

static int tp_recv(rb_ep *e, rb_view *v, uint64_t hard) {
  zmq_msg_t *m = (zmq_msg_t *)v->priv;
  zmq_msg_init(m);
  for (;;) {
    if (zmq_msg_recv(m, e->sub, 0) >= 0) {
      v->data = zmq_msg_data(m);
      v->len = zmq_msg_size(m);
      return 0;
    }
    int en = zmq_errno();
    if ((en != EAGAIN && en != EINTR) || now_ns() > hard) {
      zmq_msg_close(m);
      return -en;
    }
  }
}

static void tp_release(rb_ep *e, rb_view *v) {
  (void)e;
  zmq_msg_close((zmq_msg_t *)v->priv);
}

static void tp_close(rb_ep *e, uint64_t hard) {
  (void)hard;
  int linger = 10000; /* what is still queued (the END) goes first */
  if (e->pub) zmq_setsockopt(e->pub, ZMQ_LINGER, &linger, sizeof linger), zmq_close(e->pub);
  if (e->sub) zmq_close(e->sub);
  zmq_ctx_term(e->ctx);
}

int main(int argc, char **argv) { return rb_main(argc, argv); }
