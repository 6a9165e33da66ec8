/* The field tables of the ezmsg 3.9.0 control-plane dataclasses (graphmeta.py), in declaration
 * order, and their enums. */
#include "proto/meta39.h"

#include <stddef.h>

#define F(S, f, kind)                                                                              \
  { #f, EZI_M39_F_##kind, offsetof(S, f), 0, 0, NULL }
#define FS(S, f, kind, sub)                                                                        \
  { #f, EZI_M39_F_##kind, offsetof(S, f), 0, 0, sub }
#define FN(S, f, kind, nf, sub)                                                                    \
  { #f, EZI_M39_F_##kind, offsetof(S, f), offsetof(S, nf), 0, sub }
#define FD(S, f, kind, kf, nf, sub)                                                                \
  { #f, EZI_M39_F_##kind, offsetof(S, f), offsetof(S, nf), offsetof(S, kf), sub }
#define CLASS(var, pyname, S, table)                                                               \
  const ezi_m39_class var = {pyname, sizeof(S), table, sizeof(table) / sizeof(*table)}

/* ---- enums ---------------------------------------------------------------------------------- */

static const char *const settings_event_types[] = {"INITIAL_SETTINGS", "SETTINGS_UPDATED"};
static const char *const topology_event_types[] = {"GRAPH_CHANGED", "PROCESS_CHANGED"};
static const char *const operations[] = {"PING",
                                         "GET_PROCESS_STATS",
                                         "GET_PROFILING_SNAPSHOT",
                                         "SET_PROFILING_TRACE",
                                         "GET_PROFILING_TRACE_BATCH",
                                         "UPDATE_SETTING_FIELD"};
static const char *const error_codes[] = {
    "UNROUTABLE_UNIT",       "ROUTE_WRITE_FAILED",     "TIMEOUT",       "PROCESS_DISCONNECTED",
    "UNSUPPORTED_OPERATION", "HANDLER_NOT_CONFIGURED", "HANDLER_ERROR", "INVALID_RESPONSE"};
static const char *const channel_types[] = {"LOCAL", "SHM", "TCP", "UNKNOWN"};

#define ENUM(var, cls, values)                                                                     \
  const ezi_m39_enum var = {cls, values, sizeof(values) / sizeof(*values)}
ENUM(EZI_M39_SETTINGS_EVENT_TYPE, "SettingsEventType", settings_event_types);
ENUM(EZI_M39_TOPOLOGY_EVENT_TYPE, "TopologyEventType", topology_event_types);
ENUM(EZI_M39_PROCESS_CONTROL_OPERATION, "ProcessControlOperation", operations);
ENUM(EZI_M39_PROCESS_CONTROL_ERROR_CODE, "ProcessControlErrorCode", error_codes);
ENUM(EZI_M39_PROFILE_CHANNEL_TYPE, "ProfileChannelType", channel_types);

/* ---- process control ------------------------------------------------------------------------ */

#define S ezi_m39_process_registration
static const ezi_m39_field registration[] = {F(S, pid, INT), F(S, host, STR), F(S, units, STRS)};
CLASS(EZI_M39_PROCESS_REGISTRATION, "ProcessRegistration", S, registration);
#undef S

#define S ezi_m39_ownership_update
static const ezi_m39_field ownership[] = {F(S, added_units, STRS), F(S, removed_units, STRS)};
CLASS(EZI_M39_PROCESS_OWNERSHIP_UPDATE, "ProcessOwnershipUpdate", S, ownership);
#undef S

#define S ezi_m39_settings_value
static const ezi_m39_field settings_value[] = {
    F(S, serialized, OBYTES), F(S, repr_value, REPR), F(S, structured_value, ODICT),
    FS(S, settings_schema, ONODE, "SettingsSchemaMetadata")};
CLASS(EZI_M39_SETTINGS_SNAPSHOT_VALUE, "SettingsSnapshotValue", S, settings_value);
#undef S

#define S ezi_m39_settings_update
static const ezi_m39_field settings_update[] = {F(S, component_address, STR),
                                                FS(S, value, NODE, "SettingsSnapshotValue"),
                                                F(S, timestamp, FLOAT)};
CLASS(EZI_M39_PROCESS_SETTINGS_UPDATE, "ProcessSettingsUpdate", S, settings_update);
#undef S

#define S ezi_m39_control_request
static const ezi_m39_field control_request[] = {F(S, request_id, STR), F(S, unit_address, STR),
                                                FN(S, operation, OP, operation_is_enum, NULL),
                                                F(S, payload, OBYTES)};
CLASS(EZI_M39_PROCESS_CONTROL_REQUEST, "ProcessControlRequest", S, control_request);
#undef S

#define S ezi_m39_control_response
static const ezi_m39_field control_response[] = {
    F(S, request_id, STR),
    F(S, ok, BOOL),
    F(S, payload, OBYTES),
    F(S, error, OSTR),
    FS(S, error_code, OENUM, &EZI_M39_PROCESS_CONTROL_ERROR_CODE),
    F(S, process_id, OUUID)};
CLASS(EZI_M39_PROCESS_CONTROL_RESPONSE, "ProcessControlResponse", S, control_response);
#undef S

#define S ezi_m39_ping
static const ezi_m39_field ping[] = {F(S, process_id, UUID), F(S, pid, INT), F(S, host, STR),
                                     F(S, timestamp, FLOAT)};
CLASS(EZI_M39_PROCESS_PING, "ProcessPing", S, ping);
#undef S

#define S ezi_m39_stats
static const ezi_m39_field stats[] = {F(S, process_id, UUID), F(S, pid, INT), F(S, host, STR),
                                      F(S, owned_units, STRS), F(S, timestamp, FLOAT)};
CLASS(EZI_M39_PROCESS_STATS, "ProcessStats", S, stats);
#undef S

/* ---- events --------------------------------------------------------------------------------- */

#define S ezi_m39_settings_event
static const ezi_m39_field settings_event[] = {
    F(S, seq, INT),
    FS(S, event_type, ENUM, &EZI_M39_SETTINGS_EVENT_TYPE),
    F(S, component_address, STR),
    F(S, timestamp, FLOAT),
    F(S, source_session_id, OSTR),
    F(S, source_process_id, OUUID),
    FS(S, value, OBJ, &EZI_M39_SETTINGS_SNAPSHOT_VALUE)};
CLASS(EZI_M39_SETTINGS_CHANGED_EVENT, "SettingsChangedEvent", S, settings_event);
#undef S

#define S ezi_m39_topology_event
static const ezi_m39_field topology_event[] = {
    F(S, seq, INT),
    FS(S, event_type, ENUM, &EZI_M39_TOPOLOGY_EVENT_TYPE),
    F(S, timestamp, FLOAT),
    F(S, changed_topics, STRS),
    F(S, source_session_id, OSTR),
    F(S, source_process_id, OUUID)};
CLASS(EZI_M39_TOPOLOGY_CHANGED_EVENT, "TopologyChangedEvent", S, topology_event);
#undef S

/* ---- the graph snapshot --------------------------------------------------------------------- */

#define S ezi_m39_snapshot_session
static const ezi_m39_field snapshot_session[] = {FN(S, edges, EDGES, n_edges, NULL),
                                                 FS(S, metadata, ONODE, "GraphMetadata")};
CLASS(EZI_M39_SNAPSHOT_SESSION, "SnapshotSession", S, snapshot_session);
#undef S

#define S ezi_m39_snapshot_process
static const ezi_m39_field snapshot_process[] = {F(S, process_id, UUID), F(S, pid, OINT),
                                                 F(S, host, OSTR), F(S, units, STRS)};
CLASS(EZI_M39_SNAPSHOT_PROCESS, "SnapshotProcess", S, snapshot_process);
#undef S

#define S ezi_m39_graph_snapshot
static const ezi_m39_field graph_snapshot[] = {
    {"graph", EZI_M39_F_DICT_STR_STRS, offsetof(S, graph_values), offsetof(S, n_graph),
     offsetof(S, graph_keys), NULL},
    FD(S, edge_owners, DICT_EDGE_STRS, edge_owner_keys, n_edge_owners, NULL),
    FD(S, sessions, DICT_STR_OBJ, session_keys, n_sessions, &EZI_M39_SNAPSHOT_SESSION),
    FD(S, processes, DICT_UUID_OBJ, process_keys, n_processes, &EZI_M39_SNAPSHOT_PROCESS)};
CLASS(EZI_M39_GRAPH_SNAPSHOT, "GraphSnapshot", S, graph_snapshot);
#undef S

/* ---- profiling ------------------------------------------------------------------------------ */

#define S ezi_m39_stream_control
static const ezi_m39_field stream_control[] = {F(S, interval, FLOAT), F(S, max_samples, INT),
                                               F(S, process_ids, OUUIDS),
                                               F(S, include_empty_batches, BOOL)};
CLASS(EZI_M39_PROFILING_STREAM_CONTROL, "ProfilingStreamControl", S, stream_control);
#undef S

#define S ezi_m39_trace_control
static const ezi_m39_field trace_control[] = {F(S, enabled, BOOL),
                                              F(S, sample_mod, INT),
                                              F(S, publisher_topics, OSTRS),
                                              F(S, subscriber_topics, OSTRS),
                                              F(S, publisher_endpoint_ids, OSTRS),
                                              F(S, subscriber_endpoint_ids, OSTRS),
                                              F(S, metrics, OSTRS),
                                              F(S, ttl_seconds, OFLOAT)};
CLASS(EZI_M39_PROFILING_TRACE_CONTROL, "ProfilingTraceControl", S, trace_control);
#undef S

#define S ezi_m39_trace_sample
static const ezi_m39_field trace_sample[] = {
    F(S, timestamp, FLOAT), F(S, endpoint_id, STR),
    F(S, topic, STR),       F(S, metric, STR),
    F(S, value, FLOAT),     FS(S, channel_kind, OENUM, &EZI_M39_PROFILE_CHANNEL_TYPE),
    F(S, sample_seq, OINT)};
CLASS(EZI_M39_PROFILING_TRACE_SAMPLE, "ProfilingTraceSample", S, trace_sample);
#undef S

#define S ezi_m39_trace_batch
static const ezi_m39_field trace_batch[] = {
    F(S, process_id, UUID), F(S, pid, INT), F(S, host, STR), F(S, timestamp, FLOAT),
    FN(S, samples, OBJS, n_samples, &EZI_M39_PROFILING_TRACE_SAMPLE)};
CLASS(EZI_M39_PROCESS_PROFILING_TRACE_BATCH, "ProcessProfilingTraceBatch", S, trace_batch);
#undef S

#define S ezi_m39_trace_stream_batch
static const ezi_m39_field trace_stream_batch[] = {
    F(S, timestamp, FLOAT),
    FD(S, batches, DICT_UUID_OBJ, batch_keys, n_batches, &EZI_M39_PROCESS_PROFILING_TRACE_BATCH)};
CLASS(EZI_M39_PROFILING_TRACE_STREAM_BATCH, "ProfilingTraceStreamBatch", S, trace_stream_batch);
#undef S

#define S ezi_m39_pub_profile
static const ezi_m39_field pub_profile[] = {F(S, endpoint_id, STR),
                                            F(S, topic, STR),
                                            F(S, messages_published_total, INT),
                                            F(S, messages_published_window, INT),
                                            F(S, publish_rate_hz_window, FLOAT),
                                            F(S, inflight_messages_current, INT),
                                            F(S, num_buffers, INT),
                                            F(S, timestamp, FLOAT)};
CLASS(EZI_M39_PUBLISHER_PROFILE_SNAPSHOT, "PublisherProfileSnapshot", S, pub_profile);
#undef S

#define S ezi_m39_sub_profile
static const ezi_m39_field sub_profile[] = {
    F(S, endpoint_id, STR),
    F(S, topic, STR),
    F(S, messages_received_total, INT),
    F(S, messages_received_window, INT),
    FS(S, channel_kind_last, ENUM, &EZI_M39_PROFILE_CHANNEL_TYPE),
    F(S, timestamp, FLOAT)};
CLASS(EZI_M39_SUBSCRIBER_PROFILE_SNAPSHOT, "SubscriberProfileSnapshot", S, sub_profile);
#undef S

#define S ezi_m39_profiling_snapshot
static const ezi_m39_field profiling_snapshot[] = {
    F(S, process_id, UUID),
    F(S, pid, INT),
    F(S, host, STR),
    F(S, window_seconds, FLOAT),
    F(S, timestamp, FLOAT),
    FD(S, publishers, DICT_STR_OBJ, publisher_keys, n_publishers,
       &EZI_M39_PUBLISHER_PROFILE_SNAPSHOT),
    FD(S, subscribers, DICT_STR_OBJ, subscriber_keys, n_subscribers,
       &EZI_M39_SUBSCRIBER_PROFILE_SNAPSHOT)};
CLASS(EZI_M39_PROCESS_PROFILING_SNAPSHOT, "ProcessProfilingSnapshot", S, profiling_snapshot);
#undef S
