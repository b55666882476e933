"""Intervals for a held-out effect that respect the design: task instances as clusters, crossed with
training seeds.

Owns: :func:`differences` (per seed and instance, an arm's mean outcome minus the baseline's on the
same instance), :func:`crossed_bootstrap` (the pigeonhole bootstrap: instances and seeds resampled
independently, with replacement, each instance keeping all its trials; a percentile interval),
:func:`naive_trial_interval` (the per-trial paired Newcombe interval pooled over seeds, for comparison
only) and :class:`Interval`.

Why not per trial. A held-out set of I instances × T trials measured for S seeds is not I·T·S
independent pairs: trials of one instance share its difficulty (a task the model cannot do fails
every trial), and every seed is scored on the same instances, so the seeds' estimates are correlated
through them; each seed is also a training run with its own variance. The unit of resampling is
therefore the instance (a cluster of its trials), crossed with the seed: a draw picks I instances and S
seeds with replacement and averages the differences ``d[s][i]`` of the picked pairs (Owen 2007, "The
pigeonhole bootstrap", *Ann. Appl. Stat.* 1:386). Its variance is slightly conservative (it counts the
seed × instance interaction in both margins); with few seeds (3) the seed margin is coarse, which is
the honest price of few training runs.

The effect is ``mean over s, i of d[s][i]``: every instance weighs the same whatever its trial count.
Pure Python (no numpy): a draw costs I·S additions.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .ci import Z95, paired_diff_interval

__all__ = ["Interval", "crossed_bootstrap", "differences", "naive_trial_interval"]


@dataclass(frozen=True)
class Interval:
    """An effect with its 95 % (or ``level``) interval and what it was computed over."""

    effect: float
    lo: float
    hi: float
    se: float
    instances: int
    seeds: int
    method: str

    def as_json(self, digits: int = 4) -> dict[str, Any]:
        return {k: round(v, digits) if isinstance(v, float) else v for k, v in asdict(self).items()}


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def differences(arm: Mapping[Any, Mapping[str, Sequence[float]]],
                base: Mapping[Any, Mapping[str, Sequence[float]]] | Mapping[str, Sequence[float]],
                *, shared_base: bool) -> tuple[list[Any], list[str], list[list[float]]]:
    """``(seeds, instances, d)`` with ``d[s][i] = mean(arm[s][i]) - mean(base_s[i])``.

    ``arm`` maps seed → instance → that instance's trial outcomes (0/1 or a score). ``base`` is one
    mapping instance → outcomes shared by every seed (``shared_base=True``: the SFT arm, one
    checkpoint) or a mapping per seed like ``arm``'s. Only instances every seed of both sides measured
    enter (an instance missing anywhere would unbalance the crossing); an empty outcome list is an error.
    """
    seeds = sorted(arm)
    if not seeds:
        raise ValueError("no seed to compare: the arm has no measured point")

    def base_of(s: Any) -> Mapping[str, Sequence[float]]:
        if shared_base:
            return base  # type: ignore[return-value]
        if s not in base:
            raise ValueError(f"seed {s} has no baseline point to pair with")
        return base[s]  # type: ignore[return-value]

    common = set.intersection(*(set(arm[s]) & set(base_of(s)) for s in seeds))
    instances = sorted(common)
    if not instances:
        raise ValueError("the arm and its baseline share no held-out instance")
    for s in seeds:
        for i in instances:
            if not arm[s][i] or not base_of(s)[i]:
                raise ValueError(f"instance {i} (seed {s}) has no trial outcome")
    d = [[_mean(arm[s][i]) - _mean(base_of(s)[i]) for i in instances] for s in seeds]
    return seeds, instances, d


def _quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default ``linear`` method)."""
    pos = q * (len(sorted_xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def crossed_bootstrap(d: Sequence[Sequence[float]], *, draws: int = 4000, seed: int = 0, level: float = 0.95,
                      resample_seeds: bool = True) -> Interval:
    """The mean of ``d`` (rows: seeds, columns: instances) with a percentile bootstrap interval.

    Each draw resamples the instances (columns) and, with ``resample_seeds``, the seeds (rows), both with
    replacement and independently; ``resample_seeds=False`` treats the seeds as fixed (the interval of
    *these* training runs, not of the training procedure). ``se`` is the draws' standard deviation.
    """
    if not d or not d[0] or any(len(row) != len(d[0]) for row in d):
        raise ValueError("d must be a non-empty seeds × instances table with one value per pair")
    if draws < 100 or not 0 < level < 1:
        raise ValueError(f"need draws ≥ 100 and 0 < level < 1, got draws={draws}, level={level}")
    n_s, n_i = len(d), len(d[0])
    rng = random.Random(seed)
    effect = sum(map(sum, d)) / (n_s * n_i)
    stats: list[float] = []
    for _ in range(draws):
        counts = [0] * n_i
        for _ in range(n_i):
            counts[rng.randrange(n_i)] += 1
        rows = [rng.randrange(n_s) for _ in range(n_s)] if resample_seeds else range(n_s)
        row_totals: dict[int, float] = {}
        total = 0.0
        for r in rows:
            if r not in row_totals:
                row_totals[r] = sum(c * x for c, x in zip(counts, d[r]) if c)
            total += row_totals[r]
        stats.append(total / (n_s * n_i))
    stats.sort()
    mean = _mean(stats)
    se = (sum((x - mean) ** 2 for x in stats) / (draws - 1)) ** 0.5
    tail = (1 - level) / 2
    method = "bootstrap over instances × seeds" if resample_seeds else "bootstrap over instances (seeds fixed)"
    return Interval(effect, _quantile(stats, tail), _quantile(stats, 1 - tail), se, n_i, n_s, method)


def naive_trial_interval(arm: Mapping[Any, Mapping[str, Sequence[float]]],
                         base: Mapping[Any, Mapping[str, Sequence[float]]] | Mapping[str, Sequence[float]],
                         *, shared_base: bool) -> Interval:
    """What the v1 benchmark reported, pooled: every (seed, instance, trial) a pair of the arm's and the
    baseline's trial (``base`` as in :func:`differences`), all treated as independent (paired Newcombe).
    Too narrow on clustered data; kept to show by how much."""
    a = b = c = n = 0
    for s in arm:
        ref = base if shared_base else base.get(s, {})
        for i, outs in arm[s].items():
            for x, y in zip(ref.get(i, ()), outs):  # type: ignore[union-attr]
                a += bool(x) and bool(y)
                b += bool(x) and not y
                c += bool(y) and not x
                n += 1
    diff, lo, hi = paired_diff_interval(a, b, c, n - a - b - c)
    instances = {i for s in arm for i in arm[s]}
    return Interval(diff, lo, hi, (hi - lo) / (2 * Z95), len(instances), len(arm), "paired Newcombe per trial")
