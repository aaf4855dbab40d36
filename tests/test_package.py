"""The package's public names: `vmio.__all__`, the lazy table `vmio._LAZY` (PEP 562's module
`__getattr__`) and the imports type checkers read agree, and every name resolves."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import vmio


def test_vmio_all_names_exactly_the_lazy_attributes():
    assert sorted(vmio.__all__) == sorted(vmio._LAZY)
    assert len(set(vmio.__all__)) == len(vmio.__all__)


@pytest.mark.parametrize("name", sorted(vmio._LAZY))
def test_each_lazy_name_resolves_to_the_object_its_module_defines(name):
    module = importlib.import_module(vmio._LAZY[name])
    assert getattr(vmio, name) is getattr(module, name)
    assert name in dir(vmio)


def test_the_type_checkers_imports_name_each_lazy_attribute_from_its_module():
    tree = ast.parse(Path(vmio.__file__).read_text(encoding="utf-8"))
    block = next(
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    )
    imported = {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert imported == vmio._LAZY


def test_a_name_that_is_not_public_is_an_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="module 'vmio' has no attribute 'simulat'"):
        vmio.simulat  # noqa: B018


def test_star_import_in_a_fresh_interpreter_binds_every_public_name():
    code = "from vmio import *; import vmio; print(all(n in globals() for n in vmio.__all__))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "True", r.stderr
