#!/usr/bin/env python3
"""Prints the module graph of a crate's `src/` and any cycle in it, at every level: the
top-level modules (which uses which, by `crate::` paths), and inside each folder its sibling
modules (by `super::` and `crate::folder::` paths). Code of unit tests does not count. With
--check, exits 1 when any level has a cycle."""
import os
import re
import sys


def source_of(path):
    with open(path, encoding="utf-8") as f:
        return re.split(r"#\[cfg\(test\)\]\s*mod tests", f.read())[0]


def modules(root):
    """Every module file as (path of folders, module name, source): `a/b.rs` and `a/b/mod.rs`
    are module `b` in folder `a`; a folder's mod.rs speaks for the folder itself."""
    found = []
    for dirpath, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".rs"):
                continue
            parts = os.path.relpath(os.path.join(dirpath, name), root).split(os.sep)
            stem = parts[-1].removesuffix(".rs")
            if stem == "mod":
                parts = parts[:-1]
            else:
                parts[-1] = stem
            if parts in (["lib"], ["main"]):
                continue
            found.append((parts, source_of(os.path.join(dirpath, name))))
    return found


def graphs(root):
    """One graph per folder ('' for the crate): module -> the siblings it uses."""
    levels = {}
    for parts, source in modules(root):
        # Each folder above this module sees it as one of its children.
        for depth in range(len(parts)):
            folder, child = "/".join(parts[:depth]), parts[depth]
            graph = levels.setdefault(folder, {})
            graph.setdefault(child, set())
            prefix = "crate::" + "".join(p + "::" for p in parts[:depth])
            used = set(re.findall(re.escape(prefix) + r"([a-z_]+)", source))
            # `super::x` from a module directly in the folder names a sibling.
            if depth == len(parts) - 1:
                used |= set(re.findall(r"(?<![:\w])super::([a-z_]+)", source))
            for other in used:
                if other != child:
                    graph[child].add(other)
    # Only siblings that exist count (`super::Store` is an item, not a module).
    for graph in levels.values():
        for child in graph:
            graph[child] = {m for m in graph[child] if m in graph}
    return levels


def cycles(uses):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(uses.get(v, ())):
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
    sys.setrecursionlimit(10000)
    failed = False
    for folder, uses in sorted(graphs(root).items()):
        where = folder or "crate"
        print(f"[{where}]")
        for module in sorted(uses):
            print(f"  {module} -> {' '.join(sorted(uses[module]))}")
        found = cycles(uses)
        print("  cycles:", "none" if not found else "; ".join(" ↔ ".join(c) for c in found))
        failed |= bool(found)
    if "--check" in sys.argv and failed:
        sys.exit(1)


main()
