/* ez_profile on a released-dialect server with sessions (3.9.0 or ours): the seed's profile
 * document gathered from what 3.9 has instead of PROFILE.
 *
 * 3.9.0's graph server has no PROFILE: each process answers GET_PROFILING_SNAPSHOT, routed
 * through a session to the owner of one of its units. A 3.9 process counts its window from its
 * previous snapshot (whoever asked for it), so we ask twice, `window_s` apart, and take the second
 * answer's counts over the window it reports. Each process is asked on a session of its own, all
 * at once, so a silent one costs the profile its timeout once, not once per process.
 *
 * ezmsg-c processes answer too (procclient.c); their snapshot carries our own profile entries
 * (EZI_PROC_PROFILE_ATTR), which are used as they are. They are asked once, for the window
 * (EZI_PROC_WINDOW_ASK): our telemetry keeps it, and another tool's snapshots in between cannot
 * shorten it. On our own server (it answers EZI_GS_OP_PROFILE_TARGETS; an older one of ours
 * marks its snapshots, EZI_GS_MARK_ATTR) the ezmsg-c clients answer PROFILE, and only the other
 * processes are asked; with none, the server's answer is the profile. Every entry says how it was
 * answered: "dialect": "profiling" (PROFILE) or "released" (a process snapshot). */
#include "graph/graphclient.h"
#include "proto/meta39.h"
#include "base/internal.h"
#include "graph/profile39.h"
#include "graph/sessclient.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_ASKED 256 /* processes asked at once (more: their entries are left out, logged) */

typedef struct ask {
  const char *address, *unit;
  double window_s;
  uint64_t deadline;
  int rc;
  ezi_pk_doc *doc; /* the second snapshot's */
  ezi_m39_profiling_snapshot snap;
  const ezi_pk *root;
} ask;

/* One GET_PROFILING_SNAPSHOT: 0 and the parsed snapshot, or an error. */
static int snapshot_once(ezi_sess *s, ask *a, double timeout_s) {
  ezi_pk_doc *d = NULL;
  ezi_m39_control_response r;
  char want[64]; /* (our processes read it: EZI_PROC_WINDOW_ASK) */
  int nw = snprintf(want, sizeof want, "%s%g", EZI_PROC_WINDOW_ASK, a->window_s);
  int rc = ezi_sess_request(s, a->unit, "GET_PROFILING_SNAPSHOT", timeout_s, (uint8_t *)want,
                            (size_t)nw, a->deadline, &d, &r);
  if (!rc && (!r.ok || !r.payload.has)) rc = EZ_ETIMEDOUT; /* TIMEOUT, or gone */
  const ezi_pk *root = NULL;
  if (!rc) rc = ezi_pk_load(r.payload.p, r.payload.len, NULL, &a->doc, &root, NULL);
  if (!rc) rc = ezi_m39_parse(a->doc, &EZI_M39_PROCESS_PROFILING_SNAPSHOT, root, &a->snap, NULL);
  a->root = root;
  ezi_pk_doc_free(d);
  return rc;
}

static void *ask_thread(void *arg) {
  ask *a = arg;
  ezi_sess s;
  a->rc = ezi_sess_open(a->address, a->deadline, &s);
  if (a->rc) return NULL;
  int left = ezi_ms_left(a->deadline);
  double tmo = left < 0 ? 1.0 : left / 1000.0;
  a->rc = snapshot_once(&s, a, tmo); /* the first one starts a 3.9 process's window; ours
                                      * answers over the window asked for at once */
  if (!a->rc && a->window_s > 0 && !ezi_proc_is_ours(a->unit)) {
    ezi_pk_doc_free(a->doc);
    a->doc = NULL;
    struct timespec ts = {(time_t)a->window_s, (long)((a->window_s - (time_t)a->window_s) * 1e9)};
    nanosleep(&ts, NULL);
    left = ezi_ms_left(a->deadline);
    a->rc = left == 0 ? EZ_ETIMEDOUT : snapshot_once(&s, a, left < 0 ? 1.0 : left / 1000.0);
  }
  ezi_sess_close(&s);
  return NULL;
}

/* "topic:uuid" -> the uuid (its last 36 characters), or the whole id. */
static const char *id_of(const char *endpoint) {
  size_t n = strlen(endpoint);
  return n > 37 && endpoint[n - 37] == ':' ? endpoint + n - 36 : endpoint;
}

static const char *kind_name(int k) {
  return k == EZI_M39_CH_LOCAL ? "local"
         : k == EZI_M39_CH_SHM ? "shm"
         : k == EZI_M39_CH_TCP ? "tcp"
                               : "unknown";
}

/* A 3.9 process's snapshot as publisher and channel entries of our schema. */
static void add_snapshot(json_t *pubs, json_t *chans, const ezi_m39_profiling_snapshot *sn) {
  double w = sn->window_seconds;
  for (size_t i = 0; i < sn->n_publishers; i++) {
    const ezi_m39_pub_profile *p = &sn->publishers[i];
    json_t *j = json_object();
    json_object_set_new(j, "type", json_string("publisher"));
    json_object_set_new(j, "id", json_string(id_of(p->endpoint_id)));
    json_object_set_new(j, "topic", json_string(p->topic));
    json_object_set_new(j, "pid", json_integer(sn->pid));
    json_object_set_new(j, "host", json_string(sn->host));
    json_object_set_new(j, "num_buffers", json_integer(p->num_buffers));
    json_object_set_new(j, "window_s", json_real(w));
    json_object_set_new(j, "message_rate_hz", json_real(p->publish_rate_hz_window));
    json_object_set_new(j, "messages",
                        json_pack("{sIsI}", "total", (json_int_t)p->messages_published_total,
                                  "window", (json_int_t)p->messages_published_window));
    json_object_set_new(j, "backpressure",
                        json_pack("{sI}", "in_flight", (json_int_t)p->inflight_messages_current));
    json_object_set_new(j, "endpoint_id", json_string(p->endpoint_id));
    json_object_set_new(j, "process_id", json_string(sn->process_id.s));
    json_object_set_new(j, "dialect", json_string("released"));
    json_array_append_new(pubs, j);
  }
  for (size_t i = 0; i < sn->n_subscribers; i++) {
    const ezi_m39_sub_profile *s = &sn->subscribers[i];
    double rate = w > 0 ? (double)s->messages_received_window / w : 0;
    json_t *sub = json_pack("{sssssfs{sIsI}}", "subscriber_id", id_of(s->endpoint_id), "handle",
                            s->topic, "message_rate_hz", rate, "messages", "total",
                            (json_int_t)s->messages_received_total, "window",
                            (json_int_t)s->messages_received_window);
    json_t *j = json_object();
    json_object_set_new(j, "type", json_string("channel"));
    json_object_set_new(j, "channel_id", json_null()); /* 3.9 reports subscribers, not channels */
    json_object_set_new(j, "topic", json_string(s->topic));
    json_object_set_new(j, "pid", json_integer(sn->pid));
    json_object_set_new(j, "host", json_string(sn->host));
    json_object_set_new(j, "mode", json_string(kind_name(s->channel_kind_last)));
    json_object_set_new(j, "window_s", json_real(w));
    json_object_set_new(j, "subscribers", json_pack("[o]", sub));
    json_object_set_new(j, "process_id", json_string(sn->process_id.s));
    json_object_set_new(j, "dialect", json_string("released"));
    json_array_append_new(chans, j);
  }
}

/* An ezmsg-c process's own entries (EZI_PROC_PROFILE_ATTR: our document as JSON text), with
 * the ids a process snapshot gives (its process_id; a publisher's endpoint_id, topic:uuid). */
static bool add_ours(json_t *pubs, json_t *chans, const ezi_pk *root, const char *process_id) {
  const char *text = ezi_pk_str_of(ezi_pk_attr(root, EZI_PROC_PROFILE_ATTR), NULL);
  if (!text) return false;
  json_t *doc = json_loads(text, 0, NULL);
  json_t *p = json_object_get(doc, "publishers"), *c = json_object_get(doc, "channels");
  size_t i;
  json_t *e;
  json_array_foreach(p, i, e) if (json_is_object(e)) {
    const char *topic = json_string_value(json_object_get(e, "topic"));
    const char *id = json_string_value(json_object_get(e, "id"));
    if (topic && id) json_object_set_new(e, "endpoint_id", json_sprintf("%s:%s", topic, id));
    json_object_set_new(e, "process_id", json_string(process_id));
    json_object_set_new(e, "dialect", json_string("released"));
    json_array_append(pubs, e);
  }
  json_array_foreach(c, i, e) if (json_is_object(e)) {
    json_object_set_new(e, "process_id", json_string(process_id));
    json_object_set_new(e, "dialect", json_string("released"));
    json_array_append(chans, e);
  }
  json_decref(doc);
  return true;
}

/* A channel whose process could not name its topic (it knows its publisher's id only) takes the
 * topic of the publisher entry it names. */
static void channel_topics(json_t *pubs, json_t *chans) {
  size_t i, k;
  json_t *c, *p;
  json_array_foreach(chans, i, c) {
    const char *pub_id = json_string_value(json_object_get(c, "pub_id"));
    if (!pub_id || json_string_value(json_object_get(c, "topic"))) continue;
    json_array_foreach(pubs, k, p) {
      const char *id = json_string_value(json_object_get(p, "id"));
      json_t *topic = json_object_get(p, "topic");
      if (id && json_is_string(topic) && !strcmp(id, pub_id)) {
        json_object_set(c, "topic", topic);
        break;
      }
    }
  }
}

/* Marks every entry of an array with the dialect it answered in. */
static void mark(json_t *arr, const char *dialect) {
  size_t i;
  json_t *e;
  json_array_foreach(arr, i, e) if (json_is_object(e) && !json_object_get(e, "dialect"))
      json_object_set_new(e, "dialect", json_string(dialect));
}

int ezi_profile39(const char *address, double window_s, int timeout_ms, char **json) {
  return ezi_profile39_as(address, window_s, timeout_ms, json, false);
}

/* Asks the server EZI_GS_OP_PROFILE_TARGETS: true if it is ours, with *doc (the caller frees it)
 * holding its "foreign" array of units. False on any other answer (3.9.0's UNROUTABLE_UNIT). */
static bool targets(ezi_sess *s, uint64_t deadline, json_t **doc) {
  ezi_pk_doc *d = NULL;
  ezi_m39_control_response r;
  *doc = NULL;
  int rc = ezi_sess_request(s, EZI_GS_SERVER_UNIT, EZI_GS_OP_PROFILE_TARGETS, 5.0, NULL, 0,
                            deadline, &d, &r);
  if (!rc && r.ok && r.payload.has)
    *doc = json_loadb((const char *)r.payload.p, r.payload.len, 0, NULL);
  ezi_pk_doc_free(d);
  json_t *f = json_object_get(*doc, "foreign");
  size_t i;
  json_t *u;
  bool ok = json_is_array(f);
  json_array_foreach(f, i, u) ok = ok && json_is_string(u);
  if (!ok) {
    json_decref(*doc);
    *doc = NULL;
  }
  return ok;
}

int ezi_profile39_as(const char *address, double window_s, int timeout_ms, char **json,
                     bool as_foreign) {
  uint64_t deadline = ezi_deadline(timeout_ms);
  ezi_sess s;
  int rc = ezi_sess_open(address, deadline, &s);
  if (rc) return rc;
  /* Our server says so, and which processes to ask, at once; otherwise the graph's snapshot
   * lists the processes (and marks a server of ours that does not know that request). */
  json_t *tg = NULL;
  bool ours = !as_foreign && targets(&s, deadline, &tg);
  ezi_pk_doc *sd = NULL;
  ezi_m39_graph_snapshot gs = {0};
  const char **units = NULL;
  size_t n_units = 0;
  if (!ours) {
    rc = ezi_sess_snapshot(&s, deadline, &sd, &gs, &ours);
    ours = ours && !as_foreign;
  }
  ezi_sess_close(&s);
  json_t *foreign = json_object_get(tg, "foreign");
  size_t n_max = tg ? json_array_size(foreign) : gs.n_processes;
  if (!rc && !(units = calloc(n_max ? n_max : 1, sizeof *units))) rc = EZ_ENOMEM;
  for (size_t i = 0; !rc && i < n_max; i++) {
    if (tg) {
      units[n_units++] = json_string_value(json_array_get(foreign, i));
      continue;
    }
    const ezi_m39_snapshot_process *p = &gs.processes[i];
    if (p->units.n && !(ours && ezi_proc_is_ours(p->units.v[0]))) units[n_units++] = p->units.v[0];
  }
  if (!rc && ours && !n_units) { /* nobody but the ezmsg-c clients: the server's answer, as is */
    rc = ezi_profile_request(address, window_s, json, deadline);
    free(units);
    json_decref(tg);
    ezi_pk_doc_free(sd);
    return rc;
  }
  if (rc) {
    free(units);
    json_decref(tg);
    ezi_pk_doc_free(sd);
    return rc;
  }

  json_t *doc = NULL, *pubs = NULL, *chans = NULL;
  if (ours) { /* its ezmsg-c clients answer PROFILE (one write: ezi_profile_request) */
    char *text = NULL;
    rc = ezi_profile_request(address, window_s, &text, deadline);
    if (!rc && !(doc = json_loads(text, 0, NULL))) rc = EZ_EPROTO;
    free(text);
  } else {
    doc = json_pack("{sfs[]s[]}", "window_s", window_s, "publishers", "channels");
    if (!doc) rc = EZ_ENOMEM;
  }
  if (!rc) {
    pubs = json_object_get(doc, "publishers");
    chans = json_object_get(doc, "channels");
    if (!json_is_array(pubs) || !json_is_array(chans)) rc = EZ_EPROTO;
  }
  if (!rc) {
    mark(pubs, "profiling");
    mark(chans, "profiling");
  }
  size_t n = 0;
  ask *asks = rc ? NULL : calloc(n_units ? n_units : 1, sizeof *asks);
  pthread_t *th = asks ? calloc(n_units ? n_units : 1, sizeof *th) : NULL;
  if (!rc && !th) rc = EZ_ENOMEM;
  /* Each process that owns a unit, but on our server the ezmsg-c ones, which answered PROFILE:
   * all at once, with the second snapshot due window_s after the first. */
  uint64_t ask_deadline = ezi_deadline((int)(window_s * 1000) + 1200);
  if (ask_deadline > deadline) ask_deadline = deadline;
  for (size_t i = 0; !rc && i < n_units && n < MAX_ASKED; i++) {
    asks[n] =
        (ask){.address = address, .unit = units[i], .window_s = window_s, .deadline = ask_deadline};
    if (pthread_create(&th[n], NULL, ask_thread, &asks[n]) == 0) n++;
  }
  if (n_units > MAX_ASKED)
    EZI_WARN("profile: %zu processes; only %d are asked", n_units, MAX_ASKED);
  for (size_t i = 0; i < n; i++) {
    pthread_join(th[i], NULL);
    if (asks[i].rc == 0 && !add_ours(pubs, chans, asks[i].root, asks[i].snap.process_id.s))
      add_snapshot(pubs, chans, &asks[i].snap);
    else if (asks[i].rc)
      EZI_DEBUG("profile: process of unit %s did not answer: %s", asks[i].unit,
                ez_strerror(asks[i].rc));
    ezi_pk_doc_free(asks[i].doc);
  }
  if (!rc) channel_topics(pubs, chans);
  free(asks);
  free(th);
  free(units);
  json_decref(tg);
  ezi_pk_doc_free(sd);
  *json = rc ? NULL : json_dumps(doc, JSON_COMPACT);
  json_decref(doc);
  if (!rc && !*json) rc = EZ_ENOMEM;
  return rc;
}
