"""How analysis tables print a value: percentages, counts, floats, and "–" for a missing one.

Owns: :func:`fmt_value` (shared by ``forge compare``, ``forge eval`` and ``forge report`` tables).
"""

from __future__ import annotations

from typing import Any

__all__ = ["fmt_value"]


def fmt_value(value: Any, kind: str) -> str:
    if value is None:
        return "–"
    if kind == "pct":
        return f"{100 * float(value):.1f} %"
    if kind == "int":
        return f"{round(float(value)):,}"
    if kind == "float":
        return f"{float(value):.2f}"
    return str(value)
