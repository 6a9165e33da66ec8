/* ez_profile_parse: the aggregated profile document (ours or the Python reference's) into structs.
 *
 * Strict about the shape, lenient about the fields: the document must be a JSON object whose
 * "publishers" and "channels" are arrays of objects (and a channel's "subscribers" and a
 * publisher's "leases", when present, arrays of objects); anything else is EZ_EPROTO. A field that
 * is absent, null or of the wrong type reads as 0 / NULL; numbers may be integers or reals; unknown
 * fields are ignored. */
#include "base/internal.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Parse state: the first failure wins. */
typedef struct parser {
  int err;
} parser;

/* A string field, strdup'd; NULL if absent or not a string. */
static char *get_str(parser *ps, const json_t *obj, const char *key) {
  const json_t *v = json_object_get(obj, key);
  if (!json_is_string(v)) return NULL;
  char *s = strdup(json_string_value(v));
  if (!s) ps->err = EZ_ENOMEM;
  return s;
}

static double get_num(const json_t *obj, const char *key) {
  const json_t *v = json_object_get(obj, key);
  if (!json_is_number(v)) return 0;
  double d = json_number_value(v);
  return isfinite(d) ? d : 0;
}

/* A non-negative count: negatives read as 0, reals are truncated and capped. */
static uint64_t get_u64(const json_t *obj, const char *key) {
  const json_t *v = json_object_get(obj, key);
  if (json_is_integer(v)) {
    json_int_t i = json_integer_value(v);
    return i > 0 ? (uint64_t)i : 0;
  }
  if (json_is_real(v)) {
    double d = json_real_value(v);
    if (!(d > 0)) return 0;
    if (d >= 18446744073709551616.0) return UINT64_MAX;
    return (uint64_t)d;
  }
  return 0;
}

static int64_t get_i64(const json_t *obj, const char *key) {
  const json_t *v = json_object_get(obj, key);
  if (json_is_integer(v)) return (int64_t)json_integer_value(v);
  if (json_is_real(v)) {
    double d = json_real_value(v);
    if (!(d == d)) return 0;
    if (d >= 9223372036854775807.0) return INT64_MAX;
    if (d <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)d;
  }
  return 0;
}

/* The latency fields of `obj` (a backpressure object or a subscriber entry); obj may be NULL or a
 * non-object, which reads as all zero. */
static void get_latency(const json_t *obj, ez_latency *l) {
  l->avg_ms = get_num(obj, "avg_ms");
  l->max_ms = get_num(obj, "max_ms");
  l->p50_ms = get_num(obj, "p50_ms");
  l->p99_ms = get_num(obj, "p99_ms");
  l->samples = get_u64(obj, "samples");
  l->timed_samples =
      json_object_get(obj, "timed_samples") ? get_u64(obj, "timed_samples") : l->samples;
  l->in_flight = get_u64(obj, "in_flight");
}

/* An array of objects: its length into *n and 0, or EZ_EPROTO. */
static int object_array(const json_t *arr, size_t *n) {
  if (!json_is_array(arr)) return EZ_EPROTO;
  *n = json_array_size(arr);
  for (size_t i = 0; i < *n; i++)
    if (!json_is_object(json_array_get(arr, i))) return EZ_EPROTO;
  return 0;
}

static void parse_pub(parser *ps, const json_t *o, ez_profile_pub *p) {
  p->id = get_str(ps, o, "id");
  p->topic = get_str(ps, o, "topic");
  p->host = get_str(ps, o, "host");
  p->pid = get_i64(o, "pid");
  p->num_buffers = get_u64(o, "num_buffers");
  p->num_channels = get_u64(o, "num_channels");
  p->window_s = get_num(o, "window_s");
  p->message_rate_hz = get_num(o, "message_rate_hz");
  p->byte_rate_per_s = get_num(o, "byte_rate_per_s");
  const json_t *m = json_object_get(o, "messages"), *b = json_object_get(o, "bytes");
  p->messages_total = get_u64(m, "total");
  p->messages_window = get_u64(m, "window");
  p->bytes_total = get_u64(b, "total");
  p->bytes_window = get_u64(b, "window");
  get_latency(json_object_get(o, "backpressure"), &p->backpressure);
  p->dialect = get_str(ps, o, "dialect");
  const json_t *ls = json_object_get(o, "leases");
  if (!ls) return; /* absent: the reference's, or an older one of ours */
  size_t n;
  if (object_array(ls, &n)) {
    if (!ps->err) ps->err = EZ_EPROTO;
    return;
  }
  if (n == 0) return;
  p->leases = calloc(n, sizeof *p->leases);
  if (!p->leases) {
    ps->err = EZ_ENOMEM;
    return;
  }
  p->n_leases = n;
  for (size_t i = 0; i < n; i++) {
    const json_t *lo = json_array_get(ls, i);
    ez_profile_lease *l = &p->leases[i];
    l->channel_id = get_str(ps, lo, "channel_id");
    l->pid = get_i64(lo, "pid");
    l->mode = get_str(ps, lo, "mode");
    l->in_flight = get_u64(lo, "in_flight");
  }
}

static void parse_channel(parser *ps, const json_t *o, ez_profile_channel *c) {
  c->channel_id = get_str(ps, o, "channel_id");
  c->pub_id = get_str(ps, o, "pub_id");
  c->topic = get_str(ps, o, "topic");
  c->mode = get_str(ps, o, "mode");
  c->host = get_str(ps, o, "host");
  c->pid = get_i64(o, "pid");
  c->num_buffers = get_u64(o, "num_buffers");
  c->in_flight = get_u64(o, "in_flight");
  c->window_s = get_num(o, "window_s");
  c->dialect = get_str(ps, o, "dialect");

  const json_t *subs = json_object_get(o, "subscribers");
  if (!subs) return; /* absent: none */
  size_t n;
  if (object_array(subs, &n)) {
    if (!ps->err) ps->err = EZ_EPROTO;
    return;
  }
  if (n == 0) return;
  c->subscribers = calloc(n, sizeof *c->subscribers);
  if (!c->subscribers) {
    ps->err = EZ_ENOMEM;
    return;
  }
  c->n_subscribers = n;
  for (size_t i = 0; i < n; i++) {
    const json_t *so = json_array_get(subs, i);
    ez_profile_subscriber *s = &c->subscribers[i];
    s->subscriber_id = get_str(ps, so, "subscriber_id");
    s->handle = get_str(ps, so, "handle");
    s->message_rate_hz = get_num(so, "message_rate_hz");
    get_latency(so, &s->processing);
  }
}

int ez_profile_parse(const char *json, ez_profile_data *out) {
  if (!out) return EZ_EINVAL;
  memset(out, 0, sizeof *out);
  if (!json) return EZ_EINVAL;

  json_error_t jerr;
  json_t *doc = json_loads(json, 0, &jerr);
  /* jansson reports some (not all) of its allocation failures as such; the rest look like
   * syntax errors. */
  if (!doc) return json_error_code(&jerr) == json_error_out_of_memory ? EZ_ENOMEM : EZ_EPROTO;

  parser ps = {0};
  const json_t *pubs = json_object_get(doc, "publishers"),
               *chans = json_object_get(doc, "channels");
  size_t np = 0, nc = 0;
  if (!json_is_object(doc) || object_array(pubs, &np) || object_array(chans, &nc)) {
    json_decref(doc);
    return EZ_EPROTO;
  }
  out->window_s = get_num(doc, "window_s");
  if (np) {
    out->publishers = calloc(np, sizeof *out->publishers);
    if (!out->publishers)
      ps.err = EZ_ENOMEM;
    else
      out->n_publishers = np;
  }
  if (nc && !ps.err) {
    out->channels = calloc(nc, sizeof *out->channels);
    if (!out->channels)
      ps.err = EZ_ENOMEM;
    else
      out->n_channels = nc;
  }
  for (size_t i = 0; i < out->n_publishers && !ps.err; i++)
    parse_pub(&ps, json_array_get(pubs, i), &out->publishers[i]);
  for (size_t i = 0; i < out->n_channels && !ps.err; i++)
    parse_channel(&ps, json_array_get(chans, i), &out->channels[i]);

  json_decref(doc);
  if (ps.err) ez_profile_data_free(out); /* leaves *out zeroed */
  return ps.err;
}

void ez_profile_data_free(ez_profile_data *p) {
  if (!p) return;
  for (size_t i = 0; i < p->n_publishers; i++) {
    ez_profile_pub *pub = &p->publishers[i];
    free(pub->id);
    free(pub->topic);
    free(pub->host);
    for (size_t j = 0; j < pub->n_leases; j++) {
      free(pub->leases[j].channel_id);
      free(pub->leases[j].mode);
    }
    free(pub->leases);
    free(pub->dialect);
  }
  free(p->publishers);
  for (size_t i = 0; i < p->n_channels; i++) {
    ez_profile_channel *c = &p->channels[i];
    free(c->channel_id);
    free(c->pub_id);
    free(c->topic);
    free(c->mode);
    free(c->host);
    for (size_t j = 0; j < c->n_subscribers; j++) {
      free(c->subscribers[j].subscriber_id);
      free(c->subscribers[j].handle);
    }
    free(c->subscribers);
    free(c->dialect);
  }
  free(p->channels);
  memset(p, 0, sizeof *p);
}
