#!/usr/bin/env bash
# `make demo` (examples/demo.sh) with EZMSG_GRAPHSERVER_ADDR set: with no server at that address
# the demo runs one itself (it used to fail: its processes do not embed a server when the
# address is named); with one already there it uses it and leaves it running.
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
: "${EZ_BUILD:?EZ_BUILD must name the build directory}"
EZ_SRC=${EZ_SRC:-$(cd "$(dirname "$0")/.." && pwd)}

ADDR=$(ez_free_address)
EZMSG_GRAPHSERVER_ADDR=$ADDR expect_rc 0 bash "$EZ_SRC/examples/demo.sh" "$EZ_BUILD"
assert_contains "$T/out" "ezmsg serve --address $ADDR" "the demo runs its own server"
assert_contains "$T/out" "all 60 arrived in order" "demo with its own server"
assert_contains "$T/out" "/demo/raw" "the demo's profile"
expect_rc 1 "$EZ_CLI" graphviz --address "$ADDR" # and stopped it
pass "make demo with EZMSG_GRAPHSERVER_ADDR and no server there"

ez_start_serve "$ADDR"
EZMSG_GRAPHSERVER_ADDR=$ADDR expect_rc 0 bash "$EZ_SRC/examples/demo.sh" "$EZ_BUILD"
assert_not_contains "$T/out" "ezmsg serve --address" "the demo uses the running server"
assert_contains "$T/out" "all 60 arrived in order" "demo on a running server"
ez_alive "$EZ_SERVE_PID" || fail "the demo stopped a server it did not start"
expect_rc 0 "$EZ_CLI" graphviz --address "$ADDR"
pass "make demo with EZMSG_GRAPHSERVER_ADDR naming a running server"
