/* The graph server: one thread, one event loop, every client a state machine over its connection.
 *
 * Nothing here ever waits on one client while the rest wait: requests that need answers from other
 * clients (UPDATE -> COMPLETE from subscribers, SYNC -> COMPLETE and PROFILE -> PROFILE_DATA from
 * publishers and channels) become an `op` that counts the answers still due and finishes when the
 * last arrives, its client leaves, or its timer fires. Each client keeps a FIFO of the ops it owes
 * an answer to, one FIFO per kind of answer, since clients answer each kind in order. */
#include "proto/dialect.h"
#include "graph/graphserver.h"
#include "graph/gs_conn.h"
#include "graph/gs_process.h"
#include "graph/gs_profile.h"
#include "graph/gs_session.h"
#include "graph/gs_settings.h"
#include "graph/gs_stream.h"
#include "base/acceptor.h"
#include "proto/dag.h"
#include "proto/gsparse.h"
#include "proto/gsregistry.h"
#include "proto/shm.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* ---- segments ------------------------------------------------------------------------------ */

/* Drops one lease of a segment; the last one removes its name. */
static void seg_release(server *s, segment *g) {
  if (--g->leases > 0) return;
  ezi_shm_unlink(g->name);
  close(g->hold_fd); /* after the unlink: a sweep never finds the name unheld */
  EZI_DEBUG("graph server: unlinked %s", g->name);
  for (segment **p = &s->segs; *p; p = &(*p)->next) {
    if (*p == g) {
      *p = g->next;
      break;
    }
  }
  s->n_segs--;
  free(g);
}

/* A lease's connection closed (its `closed`). */
static void lease_closed(conn *c) { seg_release(c->srv, c->lease); }

/* $name in MiB (a positive integer), else def (bytes); a bad value is logged. */
static uint64_t env_mib(const char *name, uint64_t def) {
  const char *e = getenv(name);
  if (!e || !*e) return def;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(e, &end, 10);
  if (errno || *end || !v || v > ((uint64_t)1 << 44)) {
    EZI_WARN("%s=%s: not a number of MiB; using %llu MiB", name, e,
             (unsigned long long)(def >> 20));
    return def;
  }
  return (uint64_t)v << 20;
}

/* What SHM_CREATE may commit (posix_fallocate reserves every page at once): a segment of at most
 * EZ_SHM_SEGMENT_MAX_ENV MiB, and at most EZ_SHM_TOTAL_MAX_ENV MiB in all the segments asked for
 * from one host (over TCP the server cannot tell processes apart; every local client is
 * 127.0.0.1, so on one machine this is the total). */
static void shm_limits(server *s) {
  uint64_t shm = 0;
  struct statvfs v;
  if (statvfs("/dev/shm", &v) == 0) shm = (uint64_t)v.f_blocks * v.f_frsize;
  s->seg_max = env_mib(EZ_SHM_SEGMENT_MAX_ENV, (uint64_t)EZ_SHM_SEGMENT_MAX_DEFAULT_MB << 20);
  s->host_max = env_mib(EZ_SHM_TOTAL_MAX_ENV, shm ? shm / 2 : (uint64_t)8 << 30);
}

/* Whether a segment of `bytes` for a client at `host` stays within the limits; else logs why. */
static bool shm_quota(server *s, const char *host, uint64_t nbuf, uint64_t size, uint64_t bytes) {
  uint64_t held = 0;
  for (segment *g = s->segs; g; g = g->next)
    if (!strcmp(g->host, host)) held += g->bytes;
  const char *why = NULL;
  uint64_t limit = 0;
  if (s->n_segs >= MAX_SEGMENTS)
    why = "segments exist already (the limit)", limit = MAX_SEGMENTS;
  else if (bytes > s->seg_max)
    why = "MiB is the largest segment (" EZ_SHM_SEGMENT_MAX_ENV ")", limit = s->seg_max >> 20;
  else if (held + bytes > s->host_max)
    why = "MiB is what the segments of one host may take (" EZ_SHM_TOTAL_MAX_ENV ")",
    limit = s->host_max >> 20;
  if (!why) return true;
  EZI_WARN_RL("graph server: SHM_CREATE of %llu x %llu bytes from %s refused: %llu %s; %llu MiB "
              "held for that host",
              (unsigned long long)nbuf, (unsigned long long)size, host, (unsigned long long)limit,
              why, (unsigned long long)(held >> 20));
  return false;
}

static segment *seg_find(server *s, const char *name, size_t n) {
  for (segment *g = s->segs; g; g = g->next)
    if (strlen(g->name) == n && memcmp(g->name, name, n) == 0) return g;
  return NULL;
}

static void handle_register(server *s, conn *c, uint8_t cmd, const char *topic, size_t n) {
  if (!ezi_utf8_valid(topic, n) || memchr(topic, 0, n))
    return ezi_gs_proto_error(c, "topic is not valid UTF-8");
  c->topic = ezi_strndup(topic, n);
  if (!c->topic) return ezi_gs_close(c);
  ezi_uuid(c->id);
  ezi_buf b = {0};
  ezi_buf_put_str(&b, c->id, 36);
  ezi_gs_send(c, &b);
  ezi_buf_free(&b);
  if (cmd == EZI_PUBLISH) {
    c->st = C_PUB_ADDR;
    return;
  }
  c->st = C_SUB;
  ezi_gs_registered(s, c);
  ezi_sock_peer_host(c->w.fd, c->peer);
  op *o = ezi_gs_op_new(s, OP_SUBSCRIBE, c);
  if (!o) return ezi_gs_close(c);
  ezi_gs_notify_sub(s, c, o);
  ezi_gs_op_launch(o, UPDATE_TIMEOUT_NS);
}

static void handle_pub_address(server *s, conn *c, const char *addr, size_t n) {
  char buf[300], host[256];
  uint16_t port;
  if (n >= sizeof buf) return ezi_gs_proto_error(c, "publisher address too long");
  memcpy(buf, addr, n);
  buf[n] = 0;
  if (ezi_addr_parse(buf, host, &port)) return ezi_gs_proto_error(c, "bad publisher address");
  c->port = port;
  ezi_sock_peer_host(c->w.fd, c->peer);
  c->st = C_PUB;
  ezi_gs_registered(s, c);
  op *o = ezi_gs_op_new(s, OP_PUBLISH, c);
  if (!o) return ezi_gs_close(c);
  ezi_gs_notify_down(s, c->topic, o, false);
  ezi_gs_op_launch(o, UPDATE_TIMEOUT_NS);
}

static void handle_channel(server *s, conn *c, const char *pub_id, size_t n) {
  conn *pub = ezi_gs_find_pub(s, pub_id, n);
  if (!pub) {
    EZI_INFO("graph server: CHANNEL for unknown publisher %.*s", (int)(n > 40 ? 40 : n), pub_id);
    return ezi_gs_close(c);
  }
  ezi_uuid(c->id);
  memcpy(c->pub_id, pub->id, 37);
  char addr[128];
  snprintf(addr, sizeof addr, "%s:%u", pub->peer, pub->port);
  ezi_buf b = {0};
  ezi_buf_put_u8(&b, EZI_COMPLETE);
  ezi_buf_put_str(&b, c->id, 36);
  ezi_buf_put_cstr(&b, addr);
  c->st = C_CHAN;
  ezi_gs_send(c, &b);
  ezi_buf_free(&b);
}

static void handle_shm(server *s, conn *c, uint8_t cmd, uint64_t nbuf, uint64_t size,
                       const char *name, size_t n) {
  segment *g = NULL;
  if (cmd == EZI_SHM_CREATE) {
    ezi_shm shm;
    int hold = -1;
    char host[64];
    ezi_sock_peer_host(c->w.fd, host);
    /* The layout's size (shm.h), if it is one: ezi_shm_create refuses the rest. */
    uint64_t stride = size + 16 * nbuf, bytes = UINT64_MAX;
    if (nbuf && nbuf <= EZI_SHM_MAX_BUFFERS && size && size <= EZI_SHM_MAX_BUF_SIZE &&
        nbuf <= UINT64_MAX / stride)
      bytes = nbuf * stride;
    int rc = bytes == UINT64_MAX                      ? EZ_EINVAL
             : !shm_quota(s, host, nbuf, size, bytes) ? EZ_EMSGSIZE
                                                      : ezi_shm_create(nbuf, size, &shm, &hold);
    if (rc == EZ_EMSGSIZE) return ezi_gs_close(c); /* logged */
    if (rc) {
      EZI_WARN("graph server: cannot create segment (%llu x %llu): %s", (unsigned long long)nbuf,
               (unsigned long long)size, ez_strerror(rc));
      return ezi_gs_close(c);
    }
    g = calloc(1, sizeof *g);
    if (!g) {
      ezi_shm_unlink(shm.name);
      ezi_shm_detach(&shm);
      close(hold);
      return ezi_gs_close(c);
    }
    snprintf(g->name, sizeof g->name, "%s", shm.name);
    snprintf(g->host, sizeof g->host, "%s", host);
    g->bytes = bytes;
    g->hold_fd = hold;
    ezi_shm_detach(&shm); /* the server only names it; clients map it */
    g->next = s->segs;
    s->segs = g;
    s->n_segs++;
  } else {
    g = seg_find(s, name, n);
    if (!g) {
      EZI_INFO("graph server: SHM_ATTACH of unknown segment");
      return ezi_gs_close(c);
    }
  }
  g->leases++;
  c->lease = g;
  c->closed = lease_closed;
  c->st = C_LEASE;
  ezi_buf b = {0};
  ezi_buf_put_u8(&b, EZI_COMPLETE);
  ezi_buf_put_cstr(&b, g->name);
  ezi_gs_send(c, &b);
  ezi_buf_free(&b);
}

static void handle_edge(server *s, conn *c, uint8_t cmd, const char *from, size_t nf,
                        const char *to, size_t nt) {
  /* Topics go into the DAG pickle, which Python must be able to load: UTF-8 only. */
  if (!ezi_utf8_valid(from, nf) || !ezi_utf8_valid(to, nt) || memchr(from, 0, nf) ||
      memchr(to, 0, nt))
    return ezi_gs_proto_error(c, "topic is not valid UTF-8");
  char *f = ezi_strndup(from, nf), *t = ezi_strndup(to, nt);
  bool changed = false; /* the persistent owner's edge (dag.h) */
  int rc = !f || !t             ? EZ_ENOMEM
           : cmd == EZI_CONNECT ? ezi_dag_add_edge_owned(s->dag, f, t, NULL, &changed)
                                : ezi_dag_remove_edge_owned(s->dag, f, t, NULL, &changed);
  if (!rc && changed) {
    const char *topics[1] = {t};
    ezi_gs_topology_event(s, EZI_M39_GRAPH_CHANGED, topics, 1, NULL, NULL);
  }
  if (rc == EZ_ECYCLIC) {
    uint8_t cy = EZI_CYCLIC;
    ezi_buf b = {.data = &cy, .len = 1, .cap = 1};
    ezi_gs_send(c, &b);
    ezi_gs_finish(c);
  } else if (rc) {
    ezi_gs_close(c);
  } else {
    op *o = ezi_gs_op_new(s, OP_EDGE, c);
    if (!o) {
      ezi_gs_close(c);
    } else {
      c->st = C_WAIT;
      ezi_gs_notify_down(s, t, o, false);
      ezi_gs_op_launch(o, UPDATE_TIMEOUT_NS);
    }
  }
  free(f);
  free(t);
}

static void handle_dag(server *s, conn *c) {
  uint8_t *pk = NULL;
  size_t n = 0;
  if (ezi_dag_pickle(s->dag, &pk, &n)) return ezi_gs_close(c);
  ezi_buf b = {0};
  ezi_buf_put_u8(&b, EZI_DAG);
  ezi_buf_put_u64(&b, n);
  ezi_buf_put(&b, pk, n);
  ezi_buf_put_u8(&b, EZI_COMPLETE);
  free(pk);
  ezi_gs_send(c, &b);
  ezi_buf_free(&b);
  ezi_gs_finish(c);
}

static void broadcast_pubs(server *s, uint8_t cmd, op *o) {
  ezi_buf b = {.data = &cmd, .len = 1, .cap = 1};
  for (conn *p = s->conns, *n; p; p = n) {
    n = p->next;
    if (p->st != C_PUB) continue;
    if (o) {
      if (ezi_gs_wq_push(&p->complete_q, o, 0)) continue;
      o->remaining++;
    }
    ezi_gs_send(p, &b);
  }
}

/* Parses one frame from c->in. Returns bytes consumed (> 0), 0 if more bytes are needed, or -1 if
 * the connection was closed. */
uint64_t ezi_gs_sniff_ns = SNIFF_NS;

/* The lone byte 21 of C_SNIFF was a SESSION: no PROFILE argument followed in SNIFF_NS. */
static void sniffed(void *arg) {
  conn *c = arg;
  c->sniff_timer = 0;
  if (c->st != C_SNIFF) return;
  c->st = C_NEW;
  if (ezi_buf_pending(&c->in) != 1) return; /* a PROFILE on its way after all */
  ezi_buf_consume(&c->in, 1);
  c->need = 0; /* (it was PROFILE's 9 bytes) */
  ezi_gs_session_open(c->srv, c);
}

/* What a connection in state st sends: its parser's phase (-1: nothing is expected). */
static int phase_of(cstate st) {
  switch (st) {
  case C_PUB_ADDR: return EZI_GS_PUB_ADDR;
  case C_PUB:
  case C_SUB:
  case C_CHAN: return EZI_GS_CLIENT;
  case C_NEW:
  case C_SNIFF: return EZI_GS_COMMAND;
  case C_SESSION: return EZI_GS_SESSION;
  case C_PROCESS: return EZI_GS_PROCESS;
  default: return -1; /* C_LEASE, C_WAIT, C_CLOSING, C_STREAM */
  }
}

static long parse_one(server *s, conn *c) {
  int phase = phase_of(c->st);
  if (phase < 0) return (long)ezi_buf_pending(&c->in); /* nothing more is expected: discard */
  if (c->busy) return 0; /* a session's request is being answered: the next one waits */
  ezi_gs_req q;
  int st = ezi_gs_parse((ezi_gs_phase)phase, ezi_buf_head(&c->in), ezi_buf_pending(&c->in), &q);
  if (st < 0) {
    ezi_gs_proto_error(c, "a string or payload beyond its limit");
    return -1;
  }
  if (st == 0) {
    c->need = q.need;
    size_t pending = ezi_buf_pending(&c->in);
    /* 21 alone: the released dialect's SESSION, or the profiling one's PROFILE, whose u64 is
     * still on its way (any byte more decides: need 2). Python's SESSION is followed by nothing
     * until it is answered. */
    if (c->st == C_NEW && q.cmd == EZI_PROFILE && pending == 1) {
      c->st = C_SNIFF;
      c->need = 2;
      c->sniff_timer = ezi_loop_timer(s->loop, ezi_now_ns() + ezi_gs_sniff_ns, sniffed, c);
      return 0;
    }
    /* 21 with 1 to 7 bytes behind it: a SESSION whose client wrote its first request with it
     * (ours does: ezi_sess_open), since a PROFILE's u64 comes whole, in one write. */
    if ((c->st == C_NEW || c->st == C_SNIFF) && q.cmd == EZI_PROFILE && pending > 1) {
      if (c->sniff_timer) ezi_loop_cancel(s->loop, c->sniff_timer);
      c->sniff_timer = 0;
      c->st = C_NEW;
      c->need = 0;
      ezi_gs_session_open(s, c);
      return c->dead ? -1 : 1;
    }
    return 0;
  }
  c->need = 0;
  if (c->st == C_SNIFF) { /* a PROFILE after all */
    ezi_loop_cancel(s->loop, c->sniff_timer);
    c->sniff_timer = 0;
    c->st = C_NEW;
  }
  if (c->st == C_SESSION) {
    ezi_gs_session_request(s, c, &q);
    return c->dead ? -1 : (long)q.used;
  }
  if (c->st == C_PROCESS) {
    ezi_gs_process_request(s, c, &q);
    return c->dead ? -1 : (long)q.used;
  }
  long used = (long)q.used;
  uint8_t cmd = q.cmd;
  const char *a = q.a, *b = q.b;
  size_t na = q.na, nb = q.nb;
  uint64_t u1 = q.u1, u2 = q.u2;

  switch (c->st) {
  case C_PUB_ADDR: handle_pub_address(s, c, a, na); return c->dead ? -1 : used;
  case C_PUB:
  case C_SUB:
  case C_CHAN:
    if (cmd == EZI_COMPLETE) {
      waiter w;
      if (ezi_gs_wq_pop(&c->complete_q, &w)) {
        if (!w.op->done) ezi_gs_op_answer(w.op);
        ezi_gs_op_unref(w.op);
      }
    } else if (cmd == EZI_PROFILE_DATA) {
      ezi_gs_profile_data(s, c, a, na);
    } else if (cmd == EZI_X_PROFILE_PART) {
      ezi_gs_profile_part(s, c, a, na);
    } else if (cmd == EZI_X_PROFILE_END) {
      ezi_gs_profile_end(s, c);
    } else if (cmd == EZI_X_CTX && c->st != C_SUB) {
      ezi_gs_profile_ctx(s, c, q.pl);
    } else if (cmd == EZI_X_CLIENT) {
      c->ezc = true;
    } else if (cmd == EZI_X_SUB_INFO && c->st == C_SUB) {
      if (!ezi_subinfo_decode(a, na, &c->pid, &c->handle)) EZI_INFO("graph server: bad X_SUB_INFO");
    } else if (cmd >= EZI_X_ASK_MIN) {
      /* an extension we do not know: skipped, as a Python server does */
    } else {
      ezi_gs_proto_error(c, "unexpected command from a client");
      return -1;
    }
    return c->dead ? -1 : used;
  default: break;
  }

  switch (cmd) { /* C_NEW */
  case EZI_SHUTDOWN:
    EZI_INFO("graph server: shutdown requested");
    ezi_loop_stop(s->loop);
    ezi_gs_finish(c);
    break;
  case EZI_PUBLISH:
  case EZI_SUBSCRIBE: handle_register(s, c, cmd, a, na); break;
  case EZI_CHANNEL: handle_channel(s, c, a, na); break;
  case EZI_SHM_CREATE:
  case EZI_SHM_ATTACH: handle_shm(s, c, cmd, u1, u2, a, na); break;
  case EZI_CONNECT:
  case EZI_DISCONNECT: handle_edge(s, c, cmd, a, na, b, nb); break;
  case EZI_SYNC: {
    op *o = ezi_gs_op_new(s, OP_SYNC, c);
    if (!o) {
      ezi_gs_close(c);
      break;
    }
    c->st = C_WAIT;
    broadcast_pubs(s, EZI_SYNC, o);
    ezi_gs_op_launch(o, 0);
    break;
  }
  case EZI_PAUSE:
  case EZI_RESUME:
    broadcast_pubs(s, cmd, NULL);
    ezi_gs_finish(c);
    break;
  case EZI_DAG: handle_dag(s, c); break;
  case EZI_PROFILE: ezi_gs_profile(s, c, u1); break;
  case EZI_PROCESS: ezi_gs_process_open(s, c); break;
  case EZI_SESSION_SETTINGS_SUBSCRIBE:
  case EZI_SESSION_TOPOLOGY_SUBSCRIBE:
  case EZI_SESSION_PROFILING_SUBSCRIBE: ezi_gs_stream_open(s, c, &q); break;
  default: {
    char what[64];
    snprintf(what, sizeof what, "unknown command %u", cmd);
    ezi_gs_proto_error(c, what);
    break;
  }
  }
  return c->dead ? -1 : used;
}

/* Parses and handles the requests c has buffered (the server's `consume`). False if c was
 * closed. */
static bool consume(conn *c) {
  for (;;) {
    long used = parse_one(c->srv, c);
    if (used < 0) return false;
    if (used == 0) return true;
    ezi_buf_consume(&c->in, (size_t)used);
    if (!ezi_buf_pending(&c->in)) return true;
  }
}

static void on_conn(ezi_watch *w, uint32_t ev) {
  conn *c = w->arg;
  server *s = c->srv;
  if (c->dead) return;
  if ((ev & EPOLLOUT) && ezi_gs_writable(c)) return;
  if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
    if (!c->in.cap) { /* nothing buffered: read into the server's spare buffer */
      c->in = s->spare_in;
      s->spare_in = (ezi_buf){0};
    }
    for (;;) {
      long n = ezi_buf_fill(&c->in, c->w.fd, IN_LIMIT);
      if (n < 0) return ezi_gs_close(c); /* EOF or error: the client left */
      if (c->in.cap != c->in_charged) {  /* what every connection buffers is bounded too */
        s->in_total += c->in.cap - c->in_charged;
        c->in_charged = c->in.cap;
        if (s->in_total > IN_BUDGET)
          return ezi_gs_proto_error(c, "the server's input budget is used up");
      }
      if (n == 0) break;
      if (c->need > ezi_buf_pending(&c->in)) continue;
      if (!consume(c)) return;
      if (ezi_buf_pending(&c->in) >= IN_LIMIT) return ezi_gs_proto_error(c, "request too large");
    }
    /* A connection with nothing buffered keeps no input buffer (it goes back to be the spare):
     * a read reserves 64 KiB, and thousands of idle clients holding that would use up IN_BUDGET
     * (4096 of them at most). */
    if (!ezi_buf_pending(&c->in) && c->in.cap) {
      s->in_total -= c->in_charged;
      c->in_charged = 0;
      if (s->spare_in.cap || c->in.cap > ((size_t)128 << 10)) {
        ezi_buf_free(&c->in); /* (the spare stays small) */
      } else {
        ezi_buf_reset(&c->in);
        s->spare_in = c->in;
        c->in = (ezi_buf){0};
      }
    }
    if (ev & (EPOLLHUP | EPOLLERR)) return ezi_gs_close(c);
  }
}

static void on_accept(ezi_watch *w, uint32_t ev) {
  server *s = w->arg;
  (void)ev;
  int fd;
  while ((fd = ezi_accept(&s->acc)) >= 0) {
    if (s->n_conns >= s->max_conns) {
      EZI_WARN_RL("graph server: %zu clients already (the limit); refusing another", s->max_conns);
      close(fd);
      continue;
    }
    ezi_sock_setup(fd);
    conn *c = calloc(1, sizeof *c);
    if (!c) {
      close(fd);
      continue;
    }
    c->srv = s;
    c->w = (ezi_watch){.fd = fd, .fn = on_conn, .arg = c};
    if (ezi_loop_add(s->loop, &c->w, EPOLLIN | EPOLLRDHUP)) {
      close(fd);
      free(c);
      continue;
    }
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    s->n_conns++;
    ezi_buf b = {0};
    ezi_buf_put_cstr(&b, s->greeting);
    ezi_gs_send(c, &b);
    ezi_buf_free(&b);
  }
}

/* ---- lifecycle ----------------------------------------------------------------------------- */

static void *server_thread(void *arg) {
  server *s = arg;
  ezi_loop_run(s->loop);
  /* Registered clients first (their leaving notifies others), then everything else. */
  while (s->conns)
    ezi_gs_close(s->conns);
  ezi_gs_reap(s);
  while (s->segs) {
    s->segs->leases = 1;
    seg_release(s, s->segs);
  }
  pthread_mutex_lock(&s->mu);
  s->stopped = true;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* The topic graph and the released dialect's history and settings. */
static void free_state(server *s) {
  free(s->pub_ids);
  free(s->pub_topics);
  ezi_buf_free(&s->spare_in);
  ezi_dag_free(s->dag);
  ezi_gs_events_free(s->settings_events);
  ezi_gs_events_free(s->topology_events);
  ezi_gs_settings_free(s);
}

int ez_server_start(const char *address, ez_server **out) {
  return ez_server_start_opts(address, NULL, out);
}

int ez_server_start_opts(const char *address, const ez_server_opts *opts, ez_server **out) {
  char addr[300], host[256];
  uint16_t port;
  if (opts && (opts->max_clients < 0 || opts->dialect < EZ_DIALECT_AUTO ||
               opts->dialect > EZ_DIALECT_RELEASED))
    return EZ_EINVAL;
  ezi_addr_resolve(address, addr);
  if (!out || ezi_addr_parse(addr, host, &port)) return EZ_EADDR;
  ezi_shm_sweep(EZI_SHM_STALE_S); /* what servers SIGKILLed with their publishers left */
  ezi_raise_fd_limit();           /* a descriptor per client and per segment */
  server *s = calloc(1, sizeof *s);
  if (!s) return EZ_ENOMEM;
  s->max_conns = opts && opts->max_clients ? (size_t)opts->max_clients : MAX_CONNS;
  s->dialect = opts && opts->dialect ? opts->dialect : ezi_dialect_forced();
  if (!s->dialect) s->dialect = EZ_DIALECT_RELEASED;
  s->consume = consume;
  s->greeting = s->dialect == EZ_DIALECT_PROFILING ? EZ_VERSION_PROFILING : EZ_VERSION;
  shm_limits(s);
  int rc = ezi_loop_new(&s->loop);
  if (rc) {
    free(s);
    return rc;
  }
  s->dag = ezi_dag_new();
  bool made = s->dag && ezi_gs_events_init(s) == 0;
  int fd = ezi_tcp_listen(host, port, 512);
  if (fd < 0 || !made) {
    if (fd >= 0) close(fd);
    free_state(s);
    ezi_loop_free(s->loop);
    free(s);
    return fd < 0 ? fd : EZ_ENOMEM;
  }
  snprintf(s->address, sizeof s->address, "%s:%u", host, ezi_sock_port(fd));
  s->listen = (ezi_watch){.fd = fd, .fn = on_accept, .arg = s};
  ezi_acceptor_init(&s->acc, &s->listen, s->loop, "graph server");
  ezi_loop_add(s->loop, &s->listen, EPOLLIN);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  if (pthread_create(&s->thread, NULL, server_thread, s)) {
    ezi_acceptor_stop(&s->acc);
    ezi_loop_del(&s->listen);
    close(fd);
    free_state(s);
    ezi_loop_free(s->loop);
    free(s);
    return EZ_ESYS;
  }
  EZI_INFO("graph server listening on %s (%s dialect: greets as ezmsg %s)", s->address,
           ezi_dialect_name(s->dialect), s->greeting);
  *out = s;
  return 0;
}

const char *ez_server_address(const ez_server *s) { return s ? s->address : NULL; }

const char *ezi_server_greeting(const ez_server *s) { return s->greeting; }

int ez_server_wait(ez_server *s, int timeout_ms) {
  uint64_t deadline = ezi_deadline(timeout_ms);
  pthread_mutex_lock(&s->mu);
  while (!s->stopped) {
    int left = ezi_ms_left(deadline);
    if (left == 0) break;
    if (left < 0) {
      pthread_cond_wait(&s->cv, &s->mu);
    } else {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)(left > 100 ? 100 : left) * 1000000u;
      ts.tv_sec += (time_t)(ns / 1000000000u);
      ts.tv_nsec = (long)(ns % 1000000000u);
      pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
  }
  bool stopped = s->stopped;
  pthread_mutex_unlock(&s->mu);
  return stopped ? 0 : EZ_ETIMEDOUT;
}

void ez_server_stop(ez_server *s) {
  if (!s) return;
  ezi_loop_stop(s->loop);
  pthread_join(s->thread, NULL);
  ezi_acceptor_stop(&s->acc);
  ezi_loop_del(&s->listen);
  close(s->listen.fd);
  free_state(s);
  ezi_loop_free(s->loop);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}
