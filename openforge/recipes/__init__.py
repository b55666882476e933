"""Shipped recipes: a folder per recipe with ``config.yaml`` (base config + ``presets``) and ``README.md``.

Owns: :func:`list_recipes`, :func:`recipe_dir`, :func:`recipe_config`, :func:`load_recipe_config`
(with :func:`for_overrides`: a recipe run for another environment, :mod:`.env_fit`) and :func:`copy_recipe`. Recipe names use dashes (``claw-grpo``), folders underscores
(``claw_grpo/``). Recipes are looked up in :data:`openforge.plugins.RECIPES` (the shipped folders are
its built-ins); third-party recipes register a ``module:attr`` that is a folder path or returns one
under the ``openforge.recipes`` entry-point group.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from ..core.errors import ConfigError, PluginNotFound

__all__ = ["RecipeFitWarning", "copy_recipe", "for_overrides", "list_recipes", "load_recipe_config", "recipe_config",
           "recipe_dir"]


def _folder(name: str) -> Path | None:
    """The folder of the registered recipe ``name`` (a path, or a callable returning one), if usable."""
    from ..plugins import RECIPES

    try:
        obj = RECIPES.get(name)
        path = Path(obj() if callable(obj) else obj)
    except Exception:  # a broken plugin hides only itself
        return None
    return path if (path / "config.yaml").is_file() else None


def list_recipes() -> dict[str, Path]:
    """Recipe name → folder: the shipped ones and ``openforge.recipes`` plugins, under the registry's
    shadowing rule (a plugin never replaces a shipped recipe of the same name)."""
    from ..plugins import RECIPES

    found = {name: _folder(name) for name in RECIPES.names()}
    return {name: path for name, path in sorted(found.items()) if path is not None}


def recipe_dir(name: str) -> Path:
    """The folder of recipe ``name`` (``claw-grpo`` or ``claw_grpo``), or a folder path itself. A
    recipe name wins over a folder of the same name in the working directory (write ``./name``)."""
    p = Path(name)
    recipes = list_recipes()
    key = name.replace("_", "-")
    if p.is_dir() and (p / "config.yaml").is_file():
        if key not in recipes or "/" in name or name.startswith("."):
            return p
        import warnings

        from ..plugins import PluginShadowWarning

        warnings.warn(f"recipe {name!r} is the registered one, not the folder {name}/ here; write ./{name} "
                      f"for the folder", PluginShadowWarning, stacklevel=2)
    if key not in recipes:
        import difflib

        close = difflib.get_close_matches(key, recipes, n=2)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise PluginNotFound(f"unknown recipe {name!r}{hint}; known: {', '.join(recipes)}")
    return recipes[key]


def recipe_config(name: str) -> dict[str, Any]:
    """The raw ``config.yaml`` of a recipe (presets included) as a dict."""
    path = recipe_dir(name) / "config.yaml"
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    return data


def load_recipe_config(name: str, *, preset: str | None = None, overrides: list[str] | tuple[str, ...] = (),
                       notes: list[str] | None = None) -> Any:
    """A validated :class:`~openforge.config.RunConfig` for recipe ``name`` + ``preset`` + overrides.
    With ``env.name=ANOTHER`` among the overrides, the recipe's settings that environment cannot honour
    (claw's ``easy`` subset, its held-out split, ...) are dropped first (:func:`.env_fit.fit_to_env`);
    what was dropped goes to ``notes`` (a list the caller prints), or is a :class:`RecipeFitWarning`."""
    from ..config import load_config

    data, _ = for_overrides(recipe_config(name), overrides, notes, preset=preset)
    if preset is None:
        preset = data.get("default_preset")
    data.pop("default_preset", None)
    return load_config(data, preset=preset, overrides=overrides)


class RecipeFitWarning(UserWarning):
    """A recipe setting its environment's own was dropped for the environment the run names."""


def for_overrides(data: dict[str, Any], overrides: Any, notes: list[str] | None = None, *,
                  preset: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """``data`` fitted to the environment ``overrides`` name (see :func:`.env_fit.fit_to_env`); the notes
    are appended to ``notes``, or warned as :class:`RecipeFitWarning` when ``notes`` is None."""
    from .env_fit import fit_to_env

    data, dropped = fit_to_env(data, overrides, preset)
    if notes is not None:
        notes.extend(dropped)
    else:
        import warnings

        for n in dropped:
            warnings.warn(n, RecipeFitWarning, stacklevel=3)
    return data, dropped


def copy_recipe(name: str, dest: str | Path) -> Path:
    """Copy a recipe folder to ``dest`` (refuses to overwrite an existing folder)."""
    src = recipe_dir(name)
    dest = Path(dest)
    target = dest / src.name if dest.exists() and any(dest.iterdir()) else dest
    if target.exists() and any(target.iterdir()):
        raise ConfigError(f"{target} already exists and is not empty")
    shutil.copytree(src, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    return target
