/* Raw graph-server protocol for the C tests: fake clients spoken by hand over TCP sockets, byte
 * for byte as protocol.md describes them (u8 commands, little-endian u64s, strs as a u64 length
 * and that many bytes).
 *
 * The helpers that read or write check with cmocka: a short write, a read that times out (after
 * RP_TMO ms) or an unexpected value fails the calling test. Only rp_rd_exact reports its outcome
 * instead, for tests that expect a timeout or a close. */
#ifndef EZ_TEST_RAWPROTO_H
#define EZ_TEST_RAWPROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How long the checked reads wait for anything that should be quick (ms). */
#define RP_TMO 5000

/* A blocking TCP connection (TCP_NODELAY) to "host:port" on 127.0.0.1; no version read yet. */
int rp_open(const char *addr);
/* rp_open, then reads the server's version string and checks it is EZ_VERSION. */
int rp_connect(const char *addr);

/* Reads exactly n bytes within timeout_ms (with 0 it still looks once).
 * Returns 0 ok, -1 timeout, -2 EOF (or reset), -3 error. */
int rp_rd_exact(int fd, void *buf, size_t n, int timeout_ms);
/* The next u8 / little-endian u64 (within RP_TMO). */
uint8_t rp_rd_u8(int fd);
uint64_t rp_rd_u64(int fd);
/* Reads a str into out (cap bytes incl. NUL; a longer one fails); returns its length. */
size_t rp_rd_str(int fd, char *out, size_t cap);
/* Reads a u8 / str and checks it equals want. */
void rp_expect_u8(int fd, uint8_t want);
void rp_expect_str(int fd, const char *want);
/* True if the peer closes (EOF or reset) within timeout_ms without sending anything. */
bool rp_closed_silently(int fd, int timeout_ms);
/* True once the peer closes within timeout_ms (anything it sends first is skipped). */
bool rp_hung_up(int fd, int timeout_ms);
/* A listening TCP socket on 127.0.0.1 with a free port (its "host:port" into addr). */
int rp_listen(char addr[64], int backlog);
/* Accepts the next connection on listener that sends something within timeout_ms (its bytes left
 * unread), closing those that hang up first: after a cut, a subscriber knocks at the publisher's
 * listener (connects, hangs up) before it asks for a new channel (src/sub/sublink.c). The fd, or
 * -1 if none came in time. Does not fail the test itself (child processes use it too). */
int rp_accept_talker(int listener, int timeout_ms);
/* True if nothing arrives (and the connection stays open) for ms. */
bool rp_quiet_for(int fd, int ms);

/* Writes all n bytes (fails the test if the peer is gone). */
void rp_wr(int fd, const void *p, size_t n);
/* v as 8 little-endian bytes at p. */
void rp_put_u64le(uint8_t *p, uint64_t v);
void rp_wr_u8(int fd, uint8_t v);
void rp_wr_u64(int fd, uint64_t v);
void rp_wr_str(int fd, const char *s);
/* A command with up to two str arguments (NULL: absent), in one write. */
void rp_wr_cmd(int fd, uint8_t cmd, const char *a, const char *b);

/* True if s is a lowercase canonical UUID (8-4-4-4-12 hex digits). */
bool rp_is_uuid(const char *s);

/* Registers a fake subscriber on topic: SUBSCRIBE -> sub_id -> UPDATE ids -> COMPLETE ->
 * COMPLETE. ids receives the first UPDATE's publisher list. Returns the connection. */
int rp_fake_sub(const char *addr, const char *topic, char id[37], char *ids, size_t cap);
/* Starts registering a fake publisher: PUBLISH -> pub_id -> chan_addr. The caller lets the
 * downstream subscribers answer their UPDATEs, then reads the publisher's COMPLETE. */
int rp_fake_pub_begin(const char *addr, const char *topic, const char *chan_addr, char id[37]);
/* A fake publisher with no subscribers downstream (its address, 127.0.0.1:45678, is never
 * dialled): registered at once. */
int rp_fake_pub(const char *addr, const char *topic, char id[37]);
/* Reads a publisher's first handshake frame after our CHANNEL request, in either dialect: the
 * released one's str topic and str segment name, or the profiling one's name alone (told apart
 * as a channel of ours does, by the first string's shape). The name into name (cap bytes incl.
 * NUL); the topic into topic (tcap bytes) if non-NULL, empty for the profiling dialect. */
void rp_rd_pub_hello(int fd, char *name, size_t cap, char *topic, size_t tcap);
/* A registered client marks itself as ezmsg-c (EZI_X_CLIENT), so that our server profiles it in
 * either dialect. */
void rp_mark_ezc(int fd);
/* The subscriber side of an UPDATE: reads it (ids into buf) and answers COMPLETE. */
void rp_sub_update(int fd, char *ids, size_t cap);

#endif
