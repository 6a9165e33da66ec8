/* The control-plane dataclasses of ezmsg 3.9.0 (ezmsg.core.graphmeta) as plain C structs, with
 * a parser (pickle tree -> struct) and a builder (struct -> tree / bytes) for each.
 *
 * Every class is described by a table (ezi_m39_class: its fields' names, in graphmeta.py's
 * order, types and places in the struct) and one engine parses and builds them all. Parsing
 * checks the class (an instance of ezmsg.core.graphmeta.<Name> pickled the dataclass way:
 * NEWOBJ(class, ()) + BUILD(state dict)), that every declared field is there with a value of its
 * declared type (None where Optional), and that dict keys are unique; anything else is
 * EZ_EPROTO with a message naming the class and field. Attributes the class does not declare
 * are ignored (a later ezmsg may add fields). An int is accepted where a float is declared, as
 * Python would; a bool is not an int here. str fields must be UTF-8 without NUL.
 *
 * Memory. A parsed struct points into the tree it came from (strings, bytes, kept subtrees) and
 * into arrays the parser allocates in the document passed as `d` (usually the tree's own): it
 * needs no freeing and lives as long as both documents. Building copies the struct's strings
 * and bytes into the new tree, but kept subtrees (ezi_pk pointers: GraphMetadata, settings
 * values, schemas) are referenced, not copied: the new tree's document keeps their documents
 * alive (ezi_pk_doc_keep), so the source may be freed once the struct is no longer needed.
 * Parsing allocates at most about twice the documents' size (shared subtrees cannot blow it up).
 *
 * Threads: pure functions; a document is used by one thread at a time. */
#ifndef EZI_META39_H
#define EZI_META39_H

#include "proto/pickle.h"

#include <stdbool.h>
#include <string.h>

#define EZI_M39_MOD "ezmsg.core.graphmeta"

/* ---- value types ---------------------------------------------------------------------------- */

typedef struct ezi_m39_oint { /* int | None */
  bool has;
  int64_t v;
} ezi_m39_oint;

typedef struct ezi_m39_ofloat { /* float | None */
  bool has;
  double v;
} ezi_m39_ofloat;

typedef struct ezi_m39_uuid { /* uuid.UUID (| None where Optional: has = false) */
  bool has;
  char s[37]; /* canonical, lower case */
} ezi_m39_uuid;

typedef struct ezi_m39_bytes { /* bytes | None */
  bool has;
  const uint8_t *p;
  size_t len;
} ezi_m39_bytes;

typedef struct ezi_m39_strs { /* list[str] (| None where Optional: has = false) */
  bool has;
  size_t n;
  const char **v;
} ezi_m39_strs;

typedef struct ezi_m39_uuids { /* list[UUID] | None */
  bool has;
  size_t n;
  ezi_m39_uuid *v;
} ezi_m39_uuids;

typedef struct ezi_m39_edge { /* graphmeta.Edge, a NamedTuple */
  const char *from_topic, *to_topic;
} ezi_m39_edge;

#define EZI_M39_NONE (-1) /* an Optional enum field holding None */

/* The enums, by index; each member's value is its name. */
typedef enum { EZI_M39_INITIAL_SETTINGS, EZI_M39_SETTINGS_UPDATED } ezi_m39_settings_event_type;
typedef enum { EZI_M39_GRAPH_CHANGED, EZI_M39_PROCESS_CHANGED } ezi_m39_topology_event_type;
typedef enum {
  EZI_M39_OP_PING,
  EZI_M39_OP_GET_PROCESS_STATS,
  EZI_M39_OP_GET_PROFILING_SNAPSHOT,
  EZI_M39_OP_SET_PROFILING_TRACE,
  EZI_M39_OP_GET_PROFILING_TRACE_BATCH,
  EZI_M39_OP_UPDATE_SETTING_FIELD,
} ezi_m39_operation;
typedef enum {
  EZI_M39_ERR_UNROUTABLE_UNIT,
  EZI_M39_ERR_ROUTE_WRITE_FAILED,
  EZI_M39_ERR_TIMEOUT,
  EZI_M39_ERR_PROCESS_DISCONNECTED,
  EZI_M39_ERR_UNSUPPORTED_OPERATION,
  EZI_M39_ERR_HANDLER_NOT_CONFIGURED,
  EZI_M39_ERR_HANDLER_ERROR,
  EZI_M39_ERR_INVALID_RESPONSE,
} ezi_m39_error_code;
typedef enum {
  EZI_M39_CH_LOCAL,
  EZI_M39_CH_SHM,
  EZI_M39_CH_TCP,
  EZI_M39_CH_UNKNOWN
} ezi_m39_channel;

typedef struct ezi_m39_enum {
  const char *cls; /* the class name in ezmsg.core.graphmeta */
  const char *const *values;
  int n;
} ezi_m39_enum;

extern const ezi_m39_enum EZI_M39_SETTINGS_EVENT_TYPE, EZI_M39_TOPOLOGY_EVENT_TYPE,
    EZI_M39_PROCESS_CONTROL_OPERATION, EZI_M39_PROCESS_CONTROL_ERROR_CODE,
    EZI_M39_PROFILE_CHANNEL_TYPE;

/* The member's value (= name) of index i, or NULL. */
const char *ezi_m39_enum_name(const ezi_m39_enum *e, int i);
/* The index of a member's value, or -1. */
int ezi_m39_enum_index(const ezi_m39_enum *e, const char *value);

/* ---- the classes ---------------------------------------------------------------------------- */

typedef struct ezi_m39_process_registration {
  int64_t pid;
  const char *host;
  ezi_m39_strs units;
} ezi_m39_process_registration;

typedef struct ezi_m39_ownership_update { /* ProcessOwnershipUpdate */
  ezi_m39_strs added_units, removed_units;
} ezi_m39_ownership_update;

typedef struct ezi_m39_settings_value { /* SettingsSnapshotValue */
  ezi_m39_bytes serialized;
  const ezi_pk *repr_value;       /* a dict or a str */
  const ezi_pk *structured_value; /* a dict, or NULL for None */
  const ezi_pk *settings_schema;  /* a SettingsSchemaMetadata, or NULL for None */
} ezi_m39_settings_value;

typedef struct ezi_m39_settings_update { /* ProcessSettingsUpdate */
  const char *component_address;
  const ezi_pk *value; /* a SettingsSnapshotValue, kept as it came */
  double timestamp;
} ezi_m39_settings_update;

typedef struct ezi_m39_control_request { /* ProcessControlRequest */
  const char *request_id, *unit_address;
  const char *operation;  /* the operation's value: the enum member's, or the plain str */
  bool operation_is_enum; /* a ProcessControlOperation (built as one) rather than a str */
  ezi_m39_bytes payload;
} ezi_m39_control_request;

typedef struct ezi_m39_control_response { /* ProcessControlResponse */
  const char *request_id;
  bool ok;
  ezi_m39_bytes payload;
  const char *error;       /* NULL: None */
  int error_code;          /* ezi_m39_error_code, or EZI_M39_NONE */
  ezi_m39_uuid process_id; /* has = false: None */
} ezi_m39_control_response;

typedef struct ezi_m39_ping { /* ProcessPing */
  ezi_m39_uuid process_id;
  int64_t pid;
  const char *host;
  double timestamp;
} ezi_m39_ping;

typedef struct ezi_m39_stats { /* ProcessStats */
  ezi_m39_uuid process_id;
  int64_t pid;
  const char *host;
  ezi_m39_strs owned_units;
  double timestamp;
} ezi_m39_stats;

typedef struct ezi_m39_settings_event { /* SettingsChangedEvent */
  int64_t seq;
  int event_type; /* ezi_m39_settings_event_type */
  const char *component_address;
  double timestamp;
  const char *source_session_id;  /* NULL: None */
  ezi_m39_uuid source_process_id; /* has = false: None */
  ezi_m39_settings_value value;
} ezi_m39_settings_event;

typedef struct ezi_m39_topology_event { /* TopologyChangedEvent */
  int64_t seq;
  int event_type; /* ezi_m39_topology_event_type */
  double timestamp;
  ezi_m39_strs changed_topics;
  const char *source_session_id;  /* NULL: None */
  ezi_m39_uuid source_process_id; /* has = false: None */
} ezi_m39_topology_event;

typedef struct ezi_m39_snapshot_session { /* SnapshotSession */
  size_t n_edges;
  ezi_m39_edge *edges;
  const ezi_pk *metadata; /* a GraphMetadata (see the accessors below), or NULL for None */
} ezi_m39_snapshot_session;

typedef struct ezi_m39_snapshot_process { /* SnapshotProcess */
  ezi_m39_uuid process_id;
  ezi_m39_oint pid;
  const char *host; /* NULL: None */
  ezi_m39_strs units;
} ezi_m39_snapshot_process;

typedef struct ezi_m39_graph_snapshot { /* GraphSnapshot; dicts as parallel arrays */
  size_t n_graph;                       /* graph: dict[str, list[str]] */
  const char **graph_keys;
  ezi_m39_strs *graph_values;
  size_t n_edge_owners; /* edge_owners: dict[Edge, list[str]] */
  ezi_m39_edge *edge_owner_keys;
  ezi_m39_strs *edge_owners;
  size_t n_sessions; /* sessions: dict[str, SnapshotSession] */
  const char **session_keys;
  ezi_m39_snapshot_session *sessions;
  size_t n_processes; /* processes: dict[UUID, SnapshotProcess] */
  ezi_m39_uuid *process_keys;
  ezi_m39_snapshot_process *processes;
} ezi_m39_graph_snapshot;

typedef struct ezi_m39_stream_control { /* ProfilingStreamControl */
  double interval;
  int64_t max_samples;
  ezi_m39_uuids process_ids;
  bool include_empty_batches;
} ezi_m39_stream_control;

typedef struct ezi_m39_trace_control { /* ProfilingTraceControl */
  bool enabled;
  int64_t sample_mod;
  ezi_m39_strs publisher_topics, subscriber_topics, publisher_endpoint_ids, subscriber_endpoint_ids,
      metrics;
  ezi_m39_ofloat ttl_seconds;
} ezi_m39_trace_control;

typedef struct ezi_m39_trace_sample { /* ProfilingTraceSample */
  double timestamp;
  const char *endpoint_id, *topic, *metric;
  double value;
  int channel_kind; /* ezi_m39_channel, or EZI_M39_NONE */
  ezi_m39_oint sample_seq;
} ezi_m39_trace_sample;

typedef struct ezi_m39_trace_batch { /* ProcessProfilingTraceBatch */
  ezi_m39_uuid process_id;
  int64_t pid;
  const char *host;
  double timestamp;
  size_t n_samples;
  ezi_m39_trace_sample *samples;
} ezi_m39_trace_batch;

typedef struct ezi_m39_trace_stream_batch { /* ProfilingTraceStreamBatch */
  double timestamp;
  size_t n_batches; /* batches: dict[UUID, ProcessProfilingTraceBatch] */
  ezi_m39_uuid *batch_keys;
  ezi_m39_trace_batch *batches;
} ezi_m39_trace_stream_batch;
/* An attribute of a ProfilingTraceStreamBatch by which our server tells a reader how many samples
 * it was too slow to take since its previous batch (an int, set only when nonzero; Python's
 * unpickler sets it as an attribute nobody reads, our parser skips it). */
#define EZI_M39_DROPPED_ATTR "ezmsg_c_dropped"
/* The attribute our graph server adds to the GraphSnapshots it sends (a str: the ezmsg version it
 * greets with): a released-dialect client of ours that finds it knows it may send PROFILE. */
#define EZI_GS_MARK_ATTR "ezmsg_c_server"

typedef struct ezi_m39_pub_profile { /* PublisherProfileSnapshot */
  const char *endpoint_id, *topic;
  int64_t messages_published_total, messages_published_window;
  double publish_rate_hz_window;
  int64_t inflight_messages_current, num_buffers;
  double timestamp;
} ezi_m39_pub_profile;

typedef struct ezi_m39_sub_profile { /* SubscriberProfileSnapshot */
  const char *endpoint_id, *topic;
  int64_t messages_received_total, messages_received_window;
  int channel_kind_last; /* ezi_m39_channel */
  double timestamp;
} ezi_m39_sub_profile;

typedef struct ezi_m39_profiling_snapshot { /* ProcessProfilingSnapshot */
  ezi_m39_uuid process_id;
  int64_t pid;
  const char *host;
  double window_seconds, timestamp;
  size_t n_publishers; /* publishers: dict[str, PublisherProfileSnapshot] */
  const char **publisher_keys;
  ezi_m39_pub_profile *publishers;
  size_t n_subscribers; /* subscribers: dict[str, SubscriberProfileSnapshot] */
  const char **subscriber_keys;
  ezi_m39_sub_profile *subscribers;
} ezi_m39_profiling_snapshot;

/* ---- the engine ----------------------------------------------------------------------------- */

/* The kinds of field the engine knows ("O": Optional, None allowed). */
typedef enum ezi_m39_kind {
  EZI_M39_F_STR,            /* const char * */
  EZI_M39_F_OSTR,           /* const char *, NULL: None */
  EZI_M39_F_INT,            /* int64_t */
  EZI_M39_F_OINT,           /* ezi_m39_oint */
  EZI_M39_F_FLOAT,          /* double */
  EZI_M39_F_OFLOAT,         /* ezi_m39_ofloat */
  EZI_M39_F_BOOL,           /* bool */
  EZI_M39_F_OBYTES,         /* ezi_m39_bytes */
  EZI_M39_F_UUID,           /* ezi_m39_uuid */
  EZI_M39_F_OUUID,          /* ezi_m39_uuid */
  EZI_M39_F_STRS,           /* ezi_m39_strs */
  EZI_M39_F_OSTRS,          /* ezi_m39_strs */
  EZI_M39_F_OUUIDS,         /* ezi_m39_uuids */
  EZI_M39_F_ENUM,           /* int, sub: the ezi_m39_enum */
  EZI_M39_F_OENUM,          /* int or EZI_M39_NONE */
  EZI_M39_F_OP,             /* ProcessControlOperation | str: const char * at off, bool at off_n */
  EZI_M39_F_NODE,           /* const ezi_pk *, sub: NULL or the class name it must have */
  EZI_M39_F_ONODE,          /* const ezi_pk *, NULL: None */
  EZI_M39_F_REPR,           /* const ezi_pk *, a dict or a str */
  EZI_M39_F_ODICT,          /* const ezi_pk *, a dict or NULL for None */
  EZI_M39_F_OBJ,            /* an embedded struct of class sub */
  EZI_M39_F_EDGES,          /* list[Edge]: ezi_m39_edge * at off, size_t at off_n */
  EZI_M39_F_OBJS,           /* list[sub]: array at off, size_t at off_n */
  EZI_M39_F_DICT_STR_OBJ,   /* dict[str, sub]: keys at off_keys, values at off, count at off_n */
  EZI_M39_F_DICT_UUID_OBJ,  /* dict[UUID, sub] */
  EZI_M39_F_DICT_STR_STRS,  /* dict[str, list[str]] */
  EZI_M39_F_DICT_EDGE_STRS, /* dict[Edge, list[str]] */
} ezi_m39_kind;

typedef struct ezi_m39_field {
  const char *name;
  uint8_t type;    /* ezi_m39_kind */
  size_t off;      /* the value, or the array of values / keys' values */
  size_t off_n;    /* containers: the count */
  size_t off_keys; /* dicts: the array of keys */
  const void *sub; /* a nested ezi_m39_class, an ezi_m39_enum, or a class name to check */
} ezi_m39_field;

typedef struct ezi_m39_class {
  const char *name; /* in ezmsg.core.graphmeta */
  size_t size;      /* of its struct */
  const ezi_m39_field *fields;
  size_t n_fields;
} ezi_m39_class;

extern const ezi_m39_class EZI_M39_PROCESS_REGISTRATION, EZI_M39_PROCESS_OWNERSHIP_UPDATE,
    EZI_M39_SETTINGS_SNAPSHOT_VALUE, EZI_M39_PROCESS_SETTINGS_UPDATE,
    EZI_M39_PROCESS_CONTROL_REQUEST, EZI_M39_PROCESS_CONTROL_RESPONSE, EZI_M39_PROCESS_PING,
    EZI_M39_PROCESS_STATS, EZI_M39_SETTINGS_CHANGED_EVENT, EZI_M39_TOPOLOGY_CHANGED_EVENT,
    EZI_M39_SNAPSHOT_SESSION, EZI_M39_SNAPSHOT_PROCESS, EZI_M39_GRAPH_SNAPSHOT,
    EZI_M39_PROFILING_STREAM_CONTROL, EZI_M39_PROFILING_TRACE_CONTROL,
    EZI_M39_PROFILING_TRACE_SAMPLE, EZI_M39_PROCESS_PROFILING_TRACE_BATCH,
    EZI_M39_PROFILING_TRACE_STREAM_BATCH, EZI_M39_PUBLISHER_PROFILE_SNAPSHOT,
    EZI_M39_SUBSCRIBER_PROFILE_SNAPSHOT, EZI_M39_PROCESS_PROFILING_SNAPSHOT;

/* Parses the instance n of class c into *out (a struct of c->size bytes, overwritten), with
 * arrays allocated in d. Returns 0, EZ_EPROTO (err says why), or EZ_ENOMEM. */
int ezi_m39_parse(ezi_pk_doc *d, const ezi_m39_class *c, const ezi_pk *n, void *out,
                  ezi_pk_err *err);
/* Builds the instance of class c that the struct `in` describes, as a new tree in d. Returns 0,
 * EZ_ENOMEM, or EZ_EINVAL (a NULL required str, a str that is not UTF-8, an enum index out of
 * range, a malformed UUID string, a kept subtree of the wrong kind). */
int ezi_m39_build(ezi_pk_doc *d, const ezi_m39_class *c, const void *in, ezi_pk **out,
                  ezi_pk_err *err);
/* Decodes a pickle and parses it: *doc (caller frees) owns the tree and the struct's arrays. */
int ezi_m39_load(const ezi_m39_class *c, const uint8_t *buf, size_t len, ezi_pk_doc **doc,
                 void *out, ezi_pk_err *err);
/* Builds and encodes (protocol 4, framed): *out is malloc'd (caller frees). */
int ezi_m39_dump(const ezi_m39_class *c, const void *in, uint8_t **out, size_t *len,
                 ezi_pk_err *err);

/* A list of instances (e.g. the settings events answer, list[SettingsChangedEvent]): *items is
 * an array of *n structs of c->size bytes allocated in d. */
int ezi_m39_parse_list(ezi_pk_doc *d, const ezi_m39_class *c, const ezi_pk *list, void **items,
                       size_t *n, ezi_pk_err *err);
int ezi_m39_build_list(ezi_pk_doc *d, const ezi_m39_class *c, const void *items, size_t n,
                       ezi_pk **out, ezi_pk_err *err);
/* A dict[str, instance] (e.g. the settings snapshot answer, dict[str, SettingsSnapshotValue]). */
int ezi_m39_parse_dict(ezi_pk_doc *d, const ezi_m39_class *c, const ezi_pk *dict,
                       const char ***keys, void **items, size_t *n, ezi_pk_err *err);
int ezi_m39_build_dict(ezi_pk_doc *d, const ezi_m39_class *c, const char *const *keys,
                       const void *items, size_t n, ezi_pk **out, ezi_pk_err *err);

/* ---- GraphMetadata, kept as a subtree (meta39_graph.c) -------------------------------------- */

/* One component of a GraphMetadata (a ComponentMetadata, CollectionMetadata or UnitMetadata). */
typedef struct ezi_m39_component {
  const ezi_pk *node;
  const char *address, *name, *component_type, *settings_type;
  bool dynamic_enabled;              /* dynamic_settings.enabled */
  const char *dynamic_input_topic;   /* dynamic_settings.input_topic (NULL: None) */
  const char *dynamic_settings_type; /* dynamic_settings.settings_type (NULL: None) */
  ezi_m39_bytes initial_serialized;  /* initial_settings[0] */
  const ezi_pk *initial_repr;        /* initial_settings[1]: a dict or a str */
  const ezi_pk *settings_schema;     /* a SettingsSchemaMetadata, or NULL for None */
} ezi_m39_component;

/* Checks that meta is a GraphMetadata (schema_version int, root_name str | None, components a
 * dict of str -> component, each one's fields as above) and gives its number of components.
 * Returns 0 or EZ_EPROTO. */
int ezi_m39_meta_check(const ezi_pk *meta, size_t *n_components, ezi_pk_err *err);
/* Component i (in the dict's order) of a checked GraphMetadata. 0 or EZ_EPROTO. */
int ezi_m39_meta_component(const ezi_pk *meta, size_t i, ezi_m39_component *out, ezi_pk_err *err);
/* The component at `address`: 0, EZ_ENOENT, or EZ_EPROTO. */
int ezi_m39_meta_find(const ezi_pk *meta, const char *address, ezi_m39_component *out,
                      ezi_pk_err *err);
/* The SettingsSnapshotValue the graph server makes of a component's initial settings:
 * serialized = initial_settings[0], repr_value = initial_settings[1], structured_value = the same
 * if it is a dict (else None), settings_schema = the component's. */
void ezi_m39_initial_settings(const ezi_m39_component *c, ezi_m39_settings_value *out);

/* Our processes in a 3.9 graph (procclient.c registers them, profile39.c reads them). */
/* The unit an ezmsg-c process owns: this prefix, then "<host>/<pid>" (its second context on the
 * graph "<host>/<pid>/2", and so on). 3.9's tools reach a process through the units it owns
 * (profiling_snapshot_all asks each process's first unit). */
#define EZI_PROC_UNIT_PREFIX "ezmsg-c/"
/* The attribute our processes' ProcessProfilingSnapshots carry beyond 3.9.0's fields: the seed
 * schema's profile of the process (publishers and channels), as JSON text; 3.9's unpickling keeps
 * and ignores it, ours (profile39.c) uses it. */
#define EZI_PROC_PROFILE_ATTR "ezmsg_c_profile"
/* The payload of a GET_PROFILING_SNAPSHOT from ezmsg-c's `ezmsg profile` to one of our processes:
 * this prefix, then the window wanted in seconds ("ezmsg-c window 2"). Our process gives its
 * profile over that window at once (our telemetry keeps it), so one request does; 3.9's processes
 * ignore a snapshot request's payload. */
#define EZI_PROC_WINDOW_ASK "ezmsg-c window "

/* A unit our graph server answers for itself, never routing it (on ours no process can own it):
 * a session of ours asks it EZI_GS_OP_PROFILE_TARGETS to learn at once, without the graph's
 * snapshot, that the server is ours and which processes it must ask for a profile. 3.9.0's server
 * answers UNROUTABLE_UNIT and logs nothing. */
#define EZI_GS_SERVER_UNIT "ezmsg-c/graphserver"
/* Its answer: ok, and the payload JSON {"foreign": [unit, ...]}, the first unit of each process
 * that is not ezmsg-c's (ours answer PROFILE), in no order. Other operations:
 * UNSUPPORTED_OPERATION. */
#define EZI_GS_OP_PROFILE_TARGETS "EZMSG_C_PROFILE_TARGETS"

/* True if a unit name is an ezmsg-c process's (EZI_PROC_UNIT_PREFIX). Any thread. */
static inline bool ezi_proc_is_ours(const char *unit) {
  return !strncmp(unit, EZI_PROC_UNIT_PREFIX, sizeof EZI_PROC_UNIT_PREFIX - 1);
}

#endif
