#!/usr/bin/env python3
"""Lists file-level import cycles inside each crate of the workspace.

An edge A -> B means file A names an item of module file B through a path: `use crate::b::…`,
`use super::…`, `use self::…`, or an inline `crate::b::…` / `super::…` path. `pub use` lines
are re-exports (a module's facade), not dependencies, and `mod` declarations are not edges. A path
resolves to the deepest module file it names; a name the crate root (lib.rs / main.rs)
re-exports from a module resolves to that module. Cycles are strongly connected components of
more than one file. Test code (`#[cfg(test)]` modules, tests.rs, tests/) is left out.

Usage: python3 bench/import_cycles.py [crates-dir]   (exit 1 when a cycle is found)
"""
import os
import re
import sys
from pathlib import Path

PATH_RE = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_RE = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?use\s+(.*?);", re.S | re.M)


def strip_comments_and_strings(text):
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'r#*"(?:.|\n)*?"#*', '""', text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    return text


def drop_test_modules(text):
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def module_files(src):
    """module path (tuple) -> file, for every .rs file under src."""
    mods = {}
    for path in src.rglob("*.rs"):
        rel = path.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        if parts in (["lib"], ["main"]):
            parts = []
        elif parts[-1] == "mod":
            parts = parts[:-1]
        if "tests" in parts[-1:]:
            continue
        mods[tuple(parts)] = path
    return mods


def expand_use(tree):
    """Flattens a use tree into paths (`a::{b, c::d}` -> a::b, a::c::d)."""
    tree = re.sub(r"\s+", "", tree)
    if "{" not in tree:
        return [tree]
    head, _, rest = tree.partition("{")
    inner = rest[: rest.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        cur += ch
    parts.append(cur)
    return [p for part in parts if part for p in expand_use(head + part)]


def root_reexports(mods):
    """Names the crate root re-exports with `pub use crate_module::…::Name` -> module path."""
    root = mods.get(())
    names = {}
    if root is None:
        return names
    text = strip_comments_and_strings(root.read_text())
    for m in USE_RE.finditer(text):
        if not m.group(1):
            continue
        for path in expand_use(m.group(3)):
            segs = [s for s in path.split("::") if s and s != "crate"]
            segs = [s.split(" as ")[0] for s in segs]
            for k in range(len(segs), 0, -1):
                if tuple(segs[:k]) in mods:
                    names[segs[-1]] = tuple(segs[:k])
                    break
    return names


def resolve(segs, here, mods, reexports):
    kind, rest = segs[0], segs[1:]
    if kind == "crate":
        base = []
    elif kind == "self":
        base = list(here)
    else:  # super, possibly repeated
        base = list(here)
        while rest and rest[0] == "super":
            rest = rest[1:]
            base = base[:-1]
        base = base[:-1]
    full = base + rest
    for k in range(len(full), -1, -1):
        if tuple(full[:k]) in mods:
            target = tuple(full[:k])
            if target == () and rest and rest[0] in reexports:
                return reexports[rest[0]]
            return target
    return None


def edges_of(crate_src):
    mods = module_files(crate_src)
    reexports = root_reexports(mods)
    graph = {m: set() for m in mods}
    for here, path in mods.items():
        text = drop_test_modules(strip_comments_and_strings(path.read_text()))
        reexport_spans = [m.span() for m in USE_RE.finditer(text) if m.group(1)]
        for m in PATH_RE.finditer(text):
            if any(a <= m.start() < b for a, b in reexport_spans):
                continue
            segs = [m.group(1)] + [s for s in m.group(2).split("::") if s]
            target = resolve(segs, here, mods, reexports)
            if target is not None and target != here:
                graph[here].add(target)
        for m in USE_RE.finditer(text):
            if m.group(1):
                continue
            for p in expand_use(m.group(3)):
                segs = [s.split(" as ")[0] for s in p.split("::") if s]
                if segs and segs[0] in ("crate", "super", "self"):
                    target = resolve(segs, here, mods, reexports)
                    if target is not None and target != here:
                        graph[here].add(target)
    return mods, graph


def sccs(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    for v in graph:
        if v not in index:
            visit(v)
    return [c for c in out if len(c) > 1]


def main():
    crates = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent.parent / "crates")
    found = 0
    for crate in sorted(p for p in crates.iterdir() if (p / "src").is_dir()):
        mods, graph = edges_of(crate / "src")
        for comp in sccs(graph):
            found += 1
            files = sorted(str(mods[m].relative_to(crates)) for m in comp)
            print(f"cycle in {crate.name}: " + " <-> ".join(files))
    print(f"{found} file-level import cycle(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
