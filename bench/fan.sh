#!/usr/bin/env bash
# bench/fan.sh [BUILD]: the fan-out (1 -> N) and fan-in (N -> 1) sweeps, ours against ZeroMQ;
# writes bench/FANOUT.md and its plots (bench/plots/*.png, with gnuplot when installed).
#
# N = 1, 2, 4, 8, 16 processes, shm and tcp (ZeroMQ: ipc and tcp), 64 B and 64 KiB. Ours is
# `ezmsg perf -c fanout|fanin -n N --copy` (one process per node); theirs bench/zmq_fan.c (XPUB
# with ZMQ_XPUB_NODROP -> N SUB, or N PUSH -> PULL: nothing dropped). Both check sequence numbers
# (a run that lost anything fails and is listed), report deliveries per second summed over the
# sinks, latency p50 / p99 / max, and CPU seconds of every process per delivered message. Each
# round runs every case once, ours and theirs back to back, which goes first alternating by
# round; cells are the median over the rounds, the ratio is of the medians of the same run. The
# load average is recorded before and after every run.
#
# Fan-out gives both sides the same queue depth, DEPTH messages: ours `-b DEPTH` (num_buffers,
# the slots a publisher may have in flight, shared by all its subscribers), ZeroMQ `--hwm DEPTH`
# (the high-water mark of every socket; the kernel's socket buffers come on top of it, so
# ZeroMQ's queue is deeper than ours at the same number). 32 is ezmsg's default, 1024 about
# ZeroMQ's (1000). Fan-in: ours `-b DEPTH` per publisher, ZeroMQ at its default high-water mark
# (with --hwm 32 its PULL sink went 200 ms without a message in most runs and failed them).
#
# Environment: ROUNDS (3), DURATION (0.5 s measured), WARMUP (0.2 s), NS ("1 2 4 8 16"), SIZES
# ("64 65536"), TRS ("shm tcp"), CFGS ("fanout fanin"), DEPTHS ("32 1024": for sizes up to 4 KiB),
# BIG_DEPTHS ("32": for larger ones), OUT (bench/FANOUT.md), PLOTS (bench/plots), SPIN0 (1: also
# ours with EZMSG_SPIN_US=0, fan-out 64 B only).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-0.5}
WARMUP=${WARMUP:-0.2}
NS=${NS:-1 2 4 8 16}
SIZES=${SIZES:-64 65536}
TRS=${TRS:-shm tcp}
CFGS=${CFGS:-fanout fanin}
DEPTHS=${DEPTHS:-32 1024}
BIG_DEPTHS=${BIG_DEPTHS:-32}
OUT=${OUT:-bench/FANOUT.md}
PLOTS=${PLOTS:-bench/plots}
SPIN0=${SPIN0:-1}
EZ=$BUILD/ezmsg
ZF=$BUILD/bench/ez_bench_zmq_fan
LIM=$BUILD/bench/ez_bench_limits
[ -x "$EZ" ] || { echo "bench/fan.sh: $EZ is missing" >&2; exit 1; }
HAVE_ZMQ=1 && [ -x "$ZF" ] || HAVE_ZMQ=0
export EZMSG_LOG_LEVEL=${EZMSG_LOG_LEVEL:-error}
RAW=$BUILD/fan-raw.tsv
: >"$RAW"
declare -A ZT=([shm]=ipc [tcp]=tcp)

# record KEY ROUND COMMAND...: one run (killed after 120 s), its JSON and the load around it.
record() {
  local key=$1 round=$2 out l0 l1
  shift 2
  l0=$(cut -d' ' -f1 /proc/loadavg)
  out=$(timeout -k 5 120 "$@" 2>/dev/null | tr -d '\n' || true)
  l1=$(cut -d' ' -f1 /proc/loadavg)
  printf '%s\t%s\t%s %s\t%s\n' "$key" "$round" "$l0" "$l1" "$out" >>"$RAW"
}

T0=$(date +%s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq 1 "$ROUNDS"); do
  echo "bench/fan.sh: round $round of $ROUNDS ($(($(date +%s) - T0)) s so far)" >&2
  # What the machine takes from a busy CPU over one run's measured time (bench/limits.c): the
  # floor under every maximum latency below.
  [ ! -x "$LIM" ] || record "machine/hiccup" "$round" "$LIM" --hiccup --json -d "$DURATION"
  for cfg in $CFGS; do
    for tr in $TRS; do
      for size in $SIZES; do
        depths=$DEPTHS && [ "$size" -le 4096 ] || depths=$BIG_DEPTHS
        for depth in $depths; do
          for n in $NS; do
            ours=("$EZ" perf -c "$cfg" -T "$tr" -s "$size" -n "$n" -b "$depth" -d "$DURATION"
              -w "$WARMUP" --copy --json -q)
            hwm=() && [ "$cfg" = fanin ] || hwm=(--hwm "$depth")
            theirs=("$ZF" -m "$cfg" -T "${ZT[$tr]}" -s "$size" -n "$n" "${hwm[@]}"
              -d "$DURATION" -w "$WARMUP" --json)
            k="$cfg/$tr/$size/$depth/$n"
            if [ $((round % 2)) -eq 1 ]; then
              record "ours/$k" "$round" "${ours[@]}"
              [ $HAVE_ZMQ = 0 ] || record "zmq/$k" "$round" "${theirs[@]}"
            else
              [ $HAVE_ZMQ = 0 ] || record "zmq/$k" "$round" "${theirs[@]}"
              record "ours/$k" "$round" "${ours[@]}"
            fi
            if [ "$SPIN0" = 1 ] && [ "$cfg" = fanout ] && [ "$size" = 64 ]; then
              record "spin0/$k" "$round" env EZMSG_SPIN_US=0 "${ours[@]}"
            fi
          done
        done
      done
    done
  done
done
export LOAD_START LOAD_END ELAPSED ROUNDS DURATION WARMUP
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
ELAPSED=$(($(date +%s) - T0))
mkdir -p "$PLOTS"
python3 bench/fan_report.py "$RAW" "$OUT" "$PLOTS"
if command -v gnuplot >/dev/null; then
  for g in "$PLOTS"/*.gp; do gnuplot "$g"; done
else
  echo "bench/fan.sh: no gnuplot (scripts/deps.sh bench installs it): no plots" >&2
fi
echo "bench/fan.sh: wrote $OUT ($ELAPSED s)" >&2
