"""Confidence intervals for pass rates, and the "within noise" call on a before/after difference.

Owns: :func:`wilson_interval` (95 % Wilson score interval of ``c`` successes in ``n`` trials),
:func:`diff_interval` (Newcombe's hybrid score interval of ``p2 - p1`` from two Wilson intervals,
method 10 of Newcombe 1998), :func:`paired_diff_interval` (the same for *paired* outcomes: two arms
measured on the same task and trial, Newcombe's method 10 for paired data with its phi correction) and
:func:`verdict` (``within noise`` when that interval holds 0, else ``better`` / ``worse``). Trials are
treated as independent; trials of one task are correlated, so these intervals are, if anything, too
narrow — a difference called "within noise" here is surely so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["diff_interval", "paired_diff_interval", "paired_table", "verdict", "wilson_interval"]

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


def paired_table(first: Sequence[bool], second: Sequence[bool]) -> tuple[int, int, int, int]:
    """``(both, first only, second only, neither)`` succeeded, over the pairs ``zip(first, second)``."""
    if len(first) != len(second):
        raise ValueError(f"paired outcomes need equal lengths, got {len(first)} and {len(second)}")
    pairs = list(zip(map(bool, first), map(bool, second)))
    return (sum(a and b for a, b in pairs), sum(a and not b for a, b in pairs),
            sum(b and not a for a, b in pairs), sum(not a and not b for a, b in pairs))


def paired_diff_interval(both: int, first_only: int, second_only: int, neither: int,
                         z: float = Z95) -> tuple[float, float, float]:
    """``(p2 - p1, low, high)`` for paired outcomes (each pair: one trial of the first arm and the
    matching trial of the second), from the 2×2 table of :func:`paired_table`.

    Newcombe (1998, *Statist. Med.* 17:2635) method 10: the two marginal Wilson intervals combined
    with the correlation ``phi`` of the pairs (0 when a margin is empty; corrected towards 0 by half a
    pair when positive), so a design where both arms succeed on the same tasks gets the narrower
    interval it has earned, and one that pairs nothing gets the unpaired one."""
    a, b, c, d = both, first_only, second_only, neither
    if min(a, b, c, d) < 0:
        raise ValueError(f"a paired table holds counts, got {(a, b, c, d)}")
    n = a + b + c + d
    if n == 0:
        return 0.0, -1.0, 1.0
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = wilson_interval(a + b, n, z)
    l2, u2 = wilson_interval(a + c, n, z)
    denom = (a + b) * (c + d) * (a + c) * (b + d)
    num = a * d - b * c
    if num > 0:
        num = max(num - n / 2, 0.0)
    phi = num / math.sqrt(denom) if denom else 0.0
    diff = p2 - p1
    low = diff - math.sqrt(max((p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2, 0.0))
    high = diff + math.sqrt(max((u2 - p2) ** 2 - 2 * phi * (u2 - p2) * (p1 - l1) + (p1 - l1) ** 2, 0.0))
    return diff, max(-1.0, low), min(1.0, high)


def verdict(low: float, high: float) -> str:
    """``within noise`` when the difference's interval holds 0, else ``better`` or ``worse``."""
    if low <= 0.0 <= high:
        return "within noise"
    return "better" if low > 0 else "worse"
