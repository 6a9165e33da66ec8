#!/usr/bin/env bash
# `ezmsg pub` and `ezmsg sub` against an `ezmsg serve` on a free port: stdin lines in order, 4 MiB
# messages over shared memory and over TCP, text vs hex printing, --count / --timeout / exit codes,
# usage errors, a server that goes away. Every process is stopped by pid (lib.sh's trap).
source "$(dirname "$0")/lib.sh"
unset EZMSG_GRAPHSERVER_ADDR

ADDR=$(ez_free_address)
ez_start_serve "$ADDR"
N_SUB=0

# Starts `ezmsg sub TOPIC ARGS...` in the background (stdout $T/subN.out, stderr $T/subN.err),
# waits until it is subscribed and sets SUB (its pid) and SUB_OUT / SUB_ERR.
start_sub() {
  local topic=$1 i
  shift
  N_SUB=$((N_SUB + 1))
  SUB_OUT=$T/sub$N_SUB.out SUB_ERR=$T/sub$N_SUB.err
  "$EZ_CLI" sub "$topic" --address "$ADDR" --ready-file "$T/sub$N_SUB.ready" "$@" >"$SUB_OUT" 2>"$SUB_ERR" &
  SUB=$!
  ez_track "$SUB"
  for ((i = 0; i < 500; i++)); do
    [ -e "$T/sub$N_SUB.ready" ] && return 0
    # (it may have subscribed, received everything and exited between the two checks)
    ez_alive "$SUB" || [ -e "$T/sub$N_SUB.ready" ] || fail "ezmsg sub $topic exited early: $(cat "$SUB_ERR")"
    sleep 0.02
  done
  fail "ezmsg sub $topic did not subscribe within 10 s"
}

# Waits (up to 30 s) for the last started sub to exit; sets SUB_RC.
wait_sub() {
  ez_wait_gone "$SUB" 30 || fail "ezmsg sub did not exit: $(cat "$SUB_ERR")"
  SUB_RC=0
  ez_join "$SUB" || SUB_RC=$?
}

# ---- usage errors: exit 2, usage on stderr, nothing on stdout -----------------------------------
for args in "pub" "sub" "pub /a /b" "sub /a /b" "pub /a --message x --size 3" "pub /a --count x" \
  "pub /a --count -1" "pub /a --rate 0" "pub /a --rate fast" "pub /a --num-buffers 0" \
  "pub /a --size -5" "pub /a --wait-subscribers" "sub /a --count -2" "sub /a --count" \
  "sub /a --timeout soon" "sub /a --ready-file" "pub /a --bogus" "sub /a --bogus"; do
  # shellcheck disable=SC2086
  expect_rc 2 "$EZ_CLI" $args --address "$ADDR"
  assert_contains "$T/err" "usage: ezmsg ${args%% *}" "ezmsg $args"
  assert_empty "$T/out" "ezmsg $args"
done
for c in pub sub; do
  expect_rc 0 "$EZ_CLI" "$c" --help
  assert_contains "$T/out" "usage: ezmsg $c" "ezmsg $c --help"
done
pass "pub / sub: bad arguments exit 2, --help exits 0"

# ---- no server at an explicit address: one line, exit 1 -----------------------------------------
NOWHERE=$(ez_free_address)
expect_rc 1 "$EZ_CLI" pub /a --message x --address "$NOWHERE"
assert_eq "ezmsg: no graph server at $NOWHERE" "$(cat "$T/err")" "pub without a server"
expect_rc 1 "$EZ_CLI" sub /a --address "$NOWHERE"
assert_eq "ezmsg: no graph server at $NOWHERE" "$(cat "$T/err")" "sub without a server"
assert_empty "$T/out" "sub without a server"
pass "pub / sub: no graph server at an explicit address: exit 1"

# ---- stdin lines in order -------------------------------------------------------------------------
for ((i = 0; i < 300; i++)); do echo "line $i: the quick brown fox"; done >"$T/lines"
start_sub /dp/lines --count 300
expect_rc 0 "$EZ_CLI" pub /dp/lines --address "$ADDR" <"$T/lines"
assert_empty "$T/out" "ezmsg pub prints nothing"
wait_sub
assert_eq 0 "$SUB_RC" "sub --count 300 exit status"
cmp -s "$T/lines" "$SUB_OUT" || fail "sub printed $(wc -l <"$SUB_OUT") lines, not the 300 sent in order"
pass "pub of 300 stdin lines -> sub --count 300: all, in order"

# The same with a tiny ring (backpressure on every message) and over TCP.
start_sub /dp/lines2 --count 300
expect_rc 0 "$EZ_CLI" pub /dp/lines2 --address "$ADDR" --num-buffers 1 --force-tcp <"$T/lines"
wait_sub
assert_eq 0 "$SUB_RC" "sub exit status"
cmp -s "$T/lines" "$SUB_OUT" || fail "num-buffers 1 over TCP: the lines differ"
pass "pub --num-buffers 1 --force-tcp: all lines, in order"

# Without polling in the I/O threads (EZMSG_SPIN_US=0), and with a bad value (logged, default).
start_sub /dp/lines3 --count 300
EZMSG_SPIN_US=0 expect_rc 0 "$EZ_CLI" pub /dp/lines3 --address "$ADDR" --num-buffers 2 <"$T/lines"
wait_sub
assert_eq 0 "$SUB_RC" "sub exit status"
cmp -s "$T/lines" "$SUB_OUT" || fail "EZMSG_SPIN_US=0: the lines differ"
EZMSG_SPIN_US=lots EZMSG_LOG_LEVEL=warn expect_rc 0 "$EZ_CLI" pub /dp/nobody --address "$ADDR" --message x
assert_contains "$T/err" "EZMSG_SPIN_US=lots: not a number of microseconds" "a bad EZMSG_SPIN_US"
pass "EZMSG_SPIN_US=0: all lines, in order; a bad value is reported and ignored"

# ---- text vs hex ----------------------------------------------------------------------------------
printf 'plain ascii\nwith\ttab\ncaf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\n\nbell\x07\n\xff\xfe\n\xc3\x28\nc1 \xc2\x85\ndel\x7f\ncr\r\n\xed\xa0\x80\n' >"$T/mixed"
cat >"$T/mixed.want" <<'WANT'
plain ascii
with	tab
café € 😀

62656c6c07
fffe
c328
633120c285
64656c7f
63720d
eda080
WANT
start_sub /dp/mixed --count 11
expect_rc 0 "$EZ_CLI" pub /dp/mixed --address "$ADDR" <"$T/mixed"
wait_sub
assert_eq 0 "$SUB_RC" "sub exit status"
diff "$T/mixed.want" "$SUB_OUT" >&2 || fail "text / hex printing"
pass "sub prints valid UTF-8 as text and anything with control bytes or bad UTF-8 as hex"

# ---- --message --count, --rate ---------------------------------------------------------------------
start_sub /dp/msg --count 5
expect_rc 0 "$EZ_CLI" pub /dp/msg --address "$ADDR" --message "hi there" --count 5 --rate 200
wait_sub
assert_eq 0 "$SUB_RC" "sub exit status"
assert_eq "$(printf 'hi there\n%.0s' 1 2 3 4 5)" "$(cat "$SUB_OUT")" "pub --message --count 5"
pass "pub --message --count 5 --rate 200"

# ---- 4 MiB messages over shared memory and over TCP ------------------------------------------------
# Message k of --size N: bytes 0..7 = k (little-endian), byte i >= 8 = i mod 256; sub prints hex.
want_sized() { # N COUNT
  python3 - "$1" "$2" <<'PY'
import sys
n, count = int(sys.argv[1]), int(sys.argv[2])
body = bytes(i % 256 for i in range(8, n)).hex()
for k in range(count):
    sys.stdout.write(k.to_bytes(8, "little").hex() + body + "\n")
PY
}
SIZE=4194304
for mode in shm tcp; do
  extra=()
  [ "$mode" = tcp ] && extra=(--force-tcp)
  start_sub "/dp/big$mode" --count 3
  expect_rc 0 "$EZ_CLI" pub "/dp/big$mode" --address "$ADDR" --size $SIZE --count 3 --num-buffers 2 --timeout 30 "${extra[@]}"
  wait_sub
  assert_eq 0 "$SUB_RC" "sub of 4 MiB messages ($mode) exit status"
  assert_eq 3 "$(wc -l <"$SUB_OUT")" "4 MiB messages ($mode): lines"
  assert_eq $((2 * SIZE)) "$(head -1 "$SUB_OUT" | tr -d '\n' | wc -c)" "4 MiB message ($mode): hex length"
  if command -v python3 >/dev/null 2>&1; then
    [ "$(want_sized $SIZE 3 | sha256sum)" = "$(sha256sum <"$SUB_OUT")" ] ||
      fail "4 MiB messages ($mode): the bytes differ from what was sent"
  fi
  pass "pub --size $SIZE --count 3 ($mode): intact, in order"
done

# ---- --timeout, --wait-subscribers ------------------------------------------------------------------
# --timeout is in seconds: 0.3 gives up after 300 ms (not 300 s, not 0.3 ms).
t0=$(date +%s%N)
expect_rc 1 "$EZ_CLI" sub /dp/quiet --address "$ADDR" --timeout 0.3
took_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
assert_contains "$T/err" "no message" "sub --timeout"
assert_empty "$T/out" "sub --timeout"
[ "$took_ms" -ge 300 ] || fail "sub --timeout 0.3 gave up after $took_ms ms"
[ "$took_ms" -lt 20000 ] || fail "sub --timeout 0.3 took $took_ms ms"
pass "sub --timeout 0.3 with no publisher: exit 1 after $took_ms ms"

expect_rc 1 "$EZ_CLI" pub /dp/lonely --address "$ADDR" --message x --wait-subscribers 1 --timeout 0.3
assert_contains "$T/err" "waiting for 1" "pub --wait-subscribers"
pass "pub --wait-subscribers 1 --timeout 0.3 with no subscriber: exit 1"

# --wait-subscribers: the publisher starts first and waits for the subscriber.
"$EZ_CLI" pub /dp/waiter --address "$ADDR" --message late --count 2 --wait-subscribers 1 --timeout 20 \
  >"$T/waiter.out" 2>"$T/waiter.err" &
PUB=$!
ez_track "$PUB"
start_sub /dp/waiter --count 2
wait_sub
assert_eq 0 "$SUB_RC" "sub exit status"
assert_eq "$(printf 'late\nlate')" "$(cat "$SUB_OUT")" "pub --wait-subscribers"
ez_wait_gone "$PUB" 20 || fail "pub --wait-subscribers did not finish"
ez_join "$PUB" || fail "pub --wait-subscribers exited $?: $(cat "$T/waiter.err")"
pass "pub --wait-subscribers 1: publishes once the subscriber is there"

# ---- SIGTERM ends pub --count 0 and sub cleanly ---------------------------------------------------
start_sub /dp/forever
"$EZ_CLI" pub /dp/forever --address "$ADDR" --message tick --count 0 --rate 100 2>"$T/forever.err" &
PUB=$!
ez_track "$PUB"
for ((i = 0; i < 500; i++)); do
  [ "$(wc -l <"$SUB_OUT")" -ge 3 ] && break
  sleep 0.02
done
[ "$(wc -l <"$SUB_OUT")" -ge 3 ] || fail "pub --count 0: nothing arrived"
ez_stop "$PUB" TERM || fail "pub --count 0 exited $? on SIGTERM: $(cat "$T/forever.err")"
ez_stop "$SUB" TERM || fail "sub exited $? on SIGTERM: $(cat "$SUB_ERR")"
grep -qvx tick "$SUB_OUT" && fail "pub --count 0: unexpected lines"
pass "pub --count 0 runs until SIGTERM; SIGTERM ends pub and sub with exit 0"

# ---- the graph server goes away: sub exits 1 -------------------------------------------------------
start_sub /dp/orphan
ez_stop "$EZ_SERVE_PID" KILL || true
wait_sub
assert_eq 1 "$SUB_RC" "sub after the server was killed"
assert_contains "$SUB_ERR" "lost the graph server" "sub after the server was killed"
pass "sub exits 1 when its graph server is killed"

echo "all dataplane CLI tests passed"
