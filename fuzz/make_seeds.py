#!/usr/bin/env python3
"""Writes the hand-made seed inputs of fuzz/corpus/<target>/seed-* (the input formats are described
at the top of each fuzz/fuzz_<target>.c). The marshal and dagpickle seeds are copies of
tests/corpus/{marshal,dag}; the pickle and meta39 seeds are copies of tests/corpus/{pickle,meta39}
(and dag/v39_*) plus hostile pickles made here; regress-* files are crash reproducers and are
never touched here.

Usage: python3 fuzz/make_seeds.py   (from anywhere; rewrites the seed-* files)"""
import json
import os
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CORPUS = os.path.join(HERE, "corpus")
SEP = b"\xfe\xed\xfa\xce"

COMPLETE, PUBLISH, SUBSCRIBE, CONNECT, DISCONNECT, CYCLIC, PAUSE, SYNC, RESUME, UPDATE, DAG = range(11)
TX_SHM, TX_TCP, RX_ACK, SHM_CREATE, SHM_ATTACH, SHUTDOWN, CHANNEL, SHM_OK, SHM_FAILED = range(12, 21)
PROFILE, PROFILE_DATA = 21, 22

X_HELLO, X_RING = 0xE5, 0xE6  # ezmsg-c's ring extension (src/base/wire.h)
X_WIN_ASK, X_WIN = 0xE7, 0xE8  # ezmsg-c's TCP window extension (src/base/wire.h)
X_TCP_ASK, X_TCP = 0xEA, 0xEB  # a window's messages as their payload alone (src/base/wire.h)
HANDMADE = {"gsparse", "regframe", "txframe"}  # corpora whose seeds were written by hand: kept as they are
UUID1 = b"6f1c2f0e-8a4b-11ee-b9d1-0242ac120002"
UUID2 = b"7a0d1b2c-8a4b-11ee-b9d1-0242ac120002"
STUB = b"\x80\x05\x8c\x08builtins\x8c\x05bytes\x93\x97\x85\x52\x2e"


def u8(v):
    return bytes([v])


def u64(v):
    return struct.pack("<Q", v)


def s(b):
    if isinstance(b, str):
        b = b.encode()
    return u64(len(b)) + b


def marshal_c(msg_id, payload):
    return b"EZ" + u64(msg_id) + u64(2) + u64(len(STUB)) + u64(len(payload)) + STUB + payload


def marshal_py(msg_id, payload):
    pk = b"\x80\x05\x95" + u64(len(payload) + 3) + b"C" + u8(len(payload)) + payload + b"\x94."
    return b"EZ" + u64(msg_id) + u64(1) + u64(len(pk)) + pk


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def copy_dir(src, target):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    for n in sorted(os.listdir(src)):
        if n.endswith(".md"):
            continue
        shutil.copyfile(os.path.join(src, n), os.path.join(d, "seed-" + n))


def profile_docs():
    ref = {
        "window_s": 2.0,
        "publishers": [{
            "window_s": 2.0, "message_rate_hz": 50.0, "byte_rate_per_s": 51200.0,
            "messages": {"total": 1234, "window": 100}, "bytes": {"total": 1263616, "window": 102400},
            "backpressure": {"avg_ms": 0.25, "max_ms": 1.5, "samples": 100, "in_flight": 2},
            "type": "publisher", "id": UUID1.decode(), "topic": "/SRC/OUT", "pid": 4242,
            "num_buffers": 32}],
        "channels": [{
            "window_s": 2, "in_flight": 1, "type": "channel", "channel_id": UUID2.decode(),
            "pub_id": UUID1.decode(), "pid": 4243, "num_buffers": 32, "mode": "shm",
            "topic": "/SRC/OUT",
            "subscribers": [{"subscriber_id": UUID2.decode(), "handle": "/SINK/IN", "avg_ms": 0.1,
                             "max_ms": 0.4, "p50_ms": 0.1, "p99_ms": 0.3, "samples": 100,
                             "message_rate_hz": 50.0, "in_flight": 1},
                            {"subscriber_id": "x", "handle": None}]}],
    }
    return {
        "reference.json": json.dumps(ref).encode(),
        "empty.json": b'{"window_s": 2.0, "publishers": [], "channels": []}',
        "wrong_types.json": b'{"window_s": "2", "publishers": [{"id": 5, "pid": 1e30, '
                            b'"messages": [1], "backpressure": {"samples": -1}}], '
                            b'"channels": [{"subscribers": [{}], "num_buffers": -1e30}]}',
        "bad_subs.json": b'{"publishers": [], "channels": [{"subscribers": [1]}]}',
        "not_object.json": b'[{"publishers": [], "channels": []}]',
        "truncated.json": b'{"publishers": [], "channels": [',
        "unicode.json": b'{"publishers": [{"id": "\\u00e9\\ud83d\\ude00", "topic": "\\u0000x"}], '
                        b'"channels": []}',
        "leases.json": b'{"publishers": [{"id": "p", "num_buffers": 32, "backpressure": '
                       b'{"in_flight": 33}, "leases": [{"channel_id": "c1", "pid": 424242, '
                       b'"mode": "tcp", "in_flight": 32}, {"channel_id": "c2", "pid": 7, '
                       b'"mode": "local", "in_flight": 1}, {}]}], "channels": []}',
        "bad_leases.json": b'{"publishers": [{"leases": [1]}], "channels": []}',
    }


# meta39 selectors (fuzz/fuzz_meta39.c): class index, then META, LIST, DICT, DAG
M39 = ["process_registration", "ownership_update", "settings_value", "settings_update",
       "control_request", "control_response", "ping", "stats", "settings_event", "topology_event",
       "snapshot_session", "snapshot_process", "graph_snapshot", "stream_control", "trace_control",
       "trace_sample", "trace_batch", "trace_stream_batch", "pub_profile", "sub_profile",
       "profiling_snapshot"]
SEL_META, SEL_LIST, SEL_DICT, SEL_DAG, N_SEL = 21, 22, 23, 24, 25
M39_FILES = {  # tests/corpus/meta39 file -> selector
    "process_registration.bin": 0, "ownership_update.bin": 1, "settings_value_from_meta.bin": 2,
    "settings_update.bin": 3, "control_request_enum.bin": 4, "control_request_str.bin": 4,
    "control_response_ok.bin": 5, "control_response_err.bin": 5, "ping.bin": 6, "stats.bin": 7,
    "settings_event.bin": 8, "topology_event.bin": 9, "graph_snapshot.bin": 12,
    "stream_control.bin": 13, "stream_control_default.bin": 13, "trace_control.bin": 14,
    "trace_batch.bin": 16, "trace_batch_1500.bin": 16, "trace_stream_batch.bin": 17,
    "profiling_snapshot.bin": 20, "profiling_snapshot_big.bin": 20,
    "graph_metadata.bin": SEL_META,
    "settings_events_list.bin": SEL_LIST + N_SEL * 8,   # list of class 8
    "settings_snapshot_dict.bin": SEL_DICT + N_SEL * 2,  # dict of class 2
}


def frame(body):
    return b"\x80\x04\x95" + u64(len(body)) + body


def sbu(t):  # SHORT_BINUNICODE
    t = t.encode() if isinstance(t, str) else t
    return b"\x8c" + u8(len(t)) + t


def dataclass(name, fields, mod="ezmsg.core.graphmeta"):
    """A dataclass instance pickled as Python does (fields: list of (name, pickled value))."""
    body = sbu(mod) + sbu(name) + b"\x93)\x81}("
    for k, v in fields:
        body += sbu(k) + v
    return body + b"ub"


def hostile_pickles():
    deep = b"\x80\x04" + b"](" * 3000 + b"N" + b"a" + b"e" * 2999 + b"."
    diamond = b"\x80\x04N\x94"  # 60 tuples, each holding the one before twice: 2**60 paths
    for i in range(60):
        diamond += b"h" + u8(i) + b"h" + u8(i) + b"\x86\x94"
    diamond += b"."
    basic = open(os.path.join(ROOT, "tests", "corpus", "pickle", "basic_p4.bin"), "rb").read()
    return {
        "deep_lists": deep,
        "deep_dicts": b"\x80\x04" + b"}\x8c\x01k" * 500 + b"N" + b"s" * 500 + b".",
        "memo_cycle": b"\x80\x04]\x94h\x00a.",
        "memo_cycle_tuple": b"\x80\x04]\x94h\x00\x85a.",
        "memo_cycle_object": b"\x80\x04\x8c\x01m\x8c\x01C\x93)\x81\x94}\x8c\x01xh\x00sb.",
        "memo_sparse": b"\x80\x04Nr\xff\xff\xff\xff0j\xff\xff\xff\xff.",
        "memo_text": b"\x80\x02Np0\n0g0\n.",
        "diamond": diamond,
        "huge_str": b"\x80\x04X\xff\xff\xff\x7f.",
        "huge_str8": b"\x80\x04\x8d" + u64(2**63) + b".",
        "huge_bytes8": b"\x80\x04\x8e" + u64(2**40) + b"x.",
        "huge_bytearray": b"\x80\x05\x96" + u64(2**33) + b".",
        "huge_long4": b"\x80\x04\x8b\xff\xff\xff\x7f.",
        "huge_frame": b"\x80\x04\x95" + u64(2**62) + b"N.",
        "frame_split": b"\x80\x04\x95\x03" + b"\0" * 7 + b"\x8c\x02/a.",
        "unknown_persid": b"\x80\x04P0\n.",
        "unknown_ext1": b"\x80\x04\x82\x01.",
        "unknown_inst": b"\x80\x02(ios\nsystem\n.",
        "unknown_obj": b"\x80\x02(cos\nsystem\no.",
        "unknown_buffer": b"\x80\x05\x97.",
        "unknown_readonly": b"\x80\x05N\x98.",
        "proto0": b"(lp0\nI1\na.",
        "no_stop": b"\x80\x04N",
        "trailing": b"\x80\x04N.N",
        "truncated_half": basic[:len(basic) // 2],
        "reduce_os_system": b"\x80\x04\x8c\x02os\x8c\x06system\x93\x8c\x02ls\x85R.",
        "wrong_class": b"\x80\x04" + dataclass("ProcessPing", [("pid", b"K\x01")], mod="evil") + b".",
        "second_build": b"\x80\x04\x8c\x01m\x8c\x01C\x93)\x81}b}b.",
        "newobj_ex": b"\x80\x04\x8c\x01m\x8c\x01C\x93)}\x92(K\x01e}(\x8c\x01kK\x02ub.",
        "py2_codecs": b"\x80\x02c_codecs\nencode\nX\x02\x00\x00\x00\xc3\xbfX\x06\x00\x00\x00latin1\x86R.",
        "py2_set": b"\x80\x02c__builtin__\nset\n](K\x01K\x02e\x85R.",
        "unhashable_key": b"\x80\x04}]Ns.",
        "setitems_odd": b"\x80\x04}(Nu.",
    }


def meta39_hostile():
    uuid_int = b"\x8a\x11" + bytes(range(1, 17)) + b"\x00"
    uu = sbu("uuid") + sbu("UUID") + b"\x93)\x81}" + sbu("int") + uuid_int + b"sb"
    ping = lambda pid: dataclass("ProcessPing", [("process_id", uu), ("pid", pid), ("host", sbu("h")),
                                                 ("timestamp", b"G" + struct.pack(">d", 1.5))])
    topics = b"".join(sbu(f"/t{i}") for i in range(300))
    fan = b"](" + topics + b"e\x940"  # one list of 300 topics as memo 0, popped
    graph = b"}(" + b"".join(sbu(f"/k{i}") + b"h\x00" for i in range(300)) + b"u"
    blowup = (b"\x80\x04" + fan + sbu("ezmsg.core.graphmeta") + sbu("GraphSnapshot") + b"\x93)\x81}(" +
              sbu("graph") + graph + sbu("edge_owners") + b"}" + sbu("sessions") + b"}" +
              sbu("processes") + b"}ub.")
    enum = lambda v: sbu("ezmsg.core.graphmeta") + sbu("ProfileChannelType") + b"\x93" + sbu(v) + b"\x85R"
    sub = lambda kind: dataclass("SubscriberProfileSnapshot", [
        ("endpoint_id", sbu("e")), ("topic", sbu("t")), ("messages_received_total", b"K\x01"),
        ("messages_received_window", b"K\x01"), ("channel_kind_last", kind),
        ("timestamp", b"K\x01")])
    value = dataclass("SettingsSnapshotValue", [("serialized", b"N"), ("repr_value", sbu("r")),
                                                ("structured_value", b"N"), ("settings_schema", b"N")])
    return {
        "ping_ok": u8(6) + b"\x80\x04" + ping(b"K\x07") + b".",
        "ping_bool_pid": u8(6) + b"\x80\x04" + ping(b"\x88") + b".",
        "ping_as_stats": u8(7) + b"\x80\x04" + ping(b"K\x07") + b".",
        "ping_missing": u8(6) + b"\x80\x04" + dataclass("ProcessPing", [("pid", b"K\x01")]) + b".",
        "sub_enum_ok": u8(19) + b"\x80\x04" + sub(enum("TCP")) + b".",
        "sub_enum_bad": u8(19) + b"\x80\x04" + sub(enum("UDP")) + b".",
        "sub_enum_str": u8(19) + b"\x80\x04" + sub(sbu("TCP")) + b".",
        "snapshot_blowup": u8(12) + blowup,
        "list_not_list": u8(SEL_LIST) + b"\x80\x04N.",
        "dict_dup_keys": u8(SEL_DICT + N_SEL * 2) + b"\x80\x04}(" + sbu("k") + value +
                         sbu("k") + value + b"u.",
        "meta_not_meta": u8(SEL_META) + b"\x80\x04" + ping(b"K\x07") + b".",
    }


def main():
    if os.path.isdir(CORPUS):
        for t in os.listdir(CORPUS):
            if t in HANDMADE:
                continue
            for n in os.listdir(os.path.join(CORPUS, t)):
                if n.startswith("seed-"):
                    os.remove(os.path.join(CORPUS, t, n))

    copy_dir(os.path.join(ROOT, "tests", "corpus", "marshal"), "marshal")
    copy_dir(os.path.join(ROOT, "tests", "corpus", "dag"), "dagpickle")

    # pickle: the codec's vectors, a few of the dataclass ones, hostile pickles
    copy_dir(os.path.join(ROOT, "tests", "corpus", "pickle"), "pickle")
    for n in ["graph_snapshot.bin", "graph_metadata.bin", "settings_event.bin", "trace_batch.bin"]:
        write("pickle", "m39_" + n, open(os.path.join(ROOT, "tests", "corpus", "meta39", n), "rb").read())
    for n in ["v39_owners.bin", "v39_server_sessions.bin", "abc.bin"]:
        write("pickle", "dag_" + n, open(os.path.join(ROOT, "tests", "corpus", "dag", n), "rb").read())
    for name, data in hostile_pickles().items():
        write("pickle", name, data)

    # meta39: a selector byte, then a pickle
    for n, sel in M39_FILES.items():
        write("meta39", n, u8(sel) + open(os.path.join(ROOT, "tests", "corpus", "meta39", n), "rb").read())
    for n in sorted(os.listdir(os.path.join(ROOT, "tests", "corpus", "dag"))):
        if n.endswith(".md"):
            continue
        write("meta39", "dag_" + n, u8(SEL_DAG) + open(os.path.join(ROOT, "tests", "corpus", "dag", n), "rb").read())
    for name, data in meta39_hostile().items():
        write("meta39", name, data)

    for name, doc in profile_docs().items():
        write("profileparse", name, doc)

    # wire: limit selector, nops | step << 5, ops, stream
    U8, U64, STR = 0, 1, 2
    write("wire", "server_cmd", u8(6) + u8(3 | 0 << 5) + bytes([U8, STR, STR]) +
          (u8(CONNECT) + s("a") + s("b")) * 3)
    write("wire", "data_frame", u8(4) + u8(3 | 2 << 5) + bytes([U8, U64, STR]) +
          u8(TX_SHM) + u64(7) + s("psm_12345678") + u8(TX_SHM) + u64(8) + s("x" * 70))
    write("wire", "skip", u8(7) + u8(4 | 1 << 5) + bytes([U8, U64, U64, 3 | (17 << 2)]) +
          u8(TX_TCP) + u64(1) + u64(17) + b"y" * 17)
    write("wire", "uuid", u8(3) + u8(1 | 7 << 5) + bytes([STR]) + s(UUID1) + s(UUID2))
    write("wire", "addr", b"127.0.0.1:25978")
    write("wire", "huge_len", u8(6) + u8(2) + bytes([U8, STR]) + u8(1) + u64(2**64 - 1))

    # server: up to 3 connections separated by SEP
    addr = "127.0.0.1:1"
    srv = {
        "publish": u8(PUBLISH) + s("A") + s(addr),
        "subscribe": u8(SUBSCRIBE) + s("A") + u8(COMPLETE),
        "connect": u8(CONNECT) + s("A") + s("B"),
        "cycle": u8(CONNECT) + s("A") + s("A"),
        "disconnect": u8(DISCONNECT) + s("A") + s("B"),
        "dag": u8(DAG),
        "profile": u8(PROFILE) + u64(500),
        "shm": u8(SHM_CREATE) + u64(2) + u64(64),
        "shm_attach": u8(SHM_ATTACH) + s("psm_00000000"),
        "channel": u8(CHANNEL) + s(UUID1),
        "sync": u8(SYNC),
        "pause_resume": u8(PAUSE) + SEP + u8(RESUME),
        "unknown": u8(99),
        "truncated": u8(CONNECT) + u64(5) + b"ab",
        "too_long": u8(PUBLISH) + u64(2**21),
        "sub_pub": u8(SUBSCRIBE) + s("B") + u8(COMPLETE) * 3 + SEP + u8(CONNECT) + s("A") + s("B") +
                   SEP + u8(PUBLISH) + s("A") + s(addr) + u8(COMPLETE),
        "pub_profile": u8(PUBLISH) + s("A") + s(addr) + u8(PROFILE_DATA) + s('{"type":"publisher"}') +
                       SEP + u8(PROFILE) + u64(100),
        "pub_sync": u8(PUBLISH) + s("A") + s(addr) + u8(COMPLETE) + SEP + u8(SYNC),
        "pub_channel": u8(PUBLISH) + s("A") + s(addr) + SEP + u8(CHANNEL) + s(UUID1),
        "shutdown": u8(SHUTDOWN),
    }
    for name, data in srv.items():
        write("server", name, data)

    # channel: flags, stream [SEP segment block contents [SEP stream part 2]]
    shm_frames_raw = u8(TX_SHM) + u64(0) + s("psm_00000000")
    tcp = marshal_c(0, b"hello")
    write("channel", "tcp_one", u8(0) + u8(TX_TCP) + u64(0) + u64(len(tcp)) + tcp)
    frames = b"".join(u8(TX_TCP) + u64(i) + u64(len(m)) + m
                      for i, m in enumerate([marshal_c(0, b"a"), marshal_py(1, b"bc"),
                                             marshal_c(2, b""), marshal_c(3, b"d" * 100)]))
    write("channel", "tcp_four", u8(0) + frames)
    write("channel", "tcp_four_acks", u8(0x20) + frames)
    write("channel", "tcp_hold", u8(0x40) + frames)
    write("channel", "tcp_hold_midway", u8(0x70) + frames + SEP + SEP +
          u8(TX_TCP) + u64(4) + u64(len(marshal_c(4, b"e"))) + marshal_c(4, b"e"))
    write("channel", "raw_handshake", u8(0x80) + s("") + u8(COMPLETE) + u64(4) + frames)
    write("channel", "raw_handshake_shm", u8(0x80) + s("psm_00000000") + u8(COMPLETE) + u64(4) +
          shm_frames_raw + SEP + marshal_c(0, b"raw shm"))
    write("channel", "raw_bad_nbuf", u8(0x80) + s("") + u8(COMPLETE) + u64(0))
    write("channel", "raw_partial", u8(0x80) + u64(3) + b"ps")
    shm_frames = b"".join(u8(TX_SHM) + u64(i) + s("psm_00000000") for i in (0,))
    write("channel", "shm_one", u8(1) + shm_frames + SEP + marshal_c(0, b"shm payload"))
    write("channel", "shm_py", u8(1 | 0x20) + shm_frames + SEP + marshal_py(0, b"xyz"))
    write("channel", "shm_switch", u8(0) + shm_frames + SEP + marshal_c(0, b"switch"))
    write("channel", "shm_unknown", u8(2) + u8(TX_SHM) + u64(0) + s("psm_fzunknown"))
    write("channel", "x_ring_unknown", u8(2) + u8(X_RING) + u64(0) + s("psm_fzring"))
    write("channel", "x_ring_bad_name", u8(2) + u8(X_RING) + u64(0) + s("../fzring"))
    xwin = u8(X_WIN) + u64(0) + u64(16) + u64(8 << 20)
    write("channel", "x_win_four", u8(0) + xwin + frames)
    write("channel", "x_win_hold", u8(0x40) + xwin + frames + frames.replace(u64(0), u64(16), 1))
    write("channel", "x_win_huge", u8(0) + u8(X_WIN) + u64(0) + u64(1 << 40) + u64(1 << 62) + frames)
    write("channel", "x_win_late", u8(0x40) + frames + xwin)
    xtcp = b"".join(u8(X_TCP) + len(b).to_bytes(4, "little") + b for b in (b"x0", b"", b"x2" * 40))
    write("channel", "x_tcp_mixed", u8(0x20) + xwin + xtcp + frames.replace(u64(0), u64(3), 1))
    write("channel", "x_tcp_no_window", u8(0) + xtcp)
    write("channel", "x_tcp_huge", u8(0) + xwin + u8(X_TCP) + (0xFFFFFFFF).to_bytes(4, "little") + b"ab")
    write("channel", "x_win_budget", u8(0x40) + u8(X_WIN) + u64(0) + u64(16) + u64(100) + frames)
    write("channel", "bad_nbuf", u8(6 << 2) + frames)
    write("channel", "bad_cmd", u8(0) + u8(RX_ACK) + u64(0))
    write("channel", "raw_pickle", u8(0) + u8(TX_TCP) + u64(0) +
          u64(18 + 24 + 5 + 3) + b"EZ" + u64(0) + u64(3) + u64(5) + u64(3) + u64(0) + b"\x80\x05N.." + b"abc")

    # pubacks: flags, chunks
    hs = u8(CHANNEL) + s(UUID1)
    write("pubacks", "handshake_ack", u8(0) + hs + u8(SHM_OK) + u64(1234) + SEP + u8(RX_ACK) + u64(0))
    write("pubacks", "handshake_tcp", u8(0x20 | 1) + hs + u8(SHM_FAILED) + u64(1) + SEP +
          u8(RX_ACK) + u64(0) + SEP + u8(RX_ACK) + u64(1) + u8(RX_ACK) + u64(1))
    write("pubacks", "prepublished", u8(2 << 2 | 0x10) + hs + u8(SHM_OK) + u64(1) + SEP + SEP +
          u8(RX_ACK) + u64(2) + u8(RX_ACK) + u64(3))
    write("pubacks", "ring_hello", u8(0) + hs + u8(SHM_OK) + u64(1234) + u8(X_HELLO) + SEP + SEP +
          u8(RX_ACK) + u64(0))
    write("pubacks", "ring_hello_held", u8(1 << 2 | 0x10) + hs + u8(SHM_OK) + u64(1) + SEP +
          u8(X_HELLO) + SEP + u8(RX_ACK) + u64(0) + SEP + u8(RX_ACK) + u64(1))
    write("pubacks", "win_ask", u8(0x20 | 1) + hs + u8(SHM_FAILED) + u64(1) + u8(X_WIN_ASK) + SEP +
          SEP + u8(RX_ACK) + u64(1) + u8(RX_ACK) + u64(0) + SEP + u8(RX_ACK) + u64(2))
    write("pubacks", "win_ask_held", u8(1 << 2 | 0x20 | 0x10) + hs + u8(SHM_FAILED) + u64(1) + SEP +
          u8(X_WIN_ASK) + SEP + u8(RX_ACK) + u64(0) + SEP + u8(RX_ACK) + u64(7))
    write("pubacks", "win_x_tcp", u8(0x20 | 0x40 | 1) + hs + u8(SHM_FAILED) + u64(1) + u8(X_WIN_ASK) +
          u8(X_TCP_ASK) + SEP + SEP + u8(RX_ACK) + u64(1) + SEP + u8(RX_ACK) + u64(2))
    write("pubacks", "no_ack", u8(0x10) + hs + u8(SHM_OK) + u64(1) + SEP + SEP + SEP)
    write("pubacks", "bad_uuid", u8(0) + u8(CHANNEL) + s("not-a-uuid"))
    write("pubacks", "bad_cmd", u8(0) + u8(PUBLISH) + s(UUID1))
    write("pubacks", "garbage_after", u8(0x40) + hs + u8(SHM_OK) + u64(1) + SEP + u8(RX_ACK) +
          u64(0) + b"\x99")
    write("pubacks", "split", u8(3) + hs[:5] + SEP + hs[5:] + u8(SHM_OK) + SEP + u64(7))

    # client: mode, flags, reply
    pk = open(os.path.join(ROOT, "tests", "corpus", "dag", "abc.bin"), "rb").read()
    prof = profile_docs()["reference.json"]
    cl = {
        "dag": (0, u8(DAG) + u64(len(pk)) + pk + u8(COMPLETE)),
        "dag_short": (0, u8(DAG) + u64(100) + pk[:10]),
        "profile": (1, u8(PROFILE_DATA) + s(prof) + u8(COMPLETE)),
        "profile_bad": (1, u8(PROFILE_DATA) + s(b"{") + u8(COMPLETE)),
        "connect": (2, u8(COMPLETE)),
        "connect_cyclic": (2, u8(CYCLIC)),
        "shm": (3, u8(COMPLETE) + s("psm_nonexistent")),
        "shm_badname": (3, u8(COMPLETE) + s("../etc/passwd")),
        "sync": (4, u8(COMPLETE)),
        "ping": (5, b""),
        "sub": (6, s(UUID2) + u8(UPDATE) + s("") + u8(COMPLETE)),
        "sub_update": (6, s(UUID2) + u8(UPDATE) + s(UUID1 + b"," + UUID2) + u8(COMPLETE) +
                          u8(UPDATE) + s(UUID1) + u8(UPDATE) + s(b"")),
        "sub_bad_update": (6, s(UUID2) + u8(UPDATE) + s(UUID1 + b";") + u8(COMPLETE)),
        "pub": (7, s(UUID1) + u8(COMPLETE)),
        "pub_cmds": (7, s(UUID1) + u8(COMPLETE) + u8(PAUSE) + u8(RESUME) + u8(SYNC) +
                        u8(PROFILE) + u64(1000) + u8(RESUME)),
        "pub_paused": (7, s(UUID1) + u8(COMPLETE) + u8(PAUSE) + u8(PROFILE) + u64(5)),
        "pub_unknown": (7, s(UUID1) + u8(COMPLETE) + u8(99)),
    }
    for name, (mode, data) in cl.items():
        write("client", name, u8(mode) + u8(0) + data)
    write("client", "raw_version", u8(5) + u8(1) + s("3.6.2"))
    write("client", "raw_bad_version", u8(0) + u8(1) + u64(2**40))
    return 0


if __name__ == "__main__":
    sys.exit(main())
