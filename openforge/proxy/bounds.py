"""The proxy's hostile-client bounds as two small value objects (after httpx's ``Limits`` / ``Timeout``),
so :class:`~openforge.proxy.server.ProxyServer` takes two arguments instead of six.

Owns: :class:`ProxyLimits` (sizes), :class:`ProxyTimeouts` (times) and :func:`resolve_bounds` (the
objects plus the old flat keywords, which keep working: ``ProxyServer(b, body_timeout_s=5)`` is
``ProxyServer(b, timeouts=ProxyTimeouts(body_s=5))``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

__all__ = ["ProxyLimits", "ProxyTimeouts", "resolve_bounds"]


@dataclass(frozen=True)
class ProxyLimits:
    """A body of at most ``max_body_bytes`` (also after decompression; else 413), JSON nested at most
    ``max_json_depth`` levels (else 400), request line + headers of at most ``max_header_bytes`` (431)."""

    max_body_bytes: int = 64 * 1024 * 1024
    max_json_depth: int = 64
    max_header_bytes: int = 64 * 1024


@dataclass(frozen=True)
class ProxyTimeouts:
    """Headers received within ``header_s``, the body within ``body_s`` (else 408); finishing a rollout
    waits up to ``finish_wait_s`` for its calls in flight."""

    header_s: float = 10.0
    body_s: float = 60.0
    finish_wait_s: float = 10.0


#: the flat keywords ProxyServer took before the value objects → (object, field)
FLAT = {"max_body_bytes": ("limits", "max_body_bytes"), "max_json_depth": ("limits", "max_json_depth"),
        "max_header_bytes": ("limits", "max_header_bytes"), "header_timeout_s": ("timeouts", "header_s"),
        "body_timeout_s": ("timeouts", "body_s"), "finish_wait_s": ("timeouts", "finish_wait_s")}


def resolve_bounds(limits: ProxyLimits | None, timeouts: ProxyTimeouts | None,
                   flat: dict[str, Any]) -> tuple[ProxyLimits, ProxyTimeouts]:
    """``limits`` / ``timeouts`` (defaults when None) with the old flat keywords in ``flat`` applied on
    top; any other keyword is the ``TypeError`` a misspelt argument always was."""
    unknown = sorted(set(flat) - set(FLAT))
    if unknown:
        raise TypeError(f"ProxyServer() got an unexpected keyword argument {unknown[0]!r}")
    groups: dict[str, dict[str, Any]] = {"limits": {}, "timeouts": {}}
    for key, value in flat.items():
        group, field = FLAT[key]
        groups[group][field] = value
    return (replace(limits or ProxyLimits(), **groups["limits"]),
            replace(timeouts or ProxyTimeouts(), **groups["timeouts"]))
