"""The held-out before/after of a training run: does the policy do better on tasks it never trained on?

Owns: :func:`heldout_tasks` (the ``eval.heldout`` tasks, refused when one is a task the run trains on),
:func:`point_numbers` (a point's successes / trials with Wilson CIs), :func:`compare_points` (per harness:
successes / trials, Wilson 95 % CI, and the difference with Newcombe's CI labelled ``within noise``,
``better`` or ``worse``) and :func:`heldout_table` (the table printed next to the per-step table).

Running a point (rollouts of the live policy) is :mod:`openforge.heldout_eval`'s job.

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
    from ..trajectory import Trajectory

__all__ = [
    "check_heldout",
    "compare_points",
    "heldout_table",
    "heldout_tasks",
    "load_point",
    "point_numbers",
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


def point_numbers(trajs: Sequence[Trajectory], k: int) -> dict[str, Any]:
    from .passk import summarize_eval

    valid = [t for t in trajs if t.status.trainable]
    c, n = sum(t.status.value == "success" for t in valid), len(valid)
    lo, hi = wilson_interval(c, n)
    s = summarize_eval(trajs, k=k)
    return {"successes": c, "trials": n, "infra_failures": len(trajs) - n, "pass_rate": c / n if n else None,
            "ci95": [round(lo, 4), round(hi, 4)], "mean_reward": s.mean_reward, "pass_at_k": s.pass_at_k,
            "pass_hat_k": s.pass_hat_k, "k": k}


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
