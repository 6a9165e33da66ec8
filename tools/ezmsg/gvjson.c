/* The graph view as JSON (graphview.h, gv_json); the shape is documented in docs/dashboard.md. */
#include "graphview.h"

#include "jsonout.h"

static json_t *str_or_null(const char *s) { return s ? json_string(s) : json_null(); }

static json_t *lat_json(const ez_latency *l) {
  json_t *o = json_object();
  json_object_set_new(o, "avg_ms", jo_real(l->avg_ms));
  json_object_set_new(o, "p50_ms", jo_real(l->p50_ms));
  json_object_set_new(o, "p99_ms", jo_real(l->p99_ms));
  json_object_set_new(o, "max_ms", jo_real(l->max_ms));
  json_object_set_new(o, "samples", json_integer((json_int_t)l->samples));
  json_object_set_new(o, "in_flight", json_integer((json_int_t)l->in_flight));
  return o;
}

static json_t *pub_json(const gv_pub *p) {
  json_t *o = json_object();
  json_object_set_new(o, "id", str_or_null(p->id));
  json_object_set_new(o, "topic", str_or_null(p->topic));
  json_object_set_new(o, "pid", json_integer((json_int_t)p->pid));
  json_object_set_new(o, "host", str_or_null(p->host));
  json_object_set_new(o, "answered", json_boolean(p->answered));
  json_object_set_new(o, "num_buffers", json_integer((json_int_t)p->num_buffers));
  json_object_set_new(o, "num_channels", json_integer((json_int_t)p->num_channels));
  json_object_set_new(o, "rate_hz", jo_real(p->rate_hz));
  json_object_set_new(o, "bytes_per_s", jo_real(p->bytes_per_s));
  json_object_set_new(o, "messages_total", json_integer((json_int_t)p->messages_total));
  json_object_set_new(o, "bytes_total", json_integer((json_int_t)p->bytes_total));
  json_object_set_new(o, "backpressure", lat_json(&p->bp));
  json_object_set_new(o, "bottleneck", p->bottleneck[0] ? json_string(p->bottleneck) : json_null());
  return o;
}

static json_t *sub_json(const gv_sub *s) {
  json_t *o = json_object();
  json_object_set_new(o, "id", str_or_null(s->id));
  json_object_set_new(o, "handle", str_or_null(s->handle));
  json_object_set_new(o, "topic", str_or_null(s->topic));
  json_object_set_new(o, "pid", json_integer((json_int_t)s->pid));
  json_object_set_new(o, "host", str_or_null(s->host));
  json_object_set_new(o, "transport", json_string(s->mode ? s->mode : "idle"));
  json_object_set_new(o, "num_channels", json_integer((json_int_t)s->n_chans));
  json_object_set_new(o, "num_buffers", json_integer((json_int_t)s->num_buffers));
  json_object_set_new(o, "rate_hz", jo_real(s->rate_hz));
  json_object_set_new(o, "processing", lat_json(&s->proc));
  json_object_set_new(o, "bottleneck", s->bottleneck[0] ? json_string(s->bottleneck) : json_null());
  return o;
}

static json_t *chan_json(const gv *v, const gv_chan *c) {
  json_t *o = json_object(), *subs = json_array();
  json_object_set_new(o, "id", str_or_null(c->id));
  json_object_set_new(o, "pub_id", str_or_null(c->pub_id));
  json_object_set_new(o, "topic", str_or_null(c->topic));
  json_object_set_new(o, "pid", json_integer((json_int_t)c->pid));
  json_object_set_new(o, "host", str_or_null(c->host));
  json_object_set_new(o, "transport", json_string(c->mode ? c->mode : "unknown"));
  json_object_set_new(o, "num_buffers", json_integer((json_int_t)c->num_buffers));
  json_object_set_new(o, "in_flight", json_integer((json_int_t)c->in_flight));
  for (size_t k = 0; k < c->n_subs; k++)
    json_array_append_new(subs, str_or_null(v->subs[c->subs[k]].id));
  json_object_set_new(o, "subscribers", subs);
  return o;
}

json_t *gv_json(const gv *v) {
  json_t *doc = json_object(), *topics = json_array(), *procs = json_array(), *pubs = json_array(),
         *chans = json_array(), *subs = json_array();
  if (!doc || !topics || !procs || !pubs || !chans || !subs) {
    json_decref(doc);
    json_decref(topics);
    json_decref(procs);
    json_decref(pubs);
    json_decref(chans);
    json_decref(subs);
    return NULL;
  }
  json_object_set_new(doc, "timestamp", json_string(v->timestamp));
  json_object_set_new(doc, "window_s", jo_real(v->window_s));
  json_object_set_new(doc, "profile", json_boolean(v->has_profile));
  json_object_set_new(doc, "registry", json_boolean(v->has_registry));
  for (size_t i = 0; i < v->n_topics; i++) {
    const gv_topic *t = &v->topics[i];
    json_t *o = json_object(), *to = json_array();
    json_object_set_new(o, "topic", json_string(t->name));
    json_object_set_new(o, "rate_hz", jo_real(t->rate_hz));
    json_object_set_new(o, "bytes_per_s", jo_real(t->bytes_per_s));
    json_object_set_new(o, "publishers", json_integer((json_int_t)t->n_pubs));
    json_object_set_new(o, "subscribers", json_integer((json_int_t)t->n_subs));
    for (size_t k = 0; k < t->n_to; k++)
      json_array_append_new(to, json_string(v->topics[t->to[k]].name));
    json_object_set_new(o, "to", to);
    json_array_append_new(topics, o);
  }
  for (size_t i = 0; i < v->n_procs; i++) {
    json_t *o = json_object();
    json_object_set_new(o, "pid", json_integer((json_int_t)v->procs[i].pid));
    json_object_set_new(o, "host", str_or_null(v->procs[i].host));
    json_object_set_new(o, "publishers", json_integer((json_int_t)v->procs[i].n_pubs));
    json_object_set_new(o, "subscribers", json_integer((json_int_t)v->procs[i].n_subs));
    json_array_append_new(procs, o);
  }
  for (size_t i = 0; i < v->n_pubs; i++)
    json_array_append_new(pubs, pub_json(&v->pubs[i]));
  for (size_t i = 0; i < v->n_chans; i++)
    json_array_append_new(chans, chan_json(v, &v->chans[i]));
  for (size_t i = 0; i < v->n_subs; i++)
    json_array_append_new(subs, sub_json(&v->subs[i]));
  json_object_set_new(doc, "topics", topics);
  json_object_set_new(doc, "processes", procs);
  json_object_set_new(doc, "publishers", pubs);
  json_object_set_new(doc, "channels", chans);
  json_object_set_new(doc, "subscribers", subs);
  return doc;
}
