/* The graph server's connections (gs_conn.c): their I/O, closing and freeing, the ops that wait
 * for other clients' answers, and the UPDATEs that tell subscribers of the topology. Server thread
 * only. */
#ifndef EZI_GS_CONN_H
#define EZI_GS_CONN_H

#include "graph/gs.h"

/* Waiter queues: pushes o (its reference) at slot (0 or EZ_ENOMEM); pops the oldest (false:
 * empty); the oldest, left in place (NULL: empty). */
int ezi_gs_wq_push(wqueue *q, op *o, size_t slot);
bool ezi_gs_wq_pop(wqueue *q, waiter *out);
const waiter *ezi_gs_wq_peek(const wqueue *q);

/* A new op (reference held until it finishes) answering `req` (NULL: nobody); NULL when out of
 * memory. An OP_PROFILE or OP_SESSION op's maker sets its `answer`. */
op *ezi_gs_op_new(server *s, opkind kind, conn *req);
void ezi_gs_op_unref(op *o);
/* Finishes the op: its requester gets its answer, the timer is cancelled. Idempotent. */
void ezi_gs_op_finish(op *o);
/* One expected answer arrived (or its client left). */
void ezi_gs_op_answer(op *o);
/* Called once every request of the op is sent: finishes at once if nothing is due, else arms its
 * timer (timeout_ns 0: none). */
void ezi_gs_op_launch(op *o, uint64_t timeout_ns);

/* UPDATE to subscriber `sub` (listing every publisher upstream of its topic); o waits for it. */
void ezi_gs_notify_sub(server *s, conn *sub, op *o);
/* UPDATE to every subscriber downstream of `topic` (only the ezmsg-c ones, which sent X_CLIENT,
 * with ezc_only). */
void ezi_gs_notify_down(server *s, const char *topic, op *o, bool ezc_only);
/* c has just become C_PUB or C_SUB: enters the server's lists (and a publisher its id index). */
void ezi_gs_registered(server *s, conn *c);
/* The registered publisher with id (n bytes), or NULL. */
conn *ezi_gs_find_pub(server *s, const char *id, size_t n);

/* Queues bytes to a client and writes what the socket takes now; a client past OUT_LIMIT is
 * dropped (closed on the next loop turn, so callers iterating clients stay safe). */
void ezi_gs_send(conn *c, const ezi_buf *b);
/* The one-shot request is answered: hang up once the answer is out and the peer has closed. */
void ezi_gs_finish(conn *c);
/* A session's request is answered: it goes on with the next one it has sent, at the next loop
 * turn (through the server's `consume`). No-op on a closed connection. */
void ezi_gs_answered(conn *c);
/* Closes a connection, unregisters its client and calls its role's `closed`. The struct stays
 * readable (c->dead) until the current callback returns. Idempotent. */
void ezi_gs_close(conn *c);
/* The socket is writable: writes what is queued. True if that failed and c was closed. */
bool ezi_gs_writable(conn *c);
/* Frees the connections closed since the last call (a loop timer; arg is the server). */
void ezi_gs_reap(void *arg);
/* Logs the peer's protocol error and closes the connection. */
void ezi_gs_proto_error(conn *c, const char *what);

#endif
