"""``docs/architecture.md`` matches the code: its module map is the one generated from the layer
declaration, every module it names exists, and every module of the package is in it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from openforge.devtools import archmap

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"


def named_paths(doc: str) -> set[str]:
    """Every ``openforge/...`` path the doc names (in backticks or link targets)."""
    return {m.rstrip("/") for m in re.findall(r"(openforge/[\w./]*\w/?)", doc)}


def named_in_map(doc: str) -> set[str]:
    """Dotted module names the generated map names: each row's module and the modules listed in it."""
    table = doc.split(archmap.BEGIN, 1)[1].split(archmap.END, 1)[0]
    out = set()
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != 4 or not cells[1].startswith("[`"):
            continue
        path = re.match(r"\[`(openforge/[^`]*)`\]", cells[1]).group(1)
        mod = path.removesuffix(".py").rstrip("/").replace("/", ".")
        out.add(mod)
        out.update(f"{mod}.{sub}" for sub in re.findall(r"`([\w.]+)`", cells[3]))
    return out


def test_the_map_is_generated_from_the_code():
    doc = DOC.read_text()
    assert archmap.splice(doc, archmap.render()) == doc, (
        "docs/architecture.md's module map is stale: python -m openforge.devtools.archmap --write")


def test_every_module_the_doc_names_exists():
    gone = sorted(p for p in named_paths(DOC.read_text()) if not (ROOT / p).exists())
    assert not gone, f"docs/architecture.md names files that do not exist: {gone}"


def test_every_module_is_in_the_doc():
    missing = sorted(set(archmap.all_modules()) - named_in_map(DOC.read_text()) - {"openforge"})
    assert not missing, f"modules missing from docs/architecture.md: {missing}"


def test_the_checks_see_drift(tmp_path):
    """A module the map lacks, a stale row, a renamed file: each is caught."""
    doc = DOC.read_text()
    table = archmap.render()
    dropped = "\n".join(line for line in table.splitlines() if "openforge/runner/seams.py" not in line) + "\n"
    assert "openforge.runner.seams" not in named_in_map(archmap.splice(doc, dropped))
    assert archmap.splice(doc, dropped) != doc
    fake = {**archmap.all_modules(), "openforge.gone_module": tmp_path / "gone_module.py"}
    (tmp_path / "gone_module.py").write_text('"""A module that is not there."""\n')
    assert "gone_module" not in archmap.render(fake)  # undeclared → the layer test fails, not a silent row
    assert not (ROOT / "openforge/store.py").exists() and "openforge/store.py" in named_paths("`openforge/store.py`")
    stale = tmp_path / "architecture.md"
    stale.write_text(archmap.splice(doc, dropped))
    assert archmap.main(["--check", str(stale)]) == 1
    assert archmap.main(["--write", str(stale)]) == 0 and archmap.main(["--check", str(stale)]) == 0
    with pytest.raises(ValueError, match="markers"):
        archmap.splice("no markers here", table)
