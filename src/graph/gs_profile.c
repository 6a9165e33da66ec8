/* PROFILE at the graph server (gs_profile.h). The answer is put together from the endpoints' own
 * JSON texts, not re-encoded: each is parsed once, to check that it is an object of the right
 * "type" (what a peer sends is not trusted), and then copied as it came, with "dialect":
 * "profiling" (how it was answered, as ez_profile marks every entry) and, for a channel that did
 * not say it, its "topic" spliced in after its opening brace. */
#include "graph/gs_profile.h"
#include "graph/gs_conn.h"
#include "proto/gsregistry.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

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

/* The entries of one kind, comma-separated, into b: 0 or EZ_ENOMEM. */
static int put_entries(ezi_buf *b, const op *o, bool channels) {
  int rc = 0;
  bool first = true;
  for (size_t i = 0; i < o->n_results; i++) {
    if (!o->results[i].len || o->is_channel[i] != channels) continue;
    if (!first) rc |= put(b, ",");
    rc |= ezi_buf_put(b, o->results[i].data, o->results[i].len);
    first = false;
  }
  return rc;
}

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
  rc |= put_entries(&doc, o, false);
  rc |= put(&doc, "],\"channels\":[");
  rc |= put_entries(&doc, o, true);
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

void ezi_gs_profile(server *s, conn *c, uint64_t window_ms) {
  op *o = ezi_gs_op_new(s, OP_PROFILE, c);
  if (!o) return ezi_gs_close(c);
  o->answer = reply_profile;
  o->window_ms = window_ms;
  size_t n = 0;
  for (conn *k = s->conns; k; k = k->next)
    n += profiled(s, k);
  o->results = calloc(n ? n : 1, sizeof *o->results);
  o->is_channel = calloc(n ? n : 1, sizeof *o->is_channel);
  if (!o->results || !o->is_channel) {
    c->req_op = NULL;
    o->req = NULL;
    ezi_gs_op_finish(o);
    return ezi_gs_close(c);
  }
  o->n_results = n;
  c->st = C_WAIT;
  ezi_buf b = {0};
  ezi_buf_put_u8(&b, EZI_PROFILE);
  ezi_buf_put_u64(&b, window_ms);
  size_t slot = 0;
  for (conn *k = s->conns; k && slot < n; k = k->next) {
    if (!profiled(s, k)) continue;
    o->is_channel[slot] = k->st == C_CHAN;
    if (ezi_gs_wq_push(&k->profile_q, o, slot) == 0) {
      o->remaining++;
      ezi_gs_send(k, &b);
    }
    slot++;
  }
  ezi_buf_free(&b);
  ezi_gs_op_launch(o, PROFILE_TIMEOUT_NS);
}

/* The entry of an answer (text, n bytes; its parse, doc) into *out: "dialect" and, for a channel
 * without one, "topic" spliced in after the opening brace. False when out of memory (or when the
 * text does not begin with the brace, which its parse rules out). */
static bool entry(server *s, const char *text, size_t n, json_t *doc, bool channel, ezi_buf *out) {
  while (n && (*text == ' ' || *text == '\t' || *text == '\n' || *text == '\r'))
    text++, n--; /* (JSON's white space; the object's brace follows) */
  if (!n || *text != '{') return false;
  int rc = put(out, "{");
  if (!json_object_get(doc, "dialect")) rc |= put(out, "\"dialect\":\"profiling\",");
  if (channel && !json_object_get(doc, "topic")) {
    json_t *pid = json_object_get(doc, "pub_id");
    const char *ps = json_is_string(pid) ? json_string_value(pid) : "";
    conn *pub = ezi_gs_find_pub(s, ps, strlen(ps));
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
  /* text[0] is the brace: the object has a key ("type"), so a comma may precede the rest */
  rc |= ezi_buf_put(out, text + 1, n - 1);
  return rc == 0;
}

void ezi_gs_profile_data(server *s, conn *c, const char *json, size_t n) {
  waiter w;
  if (!ezi_gs_wq_pop(&c->profile_q, &w)) return; /* unsolicited: ignore */
  op *o = w.op;
  if (!o->done) {
    json_error_t err;
    json_t *doc = json_loadb(json, n, JSON_REJECT_DUPLICATES, &err);
    bool channel = o->is_channel[w.slot];
    json_t *type = doc ? json_object_get(doc, "type") : NULL;
    if (doc && json_is_object(doc) && json_is_string(type) &&
        !strcmp(json_string_value(type), channel ? "channel" : "publisher")) {
      if (!entry(s, json, n, doc, channel, &o->results[w.slot])) {
        ezi_buf_free(&o->results[w.slot]);
        EZI_WARN_RL("graph server: could not keep the profile of client %s", c->id);
      }
    } else {
      EZI_WARN_RL("graph server: client %s sent an unusable profile", c->id);
    }
    json_decref(doc);
    ezi_gs_op_answer(o);
  }
  ezi_gs_op_unref(o);
}
