/* Fake ezmsg 3.9.0 clients for tests (tests/fake39.c): GraphContext sessions and ez.run backend
 * processes speaking the released dialect's bytes by hand to the graph server at th_addr
 * (docs/protocol39.md), with payloads built and read by meta39. Every helper fails the running
 * cmocka test on a wrong answer; the fds they return are the caller's to close. */
#ifndef EZ_TEST_FAKE39_H
#define EZ_TEST_FAKE39_H

#include "proto/meta39.h"

#include <stddef.h>
#include <stdint.h>

/* A connection greeted by the server, which must greet as 3.9.0. */
int f39_open(void);

/* SESSION (21 alone) -> the session's fd; its id into id. */
int f39_session(char id[64]);

/* Writes `cmd, u64 n, n bytes`. */
void f39_wr_payload(int fd, uint8_t cmd, const uint8_t *p, size_t n);

/* Reads `u64 n, n bytes` (malloc'd, the caller frees; *n set). */
uint8_t *f39_rd_pickle(int fd, size_t *n);

/* A session request answered `u64 n, pickle, COMPLETE`: the pickle, parsed as class c into out
 * (the document, which owns what out points to and the caller frees, into *doc). */
void f39_rd_answer(int fd, const ezi_m39_class *c, ezi_pk_doc **doc, void *out);

/* SESSION_CONNECT / SESSION_DISCONNECT; returns the answer byte. */
uint8_t f39_sess_edge(int fd, uint8_t cmd, const char *from, const char *to);

/* SESSION_SNAPSHOT -> the graph snapshot (its document into *doc). */
void f39_snapshot(int fd, ezi_pk_doc **doc, ezi_m39_graph_snapshot *gs);

/* The owners a snapshot lists for from -> to (NULL: no such edge). */
const ezi_m39_strs *f39_owners_of(const ezi_m39_graph_snapshot *gs, const char *from,
                                  const char *to);

/* PROCESS -> its fd and id; then PROCESS_REGISTER of units as pid 4242 on "testhost" (answered
 * COMPLETE, or `want`). */
int f39_process(char id[64], const char *const *units, size_t n, uint8_t want);

/* SESSION_PROCESS_REQUEST of unit/op with a timeout (seconds, as a string) and payload. */
void f39_route(int fd, const char *unit, const char *op, const char *timeout, const void *pl,
               size_t n);

#endif
