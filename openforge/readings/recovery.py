"""Recovery from failures: after a failed tool result (any rollout) and after an injected fault.

Owns: the step-level recovery definitions shared by the behaviour metrics (:func:`recovers_after`,
:func:`repeats_next`), the per-fault outcome of a rollout with injected faults (:class:`FaultOutcome`,
:func:`fault_outcomes`: met at which step, recovered, steps to recover, repeats of the failing action)
and their aggregates (:class:`FaultSummary`, :func:`summarize_faults`: recovery rate and pass rate
with and without faults). Definitions: docs/metrics.md, "Injected faults".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import PurePosixPath
from typing import Any

from pydantic import BaseModel

from ..core.trajectory import Trajectory
from ..core.types import ModelCall, RolloutStatus
from .steps import ToolStep, extract_steps

__all__ = ["FaultOutcome", "FaultSummary", "fault_outcomes", "recovers_after", "repeats_next", "summarize_faults"]

_PERMISSION = re.compile(r"permission denied|EACCES|operation not permitted|PermissionError", re.I)
_LOCK = re.compile(r"file exists|\block(ed)?\b|\.lock\b", re.I)


def recovers_after(steps: Sequence[ToolStep], i: int) -> bool:
    """Failed step ``i`` is recovered: a later step succeeded with a different signature."""
    return any(not t.error and t.signature != steps[i].signature for t in steps[i + 1:])


def repeats_next(steps: Sequence[ToolStep], i: int) -> bool:
    """Failed step ``i``'s very next step has the same signature (an unchanged retry)."""
    return i + 1 < len(steps) and steps[i + 1].signature == steps[i].signature


class FaultOutcome(BaseModel):
    """One injected fault in one rollout (docs/metrics.md, "Injected faults")."""

    kind: str
    target: str
    met: bool
    met_step: int | None  # the step at which the agent met it (None: not met, or no step to point at)
    recovered: bool  # met, and the task was still solved
    steps_to_recover: int | None  # steps from met_step to the next step that succeeded
    repeats: int  # later steps with the met step's signature that failed again


def _step_at_time(steps: Sequence[ToolStep], calls: Sequence[ModelCall], t: float) -> int | None:
    """The step whose tool run was under way at host time ``t``: emitted by the last call that began
    before ``t`` (its first failed step, else its first step)."""
    began = [c.index for c in calls if c.started_at and c.started_at <= t]
    if not began:
        return None
    own = [s for s in steps if s.call_index == max(began)]
    hit = next((s for s in own if s.error), own[0] if own else None)
    return hit.index if hit else None


def _text_match(steps: Sequence[ToolStep], pattern: re.Pattern[str], *, in_args: bool = False) -> int | None:
    """The first step whose result (or, with ``in_args``, its arguments) matches — a failed pipeline
    stage reports ``Permission denied`` even when the pipeline's exit status is 0."""
    for s in steps:
        if pattern.search(s.result or "") or (in_args and pattern.search(s.args_text)):
            return s.index
    return None


def _met_step(kind: str, target: str, fired_at: Sequence[float], steps: Sequence[ToolStep],
              calls: Sequence[ModelCall]) -> tuple[bool, int | None]:
    if kind in ("service_unavailable", "service_timeout", "flaky_command", "missing_tool"):
        return (bool(fired_at), _step_at_time(steps, calls, min(fired_at)) if fired_at else None)
    if kind == "permission_denied":  # "Permission denied", or a failure naming the file ("unable to open app.db")
        i = _text_match(steps, _PERMISSION)
        name = PurePosixPath(target).name
        j = next((s.index for s in steps if s.error and name and name in (s.result or "")), None)
        i = min((x for x in (i, j) if x is not None), default=None)
    elif kind == "locked_file":
        i = _text_match(steps, _LOCK)
    else:  # corrupt_state: the agent touched the corrupted file
        name = PurePosixPath(target).name
        i = _text_match(steps, re.compile(rf"(?<![\w.-]){re.escape(name)}(?![\w-])"), in_args=True) if name else None
    return i is not None, i


def fault_outcomes(traj: Trajectory, steps: Sequence[ToolStep] | None = None) -> list[FaultOutcome]:
    """The outcome of every armed fault recorded in ``traj.metadata["faults"]["injected"]``."""
    injected = ((traj.metadata or {}).get("faults") or {}).get("injected") or []
    steps = extract_steps(traj.calls) if steps is None else steps
    solved = traj.status == RolloutStatus.SUCCESS
    out = []
    for f in injected:
        if not f.get("armed", True):
            continue
        met, i = _met_step(f["kind"], f.get("target", ""), f.get("fired_at") or [], steps, traj.calls)
        after = next((s.index for s in steps[i + 1:] if not s.error), None) if i is not None else None
        repeats = sum(s.error and s.signature == steps[i].signature for s in steps[i + 1:]) if i is not None else 0
        out.append(FaultOutcome(kind=f["kind"], target=f.get("target", ""), met=met, met_step=i,
                                recovered=met and solved,
                                steps_to_recover=after - i if (met and solved and after is not None and i is not None) else None,
                                repeats=repeats))
    return out


def is_faulty(traj: Trajectory) -> bool | None:
    """True: faults were injected; False: an episode of a fault-injected run left clean; None: no faults."""
    f = (traj.metadata or {}).get("faults")
    if not isinstance(f, dict):
        return None
    return bool(f.get("faulty")) and any(i.get("armed", True) for i in f.get("injected") or [])


class FaultSummary(BaseModel):
    """Fault metrics over trainable rollouts (docs/metrics.md, "Injected faults"). None = undefined."""

    faulty_rollouts: int
    clean_rollouts: int
    faults_injected: int
    fault_met_rate: float | None
    fault_recovery_rate: float | None
    steps_to_recover: float | None
    fault_repeat_rate: float | None
    pass_rate_with_faults: float | None
    pass_rate_without_faults: float | None
    by_kind: dict[str, dict[str, Any]]


def _ratio(n: float, d: float) -> float | None:
    return n / d if d else None


def summarize_faults(trajectories: Iterable[Trajectory]) -> FaultSummary | None:
    """Aggregate over trainable rollouts; None when no rollout came from a fault-injected run."""
    faulty: list[Trajectory] = []
    clean: list[Trajectory] = []
    for t in trajectories:
        flag = is_faulty(t)
        if flag is None or not t.status.trainable:
            continue
        (faulty if flag else clean).append(t)
    if not faulty and not clean:
        return None
    outs = [o for t in faulty for o in _outcomes_of(t)]
    met = [o for o in outs if o.met]
    kinds: dict[str, dict[str, Any]] = {}
    for k in sorted({o.kind for o in outs}):
        ko = [o for o in outs if o.kind == k]
        km = [o for o in ko if o.met]
        kinds[k] = {"injected": len(ko), "met": len(km), "recovered": sum(o.recovered for o in km),
                    "recovery_rate": _ratio(sum(o.recovered for o in km), len(km))}
    stepped = [o.steps_to_recover for o in met if o.steps_to_recover is not None]
    with_step = [o for o in met if o.met_step is not None]
    return FaultSummary(
        faulty_rollouts=len(faulty), clean_rollouts=len(clean), faults_injected=len(outs),
        fault_met_rate=_ratio(len(met), len(outs)),
        fault_recovery_rate=_ratio(sum(o.recovered for o in met), len(met)),
        steps_to_recover=_ratio(sum(stepped), len(stepped)),
        fault_repeat_rate=_ratio(sum(o.repeats > 0 for o in with_step), len(with_step)),
        pass_rate_with_faults=_ratio(sum(t.status == RolloutStatus.SUCCESS for t in faulty), len(faulty)),
        pass_rate_without_faults=_ratio(sum(t.status == RolloutStatus.SUCCESS for t in clean), len(clean)),
        by_kind=kinds,
    )


def _outcomes_of(traj: Trajectory) -> list[FaultOutcome]:
    """The outcomes recorded on the trajectory (``faults.outcomes``), else computed now."""
    rec = ((traj.metadata or {}).get("faults") or {}).get("outcomes")
    if isinstance(rec, list):
        return [FaultOutcome.model_validate(o) for o in rec]
    return fault_outcomes(traj)
