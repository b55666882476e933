"""``openforge.config`` is a package whose modules each own one part of the configuration, and every name
that code, tests, docs or benchmarks import from ``openforge.config`` (or name as ``openforge.config.X``)
is there."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import openforge.config as config

REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "openforge" / "config"
SOURCES = ("openforge", "tests", "benchmarks", "docs", "examples", "scripts", "README.md", "CONTRIBUTING.md")
# `from openforge.config import A, B` / `from .config import (A, B)` / `from ...config import A`
IMPORT = re.compile(r"from\s+(?:openforge|\.+)\.?config\s+import\s+(\([^)]*\)|[^\n]+)")
DOTTED = re.compile(r"\bopenforge\.config\.([A-Za-z_]\w*)")


def _files() -> list[Path]:
    out: list[Path] = []
    for rel in SOURCES:
        p = REPO / rel
        out += [p] if p.is_file() else [f for ext in ("*.py", "*.md") for f in p.rglob(ext)] if p.is_dir() else []
    return [f for f in out if PKG not in f.parents and f != Path(__file__).resolve()]  # not this file's samples


def _names(text: str) -> set[str]:
    """What ``text`` imports from, or names in, ``openforge.config``."""
    names = set()
    for m in IMPORT.finditer(text):
        clause = m.group(1).split("#")[0].strip("() \n")
        names |= {part.split(" as ")[0].strip() for part in clause.replace("\n", " ").split(",")} - {""}
    return names | set(DOTTED.findall(text))


def test_every_name_the_repo_takes_from_openforge_config_is_there():
    used: dict[str, set[str]] = {}
    for f in _files():
        for name in _names(f.read_text(encoding="utf-8", errors="replace")):
            used.setdefault(name, set()).add(str(f.relative_to(REPO)))
    assert {"RunConfig", "load_config", "dump_config", "parse_overrides", "LossAgg", "LoraConfig"} <= set(used)
    missing = {}
    for name, where in sorted(used.items()):
        try:
            importlib.import_module(f"openforge.config.{name}")
        except ModuleNotFoundError:
            if not hasattr(config, name):
                missing[name] = sorted(where)
    assert missing == {}, f"names taken from openforge.config that it no longer has: {missing}"


def test_the_scan_reads_every_import_form():
    text = ("from openforge.config import RunConfig, dump_config as dc  # noqa\n"
            "    from ..config import (\n    LossAgg,\n    SessionWeight,\n)\n"
            "from ...config import CPUTrainerConfig\n:class:`~openforge.config.LoraConfig`")
    assert _names(text) == {"RunConfig", "dump_config", "LossAgg", "SessionWeight", "CPUTrainerConfig",
                            "LoraConfig"}


def test_all_is_what_the_package_exports():
    assert sorted(config.__all__) == sorted(set(config.__all__))
    assert [n for n in config.__all__ if not hasattr(config, n)] == []


def test_each_module_says_what_it_owns_and_stays_small():
    mods = sorted(PKG.glob("*.py"))
    assert len(mods) > 1
    for path in mods:
        text = path.read_text(encoding="utf-8")
        assert ast.get_docstring(ast.parse(text)), f"{path.name} has no docstring saying what it owns"
        assert text.count("\n") < 500, f"{path.name} has {text.count(chr(10))} lines; split it"
