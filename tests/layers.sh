#!/usr/bin/env bash
# The layer rule (docs/architecture.md, "Layers"): no file of src/ includes a header of a layer
# above its own, except the upward includes listed in tests/layers.allow; no circle of more than
# two modules. The check itself is tests/layers.py.
source "$(dirname "$0")/lib.sh"
EZ_SRC=${EZ_SRC:?EZ_SRC must name the source directory}
python3 "$EZ_SRC/tests/layers.py" "$EZ_SRC" --report || fail "the layer rule is broken (above)"
pass "src/ keeps its layers"
