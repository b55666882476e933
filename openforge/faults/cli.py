"""The ``--faults`` / ``--fault-fraction`` options of ``forge eval`` → ``env.options.faults``.

Owns: :func:`fault_option`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from .spec import parse_fault_config

__all__ = ["fault_option"]


def fault_option(value: str | None, fraction: float | None = None) -> Any:
    """``default`` | a YAML file | inline YAML → the checked ``env.options.faults`` mapping (or None)."""
    if value is None:
        if fraction is not None:
            raise ConfigError("--fault-fraction needs --faults (e.g. --faults default)")
        return None
    import yaml

    if value.strip() in ("default", "all", "true"):
        data: Any = {}
    elif Path(value).is_file():
        try:
            data = yaml.safe_load(Path(value).read_text())
        except yaml.YAMLError as e:
            raise ConfigError(f"--faults {value}: not valid YAML: {e}") from None
    else:
        try:
            data = yaml.safe_load(value)
        except yaml.YAMLError as e:
            raise ConfigError(f"--faults: neither a file nor valid YAML: {e}") from None
    if isinstance(data, list):
        data = {"faults": data}
    if fraction is not None and isinstance(data, dict):
        data = {**data, "fraction": fraction}
    return parse_fault_config(data, "--faults").model_dump(mode="json")
