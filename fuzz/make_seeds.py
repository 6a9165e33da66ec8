#!/usr/bin/env python3
"""Writes the hand-made seed inputs of fuzz/corpus/<target>/seed-* (the input formats are described
at the top of each fuzz/fuzz_<target>.c). The marshal and dagpickle seeds are copies of
tests/corpus/{marshal,dag}; regress-* files are crash reproducers and are never touched here.

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

X_HELLO, X_RING = 0xE5, 0xE6  # ezmsg-c's ring extension (src/wire.h)
X_WIN_ASK, X_WIN = 0xE7, 0xE8  # ezmsg-c's TCP window extension (src/wire.h)
X_TCP_ASK, X_TCP = 0xEA, 0xEB  # a window's messages as their payload alone (src/wire.h)
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
