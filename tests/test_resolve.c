/* No name lookup on an I/O thread. One I/O thread serves every publisher and channel of a
 * context; a lookup of the graph server's host name there (for each channel's registration and
 * each SHM_ATTACH) made them all wait for the resolver, seconds when a DNS server does not
 * answer. A context now connects to the server by the numeric address it reached at open.
 * (Publishers' addresses come from the graph server as the numeric address it sees them at, from
 * ours and from the reference's.)
 *
 * getaddrinfo is wrapped (-Wl,--wrap=getaddrinfo): the wrapper counts lookups that may touch the
 * resolver (no AI_NUMERICHOST) by the thread that made them. */
#include "harness.h"

#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

int __real_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                       struct addrinfo **res);

static pthread_t g_main;
static int g_main_lookups;  /* atomic: name lookups by the test's own thread */
static int g_other_lookups; /* atomic: name lookups by any other (library) thread */

int __wrap_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                       struct addrinfo **res) {
  if (!hints || !(hints->ai_flags & AI_NUMERICHOST))
    __atomic_add_fetch(pthread_equal(pthread_self(), g_main) ? &g_main_lookups : &g_other_lookups,
                       1, __ATOMIC_SEQ_CST);
  return __real_getaddrinfo(node, service, hints, res);
}

/* "localhost" must name 127.0.0.1 first here (the test server listens there only). */
static bool localhost_is_v4(void) {
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
  if (__real_getaddrinfo("localhost", "1", &hints, &res) || !res) return false;
  bool v4 = res->ai_family == AF_INET;
  freeaddrinfo(res);
  return v4;
}

/* Contexts opened on "localhost:PORT": a publisher in one and a subscriber in the other (a
 * channel registers with the server, attaches the publisher's segment, connects to the
 * publisher) exchange messages, and every name lookup was made by the caller's thread. */
static void test_no_lookup_on_io_threads(void **state) {
  (void)state;
  if (!localhost_is_v4()) skip();
  char addr[64];
  snprintf(addr, sizeof addr, "localhost%s", strrchr(th_addr, ':'));
  ez_context *a, *b;
  assert_int_equal(ez_context_open(addr, &a), 0);
  assert_int_equal(ez_context_open(addr, &b), 0);
  assert_string_equal(ez_context_address(a), addr); /* as given */
  ez_pub *p;
  assert_int_equal(ez_pub_create(a, "/resolve/t", NULL, &p), 0);
  ez_sub *s;
  assert_int_equal(ez_sub_create(b, "/resolve/t", NULL, &s), 0);
  for (uint64_t k = 0; k < 20; k++) {
    assert_int_equal(ez_publish(p, &k, sizeof k, 10000), 0);
    uint64_t got = 0;
    size_t n = 0;
    assert_int_equal(ez_recv_copy(s, &got, sizeof got, &n, 10000), 0);
    assert_true(n == sizeof got && got == k);
  }
  ez_sub_destroy(s);
  ez_pub_destroy(p);
  ez_context_close(b);
  ez_context_close(a);
  assert_true(__atomic_load_n(&g_main_lookups, __ATOMIC_SEQ_CST) > 0); /* the wrapper works */
  assert_int_equal(__atomic_load_n(&g_other_lookups, __ATOMIC_SEQ_CST), 0);
}

int main(void) {
  g_main = pthread_self();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_no_lookup_on_io_threads, th_setup, th_teardown)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
