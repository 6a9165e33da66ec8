#!/usr/bin/env bash
# A three-process pipeline on the default graph server (`make demo`):
#
#   source (ezmsg pub) --shm--> relay (example_relay) --tcp--> sink (ezmsg sub)
#     /demo/raw                   upper-cases, force_tcp           /demo/filtered
#
# The sink starts first: if no graph server answers at the default address (127.0.0.1:25978) it
# embeds one, so it is also the last to stop. With $EZMSG_GRAPHSERVER_ADDR set and no server
# there, the demo starts `ezmsg serve` at that address itself. The demo shows what
# flowed and the pipeline's profile, stops every process it started by pid, and checks that no
# shared-memory segment is left behind.
#
#   bash examples/demo.sh BUILD_DIR
set -u
BUILD=${1:?usage: demo.sh BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd)
CLI=$BUILD/ezmsg
RELAY_BIN=$BUILD/example_relay
for f in "$CLI" "$RELAY_BIN"; do
  [ -x "$f" ] || { echo "demo: $f is not built" >&2; exit 1; }
done

N=60      # messages the source sends
RATE=25   # per second: the stream lasts N / RATE s
W=$(mktemp -d "${TMPDIR:-/tmp}/ezdemo.XXXXXX")
PIDS=()

# The segments PIDs map (other programs may make segments meanwhile: only ours are checked).
mapped_shm() {
  local pid
  for pid in "$@"; do cat "/proc/$pid/maps" 2>/dev/null; done | grep -o '/dev/shm/psm_[0-9a-zA-Z]*' | sort -u
}
alive() { kill -0 "$1" 2>/dev/null; }
stop() { # PID: SIGTERM, then SIGKILL after 5 s; reaps it
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 250; i++)); do
    alive "$pid" || break
    sleep 0.02
  done
  alive "$pid" && kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}
cleanup() { # the last started first: the sink (and its embedded server) goes last
  local i
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do stop "${PIDS[i]}"; done
  PIDS=()
  rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
die() {
  echo "demo: $*" >&2
  for f in "$W"/*.err; do [ -s "$f" ] && { echo "--- $(basename "$f"):" >&2; tail -5 "$f" >&2; }; done
  exit 1
}
wait_for() { # FILE TEXT: up to 10 s
  local i
  for ((i = 0; i < 500; i++)); do
    grep -qF -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.02
  done
  return 1
}

echo "== ezmsg demo: source --shm--> relay --tcp--> sink"

# With $EZMSG_GRAPHSERVER_ADDR set, a process does not embed a graph server (that address is the
# user's choice): if nothing answers there, the demo runs one itself, first started, last stopped.
if [ -n "${EZMSG_GRAPHSERVER_ADDR:-}" ] && ! "$CLI" graphviz --timeout 1 >/dev/null 2>&1; then
  "$CLI" serve --address "$EZMSG_GRAPHSERVER_ADDR" 2>"$W/server.err" &
  SERVER=$!
  PIDS+=("$SERVER")
  for ((i = 0; i < 250; i++)); do
    "$CLI" graphviz --timeout 1 >/dev/null 2>&1 && break
    alive "$SERVER" || die "cannot run a graph server at \$EZMSG_GRAPHSERVER_ADDR=$EZMSG_GRAPHSERVER_ADDR"
    sleep 0.02
  done
  echo "server    pid $SERVER   ezmsg serve --address $EZMSG_GRAPHSERVER_ADDR"
fi

# 1. The sink: subscribes to /demo/filtered; embeds the graph server if none runs.
"$CLI" sub /demo/filtered --handle sink --ready-file "$W/sink.ready" >"$W/sink.out" 2>"$W/sink.err" &
SINK=$!
PIDS+=("$SINK")
for ((i = 0; i < 500; i++)); do
  [ -e "$W/sink.ready" ] && break
  alive "$SINK" || die "the sink exited"
  sleep 0.02
done
[ -e "$W/sink.ready" ] || die "the sink did not subscribe within 10 s"
ADDR=${EZMSG_GRAPHSERVER_ADDR:-127.0.0.1:25978}
echo "sink      pid $SINK   ezmsg sub /demo/filtered   (graph server at $ADDR)"

# 2. The relay: /demo/raw -> /demo/filtered, forced to TCP.
"$RELAY_BIN" /demo/raw /demo/filtered 2>"$W/relay.err" &
RELAY=$!
PIDS+=("$RELAY")
wait_for "$W/relay.err" "ready" || die "the relay did not come up"
echo "relay     pid $RELAY   example_relay /demo/raw -> /demo/filtered (force_tcp)"

# 3. The source: N lines at RATE Hz over shared memory, once the relay is connected.
for ((i = 1; i <= N; i++)); do echo "sample $i of $N: temperature $((200 + i % 7)).$((i % 10)) C"; done >"$W/source.in"
"$CLI" pub /demo/raw --rate "$RATE" --wait-subscribers 1 --timeout 10 <"$W/source.in" 2>"$W/source.err" &
SOURCE=$!
PIDS+=("$SOURCE")
echo "source    pid $SOURCE   ezmsg pub /demo/raw --rate $RATE   ($N messages)"
echo

# While it streams, take the profile (a 2 s window).
sleep 1.5
OURS=$(mapped_shm "$SINK" "$RELAY" "$SOURCE")
PROFILE_OK=0
if "$CLI" profile --help >/dev/null 2>&1; then
  if "$CLI" profile --help 2>/dev/null | grep -q -- '--format'; then
    "$CLI" profile --format table >"$W/profile" 2>"$W/profile.err" && PROFILE_OK=1
  else
    "$CLI" profile >"$W/profile" 2>"$W/profile.err" && PROFILE_OK=1
  fi
fi

for ((i = 0; i < 1000; i++)); do # the source ends once all it sent is acknowledged
  alive "$SOURCE" || break
  sleep 0.02
done
wait "$SOURCE" || die "the source failed"
for ((i = 0; i < 500; i++)); do
  [ "$(wc -l <"$W/sink.out")" -ge "$N" ] && break
  sleep 0.02
done

OURS=$( (echo "$OURS"; mapped_shm "$SINK" "$RELAY") | sort -u | grep .)
GOT=$(wc -l <"$W/sink.out")
echo "== what flowed"
echo "source sent      $N messages on /demo/raw"
stop "$RELAY"
echo "relay            $(grep -o 'forwarded [0-9]* messages' "$W/relay.err" || echo '?')"
echo "sink received    $GOT messages on /demo/filtered; the first and last three:"
head -3 "$W/sink.out" | sed 's/^/    /'
echo "    ..."
tail -3 "$W/sink.out" | sed 's/^/    /'
tr a-z A-Z <"$W/source.in" | cmp -s - "$W/sink.out" && echo "all $N arrived in order, upper-cased by the relay" ||
  { echo "demo: the sink did not receive exactly what was sent" >&2; FAILED=1; }

echo
echo "== profile (taken while streaming)"
if [ "$PROFILE_OK" = 1 ]; then
  cat "$W/profile"
else
  echo "(\`ezmsg profile\` is not available in this build)"
fi

cleanup
trap - EXIT
LEFT=""
for f in $OURS; do [ -e "$f" ] && LEFT="$LEFT $f"; done
if [ -n "$LEFT" ]; then
  echo "demo: shared-memory segments left behind:$LEFT" >&2
  exit 1
fi
echo
echo "== done: every process stopped; the $(echo $OURS | wc -w) segment(s) the pipeline used are gone from /dev/shm"
exit "${FAILED:-0}"
