"""``forge recipe cp NAME DIR [env.name=ENV]``: a recipe copy that does not keep another environment's settings.

Owns: :func:`copy_for_env` (the command). A plain copy lists the recipe's environment-specific settings
(:func:`openforge.recipes.env_fit.env_settings`), so the user knows which to change with ``env.name``; a
copy with ``env.name=ENV`` sets it and drops each setting ENV cannot honour, saying why
(:func:`openforge.recipes.env_fit.adapt`).
"""

from __future__ import annotations

from pathlib import Path

from ..core.errors import ConfigError
from ..recipes.env_fit import EnvSetting, adapt, env_settings

__all__ = ["EnvSetting", "adapt", "copy_for_env", "env_settings"]


def copy_for_env(name: str, dest: Path, overrides: list[str]) -> tuple[Path, list[str]]:
    """Copy recipe ``name`` to ``dest``; with ``env.name=ENV`` adapt the copy to ENV. Returns the folder
    and what to tell the user."""
    import yaml

    from ..recipes import copy_recipe, recipe_config, recipe_dir
    from ..runner.session import load_environment

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
