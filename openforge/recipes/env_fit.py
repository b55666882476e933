"""A recipe written for one environment, run or copied for another: which of its settings name its own
environment's tasks, and which of them another environment cannot honour.

Owns: :func:`env_settings` (the settings of a recipe that name its own environment's tasks:
``env.subset``, ``env.task_ids``, ``env.options``, an enabled ``eval.heldout`` and an SFT warm-start
replaying the tasks' reference solutions, at the top and in every preset), :func:`adapt` (drops those a
new environment lacks, saying why) and :func:`fit_to_env` (what a run of a recipe with
``env.name=ANOTHER`` starts from: ``claw-grpo --preset test env.name=my_env:MyEnv`` drops claw's
``easy`` subset when ``my_env`` has no such task, instead of refusing the run). ``forge recipe cp``
(:mod:`openforge.cli.recipe_copy`) writes the adapted copy.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.errors import ForgeError

if TYPE_CHECKING:
    from ..environment import Environment

__all__ = ["EnvSetting", "adapt", "env_settings", "fit_to_env"]


@dataclass(frozen=True)
class EnvSetting:
    """One environment-specific setting: where (``presets.cpu.``, or ``""`` at the top), key, value."""

    where: str
    key: str
    value: Any

    def __str__(self) -> str:
        return f"{self.where}{self.key}={self.value}"


def _sections(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    presets = data.get("presets") or {}
    return [("", data), *((f"presets.{n}.", p) for n, p in presets.items() if isinstance(p, dict))]


def env_settings(data: dict[str, Any]) -> list[EnvSetting]:
    """The recipe's settings that only make sense for its own environment's tasks."""
    out = []
    for where, sec in _sections(data):
        env = sec.get("env") or {}
        for key in ("subset", "task_ids", "options"):
            if env.get(key):
                out.append(EnvSetting(where, f"env.{key}", env[key]))
        sft = sec.get("sft") or {}
        if sft.get("enabled") and sft.get("teacher", "reference") == "reference" and not sft.get("data"):
            out.append(EnvSetting(where, "sft.teacher", "reference"))
        held = (sec.get("eval") or {}).get("heldout") or {}
        if held.get("enabled"):
            out.append(EnvSetting(where, "eval.heldout", held.get("tasks") or f"split {held.get('split', 'heldout')}"))
    return out


def _why_not(s: EnvSetting, env: Environment, env_name: str, split: str | None) -> str | None:
    """Why ``env`` (named ``env_name``) cannot honour setting ``s`` (``None``: it can)."""
    from ..runner.session import load_environment, select_tasks

    try:
        if s.key == "env.subset":
            select_tasks(env, split=split, subset=str(s.value))
        elif s.key == "env.task_ids":
            select_tasks(env, split=split, task_ids=list(s.value))
        elif s.key == "env.options":
            load_environment(env_name, dict(s.value))
        elif s.key == "sft.teacher":
            from ..runner.session import reference_script

            reference_script(env, list(env.tasks(split) if split else env.tasks()))
        elif s.key == "eval.heldout":
            wanted = s.value if isinstance(s.value, list) else None
            split_name = str(s.value).removeprefix("split ")
            if wanted is None and split_name not in env.splits():
                return f"it has no split {split_name!r} (splits: {', '.join(env.splits()) or 'none'})"
            if wanted is not None:
                select_tasks(env, split=None, task_ids=wanted)
    except (ForgeError, TypeError) as e:
        return str(e).replace("invalid configuration:\n  - ", "")
    return None


def _drop(data: dict[str, Any], s: EnvSetting) -> None:
    sec = dict(_sections(data))[s.where]
    if s.key == "eval.heldout":
        sec["eval"]["heldout"]["enabled"] = False
    elif s.key == "sft.teacher":  # no reference solutions to replay: no warm-start
        sec["sft"]["enabled"] = False
    else:
        del sec["env"][s.key.split(".", 1)[1]]


def adapt(data: dict[str, Any], env: Environment, env_name: str) -> tuple[dict[str, Any], list[str]]:
    """``data`` with ``env.name`` set to ``env_name`` and the settings ``env`` lacks dropped; the drop notes."""
    out = copy.deepcopy(data)
    out.setdefault("env", {})["name"] = env_name
    notes = []
    for s in env_settings(out):
        sec = dict(_sections(out))[s.where]
        split = (sec.get("env") or {}).get("split", (out.get("env") or {}).get("split", "train"))
        why = _why_not(s, env, env_name, split)
        if why is not None:
            _drop(out, s)
            off = {"eval.heldout": " (held-out evaluation off)", "sft.teacher": " (SFT warm-start off)"}.get(s.key, "")
            notes.append(f"dropped {s}{off}: {env_name} cannot use it ({why})")
    return out, notes


def _env_name(overrides: Sequence[str] | Mapping[str, Any]) -> str | None:
    """The ``env.name`` that ``overrides`` set (the last one wins), if any."""
    if isinstance(overrides, Mapping):
        env = overrides.get("env")
        name = env.get("name") if isinstance(env, Mapping) else None
        return None if name is None else str(name)
    from ..util.overrides import parse_overrides

    names = [o for o in overrides if o.partition("=")[0].strip() == "env.name"]
    if not names:
        return None
    parsed, _ = parse_overrides(names[-1:])
    name = parsed.get("env", {}).get("name")
    return None if name in (None, "") else str(name)


def fit_to_env(data: dict[str, Any], overrides: Sequence[str] | Mapping[str, Any],
               preset: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """``data`` (a recipe's raw config, presets included) for the environment that ``overrides`` name
    with ``env.name``, when it is not the recipe's own: the recipe's settings that environment cannot
    honour are dropped (see :func:`adapt`), with one note each. The recipe's own environment, no
    ``env.name`` override, or an environment that does not load (the run's checks name that): ``data``
    unchanged, no notes. Overrides are applied after this, so one the user gives still wins. Every preset
    is fitted; the notes are those of the top level and of ``preset`` (default: the recipe's default)."""
    env_name = _env_name(overrides)
    own = (data.get("env") or {}).get("name")
    if env_name is None or env_name == own:
        return data, []
    from ..runner.session import load_environment

    try:
        env = load_environment(env_name)
    except (ForgeError, ImportError, TypeError, ValueError):
        return data, []
    out, notes = adapt(data, env, env_name)
    chosen = f"dropped presets.{preset or data.get('default_preset')}."
    notes = [n for n in notes if not n.startswith("dropped presets.") or n.startswith(chosen)]
    return out, [f"recipe {data.get('recipe') or 'config'} is written for {own!r}: {n}" for n in notes]
