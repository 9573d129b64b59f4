#!/usr/bin/env python3
"""Where a wasm module's code bytes go, by crate and by function, from its name section.

    python3 bench/wasm-sizes.py target/lanes_split.wasm [TOP]

`cargo xtask site` leaves the dashboard's main module, before wasm-opt and with its names,
in target/lanes_split.wasm. Names are Rust's legacy mangling; a generic function is counted
under the crate that defines it (serde's deserializer for an app type counts as serde's).
"""
import re
import sys
from collections import Counter


def leb(data, i):
    result = shift = 0
    while True:
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, i


def sections(data):
    i = 8
    while i < len(data):
        kind = data[i]
        size, i = leb(data, i + 1)
        yield kind, data[i:i + size]
        i += size


def demangle(name):
    """`_ZN5serde2de...17h<hash>E` → ['serde', 'de', ...]; other names as one part."""
    if not name.startswith("_ZN"):
        return [name]
    parts, i = [], 3
    while i < len(name) and name[i] != "E":
        m = re.match(r"\d+", name[i:])
        if not m:
            break
        n = int(m.group())
        i += len(m.group())
        parts.append(name[i:i + n])
        i += n
    if parts and re.fullmatch(r"h[0-9a-f]{16}", parts[-1]):
        parts.pop()
    return parts or [name]


def main():
    data = open(sys.argv[1], "rb").read()
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    imported = 0
    bodies, names = [], {}
    for kind, body in sections(data):
        if kind == 2:  # imports: functions imported take the first indices
            count, i = leb(body, 0)
            for _ in range(count):
                for _ in range(2):
                    n, i = leb(body, i)
                    i += n
                k = body[i]
                i += 1
                if k == 0:
                    _, i = leb(body, i)
                    imported += 1
                elif k == 1:
                    i += 1
                    flags, i = leb(body, i + 0)
                    _, i = leb(body, i)
                    if flags & 1:
                        _, i = leb(body, i)
                elif k == 2:
                    flags, i = leb(body, i)
                    _, i = leb(body, i)
                    if flags & 1:
                        _, i = leb(body, i)
                elif k == 3:
                    i += 2
        elif kind == 10:
            count, i = leb(body, 0)
            for _ in range(count):
                size, i = leb(body, i)
                bodies.append(size)
                i += size
        elif kind == 0:
            n, i = leb(body, 0)
            if body[i:i + n] != b"name":
                continue
            i += n
            while i < len(body):
                sub = body[i]
                size, i = leb(body, i + 1)
                end = i + size
                if sub == 1:
                    count, j = leb(body, i)
                    for _ in range(count):
                        index, j = leb(body, j)
                        n, j = leb(body, j)
                        names[index] = body[j:j + n].decode("utf-8", "replace")
                        j += n
                i = end
    total = sum(bodies)
    crates, functions = Counter(), Counter()
    for k, size in enumerate(bodies):
        name = names.get(imported + k, f"<function {imported + k}>")
        parts = demangle(name)
        crate = parts[0]
        if crate.startswith("_$LT$"):  # <T as Trait>::f: the trait's crate
            m = re.search(r"\$u20\$as\$u20\$([A-Za-z_0-9]+)", crate)
            crate = m.group(1) if m else crate
        crates[crate] += size
        functions["::".join(parts)] += size
    print(f"{len(bodies)} functions, {total} bytes of code")
    print("\nby crate:")
    for crate, size in crates.most_common(top):
        print(f"{size:>9} {100 * size / total:5.1f} %  {crate}")
    print("\nlargest functions:")
    for name, size in functions.most_common(top):
        print(f"{size:>9}  {name[:150]}")


main()
