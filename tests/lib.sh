# Shared helpers for the shell tests (sourced, not run; CTest skips this file).
#
#   source "$(dirname "$0")/lib.sh"
#
# Gives: $EZ_CLI (the ezmsg binary), $T (a private temp dir), a trap that stops every process
# registered with ez_track (by pid) and removes $T, free ports, server start/stop, and asserts.
# Every assert failure prints a message and exits 1 (the trap still cleans up).

set -u

EZ_CLI=${EZ_CLI:-ezmsg}
T=$(mktemp -d "${TMPDIR:-/tmp}/ezsh.XXXXXX")
EZ_PIDS=()

# ---- processes ---------------------------------------------------------------------------------

# True while PID exists and is not a zombie (a server from `ezmsg start` is not our child, so
# nobody here can reap it; a zombie counts as gone).
ez_alive() {
  local pid=$1 st
  [ -r "/proc/$pid/stat" ] || return 1
  st=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

# Waits up to SECS (default 5) for PID to be gone. Returns 1 if it is still there.
ez_wait_gone() {
  local pid=$1 secs=${2:-5} i
  for ((i = 0; i < secs * 50; i++)); do
    ez_alive "$pid" || return 0
    sleep 0.02
  done
  ! ez_alive "$pid"
}

# Registers PID to be stopped by the exit trap.
ez_track() { EZ_PIDS+=("$1"); }

# Sends SIG (default TERM) to PID and waits for it; SIGKILL after 5 s. For our own children the
# exit status is collected with `wait` and returned.
ez_stop() {
  local pid=$1 sig=${2:-TERM}
  kill -s "$sig" "$pid" 2>/dev/null || true
  if ! ez_wait_gone "$pid" 5; then
    kill -s KILL "$pid" 2>/dev/null || true
    ez_wait_gone "$pid" 5 || true
  fi
  wait "$pid" 2>/dev/null
}

# Waits for our child PID to exit, at most SECS (default 30), and returns its exit status. A child
# still running then is killed and 124 returned, so no test waits forever.
ez_join() {
  local pid=$1 secs=${2:-30}
  if ! ez_wait_gone "$pid" "$secs"; then
    echo "pid $pid still running after ${secs} s: killed" >&2
    kill -s KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null
    return 124
  fi
  wait "$pid"
}

ez_cleanup() {
  local pid
  for pid in "${EZ_PIDS[@]+"${EZ_PIDS[@]}"}"; do
    if ez_alive "$pid"; then ez_stop "$pid" TERM >/dev/null 2>&1 || true; fi
  done
  rm -rf "$T"
}
trap ez_cleanup EXIT
trap 'exit 130' INT TERM

# ---- ports and servers -------------------------------------------------------------------------

# Prints a TCP port free on 127.0.0.1 (never 25978).
ez_free_port() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
    return
  fi
  local p
  while :; do # nothing answers a connect there: good enough
    p=$((20000 + RANDOM % 30000))
    [ "$p" = 25978 ] && continue
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
}

ez_free_address() { echo "127.0.0.1:$(ez_free_port)"; }

# True once a graph server answers at ADDR (waits up to SECS, default 10).
ez_wait_server() {
  local addr=$1 secs=${2:-10} i
  for ((i = 0; i < secs * 20; i++)); do
    "$EZ_CLI" graphviz --address "$addr" --timeout 1 >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  return 1
}

# Starts `ezmsg serve --address ADDR` in the background (stderr to $T/serve.<port>.err), waits
# until it answers and sets EZ_SERVE_PID. SIGINT is not ignored by it (see ezmsg serve).
ez_start_serve() {
  local addr=$1
  "$EZ_CLI" serve --address "$addr" >"$T/serve.${addr##*:}.out" 2>"$T/serve.${addr##*:}.err" &
  EZ_SERVE_PID=$!
  ez_track "$EZ_SERVE_PID"
  ez_wait_server "$addr" || fail "ezmsg serve did not come up at $addr"
  local i # it announces itself on stderr right after it starts listening
  for ((i = 0; i < 200; i++)); do
    grep -q "listening on" "$T/serve.${addr##*:}.err" && return 0
    sleep 0.05
  done
}

# ---- running commands and asserting ------------------------------------------------------------

# Runs a command, capturing stdout in $T/out, stderr in $T/err and the exit status in $RC.
run() {
  RC=0
  "$@" >"$T/out" 2>"$T/err" || RC=$?
}

fail() {
  echo "FAIL: $*" >&2
  if [ -f "$T/out" ]; then
    echo "--- stdout of the last command:" >&2
    head -c 4000 "$T/out" >&2
  fi
  if [ -f "$T/err" ]; then
    echo "--- stderr of the last command:" >&2
    head -c 4000 "$T/err" >&2
  fi
  exit 1
}

pass() { echo "ok: $*"; }

# expect_rc N CMD...: runs CMD (see run) and checks its exit status.
expect_rc() {
  local want=$1
  shift
  run "$@"
  [ "$RC" = "$want" ] || fail "'$*' exited $RC, want $want"
}

assert_eq() { # EXPECTED ACTUAL WHAT
  [ "$1" = "$2" ] || fail "$3: got '$2', want '$1'"
}

assert_contains() { # FILE NEEDLE WHAT
  grep -qF -- "$2" "$1" || fail "$3: '$2' not in $(basename "$1")"
}

assert_not_contains() { # FILE NEEDLE WHAT
  ! grep -qF -- "$2" "$1" || fail "$3: '$2' unexpectedly in $(basename "$1")"
}

assert_empty() { # FILE WHAT
  [ ! -s "$1" ] || fail "$2: $(basename "$1") is not empty"
}

assert_lines() { # FILE N WHAT
  local n
  n=$(wc -l <"$1")
  [ "$n" = "$2" ] || fail "$3: $(basename "$1") has $n lines, want $2"
}

# ---- a live test graph (topics.sh, dashboard.sh, prometheus.sh) ------------------------------
# On the graph server at ADDR, paced publishers and subscribers in their own processes:
#   /cam    100 Hz, 1000-byte messages over shared memory -> subscriber "recorder"
#   /vision fed by /cam (ezmsg connect /cam /vision)     -> subscriber "detector" (100 Hz)
#   /imu    50 Hz, 64-byte messages over TCP              -> subscriber "filter"
#   /idle   no publisher                                  -> subscriber "idler" (idle)
# The publishers' nominal rates are what they aim at; on a loaded machine a paced publisher
# falls behind and never catches up in a burst (`pub --rate`), so the true rate is what really
# flowed: every message recorder, detector and filter receive is time-stamped
# (tests/arrivals.py into $T/arrivals.<topic>). Sets EZ_IDLER_PID and EZ_CAM_PID. Waits until
# every subscriber is connected.
ez_test_graph() {
  local addr=$1 h
  local src=${EZ_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
  "$EZ_CLI" connect --address "$addr" /cam /vision || fail "connect /cam /vision"
  for h in recorder:/cam detector:/vision filter:/imu; do
    python3 "$src/tests/arrivals.py" "$T/arrivals.${h#*:/}" "$EZ_CLI" sub --address "$addr" \
      "${h#*:}" --handle "${h%%:*}" --ready-file "$T/ready.${h%%:*}" 2>"$T/sub.${h%%:*}.err" &
    ez_track $!
  done
  "$EZ_CLI" sub --address "$addr" /idle --handle idler --ready-file "$T/ready.idler" \
    >/dev/null 2>"$T/sub.idler.err" &
  EZ_IDLER_PID=$!
  ez_track $!
  for h in recorder detector filter idler; do
    for ((i = 0; i < 500; i++)); do
      [ -e "$T/ready.$h" ] && break
      sleep 0.02
    done
    [ -e "$T/ready.$h" ] || fail "subscriber $h did not come up"
  done
  "$EZ_CLI" pub --address "$addr" /cam --size 1000 --count 0 --rate 100 >/dev/null 2>"$T/pub.cam.err" &
  EZ_CAM_PID=$!
  ez_track $!
  "$EZ_CLI" pub --address "$addr" /imu --size 64 --count 0 --rate 50 --force-tcp >/dev/null \
    2>"$T/pub.imu.err" &
  ez_track $!
}

# ON, or OFF when the build has telemetry compiled out (-DEZ_TELEMETRY=OFF): every rate, count and
# latency of a profile then reads 0, and the tests check for exactly that.
export EZ_TELEMETRY=${EZ_TELEMETRY:-ON}

# Waits (up to SECS, default 30) until `ezmsg hz` sees every published topic of the test graph
# at half its nominal rate or more, then for one more profile window, so that every figure is
# live. Without telemetry: until every subscriber but the idle one has its channel.
ez_wait_live() {
  local addr=$1 secs=${2:-30} i
  if [ "$EZ_TELEMETRY" = OFF ]; then
    for ((i = 0; i < secs * 2; i++)); do
      if "$EZ_CLI" list --address "$addr" --json 2>/dev/null | python3 -c 'import json,sys
d = {s["handle"]: s for s in json.load(sys.stdin)["subscribers"]}
sys.exit(0 if all(d.get(h, {}).get("num_channels") for h in ("recorder", "detector", "filter")) else 1)'; then
        sleep 1
        return 0
      fi
      sleep 0.5
    done
    fail "the test graph's subscribers did not get their channels within $secs s"
  fi
  for ((i = 0; i < secs * 2; i++)); do
    if "$EZ_CLI" hz --address "$addr" --json --count 1 /cam /vision /imu 2>/dev/null |
      python3 -c 'import json,sys; d=json.load(sys.stdin); w={"/cam":100,"/vision":100,"/imu":50}
sys.exit(0 if all(t["rate_hz"] >= 0.5*w[t["topic"]] for t in d["topics"]) else 1)'; then
      sleep 2.2
      return 0
    fi
    sleep 0.5
  done
  fail "the test graph did not come live within $secs s"
}

# Checks the rates a tool reported against what really flowed. Reads {"t": the time the figures
# are for (ISO-8601 or seconds since the epoch), "window": their averaging window in s, "rates":
# {topic: rate}} on stdin. Every topic of the test graph must be present, each within 20% of
# its true rate: the messages its subscriber received in (t - window, t], per second (0 for
# /idle). Prints each topic's figure, the true rate and the nominal one. Without telemetry
# (EZ_TELEMETRY=OFF), every rate must read 0.
ez_check_rates() { # WHAT [TOPICS]
  if [ "$EZ_TELEMETRY" = OFF ]; then
    python3 -c '
import json, sys
d = json.load(sys.stdin)
want = sys.argv[1].split()
assert sorted(t for t in d["rates"] if t in want) == sorted(want), d["rates"]
assert all(float(d["rates"][t]) == 0 for t in want), d["rates"]
print("  telemetry compiled out: every rate reads 0 (%s)" % ", ".join(want))' "${2:-/cam /vision /imu /idle}" ||
      fail "$1: rates are not all 0 without telemetry"
    return
  fi
  python3 -c '
import datetime, json, os, sys
d = json.load(sys.stdin)
t = d["t"]
if isinstance(t, str):
    t = datetime.datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()
w = float(d["window"])
nominal = {"/cam": 100, "/vision": 100, "/imu": 50, "/idle": 0}
nominal = {k: v for k, v in nominal.items() if k in sys.argv[2].split()}
bad = []
for topic, nom in nominal.items():
    if topic not in d["rates"]:
        bad.append("%s missing" % topic)
        continue
    r = float(d["rates"][topic])
    if nom:
        times = [float(x) for x in open(os.path.join(sys.argv[1], "arrivals" + topic.replace("/", ".")))]
        true = sum(1 for x in times if t - w < x <= t) / w
    else:
        true = 0.0
    print("  %-8s %7.1f msg/s  true %6.1f (%+5.1f%%)  nominal %g" %
          (topic, r, true, 100 * (r - true) / true if true else 0, nom))
    if (true == 0 and r != 0) or (true and abs(r - true) > 0.2 * true) or (nom and true < 0.2 * nom):
        bad.append("%s: %g, true %g" % (topic, r, true))
sys.exit("; ".join(bad) if bad else 0)' "$T" "${2:-/cam /vision /imu /idle}" || fail "$1: rates off"
}
