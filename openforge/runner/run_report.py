"""What a GRPO run reports: each step's ``metrics.jsonl`` line and the end-of-run summary.

Owns: :func:`step_metrics` (one step's line from its rollout groups: rewards, statuses, mixed groups,
tokens, tool calls, harness drift, times), :func:`mixed_summary` (the run's mixed groups against the
per-step target), :func:`no_step_reason` and :func:`idle_step_lines` (why steps took no gradient step) and :func:`print_summary`
(the table ``forge recipe`` prints at the end, with the per-harness and held-out tables and the verdict).
:class:`~openforge.runner.forge.Forge` writes the lines; this module only shapes and prints them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..analysis.diagnose import diagnose
from ..core.trajectory import Trajectory
from ..train.grpo import count_mixed_groups
from .harness_mix import harness_breakdown
from .rollout import GroupResults

__all__ = ["idle_step_lines", "mixed_summary", "no_step_reason", "print_summary", "step_metrics"]


def step_metrics(groups: GroupResults, *, step: int, elapsed: dict[str, float]) -> dict[str, Any]:
    """One ``metrics.jsonl`` line from ``run_groups``' result."""
    trajs: list[Trajectory] = [t for g in groups for t in g.trajectories]
    rewards = [t.reward for t in trajs]
    n = len(rewards)
    mean = sum(rewards) / n if n else 0.0
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / n) if n else 0.0
    statuses = groups.counts()
    calls = [c for t in trajs for c in t.calls]
    return {
        "step": step,
        "reward_mean": round(mean, 4),
        "reward_std": round(std, 4),
        "pass_rate": round(sum(1 for t in trajs if t.status.value == "success") / n, 4) if n else 0.0,
        "rollouts": n,
        "groups": len(groups),
        "groups_dropped": len(groups.dropped),
        "mixed_groups": count_mixed_groups(groups),
        "statuses": statuses,
        "calls": len(calls),
        "prompt_tokens": sum(len(c.prompt_ids) for c in calls),
        "generated_tokens": sum(len(c.output_ids) for c in calls),
        "tool_calls": sum(len((c.response or {}).get("tool_calls") or []) for c in calls),
        "harness_drift": sum(1 for t in trajs if t.harness_drift),
        **{k: round(v, 3) for k, v in elapsed.items()},
        **harness_breakdown(trajs),
    }


def mixed_summary(steps: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The run's mixed groups against the per-step target: how many steps reached it, which did not."""
    below = [s["step"] for s in steps if s.get("mixed_groups", 0) < s.get("mixed_target", 0)]
    return {"reached": sum(s.get("mixed_groups", 0) for s in steps),
            "target": sum(s.get("mixed_target", 0) for s in steps),
            "steps_at_target": len(steps) - len(below), "steps_below_target": below}


def _statuses(counts: dict[str, int]) -> str:
    short = {"success": "ok", "policy_failure": "fail", "timeout": "timeout"}
    return " ".join(f"{short.get(k, k)}={v}" for k, v in sorted(counts.items(), key=lambda kv: kv[0] not in short))


def _grad_step(s: dict[str, Any]) -> str:
    """``yes`` / ``yes (+N)`` (N resample rounds) / ``no`` (every group tied: no policy gradient)."""
    rounds = s.get("resample_rounds", 0)
    if s.get("gradient_step", True):
        return f"yes (+{rounds})" if rounds else "yes"
    return "no"


def no_step_reason(line: dict[str, Any], *, mixed: int, rounds: int, needs: int) -> str:
    """Why a step took no gradient step: no valid rollout at all (name the statuses), or tied rewards."""
    if not line.get("groups"):
        return f"no gradient step: no trainable rollout ({_statuses(line.get('statuses') or {})})"
    return (f"no gradient step: {mixed} of {line['groups']} groups mixed after {rounds} resample round(s) "
            f"(needs {needs})")


def idle_step_lines(steps: Sequence[dict[str, Any]]) -> list[str]:
    """The summary's lines about steps without a gradient step: those with no valid group (their rollouts
    were env/harness/infra errors: nothing to compare) apart from those whose groups tied."""
    idle = [s for s in steps if not s.get("gradient_step", True)]
    empty = [s["step"] for s in idle if not s.get("groups")]
    tied = [s["step"] for s in idle if s.get("groups")]
    out = []
    if empty:
        out.append(f"no gradient step at step(s) {', '.join(map(str, empty))}: no valid rollout group (the rollouts "
                   "were env/harness/infra errors, discarded and never scored; see the statuses column)")
    if tied:
        out.append(f"no gradient step at step(s) {', '.join(map(str, tied))}: too few groups had differing rewards "
                   "(trainer.cpu.min_mixed_groups) even after resampling, so no policy gradient; those steps' rewards "
                   "are samples of an unchanged policy")
    return out


def print_summary(summary: dict[str, Any], console: Any = None) -> None:
    """The end-of-run table (the SFT warm-start, then one row per GRPO step)."""
    from rich.table import Table

    from ..util.console import new_console

    console = console or new_console()
    table = Table(title=f"{summary.get('recipe')} → {summary.get('run_dir')}")
    for col in ("step", "reward", "±", "pass", "rollouts", "statuses", "mixed", "target", "grad", "gen tok",
                "train tok", "s"):
        table.add_column(col, justify="left" if col == "statuses" else "right", no_wrap=col == "statuses")
    sft = summary.get("sft")
    if sft:
        table.add_row("sft", "", "", f"{sft.get('teacher_pass_rate') or 0:.2f}", str(sft.get("trajectories", "")),
                      "cached" if sft.get("cached") else f"{sft.get('steps', 0)} SFT steps", "", "", "sft", "",
                      str(int(sft.get("trained_tokens", 0))), "0" if sft.get("cached") else f"{sft.get('time_s', 0):.0f}")
    for s in summary.get("steps", []):
        table.add_row(str(s["step"]), f"{s['reward_mean']:.3f}", f"{s['reward_std']:.3f}", f"{s['pass_rate']:.2f}",
                      str(s["rollouts"]), _statuses(s["statuses"]), f"{s.get('mixed_groups', '?')}/{s['groups']}",
                      str(s.get("mixed_target", "")), _grad_step(s), str(s["generated_tokens"]), str(int(s.get("train/trained_tokens", 0))),
                      f"{s['step_time_s']:.0f}")
    console.print(table)
    from ..analysis.heldout import heldout_table
    from .harness_mix import per_harness_table

    for extra in (per_harness_table(summary.get("steps", [])), heldout_table(summary.get("heldout"))):
        if extra is not None:
            console.print(extra)
    mixed = summary.get("mixed_groups")
    if mixed and mixed.get("steps_below_target"):
        console.print(f"mixed groups: {mixed['reached']} reached of a target of {mixed['target']} over the run; below "
                      f"the step's target after its resample rounds at step(s) "
                      f"{', '.join(map(str, mixed['steps_below_target']))} (trainer.cpu.max_resample_rounds bounds them)")
    for line in idle_step_lines(summary.get("steps", [])):
        console.print(line)
    if summary.get("harness_drift"):  # see openforge.harnesses.notes
        console.print(f"[yellow]harness drift[/]: {summary['harness_drift']} rollout(s) whose harness sent another "
                      "system prompt or tools than its notes (trajectory field harness_drift)")
    if summary.get("stopped"):
        from rich.markup import escape

        console.print(f"[red]{escape(str(summary['stopped']).splitlines()[0])}[/]")
    console.print(f"total {summary.get('elapsed_s', 0):.0f}s · run directory {summary.get('run_dir')}")
    if summary.get("steps"):  # one line: the likeliest reason GRPO is not learning, or that it has a signal
        from rich.markup import escape

        console.print(f"verdict: {escape(diagnose(summary['steps']))}")
