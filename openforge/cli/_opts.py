"""Parsing of repeatable ``--*-opt KEY=VALUE`` command-line options into keyword arguments."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import ConfigError

__all__ = ["make", "parse_options"]


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
