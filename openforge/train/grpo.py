"""GRPO core: group-normalised advantages and the token-level clipped policy loss.

Owns: :func:`group_advantages` (one scalar per rollout, normalised over the *valid* rollouts of a
task group), :func:`build_samples` (trajectory groups → :class:`TrainSample` rows, one per segment,
every segment of a rollout sharing that rollout's advantage, with per-token loss weights), and
:func:`policy_loss` (PPO-clip surrogate over ``loss_mask == 1`` tokens against the recorded
behaviour logprobs, optional k3 KL to a reference policy).

Loss aggregation. ``rollout-mean`` (the default) gives every rollout the same total weight
``1 / n_rollouts``, spread evenly over its trained tokens, so a rollout the proxy had to split
into many segments weighs no more than one that stayed in a single segment (Agent Lightning's
``per_rollout_mean``). ``token-mean`` weighs every trained token of the batch equally (veRL's
default). Both are expressed as per-token weights, so the trainer can accumulate gradients over
any micro-batching of the segments and still get the exact same loss.

Pure python for the data side; torch is imported lazily inside :func:`policy_loss`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..trajectory import Trajectory, TrajectoryGroup

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = [
    "LossAgg",
    "TrainSample",
    "build_samples",
    "group_advantages",
    "policy_loss",
]

LossAgg = Literal["rollout-mean", "token-mean"]


def group_advantages(rewards: Sequence[float], *, norm_std: bool = True, eps: float = 1e-6) -> list[float]:
    """GRPO advantages for the rewards of one task group.

    ``(r - mean) / (std + eps)`` with the unbiased (n-1) standard deviation, as veRL's
    ``compute_grpo_outcome_advantage``; ``norm_std=False`` gives Dr.GRPO's ``r - mean``.
    A group of fewer than two rollouts has no baseline: its advantage is 0 (veRL would train a
    singleton on its raw reward, which rewards luck, not improvement).
    """
    n = len(rewards)
    if n < 2:
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


def build_samples(
    groups: Iterable[TrajectoryGroup],
    *,
    norm_std: bool = True,
    loss_agg: LossAgg = "rollout-mean",
    skip_zero_advantage: bool = True,
) -> list[TrainSample]:
    """Turn task groups into training rows.

    Only valid rollouts (infra failures already discarded) enter the group statistics. Every
    segment of a rollout carries the rollout's advantage. With ``skip_zero_advantage`` rollouts
    whose advantage is exactly 0 (groups where every rollout scored the same) are left out: their
    policy-gradient term is zero, so they would only cost compute.
    """
    if loss_agg not in ("rollout-mean", "token-mean"):
        raise ValueError(f"loss_agg must be 'rollout-mean' or 'token-mean', got {loss_agg!r}")
    rows: list[tuple[Trajectory, float, list]] = []
    for group in groups:
        valid = group.valid
        advs = group_advantages([t.reward for t in valid], norm_std=norm_std)
        for traj, adv in zip(valid, advs, strict=True):
            if skip_zero_advantage and adv == 0.0:
                continue
            segs = [s for s in _segments(traj) if s.num_trained_tokens > 0]
            if segs:
                rows.append((traj, adv, segs))
    n_rollouts = len(rows)
    n_tokens = sum(s.num_trained_tokens for _, _, segs in rows for s in segs)
    samples: list[TrainSample] = []
    for traj, adv, segs in rows:
        if loss_agg == "rollout-mean":
            per_token = 1.0 / (n_rollouts * sum(s.num_trained_tokens for s in segs))
        else:
            per_token = 1.0 / n_tokens
        for seg in segs:
            samples.append(
                TrainSample(
                    input_ids=list(seg.input_ids),
                    loss_mask=list(seg.loss_mask),
                    old_logprobs=list(seg.logprobs),
                    advantage=adv,
                    token_weights=[per_token if m else 0.0 for m in seg.loss_mask],
                    rollout_id=traj.rollout_id,
                    task_id=traj.task_id,
                    reward=traj.reward,
                )
            )
    return samples


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    token_weights: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped policy-gradient loss, weighted per token.

    All tensors are ``[B, T]`` over the *target* positions (``advantages`` may be ``[B]``).
    ``token_weights`` is 0 off the loss mask. Per token:
    ``max(-A * r, -A * clip(r, 1 - clip_low, 1 + clip_high))`` with ``r = exp(logp - old_logp)``,
    plus ``kl_coef * (exp(ref - logp) - (ref - logp) - 1)`` (the k3 / "low_var_kl" estimator)
    when a reference is given. Returns ``(sum(weights * per_token), metrics)``.
    """
    import torch

    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logprobs)
    mask = token_weights > 0
    log_ratio = (logprobs - old_logprobs).masked_fill(~mask, 0.0)
    ratio = torch.exp(log_ratio)
    pg1 = -advantages * ratio
    pg2 = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(pg1, pg2)
    kl_val = None
    if ref_logprobs is not None and kl_coef:
        d = (ref_logprobs - logprobs).masked_fill(~mask, 0.0)
        kl_val = torch.exp(d) - d - 1.0
        per_token = per_token + kl_coef * kl_val
    loss = (token_weights * per_token).sum()
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        clipped = (pg2 > pg1) & mask
        metrics = {
            "pg_clipfrac": float(clipped.sum() / n),
            "ratio_mean": float((ratio * mask).sum() / n),
            "approx_kl": float(((-log_ratio) * mask).sum() / n),  # E_old[log old - log new]
        }
        if kl_val is not None:
            metrics["ref_kl"] = float((kl_val * mask).sum() / n)
    return loss, metrics
