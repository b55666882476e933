"""Every benchmark still names real openforge code: each ``from openforge... import name`` in
``benchmarks/*.py`` (function-level imports included, where the slow benchmarks keep theirs) resolves.

The slow benchmarks are not run by the suite; without this check a refactor that moves a function
leaves a benchmark that fails only hours into its next run (``benchmarks/recovery.py`` did, importing
``warm_start`` from where it no longer lived)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[2] / "benchmarks").rglob("*.py"))


def _openforge_imports(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name) of every openforge import in the file (name None: ``import module``)."""
    out: list[tuple[int, str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "openforge":
            out += [(node.lineno, node.module or "", a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name, None) for a in node.names if a.name.split(".")[0] == "openforge"]
    return out


def test_the_benchmarks_are_found():
    assert {"recovery.py", "transfer.py", "finish_scaling.py"} <= {p.name for p in BENCHMARKS}


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_every_openforge_import_of_a_benchmark_resolves(path: Path):
    missing = []
    for line, module, name in _openforge_imports(path):
        try:
            mod = importlib.import_module(module)
        except ImportError as e:
            missing.append(f"{path.name}:{line}: import {module}: {e}")
            continue
        if name is not None and name != "*" and not hasattr(mod, name):
            try:
                importlib.import_module(f"{module}.{name}")  # a submodule
            except ImportError:
                missing.append(f"{path.name}:{line}: {module} has no {name!r}")
    assert not missing, "\n".join(missing)
