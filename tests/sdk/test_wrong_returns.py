"""What a newcomer's first environment and harness get wrong, named in their own terms: a ``verify``
that returns a bare number (or None) instead of a :class:`VerifyResult`, a ``Harness.run`` that returns
nothing. Both are the author's bug: ``env_error`` / ``harness_error`` (discarded, not retried as the
machine's ``infra_error``) with a message that says what to return. Real sandboxes, the real proxy and
``run_rollout``."""

from __future__ import annotations

import pytest

from openforge.core.task import Task
from openforge.core.types import RolloutStatus as S
from openforge.environment import Environment, VerifyResult
from openforge.harness import Harness, HarnessResult, RolloutContext
from openforge.runner.rollout import run_rollout

TASK = Task(id="answer", instruction="write 42 to answer.txt", environment="answers", timeout_s=30)


class FloatVerdict(Environment):
    name = "answers"

    def __init__(self, value: object = 1.0):
        self.value = value

    def tasks(self, split=None):
        return [TASK]

    async def verify(self, task, sandbox):
        await sandbox.read_file("answer.txt")
        return self.value  # the mistake: a bare score


class Writes42(Harness):
    name = "writes-42"

    async def run(self, ctx: RolloutContext) -> HarnessResult:
        res = await ctx.exec(["sh", "-c", "echo 42 > answer.txt"])
        return HarnessResult.from_exec(res, harness=self.name)


class ForgetsToReturn(Harness):
    name = "forgets"

    async def run(self, ctx: RolloutContext) -> HarnessResult:
        await ctx.exec(["sh", "-c", "echo 42 > answer.txt"])  # the mistake: no return


class Good(FloatVerdict):
    async def verify(self, task, sandbox):
        return VerifyResult(reward=float((await sandbox.read_file("answer.txt")).strip() == b"42"))


async def _rollout(rig, env: Environment, harness: Harness):
    proxy, launcher, store = await rig({"turns": [{"text": "ok"}]})
    return await run_rollout(harness=harness, environment=env, task=TASK, launcher=launcher, proxy=proxy, store=store)


@pytest.mark.parametrize("value", [1.0, 0, None, True])
async def test_verify_returning_a_non_verdict_is_an_env_error_that_says_what_to_return(rig, value):
    traj = await _rollout(rig, FloatVerdict(value), Writes42())
    assert traj.status == S.ENV_ERROR and not traj.trainable, (traj.status, traj.error)
    assert "not a VerifyResult" in traj.error and "FloatVerdict.verify must return one" in traj.error, traj.error
    assert type(value).__name__ in traj.error
    assert "check_finite" not in traj.error and "AttributeError" not in traj.error
    if isinstance(value, float):
        assert "VerifyResult(reward=1.0)" in traj.error


async def test_harness_run_returning_nothing_is_a_harness_error_not_infra(rig):
    traj = await _rollout(rig, Good(), ForgetsToReturn())
    assert traj.status == S.HARNESS_ERROR, (traj.status, traj.error)  # not infra_error (retried, then discarded)
    assert "ForgetsToReturn.run returned NoneType, not a HarnessResult" in traj.error
    assert "HarnessResult.from_exec" in traj.error


async def test_the_same_rollout_with_correct_returns_succeeds(rig):
    traj = await _rollout(rig, Good(), Writes42())
    assert traj.status == S.SUCCESS and traj.reward == 1.0, (traj.status, traj.error)
