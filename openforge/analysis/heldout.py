"""The held-out before/after of a training run: does the policy do better on tasks it never trained on?

Owns: :func:`heldout_tasks` (the ``eval.heldout`` tasks, refused when one is a task the run trains on),
:func:`run_point` (``trials`` rollouts of every held-out task through every harness of the run, with the
run's live policy, through a proxy of its own so nothing lands in the run's trajectory store; written
to ``RUN_DIR/heldout/<point>/`` as a ``forge eval`` directory), :func:`compare_points` (per harness:
successes / trials, Wilson 95 % CI, and the difference with Newcombe's CI labelled ``within noise``,
``better`` or ``worse``) and :func:`heldout_table` (the table printed next to the per-step table).

``before`` is the policy the run starts from (before the SFT warm-start); a resumed run reuses the
``before`` it wrote when it started. ``after`` is the final policy. Both sample at the run's
``rollout.temperature``, like the training rollouts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..task import Task
from .ci import diff_interval, verdict, wilson_interval

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..forge import Forge
    from ..trajectory import Trajectory

__all__ = [
    "check_heldout",
    "compare_points",
    "heldout_after",
    "heldout_before",
    "heldout_table",
    "heldout_tasks",
    "load_point",
    "run_point",
]


def heldout_tasks(cfg: RunConfig, env: Any, trained: Sequence[Task]) -> list[Task]:
    """The held-out tasks of ``cfg.eval.heldout``; a :class:`ConfigError` when one is trained on
    (``trained``: the run's GRPO tasks and SFT teacher tasks) or none is found."""
    h = cfg.eval.heldout
    if h.tasks:
        by_id = {t.id: t for t in env.tasks()}
        missing = [i for i in h.tasks if i not in by_id]
        if missing:
            raise ConfigError([f"eval.heldout.tasks: {cfg.env.name!r} has no task {i!r}" for i in missing])
        tasks = [by_id[i] for i in h.tasks]
    else:
        tasks = list(env.tasks(h.split))
    if h.max_tasks:
        tasks = tasks[: h.max_tasks]
    if not tasks:
        raise ConfigError(f"eval.heldout: {cfg.env.name!r} has no task in split {h.split!r} "
                          f"(splits: {', '.join(env.splits())})")
    seen = {t.id for t in trained}
    overlap = [t.id for t in tasks if t.id in seen]
    if overlap:
        raise ConfigError([f"eval.heldout: {i} is a task this run trains on; a held-out task must not be" for i in overlap])
    return tasks


def _trained_tasks(cfg: RunConfig, env: Any, tasks: Sequence[Task]) -> list[Task]:
    """The run's GRPO tasks plus, with the SFT warm-start on, its teacher's tasks."""
    out = list(tasks)
    if cfg.sft.enabled and cfg.sft.task_scope == "split":
        out += list(env.tasks(cfg.env.split))
    return out


def check_heldout(cfg: RunConfig, env: Any, tasks: Sequence[Task]) -> list[Task]:
    """:func:`heldout_tasks` for a run about to start on ``tasks`` (empty when it is off)."""
    if not cfg.eval.heldout.enabled:
        return []
    return heldout_tasks(cfg, env, _trained_tasks(cfg, env, tasks))


def _numbers(trajs: Sequence[Trajectory], k: int) -> dict[str, Any]:
    from .passk import summarize_eval

    valid = [t for t in trajs if t.status.trainable]
    c, n = sum(t.status.value == "success" for t in valid), len(valid)
    lo, hi = wilson_interval(c, n)
    s = summarize_eval(trajs, k=k)
    return {"successes": c, "trials": n, "infra_failures": len(trajs) - n, "pass_rate": c / n if n else None,
            "ci95": [round(lo, 4), round(hi, 4)], "mean_reward": s.mean_reward, "pass_at_k": s.pass_at_k,
            "pass_hat_k": s.pass_hat_k, "k": k}


async def run_point(forge: Forge, tasks: Sequence[Task], point: str, *, label: str,
                    harnesses: Sequence[str] | None = None, trials: int | None = None,
                    path: Path | None = None) -> dict[str, Any]:
    """Roll out every task ``trials`` (default ``eval.heldout.trials``) times through every harness
    (default: the run's) with the current policy; write ``path`` (default ``RUN_DIR/heldout/<point>/``)
    and return its numbers (per harness and, with several, ``all``)."""
    from ..proxy.server import ProxyServer
    from ..rollout import run_groups

    cfg = forge.cfg
    trials = trials or cfg.eval.heldout.trials
    names = list(harnesses or cfg.harness.names())
    forge.console.log(f"held-out {point} ({label}): {len(tasks)} tasks × {trials} trials × {len(names)} harness(es)")
    proxy = ProxyServer(forge.backend, agent_uds=forge.socket_path(f"heldout-{point}"), sampling={
        "temperature": cfg.rollout.temperature, "max_tokens": cfg.rollout.max_tokens})
    await proxy.start()
    try:
        from ..harness_mix import GroupHarnesses

        groups = await run_groups(
            [t for _ in names for t in tasks], trials, cfg.rollout.concurrency,
            harness=GroupHarnesses({n: forge.harness_factory(n) for n in names}, [n for n in names for _ in tasks]),
            environment=forge.env, launcher=forge.launcher, proxy=proxy, store=None, min_group=1,
            budget_s=cfg.rollout.timeout_s, progress=forge.progress)
    finally:
        await proxy.stop()
    trajs = [t.model_copy(update={"metadata": {**t.metadata, "heldout": point}})
             for t in [*(t for g in groups for t in g.trajectories), *groups.discarded]
             if "retried" not in str((t.metadata or {}).get("discard_reason", ""))]
    out = {"point": point, "label": label, "per_harness": {
        n: _numbers([t for t in trajs if t.harness == n], trials) for n in names}}
    if len(names) > 1:
        out["all"] = _numbers(trajs, trials)
    _write(path or forge.run_dir / "heldout" / point, cfg, tasks, trajs, out, names, trials)
    return out


def _write(path: Path, cfg: RunConfig, tasks: Sequence[Task], trajs: list[Trajectory], numbers: dict[str, Any],
           names: Sequence[str], trials: int) -> None:
    """A ``forge eval``-shaped directory (config.yaml, eval.json, trajectories.jsonl) plus heldout.json."""
    from .evaluate import EvalRequest, write_eval_dir
    from .passk import summarize_eval

    req = EvalRequest(harness=",".join(names), env=cfg.env.name, backend="policy (this run)", trials=trials,
                      split=tasks[0].split if tasks else None, tasks=[t.id for t in tasks],
                      concurrency=cfg.rollout.concurrency)
    write_eval_dir(path, req, summarize_eval(trajs, k=trials, tasks={t.id: t for t in tasks}), trajs)
    (path / "heldout.json").write_text(json.dumps(numbers, indent=1))


def load_point(run_dir: Path, point: str) -> dict[str, Any] | None:
    """A point written earlier (a resumed run's ``before``), or None."""
    f = run_dir / "heldout" / point / "heldout.json"
    try:
        return json.loads(f.read_text())
    except (OSError, ValueError):
        return None


def compare_points(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Per harness (and ``all``): the change in pass rate with its 95 % CI and verdict."""
    out: dict[str, Any] = {}
    keys = [*before.get("per_harness", {}), *(["all"] if "all" in before else [])]
    for key in keys:
        b = before["all"] if key == "all" else before["per_harness"][key]
        a = (after["all"] if key == "all" else after.get("per_harness", {}).get(key)) or None
        if a is None:
            continue
        d, lo, hi = diff_interval(b["successes"], b["trials"], a["successes"], a["trials"])
        out[key] = {"delta": round(d, 4), "ci95": [round(lo, 4), round(hi, 4)], "verdict": verdict(lo, hi)}
    return out


async def heldout_before(forge: Forge, tasks: Sequence[Task]) -> dict[str, Any]:
    """The ``before`` point: run now (the policy the run starts from), or the one a resumed run wrote."""
    before = load_point(forge.run_dir, "before") or await run_point(forge, tasks, "before", label="start")
    return {"tasks": [t.id for t in tasks], "trials": forge.cfg.eval.heldout.trials, "before": before}


async def heldout_after(forge: Forge, tasks: Sequence[Task], heldout: dict[str, Any]) -> dict[str, Any]:
    """Add the ``after`` point (the final policy) and the per-harness comparison to ``heldout``."""
    heldout["after"] = await run_point(forge, tasks, "after", label="end")
    heldout["diff"] = compare_points(heldout["before"], heldout["after"])
    return heldout


def _rate(m: dict[str, Any]) -> str:
    if not m or not m.get("trials"):
        return "–"
    lo, hi = m["ci95"]
    return f"{m['successes']}/{m['trials']} = {100 * m['pass_rate']:.0f} % [{100 * lo:.0f}–{100 * hi:.0f}]"


def heldout_table(heldout: dict[str, Any] | None) -> Any:
    """The before/after table (None when the run has no held-out result)."""
    if not heldout or "before" not in heldout:
        return None
    from rich.table import Table

    before, after = heldout["before"], heldout.get("after") or {}
    diff = heldout.get("diff") or {}
    table = Table(title=f"held-out tasks ({len(heldout.get('tasks', []))} never trained on × "
                        f"{heldout.get('trials')} trials): pass, successes/trials [95 % CI]")
    for col in ("harness", f"before ({before.get('label')})", f"after ({after.get('label', 'not run')})", "change [95 % CI]", ""):
        table.add_column(col, justify="left" if col in ("harness", "") else "right")
    keys = [*before.get("per_harness", {}), *(["all"] if "all" in before else [])]
    for key in keys:
        b = before["all"] if key == "all" else before["per_harness"][key]
        a = (after.get("all") if key == "all" else after.get("per_harness", {}).get(key)) or {}
        d = diff.get(key)
        change = f"{100 * d['delta']:+.0f} pts [{100 * d['ci95'][0]:+.0f}, {100 * d['ci95'][1]:+.0f}]" if d else "–"
        table.add_row(key, _rate(b), _rate(a), change, d["verdict"] if d else "")
    return table
