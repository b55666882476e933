"""What shaped a cached result, as content hashes: the parts of a cache key that a fixed version number
cannot give.

Owns: :func:`code_digest` (openforge's own code that shapes a scope of results), :func:`classes_digest`
(plug-in classes' source: harnesses, environments), :func:`tasks_digest` (the tasks as data, and the files
their environment hides from the agent: its checks, answer keys, task directories), :func:`path_digest`
(a file's or a folder's content), :func:`local_spec_digest` (a local file or model folder named in a spec)
and :func:`model_files`.

openforge's ``__version__`` stays ``0.1.0`` from change to change, so a key built on it reused a held-out
point, or a warm-start, made under an older harness prompt, renderer or outcome rule. The cached results'
keys (:func:`openforge.runner.heldout_eval.before_key`, :func:`openforge.runner.teacher.warm_start_key`) hold these
digests instead. What counts:

- **openforge's code** (:data:`SCOPES`): every file of the installed package (modules, chat templates,
  prompt files) except the folders and modules that cannot change the result. ``rollout`` (a held-out
  point: the harnesses, the proxy's rendering, parsing and sampling, the launchers, outcome rules,
  environments, the point's numbers) leaves out ``cli/``, ``devtools/``, ``store/``, ``recipes/``
  (their values are in the key as config), ``train/`` and the GRPO step's own modules;
  ``warmstart`` (an SFT warm-start) also counts ``train/`` and ``runner/teacher.py``.
- **plug-in classes** from outside openforge (a harness or environment registered by entry point,
  ``module:Class`` or ``register``): the folder of the class's package (every file, recursively), or for
  a top-level module the Python files beside it (what a harness binds as its agent files), and the same for
  each base class that is itself a harness or an environment.
- **tasks**: every field of every task (metadata included: expected answers, solutions), and the content
  of what the environment hides from the agent (:meth:`Environment.hidden_paths`: a task directory with its
  ``verify.py``, an answer file).
- **libraries** that sample and render: the versions of torch, transformers, tokenizers and jinja2.

Regular files up to :data:`CONTENT_LIMIT` bytes count by content (up to :data:`CONTENT_BUDGET` in all per
digest of plug-in or task files); bigger ones (weights, data) by size and modification time; links by
their target; other files (a FIFO) by their type, never opened.
openforge's code is hashed once per process (a few hundred files, milliseconds).
"""

from __future__ import annotations

import hashlib
import inspect
import os
import stat
import sys
from collections.abc import Iterable, Sequence
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..core.task import Task
    from ..environment import Environment

__all__ = ["CONTENT_BUDGET", "CONTENT_LIMIT", "OPENFORGE_ROOT", "SCOPES", "classes_digest", "code_digest", "library_versions",
           "local_spec_digest", "model_files", "path_digest", "shaping", "tasks_digest"]

_PACKAGE = Path(__file__).resolve().parents[1]  # openforge/, above runner/
#: The openforge package whose code :func:`code_digest` hashes (the tests point it at a copy).
OPENFORGE_ROOT = _PACKAGE
#: Files up to this size count by content, bigger ones by size and modification time.
CONTENT_LIMIT = 1 << 20
#: What one digest of plug-in or task files reads by content at most; the files after it count by size and time.
CONTENT_BUDGET = 64 << 20

Scope = Literal["rollout", "warmstart"]
_NEVER = ("cli", "devtools", "store", "recipes", "runner/task_cursor.py", "runner/step_sampling.py",
          "runner/run_health.py")
#: Per scope, the paths (relative to the package: a folder or a file) whose content cannot change such a result.
SCOPES: dict[str, tuple[str, ...]] = {
    "rollout": (*_NEVER, "train", "runner/teacher.py"),
    "warmstart": _NEVER,
}
_COMPILED = (".pyc", ".pyo")
_LIBRARIES = ("torch", "transformers", "tokenizers", "jinja2")


def shaping(cfg: RunConfig, tasks: Sequence[Task], env: Environment, scope: Scope) -> dict[str, object]:
    """The content part of a cache key for a ``scope`` result of run ``cfg`` on ``tasks`` of ``env``:
    openforge's code, the run's harness and environment classes, the tasks and what ``env`` hides for
    them, a local model folder's files, the libraries' versions (the caller adds the config values)."""
    from ..environment import Environment
    from ..harness import Harness
    from ..plugins import environment_class, harness_class

    harnesses = [harness_class(n) for n in cfg.harness.names()]
    return {"code": code_digest(scope), "harness_code": classes_digest(harnesses, Harness),
            "env_code": classes_digest([environment_class(cfg.env.name), type(env)], Environment),
            "tasks": tasks_digest(tasks, env), "model_files": model_files(cfg.model.name),
            "libraries": library_versions()}


def code_digest(scope: Scope) -> str:
    """The hash of openforge's own files that shape a ``scope`` result (see the module docstring)."""
    return _tree_digest(OPENFORGE_ROOT, SCOPES[scope])


@cache
def _tree_digest(root: Path, excluded: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for rel, token in _tree(root):
        if not any(rel == e or rel.startswith(f"{e}/") for e in excluded):
            h.update(rel.encode("utf-8", "surrogateescape") + b"\0" + token + b"\0")
    return h.hexdigest()


@cache
def _tree(root: Path) -> tuple[tuple[str, bytes], ...]:
    """Each file under ``root``: its relative path and :func:`_file_token` (read once per process)."""
    return tuple((p.relative_to(root).as_posix(), _file_token(p)) for p in _files(root))


def path_digest(paths: Iterable[str | os.PathLike[str]]) -> str:
    """The content of files and folders (recursively; a missing one counts as missing), wherever they lie:
    each by its name and the paths inside it, not by where it is."""
    roots = {Path(p).resolve() for p in paths}
    return hashlib.sha256("\n".join(sorted(_root_digest(p) for p in roots)).encode()).hexdigest()


def _root_digest(root: Path) -> str:
    if root.is_dir():
        return _digest((f.relative_to(root).as_posix(), f) for f in _files(root))
    return _digest([(root.name, root if root.exists() or root.is_symlink() else None)])


def classes_digest(classes: Iterable[type], base: type) -> str:
    """The source of each class (and of each base class that is a ``base`` subclass) from outside
    openforge: its package's folder, or the Python files beside a top-level module."""
    paths: set[Path] = set()
    for cls in classes:
        for c in cls.__mro__:
            if issubclass(c, base):
                paths |= _source_of(c)
    return path_digest(sorted(p for p in paths if not _in_openforge(p)))


def _in_openforge(path: Path) -> bool:
    """Inside openforge's own package (counted by :func:`code_digest`, scope by scope)."""
    return any(root == path or root in path.parents for root in {_PACKAGE, OPENFORGE_ROOT})


def _source_of(cls: type) -> set[Path]:
    module = sys.modules.get(cls.__module__)
    try:
        file = Path(inspect.getfile(cls)).resolve()
    except (TypeError, OSError):  # a builtin, a class typed into an interactive session
        return set()
    if module is not None and module.__package__:  # the package's folder, whichever of its modules holds it
        return {file.parent}
    return {*file.parent.glob("*.py"), file}


def tasks_digest(tasks: Sequence[Task], env: Environment | None = None) -> str:
    """Every field of every task, and the content of the paths ``env`` hides from the agent for them
    (those inside openforge count in :func:`code_digest`)."""
    h = hashlib.sha256()
    for t in tasks:
        h.update(t.model_dump_json().encode())
        h.update(b"\0")
    hidden = {Path(p).resolve() for t in tasks for p in env.hidden_paths(t)} if env is not None else set()
    h.update(path_digest(p for p in hidden if not _in_openforge(p)).encode())  # openforge's: by code_digest
    return h.hexdigest()


def model_files(name: str) -> list[list[object]] | None:
    """A local model folder's files (name, size, modification time); None for a hub name or an alias."""
    model = Path(name).expanduser()
    if not model.is_dir():
        return None
    return sorted([f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in model.iterdir() if f.is_file())


def local_spec_digest(spec: str) -> str | None:
    """The content of the local file or folder a back-end spec names (``scripted:FILE``,
    ``transformers:DIR``); None when it names nothing local (``reference``, a URL, a hub name)."""
    _, sep, arg = spec.partition(":")
    p = Path(arg).expanduser() if sep and arg else None
    return path_digest([p]) if p is not None and p.exists() else None


def library_versions() -> dict[str, str | None]:
    """The installed versions of the libraries that sample and render (None: not installed)."""
    return {name: _version(name) for name in _LIBRARIES}


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _files(root: Path) -> list[Path]:
    """The regular files under ``root``, sorted, without bytecode caches (links are not followed)."""
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        out += [Path(dirpath) / f for f in filenames if not f.endswith(_COMPILED)]
    return sorted(out)


def _digest(entries: Iterable[tuple[str, Path | None]]) -> str:
    h = hashlib.sha256()
    budget = [CONTENT_BUDGET]  # bytes still read by content in this digest
    for name, path in entries:
        h.update(name.encode("utf-8", "surrogateescape") + b"\0" + _file_token(path, budget) + b"\0")
    return h.hexdigest()


def _file_token(path: Path | None, budget: list[int] | None = None) -> bytes:
    """A regular file's content (its hash), or its size and time when it is big or the digest has read
    :data:`CONTENT_BUDGET` already; a link by its target; anything else (a FIFO, a socket) by its type,
    never opened."""
    if path is None:
        return b"missing"
    try:
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            return b"link:" + os.readlink(path).encode("utf-8", "surrogateescape")
        if not stat.S_ISREG(st.st_mode):
            return f"special:{stat.S_IFMT(st.st_mode)}".encode()
        if st.st_size > CONTENT_LIMIT or (budget is not None and budget[0] < st.st_size):
            return f"big:{st.st_size}:{st.st_mtime_ns}".encode()
        if budget is not None:
            budget[0] -= st.st_size
        return hashlib.sha256(path.read_bytes()).digest()
    except OSError as e:  # unreadable: count it as such, do not fail the run over a cache key
        return f"unreadable:{type(e).__name__}".encode()
