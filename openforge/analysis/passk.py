"""pass@k and pass^k with the unbiased estimators, mean reward, per-category results, status counts.

Owns: :func:`pass_at_k`, :func:`pass_hat_k`, :class:`TaskResult`, :class:`CategoryResult`,
:class:`EvalSummary` and :func:`summarize_eval` (trajectories → the numbers ``forge eval`` prints).

From ``n`` valid trials of a task with ``c`` successes (docs/metrics.md, "pass@k and pass^k"):

* pass@k = 1 − C(n−c, k) / C(n, k): the chance that at least one of k trials drawn without
  replacement from the n succeeds (Chen et al. 2021, unbiased);
* pass^k = C(c, k) / C(n, k): the chance that all k drawn trials succeed (τ-bench / Claw-Eval).

Infrastructure failures are not trials: they are dropped from ``n`` and counted in ``statuses``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from math import comb

from pydantic import BaseModel, Field

from ..core.task import Task
from ..core.trajectory import Trajectory
from ..core.types import RolloutStatus
from .metrics import BehaviourSummary, summarize_behaviour

__all__ = [
    "CategoryResult",
    "EvalSummary",
    "TaskResult",
    "pass_at_k",
    "pass_hat_k",
    "summarize_eval",
]


def _check(n: int, c: int, k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if not 0 <= c <= n:
        raise ValueError(f"successes c={c} must be between 0 and trials n={n}")
    if n < k:
        raise ValueError(f"need at least k={k} trials, got n={n}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` trials with ``c`` successes (requires ``n >= k``)."""
    _check(n, c, k)
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k (all k succeed) from ``n`` trials with ``c`` successes (requires ``n >= k``)."""
    _check(n, c, k)
    return comb(c, k) / comb(n, k)


class TaskResult(BaseModel):
    task_id: str
    category: str
    trials: int  # valid (trainable-status) trials: n
    successes: int  # c
    infra_failures: int
    mean_reward: float | None
    pass_at_k: float | None  # None when trials < k
    pass_hat_k: float | None
    statuses: dict[str, int]


class CategoryResult(BaseModel):
    category: str
    tasks: int
    pass_at_k: float | None
    pass_hat_k: float | None
    pass_at_1: float | None
    mean_reward: float | None
    statuses: dict[str, int] = Field(default_factory=dict)  # every trial of the category's tasks


class EvalSummary(BaseModel):
    """What ``forge eval`` reports (JSON ``eval.json``)."""

    k: int
    tasks: int
    trials: int  # all rollouts, infra failures included
    valid_trials: int
    scored_tasks: int  # tasks with at least k valid trials (the pass@k/pass^k denominators)
    pass_at_k: float | None
    pass_hat_k: float | None
    pass_at_1: float | None
    mean_reward: float | None
    statuses: dict[str, int]
    categories: list[CategoryResult] = Field(default_factory=list)
    per_task: list[TaskResult] = Field(default_factory=list)
    behaviour: BehaviourSummary | None = None


def _mean(xs: Iterable[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def _category(traj: Trajectory, task: Task | None) -> str:
    if task is not None:
        return task.category
    return str((traj.metadata or {}).get("category") or "general")


def summarize_eval(
    trajectories: Iterable[Trajectory], k: int, tasks: Mapping[str, Task] | None = None
) -> EvalSummary:
    """Group trajectories by task and compute pass@k, pass^k, pass@1, mean reward, per category.

    A trial succeeds iff its status is ``success``. Tasks with fewer than ``k`` valid trials get
    ``None`` for pass@k / pass^k and are left out of the averages (``scored_tasks`` says how many
    counted). pass@1 (= c / n) and mean reward average over every task with at least one valid trial.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    tasks = tasks or {}
    trajs = list(trajectories)
    by_task: dict[str, list[Trajectory]] = {}
    for t in trajs:
        by_task.setdefault(t.task_id, []).append(t)
    results: list[TaskResult] = []
    for task_id, group in by_task.items():
        valid = [t for t in group if t.status.trainable]
        n = len(valid)
        c = sum(t.status == RolloutStatus.SUCCESS for t in valid)
        results.append(
            TaskResult(
                task_id=task_id,
                category=_category(group[0], tasks.get(task_id)),
                trials=n, successes=c, infra_failures=len(group) - n,
                mean_reward=_mean(t.reward for t in valid),
                pass_at_k=pass_at_k(n, c, k) if n >= k else None,
                pass_hat_k=pass_hat_k(n, c, k) if n >= k else None,
                statuses=dict(Counter(str(t.status) for t in group)),
            )
        )
    results.sort(key=lambda r: (r.category, r.task_id))
    cats: dict[str, list[TaskResult]] = {}
    for r in results:
        cats.setdefault(r.category, []).append(r)

    def _agg(rs: list[TaskResult]) -> tuple[float | None, float | None, float | None, float | None]:
        return (
            _mean(r.pass_at_k for r in rs),
            _mean(r.pass_hat_k for r in rs),
            _mean(r.successes / r.trials if r.trials else None for r in rs),
            _mean(r.mean_reward for r in rs),
        )

    categories = []
    for name, rs in sorted(cats.items()):
        pk, phk, p1, mr = _agg(rs)
        st: Counter[str] = Counter()
        for r in rs:
            st.update(r.statuses)
        categories.append(CategoryResult(category=name, tasks=len(rs), pass_at_k=pk, pass_hat_k=phk,
                                         pass_at_1=p1, mean_reward=mr, statuses=dict(st)))
    pk, phk, p1, mr = _agg(results)
    return EvalSummary(
        k=k, tasks=len(results), trials=len(trajs), valid_trials=sum(r.trials for r in results),
        scored_tasks=sum(r.pass_at_k is not None for r in results),
        pass_at_k=pk, pass_hat_k=phk, pass_at_1=p1, mean_reward=mr,
        statuses=dict(Counter(str(t.status) for t in trajs)),
        categories=categories, per_task=results,
        behaviour=summarize_behaviour(trajs, tasks),
    )
