"""Where openforge keeps files between runs: the one cache-root rule.

Owns: :func:`cache_root` and :func:`cache_key`. Everything cached lives under it: the default model's weights
(``models/``), SFT warm-starts (``sft/<key>``) and installed harness CLIs (``harnesses/``,
``$OPENFORGE_HARNESS_DIR`` overrides that one folder).

The root, first that is set: a configured folder (``RunConfig.cache_dir``), ``$OPENFORGE_CACHE``,
``$XDG_CACHE_HOME/openforge``, ``~/.cache/openforge``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

__all__ = ["cache_key", "cache_root"]


def cache_key(parts: dict[str, Any]) -> str:
    """A short stable key for a cache entry: the hash of ``parts`` as sorted JSON (``str`` for the rest)."""
    blob = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cache_root(configured: str | os.PathLike[str] | None = None) -> Path:
    """The cache root (see the module docstring for the order of the rules)."""
    if configured:
        return Path(configured).expanduser()
    env = os.environ.get("OPENFORGE_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "openforge"
