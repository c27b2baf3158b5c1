#!/usr/bin/env python3
"""List the non-test Rust functions longer than N lines (issue 18: "a function reads in one sitting").

Scans crates/**/src/**/*.rs, skipping test code: files named tests.rs, files under a `tests`
folder, files of modules declared `#[cfg(test)] mod NAME;`, and every item (module, impl, fn)
annotated `#[cfg(test)]`. A function's length is counted from the line of its `fn` keyword to the
line of its closing brace, both included; nested functions are listed on their own too.

Braces are counted on a masked copy of each file in which comments, string literals (plain, byte,
raw) and char literals are blanked out, so a `{` in a format string does not count. It is a scanner,
not a parser: good enough for rustfmt-formatted code.

Usage: bench/long_functions.py [--max-lines N] [ROOT]   (default N = 150, ROOT = the repository)
Prints `LINES  FILE:LINE  NAME`, longest first; exit status 1 when any function is over N lines.
"""

import argparse
import os
import re
import sys


def mask(text):
    """Return `text` with comments, strings and char literals replaced by spaces (newlines kept)."""
    out = list(text)
    n = len(text)
    i = 0

    def blank(start, end):
        for k in range(start, min(end, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            end = text.find("\n", i)
            end = n if end < 0 else end
            blank(i, end)
            i = end
        elif c == "/" and nxt == "*":
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif c == "r" or (c == "b" and nxt == "r"):
            # A raw string r"..." / r#"..."# / br#"..."#, unless the letter ends an identifier.
            m = re.compile(r'b?r(#*)"').match(text, i)
            if m and not (i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")):
                close = '"' + m.group(1)
                end = text.find(close, m.end())
                end = n if end < 0 else end + len(close)
                blank(i, end)
                i = end
            else:
                i += 1
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            blank(i, j + 1)
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{7f}', b'x') or a lifetime ('a, 'static): a lifetime
            # has no closing quote right after its first character.
            if nxt == "\\":
                j = i + 2
                while j < n and text[j] != "'":
                    j += 1
                blank(i, j + 1)
                i = j + 1
            elif i + 2 < n and text[i + 2] == "'":
                blank(i, i + 3)
                i += 3
            else:
                i += 1
        else:
            i += 1
    return "".join(out)


def matching_brace(masked, open_at):
    """Index of the `}` closing the `{` at `open_at`, or None."""
    depth = 0
    for k in range(open_at, len(masked)):
        ch = masked[k]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return k
    return None


CFG_TEST = re.compile(r"#\[cfg\(test\)\]")
ATTRIBUTE = re.compile(r"\s*#\[[^\]]*\]")
FN = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")
IMPL_OR_TRAIT = re.compile(r"\b(impl|trait)\b")
MOD_DECL = re.compile(r"\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;")


def item_end(masked, start):
    """End index of the item starting at `start`: its `;` or the brace matching its first `{`."""
    for k in range(start, len(masked)):
        if masked[k] == ";":
            return k
        if masked[k] == "{":
            close = matching_brace(masked, k)
            return len(masked) - 1 if close is None else close
    return len(masked) - 1


def test_ranges(masked):
    """Character ranges of items annotated #[cfg(test)], and the names of `#[cfg(test)] mod x;`."""
    ranges, test_modules = [], []
    for m in CFG_TEST.finditer(masked):
        start = m.end()
        # Skip further attributes between #[cfg(test)] and the item.
        while True:
            attr = ATTRIBUTE.match(masked, start)
            if not attr:
                break
            start = attr.end()
        decl = MOD_DECL.match(masked, start)
        if decl:
            test_modules.append(decl.group(1))
        ranges.append((m.start(), item_end(masked, start)))
    return ranges, test_modules


def impl_blocks(masked):
    """(start, end, type name) of every impl and trait block, to name methods `Type::method`."""
    blocks = []
    for m in IMPL_OR_TRAIT.finditer(masked):
        open_at = masked.find("{", m.end())
        semi = masked.find(";", m.end())
        if open_at < 0 or (0 <= semi < open_at):
            continue
        header = masked[m.end() : open_at]
        header = re.sub(r"\bwhere\b.*", "", header, flags=re.S)
        if m.group(1) == "impl":
            header = re.sub(r"^\s*<.*?>(?=\s)", "", header, flags=re.S)  # impl<T> generics
            if re.search(r"\bfor\b", header):
                header = re.split(r"\bfor\b", header)[-1]
        header = re.sub(r"<.*", "", header.strip(), flags=re.S)  # Type<T> -> Type
        name = header.strip().split("::")[-1].strip("&' ") or "?"
        close = matching_brace(masked, open_at)
        if close is not None:
            blocks.append((open_at, close, name))
    return blocks


def long_functions(path, max_lines):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    masked = mask(text)
    excluded, test_modules = test_ranges(masked)
    blocks = impl_blocks(masked)
    found = []
    for m in FN.finditer(masked):
        if any(a <= m.start() <= b for a, b in excluded):
            continue
        # The body opens at the first `{` after the signature; a `;` first means no body.
        end = item_end(masked, m.end())
        if masked[end] != "}":
            continue
        first_line = masked.count("\n", 0, m.start()) + 1
        last_line = masked.count("\n", 0, end) + 1
        length = last_line - first_line + 1
        if length <= max_lines:
            continue
        owners = [blk for blk in blocks if blk[0] < m.start() < blk[1]]
        name = m.group(1)
        if owners:
            name = min(owners, key=lambda blk: blk[1] - blk[0])[2] + "::" + name
        found.append((length, path, first_line, name))
    return found, test_modules


def module_dir(path):
    """The folder in which `mod x;` of the file at `path` looks for x.rs or x/mod.rs."""
    stem = os.path.splitext(os.path.basename(path))[0]
    if stem in ("mod", "lib", "main"):
        return os.path.dirname(path)
    return os.path.join(os.path.dirname(path), stem)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-lines", type=int, default=150)
    default_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("root", nargs="?", default=default_root)
    args = parser.parse_args()

    files = []
    crates = os.path.join(args.root, "crates")
    for crate in sorted(os.listdir(crates)):
        src = os.path.join(crates, crate, "src")
        for dirpath, dirnames, filenames in os.walk(src):
            dirnames[:] = sorted(d for d in dirnames if d != "tests")
            files += [os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".rs")]

    # Test modules declared `#[cfg(test)] mod x;` live in files of their own: those files, and
    # every file below them, are test code.
    scans = {path: long_functions(path, args.max_lines) for path in files}
    test_files = set()
    for path, (_, test_modules) in scans.items():
        folder = module_dir(path)
        for name in test_modules:
            test_files.add(os.path.join(folder, name + ".rs"))
            test_files.add(os.path.join(folder, name, "mod.rs"))
    test_dirs = {module_dir(path) for path in test_files}

    def is_test(path):
        if path in test_files or os.path.basename(path) == "tests.rs":
            return True
        return any(path.startswith(folder + os.sep) for folder in test_dirs)

    found = [f for path, (functions, _) in scans.items() if not is_test(path) for f in functions]
    found.sort(key=lambda f: (-f[0], f[1], f[2]))
    for length, path, line, name in found:
        print(f"{length:5}  {os.path.relpath(path, args.root)}:{line}  {name}")
    if found:
        print(f"{len(found)} function(s) over {args.max_lines} lines")
        return 1
    print(f"no function over {args.max_lines} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
