#!/usr/bin/env python3
"""The layer rule of docs/architecture.md, over the #include lines of src/.

src/<layer>/ folders, lowest first: a file may include headers of its own folder and of folders
below it, never of one above it nor of a sibling of its rank (pub and sub; rx's files include no
other rx file). Includes of internal headers name their folder ("base/wire.h"), so that the rule
can be read in the line. Upward includes that the code has not shed yet are listed, each with its
reason, in tests/layers.allow; the test fails on any other, and on a listed one that has gone (so
the list only shrinks). With those set aside, no circle of modules (a .c and its .h) may be longer
than two.

usage: layers.py SRC_DIR [--report]
"""
import os, re, sys

RANK = {"base": 0, "proto": 1, "graph": 2, "core": 3, "ring": 4, "chan": 5, "rx": 6,
        "pub": 7, "sub": 7, "proc": 8}

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

if "--report" in sys.argv:
    print(f"{len(allowed)} listed upward includes")
    for c in sccs(all_edges):
        if len(c) > 2:
            print("counting them, a circle of %d modules: %s" % (len(c), " ".join(c)))
for e in errors:
    print(e, file=sys.stderr)
sys.exit(1 if errors else 0)
