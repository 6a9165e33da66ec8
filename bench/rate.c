/* Our side of the fixed-rate and pipeline benchmarks (bench/rate.sh): the harness of
 * bench/rate.h over the public API, one process per node, shared memory between them.
 *
 * The coordinator forks the nodes first, then starts a private graph server (ez_server_start on
 * 127.0.0.1 with a free port) and hands its address to each. A source publishes with ez_publish
 * (one copy into a slot); a stage or sink receives zero-copy views (ez_recv) and releases them
 * (a stage after copying the frame for its own publish). Publishers use the defaults (32 slots of
 * 64 KiB), or room for the message if larger. Polling is the library's: EZMSG_SPIN_US from the
 * environment (reported as spin_us).
 *
 *   ez_bench_rate [--mode rate|pipeline] [--rate HZ] [--size B] [--duration S] [--warmup S]
 *                 [--stages N] [--sinks N] [--work PASSES] [--null] [--syscalls] */
#define _GNU_SOURCE
#include <ezmsg/ezmsg.h>

#include "rate.h"

struct rb_ep {
  ez_context *ctx;
  ez_pub *pub;
  ez_sub *sub;
};

static ez_server *srv;

static const char *tp_impl(void) { return "ezmsg-c"; }

static void tp_json_extra(void) {
  const char *s = getenv(EZ_SPIN_ENV);
  printf("\"transport\": \"shm\", \"spin_us\": %d, ", s && *s ? atoi(s) : EZ_SPIN_DEFAULT_US);
}

static const char *tp_strerror(int rc) { return rc == -1 ? "harness failure" : ez_strerror(rc); }

static int tp_coord_start(char *where, size_t cap, char *err, size_t errcap) {
  int rc = ez_server_start("127.0.0.1:0", &srv);
  if (rc) {
    snprintf(err, errcap, "graph server: %s", ez_strerror(rc));
    return rc;
  }
  snprintf(where, cap, "%s", ez_server_address(srv));
  return 0;
}

static void tp_coord_stop(void) {
  ez_server_stop(srv);
  srv = NULL;
}

static int tp_open(const rb_node *nd, const char *where, rb_ep **out, char *err, size_t errcap) {
  static rb_ep e;
  char topic[96];
  int rc = ez_context_open(where, &e.ctx);
  if (rc) {
    snprintf(err, errcap, "context on %.100s: %s", where, ez_strerror(rc));
    return rc;
  }
  if (nd->out >= 0) {
    ez_pub_opts o;
    ez_pub_opts_init(&o);
    if (O.size + 128 > o.buf_size) o.buf_size = O.size + 128;
    snprintf(topic, sizeof topic, "rate/%d/t%d", (int)getppid(), nd->out);
    if ((rc = ez_pub_create(e.ctx, topic, &o, &e.pub))) {
      snprintf(err, errcap, "publisher on %s: %s", topic, ez_strerror(rc));
      return rc;
    }
  }
  if (nd->in >= 0) {
    snprintf(topic, sizeof topic, "rate/%d/t%d", (int)getppid(), nd->in);
    if ((rc = ez_sub_create(e.ctx, topic, NULL, &e.sub))) {
      snprintf(err, errcap, "subscriber on %s: %s", topic, ez_strerror(rc));
      return rc;
    }
  }
  *out = &e;
  return 0;
}

static int tp_wait(rb_ep *e, const rb_node *nd, uint64_t deadline, char *err, size_t errcap) {
  while (e->pub && ez_pub_num_channels(e->pub) < nd->downstream) {
    if (now_ns() > deadline) {
      snprintf(err, errcap, "%zu of %u subscribers joined", ez_pub_num_channels(e->pub),
               nd->downstream);
      return EZ_ETIMEDOUT;
    }
    usleep(1000);
  }
  return 0;
}

static int tp_send(rb_ep *e, const void *buf, size_t len, uint64_t hard) {
  for (;;) {
    int rc = ez_publish(e->pub, buf, len, RB_POLL_MS);
    if (rc != EZ_ETIMEDOUT || now_ns() > hard) return rc;
  }
}

_Static_assert(sizeof(ez_msg) <= sizeof((rb_view *)0)->priv, "rb_view holds an ez_msg");

static int tp_recv(rb_ep *e, rb_view *v, uint64_t hard) {
  ez_msg *m = (ez_msg *)v->priv;
  for (;;) {
    int rc = ez_recv(e->sub, m, RB_POLL_MS);
    if (!rc) {
      v->data = m->data;
      v->len = m->len;
      return 0;
    }
    if ((rc != EZ_ETIMEDOUT && rc != EZ_EAGAIN) || now_ns() > hard) return rc;
  }
}

static void tp_release(rb_ep *e, rb_view *v) {
  (void)e;
  ez_msg_release((ez_msg *)v->priv);
}

static void tp_close(rb_ep *e, uint64_t hard) {
  uint64_t now = now_ns();
  if (e->pub) ez_pub_flush(e->pub, now < hard ? (int)((hard - now) / 1000000u) + 1 : 0);
  ez_sub_destroy(e->sub);
  ez_pub_destroy(e->pub);
  ez_context_close(e->ctx);
}

int main(int argc, char **argv) { return rb_main(argc, argv); }
