"""``forge eval``: run every task of an environment split k times and score the runs.

Owns: :class:`EvalRequest`, :func:`run_eval` (wires back-end → proxy → launcher → harness →
environment through the orchestrator, :func:`openforge.rollout.run_groups`) and
:func:`write_eval_dir` (the output directory ``forge compare`` / ``forge report`` read).

Every trial is kept — policy failures *and* infrastructure failures — because pass@k needs the
valid trials and the failure taxonomy needs the rest. Infra failures are retried by the
orchestrator (they are not trials); the final attempt of each slot is what is reported.
Each trajectory's metadata carries the task's ``category``, ``required_tools``, ``subgoals`` and
``split`` (set by :func:`openforge.rollout.run_rollout`) so an eval directory can be analysed later
without the environment.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..errors import ConfigError
from ..task import Task
from ..trajectory import Trajectory
from .passk import EvalSummary, summarize_eval

__all__ = ["EvalRequest", "run_eval", "write_eval_dir"]


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


def _select_tasks(env: Any, req: EvalRequest) -> list[Task]:
    tasks = list(env.tasks(req.split) if req.split else env.tasks())
    if req.tasks:
        by_id = {t.id: t for t in env.tasks()}
        missing = [t for t in req.tasks if t not in by_id]
        if missing:
            raise ConfigError(f"environment {req.env!r} has no task(s) {', '.join(missing)}")
        tasks = [by_id[t] for t in req.tasks]
    if not tasks:
        raise ConfigError(f"environment {req.env!r} has no tasks in split {req.split!r} (splits: {env.splits()})")
    return tasks


def _final_attempts(results: Any) -> list[Trajectory]:
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


async def run_eval(req: EvalRequest, *, store: Any = None, progress: bool = True,
                   run_dir: str | Path | None = None) -> tuple[EvalSummary, list[Trajectory]]:
    """Run ``req.trials`` rollouts of every selected task; return the summary and all trajectories
    (``run_dir``: where the environment may write its logs, e.g. task-dir service logs)."""
    from ..plugins import harness_class, make_environment, make_launcher
    from ..proxy.backends import parse_backend_spec
    from ..proxy.server import ProxyServer
    from ..rollout import run_groups

    env = make_environment(req.env, **({"faults": req.faults} if req.faults is not None else {}))
    if run_dir is not None:
        env.use_run_dir(Path(run_dir))
    tasks = _select_tasks(env, req)
    harness_cls = harness_class(req.harness)
    try:
        harness_cls(**req.harness_options)  # fail early, before any model loads, on a bad option
    except TypeError as e:
        raise ConfigError(f"harness {req.harness!r}: {e}") from None
    harness = functools.partial(harness_cls, **req.harness_options)
    if req.backend == "reference":  # the tasks' reference solutions, replayed: evaluates the SFT teacher
        from ..train.sft import teacher_backend

        tok: Any = None
        if req.tokenizer:
            from ..proxy.backends.transformers import load_tokenizer

            tok = load_tokenizer(req.tokenizer)
        backend = teacher_backend("reference", env=env, tasks=tasks, tokenizer=tok)
    else:
        backend = parse_backend_spec(req.backend, tokenizer=req.tokenizer)
    launcher = make_launcher(req.launcher)
    sock_dir = tempfile.mkdtemp(prefix="forge-eval-")
    try:
        # TCP on loopback for harnesses that share the host network, plus a Unix socket that the
        # local launcher forwards into sandboxes whose network namespace has only loopback.
        async with ProxyServer(backend, store=store, agent_uds=os.path.join(sock_dir, "proxy.sock")) as server:
            results = await run_groups(
                tasks, req.trials, req.concurrency, harness=harness, environment=env, launcher=launcher,
                proxy=server, store=store, max_retries=req.max_retries, min_group=1,
                budget_s=req.budget_s, progress=progress, seed=req.seed,
            )
    finally:
        close = getattr(launcher, "aclose", None)
        if close is not None:
            await close()
        shutil.rmtree(sock_dir, ignore_errors=True)
    by_id = {t.id: t for t in tasks}
    trajs = []
    counters: dict[str, int] = {}
    for t in sorted(_final_attempts(results), key=lambda t: (t.task_id, t.metadata.get("slot", 0))):
        n = counters.get(t.task_id, 0)
        counters[t.task_id] = n + 1
        trajs.append(_annotate(t, n))
    return summarize_eval(trajs, k=req.trials, tasks=by_id), trajs


def write_eval_dir(out: str | Path, req: EvalRequest, summary: EvalSummary, trajs: list[Trajectory], *,
                   per_harness: dict[str, EvalSummary] | None = None) -> Path:
    """Write ``config.yaml`` (the request), ``eval.json`` (the summary; with several harnesses their
    pooled summary plus ``per_harness``) and ``trajectories.jsonl``."""
    import yaml

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(yaml.safe_dump({"kind": "eval", **req.model_dump()}, sort_keys=False))
    data = summary.model_dump(mode="json")
    if per_harness:
        data["per_harness"] = {h: s.model_dump(mode="json", exclude={"per_task", "behaviour"}) for h, s in per_harness.items()}
    (out / "eval.json").write_text(json.dumps(data, indent=1))
    tmp = out / "trajectories.jsonl.tmp"
    with tmp.open("w", encoding="utf-8") as f:
        for t in trajs:
            f.write(t.to_json() + "\n")
    tmp.replace(out / "trajectories.jsonl")
    return out
