#!/usr/bin/env bash
# The layer rule (docs/architecture.md, "Layers"): no file of src/ includes a header of a layer
# above its own, except the upward includes listed in tests/layers.allow; no circle of more than
# two modules; and no function calls one of a layer above its own (read from the static library's
# objects), whatever header declares it; tests, fuzzers and benchmarks include the internal headers
# of one layer above proto at most, examples none. The check itself is tests/layers.py.
source "$(dirname "$0")/lib.sh"
EZ_SRC=${EZ_SRC:?EZ_SRC must name the source directory}
EZ_BUILD=${EZ_BUILD:?EZ_BUILD must name the build directory}
LIB="$EZ_BUILD/libezmsg.a"
[ -f "$LIB" ] || fail "no static library $LIB"
command -v nm >/dev/null || fail "nm is not installed (binutils)"
python3 "$EZ_SRC/tests/layers.py" "$EZ_SRC" --report --objects "$LIB" ||
  fail "the layer rule is broken (above)"
pass "src/ keeps its layers, in its includes and in its calls"
