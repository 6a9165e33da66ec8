/* The graph view in the Prometheus text exposition format (metrics.h). Names follow Prometheus'
 * conventions: a unit suffix in base units (_seconds, _bytes), _total on counters. Every endpoint
 * series carries topic, pid and endpoint (its id) labels; subscribers also handle and transport.
 * The windowed figures (rates, latencies) are gauges over the profile's window. */
#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A label value: backslash, double quote and newline escaped, control characters dropped. */
static void label_value(FILE *f, const char *s) {
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p == '\\')
      fputs("\\\\", f);
    else if (*p == '"')
      fputs("\\\"", f);
    else if (*p == '\n')
      fputs("\\n", f);
    else if (*p >= 0x20 && *p != 0x7f)
      fputc(*p, f);
  }
}

typedef struct family {
  const char *name, *type, *help;
} family;

static void header(FILE *f, const family *m) {
  fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", m->name, m->help, m->name, m->type);
}

static void pub_labels(FILE *f, const gv_pub *p) {
  fputs("{topic=\"", f);
  label_value(f, p->topic);
  fprintf(f, "\",pid=\"%lld\",endpoint=\"", (long long)p->pid);
  label_value(f, p->id);
  fputs("\"", f);
}

static void sub_labels(FILE *f, const gv_sub *s) {
  fputs("{topic=\"", f);
  label_value(f, s->topic);
  fputs("\",handle=\"", f);
  label_value(f, s->handle);
  fprintf(f, "\",pid=\"%lld\",transport=\"%s\",endpoint=\"", (long long)s->pid,
          s->mode ? s->mode : "idle");
  label_value(f, s->id);
  fputs("\"", f);
}

/* A sample: the labels of endpoint i, an extra label (or NULL), the value. */
static void sample(FILE *f, const family *m, const gv *v, bool pub, size_t i, const char *extra,
                   double value) {
  fputs(m->name, f);
  if (pub)
    pub_labels(f, &v->pubs[i]);
  else
    sub_labels(f, &v->subs[i]);
  if (extra) fprintf(f, ",%s", extra);
  fprintf(f, "} %.9g\n", value);
}

static const family PUB_MSGS = {"ezmsg_publisher_messages_total", "counter",
                                "Messages published since the publisher was created."};
static const family PUB_BYTES = {"ezmsg_publisher_bytes_total", "counter",
                                 "Payload bytes published since the publisher was created."};
static const family PUB_RATE = {"ezmsg_publisher_message_rate_per_second", "gauge",
                                "Messages published per second over the profile window."};
static const family PUB_BP = {"ezmsg_publisher_backpressure_seconds", "gauge",
                              "Lease time (send to release by a channel) over the window: "
                              "stat=avg|p50|p99|max."};
static const family PUB_INFL = {"ezmsg_publisher_leases_in_flight", "gauge",
                                "Message x channel leases not yet released, now."};
static const family PUB_BUFS = {"ezmsg_publisher_buffers", "gauge",
                                "Buffer slots of the publisher (num_buffers)."};
static const family PUB_CHANS = {"ezmsg_publisher_channels", "gauge",
                                 "Channels (subscribing processes) connected now."};
static const family SUB_RATE = {"ezmsg_subscriber_message_rate_per_second", "gauge",
                                "Messages released per second over the profile window."};
static const family SUB_PROC = {"ezmsg_subscriber_processing_seconds", "gauge",
                                "Processing time (hand-over to release) over the window: "
                                "stat=avg|p50|p99|max."};
static const family SUB_INFL = {"ezmsg_subscriber_messages_in_flight", "gauge",
                                "Messages handed to the subscriber and not released, now."};
static const family SUB_CHANS = {"ezmsg_subscriber_channels", "gauge",
                                 "Channels feeding the subscriber (0: idle)."};
static const family TOPIC_RATE = {"ezmsg_topic_message_rate_per_second", "gauge",
                                  "Messages per second a subscriber of the topic receives."};
static const family TOPIC_BYTES = {"ezmsg_topic_bytes_per_second", "gauge",
                                   "Payload bytes per second a subscriber of the topic receives."};
static const family UP = {"ezmsg_up", "gauge",
                          "1 if the graph server answered this scrape's requests, else 0."};
static const family SCRAPE = {"ezmsg_scrape_duration_seconds", "gauge",
                              "Time the profile and topic graph requests of this scrape took."};

static void latencies(FILE *f, const family *m, const gv *v, bool pub) {
  header(f, m);
  size_t n = pub ? v->n_pubs : v->n_subs;
  for (size_t i = 0; i < n; i++) {
    if (pub && !v->pubs[i].answered) continue;
    const ez_latency *l = pub ? &v->pubs[i].bp : &v->subs[i].proc;
    sample(f, m, v, pub, i, "stat=\"avg\"", l->avg_ms / 1e3);
    sample(f, m, v, pub, i, "stat=\"p50\"", l->p50_ms / 1e3);
    sample(f, m, v, pub, i, "stat=\"p99\"", l->p99_ms / 1e3);
    sample(f, m, v, pub, i, "stat=\"max\"", l->max_ms / 1e3);
  }
}

/* Every answered publisher's value of one family. */
#define PUB_FAMILY(m, expr)                                                                        \
  do {                                                                                             \
    header(f, &(m));                                                                               \
    for (size_t i = 0; i < v->n_pubs; i++) {                                                       \
      const gv_pub *p = &v->pubs[i];                                                               \
      if (p->answered) sample(f, &(m), v, true, i, NULL, (double)(expr));                          \
    }                                                                                              \
  } while (0)

#define SUB_FAMILY(m, expr)                                                                        \
  do {                                                                                             \
    header(f, &(m));                                                                               \
    for (size_t i = 0; i < v->n_subs; i++) {                                                       \
      const gv_sub *s = &v->subs[i];                                                               \
      sample(f, &(m), v, false, i, NULL, (double)(expr));                                          \
    }                                                                                              \
  } while (0)

char *metrics_text(const gv *v, bool up, double scrape_s, size_t *len) {
  char *text = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&text, &n);
  if (!f) return NULL;
  header(f, &UP);
  fprintf(f, "%s %d\n", UP.name, up ? 1 : 0);
  header(f, &SCRAPE);
  fprintf(f, "%s %.6f\n", SCRAPE.name, scrape_s);
  if (up && v) {
    PUB_FAMILY(PUB_MSGS, p->messages_total);
    PUB_FAMILY(PUB_BYTES, p->bytes_total);
    PUB_FAMILY(PUB_RATE, p->rate_hz);
    latencies(f, &PUB_BP, v, true);
    PUB_FAMILY(PUB_INFL, p->bp.in_flight);
    PUB_FAMILY(PUB_BUFS, p->num_buffers);
    PUB_FAMILY(PUB_CHANS, p->num_channels);
    SUB_FAMILY(SUB_RATE, s->rate_hz);
    latencies(f, &SUB_PROC, v, false);
    SUB_FAMILY(SUB_INFL, s->proc.in_flight);
    SUB_FAMILY(SUB_CHANS, s->n_chans);
    header(f, &TOPIC_RATE);
    for (size_t i = 0; i < v->n_topics; i++) {
      fprintf(f, "%s{topic=\"", TOPIC_RATE.name);
      label_value(f, v->topics[i].name);
      fprintf(f, "\"} %.9g\n", v->topics[i].rate_hz);
    }
    header(f, &TOPIC_BYTES);
    for (size_t i = 0; i < v->n_topics; i++) {
      fprintf(f, "%s{topic=\"", TOPIC_BYTES.name);
      label_value(f, v->topics[i].name);
      fprintf(f, "\"} %.9g\n", v->topics[i].bytes_per_s);
    }
  }
  if (fclose(f) != 0) {
    free(text);
    return NULL;
  }
  *len = n;
  return text;
}
