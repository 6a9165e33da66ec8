/* The released dialect's GraphContext sessions (3.9.0): a session's edges are its own (they go
 * when it closes), it may register the graph's metadata, read snapshots of the graph and the
 * settings, and route requests to processes. Requests are answered in order, one at a time:
 * while one waits (for subscribers' UPDATE answers, or a process), the next waits unparsed. */
#include "graph/gs_session.h"
#include "base/strlist.h"
#include "graph/gs_conn.h"
#include "graph/gs_process.h"
#include "graph/gs_settings.h"
#include "graph/gs_stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sedge {
  char *from, *to;
} sedge;

struct gs_session {
  sedge *edges; /* those this session added and has not removed */
  size_t n_edges, cap_edges;
  bool connected; /* it asked for an edge once: the DAG may hold edges it owns */
  ezi_pk_doc *meta_doc; /* registered metadata (NULL: none) */
  const ezi_pk *meta;
};

/* ---- answers -------------------------------------------------------------------------------- */

static void answer_byte(conn *c, uint8_t v) {
  ezi_buf b = {.data = &v, .len = 1, .cap = 1};
  ezi_gs_send(c, &b);
}

/* A finished OP_SESSION op (its `answer`): its byte to the session, which goes on. */
static void session_reply(op *o) {
  conn *c = o->req;
  answer_byte(c, o->reply);
  ezi_gs_answered(c);
}

/* Answers `u64 size, pickle, COMPLETE` (rc: the pickle's making; an error closes c). */
static void answer_pickle(conn *c, int rc, uint8_t *pk, size_t n) {
  if (rc) {
    free(pk);
    EZI_WARN("graph server: cannot answer session %s: %s", c->id, ez_strerror(rc));
    return ezi_gs_close(c);
  }
  ezi_buf b = {0};
  ezi_buf_put_u64(&b, n);
  ezi_buf_put(&b, pk, n);
  ezi_buf_put_u8(&b, EZI_COMPLETE);
  free(pk);
  ezi_gs_send(c, &b);
  ezi_buf_free(&b);
}

/* An op that answers `reply` to the session once the UPDATEs it sends are answered. */
static op *session_op(server *s, conn *c, uint8_t reply) {
  op *o = ezi_gs_op_new(s, OP_SESSION, c);
  if (!o) return NULL;
  o->reply = reply;
  o->answer = session_reply;
  c->busy = true;
  return o;
}

/* ---- edges ---------------------------------------------------------------------------------- */

static ssize_t edge_index(const gs_session *g, const char *from, const char *to) {
  for (size_t i = 0; i < g->n_edges; i++)
    if (!strcmp(g->edges[i].from, from) && !strcmp(g->edges[i].to, to)) return (ssize_t)i;
  return -1;
}

static int edge_note(gs_session *g, const char *from, const char *to) {
  if (edge_index(g, from, to) >= 0) return 0;
  if (g->n_edges == g->cap_edges) {
    size_t cap = g->cap_edges ? g->cap_edges * 2 : 8;
    sedge *v = realloc(g->edges, cap * sizeof *v);
    if (!v) return EZ_ENOMEM;
    g->edges = v;
    g->cap_edges = cap;
  }
  sedge e = {strdup(from), strdup(to)};
  if (!e.from || !e.to) {
    free(e.from);
    free(e.to);
    return EZ_ENOMEM;
  }
  g->edges[g->n_edges++] = e;
  return 0;
}

static void edge_forget(gs_session *g, size_t i) {
  free(g->edges[i].from);
  free(g->edges[i].to);
  g->edges[i] = g->edges[--g->n_edges];
}

static void edge_request(server *s, conn *c, const ezi_gs_req *q) {
  if (!ezi_utf8_valid(q->a, q->na) || !ezi_utf8_valid(q->b, q->nb) || memchr(q->a, 0, q->na) ||
      memchr(q->b, 0, q->nb))
    return ezi_gs_proto_error(c, "topic is not valid UTF-8");
  char *from = ezi_strndup(q->a, q->na), *to = ezi_strndup(q->b, q->nb);
  bool changed = false;
  if (q->cmd == EZI_SESSION_CONNECT) c->sess->connected = true;
  int rc = !from || !to ? EZ_ENOMEM
           : q->cmd == EZI_SESSION_CONNECT
               ? ezi_dag_add_edge_owned(s->dag, from, to, c->id, &changed)
               : ezi_dag_remove_edge_owned(s->dag, from, to, c->id, &changed);
  if (!rc && q->cmd == EZI_SESSION_CONNECT) rc = edge_note(c->sess, from, to);
  if (!rc && q->cmd == EZI_SESSION_DISCONNECT) {
    ssize_t i = edge_index(c->sess, from, to);
    if (i >= 0) edge_forget(c->sess, (size_t)i);
  }
  if (rc == EZ_ECYCLIC) {
    answer_byte(c, EZI_CYCLIC);
  } else if (rc) {
    ezi_gs_close(c);
  } else if (!changed) {
    answer_byte(c, EZI_COMPLETE);
  } else {
    const char *topics[1] = {to};
    ezi_gs_topology_event(s, EZI_M39_GRAPH_CHANGED, topics, 1, c->id, NULL);
    op *o = session_op(s, c, EZI_COMPLETE);
    if (!o) {
      ezi_gs_close(c);
    } else {
      ezi_gs_notify_down(s, to, o, false);
      ezi_gs_op_launch(o, UPDATE_TIMEOUT_NS);
    }
  }
  free(from);
  free(to);
}

/* The `to` topics of the edges a session's end removed (ezi_dag_remove_owner's callback). */
static void edge_gone(void *user, const char *from, const char *to) {
  (void)from;
  if (!ezi_strlist_has(user, to)) ezi_strlist_add(user, to);
}

/* Removes every edge of the session, metadata and settings (SESSION_CLEAR, or its close): the
 * subscribers downstream of each topic whose topology changed are told, through o if not NULL.
 */
static void clear(server *s, conn *c, op *o) {
  gs_session *g = c->sess;
  ezi_strlist gone = {0};
  if (g->connected && /* (else there is nothing to look for: a scan of the whole graph) */
      (ezi_dag_remove_owner(s->dag, c->id, edge_gone, &gone) == EZ_ENOMEM || gone.nomem))
    EZI_WARN("graph server: out of memory ending session %s's edges", c->id);
  while (g->n_edges)
    edge_forget(g, g->n_edges - 1);
  ezi_gs_settings_session_gone(s, c->id);
  ezi_pk_doc_free(g->meta_doc);
  g->meta_doc = NULL;
  g->meta = NULL;
  if (gone.n)
    ezi_gs_topology_event(s, EZI_M39_GRAPH_CHANGED, (const char *const *)gone.v, gone.n, c->id,
                          NULL);
  for (size_t i = 0; i < gone.n; i++) {
    op *n = o ? o : ezi_gs_op_new(s, OP_NOTIFY, NULL);
    if (n) ezi_gs_notify_down(s, gone.v[i], n, false);
    if (n && !o) ezi_gs_op_launch(n, UPDATE_TIMEOUT_NS);
  }
  ezi_strlist_free(&gone);
}

/* ---- metadata and snapshots ----------------------------------------------------------------- */

/* A component address of meta that another session's metadata has too, or NULL. */
static const char *collision(server *s, conn *c, const ezi_pk *meta, size_t n) {
  for (size_t i = 0; i < n; i++) {
    ezi_m39_component comp;
    if (ezi_m39_meta_component(meta, i, &comp, NULL)) continue;
    for (conn *k = s->conns; k; k = k->next) {
      ezi_m39_component other;
      if (k != c && k->st == C_SESSION && k->sess->meta &&
          ezi_m39_meta_find(k->sess->meta, comp.address, &other, NULL) == 0)
        return comp.address;
    }
  }
  return NULL;
}

static void register_meta(server *s, conn *c, const ezi_gs_req *q) {
  ezi_pk_doc *d = NULL;
  const ezi_pk *meta = NULL;
  ezi_pk_err err = {0};
  size_t n = 0;
  int rc = ezi_pk_load(q->pl, q->npl, NULL, &d, &meta, &err);
  if (!rc) rc = ezi_m39_meta_check(meta, &n, &err);
  if (rc) {
    ezi_pk_doc_free(d);
    answer_byte(c, EZI_ERROR);
    char what[200];
    snprintf(what, sizeof what, "metadata that is not a GraphMetadata: %s", err.msg);
    return ezi_gs_proto_error(c, what);
  }
  const char *clash = collision(s, c, meta, n);
  if (clash) {
    EZI_WARN("graph server: session %s metadata rejected: component %.200s is another "
             "session's",
             c->id, clash);
    ezi_pk_doc_free(d);
    return answer_byte(c, EZI_ERROR);
  }
  ezi_gs_settings_session_gone(s, c->id);
  ezi_pk_doc_free(c->sess->meta_doc);
  c->sess->meta_doc = d;
  c->sess->meta = meta;
  ezi_gs_settings_session_meta(s, c->id, meta, d);
  answer_byte(c, EZI_COMPLETE);
}

static int cmp_cstr(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_edge(const void *a, const void *b) {
  const ezi_m39_edge *x = a, *y = b;
  int r = strcmp(x->from_topic, y->from_topic);
  return r ? r : strcmp(x->to_topic, y->to_topic);
}

/* The GraphSnapshot: the graph, its edges' owners, the sessions and the processes. */
static int snapshot(server *s, uint8_t **out, size_t *len) {
  ezi_pk_doc *d = ezi_pk_doc_new();
  if (!d) return EZ_ENOMEM;
  ez_graph gr = {0};
  ezi_m39_graph_snapshot gs = {0};
  int rc = ezi_dag_export(s->dag, &gr);
  size_t ns = 0, np = 0, ne = 0;
  for (conn *c = s->conns; c; c = c->next) {
    ns += c->st == C_SESSION;
    np += c->st == C_PROCESS;
  }
  for (size_t i = 0; !rc && i < gr.n_nodes; i++)
    ne += gr.nodes[i].n_to;
#define ALLOC(p, n)                                                                                \
  (!rc && !((p) = ezi_pk_alloc(d, ((n) ? (n) : 1) * sizeof *(p))) ? EZ_ENOMEM : rc)
  rc = ALLOC(gs.graph_keys, gr.n_nodes);
  rc = ALLOC(gs.graph_values, gr.n_nodes);
  rc = ALLOC(gs.edge_owner_keys, ne);
  rc = ALLOC(gs.edge_owners, ne);
  rc = ALLOC(gs.session_keys, ns);
  rc = ALLOC(gs.sessions, ns);
  rc = ALLOC(gs.process_keys, np);
  rc = ALLOC(gs.processes, np);
  for (size_t i = 0; !rc && i < gr.n_nodes; i++) {
    const ez_graph_node *nd = &gr.nodes[i];
    gs.graph_keys[i] = nd->topic;
    gs.graph_values[i] = (ezi_m39_strs){.has = true, .n = nd->n_to, .v = (const char **)nd->to};
    for (size_t j = 0; !rc && j < nd->n_to; j++) { /* "persistent", then sessions (sorted) */
      bool persistent = false;
      size_t no = ezi_dag_edge_owners(s->dag, nd->topic, nd->to[j], NULL, 0, &persistent);
      const char **v = ezi_pk_alloc(d, (no + 1) * sizeof *v);
      if (!v) {
        rc = EZ_ENOMEM;
        break;
      }
      size_t k = 0;
      if (persistent) v[k++] = "persistent";
      size_t ns_ = ezi_dag_edge_owners(s->dag, nd->topic, nd->to[j], v + k, no, NULL);
      qsort(v + k, ns_, sizeof *v, cmp_cstr);
      k += ns_;
      gs.edge_owner_keys[gs.n_edge_owners] = (ezi_m39_edge){nd->topic, nd->to[j]};
      gs.edge_owners[gs.n_edge_owners++] = (ezi_m39_strs){.has = true, .n = k, .v = v};
    }
  }
  gs.n_graph = rc ? 0 : gr.n_nodes;
  for (conn *c = s->conns; c && !rc; c = c->next) {
    if (c->st == C_SESSION) {
      gs_session *g = c->sess;
      ezi_m39_snapshot_session *x = &gs.sessions[gs.n_sessions];
      gs.session_keys[gs.n_sessions++] = c->id;
      rc = ALLOC(x->edges, g->n_edges);
      for (size_t i = 0; !rc && i < g->n_edges; i++)
        x->edges[i] = (ezi_m39_edge){g->edges[i].from, g->edges[i].to};
      x->n_edges = rc ? 0 : g->n_edges;
      if (!rc) qsort(x->edges, x->n_edges, sizeof *x->edges, cmp_edge);
      x->metadata = g->meta;
      if (!rc && g->meta_doc) rc = ezi_pk_doc_keep(d, g->meta_doc);
    } else if (c->st == C_PROCESS) {
      ezi_m39_snapshot_process *x = &gs.processes[gs.n_processes];
      ezi_m39_uuid *key = &gs.process_keys[gs.n_processes++];
      key->has = true;
      memcpy(key->s, c->id, 37);
      x->process_id = *key;
      bool reg;
      int64_t pid;
      const char *const *units;
      size_t nu;
      ezi_gs_process_info(c, &reg, &pid, &x->host, &units, &nu);
      x->pid = (ezi_m39_oint){reg, pid};
      x->units = (ezi_m39_strs){true, nu, (const char **)units};
    }
  }
#undef ALLOC
  ezi_pk *root = NULL;
  if (!rc) rc = ezi_m39_build(d, &EZI_M39_GRAPH_SNAPSHOT, &gs, &root, NULL);
  /* One attribute more than 3.9.0's GraphSnapshot declares, which its unpickling keeps and
   * ignores: a client of ours learns that this server answers PROFILE too (ezi_gs_is_ours). */
  if (!rc) rc = ezi_pk_attr_set(root, EZI_GS_MARK_ATTR, ezi_pk_cstr(d, EZ_VERSION));
  if (!rc) rc = ezi_pk_dump(root, 0, NULL, out, len, NULL);
  ez_graph_free(&gr);
  ezi_pk_doc_free(d);
  return rc;
}

/* ---- the connection ------------------------------------------------------------------------- */

static void session_closed(conn *c);

void ezi_gs_session_open(server *s, conn *c) {
  (void)s;
  c->sess = calloc(1, sizeof *c->sess);
  if (!c->sess) return ezi_gs_close(c);
  c->closed = session_closed;
  c->st = C_SESSION;
  ezi_uuid(c->id);
  ezi_buf b = {0};
  ezi_buf_put_cstr(&b, c->id);
  ezi_buf_put_u8(&b, EZI_COMPLETE);
  ezi_gs_send(c, &b);
  ezi_buf_free(&b);
}

void ezi_gs_session_request(server *s, conn *c, const ezi_gs_req *q) {
  uint8_t *pk = NULL;
  size_t n = 0;
  switch (q->cmd) {
  case EZI_SESSION_CONNECT:
  case EZI_SESSION_DISCONNECT: edge_request(s, c, q); break;
  case EZI_SESSION_CLEAR: {
    op *o = session_op(s, c, EZI_COMPLETE);
    if (!o) return ezi_gs_close(c);
    clear(s, c, o);
    ezi_gs_op_launch(o, UPDATE_TIMEOUT_NS);
    break;
  }
  case EZI_SESSION_REGISTER: register_meta(s, c, q); break;
  case EZI_SESSION_SNAPSHOT: {
    int rc = snapshot(s, &pk, &n);
    answer_pickle(c, rc, pk, n);
    break;
  }
  case EZI_SESSION_SETTINGS_SNAPSHOT: {
    int rc = ezi_gs_settings_snapshot(s, &pk, &n);
    answer_pickle(c, rc, pk, n);
    break;
  }
  case EZI_SESSION_SETTINGS_EVENTS: {
    int64_t after;
    if (!ezi_gs_parse_seq(q->a, q->na, &after))
      return ezi_gs_proto_error(c, "after_seq is not an integer");
    int rc = ezi_gs_settings_events_after(s, after, &pk, &n);
    answer_pickle(c, rc, pk, n);
    break;
  }
  case EZI_SESSION_PROCESS_REQUEST: ezi_gs_route(s, c, q); break;
  default: {
    char what[64];
    snprintf(what, sizeof what, "unknown session command %u", q->cmd);
    ezi_gs_proto_error(c, what);
  }
  }
}

/* The connection's `closed`. */
static void session_closed(conn *c) {
  server *s = c->srv;
  if (!c->sess) return;
  if (c->resume_timer) ezi_loop_cancel(s->loop, c->resume_timer);
  c->resume_timer = 0;
  ezi_gs_routes_session_gone(s, c);
  clear(s, c, NULL);
  free(c->sess->edges);
  free(c->sess);
  c->sess = NULL;
}
