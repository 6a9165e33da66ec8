#!/usr/bin/env python3
"""The layer rule of docs/architecture.md, over the #include lines of src/.

src/<layer>/ folders, lowest first: a file may include headers of its own folder and of folders
below it, never of one above it nor of a sibling of its rank (pub and sub; rx's files include no
other rx file). Includes of internal headers name their folder ("base/wire.h"), so that the rule
can be read in the line. Upward includes that the code has not shed yet are listed, each with its
reason, in tests/layers.allow; the test fails on any other, and on a listed one that has gone (so
the list only shrinks). With those set aside, no circle of modules (a .c and its .h) may be longer
than two.

With --objects ARCHIVE (the static library), the same rule holds for calls too: no function calls
one of a layer above its own, whatever header declares it.

Outside src/: a test, fuzzer or benchmark includes the public header, its own kit's headers and
the internal headers of at most one layer above proto (base and proto, the foundation and the
bytes of the wire that a test writes as a peer would, are open to all of them); an example
includes the public header only.

usage: layers.py SRC_DIR [--report] [--objects ARCHIVE]
"""
import os, re, sys

RANK = {"base": 0, "proto": 1, "graph": 2, "core": 3, "ring": 4, "chan": 5, "rx": 6,
        "link": 7, "pub": 8, "sub": 8, "proc": 9}

root = sys.argv[1]
src = os.path.join(root, "src")
allow_path = os.path.join(root, "tests", "layers.allow")
allowed = {}
for line in open(allow_path):
    line = line.split("#", 1)[0].strip()
    if line:
        f, h = [x.strip() for x in line.split("->")]
        allowed[(f, h)] = False

inc_re = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
errors = []
edges = {}  # module -> set of modules (listed upward includes set aside)
all_edges = {}  # every include
for layer in sorted(os.listdir(src)):
    d = os.path.join(src, layer)
    if not os.path.isdir(d):
        continue
    if layer not in RANK:
        errors.append(f"src/{layer}/: a folder the layer rule does not know (add it to RANK)")
        continue
    for name in sorted(os.listdir(d)):
        if not name.endswith((".c", ".h")):
            continue
        rel = f"{layer}/{name}"
        mod = rel[:-2]
        edges.setdefault(mod, set())
        all_edges.setdefault(mod, set())
        for n, line in enumerate(open(os.path.join(d, name)), 1):
            m = inc_re.match(line)
            if not m:
                continue
            h = m.group(1)
            if h.startswith("ezmsg/"):
                continue
            if "/" not in h:
                errors.append(f"src/{rel}:{n}: #include \"{h}\" does not name its layer")
                continue
            hl = h.split("/", 1)[0]
            if hl not in RANK or not os.path.exists(os.path.join(src, h)):
                errors.append(f"src/{rel}:{n}: #include \"{h}\": no such header in src/")
                continue
            if h[:-2] != mod:
                all_edges[mod].add(h[:-2])
            up = RANK[hl] > RANK[layer] or (RANK[hl] == RANK[layer] and hl != layer)
            if hl == layer == "rx" and h[:-2] != mod:
                up = True
            if up:
                if (rel, h) in allowed:
                    allowed[(rel, h)] = True
                    continue  # a listed upward include: not an edge of the layered graph
                errors.append(f"src/{rel}:{n}: #include \"{h}\": {hl} is not below {layer}")
            if h[:-2] != mod:
                edges[mod].add(h[:-2])

for (f, h), seen in allowed.items():
    if not seen:
        errors.append(f"tests/layers.allow: '{f} -> {h}' is no longer there: remove it")


def sccs(g):
    index, low, stack, on, out, i = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = i[0]
        i[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            c = []
            while True:
                w = stack.pop()
                on.discard(w)
                c.append(w)
                if w == v:
                    break
            out.append(sorted(c))

    sys.setrecursionlimit(10000)
    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


for c in sccs(edges):
    if len(c) > 2:
        errors.append("a circle of %d modules: %s" % (len(c), " ".join(c)))


def check_clients():
    """The include rule of tests/, fuzz/, bench/ and examples/ (the docstring above)."""
    errs = []
    for folder in ("tests", "fuzz", "bench", "examples"):
        d = os.path.join(root, folder)
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else ():
            if not name.endswith((".c", ".h")):
                continue
            layers = {}
            for n, line in enumerate(open(os.path.join(d, name)), 1):
                m = inc_re.match(line)
                if not m or "/" not in m.group(1) or m.group(1).startswith(("ezmsg/", "..")):
                    continue
                layer = m.group(1).split("/", 1)[0]
                if layer not in RANK:
                    continue  # another project's header (bench/'s peers)
                if folder == "examples":
                    errs.append(f"{folder}/{name}:{n}: an example includes only ezmsg/ezmsg.h")
                elif layer not in ("base", "proto"):
                    layers.setdefault(layer, n)
            if len(layers) > 1:
                errs.append(f"{folder}/{name}: includes the headers of %d layers above proto (%s): "
                            "one at most" % (len(layers), ", ".join(
                                f"{l} at line {n}" for l, n in sorted(layers.items()))))
    return errs


errors += check_clients()


def check_calls(archive):
    """The same rule over calls: a function of one layer may call (or take the address of) the
    ez_ and ezi_ functions of its own folder and of those below, never of a layer above, even
    through a declaration in a lower header; an upper layer reaches a lower one's caller only
    through a table or callback it registered. Read from the library's objects (nm)."""
    import subprocess
    layer_of = {}
    for layer in RANK:
        d = os.path.join(src, layer)
        for name in os.listdir(d) if os.path.isdir(d) else ():
            if name.endswith(".c"):
                layer_of[name] = layer
    try:
        out = subprocess.run(["nm", "-A", archive], capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        return [f"{archive}: nm failed ({e})"]
    defined, used = {}, []
    for line in out.splitlines():
        parts = line.rsplit(None, 2)
        if len(parts) < 2:
            continue
        member = line.split(":")[1] if line.count(":") >= 2 else ""
        name = member[:-2] if member.endswith(".o") else member
        sym, kind = parts[-1], parts[-2]
        if not (sym.startswith("ez_") or sym.startswith("ezi_")) or name not in layer_of:
            continue
        if kind in "TDRB":
            defined[sym] = name
        elif kind == "U":
            used.append((name, sym))
    errs = []
    for name, sym in sorted(set(used)):
        d = defined.get(sym)
        if d is None:
            continue
        lu, ld = layer_of[name], layer_of[d]
        up = RANK[ld] > RANK[lu] or (RANK[ld] == RANK[lu] and ld != lu)
        if ld == lu == "rx" and d != name:
            up = True
        if up:
            errs.append(f"src/{lu}/{name} calls {sym} of src/{ld}/{d}: {ld} is not below {lu}")
    if not defined:
        errs.append(f"{archive}: no ez_ or ezi_ function of src/ found in it")
    return errs


if "--objects" in sys.argv:
    errors += check_calls(sys.argv[sys.argv.index("--objects") + 1])

if "--report" in sys.argv:
    print(f"{len(allowed)} listed upward includes")
    for c in sccs(all_edges):
        if len(c) > 2:
            print("counting them, a circle of %d modules: %s" % (len(c), " ".join(c)))
for e in errors:
    print(e, file=sys.stderr)
sys.exit(1 if errors else 0)
