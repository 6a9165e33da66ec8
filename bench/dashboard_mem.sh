#!/usr/bin/env bash
# The dashboard's memory with a large graph and a full history: `ezmsg dashboard` sampling a
# graph of 2 000 endpoints (1 000 publishers and 1 000 subscribers, bench/manyendpoints.c) for
# as many ticks as an hour of the default one-a-second sampling (3 600), sampled faster
# (--interval, default 0.1 s) so that it takes minutes; its resident memory (VmRSS, VmHWM)
# and the history's own count of its bytes are read along the way. docs/dashboard.md has the
# figures.
#
#   bash bench/dashboard_mem.sh BUILD_DIR [PAIRS] [TICKS] [INTERVAL_S]
set -u
BUILD=${1:?usage: dashboard_mem.sh BUILD_DIR [PAIRS] [TICKS] [INTERVAL_S]}
PAIRS=${2:-1000}
TICKS=${3:-3600}
INTERVAL=${4:-0.1}
CLI=$BUILD/ezmsg
MANY=$BUILD/bench/ez_bench_many
W=$(mktemp -d)
PIDS=()
cleanup() {
  local i
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
    kill -TERM "${PIDS[i]}" 2>/dev/null
    wait "${PIDS[i]}" 2>/dev/null
  done
  rm -rf "$W"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ADDR=127.0.0.1:$(port)
DASH=127.0.0.1:$(port)

"$CLI" serve --address "$ADDR" 2>"$W/serve.err" &
PIDS+=($!)
sleep 0.5
"$MANY" "$PAIRS" "$ADDR" 2>"$W/many.err" &
PIDS+=($!)
for ((i = 0; i < 1200; i++)); do grep -q ready "$W/many.err" && break; sleep 0.1; done
grep -q ready "$W/many.err" || { echo "the graph did not come up: $(cat "$W/many.err")" >&2; exit 1; }
"$CLI" dashboard --address "$ADDR" --listen "$DASH" --interval "$INTERVAL" 2>"$W/dash.err" &
DPID=$!
PIDS+=($DPID)
sleep 1
echo "dashboard pid $DPID, graph of $((2 * PAIRS)) endpoints, $TICKS ticks every $INTERVAL s"
printf "%8s %12s %12s %14s %10s %8s\n" tick VmRSS_kB VmHWM_kB history_bytes endpoints fetch_s
report() {
  python3 - "$DASH" "$DPID" <<'PY'
import json, sys, urllib.request
v = json.loads(urllib.request.urlopen("http://%s/api/view" % sys.argv[1], timeout=30).read())
st = dict(l.split(":", 1) for l in open("/proc/%s/status" % sys.argv[2]))
m = urllib.request.urlopen("http://%s/metrics" % sys.argv[1], timeout=30).read().decode()
took = [l.split()[1] for l in m.splitlines() if l.startswith("ezmsg_scrape_duration_seconds ")]
print("%12s %12s %14d %10d %8s" % (st["VmRSS"].split()[0], st["VmHWM"].split()[0],
      v.get("history_bytes", -1), v.get("history_endpoints", -1), took[0] if took else "?"))
PY
}
sample() { python3 -c 'import json,sys,urllib.request
print(json.loads(urllib.request.urlopen("http://%s/api/view" % sys.argv[1], timeout=30).read()).get("sample", 0))' "$DASH" 2>/dev/null || echo 0; }
for mark in 10 300 600 1200 2400 "$TICKS"; do
  [ "$mark" -gt "$TICKS" ] && continue
  while [ "$(sample)" -lt "$mark" ]; do sleep 1; done
  printf "%8s " "$(sample)"
  report
done
