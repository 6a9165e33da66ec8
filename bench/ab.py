#!/usr/bin/env python3
"""bench/ab.py: two ezmsg-c builds (or one build with and without a tracer) side by side.

Usage:
  bench/ab.py --a NAME=EZMSG --b NAME=EZMSG [--pairs N] [--pin off|on|both] [--rows LIST]
              [--duration S] [--warmup S] [--trace-b] [--out FILE]

Each pair runs every row once with A and once with B, back to back, the order alternating from
pair to pair, so that the machine's drift hits both alike. A row is TRANSPORT:SIZE of
`ezmsg perf -c fanout` (1 -> 1, loaned messages): by default local:64, local:1M, shm:64, shm:1M,
tcp:64. The table gives each side's median msgs/s (min-max) and the median of the pairs' B/A
ratios with their spread (min-max and the middle half): the pair ratio is the figure to read on a
machine whose speed moves (a VM's CPU placement moves every polling transport by 2x or more).

--trace-b: both sides run against one `ezmsg serve` of B's (so both pay the same external
server); during B's runs `ezmsg profile --trace` (all topics) runs too, so B is "tracing on".
The tracer renews its trace control every 2 s, so the warm-up defaults to 2.5 s here: perf's
endpoints are traced from before the measured part starts. The samples the tracer received are
counted and reported (a tracing row with no samples measured nothing, and says so).

Writes a Markdown table to stdout (and --out). Every run is bounded by a timeout. Uses nothing
but the two CLIs given: build them yourself (e.g. a worktree of the commit before a change,
`cmake -DCMAKE_BUILD_TYPE=RelWithDebInfo`; -DEZ_TELEMETRY=OFF for telemetry compiled out).
"""
import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

DEFAULT_ROWS = "local:64,local:1M,shm:64,shm:1M,tcp:64"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def perf(ezmsg, transport, size, pin, duration, warmup, address=None):
    cmd = [ezmsg, "perf", "-c", "fanout", "-T", transport, "-s", size, "-d", str(duration),
           "-w", str(warmup), "-j", "-q"]
    if pin:
        cmd.append("--pin")
    if address:
        cmd += ["--address", address]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True,
                             timeout=60 + 4 * (duration + warmup)).stdout
        r = json.loads(out)["results"][0]
        return r["msgs_per_s"] if r.get("ok") and not r.get("lost") else None
    except (subprocess.TimeoutExpired, ValueError, KeyError, IndexError):
        return None


class Tracer:
    """`ezmsg profile --trace` of every topic while a B run lasts; counts the samples it gets."""

    def __init__(self, ezmsg, address):
        self.p = subprocess.Popen([ezmsg, "profile", "--trace", "--address", address],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.samples = 0
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stdout:
            if '"metric"' in line:
                self.samples += 1

    def stop(self):
        self.p.send_signal(signal.SIGINT)
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.t.join(timeout=5)
        return self.samples


def spread(v):
    v = sorted(v)
    if not v:
        return "-"
    q = statistics.quantiles(v, n=4) if len(v) >= 4 else [v[0], 0, v[-1]]
    return f"{v[0]:.3f}-{v[-1]:.3f} (middle half {q[0]:.3f}-{q[2]:.3f})"


def fmt_rate(v):
    if not v:
        return "-"
    return f"{statistics.median(v):,.0f} ({min(v):,.0f}-{max(v):,.0f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="NAME=path of the 'before' ezmsg CLI")
    ap.add_argument("--b", required=True, help="NAME=path of the 'after' ezmsg CLI")
    ap.add_argument("--pairs", type=int, default=12)
    ap.add_argument("--pin", choices=["off", "on", "both"], default="both")
    ap.add_argument("--rows", default=DEFAULT_ROWS)
    ap.add_argument("--duration", type=float, default=0.5)
    ap.add_argument("--warmup", type=float, default=None)
    ap.add_argument("--trace-b", action="store_true")
    ap.add_argument("--out")
    o = ap.parse_args()
    (na, a), (nb, b) = (x.split("=", 1) for x in (o.a, o.b))
    for p in (a, b):
        if not os.access(p, os.X_OK):
            sys.exit(f"bench/ab.py: {p} is not an executable")
    warmup = o.warmup if o.warmup is not None else (2.5 if o.trace_b else 0.25)
    rows = [r.split(":") for r in o.rows.split(",")]
    pins = {"off": [False], "on": [True], "both": [False, True]}[o.pin]
    server = address = None
    if o.trace_b:
        address = f"127.0.0.1:{free_port()}"
        server = subprocess.Popen([b, "serve", "--address", address],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
    res = {(t, s, p): {"a": [], "b": [], "r": [], "fail": 0, "samples": 0}
           for t, s in rows for p in pins}
    load0 = os.getloadavg()
    t0 = time.time()
    try:
        for k in range(o.pairs):
            for t, s in rows:
                for p in pins:
                    cell = res[(t, s, p)]
                    got = {}
                    for side in (("a", "b") if k % 2 == 0 else ("b", "a")):
                        ez = a if side == "a" else b
                        tr = Tracer(b, address) if o.trace_b and side == "b" else None
                        got[side] = perf(ez, t, s, p, o.duration, warmup, address)
                        if tr:
                            cell["samples"] += tr.stop()
                    if got["a"] and got["b"]:
                        cell["a"].append(got["a"])
                        cell["b"].append(got["b"])
                        cell["r"].append(got["b"] / got["a"])
                    else:
                        cell["fail"] += 1
            print(f"pair {k + 1}/{o.pairs} done", file=sys.stderr)
    finally:
        if server:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=10)
    load1 = os.getloadavg()
    lines = [
        f"{nb} / {na}: {o.pairs} pairs of `ezmsg perf -c fanout` (1 -> 1, {o.duration} s measured "
        f"after {warmup} s) per row, order alternating; load average {load0[0]:.2f} at the start, "
        f"{load1[0]:.2f} at the end, {time.time() - t0:.0f} s in all.",
        "",
        f"| row | pinned | {na} msgs/s | {nb} msgs/s | {nb}/{na}, median of pairs | spread of the "
        f"pairs' ratios | failed pairs |" + (" trace samples |" if o.trace_b else ""),
        "|---|---|---|---|---|---|---|" + ("---|" if o.trace_b else ""),
    ]
    for (t, s, p), c in res.items():
        med = f"{statistics.median(c['r']):.3f}" if c["r"] else "-"
        line = (f"| {t} {s} | {'yes' if p else 'no'} | {fmt_rate(c['a'])} | {fmt_rate(c['b'])} "
                f"| {med} | {spread(c['r'])} | {c['fail']} |")
        if o.trace_b:
            line += f" {c['samples']} |"
        lines.append(line)
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if o.out:
        with open(o.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
