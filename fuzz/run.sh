#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) and runs each for a while on a scratch copy of
# its seed corpus, then prints a summary. Nothing is written back into fuzz/corpus/: inputs the
# fuzzer found stay in the scratch directory (printed at the end); merge the interesting ones by
# hand (`fuzz_<t> -merge=1 fuzz/corpus/<t> <scratch>/<t>/corpus`), and save crash reproducers as
# fuzz/corpus/<t>/regress-<name> so the CTest replay keeps covering them.
#
# Usage: fuzz/run.sh [target...]           (default: every fuzz/fuzz_*.c)
# Environment: FUZZ_SECONDS (default 60) per target, FUZZ_BUILD (default <repo>/build-fuzz),
#   FUZZ_JOBS (build parallelism, default 2), FUZZ_SCRATCH (default: a new mktemp directory),
#   FUZZ_ARGS (extra libFuzzer arguments).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${FUZZ_BUILD:-$ROOT/build-fuzz}
SECS=${FUZZ_SECONDS:-60}
JOBS=${FUZZ_JOBS:-2}
EXTRA=${FUZZ_ARGS:-}

if ! command -v clang >/dev/null; then
  echo "fuzz: clang is needed (libFuzzer)" >&2
  exit 1
fi
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DEZ_FUZZ=ON -DEZ_SANITIZE=address,undefined -DEZ_BENCH=OFF >/dev/null || exit 1
cmake --build "$BUILD" -j"$JOBS" || exit 1

if [ $# -gt 0 ]; then
  TARGETS="$*"
else
  TARGETS=$(cd "$ROOT/fuzz" && ls fuzz_*.c | sed 's/^fuzz_//; s/\.c$//')
fi
SCRATCH=${FUZZ_SCRATCH:-$(mktemp -d "${TMPDIR:-/tmp}/ezfuzz.XXXXXX")}
mkdir -p "$SCRATCH"

# Per target: -max_len and the per-input -timeout (seconds).
max_len() {
  case $1 in
  dagpickle) echo 8192 ;;
  pickle | meta39) echo 16384 ;;
  wire | pubacks) echo 1024 ;;
  client | server) echo 2048 ;;
  *) echo 4096 ;;
  esac
}
timeout_s() {
  case $1 in
  server | channel | pubacks | client) echo 60 ;;
  *) echo 10 ;;
  esac
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1:suppressions=$ROOT/fuzz/ubsan.supp}
export EZMSG_LOG_LEVEL=off

status=0
SUMMARY="$SCRATCH/summary.txt"
printf '%-13s %10s %8s %7s %7s %11s %6s  %s\n' target execs exec/s cov ft corpus new crashes >"$SUMMARY"
for t in $TARGETS; do
  bin="$BUILD/fuzz/fuzz_$t"
  if [ ! -x "$bin" ]; then
    echo "fuzz: no binary $bin" >&2
    status=1
    continue
  fi
  dir="$SCRATCH/$t"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  [ -d "$ROOT/fuzz/corpus/$t" ] && cp -r "$ROOT/fuzz/corpus/$t/." "$dir/corpus/"
  n0=$(ls "$dir/corpus" | wc -l)
  echo "fuzz: $t for ${SECS}s (log: $dir/log)"
  # shellcheck disable=SC2086
  "$bin" -max_total_time="$SECS" -max_len="$(max_len "$t")" -timeout="$(timeout_s "$t")" \
    -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$dir/artifacts/" $EXTRA \
    "$dir/corpus" >"$dir/log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log" | tail -1)
  newu=$(sed -n 's/^stat::new_units_added: *//p' "$dir/log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$dir/log" | tail -1)
  cov=$(echo "$last" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
  ft=$(echo "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
  n1=$(ls "$dir/corpus" | wc -l)
  crashes=$(ls "$dir/artifacts" | tr '\n' ' ')
  if [ $rc -ne 0 ] || [ -n "$crashes" ]; then
    status=1
    [ -n "$crashes" ] || crashes="exit $rc (see log)"
  fi
  printf '%-13s %10s %8s %7s %7s %11s %6s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" \
    "${ft:-?}" "$n0->$n1" "${newu:-?}" "${crashes:-none}" >>"$SUMMARY"
done
echo
cat "$SUMMARY"
echo
echo "fuzz: scratch corpora, logs and crash inputs are in $SCRATCH"
exit $status
