#!/usr/bin/env bash
# bench/graphsize.sh [BUILD]: how the graph server's operations and memory grow with the graph;
# writes bench/GRAPHSIZE.md and bench/plots/graphsize.png (with gnuplot when installed).
#
# For each size T (100, 1000, 10000 topics: T/10 clients, half publishers and half subscribers,
# in 5, 10 and 50 processes), a fresh `ezmsg serve` on a free port of 127.0.0.1 in 30000-30399
# (publishers' channel servers from 30400 up), and bench/graphsize.c building the graph on it and
# timing a CONNECT, a subscriber joining, the UPDATE fan-out to every subscriber, `ez_profile`
# over 2T/10 endpoints (2000 at the top) and a DAG read, with the server's CPU per call and its
# memory (VmRSS from /proc). Each size runs in the released dialect (`ezmsg serve`'s default)
# and, for the profile, also in the profiling one (`--dialect profiling`: ez_profile is one
# PROFILE round trip there, without the released dialect's session). Every process is stopped by
# pid; /dev/shm is compared before and after.
#
# Environment: SIZES ("100 1000 10000"), DIALECTS ("released profiling"), CALLS (20), OUT
# (bench/GRAPHSIZE.md), PLOTS (bench/plots).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SIZES=${SIZES:-100 1000 10000}
DIALECTS=${DIALECTS:-released profiling}
CALLS=${CALLS:-20}
OUT=${OUT:-bench/GRAPHSIZE.md}
PLOTS=${PLOTS:-bench/plots}
EZ=$BUILD/ezmsg
GS=$BUILD/bench/ez_bench_graphsize
for x in "$EZ" "$GS"; do
  [ -x "$x" ] || { echo "bench/graphsize.sh: $x is missing (cmake -DEZ_BENCH=ON)" >&2; exit 1; }
done
export EZMSG_LOG_LEVEL=${EZMSG_LOG_LEVEL:-warn}
export EZMSG_PUBLISHER_PORT_START=30400
declare -A PROCS=([100]=5 [1000]=10 [10000]=50)
RAW=$BUILD/graphsize-raw.jsonl
LOG=$BUILD/graphsize-server.log
: >"$RAW"
: >"$LOG"
shm_names() { find /dev/shm -maxdepth 1 -name 'psm_*' -user "$(id -u)" -printf '%f\n' | sort; }
SHM_BEFORE=$(shm_names)
SERVER=

stop_server() {
  [ -n "$SERVER" ] || return 0
  kill "$SERVER" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$SERVER" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$SERVER" 2>/dev/null || true
  wait "$SERVER" 2>/dev/null || true
  SERVER=
}
trap stop_server EXIT

# start_server DIALECT: `ezmsg serve` on a free port; sets SERVER (pid) and ADDR.
start_server() {
  local port
  for _ in $(seq 20); do
    port=$((30000 + RANDOM % 400))
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi # taken
    "$EZ" serve --address "127.0.0.1:$port" --max-clients 16384 --dialect "$1" 2>>"$LOG" &
    SERVER=$!
    ADDR=127.0.0.1:$port
    for _ in $(seq 50); do
      kill -0 "$SERVER" 2>/dev/null || break # (the port was taken after all)
      if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
      sleep 0.1
    done
    stop_server
  done
  echo "bench/graphsize.sh: no graph server could start" >&2
  return 1
}

T0=$(date +%s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
for dialect in $DIALECTS; do
  for t in $SIZES; do
    echo "bench/graphsize.sh: $t topics, $dialect dialect ($(($(date +%s) - T0)) s so far)" >&2
    start_server "$dialect"
    args=(--address "$ADDR" --server-pid "$SERVER" --topics "$t" --calls "$CALLS")
    [ -z "${PROCS[$t]:-}" ] || args+=(--processes "${PROCS[$t]}")
    out=$(timeout -k 5 150 "$GS" "${args[@]}" 2>>"$LOG" || true)
    stop_server
    if [ -n "$out" ]; then
      printf '{"dialect": "%s", "run": %s}\n' "$dialect" "$out" >>"$RAW"
    else
      echo "bench/graphsize.sh: $t topics ($dialect) failed: see $LOG" >&2
      printf '{"dialect": "%s", "run": {"topics": %s, "failed": true}}\n' "$dialect" "$t" >>"$RAW"
    fi
  done
done
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
ELAPSED=$(($(date +%s) - T0))

# What the processes left in /dev/shm (the server unlinks a segment with its last lease; a
# moment may pass after the last process went).
LEFT=
for _ in $(seq 30); do
  LEFT=$(comm -13 <(echo "$SHM_BEFORE") <(shm_names) | tr '\n' ' ')
  [ -z "$LEFT" ] && break
  sleep 0.1
done
[ -z "$LEFT" ] || echo "bench/graphsize.sh: left in /dev/shm: $LEFT" >&2
WARNINGS=$(grep -c 'warning' "$LOG" || true)

mkdir -p "$PLOTS"
HAVE_GNUPLOT=0 && command -v gnuplot >/dev/null && HAVE_GNUPLOT=1
export RAW OUT PLOTS LOAD_START LOAD_END ELAPSED LEFT WARNINGS CALLS HAVE_GNUPLOT
python3 - <<'EOF'
import json, os, subprocess, time

runs = [json.loads(l) for l in open(os.environ["RAW"]) if l.strip()]
rel = [r["run"] for r in runs if r["dialect"] == "released" and not r["run"].get("failed")]
prof = [r["run"] for r in runs if r["dialect"] == "profiling" and not r["run"].get("failed")]
failed = [f'{r["run"]["topics"]} topics ({r["dialect"]})' for r in runs if r["run"].get("failed")]
rel.sort(key=lambda r: r["topics"])
prof.sort(key=lambda r: r["topics"])
OPS = [("connect", "CONNECT"), ("join", "subscriber joins"), ("fanout", "UPDATE fan-out"),
       ("profile", "ez_profile"), ("dag", "DAG read")]

def trio(s):
    return f'{s["median_ms"]:.3g} / {s["p90_ms"]:.3g} / {s["max_ms"]:.3g}'

def mib(kib):
    return f"{kib / 1024:.1f}"

try:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
except OSError:
    commit = "?"
L = []
L.append("# Graph size: the graph server from 100 to 10 000 topics\n")
L.append(f"`make bench` (bench/graphsize.sh, bench/graphsize.c) wrote this on "
         f"{time.strftime('%Y-%m-%d %H:%M')} at commit {commit}, {os.cpu_count()} CPUs, load "
         f"{os.environ['LOAD_START']} before and {os.environ['LOAD_END']} after "
         f"({os.environ['ELAPSED']} s in all). Timings on a shared 2-core machine are "
         "indicative; the server's CPU per call (from /proc/PID/task/*/schedstat) is steadier.\n")
L.append("The graph at T topics: T/10 clients in P processes, half publishers `/gs/p/i`, half "
         "subscribers `/gs/s/j`; CONNECT `/gs/p/(j+1..j+3)` -> `/gs/s/j` (each subscriber reads "
         "three publishers of other processes: 3T/20 channels, and T/20 + 3T/20 = T/5 profiled "
         "endpoints), `/gs/fan` -> every `/gs/s/j`, and the other topics in chains of 10 that no "
         "endpoint uses. Every publisher sends 64 B at 2 Hz. Each operation runs "
         f"{os.environ['CALLS']} times on a fresh `ezmsg serve --max-clients 16384` (median / p90 "
         "/ max, in ms):\n")
L.append("- **CONNECT**: `ez_graph_connect` of a new topic into a chain (no subscriber "
         "downstream); **join**: `ez_sub_create` on a topic nobody publishes (SUBSCRIBE, its "
         "UPDATE and COMPLETE); **fan-out**: `ez_graph_connect` of a new topic to `/gs/fan`, "
         "which returns once every subscriber (T/20) has had its UPDATE and answered it; "
         "**ez_profile** (window 2 s) over all endpoints; **DAG**: `ez_graph_dag`.\n")
L.append("| topics | clients | processes | server connections | endpoints | CONNECT | join | "
         "fan-out (subscribers) | ez_profile | DAG | server RSS MiB: idle, built (peak) |")
L.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rel:
    L.append(f'| {r["topics"]} | {r["clients"]} | {r["processes"]} | {r["server_fds"]} | '
             f'{r["endpoints"]} | {trio(r["connect"])} | {trio(r["join"])} | '
             f'{trio(r["fanout"])} ({r["subscribers"]}) | {trio(r["profile"])} | '
             f'{trio(r["dag"])} | {mib(r["rss_idle_kib"])}, {mib(r["rss_kib"])} '
             f'({mib(r["hwm_kib"])}) |')
L.append("\nThe graph server's CPU per call, in µs (all its threads):\n")
L.append("| topics | " + " | ".join(n for _, n in OPS) + " |")
L.append("|---:|" + "---:|" * len(OPS))
for r in rel:
    L.append(f'| {r["topics"]} | ' + " | ".join(f'{r[k]["server_cpu_us"]:.0f}' for k, _ in OPS)
             + " |")
if len(rel) >= 2:
    L.append("\nGrowth per step (the larger size's value over the smaller's; the graph grows "
             "10x per step, so about 10x or less is linear):\n")
    L.append("| step | " + " | ".join(f"{n} (wall, CPU)" for _, n in OPS) + " | RSS built |")
    L.append("|---|" + "---:|" * (len(OPS) + 1))
    for a, b in zip(rel, rel[1:]):
        cells = []
        for k, _ in OPS:
            w = b[k]["median_ms"] / a[k]["median_ms"]
            c = b[k]["server_cpu_us"] / max(a[k]["server_cpu_us"], 1e-9)
            f = b["topics"] / a["topics"]
            mark = " **worse than linear**" if c > 1.5 * f else ""
            cells.append(f"{w:.1f}x, {c:.1f}x{mark}")
        L.append(f'| {a["topics"]} -> {b["topics"]} | ' + " | ".join(cells) +
                 f' | {b["rss_kib"] / a["rss_kib"]:.1f}x |')
if prof:
    L.append("\n`ez_profile` on a server in the profiling dialect (`ezmsg serve --dialect "
             "profiling`), where it is one PROFILE round trip (in the released dialect it first "
             "asks, through a session, which processes are not ezmsg-c's: none here). Our "
             "server asks each ezmsg-c process once (X_PROFILE_CTX) and copies the endpoints' "
             "answers as they came once checked (docs/profiling.md):\n")
    L.append("| topics | endpoints | ez_profile ms | server CPU µs | document KiB | complete |")
    L.append("|---:|---:|---:|---:|---:|---:|")
    for r in prof:
        L.append(f'| {r["topics"]} | {r["endpoints"]} | {trio(r["profile"])} | '
                 f'{r["profile"]["server_cpu_us"]:.0f} | {r["profile_doc_kib"]:.0f} | '
                 f'{r["profile_complete"]}/{r["calls"]} |')
notes = []
if failed:
    notes.append("failed runs: " + ", ".join(failed) + " (see the server log in the build dir)")
if os.environ["LEFT"].strip():
    notes.append("left in /dev/shm: " + os.environ["LEFT"])
else:
    notes.append("nothing was left in /dev/shm")
notes.append(f'{os.environ["WARNINGS"]} warning lines from the servers and the bench')
L.append("\n" + "; ".join(notes) + ".\n")
if os.environ["HAVE_GNUPLOT"] == "1":
    L.append("![graph size](plots/graphsize.png)\n")
else:
    L.append("(No plot: gnuplot is not installed; `scripts/deps.sh bench` installs it.)\n")
open(os.environ["OUT"], "w").write("\n".join(L))

P = os.environ["PLOTS"]
with open(f"{P}/graphsize.dat", "w") as f:
    f.write("# topics " + " ".join(f"{k}_ms {k}_cpu_us" for k, _ in OPS) + " rss_mib\n")
    for r in rel:
        f.write(f'{r["topics"]} ' + " ".join(f'{r[k]["median_ms"]} {r[k]["server_cpu_us"]}'
                                             for k, _ in OPS) + f' {r["rss_kib"] / 1024}\n')
wall = ", ".join(f"'{P}/graphsize.dat' using 1:{2 + 2 * i} with linespoints title '{n}'"
                 for i, (_, n) in enumerate(OPS))
cpu = ", ".join(f"'{P}/graphsize.dat' using 1:{3 + 2 * i} with linespoints title '{n}'"
                for i, (_, n) in enumerate(OPS))
lin = "with lines dashtype 2 lc rgb 'gray' title 'linear (slope 1)'"
open(f"{P}/graphsize.gp", "w").write(f"""set terminal pngcairo size 1500,540 font ',10' noenhanced
set output '{P}/graphsize.png'
set multiplot layout 1,3
set logscale xy
set xrange [50:20000]
set grid
set key below horizontal maxrows 2
set xlabel 'topics'
set title 'median wall time per call (ms)'
plot {wall}, x/100 {lin}
set title 'graph server CPU per call (µs)'
plot {cpu}, x {lin}
unset logscale y
set logscale x
set yrange [0:*]
set title 'graph server RSS, graph built (MiB)'
plot '{P}/graphsize.dat' using 1:{2 + 2 * len(OPS)} with linespoints title 'VmRSS'
unset multiplot
""")
EOF
if [ $HAVE_GNUPLOT = 1 ]; then
  gnuplot "$PLOTS/graphsize.gp"
else
  echo "bench/graphsize.sh: no gnuplot (scripts/deps.sh bench installs it): no plot" >&2
fi
echo "bench/graphsize.sh: wrote $OUT ($ELAPSED s)" >&2
