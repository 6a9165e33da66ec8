#!/usr/bin/env bash
# bench/run.sh [BUILD]: ezmsg-c against ZeroMQ and the machine's limits; writes bench/RESULTS.md.
#
# `make bench` runs it after building BUILD (default: build). It also builds BUILD-notel, the same
# tree with -DEZ_TELEMETRY=OFF, for the telemetry row. Each round runs every workload once, ours
# and theirs back to back (which goes first alternates by round), so slow drift of the machine
# hits both sides alike; RESULTS.md gets the median and min/max over the rounds and the ratio of
# the medians. Everything our side measures comes from `ezmsg perf`; ZeroMQ's from
# bench/zmq_bench.c; the limits from bench/limits.c. Every run is bounded by `timeout`.
#
# Then `ez_profile`'s answer time on a graph of 200 endpoints in 4 processes, three runs of
# bench/profile/profile_latency (50 calls each).
#
# Telemetry on/off is measured apart, after the rounds: TEL_ROUNDS pairs per transport, each
# pair back to back, with the cache-line handoff time between the two CPUs measured before it (on
# a VM it moves with the host's placement of the virtual CPUs, and every polling transport moves
# with it), so RESULTS.md can give the median of the pairs' ratios.
#
# Where the code lies alone moves a build's shm rate by several percent here, so a telemetry pair
# compares the two builds in one of LAYOUTS code layouts each, taking the next layout every round:
# BUILD-lay-on and BUILD-lay-off are the two builds compiled with -ffunction-sections, their CLI
# linked LAYOUTS times with its functions shuffled (CMake's EZ_BENCH_LAYOUTS, lld). A placebo pair
# compares two layouts of the telemetry-off build: nothing differs but where the code lies, so its
# ratio shows how far layout alone moves a comparison here. The default build (BUILD) against
# BUILD-notel, one layout each, is measured too and reported beside them.
#
# Environment: ROUNDS (5), TEL_ROUNDS (160), LAYOUTS (4), DURATION (0.8 s measured per run), WARMUP
# (0.25 s), TEL_DURATION and TEL_WARMUP (0.4 s and 0.15 s: the same for the telemetry pairs), JOBS
# (2), OUT (bench/RESULTS.md), NOTEL_BUILD (BUILD-notel). A "## Where the time goes" section
# already in OUT is kept (it is written by hand).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${1:-build}
ROUNDS=${ROUNDS:-5}
TEL_ROUNDS=${TEL_ROUNDS:-160}
LAYOUTS=${LAYOUTS:-4}
DURATION=${DURATION:-0.8}
WARMUP=${WARMUP:-0.25}
TEL_DURATION=${TEL_DURATION:-0.4}
TEL_WARMUP=${TEL_WARMUP:-0.15}
JOBS=${JOBS:-2}
OUT=${OUT:-bench/RESULTS.md}
NOTEL=${NOTEL_BUILD:-$BUILD-notel}

EZ=$BUILD/ezmsg
ZMQ=$BUILD/bench/ez_bench_zmq
LIM=$BUILD/bench/ez_bench_limits
for f in "$EZ" "$LIM"; do
  [ -x "$f" ] || { echo "bench/run.sh: $f is missing (build $BUILD with -DEZ_BENCH=ON)" >&2; exit 1; }
done
HAVE_ZMQ=1
[ -x "$ZMQ" ] || { HAVE_ZMQ=0; echo "bench/run.sh: no $ZMQ (libzmq missing?): ZeroMQ rows skipped" >&2; }

# iceoryx: its peer needs a RouDi daemon, which we start (and stop, by pid, with SIGINT: then it
# removes its shared memory) unless one runs already, whose memory configuration we do not know.
IOX=$BUILD/bench/ez_bench_iox
HAVE_IOX=0
ROUDI_PID=
stop_roudi() {
  [ -n "$ROUDI_PID" ] || return 0
  kill -INT "$ROUDI_PID" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$ROUDI_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$ROUDI_PID" 2>/dev/null || true
  wait "$ROUDI_PID" 2>/dev/null || true
  ROUDI_PID=
  rm -f /tmp/ezbench-src-*.lock /tmp/ezbench-sink-*.lock # what a crashed run of ours left
}
trap stop_roudi EXIT
if [ -x "$IOX" ] && command -v iox-roudi >/dev/null; then
  if [ -e /dev/shm/iceoryx_mgmt ]; then
    echo "bench/run.sh: a RouDi runs already: iceoryx rows skipped" >&2
  else
    iox-roudi -c bench/iox_roudi.toml -l fatal >"$BUILD/roudi.log" 2>&1 &
    ROUDI_PID=$!
    for _ in $(seq 1 50); do [ -e /dev/shm/iceoryx_mgmt ] && break; sleep 0.1; done
    if [ -e /dev/shm/iceoryx_mgmt ]; then HAVE_IOX=1; else
      echo "bench/run.sh: RouDi did not start (see $BUILD/roudi.log): iceoryx rows skipped" >&2
      stop_roudi
    fi
  fi
else
  echo "bench/run.sh: no $IOX or iox-roudi (scripts/deps.sh bench): iceoryx rows skipped" >&2
fi

# The telemetry-off tree: same build type as BUILD, only the CLI.
btype=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null || true)
echo "bench: building $NOTEL (-DEZ_TELEMETRY=OFF, ${btype:-RelWithDebInfo})" >&2
cmake -S . -B "$NOTEL" -DCMAKE_BUILD_TYPE="${btype:-RelWithDebInfo}" -DEZ_TELEMETRY=OFF \
  -DEZ_TESTS=OFF -DEZ_BENCH=OFF >/dev/null
cmake --build "$NOTEL" -j"$JOBS" --target ezmsg_cli >/dev/null
EZ_NOTEL=$NOTEL/ezmsg
# The two builds in LAYOUTS code layouts each: BUILD-lay-on/ezmsg-layoutK and BUILD-lay-off/...
LAY_TARGETS=()
for k in $(seq 1 "$LAYOUTS"); do LAY_TARGETS+=("ezmsg_layout$k"); done
for t in on:ON off:OFF; do
  d=$BUILD-lay-${t%%:*}
  echo "bench: building $d (-DEZ_TELEMETRY=${t#*:}, $LAYOUTS layouts of the CLI)" >&2
  cmake -S . -B "$d" -DCMAKE_BUILD_TYPE="${btype:-RelWithDebInfo}" -DEZ_TELEMETRY="${t#*:}" \
    -DEZ_TESTS=OFF -DEZ_BENCH=OFF -DCMAKE_C_FLAGS=-ffunction-sections \
    -DEZ_BENCH_LAYOUTS="$LAYOUTS" >/dev/null
  cmake --build "$d" -j"$JOBS" --target "${LAY_TARGETS[@]}" >/dev/null
done
# lay on|off K: that build's CLI in layout K (1..LAYOUTS; wraps around).
lay() { echo "$BUILD-lay-$1/ezmsg-layout$(((($2 - 1) % LAYOUTS) + 1))"; }

RAW=$BUILD/bench-raw.tsv
: >"$RAW"
export EZMSG_LOG_LEVEL=${EZMSG_LOG_LEVEL:-error}
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
T_START=$(date +%s)

# record KEY ROUND COMMAND...: runs it (killed after 120 s) and appends its JSON as one line.
record() {
  local key=$1 round=$2 out
  shift 2
  out=$(timeout -k 5 120 "$@" 2>/dev/null | tr -d '\n' || true)
  printf '%s\t%s\t%s\n' "$key" "$round" "$out" >>"$RAW"
}

# Arguments every run of ours (ezmsg perf) and theirs (ez_bench_zmq) shares.
PA=(-d "$DURATION" -w "$WARMUP" --json -q)
ZA=(-d "$DURATION" -w "$WARMUP" --json)
# The telemetry pairs' (below): shorter runs, twice the pairs in the same time.
TA=(-d "$TEL_DURATION" -w "$TEL_WARMUP" --json -q)

# pair ROUND KEY_OURS CMD_OURS... -- KEY_THEIRS CMD_THEIRS...: both, in an order that alternates.
pair() {
  local round=$1 ko=$2
  shift 2
  local ours=() theirs=()
  while [ "$1" != "--" ]; do ours+=("$1"); shift; done
  shift
  local kt=$1
  shift
  theirs=("$@")
  if [ $((round % 2)) -eq 1 ]; then
    record "$ko" "$round" "${ours[@]}"
    [ -z "$kt" ] || record "$kt" "$round" "${theirs[@]}"
  else
    [ -z "$kt" ] || record "$kt" "$round" "${theirs[@]}"
    record "$ko" "$round" "${ours[@]}"
  fi
}

record limits 0 "$LIM" --json
declare -A ZT=([local]=inproc [shm]=ipc [tcp]=tcp)
for round in $(seq 1 "$ROUNDS"); do
  echo "bench: round $round of $ROUNDS ($(($(date +%s) - T_START)) s so far)" >&2
  record handoff "$round" "$LIM" --handoff --json
  for size in 64 4096 1048576; do
    for tr in local shm tcp; do
      z=${ZT[$tr]}
      kz="" && [ $HAVE_ZMQ = 1 ] && kz="thr/zmq/$z/$size"
      pair "$round" "thr/ours/$tr/$size" "$EZ" perf -c fanout -T "$tr" -s "$size" "${PA[@]}" --copy \
        -- "$kz" "$ZMQ" --mode thr -T "$z" -s "$size" "${ZA[@]}"
    done
  done
  for tr in local shm tcp; do
    z=${ZT[$tr]}
    kz="" && [ $HAVE_ZMQ = 1 ] && kz="zc/zmq/$z/1048576"
    pair "$round" "zc/ours/$tr/1048576" "$EZ" perf -c fanout -T "$tr" -s 1048576 "${PA[@]}" \
      -- "$kz" "$ZMQ" --mode thr -T "$z" -s 1048576 "${ZA[@]}" --zerocopy
    kz="" && [ $HAVE_ZMQ = 1 ] && kz="pp/zmq/$z/64"
    pair "$round" "pp/ours/$tr/64" "$EZ" perf -c pingpong -T "$tr" -s 64 "${PA[@]}" --copy \
      -- "$kz" "$ZMQ" --mode pingpong -T "$z" -s 64 "${ZA[@]}"
    # iceoryx: zero-copy over shared memory, against ours with a loaned slot.
    if [ "$tr" = shm ]; then
      for size in 64 1048576; do
        ki="" && [ $HAVE_IOX = 1 ] && ki="zc/iox/shm/$size"
        pair "$round" "zcx/ours/shm/$size" "$EZ" perf -c fanout -T shm -s "$size" "${PA[@]}" \
          -- "$ki" "$IOX" -s "$size" "${ZA[@]}"
      done
    fi
    # The window: ZeroMQ keeps up to 2 x 1000 messages in flight (its high-water marks); ours
    # keeps num_buffers (32 by default). The same 64 B case with 1024 buffers:
    record "win/ours/$tr/64" "$round" "$EZ" perf -c fanout -T "$tr" -s 64 -b 1024 "${PA[@]}" --copy
    # Over TCP, ezmsg-c peers keep a window of their own (src/pub/pubwin.c): the protocol's, for once.
    if [ "$tr" = tcp ]; then
      record "nowin/ours/tcp/64" "$round" env EZMSG_TCP_WINDOW=0 "$EZ" perf -c fanout -T tcp \
        -s 64 "${PA[@]}" --copy
    fi
    # 16 MiB, above the TCP window's byte budget and glibc's mmap threshold: where a message
    # that allocates, faults in and frees a buffer of its own would show (session 11 found a 7x
    # drop from 4 to 8 MiB over TCP by hand). Ours alone, against our 1 MiB row.
    # A warm-up of 1 s: the first pass over 32 buffers of 16 MiB (page faults) takes most of it.
    BA=(-d "$DURATION" -w 1 --json -q --copy)
    record "big/ours/$tr/16777216" "$round" "$EZ" perf -c fanout -T "$tr" -s 16777216 "${BA[@]}"
    if [ "$tr" = tcp ]; then
      record "bignowin/ours/tcp/16777216" "$round" env EZMSG_TCP_WINDOW=0 "$EZ" perf -c fanout \
        -T tcp -s 16777216 "${BA[@]}"
    fi
    # Polling before sleeping turned off (EZMSG_SPIN_US=0), next to the default of the same round.
    pair "$round" "spin0/thr/$tr/64" env EZMSG_SPIN_US=0 "$EZ" perf -c fanout -T "$tr" -s 64 \
      "${PA[@]}" --copy -- "spin0/pp/$tr/64" env EZMSG_SPIN_US=0 "$EZ" perf -c pingpong -T "$tr" \
      -s 64 "${PA[@]}" --copy
  done
done
# ez_profile on a graph of 200 endpoints in 4 processes (bench/profile/profile_latency.c), a few
# times: the answer's wall time, median of 50 calls each.
PL=$BUILD/bench/profile/profile_latency
if [ -x "$PL" ]; then
  for round in 1 2 3; do
    record profile "$round" "$PL" --json
  done
else
  echo "bench/run.sh: no $PL: the profile row is skipped" >&2
fi
# Telemetry compiled out vs in: pairs of runs back to back, the builds in layout `round` (lay).
# Pairs' ratios spread by some 4% here. 15-odd fast pairs (of 20) placed their median within
# about +-2.5%, too wide to tell 0.97 from 0.99; 53 (of 80 rounds of 0.8 s runs) still +-1.6%
# unpinned over shm, where telemetry's cost came out at 1-2%: the same pairs counted twice would
# give about +-1.1%. So the runs are half as long (TEL_DURATION) and twice as many (160 rounds) in
# the same time; the two runs of a pair are then also closer in time, so a pair less often spans
# a change of the host's mode.
# The handoff is measured before and after every pair (handoff/KIND/TR: before the pair of KIND;
# the next kind's, or telend's, after it), so that a pair during which the host moved the CPUs
# can be told apart.
for round in $(seq 1 "$TEL_ROUNDS"); do
  echo "bench: telemetry pairs, round $round of $TEL_ROUNDS ($(($(date +%s) - T_START)) s so far)" >&2
  on=$(lay on "$round") off=$(lay off "$round") other=$(lay off $((round + 1)))
  for tr in local shm tcp; do
    record "handoff/tel/$tr" "$round" "$LIM" --handoff --json
    pair "$round" "tel/off/$tr/64" "$off" perf -c fanout -T "$tr" -s 64 "${TA[@]}" --copy \
      -- "tel/on/$tr/64" "$on" perf -c fanout -T "$tr" -s 64 "${TA[@]}" --copy
    # The same with every node pinned to a CPU (ezmsg perf --pin): the scheduler's placement,
    # which flips unpinned runs between fast and slow modes, is then the same for both builds.
    record "handoff/telpin/$tr" "$round" "$LIM" --handoff --json
    pair "$round" "telpin/off/$tr/64" "$off" perf -c fanout -T "$tr" -s 64 "${TA[@]}" --copy \
      --pin -- "telpin/on/$tr/64" "$on" perf -c fanout -T "$tr" -s 64 "${TA[@]}" --copy --pin
    # The placebo, pinned: the telemetry-off build in this layout against the next layout.
    record "handoff/placebo/$tr" "$round" "$LIM" --handoff --json
    pair "$round" "placebo/off/$tr/64" "$off" perf -c fanout -T "$tr" -s 64 "${TA[@]}" \
      --copy --pin -- "placebo/on/$tr/64" "$other" perf -c fanout -T "$tr" -s 64 "${TA[@]}" \
      --copy --pin
    # The default build against the default telemetry-off build (one layout each), pinned.
    record "handoff/teldef/$tr" "$round" "$LIM" --handoff --json
    pair "$round" "teldef/off/$tr/64" "$EZ_NOTEL" perf -c fanout -T "$tr" -s 64 "${TA[@]}" \
      --copy --pin -- "teldef/on/$tr/64" "$EZ" perf -c fanout -T "$tr" -s 64 "${TA[@]}" --copy --pin
    record "handoff/telend/$tr" "$round" "$LIM" --handoff --json
  done
done
record limits 99 "$LIM" --json
stop_roudi
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
ELAPSED=$(($(date +%s) - T_START))

CPU=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- src include 2>/dev/null || COMMIT="$COMMIT + uncommitted changes in src/ or include/"

export M_DATE M_NPROC M_CPU M_KERNEL M_COMMIT M_ZMQ
M_DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
M_NPROC=$(nproc)
M_CPU=$CPU
M_KERNEL=$(uname -r)
M_COMMIT=$COMMIT
M_ZMQ=$(pkg-config --modversion libzmq 2>/dev/null || echo '?')
export ROUNDS TEL_ROUNDS LAYOUTS DURATION WARMUP TEL_DURATION TEL_WARMUP LOAD_START LOAD_END ELAPSED BUILD
export BTYPE=${btype:-RelWithDebInfo}

python3 - "$RAW" "$OUT" <<'PY'
import json, random, statistics, sys, os

raw, out = sys.argv[1], sys.argv[2]
E = os.environ
meta = dict(date=E["M_DATE"], nproc=E["M_NPROC"], cpu=E["M_CPU"], kernel=E["M_KERNEL"],
            commit=E["M_COMMIT"], rounds=int(E["ROUNDS"]), tel_rounds=int(E["TEL_ROUNDS"]),
            layouts=int(E["LAYOUTS"]),
            duration=E["DURATION"], tel_duration=E["TEL_DURATION"], tel_warmup=E["TEL_WARMUP"],
            warmup=E["WARMUP"], load_start=E["LOAD_START"], load_end=E["LOAD_END"],
            elapsed=int(E["ELAPSED"]), build=E["BUILD"], btype=E["BTYPE"], zmq=E["M_ZMQ"])

runs, fails = {}, []
for line in open(raw):
    key, rnd, text = line.rstrip("\n").split("\t", 2)
    recs, pos, dec = [], 0, json.JSONDecoder()
    try:
        while pos < len(text.strip()):
            while text[pos].isspace():
                pos += 1
            doc, pos = dec.raw_decode(text, pos)
            recs += doc["results"] if "results" in doc else [doc]
    except (ValueError, IndexError):
        pass
    if not recs:
        fails.append((key, rnd, "no result (crashed or timed out): %r" % text[:120]))
        continue
    for r in recs:
        k = key
        if key == "limits":
            k = "limits/%s/%s/%s" % (r["config"], r["transport"], r["size"])
        if not r.get("ok", False):
            fails.append((k, rnd, r.get("error")))
            continue
        r["_round"] = int(rnd)
        runs.setdefault(k, []).append(r)

def stat(key, field):
    v = [r[field] for r in runs.get(key, [])]
    if not v:
        return None
    return (statistics.median(v), min(v), max(v), len(v))

def fmt(x, unit=""):
    if x is None:
        return "n/a"
    if x >= 100:
        s = "{:,.0f}".format(x)
    elif x >= 10:
        s = "%.1f" % x
    else:
        s = "%.2f" % x
    return s + unit

def cell(key, field, scale=1.0):
    s = stat(key, field)
    if not s:
        return "n/a"
    return "%s (%s–%s)" % (fmt(s[0] * scale), fmt(s[1] * scale), fmt(s[2] * scale))

def med(key, field):
    s = stat(key, field)
    return s[0] if s else None

def ratio(a, b):
    return "%.2f" % (a / b) if a and b else "n/a"

def by_round(key, field):
    return {r["_round"]: r[field] for r in runs.get(key, [])}

# Cache-line handoff times (ns): a run is in the machine's fast placement when its handoff took
# less than twice the fastest one seen.
HO = [r["lat_p50_us"] * 1000 for k in runs if k.startswith("handoff") for r in runs[k]]
HO_FAST = 2 * min(HO) if HO else None

# A pair is in the fast placement if the handoff measured just before it and just after it were
# both under twice the fastest seen: the host did not move the CPUs during the pair.
HO_AFTER = {"tel": "telpin", "telpin": "placebo", "placebo": "teldef", "teldef": "telend"}

def tel_rounds(tr, fast_only=False, kind="tel"):
    on, off = by_round("%s/on/%s/64" % (kind, tr), "msgs_per_s"), by_round("%s/off/%s/64" % (kind, tr), "msgs_per_s")
    hb = by_round("handoff/%s/%s" % (kind, tr), "lat_p50_us")
    ha = by_round("handoff/%s/%s" % (HO_AFTER[kind], tr), "lat_p50_us")
    def fast(k):
        return HO_FAST and k in hb and k in ha and max(hb[k], ha[k]) * 1000 < HO_FAST
    return [(on[k], off[k]) for k in sorted(on) if k in off and off[k] and (not fast_only or fast(k))]

def tel_pairs(tr, fast_only=False, kind="tel"):
    return [a / b for a, b in tel_rounds(tr, fast_only, kind)]

# The ratio of the two builds' mean rates over the same pairs: each build's expected rate. A
# build's runs can fall into two modes with the address layout each run gets; the median of the
# pairs' ratios follows the commoner mode, the means weigh both.
def tel_mean_ratio(tr, fast_only=False, kind="tel"):
    v = tel_rounds(tr, fast_only, kind)
    return sum(a for a, _ in v) / sum(b for _, b in v) if v else None

def tel_ratio(tr, fast_only=False, kind="tel"):
    v = tel_pairs(tr, fast_only, kind)
    return statistics.median(v) if v else None

# How precisely the pairs place their median: a 90% bootstrap interval (fixed seed, so the same
# data gives the same interval). With pair ratios spread over 0.2-3 by the machine, it is often
# wider than the 3% the telemetry goal is about.
def median_ci(v, level=0.90, n=4000):
    if len(v) < 5:
        return None
    rnd = random.Random(20261130)
    meds = sorted(statistics.median(rnd.choices(v, k=len(v))) for _ in range(n))
    return meds[int((1 - level) / 2 * n)], meds[int((1 + level) / 2 * n) - 1]

SZ = {"64": "64 B", "4096": "4 KiB", "1048576": "1 MiB"}
ZT = {"local": "inproc", "shm": "ipc", "tcp": "tcp"}
L = []
w = L.append
w("# Benchmarks: ezmsg-c vs ZeroMQ vs the machine")
w("")
w("Generated by `make bench` (bench/run.sh); numbers from a real run, nothing edited by hand except")
w("the section *Where the time goes* at the end. Re-run to refresh.")
w("")
w("| | |")
w("|---|---|")
w("| date | %s |" % meta["date"])
w("| machine | %s CPUs, %s, Linux %s |" % (meta["nproc"], meta["cpu"], meta["kernel"]))
w("| load average (1/5/15 min) | %s at start, %s at end (other jobs share this machine) |" % (meta["load_start"], meta["load_end"]))
w("| ezmsg-c | commit %s, %s build (`%s`) |" % (meta["commit"], meta["btype"], meta["build"]))
w("| ZeroMQ | libzmq %s (Debian) |" % meta["zmq"])
w("| method | %d rounds (telemetry: %d pairs per transport, each run %s s measured after %s s warm-up); each run %s s measured after %s s warm-up; ours and theirs back to back, order alternating per round; whole run %d s |" % (meta["rounds"], meta["tel_rounds"], meta["tel_duration"], meta["tel_warmup"], meta["duration"], meta["warmup"], meta["elapsed"]))
ho_rounds = by_round("handoff", "lat_p50_us")
w("| cache-line handoff between the 2 CPUs | %s ns at the start of rounds 1..%d (bench/limits.c; see *Where the time goes*) |" % (", ".join("%.0f" % (ho_rounds[k] * 1000) for k in sorted(ho_rounds)) or "n/a", meta["rounds"]))
w("")
w("Cells are **median (min–max)** over the rounds; *ours/theirs* is the ratio of the medians")
w("(above 1: we are faster). Latency is publish-to-receive under full load (so it includes")
w("queueing behind the publisher's 32 buffers, or ZeroMQ's 1000-message high-water marks), taken")
w("from a CLOCK_MONOTONIC stamp in every message. Every run checks sequence numbers: a run that")
w("lost, duplicated or reordered a message counts as failed and is listed at the end.")
w("")

# ---- goals
def goal(name, value, target, unit, higher=True, note=""):
    if target is None:  # reported, not judged
        w("| %s | (report) | %s | — |" % (name, fmt(value, unit) if value is not None else "n/a"))
        return
    if value is None:
        verdict = "no data"
    else:
        verdict = "**met**" if (value >= target if higher else value <= target) else "**not met**"
    w("| %s | %s %s | %s | %s |" % (name, "≥" if higher else "≤", fmt(target, unit), fmt(value, unit) if value is not None else "n/a", verdict + (" " + note if note else "")))

w("## Goals")
w("")
w("| goal | target | measured (median) | verdict |")
w("|---|---|---|---|")
goal("in-process 64 B", med("thr/ours/local/64", "msgs_per_s"), 2e6, " msgs/s")
goal("shm 64 B", med("thr/ours/shm/64", "msgs_per_s"), 5e5, " msgs/s")
v = med("thr/ours/shm/1048576", "mb_per_s")
goal("shm 1 MiB, publisher writes the payload (ez_publish)", v / 1000 if v else None, 4, " GB/s")
v, m = med("thr/ours/shm/1048576", "mb_per_s"), med("limits/memcpy/cold/1048576", "mb_per_s")
goal("shm 1 MiB with a copy, share of memcpy from RAM (limits below)", v / m if v and m else None, 0.5, "")
v = med("zc/ours/shm/1048576", "mb_per_s")
goal("shm 1 MiB, zero-copy loan (header written only)", v / 1000 if v else None, 4, " GB/s")
goal("tcp 64 B", med("thr/ours/tcp/64", "msgs_per_s"), 3e5, " msgs/s")
v = med("thr/ours/tcp/1048576", "mb_per_s")
goal("tcp 1 MiB, publisher writes the payload", v / 1000 if v else None, 1.5, " GB/s")
v = med("zc/ours/tcp/1048576", "mb_per_s")
goal("tcp 1 MiB, zero-copy loan", v / 1000 if v else None, 1.5, " GB/s")
goal("shm ping-pong round trip p50", med("pp/ours/shm/64", "lat_p50_us"), 60, " µs", higher=False)
for tr in ZT:
    a, b = med("pp/ours/%s/64" % tr, "lat_p50_us"), med("pp/zmq/%s/64" % ZT[tr], "lat_p50_us")
    goal("round trip p50, ZeroMQ's / ours, %s 64 B" % tr, b / a if a and b else None, 1.0, "")
a, b = med("zcx/ours/shm/1048576", "msgs_per_s"), med("zc/iox/shm/1048576", "msgs_per_s")
goal("ours/iceoryx, zero-copy 1 MiB over shm", a / b if a and b else None, None, "")
rs = []
for size in SZ:
    for tr in ZT:
        a, b = med("thr/ours/%s/%s" % (tr, size), "msgs_per_s"), med("thr/zmq/%s/%s" % (ZT[tr], size), "msgs_per_s")
        if a and b:
            rs.append((a / b, tr, size))
if rs:
    worst = min(rs)
    goal("ours/ZeroMQ throughput, worst of the 9 rows", worst[0], 1.0, "", note="(%s %s; best %.2f)" % (worst[1], SZ[worst[2]], max(rs)[0]))
else:
    goal("ours/ZeroMQ throughput", None, 1.0, "")
# Every call of every run must have seen all 200 endpoints, or the goal is not met whatever the time.
v, pr = stat("profile", "median_ms"), runs.get("profile", [])
whole = all(r["complete"] == r["calls"] for r in pr)
goal("`ez_profile`, 200 endpoints in 4 processes, window 2 s: median of 50 calls, worst of %d runs "
     "(complete answers: %s)" % (len(pr), ", ".join("%d/%d" % (r["complete"], r["calls"]) for r in pr) or "n/a"),
     (v[2] if whole else float("inf")) if v else None, 20, " ms", higher=False)
for tr in ZT:
    # Over the pairs in the fast placement (the host kept the CPUs where they were from just before
    # to just after the pair; the rule looks at the handoff, never at the ratio): met if both
    # series place their median at 0.97 or above with 90% confidence, not met if either places it
    # below; otherwise this run cannot tell.
    a, b = tel_ratio(tr, True), tel_ratio(tr, True, kind="telpin")
    va, vb = tel_pairs(tr, True), tel_pairs(tr, True, kind="telpin")
    ca, cb = median_ci(va), median_ci(vb)
    pl, cpl = tel_ratio(tr, True, kind="placebo"), median_ci(tel_pairs(tr, True, kind="placebo"))
    name = "telemetry in/out, %s 64 B, %d code layouts of each build (median of the fast-placement pairs, unpinned %s (%d pairs) and pinned %s (%d); 90%% intervals %s, %s; placebo, two layouts of the same build: %s, %s)" % (
        tr, meta["layouts"], "%.3f" % a if a else "n/a", len(va), "%.3f" % b if b else "n/a", len(vb),
        "%.2f–%.2f" % ca if ca else "n/a", "%.2f–%.2f" % cb if cb else "n/a",
        "%.3f" % pl if pl else "n/a", "%.2f–%.2f" % cpl if cpl else "n/a")
    if not (a and b and ca and cb):
        verdict = "no data"
    elif ca[0] >= 0.97 and cb[0] >= 0.97:
        verdict = "**met**"
    elif ca[1] < 0.97 or cb[1] < 0.97:
        verdict = "**not met**"
    else:
        verdict = "**not resolved**: an interval straddles 0.97"
    w("| %s | ≥ 0.97 | %s | %s |" % (name, "%.3f" % min(a, b) if a and b else "n/a", verdict))
w("")

# ---- throughput
def thr_table(title, prefix_ours, prefix_zmq, sizes, intro):
    w("## " + title)
    w("")
    w(intro)
    w("")
    w("| size | ours | theirs | ours msgs/s | ZeroMQ msgs/s | ours/theirs | ours MB/s | ZeroMQ MB/s | ours p50 / p99 µs | ZeroMQ p50 / p99 µs |")
    w("|---|---|---|---|---|---|---|---|---|---|")
    for size in sizes:
        for tr in ZT:
            ko, kz = "%s/%s/%s" % (prefix_ours, tr, size), "%s/%s/%s" % (prefix_zmq, ZT[tr], size)
            w("| %s | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s / %s |" % (
                SZ[size], tr, ZT[tr], cell(ko, "msgs_per_s"), cell(kz, "msgs_per_s"),
                ratio(med(ko, "msgs_per_s"), med(kz, "msgs_per_s")),
                fmt(med(ko, "mb_per_s")), fmt(med(kz, "mb_per_s")),
                fmt(med(ko, "lat_p50_us")), fmt(med(ko, "lat_p99_us")),
                fmt(med(kz, "lat_p50_us")), fmt(med(kz, "lat_p99_us"))))
    w("")

thr_table("Throughput, 1 publisher -> 1 subscriber", "thr/ours", "thr/zmq", SZ,
          "The publisher sends from its own buffer: ours with `ez_publish` (one copy into the ring "
          "slot), ZeroMQ with `zmq_send` on PUSH -> PULL (one copy into a message, then the kernel's "
          "for ipc/tcp). Receivers take a zero-copy view (`ez_recv`, `zmq_msg_recv`) and read the "
          "32-byte header. local = threads of one process (ZeroMQ inproc); shm and tcp = two "
          "processes (ZeroMQ ipc and tcp). Ours: `ezmsg perf -c fanout -n 1 --copy`.")
thr_table("Zero-copy publishing, 1 MiB", "zc/ours", "zc/zmq", ["1048576"],
          "The publisher writes only the 32-byte header into a loaned slot (`ez_pub_loan`) or a "
          "freshly allocated message (`zmq_msg_init_size`): this measures the transport alone. "
          "For local and shm nothing copies the payload on our side, so MB/s is not a memory "
          "bandwidth; for tcp it is the socket's.")

w("## 64 B with a ZeroMQ-sized window")
w("")
w("Small-message throughput is bounded by the publisher's window: at most num_buffers messages are "
  "unacknowledged, so msgs/s <= num_buffers / (notice-to-ack round trip). ZeroMQ's PUSH/PULL keeps "
  "up to 2 x 1000 messages in flight (send and receive high-water marks). Same runs as the first "
  "table with `-b 1024`:")
w("")
w("| transport | ours, 32 buffers | ours, 1024 buffers | ZeroMQ | ours (1024)/theirs | ours (1024) p50 / p99 µs |")
w("|---|---|---|---|---|---|")
for tr in ZT:
    k32, kw, kz = "thr/ours/%s/64" % tr, "win/ours/%s/64" % tr, "thr/zmq/%s/64" % ZT[tr]
    w("| %s | %s | %s | %s | %s | %s / %s |" % (tr, fmt(med(k32, "msgs_per_s")), cell(kw, "msgs_per_s"),
      fmt(med(kz, "msgs_per_s")), ratio(med(kw, "msgs_per_s"), med(kz, "msgs_per_s")),
      fmt(med(kw, "lat_p50_us")), fmt(med(kw, "lat_p99_us"))))
w("")

w("Over TCP, two ezmsg-c processes negotiate a window of their own, larger than num_buffers "
  "(`EZMSG_TCP_WINDOW`, default 8192 messages within 8 MiB; docs/architecture.md): the first table "
  "runs with it. The same 64 B runs with `EZMSG_TCP_WINDOW=0` (the protocol's window of "
  "num_buffers, as with Python peers):")
w("")
w("| transport | ours, TCP window | ours, num_buffers window | window/none | ZeroMQ |")
w("|---|---|---|---|---|")
k, kn, kz = "thr/ours/tcp/64", "nowin/ours/tcp/64", "thr/zmq/tcp/64"
w("| tcp | %s | %s | %s | %s |" % (fmt(med(k, "msgs_per_s")), cell(kn, "msgs_per_s"),
  ratio(med(k, "msgs_per_s"), med(kn, "msgs_per_s")), fmt(med(kz, "msgs_per_s"))))
w("")

# ---- large messages
w("## Large messages, 16 MiB")
w("")
w("Ours alone, with a copy (`ezmsg perf --copy -s 16777216`), in the same rounds. 16 MiB is above "
  "the TCP window's byte budget (8 MiB): a receiver that allocated, faulted in and freed a buffer "
  "for each such message would fall far below its 1 MiB rate here (session 11 fixed such a drop, "
  "7x from 4 to 8 MiB over TCP, found by hand). 32 buffers of 16 MiB make a 512 MiB segment, "
  "whose first pass (page faults) takes most of a 1 s warm-up: these runs have one (the others "
  "%s s). In-process, 16 MiB copies come from RAM where 1 MiB ones stay in the caches." % meta["warmup"])
w("")
w("| transport | 1 MiB MB/s | 16 MiB MB/s | 16 MiB msgs/s | 16 MiB / 1 MiB (MB/s) |")
w("|---|---|---|---|---|")
for tr, kb in [(tr, "big/ours/%s/16777216" % tr) for tr in ZT] + [("tcp, no window (`EZMSG_TCP_WINDOW=0`)", "bignowin/ours/tcp/16777216")]:
    k1 = "thr/ours/%s/1048576" % tr.split(",")[0]
    w("| %s | %s | %s | %s | %s |" % (tr, fmt(med(k1, "mb_per_s")), cell(kb, "mb_per_s"),
      cell(kb, "msgs_per_s"), ratio(med(kb, "mb_per_s"), med(k1, "mb_per_s"))))
w("")

# ---- iceoryx
w("## Zero-copy over shared memory: ours and iceoryx")
w("")
w("Two processes; the publisher loans a buffer, writes only the 32-byte header and publishes it "
  "(ours: `ez_pub_loan` / `ez_pub_commit`, `ezmsg perf -T shm` without `--copy`; iceoryx 2.0 "
  "through its C binding, bench/iox_bench.c, with RouDi configured by bench/iox_roudi.toml: 64 "
  "chunks of 1 MiB). Lossless on both sides (iceoryx: the publisher waits for the consumer, "
  "whose queue blocks the producer); both poll.")
w("")
w("| size | ours msgs/s | iceoryx msgs/s | ours/iceoryx | ours p50 / p99 µs | iceoryx p50 / p99 µs |")
w("|---|---|---|---|---|---|")
for size in ("64", "1048576"):
    ko, ki = "zcx/ours/shm/%s" % size, "zc/iox/shm/%s" % size
    w("| %s | %s | %s | %s | %s / %s | %s / %s |" % (SZ[size], cell(ko, "msgs_per_s"), cell(ki, "msgs_per_s"),
      ratio(med(ko, "msgs_per_s"), med(ki, "msgs_per_s")), fmt(med(ko, "lat_p50_us")),
      fmt(med(ko, "lat_p99_us")), fmt(med(ki, "lat_p50_us")), fmt(med(ki, "lat_p99_us"))))
w("")

# ---- ping-pong
w("## Ping-pong round trip, 64 B")
w("")
w("One message out, the reply back, one at a time (ours: two topics, a publisher and a subscriber on "
  "each side, `ezmsg perf -c pingpong`; ZeroMQ: REQ/REP).")
w("")
w("| ours | theirs | ours p50 µs | ours p99 µs | ZeroMQ p50 µs | ZeroMQ p99 µs | ours round trips/s | ZeroMQ round trips/s | ours/theirs (rate) |")
w("|---|---|---|---|---|---|---|---|---|")
for tr in ZT:
    ko, kz = "pp/ours/%s/64" % tr, "pp/zmq/%s/64" % ZT[tr]
    w("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (tr, ZT[tr], cell(ko, "lat_p50_us"), cell(ko, "lat_p99_us"),
      cell(kz, "lat_p50_us"), cell(kz, "lat_p99_us"), fmt(med(ko, "msgs_per_s")), fmt(med(kz, "msgs_per_s")),
      ratio(med(ko, "msgs_per_s"), med(kz, "msgs_per_s"))))
w("")

# ---- polling
w("## Polling before sleeping on vs off, 64 B")
w("")
w("By default a context's I/O thread polls for up to 50 µs before it sleeps, and `ez_recv` does "
  "for messages from publishers in the same process, while polling keeps finding work "
  "(`EZMSG_SPIN_US`, see docs/architecture.md). The same runs with `EZMSG_SPIN_US=0` in every "
  "round, against the default runs of the tables above:")
w("")
w("| transport | fanout msgs/s, polling | fanout msgs/s, no polling | on/off | ping-pong p50 µs, polling | ping-pong p50 µs, no polling |")
w("|---|---|---|---|---|---|")
for tr in ZT:
    a, b = "thr/ours/%s/64" % tr, "spin0/thr/%s/64" % tr
    pa, pb = "pp/ours/%s/64" % tr, "spin0/pp/%s/64" % tr
    w("| %s | %s | %s | %s | %s | %s |" % (tr, fmt(med(a, "msgs_per_s")), cell(b, "msgs_per_s"),
      ratio(med(a, "msgs_per_s"), med(b, "msgs_per_s")), fmt(med(pa, "lat_p50_us")), cell(pb, "lat_p50_us")))
w("")

# ---- telemetry
w("## Telemetry compiled in vs out, 64 B")
w("")
w("The same `ezmsg perf --copy` runs against a second tree built with `-DEZ_TELEMETRY=OFF` (no "
  "time stamp, no window: docs/profiling.md), in %d pairs per transport after the main rounds: "
  "the two runs of a pair back to back, which one first alternating; once as every other row "
  "runs (unpinned), once with `--pin` (node k on CPU k). **Code layouts.** Where the code lies "
  "alone moves a build's rate here by several percent (the placebo below), and one link of a "
  "build is one draw of it, which a comparison of two single links takes for the builds' "
  "difference. So the two builds are compiled with `-ffunction-sections` and their CLI linked "
  "%d times each with its functions in another random order (lld `--shuffle-sections`, CMake "
  "`EZ_BENCH_LAYOUTS`); pair k compares layout k mod %d of each, and the rows below are over "
  "all layouts (as in Mytkowicz et al., *Producing wrong data without doing anything obviously "
  "wrong*, ASPLOS 2009, and Curtsinger and Berger's Stabilizer). The default build's single "
  "layouts are measured too, in the last rows. On this VM the cost of moving a cache "
  "line between the two CPUs switches between about 30 and 160 ns as the host moves them (the "
  "handoff row above), and unpinned runs also flip between fast and slow modes with the "
  "scheduler's placement of four busy threads on two CPUs; every polling transport's rate "
  "follows both. A pair's two runs almost always share the host's placement, so the **median of "
  "the pairs' ratios** is the figure to read; pinning takes the scheduler out as well. The "
  "fast-placement column keeps only the pairs whose handoff, measured just before and just after "
  "the pair, was under twice the fastest seen: pairs during which the host moved the CPUs measure "
  "the host. The goal is judged on those pairs (the rule looks at the handoff, never at the "
  "ratio), by the median of their ratios. Beside it, the ratio of the two builds' mean rates over "
  "the same pairs: a build's runs may fall into two modes with the address layout each run gets "
  "(shm 64 B: a third of the compiled-out build's runs ~18%% slower), which the median of ratios "
  "follows only in its commoner mode. The interval is a 90%% bootstrap interval of the median of all pairs: where it is "
  "wider than the difference in question, this run cannot tell that difference." % (meta["tel_rounds"], meta["layouts"], meta["layouts"]))
w("")
w("| transport | runs | telemetry on msgs/s | telemetry off msgs/s | on/off, median of pairs | its 90% interval | same, fast-placement pairs (count; 90% interval) | fast-placement pairs, ratio of mean rates | on/off (medians) | on/off (best runs) |")
w("|---|---|---|---|---|---|---|---|---|---|")
for tr in ZT:
    for kind, label in (("tel", "unpinned"), ("telpin", "pinned"), ("teldef", "default links, pinned")):
        a, b = "%s/on/%s/64" % (kind, tr), "%s/off/%s/64" % (kind, tr)
        sa, sb = stat(a, "msgs_per_s"), stat(b, "msgs_per_s")
        allp, fastp = tel_pairs(tr, kind=kind), tel_pairs(tr, True, kind=kind)
        ci, cf = median_ci(allp), median_ci(fastp)
        mr = tel_mean_ratio(tr, True, kind=kind)
        w("| %s | %s | %s | %s | %s (%d pairs, %s–%s) | %s | %s (%d; %s) | %s | %s | %s |" % (tr, label, cell(a, "msgs_per_s"), cell(b, "msgs_per_s"),
          "%.3f" % statistics.median(allp) if allp else "n/a", len(allp),
          "%.2f" % min(allp) if allp else "n/a", "%.2f" % max(allp) if allp else "n/a",
          "%.3f–%.3f" % ci if ci else "n/a",
          "%.3f" % statistics.median(fastp) if fastp else "n/a", len(fastp),
          "%.3f–%.3f" % cf if cf else "n/a", "%.3f" % mr if mr else "n/a",
          ratio(med(a, "msgs_per_s"), med(b, "msgs_per_s")), ratio(sa[2] if sa else None, sb[2] if sb else None)))
w("")
w("**The placebo.** The telemetry-off build in one layout against the same build in the next "
  "layout, pinned, in the same rounds: the code is the same, only where it lies in memory "
  "differs. The spread of its pairs is how far layout alone moves a comparison of two builds "
  "here; a single pair of links cannot tell a telemetry cost smaller than that from layout.")
w("")
w("| transport | next layout / this one, msgs/s | median of pairs | its 90% interval | fast-placement pairs (count; 90% interval) |")
w("|---|---|---|---|---|")
for tr in ZT:
    v, vf = tel_pairs(tr, kind="placebo"), tel_pairs(tr, True, kind="placebo")
    ci, cf = median_ci(v), median_ci(vf)
    w("| %s | %s / %s | %s (%d pairs, %s–%s) | %s | %s (%d; %s) |" % (tr, cell("placebo/on/%s/64" % tr, "msgs_per_s"),
      cell("placebo/off/%s/64" % tr, "msgs_per_s"), "%.3f" % statistics.median(v) if v else "n/a",
      len(v), "%.2f" % min(v) if v else "n/a", "%.2f" % max(v) if v else "n/a",
      "%.3f–%.3f" % ci if ci else "n/a", "%.3f" % statistics.median(vf) if vf else "n/a", len(vf),
      "%.3f–%.3f" % cf if cf else "n/a"))
w("")

# ---- limits
w("## The machine's limits")
w("")
w("bench/limits.c, run before and after the rounds (median of the two).")
w("")
w("| measurement | size | per second | MB/s | p50 µs | p99 µs |")
w("|---|---|---|---|---|---|")
names = {"memcpy/hot": "memcpy, buffers in cache", "memcpy/cold": "memcpy, 64 MiB working set",
         "pingpong/socketpair": "socketpair ping-pong, two processes",
         "pingpong/condvar": "mutex+condvar ping-pong, two threads",
         "handoff/cacheline": "cache-line handoff between the two CPUs (one way)"}
for k in sorted(x for x in runs if x.startswith("limits/")):
    _, cfg, var, size = k.split("/")
    lat = cfg in ("pingpong", "handoff")
    w("| %s | %s | %s | %s | %s | %s |" % (names.get(cfg + "/" + var, cfg + " " + var), SZ.get(size, size + " B"),
      fmt(med(k, "msgs_per_s")), "" if lat else fmt(med(k, "mb_per_s")),
      fmt(med(k, "lat_p50_us")) if lat else "", fmt(med(k, "lat_p99_us")) if lat and cfg != "handoff" else ""))
w("")

# ---- failures
w("## Failed runs")
w("")
if fails:
    for k, rnd, err in fails:
        w("- %s, round %s: %s" % (k, rnd, err))
else:
    w("None.")
w("")

# ---- the hand-written analysis is kept
keep = ""
if os.path.exists(out):
    old = open(out).read()
    i = old.find("## Where the time goes")
    if i >= 0:
        keep = old[i:]
text = "\n".join(L) + "\n"
if keep:
    text += keep if keep.endswith("\n") else keep + "\n"
else:
    text += "## Where the time goes\n\n(not written yet)\n"
open(out, "w").write(text)
print("bench: wrote %s (%d runs, %d failed)" % (out, sum(len(v) for v in runs.values()), len(fails)), file=sys.stderr)
PY
