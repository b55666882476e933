"""Finite numbers: NaN and ±Infinity cannot round-trip through a trajectory's JSON (they are written
as ``null`` and then fail to load), and a NaN reward would be trained on. Owns the checks that find
the first non-finite number in a trajectory, a list of floats or any JSON-like value, named by where
it is, for the store and the export functions to refuse or report.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from .trajectory import Trajectory

__all__ = ["first_nonfinite", "is_finite_number", "is_number", "nonfinite_in", "nonfinite_in_trajectory"]


def is_number(v: Any) -> bool:
    """An int or float, not a bool (JSON's numbers as Python reads them)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_finite_number(v: Any) -> bool:
    return is_number(v) and math.isfinite(v)


def nonfinite_in_trajectory(traj: Trajectory) -> str | None:
    """Where the first non-finite number of ``traj`` is, and what it is (e.g. ``"reward is nan"``), or None."""
    if not math.isfinite(traj.reward):
        return f"reward is {traj.reward}"
    for k, v in traj.rewards.items():
        if not math.isfinite(v):
            return f"rewards[{k!r}] is {v}"
    for i, seg in enumerate(traj.segments):
        if not math.isfinite(seg.reward):
            return f"segments[{i}].reward is {seg.reward}"
        bad = first_nonfinite(seg.logprobs)
        if bad is not None:
            return f"segments[{i}].logprobs[{bad[0]}] is {bad[1]}"
    for c in traj.calls:
        bad = first_nonfinite(c.output_logprobs)
        if bad is not None:
            return f"call {c.index}: output_logprobs[{bad[0]}] is {bad[1]}"
        for name in ("latency_s", "queued_s", "first_token_s", "max_token_gap_s"):
            v = getattr(c, name)
            if v is not None and not math.isfinite(v):
                return f"call {c.index}: {name} is {v}"
    return nonfinite_in(traj.metrics, "metrics") or nonfinite_in(traj.metadata, "metadata")


def first_nonfinite(xs: list[float]) -> tuple[int, float] | None:
    """The index and value of the first NaN/±Infinity in ``xs``, or None."""
    if math.isfinite(sum(xs)):  # fast path: a finite sum has only finite terms
        return None
    return next(((i, x) for i, x in enumerate(xs) if not math.isfinite(x)), None)


def nonfinite_in(value: Any, where: str) -> str | None:
    """The first non-finite float nested in ``value`` (dicts, lists), named from ``where``, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where} is {value}"
    if isinstance(value, dict):
        items: Iterable[tuple[Any, Any]] = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return None
    for k, v in items:
        bad = nonfinite_in(v, f"{where}[{k!r}]")
        if bad is not None:
            return bad
    return None
