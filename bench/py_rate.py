#!/usr/bin/env python3
"""bench/py_rate.py: the Python reference's side of bench/rate.sh's fixed-rate runs, the peer of
ez_bench_rate --mode rate: one source process -> one sink process through ezmsg's low-level API
(GraphContext, Publisher.broadcast, Subscriber.recv_zero_copy), with the reference's own graph
server (a GraphServer thread in this coordinator process, on 127.0.0.1 and a free port).

  PYTHONPATH=<ezmsg src>:<its dist-info dir> python3 bench/py_rate.py --rate HZ --size B
      [--duration S] [--warmup S]

Messages are `bytes` of --size bytes starting with the 40-byte header of bench/rate.h (magic,
flags, sequence number, CLOCK_MONOTONIC send time). The source paces on absolute deadlines (as
the C harness does, it skips and counts a deadline it wakes up a period or more after): it awaits
asyncio.sleep to within ~1.5 ms of a deadline (the event loop's epoll timeout rounds up to a
millisecond, too coarse for 1 kHz), sleeps the rest with time.sleep (clock_nanosleep, timer slack
1 ns), and after each broadcast yields to the loop once, so that it serves the sink's releases; the sink checks the
sequence and measures send-to-receive latency. Each process measures its own CPU and context
switches (getrusage) over the same interval as the C harness. One JSON object on stdout, with
the fields of ez_bench_rate's."""
import argparse, asyncio, ctypes, json, os, resource, signal, struct, subprocess, sys, time

HDR = struct.Struct("<IIQQIIQ")
MAGIC, F_MEASURE, F_END = 0x74727A65, 1, 2


def usage_now():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return (ru.ru_utime, ru.ru_stime, ru.ru_nvcsw, ru.ru_nivcsw)


def usage_delta(a, b, res):
    res.update(utime_ns=int((b[0] - a[0]) * 1e9), stime_ns=int((b[1] - a[1]) * 1e9),
               nvcsw=b[2] - a[2], nivcsw=b[3] - a[3])


def say(obj):
    sys.stdout.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
    sys.stdout.flush()


async def readline():
    return await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


async def child(a):
    from ezmsg.core.graphcontext import GraphContext
    host, port = a.address.rsplit(":", 1)
    res = {"rc": 0, "err": "", "sent": 0, "missed": 0, "count": 0, "lost": 0, "late": 0,
           "corrupt": 0, "lat_ns": []}
    topic = f"pyrate/{os.getppid()}/t0"
    async with GraphContext((host, int(port)), auto_start=False) as ctx:
        if a.role == "source":
            pub = await ctx.publisher(topic)
        else:
            sub = await ctx.subscriber(topic)
        say("CREATED")
        await readline()  # W: every node exists
        if a.role == "source":
            while len(pub._channels) < 1:  # the sink's channel is up
                await asyncio.sleep(0.001)
        say("READY")
        t_go = int((await readline()).split()[1])
        t_meas = t_go + int(a.warmup * 1e9)
        t_stop = t_meas + int(a.duration * 1e9)
        await asyncio.sleep(max(0, t_go - time.monotonic_ns()) / 1e9)
        if a.role == "source":
            period = int(1e9 / a.rate)
            try:  # timer slack 1 ns, as the C harness (PR_SET_TIMERSLACK)
                ctypes.CDLL(None, use_errno=True).prctl(29, 1, 0, 0, 0)
            except (OSError, AttributeError):
                pass
            pad = bytes(a.size - HDR.size)
            seq, due, measuring, u0 = 0, t_go, False, None
            while True:
                now = time.monotonic_ns()
                if due - now > 2_000_000:  # the loop's timers round up to a millisecond
                    await asyncio.sleep((due - now - 1_500_000) / 1e9)
                    now = time.monotonic_ns()
                if now < due:  # the rest (under ~2 ms) exactly, blocking the loop that long
                    time.sleep((due - now) / 1e9)
                    now = time.monotonic_ns()
                if now >= due + period:
                    skip = (now - due) // period
                    if measuring:
                        res["missed"] += skip
                    due += skip * period
                if due >= t_stop:
                    break
                if due >= t_meas and not measuring:
                    measuring, u0 = True, usage_now()
                flags = F_MEASURE if measuring else 0
                await pub.broadcast(HDR.pack(MAGIC, flags, seq, time.monotonic_ns(), 0, 0, 0) + pad)
                if measuring:
                    res["sent"] += 1
                seq += 1
                due += period
                await asyncio.sleep(0)  # the loop serves its I/O (the sink's releases) once a message
            usage_delta(u0 or usage_now(), usage_now(), res)
            await pub.broadcast(HDR.pack(MAGIC, F_END, seq, time.monotonic_ns(), 0, 0, 0))
            await asyncio.sleep(0.5)  # let the END be read before the publisher goes
        else:
            nxt, seen, measuring, u0 = 0, False, False, None
            hard = (t_stop + int((a.duration + 10) * 1e9)) / 1e9
            while True:
                timeout = hard - time.monotonic_ns() / 1e9
                try:
                    async with asyncio.timeout(max(timeout, 0)):
                        async with sub.recv_zero_copy() as msg:
                            t = time.monotonic_ns()
                            size = len(msg)
                            h = HDR.unpack_from(msg, 0) if size >= HDR.size else (0,) * 7
                except TimeoutError:
                    res.update(rc=-1, err=f"receive timed out after {res['count']} measured")
                    break
                magic, flags, seq, t_ns = h[:4]
                if magic != MAGIC:
                    res["corrupt"] += 1
                    continue
                if flags & F_END:
                    usage_delta(u0 or usage_now(), usage_now(), res)
                    break
                if flags & F_MEASURE and not measuring:
                    measuring, u0 = True, usage_now()
                if not seen or seq == nxt:
                    seen, nxt = True, seq + 1
                elif seq > nxt:
                    res["lost"] += seq - nxt
                    nxt = seq + 1
                else:
                    res["late"] += 1
                if size != a.size:
                    res["corrupt"] += 1
                if flags & F_MEASURE:
                    res["count"] += 1
                    res["lat_ns"].append(t - t_ns)
    say(res)


def quantile(sorted_v, q):
    if not sorted_v:
        return 0
    return sorted_v[max(1, int(q * len(sorted_v))) - 1]


def coordinator(a):
    from ezmsg.core.graphserver import GraphServer
    server = GraphServer()
    server.start(("127.0.0.1", 0))
    addr = f"{server.address.host}:{server.address.port}"
    roles, procs, res, err = ["source", "sink"], [], {}, ""
    base = [sys.executable, os.path.abspath(__file__), "--address", addr, "--rate", str(a.rate),
            "--size", str(a.size), "--duration", str(a.duration), "--warmup", str(a.warmup)]
    try:
        for role in roles:  # one at a time, as the C harness
            p = subprocess.Popen(base + ["--role", role], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
            procs.append(p)
            if p.stdout.readline().strip() != "CREATED":
                raise RuntimeError(f"{role} did not start")
        for p in procs:
            p.stdin.write("W\n")
            p.stdin.flush()
        for p, role in zip(procs, roles):
            if p.stdout.readline().strip() != "READY":
                raise RuntimeError(f"{role} did not get ready")
        t_go = time.monotonic_ns() + 100_000_000
        for p in procs:
            p.stdin.write(f"GO {t_go}\n")
            p.stdin.flush()
        for p, role in zip(procs, roles):
            line = p.stdout.readline()
            res[role] = json.loads(line) if line else {"rc": -1, "err": f"{role}: no result"}
            if res[role]["rc"] and not err:
                err = f"{role}: {res[role]['err']}"
    except (RuntimeError, ValueError, OSError) as e:
        err = str(e)
    finally:
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        server.stop()
    src, snk = res.get("source", {}), res.get("sink", {})
    n = src.get("sent", 0)
    lost, late, corrupt = (snk.get(k, 0) for k in ("lost", "late", "corrupt"))
    mismatch = abs(snk.get("count", 0) - n)
    if not err and (lost or late or corrupt or mismatch):
        err = f"delivery errors: {lost} lost, {late} late, {corrupt} corrupt, {mismatch} mismatch"
    lat = sorted(snk.get("lat_ns", []))
    per = lambda v: v / n if n else 0
    procs_out, cpu, vcs, ics = [], 0, 0, 0
    for role in roles:
        r = res.get(role, {})
        u, s = r.get("utime_ns", 0), r.get("stime_ns", 0)
        cpu, vcs, ics = cpu + u + s, vcs + r.get("nvcsw", 0), ics + r.get("nivcsw", 0)
        procs_out.append({"role": role, "cpu_us_per_msg": per((u + s) / 1e3),
                          "user_us_per_msg": per(u / 1e3), "sys_us_per_msg": per(s / 1e3),
                          "work_us_per_msg": 0, "vcsw_per_msg": per(r.get("nvcsw", 0)),
                          "ivcsw_per_msg": per(r.get("nivcsw", 0)), "syscalls_per_msg": None})
    say({"impl": "ezmsg-py", "mode": "rate", "transport": "shm", "rate_hz": a.rate,
         "size": a.size, "duration_s": a.duration, "warmup_s": a.warmup, "stages": 0, "sinks": 1,
         "work_passes": 0, "nprocs": 2, "ok": not err, "sent": n, "missed": src.get("missed", 0),
         "achieved_hz": n / a.duration, "lost": lost, "late": late, "corrupt": corrupt,
         "mismatch": mismatch, "lat_p50_us": quantile(lat, 0.5) / 1e3,
         "lat_p99_us": quantile(lat, 0.99) / 1e3, "lat_p999_us": quantile(lat, 0.999) / 1e3,
         "lat_max_us": quantile(lat, 1.0) / 1e3, "cpu_us_per_msg": per(cpu / 1e3),
         "vcsw_per_msg": per(vcs), "ivcsw_per_msg": per(ics), "syscalls_per_msg": None,
         "procs": procs_out, "error": err or None})
    return 0 if not err else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=1000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--role", choices=["source", "sink"])
    ap.add_argument("--address")
    a = ap.parse_args()
    if a.size < HDR.size or a.rate <= 0 or a.duration <= 0:
        ap.error("bad --size, --rate or --duration")
    if a.role:
        signal.alarm(int(a.warmup + 2 * a.duration + 60))  # never outlives a stuck run
        asyncio.run(child(a))
        return 0
    return coordinator(a)


if __name__ == "__main__":
    sys.exit(main())
