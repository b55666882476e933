"""``forge eval``: run every task of an environment split k times and score the runs.

Owns: :class:`EvalRequest`, :func:`run_eval_harnesses` (one :func:`run_eval` per harness, same tasks
and trials), :func:`eval_backends` (one per back-end, each written to ``OUT/<i>-<label>/``), :func:`run_eval` (a :class:`~openforge.runner.session.Session` — back-end,
proxy, launcher, harness, environment — running the groups) and :func:`write_eval_dir` (the output
directory ``forge compare`` / ``forge report`` read). Scoring is analysis
(:func:`openforge.analysis.passk.summarize_eval`); running the rollouts is not, so it lives here.

Every trial is kept — policy failures *and* infrastructure failures — because pass@k needs the
valid trials and the failure taxonomy needs the rest. Infra failures are retried by the
orchestrator (they are not trials); the final attempt of each slot is what is reported.
Each trajectory's metadata carries the task's ``category``, ``required_tools``, ``subgoals`` and
``split`` (set by :func:`openforge.runner.rollout.run_rollout`) so an eval directory can be analysed later
without the environment.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from ..analysis.passk import EvalSummary, summarize_eval
from ..core.trajectory import Trajectory
from .rollout import GroupResults
from .session import (
    ProxySettings,
    RolloutSettings,
    Session,
    backend_for,
    harness_factory,
    load_environment,
    load_launcher,
    select_tasks,
)

if TYPE_CHECKING:
    from ..store import TrajectoryStore

__all__ = ["ROLLOUTS_DB", "EvalRequest", "eval_backends", "finished_trials", "run_eval", "run_eval_harnesses",
           "write_eval_dir"]

#: Every attempt of a ``forge eval`` (retried ones too), recorded as it finishes: what Ctrl-C keeps.
ROLLOUTS_DB = "rollouts.db"


class EvalRequest(BaseModel):
    """What to evaluate (the ``forge eval`` options)."""

    model_config = ConfigDict(extra="forbid")

    harness: str
    env: str
    backend: str
    trials: int = Field(3, ge=1)
    split: str | None = "eval"
    tasks: list[str] = Field(default_factory=list)  # task ids; empty = the whole split
    concurrency: int = Field(2, ge=1)
    budget_s: float | None = None
    tokenizer: str | None = None
    launcher: str = "local"
    harness_options: dict[str, Any] = Field(default_factory=dict)  # keyword arguments of the harness
    max_retries: int = Field(1, ge=0)
    faults: Any = None  # env.options.faults (openforge.faults): inject faults into the tasks
    seed: int = 0  # seeds each task group (the injected faults): the same faults on every eval of a model


def _final_attempts(results: GroupResults) -> list[Trajectory]:
    """One trajectory per (task, slot): the last attempt (earlier ones were retried infra failures)."""
    best: dict[tuple[Any, Any], Trajectory] = {}
    loose: list[Trajectory] = []
    for t in [*(t for g in results for t in g.trajectories), *results.discarded]:
        md = t.metadata or {}
        if "group" not in md or "slot" not in md:
            loose.append(t)
            continue
        key = (md["group"], md["slot"])
        if key not in best or int(md.get("attempt", 0)) >= int(best[key].metadata.get("attempt", 0)):
            best[key] = t
    return [*best.values(), *loose]


def _annotate(traj: Trajectory, trial: int) -> Trajectory:
    md = dict(traj.metadata or {})  # the task's category, tools, subgoals and split: set by run_rollout
    md["trial"] = trial
    return traj.model_copy(update={"metadata": md})


async def run_eval(req: EvalRequest, *, store: TrajectoryStore | str | Path | None = None, progress: bool = True,
                   run_dir: str | Path | None = None) -> tuple[EvalSummary, list[Trajectory]]:
    """Run ``req.trials`` rollouts of every selected task; return the summary and all trajectories
    (``run_dir``: where the environment may write its logs, e.g. task-dir service logs)."""
    env = load_environment(req.env, {"faults": req.faults} if req.faults is not None else None)
    if run_dir is not None:
        env.use_run_dir(Path(run_dir))
    tasks = select_tasks(env, split=req.split, task_ids=req.tasks)
    harness = harness_factory(req.harness, req.harness_options)  # a bad option fails before any model loads
    # reference: the tasks' reference solutions, replayed (evaluates the SFT teacher)
    backend = backend_for(req.backend, environment=env, tasks=tasks, tokenizer=req.tokenizer)
    session = Session(backend, environment=env, launcher=load_launcher(req.launcher), harness=harness, store=store,
                      close_backend=True, proxy=ProxySettings(),
                      rollouts=RolloutSettings(concurrency=req.concurrency, budget_s=req.budget_s, progress=progress))
    async with session:
        results = await session.groups(tasks, req.trials, max_retries=req.max_retries, min_group=1,
                                       seed=req.seed)
    trajs = _trials(_final_attempts(results))
    return summarize_eval(trajs, k=req.trials, tasks={t.id: t for t in tasks}), trajs


def _trials(finals: Sequence[Trajectory]) -> list[Trajectory]:
    """The final attempts in (task, slot) order, each annotated with its trial number within its task."""
    trajs = []
    counters: dict[str, int] = {}
    for t in sorted(finals, key=lambda t: (t.task_id, t.metadata.get("slot", 0))):
        n = counters.get(t.task_id, 0)
        counters[t.task_id] = n + 1
        trajs.append(_annotate(t, n))
    return trajs


def finished_trials(store_path: str | Path, *, k: int) -> tuple[EvalSummary, list[Trajectory]]:
    """What an interrupted eval finished: the final attempts recorded in its store (``ROLLOUTS_DB``),
    without the rollouts the interruption cancelled; their summary (``k`` trials planned per task)."""
    from ..core.types import RolloutStatus
    from ..store import load_trajectories

    path = Path(store_path)
    done = [t for t in load_trajectories(path) if t.status != RolloutStatus.CANCELLED] if path.is_file() else []
    results = GroupResults()
    results.discarded.extend(done)  # every attempt: _final_attempts keeps the last one of each slot
    trajs = _trials(_final_attempts(results))
    return summarize_eval(trajs, k=k), trajs


def write_eval_dir(out: str | Path, req: EvalRequest, summary: EvalSummary, trajs: list[Trajectory], *,
                   per_harness: dict[str, EvalSummary] | None = None, interrupted: bool = False) -> Path:
    """Write ``config.yaml`` (the request), ``eval.json`` (the summary; with several harnesses their
    pooled summary plus ``per_harness``; ``interrupted: true`` for the partial summary of an eval
    stopped by Ctrl-C) and ``trajectories.jsonl``."""
    import yaml

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(yaml.safe_dump({"kind": "eval", **req.model_dump()}, sort_keys=False))
    data = summary.model_dump(mode="json")
    if per_harness:
        data["per_harness"] = {h: s.model_dump(mode="json", exclude={"per_task", "behaviour"}) for h, s in per_harness.items()}
    if interrupted:
        data["interrupted"] = True
    (out / "eval.json").write_text(json.dumps(data, indent=1))
    tmp = out / "trajectories.jsonl.tmp"
    with tmp.open("w", encoding="utf-8") as f:
        for t in trajs:
            f.write(t.to_json() + "\n")
    tmp.replace(out / "trajectories.jsonl")
    return out


async def run_eval_harnesses(req: EvalRequest, names: Sequence[str], options: Mapping[str, dict[str, Any]], *,
                             progress: bool = True, run_dir: Any = None, store: str | Path | None = None,
                             ) -> tuple[dict[str, EvalSummary], EvalSummary, list[Trajectory]]:
    """Evaluate the same tasks through each harness; returns (per harness, pooled, all trajectories)."""
    per: dict[str, EvalSummary] = {}
    trajs: list[Trajectory] = []
    for name in names:
        summary, ts = await run_eval(req.model_copy(update={"harness": name, "harness_options": dict(options[name])}),
                                     progress=progress, run_dir=run_dir, store=store)
        per[name] = summary
        trajs += ts
    return per, summarize_eval(trajs, k=req.trials), trajs


async def eval_backends(req: EvalRequest, backends: Sequence[str], out: str | Path, *,
                        progress: bool = True) -> list[tuple[str, Path, EvalSummary]]:
    """Evaluate each back-end on ``req``'s tasks; ``(label, directory, summary)`` per back-end."""
    from ..analysis.eval_many import backend_label, normalize_backend

    results = []
    for i, spec in enumerate(backends):
        spec = normalize_backend(spec)
        label = backend_label(spec)
        one = req.model_copy(update={"backend": spec})
        d = Path(out) / f"{i + 1}-{label}"
        summary, trajs = await run_eval(one, progress=progress, run_dir=d)
        write_eval_dir(d, one, summary, trajs)
        results.append((label, d, summary))
    return results
