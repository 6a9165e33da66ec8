/* fuzz_profentry: the graph server's check of an endpoint's profile document (src/proto/
 * profentry.c), against jansson's decoder, the one every reader of the whole profile uses.
 *
 * Checks: the result is 0, EZ_EPROTO or EZ_ENOMEM; whatever it accepts, jansson decodes too, as an
 * object whose "type", "dialect", "topic" and "pub_id" agree with what it reported; and the text
 * it accepts, spliced as the server splices it ("dialect" after the brace), still decodes. */
#include "fuzz_common.h"
#include "proto/profentry.h"

#include <jansson.h>

#define CHECK(c)                                                                                   \
  do {                                                                                             \
    if (!(c)) fz_die("fuzz_profentry: invariant failed: %s (line %d)", #c, __LINE__);              \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  ezi_prof_entry e;
  const char *why = NULL;
  int rc = ezi_prof_entry_check(text, size, &e, &why);
  CHECK(rc == 0 || rc == EZ_EPROTO || rc == EZ_ENOMEM);
  CHECK(rc != EZ_EPROTO || why);
  if (rc) return 0;
  json_error_t err;
  json_t *doc = json_loadb(text, size, 0, &err);
  if (!doc) fz_die("fuzz_profentry: accepted what jansson refuses: %s", err.text);
  CHECK(json_is_object(doc));
  const char *type = json_string_value(json_object_get(doc, "type"));
  CHECK(e.type == (type && !strcmp(type, "publisher") ? EZI_PE_PUBLISHER
                   : type && !strcmp(type, "channel") ? EZI_PE_CHANNEL
                                                      : EZI_PE_OTHER));
  CHECK(e.has_dialect == (json_object_get(doc, "dialect") != NULL));
  CHECK(e.has_topic == (json_object_get(doc, "topic") != NULL));
  const char *pub_id = json_string_value(json_object_get(doc, "pub_id"));
  CHECK(!e.pub_id[0] || (pub_id && !strcmp(pub_id, e.pub_id)));
  json_decref(doc);
  CHECK(e.brace < size && text[e.brace] == '{');
  if (e.type != EZI_PE_OTHER && !e.has_dialect) { /* the server's splice */
    static const char ins[] = "{\"dialect\":\"profiling\",";
    size_t n = sizeof ins - 1 + size - e.brace - 1;
    char *s = malloc(n);
    if (!s) return 0;
    memcpy(s, ins, sizeof ins - 1);
    memcpy(s + sizeof ins - 1, text + e.brace + 1, size - e.brace - 1);
    doc = json_loadb(s, n, 0, &err);
    if (!doc) fz_die("fuzz_profentry: the splice broke it: %s", err.text);
    json_decref(doc);
    free(s);
  }
  return 0;
}

void fuzz_teardown(void) {}
