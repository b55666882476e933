"""Partial credit for the generated claw tasks: typed check results → a reward in [0, 1].

Owns: :class:`Kind` (what a check tells: progress or a guard), :func:`partial_credit` and
:data:`PARTIAL_CAP`. GRPO trains on the reward; ``success`` (what pass rates and the held-out table
count) is a reward at or above the run's ``success_threshold`` (1.0), and only an instance whose every
check passed gets 1.0.

Partial credit pays for progress only. A *progress* check (:data:`PROGRESS`) sees the task's own
result: the right value in the right place (``VALUE``: each correct field of an answer, the right
content in the file) or the side effect asked for (``EFFECT``: the script is executable, the issue is
closed). A *guard* (:data:`GUARDS`) sees what any output, right or wrong, can satisfy: the output's
shape (``FORMAT``: the file exists, parses, holds an integer, a tag of that name exists) or that
nothing else was broken or left behind (``INTACT``: the decoy untouched, the source of a move gone,
the history intact). A guard can only take credit away: a rollout that failed any check earns
:data:`PARTIAL_CAP` × the share of progress checks passed, and 0 when any guard failed. So doing
nothing, and every output of the right shape with the wrong values, scores 0; partial credit shapes
the gradient between failures but can never show up as a success. The kind belongs to the check
(:class:`openforge.envs.claw.spec.Check`), so a format probe cannot be counted as progress.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from ...environment import VerifyResult

__all__ = ["GUARDS", "PARTIAL_CAP", "PROGRESS", "Kind", "partial_credit"]

#: the most a rollout that failed any check can earn (full success is 1.0)
PARTIAL_CAP = 0.5


class Kind(enum.Enum):
    """What a check's passing tells about the task (see the module docstring)."""

    VALUE = "value"  # progress: the right value in the right place
    EFFECT = "effect"  # progress: the side effect asked for happened
    FORMAT = "format"  # guard: the output has the right shape (any wrong value can too)
    INTACT = "intact"  # guard: nothing else broken, nothing left behind

    @property
    def progress(self) -> bool:
        return self in PROGRESS


#: the kinds whose passing earns partial credit
PROGRESS = frozenset({Kind.VALUE, Kind.EFFECT})
#: the kinds whose failing forfeits partial credit and whose passing earns nothing
GUARDS = frozenset({Kind.FORMAT, Kind.INTACT})


def partial_credit(results: Mapping[str, bool], kinds: Mapping[str, Kind]) -> VerifyResult:
    """1.0 when every check passed; 0.0 when any guard failed; else ``PARTIAL_CAP`` × the share of
    progress checks passed. ``results`` and ``kinds`` name the same checks; ``rewards`` holds each
    check as a 0/1 sub-score."""
    if set(results) != set(kinds):
        raise ValueError(f"partial credit needs a kind for every check and a result for every kind: results "
                         f"{sorted(results)}, kinds {sorted(kinds)}")
    bad = {n: k for n, k in kinds.items() if not isinstance(k, Kind)}
    if bad:
        raise TypeError(f"a check's kind is a Kind ({', '.join(k.name for k in Kind)}), got {bad}")
    progress = [n for n, k in kinds.items() if k.progress]
    if not progress:
        raise ValueError(f"partial credit needs a progress check (VALUE or EFFECT) among {dict(kinds)}: "
                         "guards alone can only take credit away")
    rewards = {k: 1.0 if v else 0.0 for k, v in results.items()}
    failed = [k for k, v in results.items() if not v]
    if not failed:
        return VerifyResult(reward=1.0, rewards=rewards, detail="all checks passed")
    broken = [n for n in failed if not kinds[n].progress]
    reward = 0.0 if broken else PARTIAL_CAP * sum(bool(results[n]) for n in progress) / len(progress)
    why = f"guard {', '.join(broken)} failed: no partial credit" if broken else f"partial credit {reward:.2f}"
    return VerifyResult(reward=reward, rewards=rewards, detail=f"failed: {', '.join(failed)} ({why})")
