#!/usr/bin/env bash
# `ezmsg profile`: the JSON document and the table against a server with no clients, window
# clamping, usage errors (exit 2), no server (exit 1, one line naming the address) and --watch
# (successive tables on a pipe, the screen cleared on a terminal, exit 0 on SIGINT). The table
# against live publishers and subscribers (long names cut, <= 100 columns) is in
# test_profiling.c. Servers run on free 127.0.0.1 ports and are stopped by pid.
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
unset EZMSG_GRAPHSERVER_ADDR

command -v python3 >/dev/null || fail "python3 is needed to check the JSON"

# Checks that FILE holds a profile document with empty lists and window_s = WANT.
check_empty_doc() { # FILE WANT
  python3 - "$1" "$2" <<'EOF' || fail "not an empty profile document with window_s $2"
import json, sys
d = json.load(open(sys.argv[1]))
assert set(d) == {"timestamp", "window_s", "publishers", "channels", "registry"}, d
assert list(d)[0] == "timestamp" and d["timestamp"].endswith("Z"), d
import datetime
datetime.datetime.fromisoformat(d["timestamp"].replace("Z", "+00:00"))
assert d["publishers"] == [] and d["channels"] == [], d
assert d["registry"] == {"publishers": [], "subscribers": []}, d
assert abs(d["window_s"] - float(sys.argv[2])) < 1e-9, d
EOF
}

# Fails if a line of FILE is longer than 100 columns.
check_width() { # FILE WHAT
  local w
  w=$(awk '{ if (length($0) > m) m = length($0) } END { print m + 0 }' "$1")
  [ "$w" -le 100 ] || fail "$2: a line of $w columns"
}

ADDR=$(ez_free_address)
ez_start_serve "$ADDR"

# ---- JSON ----------------------------------------------------------------------------------------
expect_rc 0 "$EZ_CLI" profile --address "$ADDR"
python3 -c 'import json,sys; json.load(sys.stdin)' <"$T/out" || fail "ezmsg profile: not JSON"
check_empty_doc "$T/out" 2.0
assert_empty "$T/err" "ezmsg profile"
pass "ezmsg profile: valid JSON, empty lists, default window 2.0"

expect_rc 0 "$EZ_CLI" profile --address "$ADDR" --format json --window 0.5
check_empty_doc "$T/out" 0.5
expect_rc 0 "$EZ_CLI" profile -a "$ADDR" -w 0
check_empty_doc "$T/out" 0
expect_rc 0 "$EZ_CLI" profile --address "$ADDR" --window 100
check_empty_doc "$T/out" 10
expect_rc 0 "$EZ_CLI" profile --address "$ADDR" --window 1e1
check_empty_doc "$T/out" 10
pass "ezmsg profile: --window 0.5 / 0 / 100 (clamped to 10)"

EZMSG_GRAPHSERVER_ADDR=$ADDR expect_rc 0 "$EZ_CLI" profile
check_empty_doc "$T/out" 2.0
pass "ezmsg profile: the address from \$EZMSG_GRAPHSERVER_ADDR"

# ---- table ---------------------------------------------------------------------------------------
expect_rc 0 "$EZ_CLI" profile --address "$ADDR" --format table
check_width "$T/out" "--format table"
assert_contains "$T/out" "TOPIC / SUBSCRIBER" "table header"
assert_contains "$T/out" "$ADDR" "table names the server"
assert_contains "$T/out" "0 publishers, 0 channels" "table summary"
assert_empty "$T/err" "--format table"
pass "ezmsg profile --format table: <= 100 columns"

# ---- usage errors: exit 2, nothing on stdout --------------------------------------------------
for bad in -1 abc nan NaN -0.5 "" 1x inf- --; do
  expect_rc 2 "$EZ_CLI" profile --address "$ADDR" --window "$bad"
  assert_empty "$T/out" "--window '$bad'"
  assert_contains "$T/err" "usage: ezmsg profile" "--window '$bad'"
done
expect_rc 2 "$EZ_CLI" profile --address "$ADDR" --format xml
assert_contains "$T/err" "usage: ezmsg profile" "--format xml"
for bad in 0 -1 abc nan; do
  expect_rc 2 "$EZ_CLI" profile --address "$ADDR" --watch "$bad"
  assert_empty "$T/out" "--watch '$bad'"
done
expect_rc 2 "$EZ_CLI" profile --address "$ADDR" extra-argument
expect_rc 2 "$EZ_CLI" profile --address "not an address"
expect_rc 2 "$EZ_CLI" profile --address "$ADDR" --window
pass "ezmsg profile: bad --window / --format / --watch / arguments: exit 2"

expect_rc 0 "$EZ_CLI" profile --help
assert_contains "$T/out" "usage: ezmsg profile" "profile --help"
assert_contains "$T/out" "--window" "profile --help"
assert_contains "$T/out" "--watch" "profile --help"
expect_rc 0 "$EZ_CLI" --help
assert_contains "$T/out" "  profile " "ezmsg --help lists profile"
pass "ezmsg profile --help"

# ---- --watch -------------------------------------------------------------------------------------
# On a pipe: successive tables separated by a blank line, no escape sequences, exit 0 on SIGINT
# (even though the shell starts background jobs with SIGINT ignored).
"$EZ_CLI" profile --address "$ADDR" --format table --watch 0.2 --window 0.5 >"$T/watch" 2>"$T/watch.err" &
WPID=$!
ez_track "$WPID"
sleep 1.2
kill -INT "$WPID"
RC=0
ez_join "$WPID" 10 || RC=$?
assert_eq 0 "$RC" "--watch exit status after SIGINT"
n=$(grep -c "^graph server " "$T/watch")
[ "$n" -ge 2 ] || fail "--watch: $n tables in 1.2 s at 0.2 s intervals"
[ "$(grep -c '^$' "$T/watch")" -ge $((n - 1)) ] || fail "--watch: tables not separated by blank lines"
! grep -q $'\033' "$T/watch" || fail "--watch on a pipe: escape sequences"
check_width "$T/watch" "--watch"
assert_empty "$T/watch.err" "--watch"
pass "ezmsg profile --watch on a pipe: $n tables, exit 0 on SIGINT"

# JSON documents when watching without --format table; SIGTERM works too.
"$EZ_CLI" profile --address "$ADDR" --watch 0.2 >"$T/watchj" 2>/dev/null &
WPID=$!
ez_track "$WPID"
sleep 0.7
kill -TERM "$WPID"
RC=0
ez_join "$WPID" 10 || RC=$?
assert_eq 0 "$RC" "--watch exit status after SIGTERM"
python3 - "$T/watchj" <<'EOF' || fail "--watch json: not one document per line"
import datetime, json, sys
lines = open(sys.argv[1]).read().split("\n")
assert lines[-1] == "", "the last document ends with a newline"
docs = [json.loads(l) for l in lines[:-1]]  # every line one whole document
assert len(docs) >= 2, len(docs)
assert all(d["publishers"] == [] for d in docs)
stamps = [datetime.datetime.fromisoformat(d["timestamp"].replace("Z", "+00:00")) for d in docs]
assert all(d["timestamp"].endswith("Z") for d in docs)
assert stamps == sorted(stamps) and stamps[0] < stamps[-1], stamps
EOF
pass "ezmsg profile --watch (JSON): one document per line with its timestamp, exit 0 on SIGTERM"

# On a terminal (a pty made by python3, so the pid we signal is ezmsg's own and every wait is
# bounded): the screen is cleared before every table, and SIGINT ends it with status 0.
python3 - "$EZ_CLI" "$ADDR" "$T/tty" <<'EOF' || fail "--watch on a terminal"
import os, pty, select, signal, sys, time
cli, addr, out = sys.argv[1:4]
pid, fd = pty.fork()
if pid == 0:
    os.execv(cli, [cli, "profile", "--address", addr, "--format", "table", "--watch", "0.2"])
data = b""
def pump(secs):
    global data
    end = time.monotonic() + secs
    while time.monotonic() < end:
        r, _, _ = select.select([fd], [], [], 0.05)
        if r:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                return False  # EIO: the child closed the terminal
            if not chunk:
                return False
            data += chunk
    return True
pump(1.2)
os.kill(pid, signal.SIGINT)
pump(5)
status = None
for _ in range(500):
    wpid, st = os.waitpid(pid, os.WNOHANG)
    if wpid == pid:
        status = st
        break
    time.sleep(0.01)
if status is None:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    sys.exit("ezmsg profile --watch did not exit within 5 s of SIGINT")
open(out, "wb").write(data)
if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
    sys.exit("exit status after SIGINT: %r" % status)
if data.count(b"\033[H\033[2J") < 2:
    sys.exit("fewer than two clear-screen sequences")
EOF
pass "ezmsg profile --watch on a terminal clears the screen, exit 0 on SIGINT"

# ---- no server -----------------------------------------------------------------------------------
ez_stop "$EZ_SERVE_PID" TERM
expect_rc 1 "$EZ_CLI" profile --address "$ADDR"
assert_empty "$T/out" "profile without a server"
assert_lines "$T/err" 1 "profile without a server"
assert_contains "$T/err" "$ADDR" "profile without a server names the address"
expect_rc 1 "$EZ_CLI" profile --address "$ADDR" --format table
assert_lines "$T/err" 1 "profile --format table without a server"
expect_rc 1 "$EZ_CLI" profile --address "$ADDR" --watch 0.2
assert_lines "$T/err" 1 "profile --watch without a server"
pass "ezmsg profile without a server: exit 1, one line naming $ADDR"
