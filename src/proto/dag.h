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

/* Edges have owners, as in ezmsg 3.9's DAG (dag.py): the persistent owner (a CONNECT to the
 * graph server; NULL here, None in Python) and sessions (any other string: the session's UUID in
 * its canonical form). An edge exists while it has at least one owner; the topology changes only
 * when an edge appears (its first owner) or disappears (its last one), and then every node left
 * without edges in and out is removed. Owner strings are copied. */

/* Adds `owner` (NULL: persistent) to the edge from -> to. *changed (may be NULL) is set true if
 * the edge is new. Returns 0 (also when the owner already had the edge); EZ_ECYCLIC if from == to
 * or a new edge would close a cycle; EZ_EINVAL for NULL topics; EZ_ENOMEM. On any error the graph
 * is unchanged. Afterwards both topics are nodes. */
int ezi_dag_add_edge_owned(ezi_dag *d, const char *from, const char *to, const char *owner,
                           bool *changed);

/* Removes `owner` (NULL: persistent) from the edge from -> to, if it has it; the edge goes with
 * its last owner (then *changed, which may be NULL, is set true, and its ends are pruned if they
 * have no other edge). Returns 0 (absent edges and owners are fine), or EZ_EINVAL for NULL
 * topics. */
int ezi_dag_remove_edge_owned(ezi_dag *d, const char *from, const char *to, const char *owner,
                              bool *changed);

/* Removes `owner` from every edge it holds (a session that ended); removed(user, from, to), if
 * not NULL, is called for each edge that went away with it, after its removal (the strings are
 * valid during the call). Returns 0, EZ_EINVAL, or EZ_ENOMEM (then nothing was removed). */
int ezi_dag_remove_owner(ezi_dag *d, const char *owner,
                         void (*removed)(void *user, const char *from, const char *to), void *user);

/* The owners of the edge from -> to: *persistent (may be NULL) tells whether the persistent
 * owner holds it; up to cap session owners go to owners_out (views valid until the edge
 * changes). Returns the number of session owners (0 without the edge, and *persistent false). */
size_t ezi_dag_edge_owners(const ezi_dag *d, const char *from, const char *to,
                           const char **owners_out, size_t cap, bool *persistent);

/* The persistent owner's add and remove (CONNECT / DISCONNECT), as before owners existed:
 * ezi_dag_add_edge_owned(d, from, to, NULL, NULL) and ezi_dag_remove_edge_owned(d, from, to,
 * NULL, NULL). An edge that sessions also own stays after ezi_dag_remove_edge. */
int ezi_dag_add_edge(ezi_dag *d, const char *from, const char *to);
int ezi_dag_remove_edge(ezi_dag *d, const char *from, const char *to);

/* True if a == b (a topic is its own upstream and downstream, even if not a node), or if there
 * is a directed path a -> ... -> b. Never allocates. */
bool ezi_dag_reaches(const ezi_dag *d, const char *a, const char *b);

/* Calls fn(user, t) once for `topic` and once for every topic t with a path t -> ... -> topic,
 * in no particular order (the strings are valid during the call; fn must not change the graph).
 * Costs the upstream part of the graph, not the whole; never allocates. */
void ezi_dag_upstream(const ezi_dag *d, const char *topic,
                      void (*fn)(void *user, const char *topic), void *user);

/* The same for `topic` and every topic t with a path topic -> ... -> t (its out-edges). */
void ezi_dag_downstream(const ezi_dag *d, const char *topic,
                        void (*fn)(void *user, const char *topic), void *user);

/* Number of nodes (topics with at least one edge). */
size_t ezi_dag_num_nodes(const ezi_dag *d);

/* Copies the graph into *out (see the layout above; *out is overwritten, not freed first). Free
 * with ez_graph_free. Returns 0 or EZ_ENOMEM (then *out is zeroed). */
int ezi_dag_export(const ezi_dag *d, ez_graph *out);

/* Encodes the graph as a Python pickle (protocol 4) of an ezmsg 3.9 ezmsg.core.dag.DAG: its
 * `graph`, a collections.defaultdict(set) of every node, and its `edge_owners`, a dict of
 * (from, to) tuples to sets of owners: None for the persistent owner, a uuid.UUID for an owner
 * string that is a UUID (any case; read back in lower case), the str itself otherwise. Python
 * 3.9.0 loads it to an equal DAG; the seed dialect's DAG (no edge_owners field) loads it too,
 * with the same `graph` (BUILD just sets the extra attribute). Nodes, targets and edges are
 * written in sorted order (persistent first, then owners sorted), framed as Python frames, so a
 * DAG whose edges are all persistent and were added in that order comes out as Python's own
 * bytes for it. *out is malloc'd (caller frees), *len its length. Returns 0, EZ_ENOMEM, or
 * EZ_EINVAL if a topic or owner is not UTF-8 (Python could not load it); *out is NULL on error. */
int ezi_dag_pickle(const ezi_dag *d, uint8_t **out, size_t *len);

/* Decodes a pickle of an ezmsg.core.dag.DAG, as Python's graph server sends it: the older form
 * (seed dialect, ezmsg 3.7 and 3.8: `graph` only) or ezmsg 3.9's (with `edge_owners`), into *out
 * (see the layout above; targets that are not keys become nodes without edges). The bytes are
 * decoded by the general codec (pickle.h: nothing is executed, memory is O(len)) and must then
 * have exactly the DAG's shape: PROTO 4 or 5; ezmsg.core.dag.DAG() with a state of `graph` (a
 * collections.defaultdict(builtins.set) of str -> set of str) and optionally `edge_owners` (a
 * dict of (str, str) -> non-empty set of None / uuid.UUID / str, whose keys are exactly the
 * graph's edges). Returns 0, EZ_ENOMEM, or EZ_EPROTO for anything else, malformed or
 * inconsistent (including trailing bytes, strings over EZ_MAX_CONTROL_STR, non-UTF-8 or with a
 * NUL, duplicate keys or owners, and more edges or owners than input bytes). On error *out is
 * zeroed. */
int ezi_dag_unpickle(const uint8_t *buf, size_t len, ez_graph *out);

/* The owners of each edge, as ezi_dag_unpickle_owned reports them: one allocation (free with
 * ezi_dag_owners_free). Edges sorted by (from, to); each one's owners sorted, NULL (the
 * persistent owner) first. present is false for the older form, which has no owners. */
typedef struct ezi_dag_edge_own {
  const char *from, *to;
  size_t n;
  const char **owners;
} ezi_dag_edge_own;

typedef struct ezi_dag_owners {
  bool present;
  size_t n_edges;
  ezi_dag_edge_own *edges;
} ezi_dag_owners;

/* ezi_dag_unpickle, and (owners not NULL) the edges' owners into *owners (zeroed on error). */
int ezi_dag_unpickle_owned(const uint8_t *buf, size_t len, ez_graph *out, ezi_dag_owners *owners);

/* Frees what ezi_dag_unpickle_owned filled in and zeroes it. NULL is a no-op. */
void ezi_dag_owners_free(ezi_dag_owners *owners);

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
