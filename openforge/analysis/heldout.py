"""The held-out before/after of a training run: does the policy do better on tasks it never trained on?

Owns: :func:`heldout_tasks` (the ``eval.heldout`` tasks, refused when one is a task the run trains on),
:func:`point_numbers` (a point's successes / trials with Wilson CIs, and its per-task outcomes),
:func:`compare_points` (per harness: the difference between two points with a 95 % CI labelled ``within
noise``, ``better`` or ``worse``; *paired* by task and trial when both points carry their outcomes),
:func:`shares` (SFT's share and GRPO's share of the change) and :func:`heldout_table` (the table printed
next to the per-step table).

Running a point (rollouts of the live policy) is :mod:`openforge.runner.heldout_eval`'s job.

Three points answer one question: ``before`` is the policy the run starts from (the untrained model,
before the SFT warm-start), ``warmstart`` the policy after the warm-start and before the first GRPO
step (absent when the run has no warm-start), ``after`` the final policy. RL's claim is ``after`` −
``warmstart`` (GRPO's own share), next to SFT's (``warmstart`` − ``before``): crediting RL with
``after`` − ``before`` would count what the warm-start did. All three sample at the run's
``rollout.temperature`` on the same tasks, trials and harnesses. A resumed run reuses the points it wrote.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import ConfigError
from ..core.task import Task
from .ci import diff_interval, paired_diff_interval, paired_table, verdict, wilson_interval

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..core.trajectory import Trajectory

__all__ = [
    "check_heldout",
    "compare_points",
    "heldout_table",
    "heldout_tasks",
    "load_point",
    "point_numbers",
    "shares",
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
    outcomes: dict[str, list[int]] = {}
    for t in valid:  # in rollout order: trial j of a task pairs with trial j of the same task elsewhere
        outcomes.setdefault(t.task_id, []).append(int(t.status.value == "success"))
    return {"successes": c, "trials": n, "infra_failures": len(trajs) - n, "pass_rate": c / n if n else None,
            "ci95": [round(lo, 4), round(hi, 4)], "mean_reward": s.mean_reward, "pass_at_k": s.pass_at_k,
            "pass_hat_k": s.pass_hat_k, "k": k, "outcomes": outcomes}


def load_point(run_dir: Path, point: str) -> dict[str, Any] | None:
    """A point written earlier (a resumed run's ``before``), or None."""
    f = run_dir / "heldout" / point / "heldout.json"
    try:
        return json.loads(f.read_text())
    except (OSError, ValueError):
        return None


def _numbers(point: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    if not point:
        return None
    return point.get("all") if key == "all" else point.get("per_harness", {}).get(key)


def _pairs(b: dict[str, Any], a: dict[str, Any], key: str, before: dict[str, Any],
           after: dict[str, Any]) -> tuple[list[int], list[int]] | None:
    """Trial ``j`` of task ``t`` in one point against trial ``j`` of ``t`` in the other, over the tasks
    and trials both measured validly; ``None`` when a point does not carry its outcomes (older runs)."""
    if key == "all":  # every harness's pairs together
        first: list[int] = []
        second: list[int] = []
        for h in before.get("per_harness", {}):
            hb, ha = _numbers(before, h), _numbers(after, h)
            got = _pairs(hb, ha, h, before, after) if hb and ha else None
            if got is None:
                return None
            first, second = first + got[0], second + got[1]
        return first, second
    ob, oa = b.get("outcomes"), a.get("outcomes")
    if ob is None or oa is None:
        return None
    first, second = [], []
    for task in sorted(set(ob) & set(oa)):
        m = min(len(ob[task]), len(oa[task]))
        first += ob[task][:m]
        second += oa[task][:m]
    return first, second


def compare_points(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Per harness (and ``all``): the change in pass rate from ``before`` to ``after`` with its 95 % CI and
    verdict. Paired (Newcombe's method 10 for paired data, over the task/trial pairs both points measured)
    when both carry their outcomes, else the unpaired interval of the two pass rates."""
    out: dict[str, Any] = {}
    keys = [*before.get("per_harness", {}), *(["all"] if "all" in before else [])]
    for key in keys:
        b, a = _numbers(before, key), _numbers(after, key)
        if b is None or a is None:
            continue
        pairs = _pairs(b, a, key, before, after)
        if pairs is not None:
            d, lo, hi = paired_diff_interval(*paired_table(*pairs))
            extra = {"paired": True, "pairs": len(pairs[0])}
        else:
            d, lo, hi = diff_interval(b["successes"], b["trials"], a["successes"], a["trials"])
            extra = {"paired": False}
        out[key] = {"delta": round(d, 4), "ci95": [round(lo, 4), round(hi, 4)], "verdict": verdict(lo, hi), **extra}
    return out


def shares(heldout: dict[str, Any]) -> dict[str, Any]:
    """``sft`` (warm-start − untrained), ``grpo`` (final − warm-start: RL's own share; final − untrained
    when the run has no warm-start) and ``total`` (final − untrained), each from :func:`compare_points`."""
    before, warm, after = heldout.get("before"), heldout.get("warmstart"), heldout.get("after")
    out: dict[str, Any] = {}
    if before and warm:
        out["sft"] = compare_points(before, warm)
    if after and (warm or before):
        out["grpo"] = compare_points(warm or before, after)
    if before and after:
        out["total"] = compare_points(before, after)
    return out


def _rate(m: dict[str, Any]) -> str:
    if not m or not m.get("trials"):
        return "–"
    lo, hi = m["ci95"]
    return f"{m['successes']}/{m['trials']} = {100 * m['pass_rate']:.0f} % [{100 * lo:.0f}–{100 * hi:.0f}]"


def _change(d: dict[str, Any] | None) -> str:
    if not d:
        return "–"
    return f"{100 * d['delta']:+.0f} pts [{100 * d['ci95'][0]:+.0f}, {100 * d['ci95'][1]:+.0f}] {d['verdict']}"


def heldout_table(heldout: dict[str, Any] | None) -> Any:
    """The three-point table (None when the run has no held-out result): untrained, SFT warm-start and
    final pass rates, then SFT's share and GRPO's own share of the change with paired 95 % CIs."""
    if not heldout or "before" not in heldout:
        return None
    from rich.table import Table

    before, warm, after = heldout["before"], heldout.get("warmstart"), heldout.get("after") or {}
    sh = heldout.get("shares") or shares(heldout)
    table = Table(title=f"held-out tasks ({len(heldout.get('tasks', []))} never trained on × "
                        f"{heldout.get('trials')} trials): pass, successes/trials [95 % CI]; changes paired by "
                        "task and trial")
    cols = ["harness", f"untrained ({before.get('label')})"]
    if warm:
        cols.append(f"SFT warm-start ({warm.get('label')})")
    cols.append(f"final ({after.get('label', 'not run')})")
    if warm:
        cols.append("SFT: warm-start − untrained")
    cols.append("GRPO: final − warm-start" if warm else "GRPO: final − untrained")
    for col in cols:
        table.add_column(col, justify="left" if col == "harness" else "right")
    keys = [*before.get("per_harness", {}), *(["all"] if "all" in before else [])]
    for key in keys:
        row = [key, _rate(_numbers(before, key) or {})]
        if warm:
            row.append(_rate(_numbers(warm, key) or {}))
        row.append(_rate(_numbers(after, key) or {}))
        if warm:
            row.append(_change((sh.get("sft") or {}).get(key)))
        row.append(_change((sh.get("grpo") or {}).get(key)))
        table.add_row(*row)
    return table
