"""What of a run's own files no sandbox may show, even when they sit inside a bound directory.

Owns: :func:`project_paths`. The session hands the result to its launcher
(:meth:`~openforge.launchers.base.Launcher.hide`) before the first rollout:

* the store and the run directory around it (trajectories, SFT teacher data, checkpoints, logs),
  and the other run directories beside it (siblings holding a ``trajectories.db``: ``runs/*``);
* every path any task of the environment hides (not only the task being rolled out: a sibling
  task's ``solution.sh`` is as much an answer key), the task root that holds the task folders, and
  the environment's own code (:meth:`~openforge.environment.Environment.source_paths`);
* the cache root (model weights, SFT warm-starts, held-out results). Harness installs inside it are
  bound on their own, on top of the mask, so the harness still runs.

The local launcher masks a path only where its view would otherwise show it (see ``_bwrap.py``):
with the default view none of these is under a bound directory, so nothing is masked and nothing
about them shows in ``/proc/self/mountinfo``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..environment import Environment

__all__ = ["project_paths"]


def _task_roots(hidden: Iterable[str]) -> list[str]:
    """The folders that hold two or more hidden task directories (a task root), never ``/``, a
    top-level directory or a home directory."""
    parents: dict[str, int] = {}
    for h in dict.fromkeys(hidden):  # distinct folders: every claw task hides the same one
        if os.path.isdir(h):
            parent = str(Path(h).parent)
            parents[parent] = parents.get(parent, 0) + 1
    home = str(Path.home())
    return [p for p, n in parents.items() if n >= 2 and len(Path(p).parts) > 2 and p != home]


def _sibling_runs(run_dir: Path) -> list[str]:
    """Other run directories next to ``run_dir`` (folders holding a ``trajectories.db``)."""
    try:
        return sorted(str(d) for d in run_dir.parent.iterdir() if d != run_dir and (d / "trajectories.db").is_file())
    except OSError:
        return []


def project_paths(*, store: str | os.PathLike[str] | None, environment: Environment | None,
                  extra: Iterable[str | os.PathLike[str]] = ()) -> list[str]:
    """Absolute host paths of the run that sandboxes must never show (see the module docstring).
    ``store``: the store's file (its directory is the run directory); ``extra``: more (the cache root)."""
    out: list[str] = []
    if store is not None:
        path = Path(store).resolve()
        out += [str(path), str(path.parent), *_sibling_runs(path.parent)]
    if environment is not None:
        hidden = [str(Path(h).resolve()) for t in environment.tasks() for h in environment.hidden_paths(t)]
        out += [*hidden, *_task_roots(hidden), *(str(Path(p).resolve()) for p in environment.source_paths())]
    out += [str(Path(p).expanduser().resolve()) for p in extra]
    return list(dict.fromkeys(out))
