"""The optional per-session loss weight (``trainer.cpu.session_weight``), on worked examples.

Session A trained one segment of 2 tokens; session B split into three segments (a main agent and two
sub-agents, i.e. new lineages) of 2 tokens each. Under ``token-mean`` every token weighs 1/8, so B
weighs three times A; with ``session_weight: equal`` each session weighs 1/2.
"""

from __future__ import annotations

import pytest

from openforge.config import load_config
from openforge.core.errors import ConfigError
from openforge.core.trajectory import Trajectory, TrajectoryGroup
from openforge.core.types import BreakReason, ModelCall
from openforge.train.grpo import build_samples


def _call(i: int, prompt: list[int], out: list[int]) -> ModelCall:
    return ModelCall(index=i, prompt_ids=prompt, output_ids=out, output_logprobs=[-1.0] * len(out))


def _session_a(reward: float = 1.0) -> Trajectory:
    return Trajectory(rollout_id="A", task_id="t", reward=reward, calls=[_call(0, [1, 2], [3, 4])]).build()


def _session_b(reward: float = 0.0) -> Trajectory:
    # three lineages: each prompt starts with another system prefix (renderer hint), so three segments
    calls = [_call(i, [10 * (i + 1), 11 * (i + 1), 12 * (i + 1)], [5, 6]) for i in range(3)]
    for c in calls:
        c.system_prefix_len = 2
    t = Trajectory(rollout_id="B", task_id="t", reward=reward, calls=calls).build()
    assert len(t.segments) == 3 and t.segments[1].break_reason == BreakReason.NEW_LINEAGE
    return t


def _weights(samples) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for s in samples:
        out.setdefault(s.rollout_id, []).extend(w for w in s.token_weights if w)
    return out


def test_token_mean_worked_example():
    g = [TrajectoryGroup(task_id="t", trajectories=[_session_a(), _session_b()])]
    plain = _weights(build_samples(g, loss_agg="token-mean"))
    assert plain["A"] == pytest.approx([1 / 8] * 2) and plain["B"] == pytest.approx([1 / 8] * 6)
    equal = _weights(build_samples(g, loss_agg="token-mean", session_weight="equal"))
    assert equal["A"] == pytest.approx([1 / 4] * 2) and equal["B"] == pytest.approx([1 / 12] * 6)
    assert sum(equal["A"]) == pytest.approx(0.5) and sum(equal["B"]) == pytest.approx(0.5)


def test_seq_mean_token_mean_keeps_proportions_inside_a_session():
    """Rows weigh 1/4 each (A 1/4, B 3/4); equal sessions: A 1/2, each of B's segments 1/6."""
    g = [TrajectoryGroup(task_id="t", trajectories=[_session_a(), _session_b()])]
    samples = build_samples(g, loss_agg="seq-mean-token-mean", session_weight="equal")
    rows = sorted((s.rollout_id, sum(s.token_weights)) for s in samples)
    assert [r for r, _ in rows] == ["A", "B", "B", "B"]
    assert [w for _, w in rows] == pytest.approx([1 / 2, 1 / 6, 1 / 6, 1 / 6])
    plain = sorted((s.rollout_id, sum(s.token_weights)) for s in build_samples(g, loss_agg="seq-mean-token-mean"))
    assert [w for _, w in plain] == pytest.approx([1 / 4] * 4)
    assert sum(w for s in samples for w in s.token_weights) == pytest.approx(1.0)


def test_rollouts_sharing_a_session_id_weigh_as_one_session():
    """An external driver that records sub-agents as rollouts of their own marks them with one
    ``metadata.session_id``: together they weigh what a single-rollout session weighs."""
    a = _session_a(1.0)
    b1 = Trajectory(rollout_id="B1", task_id="t", reward=0.0, metadata={"session_id": "s-b"},
                    calls=[_call(0, [7, 8], [5, 6])]).build()
    b2 = Trajectory(rollout_id="B2", task_id="t", reward=0.0, metadata={"session_id": "s-b"},
                    calls=[_call(0, [7, 9], [5, 6, 4, 4])]).build()
    g = [TrajectoryGroup(task_id="t", trajectories=[a, b1, b2])]
    w = _weights(build_samples(g, loss_agg="token-mean", session_weight="equal"))
    assert sum(w["A"]) == pytest.approx(0.5) and sum(w["B1"]) + sum(w["B2"]) == pytest.approx(0.5)
    assert w["B1"][0] == pytest.approx(w["B2"][0])  # token-mean proportions inside the session


def test_default_is_unchanged_and_the_option_is_in_the_config():
    g = [TrajectoryGroup(task_id="t", trajectories=[_session_a(), _session_b()])]
    for agg in ("rollout-mean", "token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        assert _weights(build_samples(g, loss_agg=agg)) == _weights(build_samples(g, loss_agg=agg,
                                                                                  session_weight="none"))
    assert load_config({}).trainer.cpu.session_weight == "none"
    assert load_config({}, overrides=["trainer.cpu.session_weight=equal"]).trainer.cpu.session_weight == "equal"
    with pytest.raises(ValueError, match="session_weight"):
        build_samples(g, session_weight="bogus")  # type: ignore[arg-type]


def test_verl_refuses_it_rather_than_ignoring_it():
    from openforge.train.verl.launch import loss_agg_mode

    cfg = load_config({}, overrides=["trainer.backend=verl", "trainer.cpu.loss_agg=token-mean"])
    assert loss_agg_mode(cfg) == "token-mean"
    cfg = load_config({}, overrides=["trainer.backend=verl", "trainer.cpu.loss_agg=token-mean",
                                     "trainer.cpu.session_weight=equal"])
    with pytest.raises(ConfigError, match="session_weight"):
        loss_agg_mode(cfg)
