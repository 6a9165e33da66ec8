#!/usr/bin/env bash
# /metrics scraped by a real Prometheus server (Debian's prometheus): `ezmsg serve --metrics`
# under lib.sh's test graph; Prometheus (its own config and storage in $T, on a free loopback
# port) scrapes it every second, and its query API's rate() of the publishers' message counters
# must be within 20% of the true rates (what the test graph's subscribers received, lib.sh). Also checks the exposition text itself (names, types,
# labels). Every process is stopped by pid.
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
unset EZMSG_GRAPHSERVER_ADDR

command -v prometheus >/dev/null || fail "prometheus is not installed: scripts/deps.sh installs it"

ADDR=$(ez_free_address)
MADDR=$(ez_free_address)
"$EZ_CLI" serve --address "$ADDR" --metrics "$MADDR" >"$T/serve.out" 2>"$T/serve.err" &
ez_track $!
ez_wait_server "$ADDR" || fail "ezmsg serve did not come up"
for ((i = 0; i < 250; i++)); do grep -q "^metrics on " "$T/serve.err" && break; sleep 0.02; done
assert_contains "$T/serve.err" "metrics on http://$MADDR/metrics" "serve announces its metrics"

expect_rc 2 "$EZ_CLI" serve --address "$(ez_free_address)" --metrics nonsense
assert_contains "$T/err" "bad --metrics 'nonsense'" "serve --metrics nonsense"
expect_rc 1 "$EZ_CLI" serve --address "$(ez_free_address)" --metrics "$MADDR"
assert_contains "$T/err" "address already in use" "serve --metrics on a taken address"
pass "ezmsg serve --metrics: announced; a bad or taken address refused"

ez_test_graph "$ADDR"
ez_wait_live "$ADDR"

# ---- the exposition text -------------------------------------------------------------------------
python3 - "$MADDR" <<'EOF' || fail "the /metrics text"
import re, sys, urllib.request
text = urllib.request.urlopen("http://%s/metrics" % sys.argv[1], timeout=10).read().decode()
types, samples = {}, []
for line in text.splitlines():
    if line.startswith("# TYPE "):
        _, _, name, typ = line.split()
        types[name] = typ
    elif line and not line.startswith("#"):
        m = re.fullmatch(r'([a-z_]+)(\{(.*)\})? (\S+)', line)
        assert m, line
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        samples.append((m.group(1), labels, float(m.group(4))))
        assert m.group(1) in types, m.group(1)  # every family declared
for name, typ in types.items():
    assert name.startswith("ezmsg_"), name
    assert (typ == "counter") == name.endswith("_total"), name
want = {"ezmsg_up": "gauge", "ezmsg_publisher_messages_total": "counter",
        "ezmsg_publisher_bytes_total": "counter", "ezmsg_publisher_backpressure_seconds": "gauge",
        "ezmsg_subscriber_processing_seconds": "gauge",
        "ezmsg_subscriber_messages_in_flight": "gauge"}
for n, t in want.items():
    assert types.get(n) == t, (n, types.get(n))
up = [v for n, l, v in samples if n == "ezmsg_up"]
assert up == [1.0], up
pubs = {l["topic"]: l for n, l, v in samples if n == "ezmsg_publisher_messages_total"}
assert set(pubs) == {"/cam", "/imu"} and all(l["pid"].isdigit() and l["endpoint"] for l in pubs.values())
subs = {l["handle"]: l for n, l, v in samples if n == "ezmsg_subscriber_channels"}
assert set(subs) == {"recorder", "detector", "filter", "idler"}, subs
assert subs["idler"]["transport"] == "idle" and subs["filter"]["transport"] == "tcp"
stats = {l["stat"] for n, l, v in samples if n == "ezmsg_publisher_backpressure_seconds"}
assert stats == {"avg", "p50", "p99", "max"}, stats
print("  %d families, %d samples; names, types and labels as Prometheus wants" % (len(types), len(samples)))
EOF
pass "/metrics: the exposition format, _total counters, _seconds, topic / handle / pid / endpoint labels"

# ---- a real Prometheus ---------------------------------------------------------------------------
PADDR=$(ez_free_address)
cat >"$T/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
scrape_configs:
  - job_name: ezmsg
    static_configs:
      - targets: ["$MADDR"]
EOF
prometheus --config.file="$T/prometheus.yml" --storage.tsdb.path="$T/tsdb" \
  --web.listen-address="$PADDR" --log.level=warn >"$T/prom.out" 2>"$T/prom.err" &
PPID_=$!
ez_track "$PPID_"

python3 - "$PADDR" "$T" <<'EOF' || { tail -20 "$T/prom.err" >&2; fail "Prometheus' rate() of the publishers"; }
import json, os, sys, time, urllib.parse, urllib.request
base, tdir = "http://%s" % sys.argv[1], sys.argv[2]
def get(path):
    return urllib.request.urlopen(base + path, timeout=5).read().decode()
def query(q, at=None):
    args = {"query": q}
    if at is not None:
        args["time"] = "%.3f" % at
    d = json.loads(get("/api/v1/query?" + urllib.parse.urlencode(args)))
    assert d["status"] == "success", d
    return {r["metric"].get("topic", ""): float(r["value"][1]) for r in d["data"]["result"]}
end = time.monotonic() + 60
while True:  # ready, and has scraped our target for long enough to give a 10 s rate
    try:
        got = query('rate(ezmsg_publisher_messages_total[10s])')
        n = query('count_over_time(ezmsg_up[20s])')
        if len(got) == 2 and n and min(n.values()) >= 12:
            break
    except Exception:
        pass
    assert time.monotonic() < end, "Prometheus did not collect 12 scrapes in 60 s"
    time.sleep(0.5)
targets = json.loads(get("/api/v1/targets"))["data"]["activeTargets"]
assert [t["health"] for t in targets] == ["up"], targets
at = time.time() - 2  # a moment Prometheus has surely scraped past
got = query('rate(ezmsg_publisher_messages_total[10s])', at)
idle = query('ezmsg_subscriber_channels{handle="idler"}', at)
assert idle == {"/idle": 0.0}, idle
json.dump({"t": at, "window": 10, "rates": got}, open(os.path.join(tdir, "prom.rates"), "w"))
EOF
echo "Prometheus rate(ezmsg_publisher_messages_total[10s]) against what really flowed:"
# The message counters count with telemetry compiled out too (only the windowed figures read 0).
EZ_TELEMETRY=ON ez_check_rates "Prometheus" "/cam /imu" <"$T/prom.rates"
pass "Prometheus scrapes ezmsg serve --metrics: rate() within 20% of the publishers' true rates"

ez_stop "$PPID_" TERM || true
echo "all prometheus tests passed"
