"""Results broken down per harness: ``forge eval`` over several harnesses, and the per-harness rows of
``forge compare`` / ``forge report``.

Owns: :func:`harness_names` (``-H react -H pi`` / ``--harness react,pi`` → names),
:func:`options_by_harness` (``--harness-opt KEY=V`` for every harness, ``NAME.KEY=V`` for one),
:func:`harness_summaries`
(trajectories → one :class:`~openforge.analysis.passk.EvalSummary` per harness they ran under),
:func:`harness_table` (the rich table: one row per harness) and :func:`comparability_warnings` (what
makes two columns of ``forge compare`` not like for like: different tasks, different harnesses).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..core.errors import ConfigError

if TYPE_CHECKING:
    from ..core.trajectory import Trajectory
    from .passk import EvalSummary

__all__ = ["comparability_warnings", "harness_names", "harness_summaries", "harness_table", "options_by_harness"]


def harness_names(values: Iterable[str]) -> list[str]:
    """Repeated and comma-separated harness flags → names, in order, each once."""
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    return list(dict.fromkeys(names))


def options_by_harness(options: Mapping[str, Any], names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``{"max_turns": 4, "pi.wire_api": "chat"}`` → per harness: plain keys go to every harness, a
    ``NAME.`` prefix (a harness given) to that one only."""
    out: dict[str, dict[str, Any]] = {n: {} for n in names}
    by_key = {n.replace("-", "_"): n for n in names}  # option keys come with dashes made underscores
    for key, value in options.items():
        head, dot, rest = key.partition(".")
        head = by_key.get(head.replace("-", "_"), head)
        if dot and head in out:
            out[head][rest] = value
        elif dot and len(names) > 1:
            raise ConfigError(f"--harness-opt {key}: {head!r} is not one of the harnesses given ({', '.join(names)})")
        else:
            for n in names:
                out[n][key] = value
    return out


def harness_summaries(trajs: Iterable[Trajectory], k: int, tasks: Mapping[str, Any] | None = None) -> dict[str, EvalSummary]:
    """One summary per harness the trajectories ran under (sorted by name)."""
    from .passk import summarize_eval

    by: dict[str, list[Trajectory]] = {}
    for t in trajs:
        by.setdefault(t.harness or "?", []).append(t)
    return {h: summarize_eval(ts, k=k, tasks=tasks) for h, ts in sorted(by.items())}


def harness_table(per: Mapping[str, EvalSummary], title: str) -> Any:
    """A rich Table: one row per harness (tasks, valid trials, pass@1, pass@k, pass^k, mean reward)."""
    from rich.table import Table

    from .fmt import fmt_value

    k = next(iter(per.values())).k if per else 1
    table = Table(title=title)
    cols = ["harness", "tasks", "trials", "pass@1", *([f"pass@{k}", f"pass^{k}"] if k > 1 else []), "mean reward",
            "infra failures"]
    for col in cols:
        table.add_column(col, justify="left" if col == "harness" else "right")
    for name, s in per.items():
        passk = [fmt_value(s.pass_at_k, "pct"), fmt_value(s.pass_hat_k, "pct")] if k > 1 else []
        table.add_row(name, str(s.tasks), str(s.valid_trials), fmt_value(s.pass_at_1, "pct"), *passk,
                      fmt_value(s.mean_reward, "float"), str(s.trials - s.valid_trials))
    return table


def comparability_warnings(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Why the columns of ``forge compare`` may not compare like with like: rows (``compare_runs``'
    output) measured on different task sets, or under different harnesses."""
    out: list[str] = []
    if len(rows) < 2:
        return out
    sets = [(str(r["name"]), frozenset(r.get("task_ids") or ())) for r in rows]
    if len({s for _, s in sets}) > 1:
        common = frozenset.intersection(*(s for _, s in sets))
        detail = "; ".join(f"{name}: {len(s)} tasks" + (f" ({len(s - common)} not in every run)" if s - common else "")
                           for name, s in sets)
        out.append(f"the runs were measured on different tasks ({len(common)} in common; {detail}): their pass rates "
                   "do not compare like with like")
    harnesses = [(str(r["name"]), str(r.get("harness"))) for r in rows]
    if len({h for _, h in harnesses}) > 1:
        out.append("the runs were measured under different harnesses (" + "; ".join(f"{n}: {h}" for n, h in harnesses)
                   + "): a difference may be the harness's, not the policy's")
    return out
