"""Loud failure when rollouts cannot be trained: the error budget of a training run and of an eval.

Owns: :class:`RolloutErrors` (the errors of a run's rollouts so far: statuses, the dominant
non-trainable cause and its first error/traceback), :class:`ErrorBudget` (stops a training run
whose share of non-trainable rollouts crosses ``rollout.max_error_share``, and one in which no
rollout at all was trainable) and the typed errors :class:`TooManyRolloutErrors` /
:class:`NothingTrainable` that ``openforge.run`` raises (``forge recipe`` exits 3 with them).

Infrastructure failures are discarded, never scored 0 (the design's rule): a run whose rollouts are
all ``env_error`` has nothing to train on. Before this module such a run exited 0 with "no gradient
step: 0 of 0 groups mixed" and a summary blaming tied rewards.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.errors import ForgeError
from ..core.trajectory import Trajectory

if TYPE_CHECKING:
    from .rollout import GroupResults

__all__ = ["ErrorBudget", "NothingTrainable", "RolloutErrors", "TooManyRolloutErrors", "first_error", "step_outcomes"]

#: Metadata keys that hold a failed rollout's traceback or the verifier's explanation, most telling first.
_DETAIL_KEYS = ("verifier_traceback", "traceback", "harness_stderr", "verify_detail")


class TooManyRolloutErrors(ForgeError, RuntimeError):
    """A training run stopped because too many of its rollouts were not trainable (``env_error``,
    ``harness_error``, ``infra_error``); the message names the dominant cause and its first error.
    ``summary``: the run's summary up to the stop (also in ``RUN_DIR/summary.json``), when known."""

    summary: dict[str, Any] | None = None


class NothingTrainable(TooManyRolloutErrors):
    """No rollout of the run was trainable: nothing could be learned."""


def step_outcomes(groups: GroupResults) -> list[Trajectory]:
    """A step's outcomes for the error budget: the trained groups' members and the discarded attempts,
    except those retried (an infra failure retried is judged by its retry's outcome)."""
    retried = [t for t in groups.discarded if ", retried: " in str((t.metadata or {}).get("discard_reason", ""))]
    ids = {id(t) for t in retried}
    return [*(t for g in groups for t in g.trajectories), *(t for t in groups.discarded if id(t) not in ids)]


def first_error(traj: Trajectory, *, limit: int = 1500) -> str:
    """A failed rollout's error line, then its traceback or verifier detail (tail, ``limit`` chars)."""
    md = traj.metadata or {}
    lines = [f"{traj.status.value} on task {traj.task_id}: {traj.error or 'no error message'}"]
    for key in _DETAIL_KEYS:
        text = str(md.get(key) or "").strip()
        if text:
            lines.append(f"{key.replace('_', ' ')}:\n{text[-limit:]}")
            break
    return "\n".join(lines)


@dataclass
class RolloutErrors:
    """The statuses of a run's rollouts (every attempt, retried ones included) and the first failed one
    of each non-trainable status."""

    statuses: Counter[str] = field(default_factory=Counter)
    first: dict[str, Trajectory] = field(default_factory=dict)

    def add(self, trajs: Iterable[Trajectory]) -> None:
        for t in trajs:
            self.statuses[t.status.value] += 1
            if not t.trainable:
                self.first.setdefault(t.status.value, t)

    @property
    def total(self) -> int:
        return sum(self.statuses.values())

    @property
    def failed(self) -> int:
        return sum(n for s, n in self.statuses.items() if s in self.first)

    @property
    def share(self) -> float:
        return self.failed / self.total if self.total else 0.0

    def dominant(self) -> str | None:
        """The most frequent non-trainable status (``None`` when every rollout was trainable)."""
        failed = [(n, s) for s, n in self.statuses.items() if s in self.first]
        return max(failed)[1] if failed else None

    def counts_line(self) -> str:
        return ", ".join(f"{n} {s}" for s, n in self.statuses.most_common())

    def explain(self) -> str:
        """``8 of 8 rollouts were not trainable (8 env_error); the first env_error: ...``."""
        cause = self.dominant()
        if cause is None:
            return f"all {self.total} rollouts were trainable"
        return (f"{self.failed} of {self.total} rollouts were not trainable ({self.counts_line()}); "
                f"the first {cause}: {first_error(self.first[cause])}")


class ErrorBudget:
    """Judges a training run's rollouts after each step (:meth:`check`): raises :class:`NothingTrainable`
    when not one rollout so far was trainable, :class:`TooManyRolloutErrors` when the share of
    non-trainable rollouts is above ``max_share`` (1.0: never; the no-trainable-rollout check stays)."""

    def __init__(self, max_share: float = 0.5):
        if not 0.0 <= max_share <= 1.0:
            raise ValueError(f"max_share must be within [0, 1], got {max_share}")
        self.max_share = max_share
        self.errors = RolloutErrors()

    def record(self, trajs: Iterable[Trajectory]) -> None:
        self.errors.add(trajs)

    def check(self, *, where: str = "") -> None:
        e = self.errors
        if not e.total or e.dominant() is None:
            return
        at = f" {where}" if where else ""
        if e.failed == e.total:
            raise NothingTrainable(f"no rollout was trainable{at}, so nothing can be learned: {e.explain()}")
        if e.share > self.max_share:
            raise TooManyRolloutErrors(
                f"stopped{at}: {e.share:.0%} of the rollouts were not trainable, above "
                f"rollout.max_error_share={self.max_share:g}: {e.explain()}")
