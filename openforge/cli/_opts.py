"""Parsing of repeatable ``--*-opt KEY=VALUE`` command-line options into keyword arguments."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError

__all__ = ["check_run_backend", "either", "make", "parse_options"]


def parse_options(items: Iterable[str], flag: str, *, typed: bool = True) -> dict[str, Any]:
    """``["max_turns=2", "name=x"]`` → ``{"max_turns": 2, "name": "x"}``; dashes in keys become
    underscores. With ``typed`` the value is read as YAML (numbers, booleans, lists); every
    malformed item is reported at once."""
    import yaml

    out: dict[str, Any] = {}
    bad: list[str] = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            bad.append(f"{flag} {item!r}: expected KEY=VALUE")
            continue
        if typed:
            try:
                out[key.strip().replace("-", "_")] = yaml.safe_load(value) if value else ""
            except yaml.YAMLError:
                out[key.strip().replace("-", "_")] = value
        else:
            out[key.strip().replace("-", "_")] = value
    if bad:
        raise ConfigError(bad)
    return out


def make(factory: Any, options: dict[str, Any], what: str) -> Any:
    """``factory(**options)``, turning an unknown or mistyped option into a :class:`ConfigError`."""
    try:
        return factory(**options)
    except TypeError as e:
        raise ConfigError(f"{what}: {e}") from None


def either(value: Any, alias: Any, flag: str, alias_flag: str, *, required: bool = False) -> Any:
    """The value of ``flag`` or of its hidden old spelling ``alias_flag`` (both given differently:
    an error); ``required`` when one of them must be given."""
    if value is not None and alias is not None and value != alias:
        raise ConfigError(f"{flag} and {alias_flag} (its old spelling) disagree: {value!r} vs {alias!r}")
    out = value if value is not None else alias
    if required and out is None:
        raise ConfigError(f"missing option {flag}")
    return out


def check_run_backend(spec: str) -> None:
    """``-b RUN@last`` (or a model directory) whose directory does not exist: say so, in those terms
    (before, the spec fell through to "expected KIND:ARG")."""
    if ":" in spec or spec == "reference":
        return
    run, at, sel = spec.rpartition("@")
    if at and not Path(run).expanduser().is_dir():
        raise ConfigError(f"--backend {spec}: the run directory {run} does not exist (RUN@{sel} names a checkpoint "
                          "of a training run's directory)")
    if not at and ("/" in spec or spec.startswith(".")) and not Path(spec).expanduser().exists():
        raise ConfigError(f"--backend {spec}: no such model or run directory")
