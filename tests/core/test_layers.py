"""The package's import graph: no cycle between modules, no upward import across the declared layers,
and ``ProxyServer(...)`` constructed in exactly one module outside tests (the composition root).

Every ``import`` / ``from ... import`` counts, at module level or inside a function (a lazy import is
still a dependency), and so does an ``if TYPE_CHECKING:`` one, for both rules: it never runs, but two
modules that name each other's types are one design (break such a circle with a Protocol in the lower
module, as :class:`~openforge.runner.heldout_eval.HeldoutHost` does), and a lower module that names a
higher one's type depends on it. ``openforge.plugins`` is the registry: it sits at the bottom so that anything may look a
plugin up by name, and it reaches the kinds it returns (harness, environment, launcher, back-end
classes) only at lookup time, so its own imports are exempt from the upward rule (not from the cycle
rule). The layers are declared in :mod:`openforge.devtools.layers`; ``docs/architecture.md`` shows them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import openforge
from openforge import _MOVED
from openforge.devtools.layers import LAYERS, REGISTRY, layer_of

PKG = Path(openforge.__file__).resolve().parent

def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in PKG.rglob("*.py")}


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The package module ``name`` lives in (``openforge.x.y`` → ``openforge.x`` when y is an attribute)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes inside ``if TYPE_CHECKING:`` blocks (they never run)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
                (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
                or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")):
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def imported_names(mod: str, path: Path, modules: dict[str, Path], *, type_checking: bool = False,
                   ) -> Iterator[tuple[str, int]]:
    """(absolute dotted name, line) of everything ``mod`` imports from (``from a.b import c`` → ``a.b.c``
    where that is a module, else ``a.b``), function-level imports too; ``if TYPE_CHECKING:`` ones only
    with ``type_checking``."""
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    skip = set() if type_checking else _type_checking_only(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up) + (f".{node.module}" if node.module else "")
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules or f"{base}.{a.name}" in _MOVED
                       else base for a in node.names]
        for t in targets:
            if t == "openforge" or t.startswith("openforge."):
                yield t, node.lineno


def imports_of(mod: str, path: Path, modules: dict[str, Path], *, type_checking: bool = False,
               ) -> Iterator[tuple[str, int]]:
    """(imported package module, line) for every import statement of ``mod`` (see :func:`imported_names`).
    An old, moved name (``openforge.errors``) counts as the module it names now."""
    for t, line in imported_names(mod, path, modules, type_checking=type_checking):
        owner = _owner(_new_name(t), modules)
        if owner is not None and owner != mod:
            yield owner, line


def _new_name(name: str) -> str:
    """``name`` with an old module prefix (:data:`openforge._MOVED`) replaced by the module's new name."""
    for old, new in _MOVED.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old):]
    return name


def import_graph(*, type_checking: bool = False) -> dict[str, dict[str, int]]:
    modules = all_modules()
    graph: dict[str, dict[str, int]] = {m: {} for m in modules}
    for m, p in modules.items():
        for dep, line in imports_of(m, p, modules, type_checking=type_checking):
            graph[m].setdefault(dep, line)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(graph.get(w, {}))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
    return out


def test_every_module_has_a_layer():
    unplaced = [m for m in all_modules() if m != "openforge" and layer_of(m) is None]
    assert not unplaced, f"modules missing from LAYERS: {unplaced}"


def test_no_import_cycle():
    """No circle, counting ``if TYPE_CHECKING:`` imports too."""
    found = cycles(import_graph(type_checking=True))
    assert not found, "import cycles between modules:\n" + "\n".join(" ↔ ".join(c) for c in found)


def test_no_upward_import():
    bad = []
    for mod, deps in import_graph(type_checking=True).items():
        lm = layer_of(mod)
        if mod in REGISTRY:
            continue
        for dep, line in deps.items():
            ld = layer_of(dep)
            if lm is not None and ld is not None and ld > lm:
                bad.append(f"{mod}:{line} imports {dep} (layer {ld} > {lm})")
    assert not bad, "upward imports:\n" + "\n".join(sorted(bad))


def test_proxy_server_is_built_in_one_place():
    where = []
    for mod, path in all_modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if name == "ProxyServer":
                    where.append(f"{mod}:{node.lineno}")
    assert len({w.split(":")[0] for w in where}) == 1 and where[0].startswith("openforge.runner.session:"), where


def test_the_checker_sees_cycles_and_upward_imports(tmp_path):
    """The checker itself: a function-level import closing a circle is a cycle."""
    g = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 3}, "d": {"a": 1}}
    assert cycles(g) == [["a", "b", "c"]]
    assert layer_of("openforge.proxy.backends.openai") < layer_of("openforge.runner.rollout") < layer_of("openforge.cli.main")
    mod = tmp_path / "m.py"
    mod.write_text("def f():\n    from .forge import Forge\n")
    modules = {"openforge.train.m": mod, "openforge.runner.forge": mod}
    assert list(imports_of("openforge.train.m", mod, modules)) == []  # relative to openforge.train: no such module
    mod.write_text("def f():\n    from ..runner.forge import Forge\n")
    assert list(imports_of("openforge.train.m", mod, modules)) == [("openforge.runner.forge", 2)]
    mod.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..runner.forge import Forge\n")
    assert list(imports_of("openforge.train.m", mod, modules)) == []  # never runs: not an upward import
    assert list(imports_of("openforge.train.m", mod, modules, type_checking=True)) == [("openforge.runner.forge", 3)]
    mod.write_text("def f():\n    from ..forge import Forge\n")  # an old name: the module it names now
    assert list(imports_of("openforge.train.m", mod, modules)) == [("openforge.runner.forge", 2)]


def test_every_declared_module_exists():
    """A module renamed or removed leaves no stale entry in the declaration (nor so in the map)."""
    modules = all_modules()
    stale = [pre for layer in LAYERS for pre in layer if pre not in modules]
    assert not stale, f"LAYERS names modules that do not exist: {stale}"


def test_no_module_imports_an_old_name():
    """Code inside openforge imports the moved modules by their new names (``openforge.core.errors``, not
    ``openforge.errors``): the old ones are for code outside, and the layer checks see the new ones."""
    modules = all_modules()
    old = []
    for mod, path in modules.items():
        for name, line in imported_names(mod, path, modules, type_checking=True):
            if _new_name(name) != name:
                old.append(f"{mod}:{line} imports {name}")
    assert not old, "imports by an old name (use the new one):\n" + "\n".join(sorted(set(old)))
