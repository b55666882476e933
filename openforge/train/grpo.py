"""GRPO core: group-normalised advantages and the token-level clipped policy loss.

Owns: :func:`group_advantages` (one scalar per rollout, normalised over the *valid* rollouts of a
task group), :func:`is_tied` / :func:`count_mixed_groups` (which groups carry a learning signal),
:func:`build_samples` (trajectory groups → :class:`TrainSample` rows, one per segment, every segment
of a rollout sharing that rollout's advantage, with per-token loss weights), and
:func:`policy_loss` (PPO-clip surrogate over ``loss_mask == 1`` tokens against the recorded
behaviour logprobs: log-ratio clamp, optional dual-clip, optional k3 KL to a reference policy).

Tied groups. A group whose rewards are all equal (population std below :data:`TIE_STD`) has no
baseline to beat: every advantage is exactly 0 and, with ``skip_zero_advantage``, the group is left
out. An exact ``== 0`` test is not enough: ``[0.7] * 8`` gives advantages of ~1e-10 through
floating-point noise, which would keep the group and dilute every informative rollout's weight.

Loss aggregation (``loss_agg``), as per-token weights so any micro-batching gives the same loss.
A *row* is one segment (what veRL trains), a *rollout* may span several segments:

- ``rollout-mean`` (CPU default): every rollout weighs ``1 / n_rollouts``, spread evenly over its
  trained tokens, so a rollout split into many segments weighs no more than one that stayed whole
  (Agent Lightning's ``per_rollout_mean``). No veRL mode matches it.
- ``token-mean``: every trained token of the batch weighs the same (veRL ``token-mean``).
- ``seq-mean-token-mean``: every *segment row* weighs ``1 / n_rows``, spread over its tokens (veRL
  ``seq-mean-token-mean``); equal to ``rollout-mean`` when every rollout is one segment.
- ``seq-mean-token-sum-norm``: Dr. GRPO, every token weighs ``1 / (n_rows * loss_scale_tokens)``,
  a constant normaliser independent of the lengths (veRL ``seq-mean-token-sum-norm``).

Session weight (``session_weight``, default ``none``). A *session* is one rollout, or the rollouts
that share ``metadata["session_id"]`` (an external driver that records sub-agents as rollouts of their
own). With ``equal``, the weights ``loss_agg`` gives are rescaled per session so that every session
sums to ``1 / n_sessions``: a session that split into many segments (sub-agents, compaction branches)
weighs no more than one that stayed whole, and within a session ``loss_agg``'s proportions hold.
Worked example (token-mean): session A trains one segment of 2 tokens, session B three segments of 2
tokens each. ``none``: every token 1/8, so A weighs 2/8 and B 6/8. ``equal``: A's tokens 1/4 each, B's
1/12 each, so A and B weigh 1/2 each.

What enters: only rollouts whose outcome is trainable *and* that were captured as exact tokens
(:attr:`~openforge.core.trajectory.TrajectoryGroup.trainable`) *and*, when the step names the policy version it
trains, whose every trained call that version sampled (:func:`stale_calls`). A ``capture: text`` rollout (a pass-through
back-end that returns no token ids) is dropped before the group statistics, with a logged reason: its
reward is not the behaviour policy's, so it must not move the baseline either.

Pure python for the data side; torch is imported lazily inside :func:`policy_loss`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..config import LossAgg, SessionWeight
from ..core.trajectory import Trajectory, TrajectoryGroup

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = [
    "LOSS_AGG_MODES",
    "TIE_STD",
    "LossAgg",
    "TrainSample",
    "build_samples",
    "count_mixed_groups",
    "count_stale",
    "group_advantages",
    "is_tied",
    "policy_loss",
    "stale_calls",
]

log = logging.getLogger("openforge.train")

LOSS_AGG_MODES: tuple[str, ...] = ("rollout-mean", "token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
SESSION_WEIGHTS: tuple[str, ...] = ("none", "equal")

TIE_STD = 1e-6
"""A group whose reward std is below this is tied: no learning signal."""


def is_tied(rewards: Sequence[float], *, tol: float = TIE_STD) -> bool:
    """True when the group has no baseline to beat: fewer than two rewards or their std < ``tol``."""
    n = len(rewards)
    if n < 2:
        return True
    mean = sum(rewards) / n
    return math.sqrt(sum((r - mean) ** 2 for r in rewards) / n) < tol


def count_mixed_groups(groups: Iterable[TrajectoryGroup]) -> int:
    """How many groups have rewards that differ among their trainable rollouts (a policy gradient)."""
    return sum(1 for g in groups if not is_tied([t.reward for t in g.trainable]))


def group_advantages(rewards: Sequence[float], *, norm_std: bool = True, eps: float = 1e-6) -> list[float]:
    """GRPO advantages for the rewards of one task group.

    ``(r - mean) / (std + eps)`` with the unbiased (n-1) standard deviation, as veRL's
    ``compute_grpo_outcome_advantage``; ``norm_std=False`` gives Dr.GRPO's ``r - mean``.
    A tied group (:func:`is_tied`) — every reward equal up to float noise, or fewer than two
    rollouts — has exactly 0 advantages (veRL would train a singleton on its raw reward, which
    rewards luck, not improvement).
    """
    n = len(rewards)
    if is_tied(rewards):
        return [0.0] * n
    mean = sum(rewards) / n
    centered = [r - mean for r in rewards]
    if not norm_std:
        return centered
    std = math.sqrt(sum(c * c for c in centered) / (n - 1))
    return [c / (std + eps) for c in centered]


@dataclass
class TrainSample:
    """One segment, ready for a gradient step.

    ``token_weights`` is 0 wherever ``loss_mask`` is 0; the weights of the whole batch sum to 1,
    so ``sum(weights * per_token_loss)`` over every micro-batch is the batch loss.
    """

    input_ids: list[int]
    loss_mask: list[int]
    old_logprobs: list[float]
    advantage: float
    token_weights: list[float]
    rollout_id: str = ""
    task_id: str = ""
    reward: float = 0.0
    ref_logprobs: list[float] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def num_tokens(self) -> int:
        return len(self.input_ids)

    @property
    def num_trained_tokens(self) -> int:
        return sum(self.loss_mask)


def _segments(traj: Trajectory) -> list:
    if traj.segments or not traj.calls:
        return list(traj.segments)
    return list(traj.build().segments)


def session_of(traj: Trajectory) -> str:
    """The session a rollout belongs to: its ``metadata["session_id"]``, else the rollout itself."""
    sid = traj.metadata.get("session_id")
    return f"session:{sid}" if isinstance(sid, (str, int)) and sid != "" else f"rollout:{traj.rollout_id}"


def stale_calls(traj: Trajectory, version: int) -> list[int]:
    """Indices of ``traj``'s trainable calls not sampled by policy ``version`` (an older adapter or weights,
    or no version stated): a rollout with any is not trained as on-policy."""
    return [c.index for c in traj.calls if c.trainable and c.policy_version != version]


def _trainable(group: TrajectoryGroup, policy_version: int | None = None) -> list[Trajectory]:
    """The group's rollouts a trainer may use; each valid one captured as text, or (``policy_version``
    given) with a call another policy version sampled, is dropped, logged."""
    keep = group.trainable
    for t in group.valid:
        if t.capture != "tokens":
            log.warning("rollout %s (task %s) is left out of training: captured as text (an answer came back "
                        "without the token ids the policy sampled), so it never enters a trainer",
                        t.rollout_id, t.task_id)
    if policy_version is None:
        return keep
    fresh = []
    for t in keep:
        stale = stale_calls(t, policy_version)
        if stale:
            got = sorted({str(c.policy_version) for c in t.calls if c.index in stale})
            log.warning("rollout %s (task %s) is left out of training: call(s) %s were sampled by policy version "
                        "%s, not %d, the one this step trains (stale calls are refused, never trained as "
                        "on-policy)", t.rollout_id, t.task_id, stale, "/".join(got), policy_version)
        else:
            fresh.append(t)
    return fresh


def count_stale(groups: Iterable[TrajectoryGroup], policy_version: int) -> int:
    """How many trainable rollouts of ``groups`` hold a call of another policy version (refused)."""
    return sum(1 for g in groups for t in g.trainable if stale_calls(t, policy_version))


def build_samples(
    groups: Iterable[TrajectoryGroup],
    *,
    norm_std: bool = True,
    loss_agg: LossAgg = "rollout-mean",
    skip_zero_advantage: bool = True,
    loss_scale_tokens: int = 4096,
    session_weight: SessionWeight = "none",
    policy_version: int | None = None,
) -> list[TrainSample]:
    """Turn task groups into training rows.

    Only trainable rollouts (infra failures already discarded, ``capture: text`` ones dropped with a
    logged reason) enter the group statistics. Every
    segment of a rollout carries the rollout's advantage. With ``skip_zero_advantage`` tied groups
    (:func:`is_tied`) are left out: their policy-gradient term is zero, so they would only cost
    compute and dilute the weight of the informative rollouts. ``loss_scale_tokens`` is the
    constant normaliser of ``seq-mean-token-sum-norm``; ``session_weight="equal"`` makes every
    session weigh the same (see the module docstring). ``policy_version``: the version of the policy being
    trained; a rollout with a call any other version sampled (or that states none) is refused — left out
    before the group statistics, logged (:mod:`openforge.train.policy_sync`: refused, not importance-corrected).
    """
    if loss_agg not in LOSS_AGG_MODES:
        raise ValueError(f"loss_agg must be one of {', '.join(LOSS_AGG_MODES)}; got {loss_agg!r}")
    if session_weight not in SESSION_WEIGHTS:
        raise ValueError(f"session_weight must be one of {', '.join(SESSION_WEIGHTS)}; got {session_weight!r}")
    rows: list[tuple[Trajectory, float, list]] = []
    for group in groups:
        valid = _trainable(group, policy_version)
        rewards = [t.reward for t in valid]
        if skip_zero_advantage and is_tied(rewards):
            continue
        advs = group_advantages(rewards, norm_std=norm_std)
        for traj, adv in zip(valid, advs, strict=True):
            segs = [s for s in _segments(traj) if s.num_trained_tokens > 0]
            if segs:
                rows.append((traj, adv, segs))
    weight = _token_weight(rows, loss_agg, loss_scale_tokens)
    scale = _session_scale(rows, weight) if session_weight == "equal" else None
    samples: list[TrainSample] = []
    for traj, adv, segs in rows:
        for seg in segs:
            w = weight(segs, seg) * (scale[session_of(traj)] if scale is not None else 1.0)
            samples.append(
                TrainSample(
                    input_ids=list(seg.input_ids),
                    loss_mask=list(seg.loss_mask),
                    old_logprobs=list(seg.logprobs),
                    advantage=adv,
                    token_weights=[w if m else 0.0 for m in seg.loss_mask],
                    rollout_id=traj.rollout_id,
                    task_id=traj.task_id,
                    reward=traj.reward,
                )
            )
    return samples


def _token_weight(rows: list[tuple[Trajectory, float, list]], loss_agg: str, scale: int) -> Any:
    """``(segments of the rollout, segment) -> weight of each of the segment's trained tokens``."""
    n_rollouts = len(rows)
    n_rows = sum(len(segs) for _, _, segs in rows)
    n_tokens = sum(s.num_trained_tokens for _, _, segs in rows for s in segs)
    if loss_agg == "rollout-mean":
        return lambda segs, seg: 1.0 / (n_rollouts * sum(s.num_trained_tokens for s in segs))
    if loss_agg == "token-mean":
        return lambda segs, seg: 1.0 / n_tokens
    if loss_agg == "seq-mean-token-mean":
        return lambda segs, seg: 1.0 / (n_rows * seg.num_trained_tokens)
    return lambda segs, seg: 1.0 / (n_rows * scale)


def _session_scale(rows: list[tuple[Trajectory, float, list]], weight: Any) -> dict[str, float]:
    """Per session, the factor that brings its total weight to ``1 / n_sessions``."""
    totals: dict[str, float] = {}
    for traj, _, segs in rows:
        key = session_of(traj)
        totals[key] = totals.get(key, 0.0) + sum(weight(segs, s) * s.num_trained_tokens for s in segs)
    n = len(totals)
    return {k: 1.0 / (n * total) for k, total in totals.items()}


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    token_weights: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    clip_ratio_c: float | None = 3.0,
    log_ratio_clamp: float = 20.0,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped policy-gradient loss, weighted per token.

    All tensors are ``[B, T]`` over the *target* positions (``advantages`` may be ``[B]``).
    ``token_weights`` is 0 off the loss mask. Per token, with
    ``r = exp(clamp(logp - old_logp, ±log_ratio_clamp))`` (the clamp keeps one wild token from
    overflowing ``exp``, as veRL's ±20): ``max(-A * r, -A * clip(r, 1 - clip_low, 1 + clip_high))``;
    for ``A < 0`` that is further capped at ``-A * clip_ratio_c`` (dual-clip, veRL's
    ``clip_ratio_c``; ``None`` turns it off); plus ``kl_coef * (exp(ref - logp) - (ref - logp) - 1)``
    (the k3 / "low_var_kl" estimator) when a reference is given. Returns
    ``(sum(weights * per_token), metrics)``.
    """
    import torch

    if clip_ratio_c is not None and clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 (dual-clip lower bound), got {clip_ratio_c}")
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logprobs)
    mask = token_weights > 0
    log_ratio = (logprobs - old_logprobs).masked_fill(~mask, 0.0)
    log_ratio = torch.clamp(log_ratio, -log_ratio_clamp, log_ratio_clamp)
    ratio = torch.exp(log_ratio)
    pg1 = -advantages * ratio
    pg2 = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(pg1, pg2)
    dual = torch.zeros_like(mask)
    if clip_ratio_c is not None:
        pg3 = -advantages * clip_ratio_c
        dual = (advantages < 0) & (pg3 < per_token) & mask
        per_token = torch.where(advantages < 0, torch.minimum(per_token, pg3), per_token)
    kl_val = None
    if ref_logprobs is not None and kl_coef:
        d = torch.clamp((ref_logprobs - logprobs).masked_fill(~mask, 0.0), -log_ratio_clamp, log_ratio_clamp)
        kl_val = torch.exp(d) - d - 1.0
        per_token = per_token + kl_coef * kl_val
    loss = (token_weights * per_token).sum()
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        clipped = (pg2 > pg1) & mask
        metrics = {
            "pg_clipfrac": float(clipped.sum() / n),
            "pg_clipfrac_lower": float(dual.sum() / n),
            "ratio_mean": float((ratio * mask).sum() / n),
            "approx_kl": float(((-log_ratio) * mask).sum() / n),  # E_old[log old - log new]
        }
        if kl_val is not None:
            metrics["ref_kl"] = float((kl_val * mask).sum() / n)
    return loss, metrics
