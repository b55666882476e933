"""Which tasks a run or an evaluation gets: the one task-selection rule.

Owns: :func:`select_tasks` (split → subset → explicit ids → the first ``max_tasks``; an empty
selection is a :class:`~openforge.core.errors.ConfigError` naming what selected nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..core.errors import ConfigError
from ..core.task import Task

if TYPE_CHECKING:
    from ..environment import Environment

__all__ = ["select_tasks"]


def _in_subset(task: Task, subset: str) -> bool:
    """A task is in a subset named by its tags, a boolean flag, its ``subset``/``difficulty`` or its category."""
    md = task.metadata
    tags = md.get("subsets") or md.get("tags") or []
    return (subset in tags or md.get(subset) is True or md.get("subset") == subset or md.get("difficulty") == subset
            or task.category == subset)


def select_tasks(env: Environment, *, split: str | None, subset: str | None = None,
                 task_ids: Sequence[str] = (), max_tasks: int | None = None) -> list[Task]:
    """The tasks of a run or an evaluation: ``split`` (None: every task) → ``subset`` → explicit
    ``task_ids`` (in that order) → the first ``max_tasks``. Raises :class:`ConfigError` naming what
    selected nothing."""
    tasks = list(env.tasks(split) if split else env.tasks())
    if subset:
        tasks = [t for t in tasks if _in_subset(t, subset)]
        if not tasks:
            raise ConfigError(f"env.subset={subset!r}: no {split} task of {env.name!r} is in it")
    if task_ids:
        by_id = {t.id: t for t in env.tasks()}
        missing = [i for i in task_ids if i not in by_id]
        if missing:
            raise ConfigError([f"env.task_ids: {env.name!r} has no task {i!r}" for i in missing])
        tasks = [by_id[i] for i in task_ids]
    if max_tasks:
        tasks = tasks[:max_tasks]
    if not tasks:
        raise ConfigError(f"no tasks: {env.name!r} split {split!r} is empty (splits: {env.splits()})")
    return tasks
