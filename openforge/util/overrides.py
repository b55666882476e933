"""``key.path=value`` overrides: parsed into a nested dict and deep-merged into a config's raw mapping.

Owns: :func:`parse_overrides` and :func:`apply_overrides` (re-exported by :mod:`openforge.config`,
which validates the result). Pure: dicts in, dicts out, YAML scalars and lists for values.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

__all__ = ["apply_overrides", "parse_overrides"]


def parse_overrides(items: list[str] | tuple[str, ...]) -> tuple[dict[str, Any], list[str]]:
    """``["a.b=1", "c=[x, y]"]`` → (nested dict, problems). Values are parsed as YAML scalars/lists."""
    out: dict[str, Any] = {}
    problems: list[str] = []
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not p for p in key.split(".")):
            problems.append(f"{item!r}: overrides look like key.path=value")
            continue
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            nxt = node.setdefault(p, {})
            if not isinstance(nxt, dict):
                problems.append(f"{item!r}: {p} was already set to a value")
                break
            node = nxt
        else:
            node[parts[-1]] = value
    return out, problems


def apply_overrides(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge ``overrides`` into a copy of ``base`` (dicts merge, everything else replaces)."""
    out = copy.deepcopy(base)
    for k, v in overrides.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = apply_overrides(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out
