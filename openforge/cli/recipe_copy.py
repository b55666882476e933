"""``forge recipe cp NAME DIR [env.name=ENV]``: a recipe copy that does not keep another environment's settings.

Owns: :func:`env_settings` (the settings of a recipe that name its own environment's tasks:
``env.subset``, ``env.task_ids``, ``env.options``, an enabled ``eval.heldout`` and an SFT warm-start
replaying the tasks' reference solutions, at the top and in every preset), :func:`adapt` (drops those a new environment lacks) and :func:`copy_for_env` (the
command). A plain copy lists them, so the user knows which to change with ``env.name``; a copy with
``env.name=ENV`` sets it and drops each setting ENV cannot honour, saying why.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, ForgeError

if TYPE_CHECKING:
    from ..environment import Environment

__all__ = ["EnvSetting", "adapt", "copy_for_env", "env_settings"]


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
    from ..session import load_environment, select_tasks

    try:
        if s.key == "env.subset":
            select_tasks(env, split=split, subset=str(s.value))
        elif s.key == "env.task_ids":
            select_tasks(env, split=split, task_ids=list(s.value))
        elif s.key == "env.options":
            load_environment(env_name, dict(s.value))
        elif s.key == "sft.teacher":
            from ..session import reference_script

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


def copy_for_env(name: str, dest: Path, overrides: list[str]) -> tuple[Path, list[str]]:
    """Copy recipe ``name`` to ``dest``; with ``env.name=ENV`` adapt the copy to ENV. Returns the folder
    and what to tell the user."""
    import yaml

    from ..recipes import copy_recipe, recipe_config, recipe_dir
    from ..session import load_environment

    bad = [o for o in overrides if not o.startswith("env.name=")]
    if bad:
        raise ConfigError(f"forge recipe cp NAME DIR [env.name=ENV]: {', '.join(bad)} is not taken here "
                          "(edit the copy's config.yaml, or give it when running the copy)")
    data = recipe_config(name)
    own = (data.get("env") or {}).get("name", "?")
    if not overrides:
        target = copy_recipe(name, dest)
        found = env_settings(data)
        if not found:
            return target, []
        return target, [f"{recipe_dir(name).name} is written for the {own!r} environment; these settings name its tasks: "
                        f"{', '.join(map(str, found))}. Change them when you set env.name to another environment, or "
                        f"copy with `forge recipe cp {name} DIR env.name=ENV`, which drops those ENV lacks"]
    env_name = overrides[-1].split("=", 1)[1]
    env = load_environment(env_name)  # an unknown environment fails before anything is copied
    adapted, notes = adapt(data, env, env_name)
    target = copy_recipe(name, dest)
    text = yaml.safe_dump(adapted, sort_keys=False, width=110)
    head = f"# copied from recipe {data.get('recipe', name)} for env.name={env_name} (forge recipe cp)\n"
    head += "".join(f"# {n}\n" for n in notes)
    (target / "config.yaml").write_text(head + text)
    return target, notes or [f"every environment-specific setting of {name} applies to {env_name}"]
