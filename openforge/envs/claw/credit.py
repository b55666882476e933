"""Partial credit for the generated claw tasks: named check results → a reward in [0, 1].

Owns: :func:`partial_credit` and :data:`PARTIAL_CAP`. GRPO trains on the reward; ``success`` (what
pass rates and the held-out table count) is a reward at or above the run's ``success_threshold``
(1.0), and only an instance whose every check passed gets 1.0. Anything less earns at most
:data:`PARTIAL_CAP`, and nothing at all until a *primary* check (right file, right value, right side
effect) passed, so a do-nothing policy scores 0 and "nothing else broken" alone earns nothing: partial
credit shapes the gradient between failures but can never show up as a success.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ...environment import VerifyResult

__all__ = ["PARTIAL_CAP", "partial_credit"]

#: the most a rollout that failed any check can earn (full success is 1.0)
PARTIAL_CAP = 0.5


def partial_credit(checks: Mapping[str, bool], primary: Iterable[str]) -> VerifyResult:
    """1.0 when every check passed; 0.0 when no primary check did; else ``PARTIAL_CAP`` × the share of
    checks passed. ``rewards`` holds each check as a 0/1 sub-score."""
    primary = tuple(primary)
    unknown = [p for p in primary if p not in checks]
    if not primary or unknown:
        raise ValueError(f"partial credit needs primary checks among {sorted(checks)}, got {list(primary)}")
    rewards = {k: 1.0 if v else 0.0 for k, v in checks.items()}
    failed = [k for k, v in checks.items() if not v]
    if not failed:
        return VerifyResult(reward=1.0, rewards=rewards, detail="all checks passed")
    progress = any(checks[p] for p in primary)
    reward = PARTIAL_CAP * (len(checks) - len(failed)) / len(checks) if progress else 0.0
    return VerifyResult(reward=reward, rewards=rewards,
                        detail=f"failed: {', '.join(failed)} (partial credit {reward:.2f})")
