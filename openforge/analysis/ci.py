"""Confidence intervals for pass rates, and the "within noise" call on a before/after difference.

Owns: :func:`wilson_interval` (95 % Wilson score interval of ``c`` successes in ``n`` trials),
:func:`diff_interval` (Newcombe's hybrid score interval of ``p2 - p1`` from two Wilson intervals,
method 10 of Newcombe 1998) and :func:`verdict` (``within noise`` when that interval holds 0, else
``better`` / ``worse``). Trials are treated as independent; trials of one task are correlated, so
these intervals are, if anything, too narrow — a difference called "within noise" here is surely so.
"""

from __future__ import annotations

import math

__all__ = ["diff_interval", "verdict", "wilson_interval"]

Z95 = 1.959963984540054


def wilson_interval(c: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion (``(0, 1)`` when ``n == 0``: nothing is known)."""
    if n < 0 or not 0 <= c <= max(n, 0):
        raise ValueError(f"need 0 <= successes <= trials, got {c} of {n}")
    if n == 0:
        return 0.0, 1.0
    p = c / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def diff_interval(c1: int, n1: int, c2: int, n2: int, z: float = Z95) -> tuple[float, float, float]:
    """``(p2 - p1, low, high)``: the difference of two proportions with Newcombe's hybrid score
    interval (good coverage at small n and at 0 or 1, unlike the Wald interval)."""
    p1 = c1 / n1 if n1 else 0.0
    p2 = c2 / n2 if n2 else 0.0
    l1, u1 = wilson_interval(c1, n1, z)
    l2, u2 = wilson_interval(c2, n2, z)
    d = p2 - p1
    low = d - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2)
    high = d + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)
    return d, max(-1.0, low), min(1.0, high)


def verdict(low: float, high: float) -> str:
    """``within noise`` when the difference's interval holds 0, else ``better`` or ``worse``."""
    if low <= 0.0 <= high:
        return "within noise"
    return "better" if low > 0 else "worse"
