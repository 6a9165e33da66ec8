/* fuzz_profileparse: ez_profile_parse on a NUL-terminated copy of arbitrary bytes.
 * Checks: the result is 0 or a documented error; on error *out is zeroed; on success the counts
 * match the arrays, every string field is NULL or a readable string, and freeing zeroes it. */
#include "fuzz_common.h"

#define CHECK(c)                                                                                   \
  do {                                                                                             \
    if (!(c)) fz_die("fuzz_profileparse: invariant failed: %s (line %d)", #c, __LINE__);           \
  } while (0)

static size_t touch(const char *s) { return s ? strlen(s) : 0; }

static bool zeroed(const ez_profile_data *p) {
  static const ez_profile_data zero;
  return memcmp(p, &zero, sizeof zero) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *json = malloc(size + 1);
  if (!json) return 0;
  memcpy(json, data, size);
  json[size] = 0;
  ez_profile_data p;
  memset(&p, 0x5a, sizeof p);
  int rc = ez_profile_parse(json, &p);
  free(json);
  CHECK(rc == 0 || rc == EZ_EPROTO || rc == EZ_ENOMEM);
  if (rc) {
    CHECK(zeroed(&p));
    ez_profile_data_free(&p);
    return 0;
  }
  CHECK(p.n_publishers == 0 || p.publishers);
  CHECK(p.n_channels == 0 || p.channels);
  CHECK(p.window_s == p.window_s); /* not NaN */
  volatile size_t sum = 0;
  for (size_t i = 0; i < p.n_publishers; i++) {
    const ez_profile_pub *pb = &p.publishers[i];
    sum += touch(pb->id) + touch(pb->topic) + touch(pb->host);
    CHECK(pb->window_s == pb->window_s && pb->message_rate_hz == pb->message_rate_hz);
    CHECK(pb->backpressure.avg_ms == pb->backpressure.avg_ms);
  }
  for (size_t i = 0; i < p.n_channels; i++) {
    const ez_profile_channel *c = &p.channels[i];
    sum +=
        touch(c->channel_id) + touch(c->pub_id) + touch(c->topic) + touch(c->mode) + touch(c->host);
    CHECK(c->n_subscribers == 0 || c->subscribers);
    for (size_t k = 0; k < c->n_subscribers; k++) {
      sum += touch(c->subscribers[k].subscriber_id) + touch(c->subscribers[k].handle);
      CHECK(c->subscribers[k].processing.p99_ms == c->subscribers[k].processing.p99_ms);
    }
  }
  (void)sum;
  ez_profile_data_free(&p);
  CHECK(zeroed(&p));
  ez_profile_data_free(&p); /* idempotent on a zeroed struct */
  return 0;
}

void fuzz_teardown(void) {}
