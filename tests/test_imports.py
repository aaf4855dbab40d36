"""The module structure: no import cycle, in the Python package or in any Rust crate.

The graphs are tests/modgraph.py's: every import statement of the Python package (inside
functions too), every `use` and path of a Rust crate (a module's use of its own ancestors left
out). Then the finder and the builders on small synthetic sources, and the direction of the
Python subpackages (docs/architecture.md): cli -> htmlreport, advise -> study -> real -> base;
nothing imports cli."""

from __future__ import annotations

from pathlib import Path

import pytest

from modgraph import RUST_CRATES, all_cycles, find_cycle, python_graph, rust_graph

CRATES = sorted(p.name for p in RUST_CRATES.iterdir() if (p / "src").is_dir())


def shown(graph: dict[str, set[str]]) -> str:
    """Every cycle of the graph, one strongly connected set of modules a line."""
    return "\n".join(" ".join(c) for c in all_cycles(graph))


# --- the sources ---------------------------------------------------------------------------


def test_the_python_package_has_no_import_cycle_counting_imports_inside_functions():
    graph = python_graph()
    assert {"vmio", "vmio.cli", "vmio.study.runner", "vmio.real.engine", "vmio.sim"} <= set(graph)
    assert find_cycle(graph) is None, "cycles:\n" + shown(graph)


@pytest.mark.parametrize("crate", CRATES)
def test_a_rust_crate_has_no_module_cycle(crate):
    graph = rust_graph(crate)
    assert find_cycle(graph) is None, f"{crate} cycles:\n" + shown(graph)


# The subpackages' allowed imports (docs/architecture.md, "Python packages"): a module of the
# key may import modules of the packages listed, and of its own package.
LAYERS = {
    "base": set(),
    "real": {"base"},
    "study": {"real", "base"},
    "htmlreport": {"study", "real", "base"},
    "advise": {"study", "real", "base"},
    "cli": {"htmlreport", "advise", "study", "real", "base"},
}


def layer(module: str) -> str | None:
    """cli, htmlreport, advise, study, real or base for a module of vmio (None: the package `vmio`
    itself, whose `__init__` is the public API, `python -m vmio` and the fuzzer, which sit on
    top)."""
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in ("cli", "htmlreport", "advise", "study", "real"):
        return parts[1]
    if module in ("vmio", "vmio.__main__", "vmio.fuzz"):
        return None
    return "base"


def test_the_subpackages_import_only_downwards_cli_htmlreport_advise_study_real_base():
    graph = python_graph()
    wrong = []
    for module, imports in sorted(graph.items()):
        here = layer(module)
        if here is None:
            continue
        for target in sorted(imports):
            there = layer(target)
            if there is None and target != "vmio._native":
                wrong.append(f"{module} -> {target}")
            elif there not in (here, None) and there not in LAYERS[here]:
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_plot_and_tables_never_import_the_runner():
    graph = python_graph()
    for module in (
        "vmio.study.plot",
        "vmio.study.tables",
        "vmio.study.evaluation",
        "vmio.study.experiment",
    ):
        assert "vmio.study.runner" not in graph[module] and "vmio.study" not in graph[module]


# --- the cycle finder ----------------------------------------------------------------------


def test_the_cycle_finder_sees_a_cycle_through_several_modules():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_all_cycles_gives_each_set_of_modules_that_reach_each_other_once():
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": set(), "d": {"e"}, "e": {"f"}, "f": {"d"}}
    assert all_cycles(graph) == [["a", "b"], ["d", "e", "f"]]
    assert all_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


# --- the graph builders on synthetic sources -----------------------------------------------


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_an_inline_test_module_is_a_node_of_its_own_in_a_rust_crate(tmp_path):
    src = tmp_path / "src"
    write(
        src,
        {
            "lib.rs": "pub mod a;\npub mod b;\n",
            "a.rs": "pub struct A;\n#[cfg(test)]\nmod tests {\n    use crate::b::B;\n}\n",
            "b.rs": "use crate::a::A;\npub struct B(A);\n",
        },
    )
    graph = rust_graph(src)
    assert graph["crate::a::tests"] == {"crate::b"}
    assert graph["crate::b"] == {"crate::a"}
    assert graph["crate::a"] == set()
    assert find_cycle(graph) is None


def test_a_rust_path_in_code_and_a_use_tree_are_edges_and_a_modules_ancestor_is_not(tmp_path):
    src = tmp_path / "src"
    write(
        src,
        {
            "lib.rs": "pub mod layer;\npub mod other;\n",
            "layer/mod.rs": "pub mod child;\npub trait T {}\n",
            "layer/child.rs": "use super::T;\nfn f() { crate::other::g(); }\n",
            "other.rs": "use crate::{layer::{child, T}};\n// crate::nothing::here\n"
            'pub fn g() { let _ = "crate::layer"; }\n',
        },
    )
    graph = rust_graph(src)
    assert graph["crate::layer::child"] == {"crate::other"}  # super:: is its ancestor
    assert graph["crate::other"] == {"crate::layer", "crate::layer::child"}
    assert find_cycle(graph) == ["crate::layer::child", "crate::other", "crate::layer::child"]


def test_a_python_import_inside_a_function_is_an_edge(tmp_path):
    write(
        tmp_path / "pkg",
        {
            "__init__.py": '"""A package."""\n',
            "a.py": "def f():\n    from pkg import b\n    return b\n",
            "b.py": "import pkg.a\n",
        },
    )
    graph = python_graph(tmp_path / "pkg")
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.a"]


def test_from_a_module_import_a_name_names_the_submodule_when_there_is_one(tmp_path):
    write(
        tmp_path / "pkg",
        {
            "__init__.py": "",
            "sub/__init__.py": "X = 1\n",
            "sub/mod.py": "",
            "c.py": "from pkg.sub import mod\n",
            "d.py": "from pkg.sub import X\n",
            "e.py": "from .sub import mod as m\nfrom . import c\n",
            "f.py": "import pkg._native\nfrom pkg import _native\n",
        },
    )
    graph = python_graph(tmp_path / "pkg", native=("pkg._native",))
    assert graph["pkg.c"] == {"pkg.sub.mod"}
    assert graph["pkg.d"] == {"pkg.sub"}
    assert graph["pkg.e"] == {"pkg.sub.mod", "pkg.c"}
    assert graph["pkg.f"] == {"pkg._native"}  # the compiled module, not the package
    assert graph["pkg._native"] == set()
