"""Side-by-side metrics of several runs (``forge compare``).

Owns: :data:`COMPARE_ROWS` (which metrics, labels and formats), :func:`run_summary` (one run
→ an :class:`EvalSummary` over a chosen step), :func:`compare_runs` and :func:`compare_table`
(a rich table: one row per metric, one column per run).

A run is anything :func:`load_run` reads: a training run directory, a ``forge eval`` output
directory, or one trajectory file. For a training run the step to compare is selectable
(``all`` trajectories, ``first`` or ``last`` step, or a step number), for all runs (``--step``) or
per run (``RUN@STEP``): "before and after training" is ``forge compare run@first run@last``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.errors import ConfigError
from .fmt import fmt_value
from .passk import EvalSummary, summarize_eval
from .rundir import RunData, trajectory_step

__all__ = ["COMPARE_ROWS", "behaviour_table", "compare_runs", "compare_table", "fmt_value", "run_summary",
           "split_run_arg"]

# (key in the flattened summary, label, format) — "pct" prints 0.139 as 13.9 %.
COMPARE_ROWS: list[tuple[str, str, str]] = [
    ("harness", "harness", "str"),
    ("tasks", "tasks", "int"),
    ("trials", "trials (all)", "int"),
    ("pass_at_1", "pass@1", "pct"),
    ("pass_at_k", "pass@k", "pct"),
    ("pass_hat_k", "pass^k", "pct"),
    ("mean_reward", "mean reward", "float"),
    ("infra_failures", "infra failures", "int"),
    ("behaviour.generic_shell_share", "generic-shell share", "pct"),
    ("behaviour.self_verification_rate", "self-verification", "pct"),
    ("behaviour.required_tool_coverage", "required-tool coverage", "pct"),
    ("behaviour.subgoal_completion", "subgoal completion", "pct"),
    ("behaviour.plan_completion_rate", "plan completion", "pct"),
    ("behaviour.error_recovery_rate", "error recovery", "pct"),
    ("behaviour.success_after_failure_rate", "success after a failed step", "pct"),
    ("behaviour.pass_rate_with_faults", "pass rate with faults", "pct"),
    ("behaviour.pass_rate_without_faults", "pass rate without faults", "pct"),
    ("behaviour.fault_met_rate", "faults met", "pct"),
    ("behaviour.fault_recovery_rate", "fault recovery", "pct"),
    ("behaviour.steps_to_recover", "steps to recover", "float"),
    ("behaviour.fault_repeat_rate", "repeats failing action after fault", "pct"),
    ("behaviour.steps_per_task", "steps / task", "float"),
    ("behaviour.tokens_per_task", "tokens / task", "int"),
    ("behaviour.wall_time_per_task_s", "wall time / task (s)", "float"),
]
#: Rows shown only when some run injected faults (openforge.faults).
FAULT_ROWS = frozenset(k for k, _, _ in COMPARE_ROWS if "fault" in k or k == "behaviour.steps_to_recover")

_INFRA = ("harness_error", "env_error", "infra_error", "cancelled")
#: Metrics shown per harness (rows ``pass@1 · react`` ...) when a run mixes harnesses.
PER_HARNESS_ROWS: dict[str, tuple[str, str]] = {"pass_at_1": ("pass@1", "pct"), "pass_at_k": ("pass@k", "pct"),
                                                "mean_reward": ("mean reward", "float")}


def _select(run: RunData, step: str) -> list:
    trajs = run.trajectories
    if step == "all":
        return run.policy_trajectories or trajs
    steps = run.steps
    if not steps:
        raise ConfigError(f"{run.path}: its trajectories carry no training step; use --step all")
    if step == "first":
        n = steps[0]
    elif step == "last":
        n = steps[-1]
    else:
        try:
            n = int(step)
        except ValueError:
            raise ConfigError(f"--step must be all, first, last or a number, not {step!r}") from None
        if n not in steps:
            raise ConfigError(f"{run.path}: no trajectories at step {n} (steps: {steps[0]}..{steps[-1]})")
    return [t for t in trajs if trajectory_step(t) == n]


def run_summary(run: RunData, *, k: int | None = None, step: str = "all") -> EvalSummary:
    """The eval summary of one run. ``k`` defaults to the run's ``eval.json`` k, else 1."""
    if k is None:
        k = int((run.eval or {}).get("k") or 1)
    trajs = _select(run, step)
    if not trajs:
        if run.eval is not None and step == "all":
            return EvalSummary.model_validate(run.eval)
        raise ConfigError(f"{run.path}: no trajectories to compare")
    return summarize_eval(trajs, k=k)


def _harness(run: RunData) -> str:
    names = sorted({t.harness for t in run.trajectories if t.harness})
    if names:
        return ", ".join(names)
    h = (run.config or {}).get("harness")
    if isinstance(h, dict):
        return str(h.get("name") or "?")
    return str(h) if h else "?"


def _flatten(summary: EvalSummary, run: RunData) -> dict[str, Any]:
    flat: dict[str, Any] = summary.model_dump(exclude={"per_task", "categories", "behaviour"})
    flat["harness"] = _harness(run)
    flat["infra_failures"] = sum(summary.statuses.get(s, 0) for s in _INFRA)
    for key, value in (summary.behaviour.model_dump() if summary.behaviour else {}).items():
        flat[f"behaviour.{key}"] = value
    return flat


def compare_runs(runs: Sequence[RunData], *, k: int | None = None, step: str = "all",
                 steps: Sequence[str | None] | None = None) -> list[dict[str, Any]]:
    """One flattened metric dict per run (keys as in :data:`COMPARE_ROWS`, plus ``name``).
    ``steps`` (one per run, None = ``step``) picks a step per run: ``[run@first, run@last]``."""
    out = []
    for i, run in enumerate(runs):
        own = steps[i] if steps is not None and steps[i] else step
        summary = run_summary(run, k=k, step=own)
        flat = _flatten(summary, run)
        flat["name"] = run.name if own == "all" else f"{run.name}@{own}"
        flat["task_ids"] = sorted({t.task_id for t in summary.per_task})
        flat.update(_per_harness(_select(run, own) if run.trajectories else [], summary.k))
        out.append(flat)
    return out


def _per_harness(trajs: list, k: int) -> dict[str, Any]:
    """``harness.<name>.<metric>`` keys when the trajectories ran under more than one harness."""
    from .per_harness import harness_summaries

    per = harness_summaries(trajs, k)
    if len(per) < 2:
        return {}
    return {f"harness.{h}.{key}": getattr(s, key) for h, s in per.items()
            for key in ("valid_trials", *PER_HARNESS_ROWS)}


def split_run_arg(arg: str) -> tuple[str, str | None]:
    """``runs/x@last`` → (``runs/x``, ``last``); a path that exists as written is never split."""
    from pathlib import Path

    if "@" in arg and not Path(arg).exists():
        path, _, step = arg.rpartition("@")
        if path:
            return path, step
    return arg, None


def behaviour_table(summary: EvalSummary, title: str = "behaviour") -> Any:
    """A rich Table of one summary's behaviour metrics (the ``behaviour.*`` rows)."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    values = summary.behaviour.model_dump() if summary.behaviour else {}
    for key, label, kind in COMPARE_ROWS:
        if key.startswith("behaviour."):
            value = values.get(key.split(".", 1)[1])
            if value is None and key in FAULT_ROWS:
                continue
            table.add_row(label, fmt_value(value, kind))
    return table


def compare_table(rows: Sequence[dict[str, Any]]) -> Any:
    """A rich Table: metrics down, runs across."""
    from rich.table import Table

    table = Table(title="forge compare", show_lines=False)
    table.add_column("metric", style="bold")
    for r in rows:
        table.add_column(str(r["name"]), justify="right")
    all_k1 = all(r.get("k", 1) == 1 for r in rows)
    for key, label, kind in COMPARE_ROWS:
        if all_k1 and key in ("pass_at_k", "pass_hat_k"):
            continue  # pass@1 = pass^1: shown once
        if key in FAULT_ROWS and all(r.get(key) is None for r in rows):
            continue  # no run injected faults
        ks = {r.get("k") for r in rows}
        same_k = len(ks) == 1
        if key in ("pass_at_k", "pass_hat_k") and rows:
            sym = "@" if key == "pass_at_k" else "^"
            label = f"pass{sym}{rows[0].get('k')}" if same_k else f"pass{sym}k"
        values = [fmt_value(r.get(key), kind) for r in rows]
        if key in ("pass_at_k", "pass_hat_k") and not same_k:
            values = [f"{v} (k={r.get('k')})" for v, r in zip(values, rows)]
        table.add_row(label, *values)
        if key == "pass_hat_k" or (all_k1 and key == "pass_at_1"):
            _harness_rows(table, rows)
    return table


def _harness_rows(table: Any, rows: Sequence[dict[str, Any]]) -> None:
    """The per-harness rows (``pass@1 · react``, ...) of runs that mixed harnesses."""
    names = sorted({key.split(".")[1] for r in rows for key in r if key.startswith("harness.")})
    for name in names:
        for metric, (label, kind) in PER_HARNESS_ROWS.items():
            if metric == "pass_at_k" and all(r.get("k", 1) == 1 for r in rows):
                continue
            table.add_row(f"  {label} · {name}", *[fmt_value(r.get(f"harness.{name}.{metric}"), kind) for r in rows])
