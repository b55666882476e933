"""The shuffled-reward control (``trainer.cpu.reward_shuffle``): the trainer's rewards are really
permuted across the step's rollouts (uniformly, each group's or the step's multiset kept), the scored
rewards the step reports are not, and the unshuffled path passes every reward through untouched."""

from __future__ import annotations

import pytest

from openforge.config import RunConfig
from openforge.core.trajectory import Trajectory, TrajectoryGroup
from openforge.core.types import ModelCall
from openforge.train.grpo import build_samples
from openforge.train.reward_shuffle import shuffle_rewards

from .test_dynamic_sampling import cursor, forge_factory  # noqa: F401  (the fixture)


def _group(task: str, rewards: list[float]) -> TrajectoryGroup:
    trajs = [Trajectory(rollout_id=f"{task}-{i}", task_id=task, reward=r, calls=[
        ModelCall(index=0, prompt_ids=[5, 6, 7], output_ids=[8 + i, 9], output_logprobs=[-1.0, -1.1])]).build()
        for i, r in enumerate(rewards)]
    return TrajectoryGroup(task_id=task, trajectories=trajs)


def _rewards(groups: list[TrajectoryGroup]) -> dict[str, float]:
    return {t.rollout_id: t.reward for g in groups for t in g.trajectories}


def test_off_passes_every_reward_through():
    groups = [_group("a", [1.0, 0.0, 0.5]), _group("b", [0.0, 0.25])]
    out, metrics = shuffle_rewards(groups, "off", seed=0, step=0)
    assert _rewards(out) == _rewards(groups) and metrics == {}


def test_group_mode_is_a_uniform_permutation_within_each_group():
    """Over 600 steps the one success of a group of 4 lands on each rollout ~1/4 of the time; every
    group keeps its own multiset, and the caller's groups keep their scored rewards."""
    groups = [_group("a", [1.0, 0.0, 0.0, 0.0]), _group("b", [0.3, 0.3, 0.3, 0.3])]
    where = [0, 0, 0, 0]
    for step in range(600):
        out, metrics = shuffle_rewards(groups, "group", seed=7, step=step)
        a = [t.reward for t in out[0].trajectories]
        assert sorted(a) == [0.0, 0.0, 0.0, 1.0]
        assert [t.reward for t in out[1].trajectories] == [0.3] * 4
        assert all(s.reward == t.reward for t in out[0].trajectories for s in t.segments)
        where[a.index(1.0)] += 1
        assert metrics["reward_shuffle/rollouts"] == 8
    assert _rewards(groups) == {"a-0": 1.0, "a-1": 0.0, "a-2": 0.0, "a-3": 0.0, **{f"b-{i}": 0.3 for i in range(4)}}
    assert all(110 <= n <= 190 for n in where), where  # 150 expected each; ±40 is > 4 sd
    # the same seed and step give the same permutation (a resumed run repeats it)
    assert _rewards(shuffle_rewards(groups, "group", seed=7, step=3)[0]) == \
        _rewards(shuffle_rewards(groups, "group", seed=7, step=3)[0])


def test_step_mode_moves_rewards_across_groups():
    groups = [_group("a", [1.0, 1.0]), _group("b", [0.0, 0.0])]
    crossed = 0
    for step in range(200):
        out, _ = shuffle_rewards(groups, "step", seed=1, step=step)
        assert sorted(_rewards(out).values()) == [0.0, 0.0, 1.0, 1.0]
        crossed += [t.reward for t in out[0].trajectories] != [1.0, 1.0]
    assert 150 <= crossed <= 185  # P(group a keeps both 1s) = 1/6: ~167 of 200 cross


def test_shuffled_rewards_are_what_the_advantages_are_built_from():
    groups = [_group("a", [1.0, 0.0, 0.0, 0.0])]
    plain = {s.rollout_id: s.advantage for s in build_samples(groups)}
    seen_moved = False
    for step in range(20):
        out, _ = shuffle_rewards(groups, "group", seed=0, step=step)
        adv = {s.rollout_id: s.advantage for s in build_samples(out)}
        assert sorted(adv.values()) == pytest.approx(sorted(plain.values()))  # same magnitudes
        winner = next(t.rollout_id for t in out[0].trajectories if t.reward == 1.0)
        assert adv[winner] == pytest.approx(plain["a-0"])  # the positive advantage follows the moved reward
        seen_moved |= winner != "a-0"
    assert seen_moved


def test_unknown_mode_and_verl_are_refused():
    with pytest.raises(ValueError, match="reward_shuffle must be one of"):
        shuffle_rewards([], "all", seed=0, step=0)
    with pytest.raises(ValueError, match="reward_shuffle"):
        RunConfig(trainer={"cpu": {"reward_shuffle": "sometimes"}})
    with pytest.raises(ValueError, match="CPU trainer option"):
        RunConfig(trainer={"backend": "verl", "cpu": {"reward_shuffle": "group"}})


async def _trained_rewards(forge_factory, mode: str, steps: int = 6) -> tuple[list[dict[str, float]], list]:  # noqa: F811
    """Run ``steps`` real GRPO steps with scripted rewards; per step the rewards the trainer got."""
    f = await forge_factory(lambda tasks: [[1.0, 0.0] for _ in tasks], reward_shuffle=mode)
    seen: list[dict[str, float]] = []
    real = f.trainer.step

    def spy(samples, **kw):
        seen.append({s.rollout_id: s.reward for s in samples})
        return real(samples, **kw)

    f.trainer.step = spy
    c, lines = cursor(), []
    for step in range(steps):
        lines.append(await f._grpo_step(step, c))
    return seen, lines


async def test_the_training_loop_trains_on_shuffled_rewards_and_reports_the_scored_ones(forge_factory):  # noqa: F811
    seen, lines = await _trained_rewards(forge_factory, "group")
    # rollout "<draw>-<task>-0" scored 1.0 and "-1" scored 0.0 in every group; shuffled, some steps swap them
    swapped = sum(r[rid] == 0.0 for r in seen for rid in r if rid.endswith("-0"))
    assert 0 < swapped < sum(1 for r in seen for rid in r if rid.endswith("-0"))
    assert all(x["reward_shuffle"] == "group" and x["reward_mean"] == 0.5 and "reward_shuffle/kept" in x
               for x in lines)


async def test_the_unshuffled_loop_trains_on_the_scored_rewards(forge_factory):  # noqa: F811
    seen, lines = await _trained_rewards(forge_factory, "off", steps=2)
    assert seen and all(r == (1.0 if rid.endswith("-0") else 0.0) for x in seen for rid, r in x.items())
    assert all("reward_shuffle" not in x for x in lines)
