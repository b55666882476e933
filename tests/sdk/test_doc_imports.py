"""Every openforge name the docs use resolves: ``from openforge... import a, b``, ``import openforge.x``,
``python -m openforge.x``, ``::: openforge.x.Y`` (mkdocstrings) and dotted ``openforge.x.y`` uses in
README.md, CONTRIBUTING.md and docs/**/*.md, code blocks and prose alike. A module moved or a name
renamed without its page (or without an old-name alias: :data:`openforge._MOVED`) fails here."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from openforge import plugins

REPO = Path(__file__).resolve().parents[2]
PAGES = ["README.md", "CONTRIBUTING.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.md"))]

FROM_IMPORT = re.compile(r"from\s+(openforge(?:\.\w+)*)\s+import\s+(\([^)]*\)|[\w, \t]+(?:\\\n[\w, \t]+)*)")
IMPORT = re.compile(r"(?<![\w.])import\s+(openforge(?:\.\w+)+)")
RUN_MODULE = re.compile(r"-m\s+(openforge(?:\.\w+)+)")
DOTTED = re.compile(r"(?<![\w./\-@])(openforge(?:\.[A-Za-z_]\w*)+)(?![\w\-/])")
#: Dotted words that are not Python names: a Kubernetes label, file names.
NOT_NAMES = re.compile(r"^openforge\.(dev|yaml|yml|toml|json|db|log|md|txt|py|sock)\b")
#: The plug-in registries' entry-point groups (``openforge.environments``): names of groups, not modules.
GROUPS = {r.group for r in vars(plugins).values() if isinstance(r, plugins.Registry)}


def uses(text: str) -> list[tuple[str, str]]:
    """(kind, dotted name) of each use in ``text``: ``import`` → a module, ``name`` → a module or an
    attribute path."""
    out: list[tuple[str, str]] = []
    for m in FROM_IMPORT.finditer(text):
        names = re.sub(r"#[^\n]*", "", m.group(2)).strip("()").replace("\\\n", " ")
        for part in names.split(","):
            name = part.split(" as ")[0].strip()
            if name and name != "*":
                out.append(("name", f"{m.group(1)}.{name}"))
        out.append(("import", m.group(1)))
    out += [("import", m.group(1)) for m in IMPORT.finditer(text)]
    out += [("import", m.group(1)) for m in RUN_MODULE.finditer(text)]
    out += [("name", m.group(1)) for m in DOTTED.finditer(text)
            if not NOT_NAMES.match(m.group(1)) and m.group(1) not in GROUPS]
    return out


def resolve(kind: str, dotted: str) -> object:
    """The module (``import``) or the object (``name``: the longest importable prefix, then attributes)."""
    if kind == "import":
        return importlib.import_module(dotted)
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


@pytest.mark.parametrize("page", PAGES)
def test_every_openforge_name_on_the_page_resolves(page):
    text = (REPO / page).read_text(encoding="utf-8")
    bad = []
    for kind, dotted in dict.fromkeys(uses(text)):
        try:
            resolve(kind, dotted)
        except (ImportError, AttributeError) as e:
            bad.append(f"{dotted} ({kind}): {type(e).__name__}: {e}")
    assert not bad, f"{page} names what does not exist:\n" + "\n".join(bad)


def test_the_scan_finds_each_form():
    text = ("```python\nfrom openforge import Task, Harness\nfrom openforge.trajectory import (\n    Trajectory,  # x\n"
            "    build_segments,\n)\nimport openforge.rollout\n```\n`python -m openforge.devtools.archmap` and "
            "`openforge.runner.forge.Forge`, the label openforge.dev/role, the file openforge.yaml\n"
            "::: openforge.core.task.Task\n")
    found = set(uses(text))
    assert {("name", "openforge.Task"), ("name", "openforge.Harness"), ("name", "openforge.trajectory.Trajectory"),
            ("name", "openforge.trajectory.build_segments"), ("import", "openforge.trajectory"),
            ("import", "openforge.rollout"), ("import", "openforge.devtools.archmap"),
            ("name", "openforge.runner.forge.Forge"), ("name", "openforge.core.task.Task")} <= found
    assert not any(d == "openforge.dev" or d.startswith("openforge.yaml") for _, d in found)
    assert ("name", "openforge.environments") not in set(uses('the entry-point group "openforge.environments"'))
    with pytest.raises(AttributeError):
        resolve("name", "openforge.core.task.NoSuchThing")
    with pytest.raises(ModuleNotFoundError):
        resolve("import", "openforge.no_such_module")
