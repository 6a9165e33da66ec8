#!/usr/bin/env bash
# bench/soak.sh [MINUTES]: a long run of one graph server, long-lived publishers and subscribers at
# a high rate, and processes joining and leaving (some of them SIGKILLed or SIGSTOPped) every few
# seconds. Every SAMPLE_S seconds it prints a row: RSS (kB) and fd count of the server and of each
# long-lived process (from /proc), the psm_* entries in /dev/shm (all of them, and those mapped by
# this run's processes), and the publishers' totals from `ezmsg profile`.
#
# The first row ("base") is taken before any churn, the last ("end") after the churn has stopped
# and its processes are gone; they should match: the same fds everywhere, no segment of ours left,
# RSS about where it was. At the end everything is stopped by pid (SIGTERM, exit 0 expected) and
# every segment this run's processes mapped must be gone from /dev/shm.
#
# Exit status 0 if all long-lived processes lived to the end, exited 0, the fd counts of "base" and
# "end" are equal, the long-lived subscriber of /soak/a saw every message in order, no segment of
# ours is left and no RSS grew by more than RSS_LIMIT_KB; 1 otherwise.
#
# Environment: BUILD (build dir, default build; its ezmsg is used unless EZ_CLI is set), SAMPLE_S
# (60, or less for short runs), CHURN_S (3), RATE_A (2000), RSS_LIMIT_KB (16384; an ASan build's
# quarantine alone grows RSS by up to 256 MB: raise it there), SOAK_DIR (a temp dir, kept if set:
# the stderr of every process is in it).
#   bench/soak.sh 2      a smoke check: two minutes
#   bench/soak.sh        thirty minutes
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

MINUTES=${1:-30}
BUILD=${BUILD:-build}
EZ=${EZ_CLI:-$BUILD/ezmsg}
[ -x "$EZ" ] || {
  echo "bench/soak.sh: $EZ is missing (build first, or set BUILD / EZ_CLI)" >&2
  exit 1
}
EZ=$(cd "$(dirname "$EZ")" && pwd)/$(basename "$EZ")
TOTAL_S=$(awk -v m="$MINUTES" 'BEGIN { s = int(m * 60); print (s < 20 ? 20 : s) }')
SAMPLE_S=${SAMPLE_S:-$(awk -v t="$TOTAL_S" 'BEGIN { s = int(t / 4); print (s > 60 ? 60 : (s < 5 ? 5 : s)) }')}
CHURN_S=${CHURN_S:-3}
RATE_A=${RATE_A:-2000}
RSS_LIMIT_KB=${RSS_LIMIT_KB:-16384}
if [ -n "${SOAK_DIR:-}" ]; then
  D=$SOAK_DIR
  mkdir -p "$D"
else
  D=$(mktemp -d "${TMPDIR:-/tmp}/ezsoak.XXXXXX")
fi
unset EZMSG_GRAPHSERVER_ADDR
export EZMSG_LOG_LEVEL=${EZMSG_LOG_LEVEL:-error}

# ---- processes -----------------------------------------------------------------------------------
ALL_PIDS=()   # everything started, stopped by the trap if still there
CHURN=()      # "pid:deadline:action:expect" of churn processes not reaped yet
CHURN_BAD=0   # churn processes that exited otherwise than expected
CHURN_RUNS=0
PROBLEMS=()

alive() { # not gone, not a zombie
  local st
  [ -r "/proc/$1/stat" ] || return 1
  st=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

stop_pid() { # PID [SIG]: signal, wait up to 10 s (then SIGKILL), reap; returns the exit status
  local pid=$1 sig=${2:-TERM} i
  kill -s "$sig" "$pid" 2>/dev/null
  kill -s CONT "$pid" 2>/dev/null
  for ((i = 0; i < 500; i++)); do
    alive "$pid" || break
    sleep 0.02
  done
  alive "$pid" && kill -s KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}

cleanup() {
  local p
  for p in "${ALL_PIDS[@]+"${ALL_PIDS[@]}"}"; do
    alive "$p" && stop_pid "$p" KILL
  done
  [ -n "${SOAK_DIR:-}" ] || rm -rf "$D"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start() { # TAG CMD...: in the background, stdout to /dev/null, stderr to $D/TAG.err; sets PID
  local tag=$1
  shift
  "$@" >/dev/null 2>"$D/$tag.err" &
  PID=$!
  ALL_PIDS+=("$PID")
}

free_port() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
    return
  fi
  local p
  while :; do
    p=$((20000 + RANDOM % 30000))
    [ "$p" = 25978 ] && continue
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || {
      echo "$p"
      return
    }
  done
}

# ---- measurements --------------------------------------------------------------------------------
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo -; }
nfds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
shm_all() { find /dev/shm -maxdepth 1 -name 'psm_*' 2>/dev/null | wc -l; }
# Records the segments our live processes map (into $D/segs); a pid counts only while it is our
# child (pids of processes that ended get reused by others).
record_segs() {
  local p
  for p in "${ALL_PIDS[@]}"; do
    [ "$(awk '{ print $4 }' "/proc/$p/stat" 2>/dev/null)" = $$ ] || continue
    grep -o '/dev/shm/psm_[0-9a-z_]*' "/proc/$p/maps" 2>/dev/null
  done | sed 's|/dev/shm/||' >>"$D/segs"
  sort -u -o "$D/segs" "$D/segs"
}
# Records, then prints how many of the segments ever seen exist now.
note_segs() {
  record_segs
  local n=0 s
  while read -r s; do [ -e "/dev/shm/$s" ] && n=$((n + 1)); done <"$D/segs"
  echo "$n"
}

# ---- the graph ---------------------------------------------------------------------------------------
PORT=$(free_port)
ADDR=127.0.0.1:$PORT
SHM0=$(shm_all)
start serve "$EZ" serve --address "$ADDR"
SERVER=$PID
for ((i = 0; i < 200; i++)); do
  "$EZ" graphviz --address "$ADDR" --timeout 1 >/dev/null 2>&1 && break
  sleep 0.05
done
"$EZ" graphviz --address "$ADDR" --timeout 2 >/dev/null || {
  echo "soak: the server did not come up: $(cat "$D/serve.err")" >&2
  exit 1
}
"$EZ" connect /soak/a /soak/all --address "$ADDR" >/dev/null
"$EZ" connect /soak/b /soak/all --address "$ADDR" >/dev/null

# The long-lived subscriber of /soak/a checks order: --size payloads carry the message number in
# bytes 0..7, so the first hex byte of each line counts 0..255 round and round.
mkfifo "$D/a.fifo"
awk 'BEGIN { h = "0123456789abcdef"; prev = -1 }
     { n++
       if (length($0) != 128) bad++
       b = (index(h, substr($0, 1, 1)) - 1) * 16 + index(h, substr($0, 2, 1)) - 1
       if (prev >= 0 && b != (prev + 1) % 256) gaps++
       prev = b }
     END { printf "%d %d %d\n", n, gaps + 0, bad + 0 }' <"$D/a.fifo" >"$D/a.check" &
AWK=$!
ALL_PIDS+=("$AWK")

LONG_TAGS=(sub_a sub_a2 sub_b sub_c sub_all pub_a pub_b pub_c)
declare -A LONG
"$EZ" sub /soak/a --address "$ADDR" --ready-file "$D/sub_a.ready" >"$D/a.fifo" 2>"$D/sub_a.err" &
LONG[sub_a]=$!
ALL_PIDS+=("$!")
start sub_a2 "$EZ" sub /soak/a --address "$ADDR" --handle a2 --ready-file "$D/sub_a2.ready"
LONG[sub_a2]=$PID
start sub_b "$EZ" sub /soak/b --address "$ADDR" --ready-file "$D/sub_b.ready"
LONG[sub_b]=$PID
start sub_c "$EZ" sub /soak/c --address "$ADDR" --ready-file "$D/sub_c.ready"
LONG[sub_c]=$PID
start sub_all "$EZ" sub /soak/all --address "$ADDR" --ready-file "$D/sub_all.ready"
LONG[sub_all]=$PID
for t in sub_a sub_a2 sub_b sub_c sub_all; do
  for ((i = 0; i < 500; i++)); do
    [ -e "$D/$t.ready" ] && break
    sleep 0.02
  done
  [ -e "$D/$t.ready" ] || {
    echo "soak: $t did not subscribe" >&2
    exit 1
  }
done
start pub_a "$EZ" pub /soak/a --address "$ADDR" --size 64 --count 0 --rate "$RATE_A"
LONG[pub_a]=$PID
start pub_b "$EZ" pub /soak/b --address "$ADDR" --size 4096 --count 0 --rate 500 --force-tcp
LONG[pub_b]=$PID
start pub_c "$EZ" pub /soak/c --address "$ADDR" --size 65536 --count 0 --rate 100 --num-buffers 4
LONG[pub_c]=$PID

# ---- churn -------------------------------------------------------------------------------------------
churn_add() { CHURN+=("$1:$(($(date +%s) + $2)):$3:$4"); } # PID SECS ACTION(kill|term|stop) EXPECT(0|any)

NCH=0
churn_once() {
  local k=$((NCH % 7)) t=/soak/churn/$NCH
  NCH=$((NCH + 1))
  CHURN_RUNS=$((CHURN_RUNS + 1))
  case $k in
  0) # a short-lived subscriber of the fast stream
    start "ch$NCH" "$EZ" sub /soak/a --address "$ADDR" --count 500 --timeout 20
    churn_add "$PID" 30 kill 0 ;;
  1) # a publisher / subscriber pair on a fresh topic
    start "ch${NCH}s" "$EZ" sub "$t" --address "$ADDR" --count 200 --timeout 20 --ready-file "$D/ch$NCH.ready"
    churn_add "$PID" 30 kill 0
    for ((i = 0; i < 250; i++)); do [ -e "$D/ch$NCH.ready" ] && break; sleep 0.02; done
    start "ch${NCH}p" "$EZ" pub "$t" --address "$ADDR" --message "churn $NCH" --count 200 --timeout 20
    churn_add "$PID" 30 kill 0 ;;
  2) # a subscriber of the big messages, SIGKILLed while it holds some
    start "ch$NCH" "$EZ" sub /soak/c --address "$ADDR"
    churn_add "$PID" 2 kill any ;;
  3) # a publisher upstream of /soak/all, SIGKILLed mid-stream
    "$EZ" connect /soak/x /soak/all --address "$ADDR" >/dev/null 2>&1
    start "ch$NCH" "$EZ" pub /soak/x --address "$ADDR" --size 256 --count 0 --rate 1000
    churn_add "$PID" 2 kill any ;;
  4) # a subscriber of the TCP stream, SIGSTOPped (the publisher stalls), then SIGKILLed
    start "ch$NCH" "$EZ" sub /soak/b --address "$ADDR"
    churn_add "$PID" 2 stop any ;;
  5) # graph edits and a profile while all this runs
    "$EZ" disconnect /soak/x /soak/all --address "$ADDR" >/dev/null 2>&1
    "$EZ" profile --address "$ADDR" --window 1 >/dev/null 2>&1 || CHURN_BAD=$((CHURN_BAD + 1)) ;;
  6) # a subscriber that leaves with SIGTERM
    start "ch$NCH" "$EZ" sub /soak/all --address "$ADDR"
    churn_add "$PID" 2 term 0 ;;
  esac
}

# Reaps churn processes that ended and ends those whose time is up.
churn_reap() {
  local now keep=() e pid dl act exp rc
  now=$(date +%s)
  for e in "${CHURN[@]+"${CHURN[@]}"}"; do
    IFS=: read -r pid dl act exp <<<"$e"
    if alive "$pid"; then
      if [ "$now" -lt "$dl" ]; then
        keep+=("$e")
        continue
      fi
      case $act in
      kill) kill -KILL "$pid" 2>/dev/null ;;
      term) kill -TERM "$pid" 2>/dev/null ;;
      stop) # stopped now; killed on the next round
        kill -STOP "$pid" 2>/dev/null
        keep+=("$pid:$((now + 2)):kill:any")
        continue ;;
      esac
    fi
    rc=0
    wait "$pid" 2>/dev/null || rc=$?
    if [ "$exp" = 0 ] && [ "$rc" != 0 ]; then
      CHURN_BAD=$((CHURN_BAD + 1))
      echo "soak: churn process $pid exited $rc (want 0)" >>"$D/churn.log"
    fi
  done
  CHURN=("${keep[@]+"${keep[@]}"}")
  local live=() p
  for p in "${ALL_PIDS[@]}"; do alive "$p" && live+=("$p"); done
  ALL_PIDS=("${live[@]}")
}

# ---- sampling ----------------------------------------------------------------------------------------
T0=$(date +%s)
printf '%-5s %5s' "row" "t_s"
printf ' %15s' "server" "${LONG_TAGS[@]}"
printf ' %8s %8s %12s %12s %12s\n' "shm_all" "shm_ours" "msgs_a" "msgs_b" "msgs_c"
printf '%-5s %5s' "" ""
for _ in server "${LONG_TAGS[@]}"; do printf ' %15s' "rss_kB/fds"; done
printf '\n'

declare -A BASE_RSS BASE_FDS LAST_RSS LAST_FDS
sample() { # LABEL
  local label=$1 t p rss fds ours prof ma mb mc
  printf '%-5s %5d' "$label" $(($(date +%s) - T0))
  for t in server "${LONG_TAGS[@]}"; do
    if [ "$t" = server ]; then p=$SERVER; else p=${LONG[$t]}; fi
    if alive "$p"; then
      rss=$(rss_kb "$p")
      fds=$(nfds "$p")
    else
      rss=dead fds=dead
      PROBLEMS+=("$t (pid $p) died before $label")
    fi
    printf ' %15s' "$rss/$fds"
    LAST_RSS[$t]=$rss LAST_FDS[$t]=$fds
    if [ "$label" = base ]; then BASE_RSS[$t]=$rss BASE_FDS[$t]=$fds; fi
  done
  ours=$(note_segs)
  prof=$("$EZ" profile --address "$ADDR" --window 2 2>/dev/null)
  if command -v jq >/dev/null 2>&1 && [ -n "$prof" ]; then
    ma=$(jq -r '[.publishers[] | select(.topic == "/soak/a") | .messages.total] | max // "-"' <<<"$prof")
    mb=$(jq -r '[.publishers[] | select(.topic == "/soak/b") | .messages.total] | max // "-"' <<<"$prof")
    mc=$(jq -r '[.publishers[] | select(.topic == "/soak/c") | .messages.total] | max // "-"' <<<"$prof")
  else
    ma=- mb=- mc=-
  fi
  printf ' %8s %8s %12s %12s %12s\n' "$(shm_all)" "$ours" "$ma" "$mb" "$mc"
}

sleep 5 # warm up
sample base
END=$((T0 + TOTAL_S))
NEXT_SAMPLE=$(($(date +%s) + SAMPLE_S))
NEXT_CHURN=$(date +%s)
while [ "$(date +%s)" -lt "$END" ]; do
  now=$(date +%s)
  if [ "$now" -ge "$NEXT_CHURN" ]; then
    churn_once
    NEXT_CHURN=$((now + CHURN_S))
  fi
  churn_reap
  record_segs
  if [ "$now" -ge "$NEXT_SAMPLE" ]; then
    sample "$(((now - T0) / 60))m"
    NEXT_SAMPLE=$((now + SAMPLE_S))
  fi
  sleep 1
done

# ---- quiesce, last row, stop -----------------------------------------------------------------------------
for e in "${CHURN[@]+"${CHURN[@]}"}"; do
  IFS=: read -r pid _ _ _ <<<"$e"
  stop_pid "$pid" KILL
done
CHURN=()
"$EZ" disconnect /soak/x /soak/all --address "$ADDR" >/dev/null 2>&1
sleep 5
sample end

echo
echo "churn: $CHURN_RUNS operations, $CHURN_BAD unexpected exits"
[ "$CHURN_BAD" = 0 ] || { PROBLEMS+=("$CHURN_BAD churn processes failed"); cat "$D/churn.log" 2>/dev/null; }
for t in server "${LONG_TAGS[@]}"; do
  b=${BASE_RSS[$t]} l=${LAST_RSS[$t]}
  if [[ $b =~ ^[0-9]+$ && $l =~ ^[0-9]+$ ]]; then
    printf '%-8s rss %7d -> %7d kB (%+d kB)   fds %s -> %s\n' "$t" "$b" "$l" $((l - b)) "${BASE_FDS[$t]}" "${LAST_FDS[$t]}"
    [ $((l - b)) -le "$RSS_LIMIT_KB" ] || PROBLEMS+=("$t: RSS grew by $((l - b)) kB")
  fi
  [ "${BASE_FDS[$t]}" = "${LAST_FDS[$t]}" ] || PROBLEMS+=("$t: fds ${BASE_FDS[$t]} -> ${LAST_FDS[$t]}")
done

note_segs >/dev/null
for t in pub_a pub_b pub_c sub_a sub_a2 sub_b sub_c sub_all; do
  stop_pid "${LONG[$t]}" TERM
  rc=$?
  [ "$rc" = 0 ] || PROBLEMS+=("$t exited $rc on SIGTERM: $(head -c 300 "$D/$t.err")")
done
stop_pid "$SERVER" TERM
rc=$?
[ "$rc" = 0 ] || PROBLEMS+=("the server exited $rc on SIGTERM")
wait "$AWK" 2>/dev/null
read -r A_N A_GAPS A_BAD <"$D/a.check" || A_N=0
echo "long-lived subscriber of /soak/a: $A_N messages, $A_GAPS out of order, $A_BAD malformed"
[ "${A_N:-0}" -gt 0 ] && [ "$A_GAPS" = 0 ] && [ "$A_BAD" = 0 ] || PROBLEMS+=("/soak/a: $A_N messages, $A_GAPS gaps, $A_BAD malformed")

sleep 1
LEFT=()
while read -r s; do [ -e "/dev/shm/$s" ] && LEFT+=("$s"); done <"$D/segs"
echo "segments: $(wc -l <"$D/segs") used by this run, ${#LEFT[@]} left; psm_* in /dev/shm: $SHM0 before, $(shm_all) after (other programs may own some)"
[ ${#LEFT[@]} = 0 ] || PROBLEMS+=("segments left in /dev/shm: ${LEFT[*]}")

if [ ${#PROBLEMS[@]} = 0 ]; then
  echo "soak: OK ($MINUTES min)"
  exit 0
fi
printf 'soak: PROBLEM: %s\n' "${PROBLEMS[@]}"
exit 1
