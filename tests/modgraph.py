"""The module graphs of vmio's sources, for the import-cycle checks of `test_imports.py`.

Rust (`rust_graph`): one node per source file of a crate's `src/` (`a/mod.rs` and `a.rs` are
module `a`; an inline `mod x { ... }` belongs to its file). An edge `A -> B` is any path in
file A that names module B or an item of it: `use` declarations (braces expanded), paths
written in code (`crate::x::y`, `super::z`, `self::w`). A `mod` declaration is containment, not
an edge; an inline module (`#[cfg(test)] mod tests { ... }`) is a node of its own, so a
module's unit tests may use the whole crate as the separate test files do. A path resolves to
the deepest module it names, so `crate::cache::linux::Linux` is an edge to `cache::linux` and
`crate::cache::CacheMode` one to `cache`. The one edge kind left out is a module's use of its
own ancestors (`super::Trait` from `sched/cfq.rs` to `sched/mod.rs`): a layer's `mod.rs` holds
its trait lattice and registry, and its children implement the trait and are named by the
registry, as in cloud-hypervisor's `block` crate. Every other pair of modules that name each
other, directly or through others, is a cycle.

Python (`python_graph`): one node per module of `python/vmio` (a package is its `__init__`).
An edge is every `import` and `from ... import` statement anywhere in the module, inside
functions, classes, `if` and `try` too: an import inside a function is an import all the same,
only later. `from vmio.a import b` names the module `vmio.a.b` when there is one, else
`vmio.a`; relative imports resolve against the importing module's package. A package's
implicit import of its parent packages is not an edge (`__init__` files stay small). The
compiled module (`vmio._native`, pyproject.toml's `[tool.maturin] module-name`) is a leaf node
of its own: importing it is not an import of the package `vmio`.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY_PACKAGE = ROOT / "python" / "vmio"
RUST_CRATES = ROOT / "crates"

# --- Rust ------------------------------------------------------------------------------------


def _strip_rust(text: str) -> str:
    """The source without comments, string and char literals (their contents could look like
    paths or braces)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i : i + 10]) and not text[i - 1 : i].isalnum():
            m = re.match(r'r(#*)"', text[i:])
            assert m
            end = text.find('"' + m.group(1), i + len(m.group(0)))
            out.append('""')
            i = n if end < 0 else end + 1 + len(m.group(1))
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            out.append('""')
            i += 1
        elif c == "'" and re.match(r"'(\\.[^']*|[^\\'])'", text[i : i + 12]):
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i : i + 12])
            assert m
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _expand_use(tree: str) -> list[str]:
    """`a::{b, c::{d, e}}` -> [`a::b`, `a::c::d`, `a::c::e`] (self kept as the prefix)."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+\w+", "", tree))
    if "{" not in tree:
        return [re.sub(r"::self$", "", tree)]
    head, _, rest = tree.partition("{")
    body = rest[: rest.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        if not p:
            continue
        if p == "self":
            out.append(head.rstrip(":"))
        else:
            out += _expand_use(head + p)
    return out


def _rust_files(src: Path) -> dict[tuple[str, ...], Path]:
    """Module path -> file, for every file of a crate's src/ reached by `mod` declarations
    (and binaries' roots: main.rs, examples are not in src/)."""
    files: dict[tuple[str, ...], Path] = {}
    for path in src.rglob("*.rs"):
        rel = path.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        if parts == ["lib"] or parts == ["main"]:
            key: tuple[str, ...] = ()
            if parts == ["main"]:
                key = ("<main>",)
        else:
            if parts[-1] == "mod":
                parts = parts[:-1]
            key = tuple(parts)
        files[key] = path
    return files


_PATH = re.compile(r"(?<![\w:])((?:crate|super|self)(?:::\s*(?:\w+|\{[^;]*?\}))+)")


def _rust_paths(code: str):
    """(position, path) for every `use` tree and every crate/super/self path in the code."""
    for m in re.finditer(r"\buse\s+([^;]+);", code):
        for p in _expand_use(m.group(1)):
            yield m.start(), p
    for m in _PATH.finditer(code):
        text = m.group(1)
        if "{" in text:
            continue  # inside a use tree, taken above
        yield m.start(), re.sub(r"\s+", "", text)


def _inline_modules(code: str) -> list[tuple[int, int, str]]:
    """(start, end, name) of every inline `mod name { ... }` in the code."""
    out = []
    for m in re.finditer(r"\bmod\s+(\w+)\s*\{", code):
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += code[i] == "{"
            depth -= code[i] == "}"
            i += 1
        out.append((m.start(), i, m.group(1)))
    return out


def rust_graph(crate: str | Path) -> dict[str, set[str]]:
    """The file-level module graph of one crate, named or given as its `src/` folder (module
    paths joined with `::`, the crate root is `crate`)."""
    src = crate if isinstance(crate, Path) else RUST_CRATES / crate / "src"
    files = _rust_files(src)
    modules = set(files)

    def name(key: tuple[str, ...]) -> str:
        return "::".join(("crate",) + key)

    def owner(mod: tuple[str, ...]) -> tuple[str, ...] | None:
        """The file module that holds `mod` (itself or an inline module's file)."""
        while mod not in modules:
            if not mod:
                return None
            mod = mod[:-1]
        return mod

    graph: dict[str, set[str]] = {name(k): set() for k in files}
    for key, path in files.items():
        code = _strip_rust(path.read_text(encoding="utf-8"))
        base = () if key == ("<main>",) else key
        inline = _inline_modules(code)
        for pos, p in _rust_paths(code):
            here = base + tuple(n for s, e, n in inline if s < pos < e)
            src_node = name(here)
            graph.setdefault(src_node, set())
            segs = [s for s in p.split("::") if s]
            if not segs:
                continue
            if segs[0] == "crate":
                target, segs = (), segs[1:]
            else:
                target = here
                while segs and segs[0] in ("self", "super"):
                    if segs[0] == "super":
                        target = target[:-1]
                    segs = segs[1:]
            # the deepest module the path names
            for s in segs:
                if target + (s,) in modules or any(
                    k[: len(target) + 1] == target + (s,) for k in modules
                ):
                    target = target + (s,)
                else:
                    break
            dest = owner(target)
            if dest is None or dest == here:
                continue
            if here[: len(dest)] == dest:
                continue  # a module's own ancestor: its layer's trait lattice
            graph[src_node].add(name(dest))
    return graph


# --- Python ----------------------------------------------------------------------------------


def python_modules(package: Path = PY_PACKAGE) -> dict[str, Path]:
    out = {}
    for p in package.rglob("*.py"):
        rel = p.relative_to(package.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def python_imports(module: str, path: Path, modules: set[str]) -> set[str]:
    """Every package module this module imports, anywhere in its body."""
    is_pkg = path.name == "__init__.py"
    package = module if is_pkg else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for a in node.names:
                n = a.name
                while n and n not in modules:
                    n = n.rpartition(".")[0]
                if n:
                    found.add(n)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            root = module.partition(".")[0]
            if not (mod == root or mod.startswith(root + ".")):
                continue
            for a in node.names:
                sub = f"{mod}.{a.name}"
                if sub in modules:
                    found.add(sub)
                else:
                    n = mod
                    while n and n not in modules:
                        n = n.rpartition(".")[0]
                    if n:
                        found.add(n)
    found.discard(module)
    return found


def native_modules() -> tuple[str, ...]:
    """The compiled modules of the package (pyproject.toml's `[tool.maturin] module-name`)."""
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as f:
        name = tomllib.load(f).get("tool", {}).get("maturin", {}).get("module-name")
    return (name,) if name else ()


def python_graph(
    package: Path = PY_PACKAGE, native: tuple[str, ...] | None = None
) -> dict[str, set[str]]:
    """The import graph of a package's modules; `native`: its compiled modules (leaf nodes;
    default: pyproject.toml's for vmio's own package, none for another)."""
    if native is None:
        native = native_modules() if package == PY_PACKAGE else ()
    mods = python_modules(package)
    names = set(mods) | set(native)
    graph = {name: python_imports(name, path, names) for name, path in mods.items()}
    return graph | {name: set() for name in native if name not in graph}


# --- cycles ----------------------------------------------------------------------------------


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the graph as a list of nodes (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def all_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (each a set of modules that
    reach each other), sorted: every cycle lies inside one of them."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
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
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            strong(v)
    return sorted(out)


if __name__ == "__main__":
    for crate in sorted(p.name for p in RUST_CRATES.iterdir() if (p / "src").is_dir()):
        for comp in all_cycles(rust_graph(crate)):
            print(f"{crate}: {' '.join(comp)}")
    for comp in all_cycles(python_graph()):
        print(f"python: {' '.join(comp)}")
