"""The shuffled-reward control: a GRPO step whose rewards are permuted across its rollouts before the
advantages are computed (``trainer.cpu.reward_shuffle``).

Owns: :func:`shuffle_rewards` (the step's task groups → copies with the trainable rollouts' rewards
permuted, plus the step's ``reward_shuffle/`` metrics) and :data:`SHUFFLE_MODES`.

Why: a training run can "improve" for reasons that have nothing to do with its reward (any update that
sharpens the policy, a format drift, the warm-start's own trend; random and shuffled rewards have
produced large published "gains"). A control arm trained with the same data, the same number of
gradient steps and the same advantage magnitudes, but with every reward detached from the rollout
that earned it, measures that floor: what GRPO shows beyond it is due to the reward.

Modes:

- ``off`` (default): rewards as scored.
- ``group``: each task group's trainable rewards are permuted among that group's rollouts. The
  multiset of rewards of every group is unchanged, so the same groups are tied or mixed, the same
  rollouts are trained and every group's advantages have the same magnitudes: the control differs
  from GRPO *only* in which rollout gets which advantage. This is the benchmark's control.
- ``step``: the step's trainable rewards are pooled over all its groups and permuted across them. This
  also detaches a reward from its task (an easy task's success can land on a hard task's rollout), but
  it changes which groups are tied (an all-success group usually becomes mixed), so the control then
  trains on more or fewer rollouts than GRPO would: a weaker match.

The permutation is uniform (``random.Random(f"{seed}:reward-shuffle:{step}")``: the same run and step
give the same permutation after a resume), so a rollout keeps its own reward with probability
``1 / n``; forcing a derangement would make the control's rewards anti-correlated with the truth. The
metrics line records the mode and ``reward_shuffle/kept`` (the share of shuffled rollouts whose reward
did not change: ~1/n for groups of n mixed rewards, 1 for tied ones). The step's reported rewards and
pass rate stay the scored ones; only the trainer sees the permuted rewards.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Literal

from ..core.trajectory import Trajectory, TrajectoryGroup

__all__ = ["SHUFFLE_MODES", "RewardShuffle", "shuffle_rewards"]

RewardShuffle = Literal["off", "group", "step"]
SHUFFLE_MODES: tuple[str, ...] = ("off", "group", "step")


def _permuted(trajs: list[Trajectory], rng: random.Random) -> dict[str, float]:
    """``rollout_id -> new reward``: the rewards of ``trajs`` in a uniformly random order."""
    rewards = [t.reward for t in trajs]
    rng.shuffle(rewards)
    return {t.rollout_id: r for t, r in zip(trajs, rewards, strict=True)}


def shuffle_rewards(groups: Sequence[TrajectoryGroup], mode: str, *, seed: int,
                    step: int) -> tuple[list[TrajectoryGroup], dict[str, float]]:
    """The groups a trainer sees under ``mode`` and the step's ``reward_shuffle/`` metrics.

    ``off`` returns the groups themselves and no metrics. Otherwise the trainable rollouts' rewards are
    permuted (within each group for ``group``, across the step for ``step``) in copies: the caller's
    groups keep their scored rewards. Rollouts that are not trainable keep theirs (they never enter the
    advantages). The segments are rebuilt, so every segment carries its rollout's new reward.
    """
    if mode not in SHUFFLE_MODES:
        raise ValueError(f"trainer.cpu.reward_shuffle must be one of {', '.join(SHUFFLE_MODES)}; got {mode!r}")
    if mode == "off":
        return list(groups), {}
    rng = random.Random(f"{seed}:reward-shuffle:{step}")
    if mode == "group":
        new: dict[str, float] = {}
        for g in groups:
            new.update(_permuted(g.trainable, rng))
    else:
        new = _permuted([t for g in groups for t in g.trainable], rng)
    out = [g.model_copy(update={"trajectories": [_with_reward(t, new[t.rollout_id]) if t.rollout_id in new else t
                                                 for t in g.trajectories]}) for g in groups]
    before = {t.rollout_id: t.reward for g in groups for t in g.trainable}
    kept = sum(1 for rid, r in new.items() if r == before[rid])
    return out, {"reward_shuffle/rollouts": float(len(new)),
                 "reward_shuffle/kept": round(kept / len(new), 4) if new else 1.0}


def _with_reward(t: Trajectory, reward: float) -> Trajectory:
    segments = [s.model_copy(update={"reward": reward}) for s in t.segments]
    return t.model_copy(update={"reward": reward, "segments": segments})
