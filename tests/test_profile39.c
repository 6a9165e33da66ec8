/* ez_profile in a released-dialect graph (profile39.c) with fake 3.9.0 backend processes beside a
 * real ezmsg-c publisher, on our graph server: a Python process that answers (with the snapshot
 * a real 3.9.0 pickled, tests/corpus/meta39/profiling_snapshot.bin) shows up in the profile as
 * "released" entries; one that never answers, or that leaves mid-request, costs the profile at
 * most its bound past the window and nothing else: the rest of the graph is still there. */
#include "fake39.h"
#include "harness.h"
#include "graph/profile39.h"
#include "proto/meta39.h"
#include "rawproto.h"
#include "vectors.h"
#include "base/wire.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TMO 5000
/* What profile39 gives a process past the window, and slack for a loaded machine. */
#define ASK_BOUND_MS 1200
#define SLACK_MS 3000

enum { ANSWER, SILENT, VANISH };

typedef struct fakeproc {
  int fd, mode;
  char id[64];
  int asked, bad; /* requests seen; protocol errors (checked by the test thread) */
} fakeproc;

static void send_all(int fd, const void *p, size_t n) {
  const uint8_t *b = p;
  while (n) {
    ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
    if (k <= 0) return;
    b += k;
    n -= (size_t)k;
  }
}

/* The fake process's side: each PROCESS_ROUTE_REQUEST answered (the corpus snapshot), ignored,
 * or, for VANISH, the connection closed on the first; until the server closes it. Not a cmocka
 * thread: errors are counted in f->bad. */
static void *serve(void *arg) {
  fakeproc *f = arg;
  size_t snap_len;
  uint8_t *snap = tv_load("meta39", "profiling_snapshot.bin", &snap_len);
  if (!snap) f->bad++;
  for (;;) {
    uint8_t cmd, lb[8];
    if (rp_rd_exact(f->fd, &cmd, 1, 30000) || rp_rd_exact(f->fd, lb, 8, TMO)) break;
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--)
      len = len << 8 | lb[i];
    uint8_t *b = cmd == EZI_PROCESS_ROUTE_REQUEST && len < (1u << 20) ? malloc(len + 1) : NULL;
    if (!b || rp_rd_exact(f->fd, b, (size_t)len, TMO)) {
      f->bad++;
      free(b);
      break;
    }
    ezi_pk_doc *d;
    ezi_m39_control_request req;
    if (ezi_m39_load(&EZI_M39_PROCESS_CONTROL_REQUEST, b, (size_t)len, &d, &req, NULL) ||
        strcmp(req.operation, "GET_PROFILING_SNAPSHOT")) {
      f->bad++;
      free(b);
      break;
    }
    f->asked++;
    if (f->mode == VANISH) {
      ezi_pk_doc_free(d);
      free(b);
      shutdown(f->fd, SHUT_RDWR);
      break;
    }
    if (f->mode == ANSWER && snap) {
      ezi_m39_control_response r = {.request_id = req.request_id,
                                    .ok = true,
                                    .payload = {.has = true, .p = snap, .len = snap_len},
                                    .error_code = EZI_M39_NONE};
      r.process_id.has = true;
      memcpy(r.process_id.s, f->id, 37);
      uint8_t *pk, hdr[9] = {EZI_PROCESS_ROUTE_RESPONSE};
      size_t n;
      if (ezi_m39_dump(&EZI_M39_PROCESS_CONTROL_RESPONSE, &r, &pk, &n, NULL) == 0) {
        rp_put_u64le(hdr + 1, n);
        send_all(f->fd, hdr, sizeof hdr);
        send_all(f->fd, pk, n);
        free(pk);
      } else {
        f->bad++;
      }
    }
    ezi_pk_doc_free(d);
    free(b);
  }
  free(snap);
  return NULL;
}

typedef struct graph {
  ez_context *ctx;
  ez_pub *pub;
  fakeproc fp;
  pthread_t th;
} graph;

/* A real publisher on /p39/c (a few messages sent), and a fake 3.9 process owning SYS/PY. */
static void graph_up(graph *g, int mode) {
  assert_int_equal(ez_context_open(th_addr, &g->ctx), 0);
  assert_int_equal(ez_pub_create(g->ctx, "/p39/c", NULL, &g->pub), 0);
  for (int i = 0; i < 5; i++)
    assert_int_equal(ez_publish(g->pub, &i, sizeof i, TMO), 0);
  const char *units[] = {"SYS/PY"};
  g->fp = (fakeproc){.mode = mode};
  g->fp.fd = f39_process(g->fp.id, units, 1, EZI_COMPLETE);
  assert_int_equal(pthread_create(&g->th, NULL, serve, &g->fp), 0);
}

static void graph_down(graph *g) {
  shutdown(g->fp.fd, SHUT_RDWR);
  pthread_join(g->th, NULL);
  close(g->fp.fd);
  ez_pub_destroy(g->pub);
  ez_context_close(g->ctx);
}

/* One profile of window 0.5 s: its document, and how long it took. */
static json_t *profile(int64_t *took_ms) {
  char *text = NULL;
  int64_t t0 = th_now_ms();
  assert_int_equal(ez_profile(th_addr, 0.5, &text, 20000), 0);
  *took_ms = th_now_ms() - t0;
  json_t *doc = json_loads(text, 0, NULL);
  free(text);
  assert_non_null(doc);
  return doc;
}

/* The entry of array key whose "topic" is topic (NULL: none). */
static json_t *entry(json_t *doc, const char *key, const char *topic) {
  size_t i;
  json_t *e;
  json_array_foreach(json_object_get(doc, key), i, e) {
    const char *t = json_string_value(json_object_get(e, "topic"));
    if (t && !strcmp(t, topic)) return e;
  }
  return NULL;
}

static const char *str_of(json_t *e, const char *key) {
  return json_string_value(json_object_get(e, key));
}

/* The C publisher answers PROFILE; the Python process is asked twice (the window's two ends) and
 * its snapshot's publishers and subscriber appear with their counts, marked "released". */
static void test_python_process_answers(void **state) {
  (void)state;
  graph g;
  graph_up(&g, ANSWER);
  int64_t took;
  json_t *doc = profile(&took);
  json_t *c = entry(doc, "publishers", "/p39/c");
  assert_non_null(c);
  assert_string_equal(str_of(c, "dialect"), "profiling");
  assert_int_equal(json_integer_value(json_object_get(json_object_get(c, "messages"), "total")), 5);
  json_t *p0 = entry(doc, "publishers", "/p0"), *p1 = entry(doc, "publishers", "/p1");
  assert_non_null(p0);
  assert_non_null(p1);
  assert_string_equal(str_of(p0, "dialect"), "released");
  assert_int_equal(json_integer_value(json_object_get(json_object_get(p1, "messages"), "total")),
                   1001);
  assert_int_equal(json_integer_value(json_object_get(p0, "pid")), 4242);
  assert_string_equal(str_of(p0, "host"), "host-a");
  json_t *s0 = entry(doc, "channels", "/s0");
  assert_non_null(s0);
  assert_string_equal(str_of(s0, "dialect"), "released");
  assert_string_equal(str_of(s0, "mode"), "shm");
  assert_true(json_is_null(json_object_get(s0, "channel_id")));
  json_decref(doc);
  graph_down(&g);
  assert_int_equal(g.fp.asked, 2);
  assert_int_equal(g.fp.bad, 0);
}

/* Our processes on a 3.9.0 server (read here from our own server as profile39 reads 3.9's): each
 * is asked once, for the window (EZI_PROC_WINDOW_ASK), and its own entries come with the ids of
 * a process snapshot; a channel gets its topic from the publisher it names. */
static void test_ours_as_on_39(void **state) {
  (void)state;
  ez_context *cp, *cs;
  ez_pub *pub;
  ez_sub *sub;
  assert_int_equal(ez_context_open(th_addr, &cp), 0);
  assert_int_equal(ez_context_open(th_addr, &cs), 0);
  assert_int_equal(ez_sub_create(cs, "/p39/ours", NULL, &sub), 0);
  assert_int_equal(ez_pub_create(cp, "/p39/ours", NULL, &pub), 0);
  while (ez_pub_num_channels(pub) < 1)
    th_sleep_ms(5);
  for (int i = 0; i < 20; i++) {
    assert_int_equal(ez_publish(pub, &i, sizeof i, TMO), 0);
    ez_msg m;
    assert_int_equal(ez_recv(sub, &m, TMO), 0);
    ez_msg_release(&m);
  }
  char *text = NULL;
  json_t *doc = NULL, *p = NULL, *c = NULL;
  for (int tries = 0; tries < 50 && (!p || !c); tries++) { /* (until both processes registered) */
    json_decref(doc);
    assert_int_equal(ezi_profile39_as(th_addr, 3.0, 20000, &text, true), 0);
    doc = json_loads(text, 0, NULL);
    free(text);
    assert_non_null(doc);
    p = entry(doc, "publishers", "/p39/ours");
    c = entry(doc, "channels", "/p39/ours");
    if (!p || !c) th_sleep_ms(100);
  }
  assert_non_null(p);
  assert_non_null(c); /* (named by its publisher's topic: the process did not name it) */
  assert_string_equal(str_of(p, "dialect"), "released");
  assert_string_equal(str_of(c, "dialect"), "released");
  assert_true(json_real_value(json_object_get(p, "window_s")) == 3.0); /* the window asked for */
  assert_int_equal(json_integer_value(json_object_get(json_object_get(p, "messages"), "total")),
                   20);
  assert_int_equal(strlen(str_of(p, "process_id")), 36);
  assert_int_equal(strlen(str_of(c, "process_id")), 36);
  assert_string_not_equal(str_of(p, "process_id"), str_of(c, "process_id"));
  char want[128];
  snprintf(want, sizeof want, "/p39/ours:%s", str_of(p, "id"));
  assert_string_equal(str_of(p, "endpoint_id"), want);
  assert_string_equal(str_of(c, "pub_id"), str_of(p, "id"));
  json_decref(doc);
  ez_context_close(cp);
  ez_context_close(cs);
}

/* A process that never answers: the profile comes back within its bound, with the rest. */
static void test_silent_process(void **state) {
  (void)state;
  graph g;
  graph_up(&g, SILENT);
  int64_t took;
  json_t *doc = profile(&took);
  print_message("    silent process: profile took %lld ms (window 500)\n", (long long)took);
  assert_non_null(entry(doc, "publishers", "/p39/c"));
  assert_null(entry(doc, "publishers", "/p0"));
  assert_true(took < 500 + ASK_BOUND_MS + SLACK_MS);
  json_decref(doc);
  graph_down(&g);
  assert_int_equal(g.fp.asked, 1); /* the first never answered: no second */
  assert_int_equal(g.fp.bad, 0);
}

/* A process that leaves mid-request: the same, and the server forgets it. */
static void test_vanishing_process(void **state) {
  (void)state;
  graph g;
  graph_up(&g, VANISH);
  int64_t took;
  json_t *doc = profile(&took);
  assert_non_null(entry(doc, "publishers", "/p39/c"));
  assert_null(entry(doc, "publishers", "/p0"));
  assert_true(took < 500 + ASK_BOUND_MS + SLACK_MS);
  json_decref(doc);
  graph_down(&g);
  assert_int_equal(g.fp.asked, 1);
  assert_int_equal(g.fp.bad, 0);
  char sid[64];
  int s = f39_session(sid);
  ezi_pk_doc *d;
  ezi_m39_graph_snapshot gs;
  f39_snapshot(s, &d, &gs);
  for (size_t i = 0; i < gs.n_processes; i++)
    assert_false(gs.processes[i].units.n && !strcmp(gs.processes[i].units.v[0], "SYS/PY"));
  ezi_pk_doc_free(d);
  close(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_python_process_answers, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_ours_as_on_39, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_silent_process, th_setup, th_teardown),
      cmocka_unit_test_setup_teardown(test_vanishing_process, th_setup, th_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
