"""A run's parts by name: the environment, launcher, harness factory and back-end a config names.

Owns: :func:`load_environment`, :func:`load_launcher`, :func:`harness_factory` (a bad option refused
before any model loads), :func:`group_harnesses` / :func:`each_harness` (multi-harness runs),
:func:`backend_for` (a back-end spec, or ``reference``: the tasks' reference solutions replayed as a
scripted policy) and :func:`reference_script`. :class:`~openforge.runner.session.Session` assembles what
these build; everything heavy is imported when a part is made.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import ConfigError
from ..core.task import Task

if TYPE_CHECKING:
    from ..config import HarnessConfig
    from ..environment import Environment
    from ..harness import Harness
    from ..launchers.base import Launcher
    from ..proxy.backends.base import Backend
    from .harness_mix import GroupHarnesses

__all__ = ["backend_for", "each_harness", "group_harnesses", "harness_factory", "load_environment",
           "load_launcher", "reference_script"]


def load_environment(name: str | Path | Environment, options: Mapping[str, Any] | None = None) -> Environment:
    """An environment instance: a registered name or a folder of task directories (or one given)."""
    from ..environment import Environment
    from ..plugins import make_environment

    return name if isinstance(name, Environment) else make_environment(name, **dict(options or {}))


def load_launcher(name: str, options: Mapping[str, Any] | None = None) -> Launcher:
    from ..plugins import make_launcher

    return make_launcher(name, **dict(options or {}))


def harness_factory(name: str, options: Mapping[str, Any] | None = None) -> Callable[[], Harness]:
    """A factory of fresh harnesses; a bad option is refused now, before any model loads."""
    from ..plugins import harness_class

    cls = harness_class(name)
    opts = dict(options or {})
    try:
        cls(**opts)
    except TypeError as e:
        raise ConfigError(f"harness {name!r}: {e}") from None
    return lambda: cls(**opts)


def group_harnesses(cfg: HarnessConfig, names: Sequence[str]) -> GroupHarnesses:
    """Group ``i`` runs harness ``names[i]`` of ``cfg`` (each with its own options)."""
    from .harness_mix import GroupHarnesses

    return GroupHarnesses({n: harness_factory(n, cfg.options_for(n)) for n in set(names)}, names)


def each_harness(cfg: HarnessConfig, tasks: Sequence[Task]) -> tuple[list[Task], GroupHarnesses]:
    """Every task once per harness of ``cfg`` (a teacher replayed through each harness of a run)."""
    names = cfg.names()
    return [t for _ in names for t in tasks], group_harnesses(cfg, [n for n in names for _ in tasks])


def reference_script(env: Environment, tasks: Sequence[Task], *, final: str = "Done.") -> dict[str, Any]:
    """A scripted-backend script replaying each task's reference shell commands, then ``final``."""
    per_task: dict[str, list[dict[str, Any]]] = {}
    for t in tasks:
        sol = env.reference_solution(t)
        if sol:
            per_task[t.id] = [{"shell": cmd} for cmd in sol] + [{"text": final}]
    if not per_task:
        raise ConfigError(f"teacher 'reference': no task of {env.name!r} has a reference solution")
    return {"turns": [], "final": final, "tasks": per_task}


def backend_for(spec: str, *, environment: Environment | None = None, tasks: Sequence[Task] = (),
                 tokenizer: Any = None, model: str | None = None) -> Backend:
    """``reference`` → the tasks' reference solutions replayed as a scripted policy; anything else →
    a back-end spec (``scripted:FILE``, ``transformers:MODEL``, ``vllm:URL``, ``openai:URL``)."""
    if spec == "reference":
        from ..proxy.backends.scripted import ScriptedBackend

        if environment is None:
            raise ConfigError("back-end 'reference' needs the environment whose reference solutions it replays")
        if isinstance(tokenizer, str):
            from ..proxy.backends.transformers import load_tokenizer

            tokenizer = load_tokenizer(tokenizer)
        return ScriptedBackend(reference_script(environment, tasks), tokenizer=tokenizer)
    from ..plugins import make_backend

    return make_backend(spec, tokenizer=tokenizer, model=model)
