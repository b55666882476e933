"""Which tasks a GRPO run rolls out next: the run's tasks by epochs.

Owns: :class:`TaskCursor` (hands out the run's tasks in epochs — every task exactly once per
epoch, the order reshuffled at each epoch from the run's seed) and :class:`CursorState` (its position,
saved with each GRPO step in ``checkpoints/index.json`` so a resumed run continues the same sequence).

The cursor advances only by the tasks actually handed out: a step that rolls out one round of
``tasks_per_step`` tasks consumes that many, a step with two resample rounds three times as many, so
no slot is reserved for a round that never ran and every task comes up once per epoch whatever the
task count, ``tasks_per_step`` and ``max_resample_rounds`` (a fixed stride per step revisited the same
tasks every step whenever the task count divided it).

Epoch ``e``'s order is ``Random(f"{seed}:{e}")``'s shuffle of the sorted task ids, with the tasks the
caller asked to avoid (those already drawn in the same step, when the epoch starts mid-step) moved to its
end, so one step does not roll out the same task twice while the epoch has others. That order is a pure
function of the seed, the epoch and the moved ids, which the state keeps: a resumed run rebuilds it.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["CursorState", "HasId", "TaskCursor", "tasks_fingerprint"]


class HasId(Protocol):
    """What the cursor hands out: anything with a unique ``id`` (a :class:`~openforge.core.task.Task`)."""

    @property
    def id(self) -> str: ...


T = TypeVar("T", bound=HasId)


def tasks_fingerprint(task_ids: Iterable[str]) -> str:
    """A short hash of the set of task ids (a resumed run with other tasks cannot continue the sequence)."""
    return hashlib.sha256("\n".join(sorted(task_ids)).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class CursorState:
    """Where a :class:`TaskCursor` stands: ``position`` tasks of epoch ``epoch`` handed out (``drawn``
    in all); ``deferred``: the ids moved to the end of this epoch's order; ``tasks``: the fingerprint of
    the task set it walks."""

    epoch: int = 0
    position: int = 0
    drawn: int = 0
    deferred: tuple[str, ...] = field(default_factory=tuple)
    tasks: str = ""

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "deferred": list(self.deferred)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CursorState:
        """The state :meth:`to_json` wrote; a malformed one raises ``ValueError`` naming the field."""
        try:
            state = cls(epoch=int(data["epoch"]), position=int(data["position"]), drawn=int(data["drawn"]),
                        deferred=tuple(str(x) for x in data.get("deferred", ())), tasks=str(data.get("tasks", "")))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a task cursor state ({e!r}): {data!r}") from e
        if min(state.epoch, state.position, state.drawn) < 0:
            raise ValueError(f"not a task cursor state (negative counter): {data!r}")
        return state


class TaskCursor(Generic[T]):
    """The run's tasks, handed out epoch by epoch (see the module docstring)."""

    def __init__(self, tasks: Sequence[T], *, seed: int, state: CursorState | None = None):
        self.tasks = {t.id: t for t in tasks}
        if not self.tasks:
            raise ValueError("a task cursor needs at least one task")
        if len(self.tasks) != len(tasks):
            ids = [t.id for t in tasks]
            dup = sorted({t for t in ids if ids.count(t) > 1})
            raise ValueError(f"task ids must be unique (repeated: {', '.join(dup[:5])})")
        ids = sorted(self.tasks)
        self.ids = ids
        self.seed = seed
        self.fingerprint = tasks_fingerprint(ids)
        state = state or CursorState(tasks=self.fingerprint)
        if state.tasks and state.tasks != self.fingerprint:
            raise ValueError("the saved task cursor walked another set of tasks "
                             f"(fingerprint {state.tasks}, these tasks: {self.fingerprint})")
        if state.position > len(ids):
            raise ValueError(f"task cursor position {state.position} is past the {len(ids)} tasks of an epoch")
        self.epoch, self.position, self.drawn = state.epoch, state.position, state.drawn
        self.deferred = tuple(d for d in state.deferred if d in set(ids))
        self._order = self._epoch_order(self.epoch, self.deferred)

    def _epoch_order(self, epoch: int, deferred: Sequence[str]) -> list[str]:
        order = list(self.ids)
        random.Random(f"{self.seed}:{epoch}").shuffle(order)
        moved = set(deferred)
        return [t for t in order if t not in moved] + [t for t in order if t in moved]

    @property
    def state(self) -> CursorState:
        return CursorState(epoch=self.epoch, position=self.position, drawn=self.drawn, deferred=self.deferred,
                           tasks=self.fingerprint)

    @property
    def epochs(self) -> float:
        """Passes over the tasks so far (``drawn / number of tasks``)."""
        return self.drawn / len(self.ids)

    def take(self, n: int, *, avoid: Iterable[str] = ()) -> list[T]:
        """The next ``n`` tasks (``n`` ≤ the number of tasks). When an epoch ends inside the draw, the
        next one starts with the ids of ``avoid`` and of this draw moved to its end."""
        if not 0 <= n <= len(self.ids):
            raise ValueError(f"cannot draw {n} tasks from {len(self.ids)} (at most one epoch at a time)")
        out = self._order[self.position:self.position + n]
        self.position += len(out)
        if len(out) < n:
            self.epoch += 1
            self.deferred = tuple(t for t in self.ids if t in set(avoid) | set(out))
            self._order = self._epoch_order(self.epoch, self.deferred)
            rest = n - len(out)
            out += self._order[:rest]
            self.position = rest
        self.drawn += n
        return [self.tasks[t] for t in out]
