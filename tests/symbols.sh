#!/usr/bin/env bash
# libezmsg.so exports exactly the functions include/ezmsg/ezmsg.h marks EZ_API: nothing internal
# (ezi_, EZI_, static helpers) is reachable from a program, so an internal rename breaks no ABI.
# The library is compiled with hidden visibility (CMakeLists.txt); this checks it stayed so.
source "$(dirname "$0")/lib.sh"

EZ_BUILD=${EZ_BUILD:?EZ_BUILD must name the build directory}
EZ_SRC=${EZ_SRC:?EZ_SRC must name the source directory}
LIB=$(ls "$EZ_BUILD"/libezmsg.so.* 2>/dev/null | head -1)
[ -n "$LIB" ] || fail "no libezmsg.so.* in $EZ_BUILD"
command -v nm >/dev/null || fail "nm is not installed (binutils)"

# The EZ_API declarations (one may wrap: the header is read as one line).
tr '\n' ' ' <"$EZ_SRC/include/ezmsg/ezmsg.h" | grep -oE 'EZ_API [^(;]*\bez_[a-z0-9_]+[[:space:]]*\(' |
  sed -E 's/^.*\b(ez_[a-z0-9_]+)[[:space:]]*\($/\1/' | sort -u >"$T/api"
[ -s "$T/api" ] || fail "found no EZ_API declarations in ezmsg.h"

# What the library exports. Names that begin with '_' belong to the toolchain (_init, _fini, and
# the sanitizers' own, in those builds), not to us.
nm -D --defined-only "$LIB" | awk '{print $NF}' | grep -v '^_' | sort -u >"$T/exported"

if ! diff -u "$T/api" "$T/exported" >"$T/diff"; then
  echo "--- EZ_API declarations  +++ exported by $(basename "$LIB")" >&2
  grep -E '^[-+][^-+]' "$T/diff" >&2
  fail "libezmsg.so exports other names than ezmsg.h's EZ_API functions"
fi
pass "libezmsg.so exports exactly the $(wc -l <"$T/api") EZ_API functions of ezmsg.h"
