/* Sliding windows (a ring of time buckets with log-scale histograms) and the JSON snapshots built
 * from them. See telemetry.h for the semantics and error bounds. */
#include "base/telemetry.h"
#include "base/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

ezi_window *ezi_window_new(void) {
  size_t n = (sizeof(ezi_window) + 63) / 64 * 64; /* aligned_alloc wants a multiple */
  ezi_window *w = aligned_alloc(64, n);
  if (w) memset(w, 0, n);
  return w;
}

void ezi_window_free(ezi_window *w) { free(w); }

double ezi_clamp_window(double window_s) {
  if (!(window_s > 0)) return 0; /* NaN, zero, negative */
  if (window_s > EZ_PROFILE_MAX_WINDOW_S) return EZ_PROFILE_MAX_WINDOW_S;
  return window_s;
}

#ifndef EZ_NO_TELEMETRY

_Static_assert(sizeof(ezi_window_bucket) == 808, "a bucket should stay 808 bytes");
/* 10 s (EZ_PROFILE_MAX_WINDOW_S) plus the half bucket of slack must fit in the ring. */
_Static_assert(EZI_WINDOW_BUCKETS *EZI_WINDOW_BUCKET_NS >=
                   10000000000ull + EZI_WINDOW_BUCKET_NS / 2,
               "the ring must cover the longest window plus the half bucket of slack");

/* The value reported for a bin: the geometric midpoint of its range, 2^(k + (sub + 1/2) / 4). */
static double bin_value(unsigned bin) {
  static const double mid[EZI_WINDOW_SUBBINS] = {1.0905077326652577, 1.2968395546510096,
                                                 1.5422108254079407, 1.8340080864093424};
  if (bin == 0) return 0;
  unsigned k = (bin - 1) / EZI_WINDOW_SUBBINS, sub = (bin - 1) % EZI_WINDOW_SUBBINS;
  return ldexp(mid[sub], (int)k);
}

void ezi_window_init(ezi_window *w) { memset(w, 0, sizeof *w); }

/* The estimate for the rank-th smallest value (1-based) of a merged histogram. */
static double percentile(const uint64_t *hist, uint64_t rank, uint64_t max) {
  uint64_t seen = 0;
  for (unsigned i = 0; i < EZI_WINDOW_BINS; i++) {
    seen += hist[i];
    if (seen >= rank) {
      if (i == EZI_WINDOW_BINS - 1) return (double)max; /* the open-ended top bin */
      double v = bin_value(i);
      return v < (double)max ? v : (double)max;
    }
  }
  return (double)max; /* not reached: rank <= total */
}

void ezi_window_query(const ezi_window *w, uint64_t now_ns, double window_s,
                      ezi_window_stats *out) {
  memset(out, 0, sizeof *out);
  out->window_s = ezi_clamp_window(window_s);
  uint64_t span = (uint64_t)(out->window_s * 1e9 + 0.5);
  if (!w || span == 0) return;

  /* Buckets e in [first, last]: the current one, and older ones whose midpoint
   * e*width + width/2 lies after the cutoff now - span. */
  const uint64_t width = EZI_WINDOW_BUCKET_NS, half = EZI_WINDOW_BUCKET_NS / 2;
  uint64_t last = now_ns / width, first = 0;
  if (now_ns > span && now_ns - span >= half) first = (now_ns - span - half) / width + 1;
  if (first > last) first = last;
  if (last - first >= EZI_WINDOW_BUCKETS) first = last - (EZI_WINDOW_BUCKETS - 1); /* safety */

  uint64_t hist[EZI_WINDOW_BINS] = {0};
  uint64_t count = 0, timed = 0, sum = 0, max = 0;
  for (uint64_t e = first; e <= last; e++) {
    const ezi_window_bucket *b = &w->buckets[e % EZI_WINDOW_BUCKETS];
    if (b->epoch != e || b->count == 0) continue; /* stale or empty */
    count += b->count;
    timed += b->timed;
    if (__builtin_add_overflow(sum, b->sum, &sum)) sum = UINT64_MAX;
    if (b->max > max) max = b->max;
    for (unsigned i = 0; i < EZI_WINDOW_BINS; i++)
      hist[i] += b->hist[i];
  }
  if (count == 0) return;

  out->count = count;
  out->timed = timed;
  out->sum = (double)sum;
  if (timed == 0) return;
  out->avg = out->sum / (double)timed;
  out->max = (double)max;
  out->p50 = percentile(hist, (timed + 1) / 2, max);         /* ceil(0.50 n) */
  out->p99 = percentile(hist, (99 * timed + 99) / 100, max); /* ceil(0.99 n) */
}

#else /* EZ_NO_TELEMETRY */

void ezi_window_query(const ezi_window *w, uint64_t now_ns, double window_s,
                      ezi_window_stats *out) {
  (void)w;
  (void)now_ns;
  memset(out, 0, sizeof *out);
  out->window_s = ezi_clamp_window(window_s);
}

#endif /* EZ_NO_TELEMETRY */

/* ---- JSON ---------------------------------------------------------------------------------- */

/* json_real refuses non-finite numbers; we never want to fail a snapshot over one. */
static json_t *jreal(double x) { return json_real(isfinite(x) ? x : 0.0); }

static json_t *jint(uint64_t v) { return json_integer(v > INT64_MAX ? INT64_MAX : (json_int_t)v); }

/* A count held in a double (a byte sum) as an integer. */
static json_t *jint_d(double x) {
  if (!(x > 0)) return json_integer(0);
  if (x >= 9223372036854775807.0) return json_integer(INT64_MAX);
  return json_integer((json_int_t)x);
}

/* A C string as a JSON string; NULL gives null. jansson only takes valid UTF-8, so a label that
 * is not is written with its non-ASCII bytes replaced by '?'. */
static json_t *jstr(const char *s) {
  if (!s) return json_null();
  json_t *j = json_string(s);
  if (j) return j;
  size_t n = strlen(s);
  char *copy = malloc(n + 1);
  if (!copy) return NULL;
  for (size_t i = 0; i <= n; i++)
    copy[i] = (unsigned char)s[i] >= 0x80 ? '?' : s[i];
  j = json_string(copy);
  free(copy);
  return j;
}

/* json_object_set_new takes `val` in every case (a NULL val is an error), so a chain of these
 * needs only one check at the end. Returns nonzero on failure. */
static int put(json_t *obj, const char *key, json_t *val) {
  return json_object_set_new(obj, key, val) != 0;
}

static json_t *finish(json_t *obj, int bad) {
  if (bad) {
    json_decref(obj);
    return NULL;
  }
  return obj;
}

/* Adds the avg/max/p50/p99 (ms) and samples of a window of ns durations to obj. */
static int put_latency(json_t *obj, const ezi_window_stats *s) {
  static const ezi_window_stats none;
  if (!s || s->count == 0) s = &none;
  int bad = 0;
  bad |= put(obj, "avg_ms", jreal(s->avg / 1e6));
  bad |= put(obj, "max_ms", jreal(s->max / 1e6));
  bad |= put(obj, "p50_ms", jreal(s->p50 / 1e6));
  bad |= put(obj, "p99_ms", jreal(s->p99 / 1e6));
  bad |= put(obj, "samples", jint(s->count));
  bad |= put(obj, "timed_samples", jint(s->timed));
  return bad;
}

json_t *ezi_latency_json(const ezi_window_stats *s) {
  json_t *obj = json_object();
  if (!obj) return NULL;
  return finish(obj, put_latency(obj, s));
}

static double rate(double n, double window_s) { return window_s > 0 ? n / window_s : 0.0; }

json_t *ezi_pub_tel_json(const ezi_window *msgs, const ezi_window *bp, uint64_t total_msgs,
                         uint64_t total_bytes, uint64_t bp_in_flight, uint64_t now_ns,
                         double window_s) {
  ezi_window_stats m, b;
  ezi_window_query(msgs, now_ns, window_s, &m);
  ezi_window_query(bp, now_ns, window_s, &b);
  double win = m.window_s;

  json_t *obj = json_object(), *jm = json_object(), *jb = json_object(), *jbp = json_object();
  int bad = !obj || !jm || !jb || !jbp;
  if (bad) {
    json_decref(obj);
    json_decref(jm);
    json_decref(jb);
    json_decref(jbp);
    return NULL;
  }
  bad |= put(jm, "total", jint(total_msgs));
  bad |= put(jm, "window", jint(m.count));
  bad |= put(jb, "total", jint(total_bytes));
  bad |= put(jb, "window", jint_d(m.sum));
  bad |= put_latency(jbp, &b);
  bad |= put(jbp, "in_flight", jint(bp_in_flight));

  bad |= put(obj, "window_s", jreal(win));
  bad |= put(obj, "message_rate_hz", jreal(rate((double)m.count, win)));
  bad |= put(obj, "byte_rate_per_s", jreal(rate(m.sum, win)));
  bad |= put(obj, "messages", jm);
  bad |= put(obj, "bytes", jb);
  bad |= put(obj, "backpressure", jbp);
  return finish(obj, bad);
}

json_t *ezi_sub_tel_json(const ezi_window *proc, const char *subscriber_id, const char *handle,
                         uint64_t in_flight, uint64_t now_ns, double window_s) {
  ezi_window_stats s;
  ezi_window_query(proc, now_ns, window_s, &s);
  json_t *obj = json_object();
  if (!obj) return NULL;
  int bad = 0;
  bad |= put(obj, "subscriber_id", jstr(subscriber_id));
  bad |= put(obj, "handle", jstr(handle));
  bad |= put_latency(obj, &s);
  bad |= put(obj, "message_rate_hz", jreal(rate((double)s.count, s.window_s)));
  bad |= put(obj, "in_flight", jint(in_flight));
  return finish(obj, bad);
}
