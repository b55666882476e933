"""The one registry: how openforge finds harnesses, environments, launchers, back-ends and recipes.

Owns: :class:`Registry`, the five registries (:data:`HARNESSES`, :data:`ENVIRONMENTS`,
:data:`LAUNCHERS`, :data:`BACKENDS`, :data:`RECIPES`) with every built-in registered here and
nowhere else, and the lookups. Two verbs, never mixed:

- ``harness_class(name)``, ``environment_class(name)``, ``launcher_class(name)``,
  ``backend_factory(kind)``: the registered class (or factory), nothing built;
- ``make_harness(name, **options)``, ``make_environment(name, **options)``,
  ``make_launcher(name, **options)``, ``make_backend(spec, ...)``: an instance.

Names are case-insensitive and ``_`` = ``-``. A name can also be a ``package.module:Attr``
reference, and an environment can be a path to a task directory or a folder of them.

**Shadowing rule (the same for every kind): a name means one thing, and nothing replaces it
silently.** Built-ins come first, then what code registers with :meth:`Registry.register`, then
the entry points of installed packages. Registering a taken name raises :class:`ConfigError`
(unless ``replace=True``); an entry point or a task folder whose name is taken is skipped with a
:class:`PluginShadowWarning` that says how to reach it (its ``module:Attr`` reference, ``./name``).

Third-party plugins register in their ``pyproject.toml`` under the entry-point groups
``openforge.harnesses``, ``openforge.environments``, ``openforge.launchers``, ``openforge.backends``
and ``openforge.recipes``::

    [project.entry-points."openforge.harnesses"]
    my-agent = "my_pkg.agent:MyHarness"

A plugin whose import fails for a missing module is a :class:`PluginUnavailable` naming the pip
extra that installs it (``pip install 'openforge-rl[browser]'``, found by :mod:`openforge.util.extras`).
Nothing heavy is imported until a name is looked up, so ``import openforge`` stays light.
"""

from __future__ import annotations

import difflib
import importlib
import warnings
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .core.errors import ConfigError, PluginNotFound, PluginUnavailable
from .util.extras import DISTRIBUTION, install_hint

if TYPE_CHECKING:
    from .environment import Environment
    from .harness import Harness
    from .launchers.base import Launcher
    from .proxy.backends.base import Backend

__all__ = [
    "BACKENDS",
    "ENVIRONMENTS",
    "HARNESSES",
    "LAUNCHERS",
    "RECIPES",
    "PluginShadowWarning",
    "Registry",
    "backend_factory",
    "environment_class",
    "harness_class",
    "launcher_class",
    "list_environments",
    "load_ref",
    "make_backend",
    "make_environment",
    "make_harness",
    "make_launcher",
]

_OPENFORGE = DISTRIBUTION  # the distribution whose extras install the built-ins' dependencies


class PluginShadowWarning(UserWarning):
    """An entry point (or a task folder) was skipped because its name is already taken."""


def load_ref(ref: str) -> Any:
    """The object a ``module:attr.path`` reference names (the module imported; ``module`` alone is the
    module)."""
    module, _, attr = ref.partition(":")
    obj: Any = importlib.import_module(module.strip())
    for part in filter(None, attr.strip().split(".")):
        obj = getattr(obj, part)
    return obj


def import_hint(module: str, cwd: Path | None = None) -> str:
    """Why a ``module:Class`` reference's module does not import, and the fix: where a folder or file of
    that name lies below ``cwd`` (default: the current folder), the ``PYTHONPATH`` that finds it."""
    top = module.split(".")[0]
    base = cwd or Path.cwd()
    found = sorted({p.parent for pat in (top, f"{top}.py", f"*/{top}", f"*/{top}.py") for p in base.glob(pat)
                    if not any(part.startswith(".") for part in p.relative_to(base).parts)})
    if found:
        where = found[0].relative_to(base).as_posix() if found[0] != base else "."
        return (f" (`{top}` is in {'this folder' if where == '.' else f'./{where}'}, where Python does not look: "
                f"run with PYTHONPATH={where}, or pip install the package that holds it)")
    return (f" (Python finds `{top}` neither on sys.path nor installed: put the folder that holds it on PYTHONPATH, "
            "or pip install the package; a forge command does not import from the current folder)")


def _attr_hint(ref: str, e: BaseException) -> str:
    """For ``module:Class`` whose module imports but lacks ``Class``: the names it has that are close."""
    if not isinstance(e, AttributeError):
        return ""
    module, _, attr = ref.partition(":")
    try:
        names = [n for n in dir(importlib.import_module(module.strip())) if not n.startswith("_")]
    except Exception:
        return ""
    close = difflib.get_close_matches(attr.strip().split(".")[0], names, n=2)
    return f" (did you mean {' or '.join(f'{module.strip()}:{c}' for c in close)}?)" if close else ""


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-")


class Registry:
    """Names → objects (classes or factories) for one kind of plugin, under the module's shadowing rule.

    ``builtins`` maps names to objects or lazily imported ``"package.module:Attr"`` strings (or is
    a function returning such a map, called on first use). Entry points in ``group`` are read once,
    on the first lookup or listing.
    """

    def __init__(self, kind: str, group: str,
                 builtins: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None):
        self.kind = kind
        self.group = group
        self._builtins = builtins
        self._refs: dict[str, Any] = {}  # name → object or "module:attr" string
        self._origin: dict[str, str] = {}  # name → "built-in" / "registered" / "entry point of DIST"
        self._dist: dict[str, str | None] = {}  # name → the distribution whose extras hint at a fix
        self._loaded: dict[str, Any] = {}
        self._builtins_added = False
        self._scanned = False

    # -- registration --------------------------------------------------------------------------

    def register(self, name: str, obj: Any = None, *, replace: bool = False) -> Any:
        """Register ``obj`` (an object or a ``"module:attr"`` string) under ``name``; a taken name
        is a :class:`ConfigError` unless ``replace``. Usable as a decorator: ``@HARNESSES.register("mine")``."""
        if obj is None:

            def deco(target: Any) -> Any:
                self.register(name, target, replace=replace)
                return target

            return deco
        self._add_builtins()
        key = _norm(name)
        if key in self._refs and not replace:
            raise ConfigError(f"{self.kind} {name!r} is already registered ({self.origin(key)}); "
                              f"pass replace=True to replace it")
        self._put(key, obj, "registered", None)
        return obj

    def unregister(self, name: str) -> None:
        """Forget what ``name`` was registered as (a test's registration, say); built-ins come back
        only with a new :class:`Registry`."""
        key = _norm(name)
        for d in (self._refs, self._origin, self._dist, self._loaded):
            d.pop(key, None)

    def _put(self, key: str, obj: Any, origin: str, dist: str | None) -> None:
        self._refs[key] = obj
        self._origin[key] = origin
        self._dist[key] = dist
        self._loaded.pop(key, None)

    def _add_builtins(self) -> None:
        if self._builtins_added:
            return
        self._builtins_added = True
        found = self._builtins() if callable(self._builtins) else (self._builtins or {})
        for name, obj in found.items():
            self._put(_norm(name), obj, "built-in", _OPENFORGE)

    def _scan(self) -> None:
        self._add_builtins()
        if self._scanned:
            return
        self._scanned = True
        try:
            eps = metadata.entry_points(group=self.group)
        except Exception:  # pragma: no cover - broken metadata of some unrelated dist
            return
        for ep in eps:
            key = _norm(ep.name)
            dist = getattr(getattr(ep, "dist", None), "name", None)
            if key in self._refs:
                warnings.warn(f"{self.kind} {ep.name!r} of the entry point {ep.value!r}"
                              f"{f' (package {dist})' if dist else ''} is ignored: the name is taken by "
                              f"the {self.origin(key)} one. Use it by its reference {ep.value!r}",
                              PluginShadowWarning, stacklevel=4)
                continue
            self._put(key, ep.value, f"entry point of {dist}" if dist else "entry point", dist)

    # -- lookup ----------------------------------------------------------------------------------

    def names(self) -> list[str]:
        self._scan()
        return sorted(self._refs)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        self._scan()
        return _norm(name) in self._refs

    def origin(self, name: str) -> str:
        """Where ``name`` comes from: ``built-in``, ``registered`` or ``entry point of DIST``."""
        return self._origin.get(_norm(name), "registered")

    def get(self, name: str) -> Any:
        """The object registered as ``name`` (or named by a ``"module:Attr"`` reference):
        :class:`PluginNotFound` if unknown, :class:`PluginUnavailable` if it cannot be imported."""
        self._scan()
        key = _norm(name)
        if key in self._loaded:
            return self._loaded[key]
        if key not in self._refs:
            if ":" not in name:
                raise self.unknown(name)
            ref, dist = name.strip(), None  # a direct "package.module:Attr" reference
        else:
            ref, dist = self._refs[key], self._dist.get(key)
        obj = self._import(name, ref, dist) if isinstance(ref, str) else ref
        self._loaded[key] = obj
        return obj

    def unknown(self, name: str, also: str = "") -> PluginNotFound:
        """The error for an unknown ``name``: the known names, close matches, the entry-point group."""
        known = self.names()
        close = difflib.get_close_matches(_norm(name), known, n=2)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        return PluginNotFound(f"unknown {self.kind} {name!r} ({hint}known: {', '.join(known) or 'none'}{also}; "
                              f"plugins register under the entry-point group {self.group!r})")

    def _import(self, name: str, ref: str, dist: str | None) -> Any:
        try:
            return load_ref(ref)
        except ModuleNotFoundError as e:
            raise self.unavailable(name, e, dist, ref) from e
        except (ImportError, AttributeError) as e:
            raise PluginUnavailable(f"{self.kind} {name!r} could not be loaded from {ref!r}: {e}"
                                    f"{_attr_hint(ref, e)}") from e

    def unavailable(self, name: str, e: ModuleNotFoundError, dist: str | None, ref: str | None = None) -> PluginUnavailable:
        """The error for ``name`` whose import (or construction) lacks a module, with the pip extra."""
        missing = e.name or ""
        own = ref is not None and (ref.partition(":")[0].strip() + ".").startswith(missing + ".")
        if own or not missing:  # the plugin's own module is missing: no extra installs that
            where = f" from {ref!r}" if ref else ""
            hint = import_hint(missing) if own and dist is None else ""
            return PluginUnavailable(f"{self.kind} {name!r} could not be loaded{where}: {e}{hint}",
                                     missing=missing or None)
        cmd = install_hint(dist, missing)
        fix = f"install it with `{cmd}`" if cmd else f"install the package that provides `{missing.split('.')[0]}`"
        return PluginUnavailable(f"{self.kind} {name!r} needs the module `{missing}`, which is not installed: {fix}",
                                 missing=missing, install=cmd)

    def create(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Look ``name`` up and call it (a class or factory) with the given arguments; a module
        missing at construction is a :class:`PluginUnavailable` with the pip extra, too."""
        factory: Callable[..., Any] = self.get(name)
        try:
            return factory(*args, **kwargs)
        except ModuleNotFoundError as e:
            raise self.unavailable(name, e, self._dist.get(_norm(name))) from e


# -- the registries and every built-in --------------------------------------------------------


def _builtin_recipes() -> dict[str, Path]:
    """The recipe folders shipped in ``openforge/recipes/`` (``claw_grpo/`` → ``claw-grpo``)."""
    here = Path(__file__).resolve().parent / "recipes"
    return {p.name.replace("_", "-"): p for p in sorted(here.iterdir())
            if p.is_dir() and (p / "config.yaml").is_file()}


HARNESSES = Registry("harness", "openforge.harnesses", {
    "react": "openforge.harnesses.react:ReactHarness",
    "codex": "openforge.harnesses.codex:CodexHarness",
    "claude-code": "openforge.harnesses.claude_code:ClaudeCodeHarness",
    "openclaw": "openforge.harnesses.openclaw:OpenClawHarness",
    "zeroclaw": "openforge.harnesses.zeroclaw:ZeroClawHarness",
    "pi": "openforge.harnesses.pi:PiHarness",
    "opencode": "openforge.harnesses.opencode:OpencodeHarness",
    "gemini-cli": "openforge.harnesses.gemini_cli:GeminiCliHarness",
    "qwen-code": "openforge.harnesses.qwen_code:QwenCodeHarness",
    "crush": "openforge.harnesses.crush:CrushHarness",
    "browser-use": "openforge.harnesses.browser_use:BrowserUseHarness",
    "computer-use": "openforge.harnesses.computer_use:ComputerUseHarness",
    "aider": "openforge.harnesses.aider:AiderHarness",
    "mini-swe-agent": "openforge.harnesses.mini_swe_agent:MiniSweAgentHarness",
    "hermes-agent": "openforge.harnesses.hermes_agent:HermesAgentHarness",
    "kilocode": "openforge.harnesses.kilocode:KilocodeHarness",
    "continue": "openforge.harnesses.continue_cli:ContinueHarness",
})
ENVIRONMENTS = Registry("environment", "openforge.environments", {
    "claw": "openforge.envs.claw:ClawEnvironment",
    "browser": "openforge.envs.browser:BrowserEnvironment",
    "desktop": "openforge.envs.desktop:DesktopEnvironment",
})
LAUNCHERS = Registry("launcher", "openforge.launchers", {
    "local": "openforge.launchers.local:LocalLauncher",
    "kubernetes": "openforge.launchers.kubernetes:KubernetesLauncher",
})
# a back-end is built from a ``KIND:ARG`` spec: ``factory(ARG, tokenizer=, model=, api_key=)``
BACKENDS = Registry("backend", "openforge.backends", {
    "scripted": "openforge.proxy.backends.factories:scripted",
    "transformers": "openforge.proxy.backends.factories:transformers",
    "vllm": "openforge.proxy.backends.factories:vllm",
    "openai": "openforge.proxy.backends.factories:openai",
})
# a recipe is a folder with config.yaml (+ README.md), or a callable / "module:attr" returning one
RECIPES = Registry("recipe", "openforge.recipes", _builtin_recipes)


def _subclass(reg: Registry, name: str, base: type) -> Any:
    cls = reg.get(name)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigError(f"{reg.kind} {name!r} is {cls!r}, not a subclass of {base.__module__}.{base.__qualname__}")
    return cls


def harness_class(name: str) -> type[Harness]:
    """The :class:`~openforge.harness.Harness` subclass registered as ``name``, or the one a harness
    spec file declares when ``name`` is a path ending in ``.yaml`` / ``.yml`` / ``.toml``."""
    from .harness import Harness
    from .harnesses.spec import is_spec_path

    if is_spec_path(name):
        from .harnesses.spec_harness import spec_harness_class

        return spec_harness_class(name)
    if name not in HARNESSES.names():
        from .harnesses.versions import UNSUPPORTED

        if name in UNSUPPORTED:
            raise PluginNotFound(f"harness {name!r} is not supported yet: {UNSUPPORTED[name]}")
    return _subclass(HARNESSES, name, Harness)


def make_harness(name: str, **options: Any) -> Harness:
    """A harness instance: ``harness_class(name)(**options)``."""
    cls = harness_class(name)
    from .harnesses.spec import is_spec_path

    return cls(**options) if is_spec_path(name) else HARNESSES.create(name, **options)


def launcher_class(name: str) -> type[Launcher]:
    """The :class:`~openforge.launchers.base.Launcher` subclass registered as ``name``."""
    from .launchers.base import Launcher

    return _subclass(LAUNCHERS, name, Launcher)


def make_launcher(name: str, **options: Any) -> Launcher:
    """A launcher instance: ``launcher_class(name)(**options)``."""
    launcher_class(name)
    return LAUNCHERS.create(name, **options)


def list_environments() -> list[str]:
    """The registered environment names (built-ins and ``openforge.environments`` entry points)."""
    return ENVIRONMENTS.names()


def _task_dir(name: str | Path) -> Path | None:
    """``name`` as a task-directory path, if it is one. A registered name wins over a folder of the
    same name in the working directory (warned: write ``./name`` for the folder)."""
    if isinstance(name, Path):
        return name
    looks_like_path = "/" in name or "\\" in name or name.startswith((".", "~"))
    p = Path(name).expanduser()
    if looks_like_path:
        return p if ":" not in name or p.exists() else None
    if not p.is_dir():
        return None
    if name in ENVIRONMENTS:
        warnings.warn(f"environment {name!r} is the {ENVIRONMENTS.origin(name)} one, not the folder {name}/ here; "
                      f"write ./{name} for the folder", PluginShadowWarning, stacklevel=3)
        return None
    return p


def environment_class(name: str | Path) -> type[Environment]:
    """The :class:`~openforge.environment.Environment` subclass registered as ``name``
    (:class:`~openforge.envs.taskdir.TaskDirEnvironment` for a path to a task directory)."""
    from .environment import Environment

    path = _task_dir(name)
    if path is not None:
        if _harbor_folder(path):
            from .envs.harbor import HarborEnvironment

            return HarborEnvironment
        from .envs.taskdir import TaskDirEnvironment

        return TaskDirEnvironment
    return _subclass(ENVIRONMENTS, str(name), Environment)


def _harbor_folder(path: Path) -> bool:
    """A Harbor task directory, or a folder of them (and of no openforge task directory)."""
    from .envs.harbor_format import is_harbor_task_dir

    if not path.is_dir():
        return False
    if is_harbor_task_dir(path):
        return True
    subs = [d for d in path.iterdir() if d.is_dir() and (d / "task.toml").is_file()]
    return bool(subs) and all(is_harbor_task_dir(d) for d in subs)


def make_environment(name: str | Path, **options: Any) -> Environment:
    """An environment instance by registered name, ``module:Class`` reference, or a path to a task
    directory / a folder of task directories. ``faults=`` (``env.options.faults``) is taken by the
    fault-injection layer (:mod:`openforge.faults`), which also wraps an environment whose tasks
    declare ``[[faults]]``; every other option goes to the environment."""
    from .faults.env import with_faults

    faults = options.pop("faults", None)
    path = _task_dir(name)
    if path is not None:
        if _harbor_folder(path):
            from .envs.harbor import HarborEnvironment

            return with_faults(HarborEnvironment(path, **options), faults)
        from .envs.taskdir import TaskDirEnvironment

        return with_faults(TaskDirEnvironment(path, **options), faults)
    if str(name) not in ENVIRONMENTS and ":" not in str(name):
        raise ENVIRONMENTS.unknown(str(name), also=", or a path to a task directory")
    environment_class(name)
    return with_faults(ENVIRONMENTS.create(str(name), **options), faults)


def backend_factory(kind: str) -> Callable[..., Backend]:
    """The factory registered for back-end ``kind``: ``factory(ARG, tokenizer=, model=, api_key=)``."""
    factory = BACKENDS.get(kind)
    if not callable(factory):
        raise ConfigError(f"backend {kind!r} is {factory!r}, not a callable that builds a back-end")
    return factory


def make_backend(spec: str, *, tokenizer: Any = None, model: str | None = None, api_key: str | None = None) -> Backend:
    """A back-end from ``KIND:ARG`` (``scripted:FILE``, ``transformers:MODEL``, ``vllm:URL``,
    ``openai:URL``, or a plugin's kind). ``tokenizer`` (an HF tokenizer or a local path/alias)
    overrides the default SmolLM2 tokenizer of ``scripted``/``vllm``/``openai``."""
    kinds = ", ".join(BACKENDS.names())
    if not isinstance(spec, str) or ":" not in spec:
        raise ConfigError(f"backend spec {spec!r}: expected KIND:ARG with KIND one of {kinds}")
    kind, arg = spec.split(":", 1)
    if not arg:
        raise ConfigError(f"backend spec {spec!r}: missing the part after '{kind}:'")
    if kind not in BACKENDS:
        raise BACKENDS.unknown(kind)
    backend_factory(kind)
    return BACKENDS.create(kind, arg, tokenizer=tokenizer, model=model, api_key=api_key)
