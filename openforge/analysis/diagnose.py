""""Why isn't my GRPO learning?": the per-step ``diag/`` metrics and the run's one-line verdict.

Owns: :func:`step_diagnostics` (one GRPO step's ``diag/`` keys, from its task groups and the trainer's
step metrics), :func:`diagnose` (a run's step lines → one verdict naming the likeliest reason nothing
moves, or "learning signal present") and the thresholds it uses (module constants). Every key is
defined in ``docs/metrics.md`` ("GRPO diagnostics"). Pure functions: no torch, no I/O.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..core.trajectory import TrajectoryGroup
from ..train.grpo import is_tied

__all__ = [
    "CLIP_HIGH",
    "DIAG_KEYS",
    "ENTROPY_LOW",
    "GRAD_NORM_TINY",
    "KL_TINY",
    "TIED_HIGH",
    "diagnose",
    "step_diagnostics",
]

DIAG_KEYS: tuple[str, ...] = (
    "diag/tied_share", "diag/pass_spread", "diag/entropy_est", "diag/kl_step", "diag/clip_frac",
    "diag/grad_norm", "diag/trained_tokens",
)
"""The keys every GRPO step line carries (``None`` where the step trained nothing to measure)."""

TIED_HIGH = 0.8
"""Mean share of tied groups at or above which tied rewards are the verdict."""
GRAD_NORM_TINY = 1e-6
"""Median gradient norm (over steps that trained) below which the gradient is the verdict."""
CLIP_HIGH = 0.2
"""Mean clipped-ratio fraction at or above which the step size is the verdict (too large)."""
KL_TINY = 1e-5
"""Median per-step KL (``diag/kl_step``) below which the step size is the verdict (too small)."""
ENTROPY_LOW = 0.02
"""Mean sampled-token entropy estimate (nats) below which a collapsed policy is the verdict."""


def _num(v: Any) -> float | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def step_diagnostics(groups: Iterable[TrajectoryGroup], train: Mapping[str, float]) -> dict[str, float | None]:
    """One GRPO step's ``diag/`` keys (:data:`DIAG_KEYS`).

    ``groups``: the step's task groups; ``train``: what the trainer's ``step`` returned (``{"trained_tokens":
    0}`` when no gradient step ran). The group keys count trainable rollouts (as the advantages do); the
    trainer's keys are ``None`` when the step trained nothing."""
    groups = list(groups)
    rates = []
    for g in groups:
        valid = g.trainable
        if valid:
            rates.append(sum(1 for t in valid if t.status.value == "success") / len(valid))
    tied = sum(1 for g in groups if is_tied([t.reward for t in g.trainable]))
    trained = (_num(train.get("trained_tokens")) or 0.0) > 0 and not train.get("skipped")
    out: dict[str, float | None] = {
        "diag/tied_share": round(tied / len(groups), 4) if groups else None,
        "diag/pass_spread": round(statistics.pstdev(rates), 4) if rates else None,
        "diag/grad_norm": _num(train.get("grad_norm")) if trained else 0.0,
        "diag/trained_tokens": _num(train.get("trained_tokens")) or 0.0,
    }
    for key, src in (("diag/entropy_est", "entropy_est"), ("diag/kl_step", "kl_step"),
                     ("diag/clip_frac", "pg_clipfrac")):
        v = _num(train.get(src)) if trained else None
        out[key] = round(v, 6) if v is not None else None
    return out


def _values(steps: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    return [v for s in steps if (v := _num(s.get(key))) is not None]


def _trained(step: Mapping[str, Any]) -> bool:
    flag = step.get("gradient_step")
    if isinstance(flag, bool):
        return flag
    return (_num(step.get("diag/trained_tokens", step.get("train/trained_tokens"))) or 0.0) > 0


def diagnose(steps: list[dict[str, Any]]) -> str:
    """The likeliest reason a run is not learning, from its step lines (``metrics.jsonl``), in one line.

    Checked in order, first match wins: no steps; no gradient step at all; tied groups (mean
    ``diag/tied_share`` ≥ :data:`TIED_HIGH`); a vanishing gradient (median ``diag/grad_norm`` of the
    steps that trained < :data:`GRAD_NORM_TINY`); a step too large (mean ``diag/clip_frac`` ≥
    :data:`CLIP_HIGH`); a step too small (median ``diag/kl_step`` < :data:`KL_TINY`); a collapsed policy
    (mean ``diag/entropy_est`` < :data:`ENTROPY_LOW`); else "learning signal present". A metric a run
    did not record (an older run) is not judged."""
    if not steps:
        return "no GRPO steps recorded: nothing to diagnose"
    trained = [s for s in steps if _trained(s)]
    tied = _values(steps, "diag/tied_share")
    if not trained:
        why = f" ({statistics.fmean(tied):.0%} of groups tied)" if tied else ""
        return (f"no gradient steps in {len(steps)} step(s){why}: every step's groups tied or failed; raise "
                "group_size, change the task mix, or check the rollouts' statuses")
    if tied and statistics.fmean(tied) >= TIED_HIGH:
        return (f"{statistics.fmean(tied):.0%} of groups tied: raise group_size or change the task mix "
                "(aim for tasks the policy passes 20-80 % of the time)")
    grads = _values(trained, "diag/grad_norm")
    if grads and statistics.median(grads) < GRAD_NORM_TINY:
        return (f"gradient norm ~0 (median {statistics.median(grads):.1e}): check the loss mask, the advantages "
                "and that the trained weights are the ones sampled from")
    clip = _values(trained, "diag/clip_frac")
    if clip and statistics.fmean(clip) >= CLIP_HIGH:
        return f"clip fraction high ({statistics.fmean(clip):.0%} of tokens clipped): learning rate too high?"
    kl = _values(trained, "diag/kl_step")
    if kl and statistics.median(kl) < KL_TINY:
        return f"KL near 0 (median {statistics.median(kl):.1e} per step): learning rate too low?"
    ent = _values(trained, "diag/entropy_est")
    if ent and statistics.fmean(ent) < ENTROPY_LOW:
        return (f"entropy near 0 ({statistics.fmean(ent):.3f} nats/token): the policy samples almost "
                "deterministically; raise the sampling temperature")
    return "learning signal present"
