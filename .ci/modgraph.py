#!/usr/bin/env python3
"""Prints the module graph of a crate's `src/` (which top-level module uses which, by `crate::`
paths outside unit tests) and any cycle in it. With --check, exits 1 when there is a cycle."""
import os
import re
import sys


def graph(root):
    uses = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(dirpath, name)
            top = os.path.relpath(path, root).split(os.sep)[0].removesuffix(".rs")
            if top in ("lib", "main"):
                continue
            with open(path, encoding="utf-8") as f:
                source = re.split(r"#\[cfg\(test\)\]\s*mod tests", f.read())[0]
            for used in re.findall(r"crate::([a-z_]+)", source):
                if used != top:
                    uses.setdefault(top, set()).add(used)
            uses.setdefault(top, set())
    return uses


def cycles(uses):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in uses.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(uses):
        if v not in index:
            visit(v)
    return found


def main():
    root = sys.argv[1]
    uses = graph(root)
    for module in sorted(uses):
        print(f"{module} -> {' '.join(sorted(uses[module]))}")
    found = cycles(uses)
    print("cycles:", "none" if not found else "; ".join(" ↔ ".join(c) for c in found))
    if "--check" in sys.argv and found:
        sys.exit(1)


main()
