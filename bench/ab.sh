#!/usr/bin/env bash
# bench/ab.sh BEFORE [AFTER]: is AFTER's message path as fast as BEFORE's?
#
# Builds two git revisions of this repository (AFTER defaults to HEAD; uncommitted changes are not
# measured) from `git archive` in a temporary directory outside the tree, then hands their CLIs to
# bench/ab.py, which runs `ezmsg perf` of one and the other in alternating pairs (local and shm at
# 64 B and 1 MiB, tcp at 64 B; unpinned and pinned) and prints the median ratio after/before with
# its spread. Prints the load average at the start and the end too.
#
# Environment: ROUNDS (pairs, default 7), DURATION (s per run, default 1), WARMUP (s, default 0.25),
# ROWS (bench/ab.py --rows, e.g. shm:64,shm:1M; default all five), JOBS (build, default 2), KEEP=1
# keeps the temporary directory.
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: bench/ab.sh BEFORE [AFTER]" >&2; exit 2; }
REPO=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
BEFORE=$(git -C "$REPO" rev-parse --verify "$1^{commit}")
AFTER=$(git -C "$REPO" rev-parse --verify "${2:-HEAD}^{commit}")
ROUNDS=${ROUNDS:-7}
DURATION=${DURATION:-1}
WARMUP=${WARMUP:-0.25}
JOBS=${JOBS:-2}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ezab.XXXXXX")
cleanup() { [ "${KEEP:-0}" = 1 ] || rm -rf "$TMP"; }
trap cleanup EXIT

# build NAME REV: the CLI of REV, built in $TMP/NAME (sources from git archive: no worktree).
build() {
  local name=$1 rev=$2
  mkdir -p "$TMP/$name/src"
  git -C "$REPO" archive "$rev" | tar -x -C "$TMP/$name/src"
  cmake -S "$TMP/$name/src" -B "$TMP/$name/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DEZ_TESTS=OFF -DEZ_BENCH=OFF >/dev/null
  cmake --build "$TMP/$name/build" -j"$JOBS" --target ezmsg_cli >/dev/null
}
echo "ab: building before=${BEFORE:0:12} after=${AFTER:0:12} in $TMP" >&2
build before "$BEFORE"
build after "$AFTER"
EZB=$TMP/before/build/ezmsg
EZA=$TMP/after/build/ezmsg

export EZMSG_LOG_LEVEL=${EZMSG_LOG_LEVEL:-error}
echo "ab: load average at the start: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) CPUs)"
python3 "$REPO/bench/ab.py" --a "before-${BEFORE:0:9}=$EZB" --b "after-${AFTER:0:9}=$EZA" \
  --pairs "$ROUNDS" --pin both --duration "$DURATION" --warmup "$WARMUP" ${ROWS:+--rows "$ROWS"}
echo "ab: load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
