/* PROFILE at the graph server (gs_profile.h).
 *
 * Who is asked: an endpoint that told us its ezmsg-c context (X_CTX) is asked through that
 * context: one of its connections gets X_PROFILE_CTX and answers for every publisher and channel
 * of the context (X_PROFILE_PART each, then X_PROFILE_END), so a process wakes once per profile
 * instead of once per endpoint. Any other endpoint (Python's, an older ezmsg-c's, and every one
 * when the profile traces, which each endpoint does on its own) gets PROFILE and answers
 * PROFILE_DATA.
 *
 * The answer is put together from the endpoints' own JSON texts, not re-encoded: each is checked
 * (proto/profentry.h: an object of the right "type" that no reader of the whole can choke on;
 * what a peer sends is not trusted), and then copied as it came, with "dialect": "profiling" (how
 * it was answered, as ez_profile marks every entry) and, for a channel that did not say it, its
 * "topic" spliced in after its opening brace. */
#include "graph/gs_profile.h"
#include "base/trace.h"
#include "graph/gs_conn.h"
#include "proto/ctxprofile.h"
#include "proto/gsregistry.h"
#include "proto/profentry.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

enum { ASK_PUB, ASK_CHAN, ASK_CTX }; /* op->slot_kind */

/* Ours: every registered publisher and subscriber, as "registry" (gsregistry.h): its JSON text
 * (NULL when out of memory). */
static char *registry_text(server *s) {
  ezi_gs_client *v = calloc(s->n_conns ? s->n_conns : 1, sizeof *v);
  size_t n = 0;
  for (conn *c = s->conns; v && c && n < s->n_conns; c = c->next)
    if (c->st == C_PUB || c->st == C_SUB)
      v[n++] =
          (ezi_gs_client){c->st == C_PUB, c->id, c->topic, c->peer, c->port, c->pid, c->handle};
  json_t *reg = v ? ezi_gs_registry_json(v, n) : NULL;
  char *text = reg ? json_dumps(reg, JSON_COMPACT) : NULL;
  json_decref(reg);
  free(v);
  return text;
}

/* Appends a C string: 0 or EZ_ENOMEM. */
static int put(ezi_buf *b, const char *s) { return ezi_buf_put(b, s, strlen(s)); }

/* A finished PROFILE op (its `answer`): the profiles gathered, and the registry, to the
 * requester. */
static void reply_profile(op *o) {
  json_t *w = json_real((double)o->window_ms / 1000.0);
  char *window = w ? json_dumps(w, JSON_ENCODE_ANY) : NULL;
  char *registry = registry_text(o->srv);
  json_decref(w);
  ezi_buf doc = {0};
  int rc = !window || !registry ? EZ_ENOMEM : 0;
  rc |= put(&doc, "{\"window_s\":");
  rc |= put(&doc, window ? window : "0.0");
  rc |= put(&doc, ",\"publishers\":[");
  rc |= ezi_buf_put(&doc, ezi_buf_head(&o->pubs), ezi_buf_pending(&o->pubs));
  rc |= put(&doc, "],\"channels\":[");
  rc |= ezi_buf_put(&doc, ezi_buf_head(&o->chans), ezi_buf_pending(&o->chans));
  rc |= put(&doc, "],\"registry\":");
  rc |= put(&doc, registry ? registry : "{}");
  rc |= put(&doc, "}");
  free(window);
  free(registry);
  ezi_buf b = {0};
  if (rc || ezi_buf_put_u8(&b, EZI_PROFILE_DATA) || ezi_buf_put_u64(&b, doc.len) ||
      ezi_buf_put(&b, doc.data, doc.len) || ezi_buf_put_u8(&b, EZI_COMPLETE)) {
    ezi_buf_free(&doc);
    ezi_buf_free(&b);
    return ezi_gs_close(o->req);
  }
  ezi_buf_free(&doc);
  ezi_gs_send(o->req, &b);
  ezi_buf_free(&b);
  ezi_gs_finish(o->req);
}

/* Whether PROFILE goes to k: publishers and channels of ezmsg-c, and in the profiling dialect
 * those of Python too. Never to a released-dialect Python client: 3.9 reads the command and its
 * u64 as commands of its own (its PAUSE, SYNC, ...). */
static bool profiled(const server *s, const conn *k) {
  return (k->st == C_PUB || k->st == C_CHAN) && (k->ezc || s->dialect == EZ_DIALECT_PROFILING);
}

static int by_ctx(const void *a, const void *b) {
  const conn *x = *(conn *const *)a, *y = *(conn *const *)b;
  if (x->has_ctx != y->has_ctx) return x->has_ctx ? -1 : 1;
  return x->has_ctx ? memcmp(x->ctx, y->ctx, sizeof x->ctx) : 0;
}

/* Asks k (slot `slot` of o, kind `kind`) with the frame in b: 0, or EZ_ENOMEM (not asked). */
static int ask(op *o, conn *k, size_t slot, uint8_t kind, const ezi_buf *b) {
  o->slot_kind[slot] = kind;
  if (ezi_gs_wq_push(&k->profile_q, o, slot)) return EZ_ENOMEM;
  o->remaining++;
  ezi_gs_send(k, b);
  return 0;
}

void ezi_gs_profile(server *s, conn *c, uint64_t window_ms) {
  op *o = ezi_gs_op_new(s, OP_PROFILE, c);
  if (!o) return ezi_gs_close(c);
  o->answer = reply_profile;
  o->window_ms = window_ms;
  size_t n = 0;
  for (conn *k = s->conns; k; k = k->next)
    n += profiled(s, k);
  conn **v = calloc(n ? n : 1, sizeof *v);
  o->slot_kind = calloc(n ? n : 1, sizeof *o->slot_kind);
  o->parts_left = calloc(n ? n : 1, sizeof *o->parts_left);
  if (!v || !o->slot_kind || !o->parts_left) {
    free(v);
    c->req_op = NULL;
    o->req = NULL;
    ezi_gs_op_finish(o);
    return ezi_gs_close(c);
  }
  n = 0;
  for (conn *k = s->conns; k; k = k->next)
    if (profiled(s, k)) v[n++] = k;
  /* A traced profile asks each endpoint: each traces its own metrics (base/trace.h). */
  bool by_context = window_ms < EZI_TRACE_POLL_MS;
  if (by_context) qsort(v, n, sizeof *v, by_ctx); /* each context's connections together */
  c->st = C_WAIT;
  ezi_buf one = {0}, all = {0};
  ezi_buf_put_u8(&one, EZI_PROFILE);
  ezi_buf_put_u64(&one, window_ms);
  ezi_buf_put_u8(&all, EZI_X_PROFILE_CTX);
  ezi_buf_put_u64(&all, window_ms);
  size_t slot = 0;
  for (size_t i = 0; i < n;) {
    conn *k = v[i];
    size_t j = i + 1;
    if (!by_context || !k->has_ctx) {
      ask(o, k, slot++, k->st == C_CHAN ? ASK_CHAN : ASK_PUB, &one);
      i = j;
      continue;
    }
    while (j < n && v[j]->has_ctx && !memcmp(v[j]->ctx, k->ctx, sizeof k->ctx))
      j++;
    o->parts_left[slot] = EZI_CTX_PARTS_MAX(j - i);
    ask(o, k, slot++, ASK_CTX, &all); /* the context's first connection answers for all */
    i = j;
  }
  ezi_buf_free(&one);
  ezi_buf_free(&all);
  free(v);
  ezi_gs_op_launch(o, PROFILE_TIMEOUT_NS);
}

/* The entry of an answer (text, n bytes, checked: e) into *out (after a comma if it holds entries
 * already): "dialect" and, for a channel without one, "topic" spliced in after the opening brace.
 * False when out of memory. */
static bool entry(server *s, const char *text, size_t n, const ezi_prof_entry *e, ezi_buf *out) {
  size_t was = out->len;
  int rc = put(out, ezi_buf_pending(out) ? ",{" : "{");
  if (!e->has_dialect) rc |= put(out, "\"dialect\":\"profiling\",");
  if (e->type == EZI_PE_CHANNEL && !e->has_topic) {
    conn *pub = ezi_gs_find_pub(s, e->pub_id, strlen(e->pub_id));
    json_t *topic = pub ? json_string(pub->topic) : NULL;
    char *t = topic ? json_dumps(topic, JSON_ENCODE_ANY) : NULL;
    if (t) {
      rc |= put(out, "\"topic\":");
      rc |= put(out, t);
      rc |= put(out, ",");
    }
    free(t);
    json_decref(topic);
  }
  /* the object has a key ("type"), so a comma may precede the rest after its brace */
  rc |= ezi_buf_put(out, text + e->brace + 1, n - e->brace - 1);
  if (rc) out->len = was; /* (what it had stays whole) */
  return rc == 0;
}

/* One endpoint's JSON (json, n bytes) from c, for op o: kept if it is an object whose "type" is
 * `want` (EZI_PE_OTHER: publisher or channel). */
static void take(server *s, conn *c, op *o, const char *json, size_t n, int want) {
  ezi_prof_entry e;
  const char *why = NULL;
  int rc = ezi_prof_entry_check(json, n, &e, &why);
  if (!rc && (e.type == EZI_PE_OTHER || (want != EZI_PE_OTHER && e.type != want)))
    why = "not a profile of its kind", rc = EZ_EPROTO;
  if (rc) {
    EZI_WARN_RL("graph server: client %s sent an unusable profile (%s)", c->id,
                why ? why : ez_strerror(rc));
  } else if (!entry(s, json, n, &e, e.type == EZI_PE_CHANNEL ? &o->chans : &o->pubs)) {
    EZI_WARN_RL("graph server: could not keep the profile of client %s", c->id);
  }
}

void ezi_gs_profile_data(server *s, conn *c, const char *json, size_t n) {
  waiter w;
  if (!ezi_gs_wq_pop(&c->profile_q, &w)) return; /* unsolicited: ignore */
  op *o = w.op;
  if (!o->done) {
    uint8_t kind = o->slot_kind[w.slot];
    if (kind == ASK_CTX)
      EZI_WARN_RL("graph server: client %s answered its context's profile with PROFILE_DATA",
                  c->id);
    else
      take(s, c, o, json, n, kind == ASK_CHAN ? EZI_PE_CHANNEL : EZI_PE_PUBLISHER);
    ezi_gs_op_answer(o);
  }
  ezi_gs_op_unref(o);
}

void ezi_gs_profile_part(server *s, conn *c, const char *json, size_t n) {
  const waiter *w = ezi_gs_wq_peek(&c->profile_q);
  if (!w || w->op->slot_kind[w->slot] != ASK_CTX) return; /* not asked for one: ignore */
  op *o = w->op;
  if (o->done) return;
  if (!o->parts_left[w->slot]) {
    EZI_WARN_RL("graph server: client %s sent more profiles than its context has endpoints", c->id);
    return;
  }
  o->parts_left[w->slot]--;
  take(s, c, o, json, n, EZI_PE_OTHER);
}

void ezi_gs_profile_end(server *s, conn *c) {
  (void)s;
  const waiter *head = ezi_gs_wq_peek(&c->profile_q);
  if (!head || head->op->slot_kind[head->slot] != ASK_CTX) return; /* not asked: ignore */
  waiter w;
  ezi_gs_wq_pop(&c->profile_q, &w);
  if (!w.op->done) ezi_gs_op_answer(w.op);
  ezi_gs_op_unref(w.op);
}

void ezi_gs_profile_ctx(server *s, conn *c, const uint8_t *payload) {
  (void)s;
  if (!ezi_xctx_decode(payload, c->ctx)) return ezi_gs_proto_error(c, "a malformed X_CTX");
  c->has_ctx = true;
}
