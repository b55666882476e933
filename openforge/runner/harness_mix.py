"""Multi-harness runs: which harness each GRPO group runs, and results broken down per harness.

Owns: :class:`HarnessMix` (``harness.name`` as a single name, a list or a weighted mix → the harness
of each group slot, deterministically), :class:`PerGroupHarness` (the seam
:func:`openforge.runner.rollout.run_groups` uses to build a group's harness), :class:`GroupHarnesses` (one
factory per group) and :func:`harness_breakdown` (a ``metrics.jsonl`` line's ``per_harness`` block).

A group runs one harness, so its siblings differ only by the policy's samples and GRPO's advantages
compare like with like. The harness of slot ``s`` (the run's ``s``-th group: the task cursor's count
of tasks handed out before it, :mod:`openforge.runner.step_sampling`) is a pure function of ``s`` and the
run's seed: the slots are cut into blocks of ``sum(weights)``; each block holds every harness exactly
``weight`` times (a smooth weighted round-robin pattern) in an order shuffled by
``Random(f"{seed}:{block}")``. So the mix holds exactly over every block, a rerun or a resumed run
(whose cursor is restored) picks the same harnesses, and a task is not tied to one harness when the
number of tasks is a multiple of the block.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..config import HarnessConfig
    from ..core.trajectory import Trajectory
    from ..harness import Harness

__all__ = ["GroupHarnesses", "HarnessMix", "PerGroupHarness", "harness_breakdown"]


@runtime_checkable
class PerGroupHarness(Protocol):
    """Builds the harness of group ``index`` (a fresh instance per rollout)."""

    def for_group(self, index: int) -> Harness: ...


def _pattern(weights: Mapping[str, int]) -> list[str]:
    """Smooth weighted round-robin over one period (``{a: 2, b: 1}`` → ``[a, b, a]``)."""
    total = sum(weights.values())
    current = dict.fromkeys(weights, 0)
    out = []
    for _ in range(total):
        for name, w in weights.items():
            current[name] += w
        best = max(current, key=lambda n: current[n])  # first of equals: the order given
        current[best] -= total
        out.append(best)
    return out


class HarnessMix:
    """The harnesses of a run with their weights; :meth:`pick` gives the harness of a group slot."""

    def __init__(self, weights: Mapping[str, int], *, seed: int = 0):
        if not weights or any(w < 1 for w in weights.values()):
            raise ValueError(f"a harness mix needs at least one harness, each with weight >= 1 (got {dict(weights)})")
        self.weights = dict(weights)
        self.seed = seed
        self._pattern = _pattern(self.weights)

    @classmethod
    def from_config(cls, harness: HarnessConfig, *, seed: int = 0) -> HarnessMix:
        return cls(harness.weights(), seed=seed)

    @property
    def names(self) -> list[str]:
        return list(self.weights)

    @property
    def is_mix(self) -> bool:
        return len(self.weights) > 1

    def pick(self, slot: int) -> str:
        """The harness of group slot ``slot`` (≥ 0)."""
        if not self.is_mix:
            return self.names[0]
        period = len(self._pattern)
        block, pos = divmod(slot, period)
        order = list(range(period))
        random.Random(f"{self.seed}:{block}").shuffle(order)
        return self._pattern[order[pos]]

    def assign(self, slots: Iterable[int]) -> list[str]:
        return [self.pick(s) for s in slots]


class GroupHarnesses:
    """Group ``i`` runs ``factories[names[i]]()``: what :func:`~openforge.runner.rollout.run_groups` gets for
    a multi-harness step."""

    def __init__(self, factories: Mapping[str, Callable[[], Harness]], names: Sequence[str]):
        unknown = sorted(set(names) - set(factories))
        if unknown:
            raise ValueError(f"no harness factory for {', '.join(unknown)}")
        self.factories, self.names = dict(factories), list(names)

    def for_group(self, index: int) -> Harness:
        return self.factories[self.names[index]]()


def harness_breakdown(trajectories: Iterable[Trajectory]) -> dict[str, Any]:
    """``{"per_harness": {name: {rollouts, reward_mean, pass_rate}}}`` when the trajectories ran under
    more than one harness, else ``{}`` (a single-harness metrics line keeps its shape)."""
    by: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        by.setdefault(t.harness or "?", []).append(t)
    if len(by) < 2:
        return {}
    out = {}
    for name, ts in sorted(by.items()):
        n = len(ts)
        out[name] = {"rollouts": n, "reward_mean": round(sum(t.reward for t in ts) / n, 4),
                     "pass_rate": round(sum(t.status.value == "success" for t in ts) / n, 4)}
    return {"per_harness": out}


def per_harness_table(steps: Sequence[Mapping[str, Any]]) -> Any:
    """A rich Table of each GRPO step's pass rate and reward per harness (None: one harness only)."""
    rows = [s for s in steps if s.get("per_harness")]
    if not rows:
        return None
    from rich.table import Table

    names = sorted({h for s in rows for h in s["per_harness"]})
    table = Table(title="per harness: pass rate · mean reward (rollouts)")
    table.add_column("step", justify="right")
    for h in names:
        table.add_column(h, justify="right")
    for s in rows:
        cells = []
        for h in names:
            m = s["per_harness"].get(h)
            cells.append(f"{m['pass_rate']:.2f} · {m['reward_mean']:.3f} ({m['rollouts']})" if m else "–")
        table.add_row(str(s["step"]), *cells)
    return table
