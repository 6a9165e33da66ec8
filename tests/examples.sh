#!/usr/bin/env bash
# The C examples (examples/*.c, built as $EZ_BUILD/example_<name>) against an `ezmsg serve` on a
# free port: example_sub prints what example_pub sent, in order; example_relay forwards it.
source "$(dirname "$0")/lib.sh"
unset EZMSG_GRAPHSERVER_ADDR

EZ_BUILD=${EZ_BUILD:?EZ_BUILD must name the build directory}
for e in pub sub relay; do
  [ -x "$EZ_BUILD/example_$e" ] || fail "$EZ_BUILD/example_$e is not built"
done

ADDR=$(ez_free_address)
ez_start_serve "$ADDR"

# Waits up to 10 s for FILE to contain TEXT.
wait_for() {
  local i
  for ((i = 0; i < 500; i++)); do
    grep -qF -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.02
  done
  fail "waited in vain for '$2' in $(basename "$1")"
}

expected() { # N: the lines example_pub sends
  local i
  for ((i = 0; i < $1; i++)); do echo "hello $i"; done
}

# ---- usage ---------------------------------------------------------------------------------------
for e in pub sub relay; do
  expect_rc 2 "$EZ_BUILD/example_$e"
  assert_contains "$T/err" "usage:" "example_$e without arguments"
done
expect_rc 1 "$EZ_BUILD/example_pub" /x 1 "127.0.0.1:$(ez_free_port)"
pass "examples: usage and no server"

# ---- pub -> sub ----------------------------------------------------------------------------------
"$EZ_BUILD/example_sub" /ex/topic 50 "$ADDR" >"$T/sub.out" 2>"$T/sub.err" &
SUB=$!
ez_track "$SUB"
wait_for "$T/sub.err" "subscribed to /ex/topic"
expect_rc 0 "$EZ_BUILD/example_pub" /ex/topic 50 "$ADDR"
ez_wait_gone "$SUB" 20 || fail "example_sub did not finish"
ez_join "$SUB" || fail "example_sub exited $?: $(cat "$T/sub.err")"
expected 50 >"$T/want"
cmp -s "$T/want" "$T/sub.out" || fail "example_sub printed $(wc -l <"$T/sub.out") lines, not the 50 sent"
pass "example_pub -> example_sub: 50 messages in order"

# ---- pub -> relay -> sub (the relay upper-cases, over TCP) ---------------------------------------
"$EZ_BUILD/example_sub" /ex/out 20 "$ADDR" >"$T/sub2.out" 2>"$T/sub2.err" &
SUB=$!
ez_track "$SUB"
wait_for "$T/sub2.err" "subscribed to /ex/out"
"$EZ_BUILD/example_relay" /ex/in /ex/out "$ADDR" 2>"$T/relay.err" &
RELAY=$!
ez_track "$RELAY"
wait_for "$T/relay.err" "ready"
expect_rc 0 "$EZ_BUILD/example_pub" /ex/in 20 "$ADDR"
ez_wait_gone "$SUB" 20 || fail "example_sub after the relay did not finish"
ez_join "$SUB" || fail "example_sub exited $?: $(cat "$T/sub2.err")"
expected 20 | tr a-z A-Z >"$T/want2"
cmp -s "$T/want2" "$T/sub2.out" || fail "relayed: got $(head -3 "$T/sub2.out")..."
ez_stop "$RELAY" TERM || fail "example_relay exited $? on SIGTERM: $(cat "$T/relay.err")"
assert_contains "$T/relay.err" "forwarded 20 messages" "example_relay"
pass "example_pub -> example_relay -> example_sub: 20 messages, upper-cased"

ez_stop "$EZ_SERVE_PID" TERM || true
echo "all example tests passed"
