/* The released dialect's process connections (3.9.0): a backend process registers its pid, host
 * and the units it owns, reports settings and profiling traces, and answers the requests that
 * sessions route to the owner of a unit (SESSION_PROCESS_REQUEST -> PROCESS_ROUTE_REQUEST ->
 * PROCESS_ROUTE_RESPONSE -> the session).
 *
 * Bounds: a routed request waits at most its timeout (at most ROUTE_MAX_NS); a process that
 * leaves answers its pending requests PROCESS_DISCONNECTED. A process keeps at most TRACE_SAMPLES
 * trace samples and TRACE_BYTES of them (the oldest go first). A payload that does not parse as
 * what its command carries is answered ERROR (where the command has an answer) and the
 * connection is closed, with one log line. */
#include "graph/gs_process.h"
#include "graph/gs_conn.h"
#include "graph/gs_settings.h"
#include "graph/gs_stream.h"
#include "graph/gs_traces.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gs_process {
  bool registered;
  int64_t pid;
  char *host;
  char **units; /* sorted, unique */
  size_t n_units;
};

struct gs_route {
  gs_route *next;
  char request_id[37];
  conn *proc, *sess;
  uint64_t timer;
  server *srv;
  char *unit, *operation;
  double timeout;
};

/* ---- units ---------------------------------------------------------------------------------- */

static bool has_unit(const gs_process *p, const char *u) {
  size_t lo = 0, hi = p->n_units;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int c = strcmp(p->units[mid], u);
    if (!c) return true;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return false;
}

static bool owns(const conn *c, const char *address) {
  return c->st == C_PROCESS && has_unit(c->proc, address);
}

/* The process connection owning unit `address`, or NULL. */
static conn *process_of_unit(server *s, const char *address) {
  for (conn *c = s->conns; c; c = c->next)
    if (owns(c, address)) return c;
  return NULL;
}

void ezi_gs_process_info(const conn *c, bool *registered, int64_t *pid, const char **host,
                         const char *const **units, size_t *n_units) {
  const gs_process *p = c->proc;
  *registered = p->registered;
  *pid = p->registered ? p->pid : -1;
  *host = p->registered ? p->host : NULL;
  *units = (const char *const *)p->units;
  *n_units = p->n_units;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sets p's units to (p's, or none with `replace`) + add - remove: true if they changed. */
static int set_units(gs_process *p, bool replace, const ezi_m39_strs *add,
                     const ezi_m39_strs *remove, bool *changed) {
  size_t n = (replace ? 0 : p->n_units) + add->n;
  char **v = malloc((n ? n : 1) * sizeof *v);
  if (!v) return EZ_ENOMEM;
  size_t k = 0;
  for (size_t i = 0; !replace && i < p->n_units; i++)
    v[k++] = p->units[i];
  for (size_t i = 0; i < add->n; i++) {
    if (!replace && has_unit(p, add->v[i])) continue;
    if (!(v[k] = strdup(add->v[i]))) {
      while (k > (replace ? 0 : p->n_units))
        free(v[--k]);
      free(v);
      return EZ_ENOMEM;
    }
    k++;
  }
  qsort(v, k, sizeof *v, cmp_str);
  size_t u = 0; /* unique, minus the removed */
  for (size_t i = 0; i < k; i++) {
    bool gone = u && !strcmp(v[u - 1], v[i]);
    for (size_t j = 0; !gone && remove && j < remove->n; j++)
      gone = !strcmp(v[i], remove->v[j]);
    if (gone)
      free(v[i]);
    else
      v[u++] = v[i];
  }
  bool same = u == p->n_units;
  for (size_t i = 0; same && i < u; i++)
    same = !strcmp(v[i], p->units[i]);
  if (replace)
    for (size_t i = 0; i < p->n_units; i++)
      free(p->units[i]);
  free(p->units);
  p->units = v;
  p->n_units = u;
  *changed = !same;
  return 0;
}

/* A unit of `units` that another process owns, or NULL. */
static const char *conflict(server *s, conn *c, const ezi_m39_strs *units) {
  for (size_t i = 0; i < units->n; i++) {
    conn *o = process_of_unit(s, units->v[i]);
    if (o && o != c) return units->v[i];
  }
  return NULL;
}

/* ---- routed requests ------------------------------------------------------------------------ */

static void route_free(server *s, gs_route *r) {
  for (gs_route **pp = &s->routes; *pp; pp = &(*pp)->next)
    if (*pp == r) {
      *pp = r->next;
      break;
    }
  if (r->timer) ezi_loop_cancel(s->loop, r->timer);
  free(r->unit);
  free(r->operation);
  free(r);
}

/* Answers session c with a pickled ProcessControlResponse (pk, n) and COMPLETE; it goes on. */
static void answer_pickle(conn *c, const uint8_t *pk, size_t n) {
  ezi_buf b = {0};
  ezi_buf_put_u64(&b, n);
  ezi_buf_put(&b, pk, n);
  ezi_buf_put_u8(&b, EZI_COMPLETE);
  ezi_gs_send(c, &b);
  ezi_buf_free(&b);
  ezi_gs_answered(c);
}

/* Answers session c with an error response of its own making. */
static void answer_error(conn *c, const char *request_id, int code, const char *error,
                         const char *process_id) {
  ezi_m39_control_response r = {
      .request_id = request_id, .ok = false, .error = error, .error_code = code};
  if (process_id) {
    r.process_id.has = true;
    memcpy(r.process_id.s, process_id, 37);
  }
  uint8_t *pk = NULL;
  size_t n = 0;
  if (ezi_m39_dump(&EZI_M39_PROCESS_CONTROL_RESPONSE, &r, &pk, &n, NULL)) {
    free(pk);
    return ezi_gs_close(c);
  }
  answer_pickle(c, pk, n);
  free(pk);
}

/* A request to EZI_GS_SERVER_UNIT, answered here. */
static void answer_server(server *s, conn *c, const char *request_id, const char *operation) {
  if (strcmp(operation, EZI_GS_OP_PROFILE_TARGETS))
    return answer_error(c, request_id, EZI_M39_ERR_UNSUPPORTED_OPERATION,
                        "The graph server has no such operation", NULL);
  json_t *foreign = json_array();
  for (conn *k = s->conns; foreign && k; k = k->next)
    if (k->st == C_PROCESS && k->proc->n_units && !ezi_proc_is_ours(k->proc->units[0]))
      json_array_append_new(foreign, json_string(k->proc->units[0]));
  json_t *doc = foreign ? json_pack("{so}", "foreign", foreign) : NULL;
  char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
  json_decref(doc);
  ezi_m39_control_response r = {.request_id = request_id, .ok = true, .error_code = EZI_M39_NONE};
  r.payload =
      (ezi_m39_bytes){.has = true, .p = (const uint8_t *)text, .len = text ? strlen(text) : 0};
  uint8_t *pk = NULL;
  size_t n = 0;
  if (!text || ezi_m39_dump(&EZI_M39_PROCESS_CONTROL_RESPONSE, &r, &pk, &n, NULL)) {
    free(text);
    free(pk);
    return ezi_gs_close(c);
  }
  free(text);
  answer_pickle(c, pk, n);
  free(pk);
}

static void route_timeout(void *arg) {
  gs_route *r = arg;
  r->timer = 0;
  char msg[600];
  snprintf(msg, sizeof msg,
           "Timed out waiting for process response (unit=%.200s, operation=%.200s, timeout=%gs)",
           r->unit, r->operation, r->timeout);
  conn *sess = r->sess;
  char id[37], pid[37];
  memcpy(id, r->request_id, 37);
  memcpy(pid, r->proc->id, 37);
  route_free(r->srv, r);
  answer_error(sess, id, EZI_M39_ERR_TIMEOUT, msg, pid);
}

void ezi_gs_route(server *s, conn *c, const ezi_gs_req *q) {
  char *unit = ezi_strndup(q->a, q->na), *operation = ezi_strndup(q->b, q->nb);
  char *tmo = ezi_strndup(q->c, q->nc);
  char *end = NULL;
  double timeout = tmo ? strtod(tmo, &end) : NAN;
  bool bad = !unit || !operation || !tmo || end == tmo || (end && *end && *end != ' ') ||
             !ezi_utf8_valid(q->a, q->na) || !ezi_utf8_valid(q->b, q->nb) ||
             memchr(q->a, 0, q->na) || memchr(q->b, 0, q->nb);
  free(tmo);
  if (bad) {
    free(unit);
    free(operation);
    return ezi_gs_proto_error(c, "a process request with a bad unit, operation or timeout");
  }
  char request_id[37];
  ezi_uuid(request_id);
  if (!strcmp(unit, EZI_GS_SERVER_UNIT)) {
    answer_server(s, c, request_id, operation);
    free(unit);
    free(operation);
    return;
  }
  conn *proc = process_of_unit(s, unit);
  if (!proc) {
    char msg[300];
    snprintf(msg, sizeof msg, "No process owns unit '%.200s'", unit);
    free(unit);
    free(operation);
    return answer_error(c, request_id, EZI_M39_ERR_UNROUTABLE_UNIT, msg, NULL);
  }
  ezi_m39_control_request req = {.request_id = request_id,
                                 .unit_address = unit,
                                 .operation = operation,
                                 .payload = {.has = q->npl > 0, .p = q->pl, .len = q->npl}};
  uint8_t *pk = NULL;
  size_t n = 0;
  gs_route *r = calloc(1, sizeof *r);
  ezi_buf b = {0};
  if (!r || ezi_m39_dump(&EZI_M39_PROCESS_CONTROL_REQUEST, &req, &pk, &n, NULL) ||
      ezi_buf_put_u8(&b, EZI_PROCESS_ROUTE_REQUEST) || ezi_buf_put_u64(&b, n) ||
      ezi_buf_put(&b, pk, n)) {
    free(r);
    free(pk);
    ezi_buf_free(&b);
    free(unit);
    free(operation);
    return ezi_gs_close(c);
  }
  free(pk);
  *r = (gs_route){.next = s->routes,
                  .proc = proc,
                  .sess = c,
                  .srv = s,
                  .unit = unit,
                  .operation = operation,
                  .timeout = timeout};
  memcpy(r->request_id, request_id, 37);
  s->routes = r;
  c->busy = true;
  uint64_t ns = !(timeout > 0)                  ? 0 /* (NaN too) answered at the next turn */
                : timeout >= ROUTE_MAX_NS / 1e9 ? ROUTE_MAX_NS
                                                : (uint64_t)(timeout * 1e9);
  r->timer = ezi_loop_timer(s->loop, ezi_now_ns() + ns, route_timeout, r);
  ezi_gs_send(proc, &b);
  ezi_buf_free(&b);
}

void ezi_gs_routes_session_gone(server *s, conn *c) {
  for (gs_route *r = s->routes, *n; r; r = n) {
    n = r->next;
    if (r->sess == c) route_free(s, r);
  }
}

static void on_route_response(server *s, conn *c, const uint8_t *pl, size_t npl) {
  ezi_pk_doc *d = NULL;
  ezi_m39_control_response resp;
  ezi_pk_err err;
  if (ezi_m39_load(&EZI_M39_PROCESS_CONTROL_RESPONSE, pl, npl, &d, &resp, &err)) {
    ezi_pk_doc_free(d);
    char what[200];
    snprintf(what, sizeof what, "a route response that is not a ProcessControlResponse: %s",
             err.msg);
    return ezi_gs_proto_error(c, what);
  }
  gs_route *r = s->routes;
  while (r && strcmp(r->request_id, resp.request_id))
    r = r->next;
  if (!r) {
    EZI_WARN("graph server: process %s answered an unknown request %.40s", c->id, resp.request_id);
  } else if (r->proc != c) {
    char msg[200], id[37];
    snprintf(msg, sizeof msg, "Received response from unexpected process %s; expected %s", c->id,
             r->proc->id);
    conn *sess = r->sess;
    memcpy(id, r->request_id, 37);
    route_free(s, r);
    answer_error(sess, id, EZI_M39_ERR_INVALID_RESPONSE, msg,
                 resp.process_id.has ? resp.process_id.s : NULL);
  } else { /* forwarded as the process wrote it: the session reads what 3.9's server would */
    conn *sess = r->sess;
    route_free(s, r);
    answer_pickle(sess, pl, npl);
  }
  ezi_pk_doc_free(d);
}

/* ---- the connection ------------------------------------------------------------------------- */

static void process_closed(conn *c);

void ezi_gs_process_open(server *s, conn *c) {
  (void)s;
  c->proc = calloc(1, sizeof *c->proc);
  c->traces = ezi_gs_traces_new();
  c->closed = process_closed;
  if (!c->proc || !c->traces) return ezi_gs_close(c);
  c->st = C_PROCESS;
  ezi_uuid(c->id);
  ezi_buf b = {0};
  ezi_buf_put_cstr(&b, c->id);
  ezi_buf_put_u8(&b, EZI_COMPLETE);
  ezi_gs_send(c, &b);
  ezi_buf_free(&b);
}

static void answer_byte(conn *c, uint8_t v) {
  ezi_buf b = {.data = &v, .len = 1, .cap = 1};
  ezi_gs_send(c, &b);
}

/* A payload that is not what the command carries: ERROR (if answered), a log line, closed. */
static void bad_payload(conn *c, const char *what, const ezi_pk_err *err, bool answered) {
  if (answered) answer_byte(c, EZI_ERROR);
  char msg[300];
  snprintf(msg, sizeof msg, "%s: %s", what, err->msg);
  ezi_gs_proto_error(c, msg);
}

void ezi_gs_process_request(server *s, conn *c, const ezi_gs_req *q) {
  gs_process *p = c->proc;
  ezi_pk_doc *d = NULL;
  ezi_pk_err err = {0};
  bool changed = false;
  switch (q->cmd) {
  case EZI_PROCESS_REGISTER: {
    ezi_m39_process_registration reg;
    if (ezi_m39_load(&EZI_M39_PROCESS_REGISTRATION, q->pl, q->npl, &d, &reg, &err)) {
      bad_payload(c, "a registration that is not a ProcessRegistration", &err, true);
      break;
    }
    const char *clash = conflict(s, c, &reg.units);
    if (clash) {
      EZI_WARN("graph server: process %s register rejected: unit %.200s is owned by another", c->id,
               clash);
      answer_byte(c, EZI_ERROR);
      break;
    }
    char *host = strdup(reg.host);
    if (!host || set_units(p, true, &reg.units, NULL, &changed)) {
      free(host);
      ezi_gs_close(c);
      break;
    }
    free(p->host);
    p->host = host;
    p->pid = reg.pid;
    p->registered = true;
    ezi_gs_traces_owner(c->traces, p->pid, p->host);
    if (changed) ezi_gs_topology_event(s, EZI_M39_PROCESS_CHANGED, NULL, 0, NULL, c->id);
    answer_byte(c, EZI_COMPLETE);
    break;
  }
  case EZI_PROCESS_UPDATE_OWNERSHIP: {
    ezi_m39_ownership_update up;
    if (ezi_m39_load(&EZI_M39_PROCESS_OWNERSHIP_UPDATE, q->pl, q->npl, &d, &up, &err)) {
      bad_payload(c, "an update that is not a ProcessOwnershipUpdate", &err, true);
      break;
    }
    const char *clash = conflict(s, c, &up.added_units);
    if (clash) {
      EZI_WARN("graph server: process %s ownership update rejected: unit %.200s is owned by "
               "another",
               c->id, clash);
      answer_byte(c, EZI_ERROR);
      break;
    }
    if (set_units(p, false, &up.added_units, &up.removed_units, &changed)) {
      ezi_gs_close(c);
      break;
    }
    if (changed) ezi_gs_topology_event(s, EZI_M39_PROCESS_CHANGED, NULL, 0, NULL, c->id);
    answer_byte(c, EZI_COMPLETE);
    break;
  }
  case EZI_PROCESS_SETTINGS_UPDATE: {
    ezi_m39_settings_update up;
    if (ezi_m39_load(&EZI_M39_PROCESS_SETTINGS_UPDATE, q->pl, q->npl, &d, &up, &err)) {
      bad_payload(c, "an update that is not a ProcessSettingsUpdate", &err, true);
      break;
    }
    int rc = EZ_EPROTO;
    if (!has_unit(p, up.component_address))
      EZI_WARN("graph server: process %s reported settings of %.200s, which it does not own", c->id,
               up.component_address);
    else
      rc = ezi_gs_settings_process_update(s, c->id, &up, d);
    answer_byte(c, rc ? EZI_ERROR : EZI_COMPLETE);
    break;
  }
  case EZI_PROCESS_PROFILING_TRACE_UPDATE: {
    ezi_m39_trace_batch tb;
    if (ezi_m39_load(&EZI_M39_PROCESS_PROFILING_TRACE_BATCH, q->pl, q->npl, &d, &tb, &err)) {
      bad_payload(c, "a trace update that is not a ProcessProfilingTraceBatch", &err, false);
      break;
    }
    for (size_t i = 0; i < tb.n_samples; i++)
      ezi_gs_traces_add(c->traces, &tb.samples[i]);
    break;
  }
  case EZI_PROCESS_ROUTE_RESPONSE: on_route_response(s, c, q->pl, q->npl); break;
  default: {
    char what[64];
    snprintf(what, sizeof what, "unknown process command %u", q->cmd);
    ezi_gs_proto_error(c, what);
  }
  }
  ezi_pk_doc_free(d);
}

/* The connection's `closed`: requests routed to it are answered PROCESS_DISCONNECTED, its
 * settings are undone, its traces dropped, and a PROCESS_CHANGED event says so. */
static void process_closed(conn *c) {
  server *s = c->srv;
  gs_process *p = c->proc;
  ezi_gs_traces_free(c->traces);
  c->traces = NULL;
  if (!p) return;
  for (gs_route *r = s->routes, *n; r; r = n) {
    n = r->next;
    if (r->proc != c) continue;
    conn *sess = r->sess;
    char id[37];
    memcpy(id, r->request_id, 37);
    route_free(s, r);
    answer_error(sess, id, EZI_M39_ERR_PROCESS_DISCONNECTED,
                 "Owning process disconnected before response", c->id);
  }
  ezi_gs_settings_process_gone(s, c->id);
  ezi_gs_topology_event(s, EZI_M39_PROCESS_CHANGED, NULL, 0, NULL, c->id);
  for (size_t i = 0; i < p->n_units; i++)
    free(p->units[i]);
  free(p->units);
  free(p->host);
  free(p);
  c->proc = NULL;
}
