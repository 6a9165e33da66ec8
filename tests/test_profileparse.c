/* ez_profile_parse / ez_profile_data_free: the Python reference's documents, ours (with extra
 * fields, and as our own telemetry builders write them), wrong types and malformed input. */
#include "harness.h"
#include "base/telemetry.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void assert_near(double got, double want) {
  if (!(fabs(got - want) <= 1e-9 * (fabs(want) + 1))) fail_msg("got %.17g, want %.17g", got, want);
}

/* The struct is all zero bytes. */
static void assert_zeroed(const ez_profile_data *p) {
  static const ez_profile_data zero;
  assert_memory_equal(p, &zero, sizeof zero);
}

/* As the reference writes it (json.dumps of the server's aggregation): no p50/p99/host/
 * num_channels, a null handle, ints where a float happens to be whole. */
static const char reference_doc[] =
    "{\"window_s\": 2.0, \"publishers\": [{\"window_s\": 2.0, \"message_rate_hz\": 50.0, "
    "\"byte_rate_per_s\": 51200.0, \"messages\": {\"total\": 1234, \"window\": 100}, "
    "\"bytes\": {\"total\": 1263616, \"window\": 102400}, \"backpressure\": {\"avg_ms\": 0.25, "
    "\"max_ms\": 1.5, \"samples\": 100, \"in_flight\": 2}, \"type\": \"publisher\", "
    "\"id\": \"6f1c2f0e-8a4b-11ee-b9d1-0242ac120002\", \"topic\": \"/SRC/OUT\", \"pid\": 4242, "
    "\"num_buffers\": 32}], "
    "\"channels\": [{\"window_s\": 2, \"subscribers\": [{\"subscriber_id\": "
    "\"7a0d1b2c-8a4b-11ee-b9d1-0242ac120002\", \"handle\": \"/SINK/IN\", \"avg_ms\": 0.1, "
    "\"max_ms\": 0.4, \"samples\": 100, \"message_rate_hz\": 50.0, \"in_flight\": 1}, "
    "{\"subscriber_id\": \"8b1e2c3d-8a4b-11ee-b9d1-0242ac120002\", \"handle\": null, "
    "\"avg_ms\": 0, \"max_ms\": 0.0, \"samples\": 0, \"message_rate_hz\": 0.0, \"in_flight\": 0}], "
    "\"in_flight\": 1, \"type\": \"channel\", \"channel_id\": "
    "\"9c2f3d4e-8a4b-11ee-b9d1-0242ac120002\", \"pub_id\": "
    "\"6f1c2f0e-8a4b-11ee-b9d1-0242ac120002\", \"pid\": 4243, \"num_buffers\": 32, "
    "\"mode\": \"shm\", \"topic\": \"/SRC/OUT\"}]}";

static void test_reference_document(void **state) {
  (void)state;
  ez_profile_data d;
  memset(&d, 0xa5, sizeof d);
  assert_int_equal(ez_profile_parse(reference_doc, &d), EZ_OK);
  assert_near(d.window_s, 2.0);
  assert_int_equal(d.n_publishers, 1);
  assert_int_equal(d.n_channels, 1);

  const ez_profile_pub *p = &d.publishers[0];
  assert_string_equal(p->id, "6f1c2f0e-8a4b-11ee-b9d1-0242ac120002");
  assert_string_equal(p->topic, "/SRC/OUT");
  assert_null(p->host);
  assert_int_equal(p->pid, 4242);
  assert_int_equal(p->num_buffers, 32);
  assert_int_equal(p->num_channels, 0);
  assert_near(p->window_s, 2.0);
  assert_near(p->message_rate_hz, 50.0);
  assert_near(p->byte_rate_per_s, 51200.0);
  assert_int_equal(p->messages_total, 1234);
  assert_int_equal(p->messages_window, 100);
  assert_int_equal(p->bytes_total, 1263616);
  assert_int_equal(p->bytes_window, 102400);
  assert_near(p->backpressure.avg_ms, 0.25);
  assert_near(p->backpressure.max_ms, 1.5);
  assert_true(p->backpressure.p50_ms == 0 && p->backpressure.p99_ms == 0);
  assert_int_equal(p->backpressure.samples, 100);
  assert_int_equal(p->backpressure.in_flight, 2);

  const ez_profile_channel *c = &d.channels[0];
  assert_string_equal(c->channel_id, "9c2f3d4e-8a4b-11ee-b9d1-0242ac120002");
  assert_string_equal(c->pub_id, "6f1c2f0e-8a4b-11ee-b9d1-0242ac120002");
  assert_string_equal(c->topic, "/SRC/OUT");
  assert_string_equal(c->mode, "shm");
  assert_null(c->host);
  assert_int_equal(c->pid, 4243);
  assert_int_equal(c->num_buffers, 32);
  assert_int_equal(c->in_flight, 1);
  assert_near(c->window_s, 2.0); /* written as an int */
  assert_int_equal(c->n_subscribers, 2);

  const ez_profile_subscriber *s0 = &c->subscribers[0], *s1 = &c->subscribers[1];
  assert_string_equal(s0->subscriber_id, "7a0d1b2c-8a4b-11ee-b9d1-0242ac120002");
  assert_string_equal(s0->handle, "/SINK/IN");
  assert_near(s0->message_rate_hz, 50.0);
  assert_near(s0->processing.avg_ms, 0.1);
  assert_near(s0->processing.max_ms, 0.4);
  assert_true(s0->processing.p50_ms == 0 && s0->processing.p99_ms == 0);
  assert_int_equal(s0->processing.samples, 100);
  assert_int_equal(s0->processing.in_flight, 1);
  assert_string_equal(s1->subscriber_id, "8b1e2c3d-8a4b-11ee-b9d1-0242ac120002");
  assert_null(s1->handle);
  assert_true(s1->processing.avg_ms == 0 && s1->processing.samples == 0);

  ez_profile_data_free(&d);
  assert_zeroed(&d);
}

/* Ours: the same plus p50/p99, host, num_channels, and fields nobody knows yet. */
static void test_our_document(void **state) {
  (void)state;
  const char *doc =
      "{\"window_s\": 0.5, \"future\": [1, 2], \"publishers\": ["
      "{\"type\": \"publisher\", \"id\": \"p1\", \"topic\": \"A\", \"pid\": 1, \"host\": \"h1\", "
      "\"num_buffers\": 4, \"num_channels\": 3, \"window_s\": 0.5, \"message_rate_hz\": 1000.5, "
      "\"byte_rate_per_s\": 2e6, \"messages\": {\"total\": 9007199254740993, \"window\": 500}, "
      "\"bytes\": {\"total\": 9223372036854775807, \"window\": 1000000}, "
      "\"backpressure\": {\"avg_ms\": 0.01, \"max_ms\": 0.2, \"p50_ms\": 0.009, \"p99_ms\": 0.15, "
      "\"samples\": 500, \"in_flight\": 0, \"new\": true}},"
      "{\"type\": \"publisher\", \"id\": \"p2\"}],"
      "\"channels\": ["
      "{\"type\": \"channel\", \"channel_id\": \"c1\", \"pub_id\": \"p1\", \"topic\": \"A\", "
      "\"pid\": 2, \"host\": \"h2\", \"num_buffers\": 4, \"mode\": \"local\", \"window_s\": 0.5, "
      "\"in_flight\": 0, \"subscribers\": [{\"subscriber_id\": \"s1\", \"handle\": \"A\", "
      "\"avg_ms\": 0.02, \"max_ms\": 0.3, \"p50_ms\": 0.018, \"p99_ms\": 0.29, \"samples\": 500, "
      "\"message_rate_hz\": 1000.0, \"in_flight\": 0}]},"
      "{\"channel_id\": \"c2\", \"subscribers\": []},"
      "{\"channel_id\": \"c3\"}]}";
  ez_profile_data d;
  assert_int_equal(ez_profile_parse(doc, &d), EZ_OK);
  assert_near(d.window_s, 0.5);
  assert_int_equal(d.n_publishers, 2);
  assert_int_equal(d.n_channels, 3);

  const ez_profile_pub *p = &d.publishers[0];
  assert_string_equal(p->id, "p1");
  assert_string_equal(p->host, "h1");
  assert_int_equal(p->num_channels, 3);
  assert_near(p->message_rate_hz, 1000.5);
  assert_near(p->byte_rate_per_s, 2e6);
  assert_true(p->messages_total == 9007199254740993ull); /* exact beyond 2^53 */
  assert_true(p->bytes_total == 9223372036854775807ull);
  assert_near(p->backpressure.p50_ms, 0.009);
  assert_near(p->backpressure.p99_ms, 0.15);
  assert_int_equal(p->backpressure.samples, 500);
  /* A sparse entry: everything else zero / NULL. */
  p = &d.publishers[1];
  assert_string_equal(p->id, "p2");
  assert_null(p->topic);
  assert_null(p->host);
  assert_true(p->pid == 0 && p->num_buffers == 0 && p->messages_total == 0);
  assert_true(p->backpressure.avg_ms == 0 && p->backpressure.samples == 0);

  const ez_profile_channel *c = &d.channels[0];
  assert_string_equal(c->host, "h2");
  assert_string_equal(c->mode, "local");
  assert_int_equal(c->n_subscribers, 1);
  assert_near(c->subscribers[0].processing.p50_ms, 0.018);
  assert_near(c->subscribers[0].processing.p99_ms, 0.29);
  assert_near(c->subscribers[0].message_rate_hz, 1000.0);
  assert_string_equal(d.channels[1].channel_id, "c2");
  assert_int_equal(d.channels[1].n_subscribers, 0);
  assert_null(d.channels[1].subscribers);
  assert_int_equal(d.channels[2].n_subscribers, 0);
  assert_null(d.channels[2].mode);

  ez_profile_data_free(&d);
  assert_zeroed(&d);
}

static void test_empty_document(void **state) {
  (void)state;
  ez_profile_data d;
  assert_int_equal(
      ez_profile_parse("{\"window_s\": 2.0, \"publishers\": [], \"channels\": []}", &d), EZ_OK);
  assert_near(d.window_s, 2.0);
  assert_int_equal(d.n_publishers, 0);
  assert_int_equal(d.n_channels, 0);
  assert_null(d.publishers);
  assert_null(d.channels);
  ez_profile_data_free(&d);
  /* window_s is optional like any field. */
  assert_int_equal(ez_profile_parse(" {\"publishers\":[],\"channels\":[]} ", &d), EZ_OK);
  assert_true(d.window_s == 0);
  ez_profile_data_free(&d);
}

/* Wrong-typed and out-of-range fields read as zero / NULL (or are clamped); nothing crashes. */
static void test_wrong_types(void **state) {
  (void)state;
  const char *doc =
      "{\"window_s\": \"2\", \"publishers\": [{\"id\": 5, \"topic\": null, \"host\": [], "
      "\"pid\": \"x\", \"num_buffers\": 3.7, \"num_channels\": -2, \"window_s\": true, "
      "\"message_rate_hz\": {}, \"byte_rate_per_s\": null, \"messages\": [1, 2], "
      "\"bytes\": \"lots\", \"backpressure\": \"none\"},"
      "{\"pid\": -5, \"num_buffers\": 1e30, \"num_channels\": -1e30, \"messages\": {\"total\": "
      "-7, \"window\": 2.5}, \"bytes\": {\"total\": 1.8446744073709552e19, \"window\": false}, "
      "\"backpressure\": {\"avg_ms\": \"1\", \"samples\": -1, \"in_flight\": 1e3}},"
      "{\"pid\": 1e30}, {\"pid\": -1e30}, {\"pid\": 77.9}],"
      "\"channels\": [{\"channel_id\": {\"a\": 1}, \"mode\": 3, \"in_flight\": \"1\", "
      "\"subscribers\": [{\"subscriber_id\": 1, \"handle\": false, \"samples\": \"9\", "
      "\"message_rate_hz\": \"fast\"}, {}]}]}";
  ez_profile_data d;
  assert_int_equal(ez_profile_parse(doc, &d), EZ_OK);
  assert_true(d.window_s == 0);
  assert_int_equal(d.n_publishers, 5);
  const ez_profile_pub *p = &d.publishers[0];
  assert_null(p->id);
  assert_null(p->topic);
  assert_null(p->host);
  assert_int_equal(p->pid, 0);
  assert_int_equal(p->num_buffers, 3); /* a real count is truncated */
  assert_int_equal(p->num_channels, 0);
  assert_true(p->window_s == 0 && p->message_rate_hz == 0 && p->byte_rate_per_s == 0);
  assert_true(p->messages_total == 0 && p->messages_window == 0 && p->bytes_total == 0);
  assert_true(p->backpressure.avg_ms == 0 && p->backpressure.samples == 0);
  p = &d.publishers[1];
  assert_int_equal(p->pid, -5);
  assert_true(p->num_buffers == UINT64_MAX);
  assert_true(p->num_channels == 0);
  assert_true(p->messages_total == 0);
  assert_true(p->messages_window == 2);
  assert_true(p->bytes_total == UINT64_MAX);
  assert_true(p->bytes_window == 0);
  assert_true(p->backpressure.avg_ms == 0);
  assert_true(p->backpressure.samples == 0);
  assert_true(p->backpressure.in_flight == 1000);
  assert_true(d.publishers[2].pid == INT64_MAX);
  assert_true(d.publishers[3].pid == INT64_MIN);
  assert_true(d.publishers[4].pid == 77);

  assert_int_equal(d.n_channels, 1);
  const ez_profile_channel *c = &d.channels[0];
  assert_null(c->channel_id);
  assert_null(c->mode);
  assert_int_equal(c->in_flight, 0);
  assert_int_equal(c->n_subscribers, 2);
  assert_null(c->subscribers[0].subscriber_id);
  assert_null(c->subscribers[0].handle);
  assert_int_equal(c->subscribers[0].processing.samples, 0);
  assert_true(c->subscribers[0].message_rate_hz == 0);
  assert_null(c->subscribers[1].subscriber_id);
  ez_profile_data_free(&d);
}

/* Not a profile document: EZ_EPROTO, and *out zeroed whatever it held. */
static void test_malformed(void **state) {
  (void)state;
  static const char *const bad[] = {
      "", "   ", "not json", "{", "{\"publishers\": [], \"channels\": []", /* truncated */
      "{\"publishers\": [], \"channels\": []} trailing", /* junk after the document */
      "[]",                                              /* not an object */
      "[{\"publishers\": [], \"channels\": []}]", "42", "\"publishers\"", "null",
      "{}",                                          /* neither list */
      "{\"window_s\": 2.0}", "{\"publishers\": []}", /* no channels */
      "{\"channels\": []}",                          /* no publishers */
      "{\"publishers\": {}, \"channels\": []}",      /* wrong types */
      "{\"publishers\": null, \"channels\": []}", "{\"publishers\": [], \"channels\": \"x\"}",
      "{\"publishers\": [1], \"channels\": []}", /* entries not objects */
      "{\"publishers\": [{}, null], \"channels\": []}", "{\"publishers\": [], \"channels\": [[]]}",
      "{\"publishers\": [], \"channels\": [{\"subscribers\": {}}]}",
      "{\"publishers\": [], \"channels\": [{\"subscribers\": null}]}",
      /* fails late, after allocations */
      ("{\"publishers\": [{\"id\": \"a\"}], \"channels\": [{\"channel_id\": \"b\", "
       "\"subscribers\": [{\"subscriber_id\": \"c\"}, 5]}]}"),
      "{\"publishers\": [], \"channels\": [], \"window_s\": NaN}",
      "{\"publishers\": [], \"channels\": [], \"window_s\": Infinity}",
      "{\"publishers\": [], \"channels\": [], \"id\": \"\\u0000\"}",
      "{\"publishers\": [], \"channels\": [], \"id\": \"\xff\"}", /* not UTF-8 */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ez_profile_data d;
    memset(&d, 0xa5, sizeof d);
    int rc = ez_profile_parse(bad[i], &d);
    if (rc != EZ_EPROTO) fail_msg("document %zu (%s): got %d, want EZ_EPROTO", i, bad[i], rc);
    assert_zeroed(&d);
    ez_profile_data_free(&d); /* harmless */
  }
}

/* Ours: a publisher's "leases" name the channels that hold its messages in flight. */
static void test_leases(void **state) {
  (void)state;
  const char *doc =
      "{\"publishers\": [{\"id\": \"p\", \"backpressure\": {\"in_flight\": 33}, \"leases\": ["
      "{\"channel_id\": \"c1\", \"pid\": 424242, \"mode\": \"tcp\", \"in_flight\": 32},"
      "{\"channel_id\": \"c2\", \"pid\": 7, \"mode\": \"local\", \"in_flight\": 1}, {}]},"
      "{\"id\": \"python\"}], \"channels\": []}";
  ez_profile_data d;
  assert_int_equal(ez_profile_parse(doc, &d), 0);
  assert_int_equal(d.n_publishers, 2);
  const ez_profile_pub *p = &d.publishers[0];
  assert_int_equal(p->n_leases, 3);
  assert_string_equal(p->leases[0].channel_id, "c1");
  assert_int_equal(p->leases[0].pid, 424242);
  assert_string_equal(p->leases[0].mode, "tcp");
  assert_int_equal(p->leases[0].in_flight, 32);
  assert_string_equal(p->leases[1].mode, "local");
  assert_int_equal(p->leases[1].in_flight, 1);
  assert_null(p->leases[2].channel_id); /* absent fields: zero */
  assert_int_equal(p->leases[2].in_flight, 0);
  assert_int_equal(d.publishers[1].n_leases, 0); /* the reference's: none */
  assert_null(d.publishers[1].leases);
  ez_profile_data_free(&d);
  /* Present, they must be an array of objects. */
  assert_int_equal(ez_profile_parse("{\"publishers\": [{\"leases\": 1}], \"channels\": []}", &d),
                   EZ_EPROTO);
  assert_int_equal(ez_profile_parse("{\"publishers\": [{\"leases\": [2]}], \"channels\": []}", &d),
                   EZ_EPROTO);
}

/* Each entry says how it was answered; a 3.9 subscriber names no channel or publisher. */
static void test_dialect(void **state) {
  (void)state;
  const char *doc =
      "{\"publishers\": [{\"id\": \"p\", \"dialect\": \"profiling\"}, {\"id\": \"q\"}],"
      " \"channels\": [{\"topic\": \"/t\", \"dialect\": \"released\","
      " \"subscribers\": [{\"subscriber_id\": \"s\"}]}, {\"dialect\": 5}]}";
  ez_profile_data d;
  assert_int_equal(ez_profile_parse(doc, &d), 0);
  assert_string_equal(d.publishers[0].dialect, "profiling");
  assert_null(d.publishers[1].dialect); /* the seed's documents do not say */
  assert_string_equal(d.channels[0].dialect, "released");
  assert_null(d.channels[0].channel_id);
  assert_null(d.channels[0].pub_id);
  assert_string_equal(d.channels[0].subscribers[0].subscriber_id, "s");
  assert_null(d.channels[1].dialect); /* not a string: absent */
  ez_profile_data_free(&d);
}

static void test_bad_arguments(void **state) {
  (void)state;
  ez_profile_data d;
  memset(&d, 0xa5, sizeof d);
  assert_int_equal(ez_profile_parse(NULL, &d), EZ_EINVAL);
  assert_zeroed(&d);
  assert_int_equal(ez_profile_parse(reference_doc, NULL), EZ_EINVAL);
  assert_int_equal(ez_profile_parse(NULL, NULL), EZ_EINVAL);
}

static void test_data_free(void **state) {
  (void)state;
  ez_profile_data d;
  memset(&d, 0, sizeof d);
  ez_profile_data_free(&d); /* zeroed struct */
  assert_zeroed(&d);
  ez_profile_data_free(NULL);
  assert_int_equal(ez_profile_parse(reference_doc, &d), EZ_OK);
  ez_profile_data_free(&d);
  ez_profile_data_free(&d); /* free zeroes it, so twice is fine */
  assert_zeroed(&d);
}

/* What our own builders write, wrapped the way publishers, channels and the server do, parses back
 * to the same numbers. */
static void test_roundtrip_our_builders(void **state) {
  (void)state;
  const uint64_t t0 = 1000ull * 1000000000ull;
  ezi_window *msgs = malloc(sizeof *msgs), *bp = malloc(sizeof *bp), *proc = malloc(sizeof *proc);
  assert_true(msgs && bp && proc);
  ezi_window_init(msgs);
  ezi_window_init(bp);
  ezi_window_init(proc);
  for (uint64_t i = 0; i < 200; i++) {
    ezi_window_add(msgs, t0 + i * 5000000, 64 + i);
    ezi_window_add(bp, t0 + i * 5000000, 10000 + i * 1000);
    ezi_window_add(proc, t0 + i * 5000000, 5000 + i * 7);
  }
  const uint64_t now = t0 + 1000000000;
  json_t *pub = ezi_pub_tel_json(msgs, bp, 5000, 700000, 2, now, 2.0);
  json_t *sub = ezi_sub_tel_json(proc, "s-1", NULL, 1, now, 2.0);
  assert_true(pub && sub);
  json_object_set_new(pub, "type", json_string("publisher"));
  json_object_set_new(pub, "id", json_string("p-1"));
  json_object_set_new(pub, "topic", json_string("/T"));
  json_object_set_new(pub, "pid", json_integer(99));
  json_object_set_new(pub, "num_buffers", json_integer(32));
  json_object_set_new(pub, "num_channels", json_integer(1));
  json_object_set_new(pub, "host", json_string("box"));
  json_t *chan = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:s, s:f, s:I, s:[O]}", "type",
                           "channel", "channel_id", "c-1", "pub_id", "p-1", "topic", "/T", "pid",
                           (json_int_t)98, "num_buffers", (json_int_t)32, "mode", "tcp", "window_s",
                           2.0, "in_flight", (json_int_t)1, "subscribers", sub);
  json_t *doc =
      json_pack("{s:f, s:[O], s:[O]}", "window_s", 2.0, "publishers", pub, "channels", chan);
  assert_non_null(doc);
  char *text = json_dumps(doc, 0);
  assert_non_null(text);

  ez_profile_data d;
  assert_int_equal(ez_profile_parse(text, &d), EZ_OK);
  assert_int_equal(d.n_publishers, 1);
  assert_int_equal(d.n_channels, 1);
  const ez_profile_pub *p = &d.publishers[0];
  const json_t *jm = json_object_get(pub, "messages"), *jb = json_object_get(pub, "bytes"),
               *jbp = json_object_get(pub, "backpressure");
  assert_string_equal(p->id, "p-1");
  assert_string_equal(p->host, "box");
  assert_int_equal(p->num_channels, 1);
  assert_int_equal(p->pid, 99);
  assert_near(p->window_s, 2.0);
  assert_near(p->message_rate_hz, json_number_value(json_object_get(pub, "message_rate_hz")));
  assert_near(p->byte_rate_per_s, json_number_value(json_object_get(pub, "byte_rate_per_s")));
  assert_int_equal(p->messages_total, 5000);
  assert_int_equal(p->bytes_total, 700000);
  assert_int_equal(p->messages_window, json_integer_value(json_object_get(jm, "window")));
  assert_int_equal(p->bytes_window, json_integer_value(json_object_get(jb, "window")));
  assert_near(p->backpressure.avg_ms, json_number_value(json_object_get(jbp, "avg_ms")));
  assert_near(p->backpressure.max_ms, json_number_value(json_object_get(jbp, "max_ms")));
  assert_near(p->backpressure.p50_ms, json_number_value(json_object_get(jbp, "p50_ms")));
  assert_near(p->backpressure.p99_ms, json_number_value(json_object_get(jbp, "p99_ms")));
  assert_int_equal(p->backpressure.samples, json_integer_value(json_object_get(jbp, "samples")));
  assert_int_equal(p->backpressure.in_flight, 2);

  const ez_profile_channel *c = &d.channels[0];
  assert_string_equal(c->mode, "tcp");
  assert_int_equal(c->n_subscribers, 1);
  const ez_profile_subscriber *s = &c->subscribers[0];
  assert_string_equal(s->subscriber_id, "s-1");
  assert_null(s->handle);
  assert_near(s->processing.avg_ms, json_number_value(json_object_get(sub, "avg_ms")));
  assert_near(s->processing.p99_ms, json_number_value(json_object_get(sub, "p99_ms")));
  assert_int_equal(s->processing.samples, json_integer_value(json_object_get(sub, "samples")));
  assert_int_equal(s->processing.in_flight, 1);
  assert_near(s->message_rate_hz, json_number_value(json_object_get(sub, "message_rate_hz")));
#ifndef EZ_NO_TELEMETRY
  assert_int_equal(p->messages_window, 200);
  assert_near(p->message_rate_hz, 100.0);
  assert_int_equal(s->processing.samples, 200);
#endif

  ez_profile_data_free(&d);
  free(text);
  json_decref(doc);
  json_decref(pub);
  json_decref(sub);
  json_decref(chan);
  free(msgs);
  free(bp);
  free(proc);
}

/* jansson running out of memory while parsing: a clean failure, out zeroed, nothing leaked
 * (ASan). jansson reports most of its allocation failures as syntax errors, so EZ_EPROTO is
 * accepted besides EZ_ENOMEM. */
static int alloc_budget = -1;
static void *failing_malloc(size_t n) {
  if (alloc_budget == 0) return NULL;
  if (alloc_budget > 0) alloc_budget--;
  return malloc(n);
}

static void test_out_of_memory(void **state) {
  (void)state;
  json_set_alloc_funcs(failing_malloc, free);
  int budget = 0, rc = EZ_ENOMEM;
  ez_profile_data d;
  for (; budget < 10000 && rc != EZ_OK; budget++) {
    alloc_budget = budget;
    memset(&d, 0xa5, sizeof d);
    rc = ez_profile_parse(reference_doc, &d);
    if (rc != EZ_OK) {
      if (rc != EZ_ENOMEM && rc != EZ_EPROTO) fail_msg("budget %d: got %d", budget, rc);
      assert_zeroed(&d);
    }
  }
  alloc_budget = -1;
  json_set_alloc_funcs(malloc, free);
  assert_int_equal(rc, EZ_OK);
  assert_true(budget > 10);
  assert_int_equal(d.n_channels, 1);
  ez_profile_data_free(&d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reference_document),
      cmocka_unit_test(test_our_document),
      cmocka_unit_test(test_empty_document),
      cmocka_unit_test(test_wrong_types),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_bad_arguments),
      cmocka_unit_test(test_data_free),
      cmocka_unit_test(test_roundtrip_our_builders),
      cmocka_unit_test(test_out_of_memory),
      cmocka_unit_test(test_leases),
      cmocka_unit_test(test_dialect),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
