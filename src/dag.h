/* The topic graph: a directed acyclic graph of topic names, with the semantics of Python ezmsg's
 * ezmsg.core.dag.DAG, and its Python-pickle codec (what the DAG command sends).
 *
 * Not thread-safe: one thread at a time per ezi_dag, and that includes the read-only calls
 * (ezi_dag_reaches uses scratch memory owned by the graph).
 *
 * Every ez_graph this module fills is ONE allocation anchored at g->nodes: the node array, every
 * 'to' array and every string live in that block, and a node's 'to' entries point at the topic
 * strings of the target nodes. ez_graph_free() frees exactly that block. Every target of an edge
 * is also a node, and nodes and each 'to' list are sorted by byte order (= code point order for
 * UTF-8) without duplicates. */
#ifndef EZI_DAG_H
#define EZI_DAG_H

#include "ezmsg/ezmsg.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ezi_dag ezi_dag;

/* Creates an empty graph. Returns NULL on ENOMEM. The caller owns it (ezi_dag_free). */
ezi_dag *ezi_dag_new(void);

/* Frees the graph and everything in it. NULL is a no-op. */
void ezi_dag_free(ezi_dag *d);

/* Adds the edge from -> to (the strings are copied). Returns 0 on success or if the edge was
 * already there; EZ_ECYCLIC if from == to or the edge would close a cycle; EZ_EINVAL for NULL
 * arguments; EZ_ENOMEM. On any error the graph is unchanged. Afterwards both topics are nodes. */
int ezi_dag_add_edge(ezi_dag *d, const char *from, const char *to);

/* Removes the edge from -> to if present (absent is fine). Then every node left without edges in
 * and out is removed. Returns 0, or EZ_EINVAL for NULL arguments. */
int ezi_dag_remove_edge(ezi_dag *d, const char *from, const char *to);

/* True if a == b (a topic is its own upstream and downstream, even if not a node), or if there
 * is a directed path a -> ... -> b. Never allocates. */
bool ezi_dag_reaches(const ezi_dag *d, const char *a, const char *b);

/* Number of nodes (topics with at least one edge). */
size_t ezi_dag_num_nodes(const ezi_dag *d);

/* Copies the graph into *out (see the layout above; *out is overwritten, not freed first). Free
 * with ez_graph_free. Returns 0 or EZ_ENOMEM (then *out is zeroed). */
int ezi_dag_export(const ezi_dag *d, ez_graph *out);

/* Encodes the graph as a Python pickle (protocol 4) of an ezmsg.core.dag.DAG whose `graph` is a
 * collections.defaultdict(set): bytes that Python's pickle.loads turns into an equal DAG. Nodes
 * and set items are written in sorted order with Python's memo and batching rules, in one FRAME;
 * so below 64 KiB, with at most one target per node, the bytes equal Python's own pickle of the
 * DAG built in that order. *out is malloc'd (caller frees), *len its length. Returns 0, EZ_ENOMEM,
 * or EZ_EINVAL if a topic is not UTF-8 (Python could not load it); *out is NULL on error. */
int ezi_dag_pickle(const ezi_dag *d, uint8_t **out, size_t *len);

/* Decodes a pickle of an ezmsg.core.dag.DAG, as Python's graph server sends it, into *out (see
 * the layout above; targets that are not keys become nodes without edges). Only the opcodes
 * Python emits for it are understood (PROTO 4/5, FRAME, SHORT_BINUNICODE, BINUNICODE, MEMOIZE,
 * BINGET, LONG_BINGET, GLOBAL, STACK_GLOBAL, EMPTY_TUPLE, TUPLE1, NEWOBJ, REDUCE, EMPTY_DICT,
 * EMPTY_SET, MARK, ADDITEMS, SETITEM, SETITEMS, BUILD, STOP), and only the globals
 * ezmsg.core.dag.DAG, collections.defaultdict and builtins.set; nothing is executed. Returns 0,
 * EZ_ENOMEM, or EZ_EPROTO for anything unknown, malformed or inconsistent (including trailing
 * bytes, strings over EZ_MAX_CONTROL_STR, non-UTF-8 or with a NUL, duplicate keys, and more
 * edges than input bytes). Memory use is O(len). On error *out is zeroed. */
int ezi_dag_unpickle(const uint8_t *buf, size_t len, ez_graph *out);

/* A string view (not NUL-terminated; must not contain NUL). */
typedef struct ezi_strv {
  const char *p;
  size_t len;
} ezi_strv;

/* Builds an ez_graph in the single-block layout from n sorted, unique names and an edge list in
 * compressed form: node i's targets are the node indices to[off[i]] .. to[off[i+1]-1], each list
 * sorted and unique. Returns 0 or EZ_ENOMEM (then *out is zeroed). Defined in graphfmt.c. */
int ezi_graph_build(ez_graph *out, size_t n, const ezi_strv *names, const size_t *off,
                    const uint32_t *to);

/* True if s[0..len) is UTF-8 as Python decodes it for pickles (strict, but surrogates allowed,
 * as with 'surrogatepass'). */
bool ezi_utf8_valid(const char *s, size_t len);

#endif
