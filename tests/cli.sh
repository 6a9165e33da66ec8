#!/usr/bin/env bash
# The ezmsg command-line tool: usage and exit codes, error messages, and a background server
# driven through start / connect / graphviz / mermaid / disconnect / shutdown, plus `serve`
# stopping on SIGTERM and SIGINT. Servers run on free 127.0.0.1 ports and are stopped by pid.
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
unset EZMSG_GRAPHSERVER_ADDR

# ---- usage -------------------------------------------------------------------------------------
COMMANDS="serve start shutdown connect disconnect graphviz mermaid sync pause resume"

for h in --help -h; do
  expect_rc 0 "$EZ_CLI" $h
  for c in $COMMANDS; do assert_contains "$T/out" "  $c " "ezmsg $h lists $c"; done
  assert_empty "$T/err" "ezmsg $h"
done
pass "ezmsg --help lists the commands"

for c in $COMMANDS; do
  expect_rc 0 "$EZ_CLI" "$c" --help
  assert_contains "$T/out" "usage: ezmsg $c" "ezmsg $c --help"
  assert_contains "$T/out" "--address" "ezmsg $c --help"
  assert_empty "$T/err" "ezmsg $c --help"
  expect_rc 0 "$EZ_CLI" "$c" -h
  assert_contains "$T/out" "usage: ezmsg $c" "ezmsg $c -h"
done
pass "every command has --help"

expect_rc 2 "$EZ_CLI"
assert_contains "$T/err" "usage: ezmsg" "ezmsg alone"
assert_empty "$T/out" "ezmsg alone"
expect_rc 2 "$EZ_CLI" bogus
assert_contains "$T/err" "bogus" "ezmsg bogus"
assert_contains "$T/err" "usage: ezmsg" "ezmsg bogus"
assert_empty "$T/out" "ezmsg bogus"
pass "no command / unknown command: exit 2"

expect_rc 2 "$EZ_CLI" connect onlyone
assert_contains "$T/err" "usage: ezmsg connect" "connect with one argument"
assert_empty "$T/out" "connect with one argument"
expect_rc 2 "$EZ_CLI" connect
expect_rc 2 "$EZ_CLI" disconnect /a
expect_rc 2 "$EZ_CLI" connect /a /b /c
assert_contains "$T/err" "usage: ezmsg connect" "connect with three arguments"
expect_rc 2 "$EZ_CLI" graphviz extra
expect_rc 2 "$EZ_CLI" shutdown extra
expect_rc 2 "$EZ_CLI" connect --frobnicate /a /b
assert_contains "$T/err" "frobnicate" "unknown option"
expect_rc 2 "$EZ_CLI" graphviz --address
expect_rc 2 "$EZ_CLI" graphviz --timeout soon
for bad in -2 -0.5 1e9 nan inf 5ms ""; do
  expect_rc 2 "$EZ_CLI" graphviz --timeout "$bad"
  assert_contains "$T/err" "bad --timeout" "graphviz --timeout '$bad'"
done
expect_rc 2 "$EZ_CLI" serve --timeout 5
pass "bad arguments: exit 2 with usage on stderr"

for bad in nonsense 127.0.0.1 127.0.0.1: :8080 127.0.0.1:99999 127.0.0.1:-1 127.0.0.1:80x \
  "127.0.0.1: 80" 127.0.0.1:0 "bad host:80" ""; do
  expect_rc 2 "$EZ_CLI" connect --address "$bad" /a /b
  assert_contains "$T/err" "usage: ezmsg connect" "connect --address '$bad'"
  expect_rc 2 "$EZ_CLI" graphviz --address="$bad"
done
EZMSG_GRAPHSERVER_ADDR=nonsense expect_rc 2 "$EZ_CLI" graphviz
assert_contains "$T/err" "EZMSG_GRAPHSERVER_ADDR" "bad address in the environment"
expect_rc 2 "$EZ_CLI" serve --address nonsense
expect_rc 2 "$EZ_CLI" start --address 127.0.0.1:0
pass "bad addresses: exit 2"

# ---- no server ---------------------------------------------------------------------------------
NOADDR=$(ez_free_address)
for cmd in "connect /a /b" "disconnect /a /b" graphviz mermaid shutdown sync pause resume; do
  # shellcheck disable=SC2086
  expect_rc 1 "$EZ_CLI" $cmd --address "$NOADDR"
  assert_lines "$T/err" 1 "ezmsg $cmd without a server"
  assert_contains "$T/err" "no graph server at $NOADDR" "ezmsg $cmd without a server"
  assert_empty "$T/out" "ezmsg $cmd without a server"
done
EZMSG_GRAPHSERVER_ADDR=$NOADDR expect_rc 1 "$EZ_CLI" graphviz
assert_contains "$T/err" "no graph server at $NOADDR" "address from the environment"
pass "no server: exit 1, one line naming the address"

# ---- a background server: start ... shutdown ---------------------------------------------------
ADDR=$(ez_free_address)
expect_rc 0 "$EZ_CLI" start --address "$ADDR"
SPID=$(cat "$T/out")
[[ "$SPID" =~ ^[0-9]+$ ]] || fail "ezmsg start printed '$SPID', want a pid"
ez_track "$SPID"
assert_lines "$T/out" 1 "ezmsg start output"
ez_alive "$SPID" || fail "server pid $SPID is not running"
pass "ezmsg start: pid $SPID"

expect_rc 1 "$EZ_CLI" start --address "$ADDR"
assert_contains "$T/err" "$ADDR" "second ezmsg start"
assert_empty "$T/out" "second ezmsg start"
pass "ezmsg start refuses a second server at the address"

expect_rc 0 "$EZ_CLI" connect /a /b --address "$ADDR"
assert_empty "$T/out" "connect"
assert_empty "$T/err" "connect"
expect_rc 0 "$EZ_CLI" connect --address "$ADDR" /b /c/d
expect_rc 0 "$EZ_CLI" graphviz --address "$ADDR"
cp "$T/out" "$T/dot"
assert_contains "$T/dot" "digraph" "graphviz"
assert_contains "$T/dot" '"/a" -> "/b"' "graphviz edge"
assert_contains "$T/dot" '"/b" -> "/c/d"' "graphviz edge"
if command -v dot >/dev/null 2>&1; then
  dot -Tsvg "$T/dot" >/dev/null || fail "graphviz output is not valid dot"
fi
expect_rc 0 "$EZ_CLI" mermaid --address "$ADDR"
assert_contains "$T/out" "flowchart" "mermaid"
assert_contains "$T/out" '"/a"' "mermaid shows /a"
assert_contains "$T/out" '"/b"' "mermaid shows /b"
assert_contains "$T/out" "-->" "mermaid edge"
EZMSG_GRAPHSERVER_ADDR=$ADDR expect_rc 0 "$EZ_CLI" graphviz
assert_contains "$T/out" '"/a" -> "/b"' "graphviz through EZMSG_GRAPHSERVER_ADDR"
pass "connect, graphviz, mermaid"

expect_rc 1 "$EZ_CLI" connect /b /a --address "$ADDR"
assert_contains "$T/err" "connecting /b -> /a would create a cycle" "cyclic connect"
assert_lines "$T/err" 1 "cyclic connect"
expect_rc 1 "$EZ_CLI" connect /c/d /c/d --address "$ADDR"
assert_contains "$T/err" "would create a cycle" "self edge"
# Topics that look like options, after "--".
expect_rc 0 "$EZ_CLI" connect --address "$ADDR" -- -dash /b
expect_rc 0 "$EZ_CLI" disconnect --address "$ADDR" -- -dash /b
pass "cycles refused with exit 1"

expect_rc 0 "$EZ_CLI" disconnect /a /b --address "$ADDR"
expect_rc 0 "$EZ_CLI" disconnect /a /b --address "$ADDR" # absent: fine
expect_rc 0 "$EZ_CLI" graphviz --address "$ADDR"
assert_not_contains "$T/out" '"/a"' "graphviz after disconnect"
assert_contains "$T/out" '"/b" -> "/c/d"' "graphviz after disconnect"
expect_rc 0 "$EZ_CLI" pause --address "$ADDR"
expect_rc 0 "$EZ_CLI" resume --address "$ADDR"
expect_rc 0 "$EZ_CLI" sync --address "$ADDR"
pass "disconnect, pause, resume, sync"

expect_rc 0 "$EZ_CLI" shutdown --address "$ADDR"
ez_wait_gone "$SPID" 10 || fail "server $SPID still running after shutdown"
expect_rc 1 "$EZ_CLI" graphviz --address "$ADDR"
pass "shutdown stops the server"

# ---- ezmsg serve -------------------------------------------------------------------------------
for sig in TERM INT; do
  ADDR=$(ez_free_address)
  ez_start_serve "$ADDR"
  assert_contains "$T/serve.${ADDR##*:}.err" "graph server listening on $ADDR" "serve announces"
  assert_empty "$T/serve.${ADDR##*:}.out" "serve's stdout"
  expect_rc 0 "$EZ_CLI" connect /x /y --address "$ADDR"
  rc=0
  ez_stop "$EZ_SERVE_PID" "$sig" || rc=$?
  assert_eq 0 "$rc" "ezmsg serve exit status after SIG$sig"
  expect_rc 1 "$EZ_CLI" graphviz --address "$ADDR"
  pass "ezmsg serve exits 0 on SIG$sig"
done

# A SHUTDOWN request also ends `serve` with 0.
ADDR=$(ez_free_address)
ez_start_serve "$ADDR"
expect_rc 0 "$EZ_CLI" shutdown --address "$ADDR"
rc=0
ez_wait_gone "$EZ_SERVE_PID" 10 || fail "serve still running after shutdown"
wait "$EZ_SERVE_PID" || rc=$?
assert_eq 0 "$rc" "ezmsg serve exit status after shutdown"
pass "ezmsg serve exits 0 after a shutdown request"

# Port 0: a free port is picked and announced.
"$EZ_CLI" serve --address 127.0.0.1:0 >"$T/serve0.out" 2>"$T/serve0.err" &
P0=$!
ez_track "$P0"
for ((i = 0; i < 200; i++)); do
  grep -q "listening on" "$T/serve0.err" && break
  sleep 0.05
done
A0=$(sed -n 's/^graph server listening on //p' "$T/serve0.err")
[[ "$A0" =~ ^127\.0\.0\.1:[1-9][0-9]*$ ]] || fail "serve on port 0 announced '$A0'"
expect_rc 0 "$EZ_CLI" graphviz --address "$A0"
rc=0
ez_stop "$P0" TERM || rc=$?
assert_eq 0 "$rc" "ezmsg serve (port 0) exit status"
pass "ezmsg serve --address 127.0.0.1:0 announces its port"

# serve raises its soft open-files limit to the hard one: started with a soft limit of 256, it
# runs with the hard limit (as far as 1 Mi).
HARD=$(ulimit -Hn)
if [ "$HARD" != unlimited ] && [ "$HARD" -gt 256 ]; then
  ADDR=$(ez_free_address)
  (ulimit -Sn 256 && exec "$EZ_CLI" serve --address "$ADDR") >"$T/fdl.out" 2>"$T/fdl.err" &
  FDL=$!
  ez_track "$FDL"
  ez_wait_server "$ADDR" || fail "ezmsg serve with a soft limit of 256 did not come up"
  want=$((HARD > 1048576 ? 1048576 : HARD))
  soft=$(awk '/^Max open files/ {print $4}' "/proc/$FDL/limits")
  assert_eq "$want" "$soft" "ezmsg serve's soft open-files limit"
  ez_stop "$FDL" TERM || fail "serve (soft limit 256) exit status"
  pass "ezmsg serve raises its open-files limit to the hard limit"
fi

# A port taken by something else: serve and start fail with exit 1.
ADDR=$(ez_free_address)
ez_start_serve "$ADDR"
expect_rc 1 "$EZ_CLI" serve --address "$ADDR"
assert_contains "$T/err" "$ADDR" "serve on a taken port"
ez_stop "$EZ_SERVE_PID" TERM || fail "serve exit status"
pass "serve on a taken port: exit 1"

# --max-clients: bad values are usage errors; a client past the limit is told so (exit 1).
for bad in 0 -1 x 1.5 ""; do
  expect_rc 2 "$EZ_CLI" serve --address 127.0.0.1:0 --max-clients "$bad"
  expect_rc 2 "$EZ_CLI" start --address 127.0.0.1:0 --max-clients "$bad"
done
ADDR=$(ez_free_address)
"$EZ_CLI" serve --address "$ADDR" --max-clients 1 >"$T/lim.out" 2>"$T/lim.err" &
LIM=$!
ez_track "$LIM"
ez_wait_server "$ADDR" || fail "ezmsg serve --max-clients 1 did not come up"
exec 7<>"/dev/tcp/${ADDR%:*}/${ADDR##*:}" # the one client it serves
for ((i = 0; i < 100; i++)); do # until the server has counted it (pings in between are refused)
  run "$EZ_CLI" graphviz --address "$ADDR"
  [ "$RC" = 1 ] && grep -q "client limit" "$T/err" && break
  sleep 0.05
done
expect_rc 1 "$EZ_CLI" graphviz --address "$ADDR"
assert_lines "$T/err" 1 "graphviz past the client limit"
assert_contains "$T/err" "client limit" "graphviz past the client limit"
exec 7<&-
for ((i = 0; i < 100; i++)); do
  run "$EZ_CLI" graphviz --address "$ADDR"
  [ "$RC" = 0 ] && break
  sleep 0.05
done
expect_rc 0 "$EZ_CLI" graphviz --address "$ADDR"
ez_stop "$LIM" TERM || fail "serve --max-clients exit status"
pass "serve --max-clients: bad values exit 2; past the limit: exit 1 naming the limit"

echo "all CLI tests passed"
