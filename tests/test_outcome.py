"""The one outcome rule: each row of ``openforge.outcome`` from its facts, then from real causes
(the real proxy, the react harness process, local sandboxes, the claw environment)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from openforge.harness import Harness, HarnessResult, RolloutContext
from openforge.outcome import OutcomeFacts, classify_outcome
from openforge.rollout import run_rollout
from openforge.types import CallStatus, ModelCall
from openforge.types import RolloutStatus as S


def call(i: int, status: CallStatus = CallStatus.OK, out: int = 3, latency: float = 0.1) -> ModelCall:
    return ModelCall(index=i, api="chat", request={}, response={}, prompt_ids=[1, 2], output_ids=list(range(out)),
                     output_logprobs=[0.0] * out, status=status, latency_s=latency)


@pytest.mark.parametrize(("facts", "status", "rule"), [
    (OutcomeFacts(cancelled=True, calls=[call(0)]), S.CANCELLED, 1),
    (OutcomeFacts(calls=[call(0), call(1, CallStatus.CONTEXT_OVERFLOW, out=0)], harness_status=S.HARNESS_ERROR),
     S.POLICY_FAILURE, 2),
    (OutcomeFacts(calls=[call(0), call(1, CallStatus.ERROR, out=0)], reward=0.0), S.INFRA_ERROR, 3),
    (OutcomeFacts(calls=[call(0, CallStatus.ERROR, out=0), call(1)], reward=1.0), S.SUCCESS, 8),  # the SDK's retry recovered
    (OutcomeFacts(calls=[call(0)], failure=S.ENV_ERROR, error="setup failed"), S.ENV_ERROR, 4),
    (OutcomeFacts(calls=[], harness_status=S.TIMEOUT, budget_s=60), S.INFRA_ERROR, 5),
    (OutcomeFacts(calls=[call(0), call(1, CallStatus.CANCELLED, out=0)], harness_status=S.TIMEOUT, budget_s=60),
     S.INFRA_ERROR, 5),
    (OutcomeFacts(calls=[call(0, latency=50.0)], harness_status=S.TIMEOUT, budget_s=60), S.INFRA_ERROR, 5),
    (OutcomeFacts(calls=[call(0, latency=5.0)], harness_status=S.TIMEOUT, budget_s=60), S.TIMEOUT, 6),
    (OutcomeFacts(calls=[call(0)], harness_status=S.HARNESS_ERROR, harness_error="crashed"), S.HARNESS_ERROR, 7),
    (OutcomeFacts(calls=[call(0)], reward=0.7, success_threshold=0.5), S.SUCCESS, 8),
    (OutcomeFacts(calls=[call(0)], reward=0.7, success_threshold=1.0), S.POLICY_FAILURE, 9),
])
def test_each_row_of_the_rule(facts, status, rule):
    out = classify_outcome(facts)
    assert (out.status, out.rule) == (status, rule), out
    assert out.reward == (facts.reward if status in (S.SUCCESS, S.POLICY_FAILURE) and rule != 2 else 0.0)


# -- from real causes ------------------------------------------------------------------------------

pytest.importorskip("openai")


@pytest.fixture
def env():
    from openforge.envs.claw import ClawEnvironment

    return ClawEnvironment()


async def _rollout(rig, env, script, *, backend_cls=None, harness=None, budget_s=None, task="files-create-hello"):
    kw = {"backend_cls": backend_cls} if backend_cls else {}
    proxy, launcher, store = await rig(script, **kw)
    from openforge.harnesses.react import ReactHarness

    return await run_rollout(harness=harness or ReactHarness(max_turns=6), environment=env, task=env.task(task),
                             launcher=launcher, proxy=proxy, store=store, budget_s=budget_s)


def _solve(task_id: str) -> list[dict]:
    from openforge.envs.claw import reference_solution

    return [{"shell": c} for c in reference_solution(task_id)] + [{"tool": {"name": "finish", "arguments": {"answer": "ok"}}}]


async def test_a_failed_call_the_sdk_retried_is_not_an_infra_failure(rig, env):
    from openforge.errors import BackendError
    from openforge.proxy.backends.scripted import ScriptedBackend

    class FailsOnce(ScriptedBackend):
        failed = False

        async def generate(self, prompt_ids, params, ctx=None):
            if not FailsOnce.failed:
                FailsOnce.failed = True
                raise BackendError("upstream returned HTTP 503")
            return await super().generate(prompt_ids, params, ctx)

    traj = await _rollout(rig, env, {"turns": _solve("files-create-hello")}, backend_cls=FailsOnce)
    assert traj.calls[0].status == CallStatus.ERROR  # the failure is recorded...
    assert traj.status == S.SUCCESS and traj.reward == 1.0, (traj.status, traj.error)  # ...and forgiven


async def test_a_back_end_that_never_answers_is_infra_not_a_zero(rig, env):
    from openforge.proxy.backends.scripted import ScriptedBackend

    class Hangs(ScriptedBackend):
        async def generate(self, prompt_ids, params, ctx=None):
            await asyncio.sleep(3600)

    traj = await _rollout(rig, env, {"turns": _solve("files-create-hello")}, backend_cls=Hangs, budget_s=8)
    assert traj.status == S.INFRA_ERROR and not traj.trainable, (traj.status, traj.error)
    assert "never answered" in traj.error


class SlowStart(Harness):
    """A harness whose start takes the whole budget (a slow CLI start, a queue): no model call."""

    name = "slow-start"

    async def run(self, ctx: RolloutContext) -> HarnessResult:
        res = await ctx.exec(["sleep", "600"])
        return HarnessResult.from_exec(res, harness=self.name, budget_s=ctx.budget_s)


async def test_a_budget_spent_before_the_first_call_is_infra_not_a_zero(rig, env):
    traj = await _rollout(rig, env, {"turns": []}, harness=SlowStart(), budget_s=2)
    assert traj.calls == [] and traj.status == S.INFRA_ERROR, (traj.status, traj.error)
    assert "before the first model call" in traj.error


async def test_a_timeout_of_the_policys_own_making_is_still_trained(rig, env):
    traj = await _rollout(rig, env, {"turns": [{"shell": "sleep 600"}]}, budget_s=8)
    assert traj.status == S.TIMEOUT and traj.trainable and traj.reward == 0.0, (traj.status, traj.error)


class GivesUp(Harness):
    """Exits 7 when it gives up; its own hook says the verifier should still score what was done."""

    name = "gives-up"

    async def run(self, ctx: RolloutContext) -> HarnessResult:
        res = await ctx.exec([sys.executable, "-c", "open('hello.txt','w').write('hello world\\n'); raise SystemExit(7)"])
        return HarnessResult.from_exec(res, harness=self.name)

    def classify_exit(self, exit_code: int, stderr: str):
        return None if exit_code in (0, 7) else S.HARNESS_ERROR


async def test_a_harness_classifies_its_own_exit_codes(rig, env):
    traj = await _rollout(rig, env, {"turns": []}, harness=GivesUp())
    assert traj.status != S.HARNESS_ERROR and traj.metadata["harness_exit_code"] == 7, (traj.status, traj.error)


async def test_a_context_overflow_is_a_recorded_call_and_the_policys_failure(rig, env):
    """The policy's conversation outgrows its context: the proxy answers the API's overflow 400 (the
    react harness then exits 3) — and records the refused call, so the rollout is a trained failure,
    not a discarded harness_error."""
    from openforge.proxy.backends.scripted import ScriptedBackend

    class SmallContext(ScriptedBackend):
        max_context = 1024

    talk = {"shell": "python3 -c \"print('word ' * 300)\""}
    traj = await _rollout(rig, env, {"turns": [talk, talk, talk, talk]}, backend_cls=SmallContext)
    assert traj.calls[-1].status == CallStatus.CONTEXT_OVERFLOW and len(traj.calls[-1].prompt_ids) >= 1024, traj.calls[-1]
    assert traj.metadata["harness_exit_code"] != 0  # the harness saw the 400 and gave up
    assert traj.status == S.POLICY_FAILURE and traj.trainable and traj.reward == 0.0, (traj.status, traj.error)
    assert traj.segments and all(ci < traj.calls[-1].index for s in traj.segments for ci in s.call_indices)
