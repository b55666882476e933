"""Entry-point registries: how openforge finds harnesses, environments, launchers, back-ends, recipes.

Owns: :class:`Registry` (a name → factory map with built-ins registered lazily as ``"module:attr"``
strings, plus third-party plugins found through the entry-point groups ``openforge.harnesses``,
``openforge.environments``, ``openforge.launchers``, ``openforge.backends``, ``openforge.recipes``)
and the five module-level registries with their ``get_*`` helpers.

A plugin package declares, in its ``pyproject.toml``::

    [project.entry-points."openforge.harnesses"]
    my-agent = "my_pkg.agent:MyHarness"

Nothing heavy is imported until a name is looked up, so ``import openforge`` stays light.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib import metadata
from typing import Any

from .errors import ConfigError

__all__ = [
    "BACKENDS",
    "ENVIRONMENTS",
    "HARNESSES",
    "LAUNCHERS",
    "RECIPES",
    "Registry",
    "get_backend",
    "get_environment",
    "get_harness",
    "get_launcher",
    "get_recipe",
]


def _load_ref(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    obj: Any = importlib.import_module(module)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


class Registry:
    """Names → objects (usually classes or factories) for one kind of plugin.

    Built-ins are registered as ``"package.module:Attr"`` strings and imported on first lookup.
    Entry points in ``group`` are read once, on the first lookup or listing; a built-in name wins
    over an entry point of the same name only if the entry point fails to load.
    """

    def __init__(self, kind: str, group: str):
        self.kind = kind
        self.group = group
        self._refs: dict[str, str | Any] = {}
        self._loaded: dict[str, Any] = {}
        self._scanned = False

    def register(self, name: str, obj: str | Any | None = None) -> Any:
        """Register ``obj`` (an object or a ``"module:attr"`` string) under ``name``.

        Usable as a decorator: ``@HARNESSES.register("mine")``.
        """
        if obj is None:

            def deco(target: Any) -> Any:
                self.register(name, target)
                return target

            return deco
        key = self._norm(name)
        self._refs[key] = obj
        self._loaded.pop(key, None)
        return obj

    @staticmethod
    def _norm(name: str) -> str:
        return name.strip().lower().replace("_", "-")

    def _scan(self) -> None:
        if self._scanned:
            return
        self._scanned = True
        try:
            eps = metadata.entry_points(group=self.group)
        except Exception:  # pragma: no cover - broken metadata of some unrelated dist
            return
        for ep in eps:
            key = self._norm(ep.name)
            # entry points do not shadow an explicitly registered object, only built-in refs
            if key not in self._refs or isinstance(self._refs[key], str):
                self._refs[key] = ep.value

    def names(self) -> list[str]:
        self._scan()
        return sorted(self._refs)

    def __contains__(self, name: str) -> bool:
        self._scan()
        return self._norm(name) in self._refs

    def get(self, name: str) -> Any:
        """Return the object registered under ``name`` (or named by a ``"module:Attr"`` reference);
        a clear :class:`ConfigError` if unknown or not loadable."""
        self._scan()
        key = self._norm(name)
        if key in self._loaded:
            return self._loaded[key]
        if key not in self._refs and ":" in name:  # a direct "package.module:Attr" reference
            self._refs[key] = name.strip()
        if key not in self._refs:
            known = ", ".join(self.names()) or "none"
            raise ConfigError(f"unknown {self.kind} {name!r} (known: {known}; plugins register under "
                              f"the entry-point group {self.group!r})")
        ref = self._refs[key]
        if isinstance(ref, str):
            try:
                obj = _load_ref(ref)
            except (ImportError, AttributeError) as e:
                raise ConfigError(f"{self.kind} {name!r} could not be loaded from {ref!r}: {e}") from e
        else:
            obj = ref
        self._loaded[key] = obj
        return obj

    def create(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Look ``name`` up and call it (a class or factory) with the given arguments."""
        factory: Callable[..., Any] = self.get(name)
        return factory(*args, **kwargs)


HARNESSES = Registry("harness", "openforge.harnesses")
ENVIRONMENTS = Registry("environment", "openforge.environments")
LAUNCHERS = Registry("launcher", "openforge.launchers")
BACKENDS = Registry("backend", "openforge.backends")
RECIPES = Registry("recipe", "openforge.recipes")

# Built-in harnesses (imported lazily on lookup).
for _name, _ref in {
    "react": "openforge.harnesses.react:ReactHarness",
    "codex": "openforge.harnesses.codex:CodexHarness",
    "claude-code": "openforge.harnesses.claude_code:ClaudeCodeHarness",
    "openclaw": "openforge.harnesses.openclaw:OpenClawHarness",
    "zeroclaw": "openforge.harnesses.zeroclaw:ZeroClawHarness",
    "pi": "openforge.harnesses.pi:PiHarness",
    "browser-use": "openforge.harnesses.browser_use:BrowserUseHarness",
    "computer-use": "openforge.harnesses.computer_use:ComputerUseHarness",
}.items():
    HARNESSES.register(_name, _ref)

LAUNCHERS.register("local", "openforge.launchers.local:LocalLauncher")
LAUNCHERS.register("kubernetes", "openforge.launchers.kubernetes:KubernetesLauncher")


def get_harness(name: str) -> Any:
    """The harness class registered as ``name`` (built-in or ``openforge.harnesses`` entry point)."""
    return HARNESSES.get(name)


def get_environment(name: str) -> Any:
    return ENVIRONMENTS.get(name)


def get_launcher(name: str) -> Any:
    return LAUNCHERS.get(name)


def get_backend(name: str) -> Any:
    return BACKENDS.get(name)


def get_recipe(name: str) -> Any:
    return RECIPES.get(name)
