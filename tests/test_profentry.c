/* The graph server's check of an endpoint's profile answer (src/proto/profentry.c): it accepts the
 * documents endpoints send (ours and the seed's Python, white space and all), reports their type,
 * dialect, topic and pub_id, and refuses what would break a reader of the whole profile: what
 * jansson refuses, though yajl's parser lets it pass. */
#include "harness.h"
#include "proto/profentry.h"

#include <stdio.h>
#include <string.h>

typedef struct accepted {
  const char *text;
  int type;
  bool dialect, topic;
  const char *pub_id;
} accepted;

static void test_accepts(void **state) {
  (void)state;
  static const accepted cases[] = {
      {"{\"type\":\"publisher\",\"id\":\"x\",\"topic\":\"/t\",\"messages\":{\"total\":5}}",
       EZI_PE_PUBLISHER, false, true, ""},
      {" \n{\"type\": \"channel\", \"pub_id\": \"11111111-2222-3333-4444-555555555555\", "
       "\"subscribers\": [{\"handle\": \"/t\", \"p99_ms\": 0.25}]}\n",
       EZI_PE_CHANNEL, false, false, "11111111-2222-3333-4444-555555555555"},
      {"{\"dialect\":\"released\",\"type\":\"publisher\",\"s\":\"\\ud83d\\ude00 \\\\u0000\"}",
       EZI_PE_PUBLISHER, true, false, ""},
      /* keys of nested objects are not the entry's */
      {"{\"a\":{\"type\":\"channel\",\"topic\":1,\"dialect\":2},\"b\":[{\"type\":3}],"
       "\"type\":\"publisher\"}",
       EZI_PE_PUBLISHER, false, false, ""},
      {"{\"type\":\"subscriber\",\"pub_id\":7}", EZI_PE_OTHER, false, false, ""},
      {"{\"type\":\"publisher\",\"n\":[-1.5e-300,9223372036854775807,true,null]}", EZI_PE_PUBLISHER,
       false, false, ""},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ezi_prof_entry e;
    const char *why = NULL;
    const char *t = cases[i].text;
    int rc = ezi_prof_entry_check(t, strlen(t), &e, &why);
    if (rc) fail_msg("refused %s: %s", t, why);
    assert_int_equal(e.type, cases[i].type);
    assert_int_equal(e.has_dialect, cases[i].dialect);
    assert_int_equal(e.has_topic, cases[i].topic);
    assert_string_equal(e.pub_id, cases[i].pub_id);
    assert_int_equal(t[e.brace], '{');
  }
}

static void test_refuses(void **state) {
  (void)state;
  static const char *const cases[] = {
      "",
      "not json",
      "[{\"type\":\"publisher\"}]",                         /* not an object */
      "\"type\"",                                           /* nor this */
      "{\"type\":\"publisher\"} {}",                        /* two values */
      "{\"type\":\"publisher\"}\"}",                        /* an unfinished string after it */
      "{\"type\":\"publisher\"}\v",                         /* white space JSON has not */
      "{\"type\":\"publisher\",\"type\":\"channel\"}",      /* a key it names twice */
      "{\"type\":\"channel\",\"topic\":\"a\",\"topic\":1}", /* (any of the four) */
      "{\"type\":\"publisher\",\"s\":\"a\\u0000b\"}",       /* what jansson refuses: */
      "{\"type\":\"publisher\",\"s\":\"\\ud800\"}",
      "{\"type\":\"publisher\",\"s\":\"\\udc00x\"}",
      "{\"type\":\"publisher\",\"s\":\"\\ud800\\u0041\"}",
      "{\"type\":\"publisher\",\"s\":\"\xed\xa0\x80\"}", /* an encoded surrogate */
      "{\"type\":\"publisher\",\"s\":\"\xc0\x80\"}",     /* an overlong form */
      "{\"type\":\"publisher\",\"n\":1e400}",
      "{\"type\":\"publisher\",\"n\":99999999999999999999}",
      "{\"type\":\"publisher\",\"s\":\"tab\there\"}", /* a raw control character */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ezi_prof_entry e;
    const char *why = NULL;
    int rc = ezi_prof_entry_check(cases[i], strlen(cases[i]), &e, &why);
    if (rc != EZ_EPROTO) fail_msg("case %zu accepted: %s", i, cases[i]);
    assert_non_null(why);
  }
  /* nesting: EZI_PE_MAX_DEPTH levels pass, one more does not */
  char deep[4 * EZI_PE_MAX_DEPTH + 64];
  for (int extra = 0; extra < 2; extra++) {
    int arrays = EZI_PE_MAX_DEPTH - 1 + extra; /* (the object is one level) */
    size_t k = (size_t)snprintf(deep, sizeof deep, "{\"type\":\"publisher\",\"d\":");
    for (int i = 0; i < arrays; i++)
      deep[k++] = '[';
    for (int i = 0; i < arrays; i++)
      deep[k++] = ']';
    deep[k++] = '}';
    ezi_prof_entry e;
    assert_int_equal(ezi_prof_entry_check(deep, k, &e, NULL), extra ? EZ_EPROTO : 0);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_accepts),
      cmocka_unit_test(test_refuses),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
