"""Loading and writing a :class:`~openforge.config.RunConfig`: :func:`load_config` (a YAML file or dict, a
preset, ``key=value`` overrides → one validated config, or one :class:`~openforge.core.errors.ConfigError` naming
every problem by its dotted key, with "did you mean" for a mistyped key) and :func:`dump_config`."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from ..core.errors import ConfigError
from ..util.overrides import apply_overrides, parse_overrides
from .parts import HarnessConfig
from .run import RunConfig

__all__ = ["REMOVED_KEYS", "dump_config", "load_config"]


#: Keys that configs once accepted and that did nothing: a config still setting one gets this, not
#: "unknown key".
REMOVED_KEYS = {
    "trainer.verl.tool_parser": "removed (it was never used: the proxy parses each harness's tool calls "
                                "itself); delete the key",
}


def _format_errors(err: ValidationError) -> list[str]:
    problems = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(config)"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = REMOVED_KEYS.get(loc) or _unknown_key(e["loc"])
        problems.append(f"{loc}: {msg}")
    return problems


def _section_model(loc: Sequence[Any]) -> type[BaseModel] | None:
    """The config section (a pydantic model) at ``loc`` below :class:`RunConfig`, if it is one."""
    model: type[BaseModel] = RunConfig
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        found = [t for t in (field.annotation, *get_args(field.annotation))
                 if isinstance(t, type) and issubclass(t, BaseModel)]
        if not found:
            return None
        model = found[0]
    return model


def _unknown_key(loc: Sequence[Any]) -> str:
    """"unknown key", with the keys of its section that it is close to (a typo: ``rollout.grop_size``)."""
    import difflib

    model = _section_model(loc[:-1])
    if model is None:
        return "unknown key"
    close = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=2, cutoff=0.6)
    where = ".".join(map(str, loc[:-1]))
    if close:
        return "unknown key (did you mean " + " or ".join(f"{where}.{c}" if where else c for c in close) + "?)"
    return f"unknown key (the keys of {where or 'the config'}: {', '.join(model.model_fields)})"


def _harness_problems(raw: Any) -> list[str]:
    """The chosen harness's options (after the merge of its block) and every ``per_harness`` block,
    each checked against its harness's constructor (see :mod:`openforge.harnesses.options`)."""
    from ..harnesses.options import option_problems

    try:
        h = HarnessConfig.model_validate(raw or {})
    except ValidationError:
        return []  # already reported by the RunConfig validation
    if h.is_mix:  # each harness of the mix with the options it gets; the common ones named as such
        problems: list[str] = []
        for name in h.names():
            key = h.block_key(name)
            common = {k: v for k, v in h.options.items() if key is None or k not in h.per_harness[key]}
            problems += option_problems(name, common, "harness.options", name_key=f"harness.name.{name}")
            if key is not None:
                problems += option_problems(name, h.per_harness[key], f"harness.per_harness.{key}",
                                            name_key=f"harness.name.{name}")
        chosen = {h.block_key(n) for n in h.names()}
    else:
        chosen = {h.block_key()}
        problems = option_problems(h.name, h.options, "harness.options", name_key="harness.name")
    for key, block in h.per_harness.items():
        if key not in chosen:
            problems += option_problems(key, block, f"harness.per_harness.{key}")
    return list(dict.fromkeys(problems))  # a common option wrong for two harnesses: once per harness


def load_config(
    source: str | Path | dict[str, Any] | RunConfig | None = None,
    *,
    preset: str | None = None,
    overrides: list[str] | tuple[str, ...] | dict[str, Any] = (),
) -> RunConfig:
    """Build a validated :class:`RunConfig` from a YAML file / dict, a preset and overrides.

    A source may carry ``presets: {name: {...}}``; ``preset`` merges one of them over the base.
    Raises one :class:`ConfigError` listing every problem.
    """
    problems: list[str] = []
    if isinstance(source, RunConfig):
        data: dict[str, Any] = source.model_dump(mode="json")
    elif isinstance(source, (str, Path)):
        path = Path(source)
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except OSError as e:
            raise ConfigError(f"{path}: {e.strerror or e}") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML ({e})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the top level must be a mapping")
    else:
        data = copy.deepcopy(source or {})
    presets = data.pop("presets", {}) or {}
    data.pop("description", None)
    default_preset = data.pop("default_preset", None)
    if preset is None:
        preset = default_preset
    if preset is not None:
        if preset not in presets:
            problems.append(f"preset {preset!r} is not defined (available: {', '.join(presets) or 'none'})")
        else:
            data = apply_overrides(data, presets[preset] or {})
    if isinstance(overrides, dict):
        ov, bad = overrides, []
    else:
        ov, bad = parse_overrides(list(overrides))
    problems += bad
    data = apply_overrides(data, ov)
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as e:
        problems += _format_errors(e)
        cfg = None
    problems += _harness_problems(data.get("harness"))
    if problems or cfg is None:
        raise ConfigError(problems)
    return cfg


def dump_config(cfg: RunConfig, path: str | Path) -> Path:
    """Write the resolved config as YAML (what the run actually used)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    return path
