"""One GRPO step's groups: tasks from the run's cursor, resampled until enough groups are mixed.

Owns: :class:`SamplingPlan` (tasks per round, the target and the floor of mixed groups, the bound on
resample rounds, resolved from a :class:`~openforge.config.RunConfig`), :func:`sample_step` (dynamic
sampling) and :class:`SampledStep` (its result, with what it reached against the target).

A round rolls out the next ``tasks_per_step`` tasks of the :class:`~openforge.runner.task_cursor.TaskCursor`
(so the run walks its tasks epoch by epoch, consuming exactly the tasks rolled out). While fewer than
``target`` groups have differing rewards, another round is drawn, at most ``max_rounds`` times; every
group rolled out stays in the step. A step that ends with fewer than ``min_mixed`` (at least 1) mixed
groups takes no policy-gradient step (:meth:`SampledStep.trains`). A group's harness is the run's mix
pick for the group's slot, the cursor's count of tasks handed out before it, so a resumed run picks
the same harnesses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ..train.grpo import count_mixed_groups

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..core.task import Task
    from .rollout import GroupResults
    from .task_cursor import TaskCursor

__all__ = ["RollsOutRound", "SampledStep", "SamplingPlan", "sample_step"]


class RollsOutRound(Protocol):
    """Rolls out one group per task; group ``i`` is the run's group slot ``slots[i]``."""

    async def __call__(self, tasks: list[Task], slots: Sequence[int]) -> GroupResults: ...


@dataclass(frozen=True)
class SamplingPlan:
    """How a step's groups are drawn (see the module docstring)."""

    tasks_per_step: int
    target: int
    min_mixed: int
    max_rounds: int

    @classmethod
    def from_config(cls, cfg: RunConfig, n_tasks: int) -> SamplingPlan:
        """``target``: ``trainer.cpu.target_mixed_groups``, by default ``tasks_per_step`` (0 when
        ``min_mixed_groups`` is 0: dynamic sampling off); never below ``min_mixed_groups``."""
        k = min(cfg.rollout.tasks_per_step, n_tasks)
        tc = cfg.trainer.cpu
        target = tc.target_mixed_groups
        if target is None:
            target = k if tc.min_mixed_groups > 0 else 0
        return cls(tasks_per_step=k, target=max(target, tc.min_mixed_groups), min_mixed=max(tc.min_mixed_groups, 1),
                   max_rounds=tc.max_resample_rounds)


@dataclass
class SampledStep:
    """A step's groups, the resample rounds it took, and the mixed groups it reached against the target."""

    groups: GroupResults
    rounds: int
    mixed: int
    target: int
    min_mixed: int
    task_ids: list[str]

    @property
    def trains(self) -> bool:
        """Whether the step has the mixed groups a policy-gradient step needs."""
        return self.mixed >= self.min_mixed


async def sample_step(rollout: RollsOutRound, cursor: TaskCursor[Task], plan: SamplingPlan, *,
                      log: Callable[[str], None] = lambda _m: None, label: str = "step") -> SampledStep:
    """Round 0, then resample rounds while fewer than ``plan.target`` groups are mixed (bounded)."""
    drawn: list[str] = []

    async def one_round() -> GroupResults:
        first = cursor.drawn
        tasks = cursor.take(plan.tasks_per_step, avoid=drawn)
        drawn.extend(t.id for t in tasks)
        return await rollout(tasks, range(first, first + len(tasks)))

    groups = await one_round()
    rounds = 0
    while count_mixed_groups(groups) < plan.target and rounds < plan.max_rounds:
        rounds += 1
        log(f"{label}: {count_mixed_groups(groups)} of {len(groups)} groups mixed (target {plan.target}): "
            f"resample round {rounds}/{plan.max_rounds}")
        groups.extend_with(await one_round())
    return SampledStep(groups=groups, rounds=rounds, mixed=count_mixed_groups(groups), target=plan.target,
                       min_mixed=plan.min_mixed, task_ids=drawn)
