#!/usr/bin/env bash
# bench/rate.sh [BUILD]: fixed-rate efficiency and the 8-process pipeline, ours against ZeroMQ
# (and the Python reference when EZMSG_PY is set); writes bench/RATE.md and its plots
# (bench/plots/rate_*.png, with gnuplot when installed).
#
# Fixed rate: one source process -> one sink process, paced on absolute deadlines (a deadline
# missed by a period or more is skipped and counted, never caught up), at RATES Hz and SIZES
# bytes: ours (ez_bench_rate) with polling on (EZMSG_SPIN_US unset: the default) and off
# (EZMSG_SPIN_US=0), ZeroMQ (ez_bench_zmq_rate: XPUB with ZMQ_XPUB_NODROP -> SUB over ipc), and
# the pacing alone (ez_bench_rate --null: the source sleeps and wakes, sends nothing). Pipeline:
# a source at 1 kHz of 4 KiB -> 4 stages (WORK passes of FNV-1a over each frame) -> 3 sinks,
# 8 processes, ours (polling on and off) and ZeroMQ built the same way (bench/rate.h). Fan-in:
# SOURCES processes, each paced at FANIN_RATES Hz, 256 B, on one topic -> one sink (ZeroMQ: an XPUB
# per source, the sink's SUB connected to each). Each run
# reports CPU per message of every process (getrusage), context switches per message, latency
# p50 / p99 / p99.9 / max; each round runs every case once, ours and theirs back to back, which
# goes first alternating by round; cells are medians over the rounds. Then one round of the
# 1 kHz and 10 kHz 256 B cases and the pipeline with --syscalls (system calls per message
# counted by a perf tracepoint: a little dearer, so not in the CPU tables).
#
# Python: only if EZMSG_PY names a PYTHONPATH holding ezmsg (e.g.
# EZMSG_PY=/work/ref39/src:/work/ref39/site), bench/py_rate.py at PY_RATES and SIZES.
#
# Environment: ROUNDS (3), DURATION (2 s measured), WARMUP (0.5 s), RATES ("100 1000 10000
# 100000"), SIZES ("256 16384"), PIPE (1: the pipeline), WORK (8 passes), FANIN_RATES ("1000
# 10000"; "" skips fan-in), SOURCES (8), DIAG (1: the
# --syscalls round), EZMSG_PY (unset), PY_RATES ("100 1000 10000"), OUT (bench/RATE.md), PLOTS
# (bench/plots).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-2}
WARMUP=${WARMUP:-0.5}
RATES=${RATES:-100 1000 10000 100000}
SIZES=${SIZES:-256 16384}
PIPE=${PIPE:-1}
WORK=${WORK:-8}
FANIN_RATES=${FANIN_RATES-1000 10000}
SOURCES=${SOURCES:-8}
DIAG=${DIAG:-1}
PY_RATES=${PY_RATES:-100 1000 10000}
OUT=${OUT:-bench/RATE.md}
PLOTS=${PLOTS:-bench/plots}
EZ=$BUILD/bench/ez_bench_rate
ZR=$BUILD/bench/ez_bench_zmq_rate
[ -x "$EZ" ] || { echo "bench/rate.sh: $EZ is missing (cmake -DEZ_BENCH=ON)" >&2; exit 1; }
HAVE_ZMQ=1 && [ -x "$ZR" ] || HAVE_ZMQ=0
HAVE_PY=0
if [ -n "${EZMSG_PY:-}" ]; then
  if PYTHONPATH=$EZMSG_PY python3 -c 'import ezmsg.core' 2>/dev/null; then
    HAVE_PY=1
  else
    echo "bench/rate.sh: EZMSG_PY=$EZMSG_PY does not import ezmsg.core: no Python rows" >&2
  fi
fi
export EZMSG_LOG_LEVEL=${EZMSG_LOG_LEVEL:-error}
unset EZMSG_SPIN_US
RAW=$BUILD/rate-raw.tsv
: >"$RAW"
COMMON=(-d "$DURATION" -w "$WARMUP")

# record KEY ROUND COMMAND...: one run (killed after 90 s), its JSON and the load around it.
record() {
  local key=$1 round=$2 out l0 l1
  shift 2
  l0=$(cut -d' ' -f1 /proc/loadavg)
  out=$(timeout -k 5 90 "$@" 2>/dev/null | tail -n 1 | tr -d '\n' || true)
  l1=$(cut -d' ' -f1 /proc/loadavg)
  printf '%s\t%s\t%s %s\t%s\n' "$key" "$round" "$l0" "$l1" "$out" >>"$RAW"
}

# pair ROUND KEY ARGS...: ours, ours without polling and ZeroMQ on the same arguments, in an
# order that alternates by round.
pair() {
  local round=$1 key=$2
  shift 2
  local ours=("$EZ" "$@") theirs=("$ZR" "$@")
  if [ $((round % 2)) -eq 1 ]; then
    record "ours/$key" "$round" "${ours[@]}"
    record "spin0/$key" "$round" env EZMSG_SPIN_US=0 "${ours[@]}"
    [ $HAVE_ZMQ = 0 ] || record "zmq/$key" "$round" "${theirs[@]}"
  else
    [ $HAVE_ZMQ = 0 ] || record "zmq/$key" "$round" "${theirs[@]}"
    record "spin0/$key" "$round" env EZMSG_SPIN_US=0 "${ours[@]}"
    record "ours/$key" "$round" "${ours[@]}"
  fi
}

T0=$(date +%s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq 1 "$ROUNDS"); do
  echo "bench/rate.sh: round $round of $ROUNDS ($(($(date +%s) - T0)) s so far)" >&2
  for rate in $RATES; do
    record "null/rate/$rate/0" "$round" "$EZ" --null --rate "$rate" "${COMMON[@]}"
    for size in $SIZES; do
      pair "$round" "rate/$rate/$size" --mode rate --rate "$rate" --size "$size" "${COMMON[@]}"
    done
  done
  if [ "$PIPE" = 1 ]; then
    pair "$round" "pipe/1000/4096" --mode pipeline --work "$WORK" "${COMMON[@]}"
  fi
  for rate in $FANIN_RATES; do
    pair "$round" "fanin/$rate/256" --mode fanin --sources "$SOURCES" --rate "$rate" --size 256 \
      "${COMMON[@]}"
  done
  if [ $HAVE_PY = 1 ]; then
    for rate in $PY_RATES; do
      for size in $SIZES; do
        record "py/rate/$rate/$size" "$round" env PYTHONPATH="$EZMSG_PY" python3 bench/py_rate.py \
          --rate "$rate" --size "$size" --duration "$DURATION" --warmup "$WARMUP"
      done
    done
  fi
done
if [ "$DIAG" = 1 ]; then
  echo "bench/rate.sh: the --syscalls round ($(($(date +%s) - T0)) s so far)" >&2
  for rate in 1000 10000; do
    pair 1 "diag/rate/$rate/256" --mode rate --rate "$rate" --size 256 --syscalls "${COMMON[@]}"
  done
  if [ "$PIPE" = 1 ]; then
    pair 1 "diag/pipe/1000/4096" --mode pipeline --work "$WORK" --syscalls "${COMMON[@]}"
  fi
fi
TREE=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -z "$(git status --porcelain src include 2>/dev/null)" ] || TREE="$TREE with uncommitted changes in src/"
export LOAD_START LOAD_END ELAPSED ROUNDS DURATION WARMUP WORK HAVE_PY TREE
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
ELAPSED=$(($(date +%s) - T0))
mkdir -p "$PLOTS"
python3 bench/rate_report.py "$RAW" "$OUT" "$PLOTS"
if command -v gnuplot >/dev/null; then
  for g in "$PLOTS"/rate_*.gp; do gnuplot "$g"; done
else
  echo "bench/rate.sh: no gnuplot (scripts/deps.sh bench installs it): no plots" >&2
fi
echo "bench/rate.sh: wrote $OUT ($ELAPSED s)" >&2
