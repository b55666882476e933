"""GRPO core against hand-computed values."""

from __future__ import annotations

import math

import pytest

from openforge.core.trajectory import Trajectory, TrajectoryGroup
from openforge.core.types import ModelCall, RolloutStatus
from openforge.train.grpo import build_samples, group_advantages, policy_loss


def _call(i: int, prompt: list[int], out: list[int], lp: float = -1.0) -> ModelCall:
    return ModelCall(index=i, prompt_ids=prompt, output_ids=out, output_logprobs=[lp] * len(out))


def _traj(rid: str, reward: float, calls: list[ModelCall], status=RolloutStatus.SUCCESS) -> Trajectory:
    return Trajectory(rollout_id=rid, task_id="t", reward=reward, status=status, calls=calls).build()


def test_group_advantages_hand_values():
    # mean .5, unbiased std sqrt(1/3) = .57735 -> +-0.8660
    a = group_advantages([1, 0, 0, 1])
    assert a == pytest.approx([0.8660, -0.8660, -0.8660, 0.8660], abs=1e-4)
    # [0,0,0,1]: mean .25, std = sqrt((3*.0625 + .5625)/3) = .5 -> [-.5,-.5,-.5,1.5]
    assert group_advantages([0, 0, 0, 1]) == pytest.approx([-0.5, -0.5, -0.5, 1.5], abs=1e-5)
    assert group_advantages([0, 0, 0, 1], norm_std=False) == pytest.approx([-0.25, -0.25, -0.25, 0.75])
    assert group_advantages([1, 1, 1]) == [0.0, 0.0, 0.0]
    assert group_advantages([1.0]) == [0.0]  # singleton: no baseline
    assert group_advantages([]) == []


def test_build_samples_discards_infra_failures_and_shares_advantage():
    # rollout a: two segments (second call rewrites history) -> both share a's advantage
    a = _traj("a", 1.0, [_call(0, [1, 2], [3, 4]), _call(1, [9, 9, 9], [5])])
    b = _traj("b", 0.0, [_call(0, [1, 2], [7])])
    c = _traj("c", 0.0, [_call(0, [1, 2], [8, 8, 8])])
    broken = _traj("x", 0.0, [_call(0, [1, 2], [6])], status=RolloutStatus.INFRA_ERROR)
    g = TrajectoryGroup(task_id="t", trajectories=[a, b, c, broken])
    samples = build_samples([g])
    # the infra failure does not enter the statistics: rewards [1,0,0]
    adv = group_advantages([1, 0, 0])
    assert adv == pytest.approx([2 / 3 / math.sqrt(1 / 3), -1 / 3 / math.sqrt(1 / 3), -1 / 3 / math.sqrt(1 / 3)], abs=1e-5)
    by = {}
    for s in samples:
        by.setdefault(s.rollout_id, []).append(s)
    assert set(by) == {"a", "b", "c"}
    assert len(by["a"]) == 2
    assert [s.advantage for s in by["a"]] == pytest.approx([adv[0], adv[0]])
    # rollout-mean: each rollout's weights sum to 1/3 regardless of its segment count / length
    for rid in "abc":
        assert sum(w for s in by[rid] for w in s.token_weights) == pytest.approx(1 / 3)
    # a has 3 trained tokens over two segments: 1/9 each
    assert by["a"][0].token_weights == pytest.approx([0, 0, 1 / 9, 1 / 9])
    assert by["a"][1].token_weights == pytest.approx([0, 0, 0, 1 / 9])
    assert sum(w for s in samples for w in s.token_weights) == pytest.approx(1.0)


def test_token_mean_and_zero_advantage_skip():
    a = _traj("a", 1.0, [_call(0, [1], [3, 4, 5])])
    b = _traj("b", 0.0, [_call(0, [1], [7])])
    same = TrajectoryGroup(task_id="u", trajectories=[_traj("s1", 1.0, [_call(0, [1], [2])]),
                                                      _traj("s2", 1.0, [_call(0, [1], [2, 2])])])
    samples = build_samples([TrajectoryGroup(task_id="t", trajectories=[a, b]), same], loss_agg="token-mean")
    assert {s.rollout_id for s in samples} == {"a", "b"}  # zero-advantage group skipped
    assert [w for s in samples for w in s.token_weights if w] == pytest.approx([0.25] * 4)
    kept = build_samples([same], skip_zero_advantage=False)
    assert {s.advantage for s in kept} == {0.0} and len(kept) == 2
    with pytest.raises(ValueError, match="loss_agg"):
        build_samples([same], loss_agg="seq-mean")  # type: ignore[arg-type]


def test_policy_loss_hand_computed():
    torch = pytest.importorskip("torch")
    old = torch.tensor([[0.0, -1.0, -1.0, -2.0]])
    new = torch.tensor([[5.0, -1.0, -0.5, -2.5]], requires_grad=True)
    w = torch.tensor([[0.0, 0.25, 0.25, 0.5]])  # first position is context
    adv = torch.tensor([2.0])
    loss, m = policy_loss(new, old, adv, w, clip_low=0.2, clip_high=0.28)
    r1, r2, r3 = 1.0, math.exp(0.5), math.exp(-0.5)
    # token 1: ratio 1 -> -2; token 2: ratio 1.6487 clipped at 1.28 (A>0) -> -2.56;
    # token 3: ratio .6065, unclipped term -1.2131 is larger than clipped -1.6 -> -1.2131
    t = [-2 * r1, max(-2 * r2, -2 * 1.28), max(-2 * r3, -2 * 0.8)]
    expected = 0.25 * t[0] + 0.25 * t[1] + 0.5 * t[2]
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)
    assert m["pg_clipfrac"] == pytest.approx(1 / 3)
    loss.backward()
    g = new.grad[0].tolist()
    assert g[0] == 0.0 and g[2] == 0.0  # masked and clipped tokens get no gradient
    assert g[1] == pytest.approx(0.25 * -2 * r1)
    assert g[3] == pytest.approx(0.5 * -2 * r3, rel=1e-5)


def test_policy_loss_negative_advantage_and_kl():
    torch = pytest.importorskip("torch")
    old = torch.tensor([[-1.0, -1.0]])
    new = torch.tensor([[-0.5, -1.5]])
    ref = torch.tensor([[-1.0, -1.0]])
    w = torch.tensor([[0.5, 0.5]])
    adv = torch.tensor([[-1.0, -1.0]])
    loss, m = policy_loss(new, old, adv, w, ref_logprobs=ref, kl_coef=0.1, clip_low=0.2, clip_high=0.2)
    r1, r2 = math.exp(0.5), math.exp(-0.5)
    # A<0: token 1 ratio 1.65 -> max(1.65, 1.2) = 1.6487; token 2 ratio .6065 -> max(.6065, .8) = .8
    pg = [max(r1, 1.2), max(r2, 0.8)]
    kl = [math.exp(-0.5) + 0.5 - 1, math.exp(0.5) - 0.5 - 1]
    expected = 0.5 * (pg[0] + 0.1 * kl[0]) + 0.5 * (pg[1] + 0.1 * kl[1])
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)
    assert m["ref_kl"] == pytest.approx(sum(kl) / 2, rel=1e-5)
