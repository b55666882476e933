"""Running the held-out before/after of a training run (the numbers and tables are
:mod:`openforge.analysis.heldout`'s).

Owns: :func:`run_point` (``trials`` rollouts of every held-out task through every harness of the run,
with the run's live policy, through a side proxy of the run's session so nothing lands in the run's
trajectory store; written to ``RUN_DIR/heldout/<point>/`` as a ``forge eval`` directory),
:func:`heldout_before` and :func:`heldout_after`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .analysis.heldout import compare_points, load_point, point_numbers
from .task import Task

if TYPE_CHECKING:
    from .config import RunConfig
    from .forge import Forge
    from .trajectory import Trajectory

__all__ = ["heldout_after", "heldout_before", "run_point"]


async def run_point(forge: Forge, tasks: Sequence[Task], point: str, *, label: str,
                    harnesses: Sequence[str] | None = None, trials: int | None = None,
                    path: Path | None = None) -> dict[str, Any]:
    """Roll out every task ``trials`` (default ``eval.heldout.trials``) times through every harness
    (default: the run's) with the current policy; write ``path`` (default ``RUN_DIR/heldout/<point>/``)
    and return its numbers (per harness and, with several, ``all``)."""
    cfg = forge.cfg
    trials = trials or cfg.eval.heldout.trials
    names = list(harnesses or cfg.harness.names())
    forge.console.log(f"held-out {point} ({label}): {len(tasks)} tasks × {trials} trials × {len(names)} harness(es)")
    sampling = {"temperature": cfg.rollout.temperature, "max_tokens": cfg.rollout.max_tokens}
    async with forge.runtime.side_proxy(forge.backend, f"heldout-{point}", sampling=sampling, keep=False) as proxy:
        groups = await forge.runtime.groups(
            [t for _ in names for t in tasks], trials, min_group=1, proxy=proxy, keep=False,
            harness=forge.group_harnesses([n for n in names for _ in tasks]))
    trajs = [t.model_copy(update={"metadata": {**t.metadata, "heldout": point}})
             for t in [*(t for g in groups for t in g.trajectories), *groups.discarded]
             if "retried" not in str((t.metadata or {}).get("discard_reason", ""))]
    out = {"point": point, "label": label, "per_harness": {
        n: point_numbers([t for t in trajs if t.harness == n], trials) for n in names}}
    if len(names) > 1:
        out["all"] = point_numbers(trajs, trials)
    _write(path or forge.run_dir / "heldout" / point, cfg, tasks, trajs, out, names, trials)
    return out


def _write(path: Path, cfg: RunConfig, tasks: Sequence[Task], trajs: list[Trajectory], numbers: dict[str, Any],
           names: Sequence[str], trials: int) -> None:
    """A ``forge eval``-shaped directory (config.yaml, eval.json, trajectories.jsonl) plus heldout.json."""
    from .analysis.passk import summarize_eval
    from .evaluation import EvalRequest, write_eval_dir

    req = EvalRequest(harness=",".join(names), env=cfg.env.name, backend="policy (this run)", trials=trials,
                      split=tasks[0].split if tasks else None, tasks=[t.id for t in tasks],
                      concurrency=cfg.rollout.concurrency)
    write_eval_dir(path, req, summarize_eval(trajs, k=trials, tasks={t.id: t for t in tasks}), trajs)
    (path / "heldout.json").write_text(json.dumps(numbers, indent=1))


async def heldout_before(forge: Forge, tasks: Sequence[Task]) -> dict[str, Any]:
    """The ``before`` point: run now (the policy the run starts from), or the one a resumed run wrote."""
    before = load_point(forge.run_dir, "before") or await run_point(forge, tasks, "before", label="start")
    return {"tasks": [t.id for t in tasks], "trials": forge.cfg.eval.heldout.trials, "before": before}


async def heldout_after(forge: Forge, tasks: Sequence[Task], heldout: dict[str, Any]) -> dict[str, Any]:
    """Add the ``after`` point (the final policy) and the per-harness comparison to ``heldout``."""
    heldout["after"] = await run_point(forge, tasks, "after", label="end")
    heldout["diff"] = compare_points(heldout["before"], heldout["after"])
    return heldout
