/* Publishers: creation through the graph server, destruction, and their profile. Publishing is
 * pubsend.c, waiting for a slot (backpressure) and segment growth pubwait.c, the I/O-thread half
 * pubserve.c. */
#include "proto/ctxprofile.h"
#include "pub/publisher.h"
#include "pub/pubhot.h"
#include "pub/publocal.h"
#include "chan/channel.h"
#include "pub/pubserve.h"
#include "pub/pubwait.h"
#include "graph/graphio.h"
#include "base/shmguard.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void ez_pub_opts_init(ez_pub_opts *o) {
  memset(o, 0, sizeof *o);
  o->num_buffers = 32;
  o->buf_size = 65536;
  o->host = "127.0.0.1";
}

const char *ez_pub_id(const ez_pub *p) { return p->id; }
const char *ez_pub_topic(const ez_pub *p) { return p->topic; }

/* Ready channels, the local one included. p->mu held. */
static size_t count_channels(const ez_pub *p) {
  size_t n = p->local != NULL;
  for (size_t i = 0; i < p->n_chans; i++)
    n += p->chans[i]->state == PC_READY;
  return n;
}

size_t ez_pub_num_channels(ez_pub *p) {
  pthread_mutex_lock(&p->mu);
  size_t n = count_channels(p);
  pthread_mutex_unlock(&p->mu);
  return n;
}

/* How long a publisher that lost its graph connection waits for the server's hang-up on its
 * segment's lease: a server that died closes both at once; one that is alive keeps the lease. */
#define LEASE_HANGUP_WAIT_MS 100

void ezi_pub_graph_gone(ez_pub *p) {
  pthread_mutex_lock(&p->mu);
  ezi_seg *s = p->seg;
  if (s) ezi_seg_ref(s);
  pthread_mutex_unlock(&p->mu);
  bool gone = s && ezi_seg_server_gone(s, LEASE_HANGUP_WAIT_MS);
  ezi_seg_unref(s);
  if (!gone) return;
  pthread_mutex_lock(&p->mu);
  ezi_seg_orphaned(p->seg);
  for (ezi_seg_chain *c = p->retired; c; c = c->next)
    ezi_seg_orphaned(c->seg);
  pthread_mutex_unlock(&p->mu);
}

/* ---- creation ------------------------------------------------------------------------------ */

static int listen_socket(const ez_pub_opts *o, int *fd_out) {
  const char *host = o->host ? o->host : "127.0.0.1";
  if (o->port) {
    int fd = ezi_tcp_listen(host, o->port, 128);
    if (fd < 0) return fd;
    *fd_out = fd;
    return 0;
  }
  const char *e = getenv(EZ_PUB_PORT_ENV);
  long start = e ? strtol(e, NULL, 10) : EZ_PUB_PORT_DEFAULT;
  if (start <= 0 || start > 65535) start = EZ_PUB_PORT_DEFAULT;
  for (long p = start; p <= 65535; p++) {
    int fd = ezi_tcp_listen(host, (uint16_t)p, 128);
    if (fd >= 0) {
      *fd_out = fd;
      return 0;
    }
  }
  int fd = ezi_tcp_listen(host, 0, 128); /* every port above start taken: any free one */
  if (fd < 0) return fd;
  *fd_out = fd;
  return 0;
}

static void pub_free(ez_pub *p) {
  ezi_trace_free(p->trace);
  free(p->topic);
  free(p->leases);
  free(p->slot_msg);
  free(p->local_t0);
  free(p->chans);
  ezi_seg_unref(p->seg);
  ezi_seg_chain_free(p->retired);
  ezi_pub_hot_free(p);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  ezi_window_free(p->tel_msgs);
  ezi_window_free(p->tel_bp);
  ezi_stamper_detach(&p->stamps);
  free(p);
}

static void add_to_ctx(void *arg) {
  ez_pub *p = arg;
  ez_context *ctx = p->ctx;
  pthread_mutex_lock(&ctx->mu);
  ez_pub **v = realloc(ctx->pubs, (ctx->n_pubs + 1) * sizeof *v);
  if (v) {
    ctx->pubs = v;
    ctx->pubs[ctx->n_pubs++] = p;
  }
  ctx->local_pubs = &ezi_local_pubs; /* (the same for every publisher: pub/publocal.c) */
  pthread_mutex_unlock(&ctx->mu);
}

typedef struct {
  ez_pub *pub;
  int graph_fd, listen_fd, rc;
} serve_call;

static void start_serving(void *arg) {
  serve_call *sc = arg;
  sc->rc = ezi_pub_serve_start(sc->pub, sc->graph_fd, sc->listen_fd);
  if (!sc->rc) add_to_ctx(sc->pub);
}

int ez_pub_create(ez_context *ctx, const char *topic, const ez_pub_opts *opts, ez_pub **out) {
  if (!ctx || !topic || !out || strlen(topic) > EZ_MAX_CONTROL_STR) return EZ_EINVAL;
  ez_pub_opts o;
  if (opts)
    o = *opts;
  else
    ez_pub_opts_init(&o);
  if (o.num_buffers < 1 || o.num_buffers > EZI_SHM_MAX_BUFFERS || o.buf_size < 1 ||
      o.buf_size > EZI_SHM_MAX_BUF_SIZE)
    return EZ_EINVAL;
  ez_pub *p = calloc(1, sizeof *p);
  if (!p) return EZ_ENOMEM;
  p->ctx = ctx;
  ezi_stamper_attach(&p->stamps, ctx->tick);
  p->opts = o;
  p->opts.host = NULL; /* not kept: the caller owns the string */
  p->nbuf = o.num_buffers;
  p->running = !o.start_paused;
  ezi_mutex_init(&p->mu);
  ezi_cond_init(&p->cv);
  p->tel_msgs = ezi_window_new();
  p->tel_bp = ezi_window_new();
  p->topic = strdup(topic);
  p->leases = calloc(p->nbuf, sizeof *p->leases);
  p->slot_msg = calloc(p->nbuf, sizeof *p->slot_msg);
  p->local_t0 = calloc(p->nbuf, sizeof *p->local_t0);
  if (!p->tel_msgs || !p->tel_bp || !p->topic || !p->leases || !p->slot_msg || !p->local_t0) {
    pub_free(p);
    return EZ_ENOMEM;
  }

  /* The segment: the server's, mapped here; if it cannot be mapped (server on another host),
   * private memory in the same layout and TCP for everyone. */
  uint64_t deadline = ezi_deadline(EZ_DEFAULT_TIMEOUT_MS);
  int rc = ezi_seg_create(ctx->server_addr, p->nbuf, o.buf_size, &p->seg, ezi_ms_left(deadline));
  if (rc == 0) {
    p->shm_real = true;
  } else if (rc == EZ_ENOENT || rc == EZ_ESYS || rc == EZ_EPROTO || rc == EZ_EINVAL) {
    /* EZ_EINVAL: the server refused to create it (its limits, EZMSG_SHM_SEGMENT_MB ...). */
    if (rc == EZ_EINVAL)
      EZI_WARN("publisher %s: the graph server refused a segment of %u x %llu bytes; using TCP",
               topic, (unsigned)p->nbuf, (unsigned long long)o.buf_size);
    else
      EZI_INFO("publisher %s: cannot map the server's segment (%s); using TCP", topic,
               ez_strerror(rc));
    rc = ezi_seg_private("", p->nbuf, o.buf_size, &p->seg);
  }
  if (rc) {
    pub_free(p);
    return rc;
  }

  int lfd = -1;
  rc = listen_socket(&o, &lfd);
  if (rc) {
    pub_free(p);
    return rc;
  }
  p->port = ezi_sock_port(lfd);

  int gfd = ezi_graph_open(ctx->server_addr, deadline, NULL, 0);
  if (gfd < 0) {
    close(lfd);
    pub_free(p);
    return gfd;
  }
  ezi_buf b = {0};
  ezi_buf_put_u8(&b, EZI_PUBLISH);
  ezi_buf_put_cstr(&b, topic);
  rc = b.data ? ezi_io_write(gfd, b.data, b.len, deadline) : EZ_ENOMEM;
  ezi_buf_free(&b);
  char *id = NULL;
  size_t idlen = 0;
  if (!rc) rc = ezi_io_read_str(gfd, &id, &idlen, 64, deadline);
  if (!rc && !ezi_is_uuid(id, idlen)) rc = EZ_EPROTO;
  if (!rc) memcpy(p->id, id, 37);
  free(id);
  if (rc) {
    close(gfd);
    close(lfd);
    pub_free(p);
    return rc;
  }

  /* Serve channels before announcing the address: subscribers in this very process may connect
   * while the server waits for their UPDATE answers. */
  serve_call sc = {p, gfd, lfd, 0};
  ezi_ctx_call(ctx, start_serving, &sc);
  if (sc.rc) {
    close(gfd);
    close(lfd);
    pub_free(p);
    return sc.rc;
  }
  char addr[300];
  snprintf(addr, sizeof addr, "%s:%u", o.host ? o.host : "127.0.0.1", p->port);
  /* The graph link now belongs to the I/O thread: send through its outbox and let it read the
   * COMPLETE (it wakes us through `registered`). */
  ezi_buf_put_cstr(&b, addr);
  ezi_buf_put_u8(&b, EZI_X_CLIENT); /* after the address: "an ezmsg-c publisher" (wire.h) */
  ezi_xctx_encode(&b, ctx->id);     /* and its context (proto/ctxprofile.h) */
  ezi_outbox_put(ctx, &p->gout, b.data, b.len);
  ezi_buf_free(&b);
  pthread_mutex_lock(&p->mu);
  while (!p->registered && !p->graph_lost)
    if (ezi_cond_wait(&p->cv, &p->mu, deadline) == EZ_ETIMEDOUT) break;
  bool ok = p->registered;
  pthread_mutex_unlock(&p->mu);
  if (!ok) {
    ez_pub_destroy(p);
    return EZ_ETIMEDOUT;
  }
  *out = p;
  return 0;
}

/* ---- destruction --------------------------------------------------------------------------- */

static void remove_on_loop(void *arg) {
  ez_pub *p = arg;
  ez_context *ctx = p->ctx;
  pthread_mutex_lock(&ctx->mu);
  for (size_t i = 0; i < ctx->n_pubs; i++) {
    if (ctx->pubs[i] == p) {
      ctx->pubs[i] = ctx->pubs[--ctx->n_pubs];
      break;
    }
  }
  pthread_mutex_unlock(&ctx->mu);
  ezi_pub_serve_stop(p);
}

void ez_pub_destroy(ez_pub *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->closing = true;
  ezi_pub_broadcast(p);
  pthread_mutex_unlock(&p->mu);
  ezi_ctx_call(p->ctx, remove_on_loop, p);
  pub_free(p);
}

/* ---- profile ------------------------------------------------------------------------------- */

static json_t *lease_json(const char *id, uint64_t pid, const char *mode, uint64_t n) {
  json_t *o = json_object();
  json_object_set_new(o, "channel_id", json_string(id));
  json_object_set_new(o, "pid", json_integer((json_int_t)pid));
  json_object_set_new(o, "mode", json_string(mode));
  json_object_set_new(o, "in_flight", json_integer((json_int_t)n));
  return o;
}

/* What each ready channel holds now, and whose it is (p->mu held, after ezi_pub_harvest_all): a
 * channel that never acknowledges holds the publisher (lossless backpressure, as the protocol has
 * it), and this is how the profile names it even when it sends no profile of its own. */
static json_t *leases_json(ez_pub *p) {
  json_t *a = json_array();
  if (!a) return NULL;
  if (p->local) {
    uint64_t n = 0;
    for (uint32_t i = 0; i < p->nbuf; i++)
      n += p->local_t0[i] != 0;
    json_array_append_new(a, lease_json(ezi_chan_id(p->local), (uint64_t)p->ctx->pid, "local", n));
  }
  for (size_t i = 0; i < p->n_chans; i++) {
    const pub_chan *pc = p->chans[i];
    if (pc->state != PC_READY) continue;
    bool shm = pc->mode == EZI_SEND_RING ||
               (pc->mode == EZI_SEND_FRAMES && p->shm_real && pc->shm_ok && !p->opts.force_tcp);
    uint64_t n = pc->held + (pc->mode == EZI_SEND_WINDOW ? pc->win_next - pc->win_first : 0);
    json_array_append_new(a, lease_json(pc->id, pc->pid, shm ? "shm" : "tcp", n));
  }
  return a;
}

bool ezi_pub_registered(ez_pub *p) {
  pthread_mutex_lock(&p->mu);
  bool r = p->registered;
  pthread_mutex_unlock(&p->mu);
  return r;
}

json_t *ezi_pub_profile(ez_pub *p, double window_s) {
  uint64_t now = ezi_now_ns();
  pthread_mutex_lock(&p->mu);
  ezi_pub_harvest_all(p);
  ezi_window_tally_n(p->tel_msgs, p->total_msgs - p->msgs_seen, p->total_bytes - p->bytes_seen);
  p->msgs_seen = p->total_msgs;
  p->bytes_seen = p->total_bytes;
  ezi_window_fold(p->tel_bp);
  json_t *j = ezi_pub_tel_json(p->tel_msgs, p->tel_bp, p->total_msgs, p->total_bytes, p->in_flight,
                               now, window_s);
  size_t nch = count_channels(p);
  json_t *leases = leases_json(p);
  pthread_mutex_unlock(&p->mu);
  if (!j) {
    json_decref(leases);
    return NULL;
  }
  json_object_set_new(j, "type", json_string("publisher"));
  json_object_set_new(j, "id", json_string(p->id));
  json_object_set_new(j, "topic", json_string(p->topic));
  json_object_set_new(j, "pid", json_integer(p->ctx->pid));
  json_object_set_new(j, "num_buffers", json_integer(p->nbuf));
  json_object_set_new(j, "host", json_string(p->ctx->host));
  json_object_set_new(j, "num_channels", json_integer((json_int_t)nch));
  /* Beyond the reference: which channel holds the leases of backpressure.in_flight */
  if (leases) json_object_set_new(j, "leases", leases);
  return j;
}
