"""Behaviour metrics of rollouts: how the agent worked, not only whether it passed.

Owns: :class:`RolloutBehaviour` (per-rollout facts), :func:`rollout_behaviour`,
:class:`BehaviourSummary` and :func:`summarize_behaviour` (aggregates over many rollouts), and
:func:`task_spec` (a task's required tools and subgoals from a :class:`Task` or trajectory
metadata). Every number is defined precisely in docs/metrics.md; the tests in
tests/analysis/test_metrics.py pin those definitions on hand-made trajectories.

Only trainable rollouts (``success``, ``policy_failure``, ``timeout``) enter the summaries:
infrastructure failures say nothing about the policy's behaviour.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from ..core.task import Task
from ..core.trajectory import Trajectory
from ..core.types import ModelCall, RolloutStatus
from ..readings.recovery import recovers_after, repeats_next, summarize_faults
from ..readings.steps import ToolStep, base_tool_name, extract_steps
from .actions import Action, step_actions, url_like

__all__ = [
    "BehaviourSummary",
    "RolloutBehaviour",
    "rollout_behaviour",
    "summarize_behaviour",
    "task_spec",
]


class RolloutBehaviour(BaseModel):
    """Per-rollout behaviour facts (docs/metrics.md, "Per-rollout facts")."""

    rollout_id: str
    task_id: str
    status: str
    reward: float
    steps: int
    shell_steps: int
    tool_counts: dict[str, int]
    write_actions: int
    verification_actions: int
    verified: bool | None  # None: the rollout wrote nothing
    failed_steps: int
    recovered_failures: int
    repeated_after_failure: int
    required_tools: list[str]
    covered_tools: list[str]
    required_tool_coverage: float | None  # None: the task declares no required tools
    subgoal_scores: dict[str, float]
    subgoal_completion: float | None  # None: no subgoals, or none was scored
    plan_completed: bool | None
    calls: int
    prompt_tokens: int
    completion_tokens: int
    wall_time_s: float


def task_spec(traj: Trajectory, task: Task | None = None) -> tuple[list[str], list[str]]:
    """(required_tools, subgoals) of the rollout's task: from ``task`` if given, else from
    ``traj.metadata["required_tools"]`` / ``["subgoals"]``."""
    if task is not None:
        return list(task.required_tools), list(task.subgoals)
    md = traj.metadata or {}
    return [str(t) for t in md.get("required_tools") or []], [str(s) for s in md.get("subgoals") or []]


# ------------------------------------------------------------------------------------------
# Self-verification
# ------------------------------------------------------------------------------------------


def _url_path(url: str) -> tuple[str, list[str]]:
    u = url.strip("'\"").split("?", 1)[0].rstrip("/")
    base, _, path = u.partition("://") if "://" in u else ("", "", u)
    head, *segs = path.split("/")
    return f"{base}://{head}" if base else head, [s for s in segs if s]


def _url_related(target: str, text: str) -> bool:
    """``text`` requests the written URL or a collection above it (``GET /events`` after ``DELETE /events/e3``)."""
    t_host, t_segs = _url_path(target)
    for tok in text.split():
        if not url_like(tok):
            continue
        host, segs = _url_path(tok)
        if host == t_host and segs and t_segs[: len(segs)] == segs:
            return True
    return False


def _mentions(text: str, target: str) -> bool:
    if target in text:
        return True
    if url_like(target):
        return _url_related(target, text)
    base = posixpath.basename(target.rstrip("/"))
    return len(base) >= 3 and re.search(rf"(?<![\w.-]){re.escape(base)}(?![\w-])", text) is not None


def verification_actions(actions: Sequence[Action]) -> list[Action]:
    """Actions that check earlier work (docs/metrics.md, "self-verification").

    Action ``j`` (not a write) verifies when some write action ``i < j`` exists and (a) ``j``'s
    text mentions a target written before it, or (b) ``j`` is a read-verb service tool on the
    resource of an earlier write-verb service tool, or (c) ``j`` repeats exactly a non-write
    action ``k`` with a write action between ``k`` and ``j`` (re-running a check).
    """
    out: list[Action] = []
    targets: set[str] = set()
    nouns: set[str] = set()
    seen: dict[tuple[str, str], int] = {}  # signature -> position of its first occurrence
    last_write = -1
    for pos, act in enumerate(actions):
        sig = (act.tool, act.text)
        if act.kind == "write":
            targets |= act.targets
            if act.noun:
                nouns.add(act.noun)
            last_write = pos
            continue
        if last_write >= 0 and (
            any(_mentions(act.text, t) for t in targets)
            or (act.kind == "read" and act.noun is not None and act.noun in nouns)
            or (sig in seen and seen[sig] < last_write)
        ):
            out.append(act)
        seen.setdefault(sig, pos)
    return out


# ------------------------------------------------------------------------------------------
# Per rollout
# ------------------------------------------------------------------------------------------


# Capability names an environment may require instead of a tool name (claw: ``("shell", "http")``):
# covered by any tool of that kind, or by a generic-shell command running one of the programs.
CAPABILITIES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "http": (frozenset({"http", "http_request", "fetch", "web_fetch", "webfetch", "request", "curl"}),
             frozenset({"curl", "wget", "http", "https", "xh", "httpie"})),
    "python": (frozenset({"python", "run_python", "python_exec", "code_interpreter", "ipython"}),
               frozenset({"python", "python3"})),
    "sql": (frozenset({"sql", "query", "run_sql", "sqlite", "execute_sql"}),
            frozenset({"sqlite3", "psql", "mysql", "duckdb"})),
    "git": (frozenset({"git"}), frozenset({"git"})),
}
_CMD_WORD = re.compile(r"(?:^|[;&|(`\n]|\$\()\s*(?:(?:sudo|env|exec|time|nohup)\s+|\w+=\S*\s+)*(?:\S*/)?([\w.+-]+)")


def _program_words(command: str) -> set[str]:
    return {m.group(1) for m in _CMD_WORD.finditer(command)}


def _covered(required: str, steps: Sequence[ToolStep]) -> bool:
    want = base_tool_name(required)
    if want == "shell" and any(s.is_shell for s in steps):
        return True
    if want in CAPABILITIES:
        tools, programs = CAPABILITIES[want]
        if any(s.base_name in tools for s in steps):
            return True
        if any(s.is_shell and s.command and _program_words(s.command) & programs for s in steps):
            return True
    word = re.compile(rf"(?<![\w./-]){re.escape(required)}(?![\w./-])")
    for s in steps:
        if s.base_name == want or s.name.lower() == required.lower():
            return True
        if s.is_shell and s.command and word.search(s.command):
            return True
    return False


def _subgoal_scores(traj: Trajectory, subgoals: Sequence[str]) -> dict[str, float]:
    reported: dict[str, Any] = {}
    nested = (traj.metrics or {}).get("subgoals")
    if isinstance(nested, Mapping):
        reported.update(nested)
    for key, value in (traj.rewards or {}).items():
        name = key[len("subgoal:"):] if key.startswith("subgoal:") else key
        reported.setdefault(name, value)
    scores: dict[str, float] = {}
    for s in subgoals:
        if s in reported:
            v = reported[s]
            scores[s] = min(1.0, max(0.0, float(v))) if not isinstance(v, bool) else float(v)
    return scores


def _tokens(calls: Sequence[ModelCall]) -> tuple[int, int]:
    prompt = completion = 0
    for c in calls:
        usage = (c.response or {}).get("usage") or c.response or {}
        prompt += len(c.prompt_ids) or int(usage.get("prompt_tokens") or usage.get("input_tokens") or 0)
        completion += len(c.output_ids) or int(usage.get("completion_tokens") or usage.get("output_tokens") or 0)
    return prompt, completion


def _wall_time(traj: Trajectory) -> float:
    for key in ("wall_time_s", "wall_s", "total_s", "duration_s", "elapsed_s"):
        v = (traj.metrics or {}).get(key)
        if isinstance(v, (int, float)):
            return float(v)
    timed = [c for c in traj.calls if c.started_at]
    if not timed:
        return float(sum(c.latency_s for c in traj.calls))
    return max(c.started_at + c.latency_s for c in timed) - min(c.started_at for c in timed)


def rollout_behaviour(traj: Trajectory, task: Task | None = None) -> RolloutBehaviour:
    """Compute every per-rollout behaviour fact of one trajectory."""
    steps = extract_steps(traj.calls)
    actions = [a for s in steps for a in step_actions(s)]
    writes = sum(a.kind == "write" for a in actions)
    verifications = verification_actions(actions)

    failed = [s for s in steps if s.error]
    recovered = sum(recovers_after(steps, f.index) for f in failed)
    repeated = sum(repeats_next(steps, f.index) for f in failed)

    required, subgoals = task_spec(traj, task)
    covered = [r for r in required if _covered(r, steps)]
    scores = _subgoal_scores(traj, subgoals)
    completion = sum(scores.get(s, 0.0) for s in subgoals) / len(subgoals) if subgoals and scores else None
    plan = all(scores.get(s, 0.0) >= 1.0 for s in subgoals) if subgoals and scores else None

    counts: dict[str, int] = {}
    for s in steps:
        counts[s.name] = counts.get(s.name, 0) + 1
    prompt, completion_toks = _tokens(traj.calls)
    return RolloutBehaviour(
        rollout_id=traj.rollout_id, task_id=traj.task_id, status=str(traj.status), reward=traj.reward,
        steps=len(steps), shell_steps=sum(s.is_shell for s in steps), tool_counts=counts,
        write_actions=writes, verification_actions=len(verifications),
        verified=(len(verifications) > 0) if writes else None,
        failed_steps=len(failed), recovered_failures=recovered, repeated_after_failure=repeated,
        required_tools=required, covered_tools=covered,
        required_tool_coverage=len(covered) / len(required) if required else None,
        subgoal_scores=scores, subgoal_completion=completion, plan_completed=plan,
        calls=len(traj.calls), prompt_tokens=prompt, completion_tokens=completion_toks,
        wall_time_s=_wall_time(traj),
    )


# ------------------------------------------------------------------------------------------
# Aggregates
# ------------------------------------------------------------------------------------------


class BehaviourSummary(BaseModel):
    """Behaviour metrics over a set of rollouts (docs/metrics.md, "Aggregates"). None = undefined."""

    rollouts: int
    generic_shell_share: float | None
    self_verification_rate: float | None
    required_tool_coverage: float | None
    subgoal_completion: float | None
    plan_completion_rate: float | None
    error_recovery_rate: float | None
    repeat_after_failure_rate: float | None
    success_after_failure_rate: float | None
    steps_per_task: float | None
    calls_per_task: float | None
    tokens_per_task: float | None
    completion_tokens_per_task: float | None
    wall_time_per_task_s: float | None
    # injected faults (openforge.faults; docs/metrics.md, "Injected faults"): None without faults
    fault_met_rate: float | None = None
    fault_recovery_rate: float | None = None
    steps_to_recover: float | None = None
    fault_repeat_rate: float | None = None
    pass_rate_with_faults: float | None = None
    pass_rate_without_faults: float | None = None


def _mean(xs: Iterable[float]) -> float | None:
    vals = list(xs)
    return sum(vals) / len(vals) if vals else None


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def summarize_behaviour(
    trajectories: Iterable[Trajectory | RolloutBehaviour], tasks: Mapping[str, Task] | None = None
) -> BehaviourSummary:
    """Aggregate behaviour over trainable rollouts; infra failures are left out."""
    rows: list[RolloutBehaviour] = []
    trajs: list[Trajectory] = []
    for t in trajectories:
        if isinstance(t, Trajectory):
            trajs.append(t)
            if not t.status.trainable:
                continue
            rows.append(rollout_behaviour(t, (tasks or {}).get(t.task_id)))
        elif RolloutStatus(t.status).trainable:
            rows.append(t)
    with_failure = [r for r in rows if r.failed_steps]
    return BehaviourSummary(
        rollouts=len(rows),
        generic_shell_share=_ratio(sum(r.shell_steps for r in rows), sum(r.steps for r in rows)),
        self_verification_rate=_mean(float(r.verified) for r in rows if r.verified is not None),
        required_tool_coverage=_mean(r.required_tool_coverage for r in rows if r.required_tool_coverage is not None),
        subgoal_completion=_mean(r.subgoal_completion for r in rows if r.subgoal_completion is not None),
        plan_completion_rate=_mean(float(r.plan_completed) for r in rows if r.plan_completed is not None),
        error_recovery_rate=_ratio(sum(r.recovered_failures for r in rows), sum(r.failed_steps for r in rows)),
        repeat_after_failure_rate=_ratio(sum(r.repeated_after_failure for r in rows), sum(r.failed_steps for r in rows)),
        success_after_failure_rate=_mean(float(r.status == RolloutStatus.SUCCESS) for r in with_failure),
        steps_per_task=_mean(r.steps for r in rows),
        calls_per_task=_mean(r.calls for r in rows),
        tokens_per_task=_mean(r.prompt_tokens + r.completion_tokens for r in rows),
        completion_tokens_per_task=_mean(r.completion_tokens for r in rows),
        wall_time_per_task_s=_mean(r.wall_time_s for r in rows),
        **_fault_fields(trajs),
    )


def _fault_fields(trajs: list[Trajectory]) -> dict[str, float | None]:
    fs = summarize_faults(trajs)
    if fs is None:
        return {}
    return {"fault_met_rate": fs.fault_met_rate, "fault_recovery_rate": fs.fault_recovery_rate,
            "steps_to_recover": fs.steps_to_recover, "fault_repeat_rate": fs.fault_repeat_rate,
            "pass_rate_with_faults": fs.pass_rate_with_faults, "pass_rate_without_faults": fs.pass_rate_without_faults}
