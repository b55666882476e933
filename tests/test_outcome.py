"""The one outcome rule: each row of ``openforge.core.outcome`` from its facts, then from real causes
(the real proxy, the react harness process, local sandboxes, the claw environment)."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

from openforge.core.outcome import OutcomeFacts, classify_outcome
from openforge.core.types import CallStatus, ModelCall
from openforge.core.types import RolloutStatus as S
from openforge.harness import Harness, HarnessResult, RolloutContext
from openforge.proxy.backends.scripted import ScriptedBackend
from openforge.runner.rollout import run_rollout


def call(i: int, status: CallStatus = CallStatus.OK, out: int = 3, latency: float = 0.1,
         first: float | None = None, gap: float | None = None) -> ModelCall:
    return ModelCall(index=i, api="chat", request={}, response={}, prompt_ids=[1, 2], output_ids=list(range(out)),
                     output_logprobs=[0.0] * out, status=status, latency_s=latency, first_token_s=first,
                     max_token_gap_s=gap)


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
    # blame by waiting, not decoding: 50 s of a 60 s budget in one call, first token after 0.5 s: the policy talked
    (OutcomeFacts(calls=[call(0, latency=50.0, first=0.5)], harness_status=S.TIMEOUT, budget_s=60), S.TIMEOUT, 6),
    # ...first token after 49 s: the server's queue
    (OutcomeFacts(calls=[call(0, latency=50.0, first=49.0)], harness_status=S.TIMEOUT, budget_s=60), S.INFRA_ERROR, 5),
    # a call cancelled mid-generation keeps its tokens: the policy's timeout, not "the model never answered"
    (OutcomeFacts(calls=[call(0, first=0.05), call(1, CallStatus.CANCELLED, out=40, latency=30.0, first=0.2, gap=0.1)],
                  harness_status=S.TIMEOUT, budget_s=60), S.TIMEOUT, 6),
    # ...unless the model stalled: no new token for stall_s
    (OutcomeFacts(calls=[call(0, CallStatus.CANCELLED, out=4, latency=20.0, first=0.1, gap=15.0)],
                  harness_status=S.TIMEOUT, budget_s=60, stall_s=10), S.INFRA_ERROR, 5),
    # a recovered overflow (a later call succeeded: the harness compacted) does not zero the rollout
    (OutcomeFacts(calls=[call(0), call(1, CallStatus.CONTEXT_OVERFLOW, out=0), call(2)], reward=1.0), S.SUCCESS, 8),
    # a final one after a later failed attempt still is the policy's
    (OutcomeFacts(calls=[call(0), call(1, CallStatus.CONTEXT_OVERFLOW, out=0), call(2, CallStatus.CONTEXT_OVERFLOW, out=0)],
                  reward=1.0), S.POLICY_FAILURE, 2),
    # the opening prompt does not fit: the task's and the harness's, not the policy's
    (OutcomeFacts(calls=[call(0, CallStatus.CONTEXT_OVERFLOW, out=0)], harness_status=S.HARNESS_ERROR), S.ENV_ERROR, 2),
    # a trainable status from the harness's classify_exit (e.g. killed from inside its sandbox) is honoured
    (OutcomeFacts(calls=[call(0)], harness_status=S.POLICY_FAILURE, harness_error="killed by signal 9"),
     S.POLICY_FAILURE, 7),
])
def test_each_row_of_the_rule(facts, status, rule):
    out = classify_outcome(facts)
    assert (out.status, out.rule) == (status, rule), out
    assert out.reward == (facts.reward if status in (S.SUCCESS, S.POLICY_FAILURE) and rule not in (2, 7) else 0.0)


@pytest.mark.parametrize(("status", "reward", "ok"), [
    ("success", 0.0, False), ("success", 0.99, False), ("success", 1.0, True), ("policy_failure", 1.0, False),
    ("policy_failure", 0.3, True), ("timeout", 0.5, False), ("timeout", 0.0, True), ("infra_error", 1.0, True),
    ("success", None, True), (None, 0.2, True),
])
def test_an_external_verdict_must_agree_with_itself(status, reward, ok):
    from openforge.core.outcome import check_verdict

    if ok:
        check_verdict(status, reward, 1.0)
    else:
        with pytest.raises(ValueError, match=r"threshold|trained as reward 0"):
            check_verdict(status, reward, 1.0)


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
    from openforge.core.errors import BackendError
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


# -- blame by queue time, not decode time ----------------------------------------------------------

LONG_TURN = {"text": "word " * 1200}  # ~1200 tokens: a policy that talks and talks


class SlowDecoder(ScriptedBackend):
    """A model that decodes slowly: a real delay per token, the first token after one delay."""

    def __init__(self, script, tokenizer=None):
        super().__init__(script, tokenizer, token_delay_s=0.04)


class OneSlot(ScriptedBackend):
    """A server at capacity: one generation slot. The request of task ``hog`` (another rollout's)
    holds it until the first other call has waited ``HOLD_S`` for it; every other call waits for the
    slot before its first token, then is answered at once."""

    HOLD_S = 7.0

    def __init__(self, script, tokenizer=None):
        super().__init__(script, tokenizer)
        self._slot: asyncio.Semaphore | None = None
        self._first_waiter: float | None = None

    async def generate(self, prompt_ids, params, ctx=None):
        self._slot = self._slot or asyncio.Semaphore(1)
        hog = ctx is not None and ctx.task_id == "hog"
        if not hog and self._first_waiter is None:
            self._first_waiter = time.monotonic()
        async with self._slot:
            if hog:
                ctx.admit()
                while self._first_waiter is None or time.monotonic() - self._first_waiter < self.HOLD_S:
                    await asyncio.sleep(0.05)
            return await super().generate(prompt_ids, params, ctx)


class Talker(Harness):
    """A scripted harness in the driver's process (no start-up time): asks the proxy for answer after
    answer until its budget is spent, then drops its call in flight (as a killed harness's connection
    is dropped) and reports the timeout."""

    name = "talker"

    def __init__(self, proxy_url: str):
        self.proxy_url = proxy_url

    async def run(self, ctx: RolloutContext) -> HarnessResult:
        import httpx

        async with httpx.AsyncClient(base_url=f"{self.proxy_url}/r/{ctx.rollout_id}/v1", timeout=None,
                                     headers={"authorization": f"Bearer {ctx.api_key}"}) as c:
            async def talk() -> None:
                msgs = [{"role": "user", "content": "go"}]
                while True:
                    r = await c.post("/chat/completions", json={"model": "m", "messages": msgs})
                    r.raise_for_status()
                    msgs += [r.json()["choices"][0]["message"], {"role": "user", "content": "more"}]

            try:
                await asyncio.wait_for(talk(), ctx.remaining_s())
            except asyncio.TimeoutError:
                return HarnessResult(status=S.TIMEOUT, error=f"{self.name} ran out of its {ctx.budget_s:.0f}s budget")
        return HarnessResult()


def _trained(traj) -> set[int]:
    """The calls whose generated tokens the trajectory's segments train."""
    return {ci for s in traj.segments for ci in s.call_indices}


async def test_a_policy_that_talks_past_its_budget_is_a_trained_timeout(rig, env):
    """The react harness process, killed by the launcher at the budget while the model is still
    decoding its (very long) answer: the first token came at once, the rest was the policy talking.
    A timeout, trained as 0, with the tokens it had generated kept (not "the model never answered",
    not discarded) — the same on a fast machine and a slow one."""
    traj = await _rollout(rig, env, {"turns": [LONG_TURN]}, backend_cls=SlowDecoder, budget_s=8)
    assert traj.status == S.TIMEOUT and traj.trainable and traj.reward == 0.0, (traj.status, traj.error)
    last = traj.calls[-1]
    assert last.status == CallStatus.CANCELLED and last.finish_reason == "cancelled", last.status
    assert 0 < len(last.output_ids) == len(last.output_logprobs) < 1200
    # the first token came early (1.07 s once on a loaded 2-core machine), the call then ran to the budget
    assert last.first_token_s is not None and last.first_token_s < 3.0 < last.latency_s, last
    assert last.index in _trained(traj)  # its tokens are trainable context for the timeout
    assert "generating" in traj.error


async def test_the_same_talk_through_a_scripted_harness_is_a_timeout_too(rig, env):
    proxy, launcher, store = await rig({"turns": [LONG_TURN]}, backend_cls=SlowDecoder)
    traj = await run_rollout(harness=Talker(proxy.url), environment=env, task=env.task("files-create-hello"),
                             launcher=launcher, proxy=proxy, store=store, budget_s=6)
    assert traj.status == S.TIMEOUT and traj.trainable, (traj.status, traj.error)
    assert traj.calls[-1].status == CallStatus.CANCELLED and traj.calls[-1].output_ids
    assert traj.calls[-1].index in _trained(traj)


async def test_a_timeout_spent_in_the_servers_queue_is_infra(rig, env):
    """Another rollout's request holds the server's only slot: this rollout's call waits ~7 s of its
    8 s budget before its first token, then everything is quick. The wait is recorded on the call
    (queued, first token) and the timeout is the back-end's: discarded, never scored 0."""
    import httpx

    proxy, launcher, store = await rig({"turns": [{"text": "ok"}] * 50, "tasks": {"hog": [{"text": "mine"}]}},
                                       backend_cls=OneSlot)
    hog = proxy.create_rollout("hog")
    async with httpx.AsyncClient(timeout=60) as c:
        held = asyncio.ensure_future(c.post(f"{hog.openai_base_url}/chat/completions",
                                            headers={"authorization": f"Bearer {hog.api_key}"},
                                            json={"model": "m", "messages": [{"role": "user", "content": "x"}]}))
        st = proxy.recorder.get(hog.rollout_id)
        while not st.serving:
            await asyncio.sleep(0.01)
        traj = await run_rollout(harness=Talker(proxy.url), environment=env, task=env.task("files-create-hello"),
                                 launcher=launcher, proxy=proxy, store=store, budget_s=8)
        assert (await held).status_code == 200
    assert traj.status == S.INFRA_ERROR and not traj.trainable, (traj.status, traj.error)
    assert "first tokens" in traj.error
    first = traj.calls[0]
    assert first.status == CallStatus.OK and first.queued_s is not None and first.queued_s > 4.0, first
    assert first.first_token_s >= first.queued_s and first.latency_s - first.first_token_s < 1.0


class GivesUpForGood(Harness):
    """Exits 9 when it gave up: its own hook says that is the policy's failure (trained, 0)."""

    name = "gives-up-for-good"

    async def run(self, ctx: RolloutContext) -> HarnessResult:
        res = await ctx.exec([sys.executable, "-c", "raise SystemExit(9)"])
        return HarnessResult.from_exec(res, harness=self.name)

    def classify_exit(self, exit_code: int, stderr: str):
        return S.POLICY_FAILURE if exit_code == 9 else super().classify_exit(exit_code, stderr)


async def test_a_trainable_status_from_classify_exit_is_honoured(rig, env):
    traj = await _rollout(rig, env, {"turns": []}, harness=GivesUpForGood())
    assert traj.status == S.POLICY_FAILURE and traj.trainable and traj.reward == 0.0, (traj.status, traj.error)


class Compacts(Harness):
    """A harness that recovers from a context overflow as Claude Code and Codex do: its first prompt
    does not fit (the proxy answers the API's overflow 400 and records the call), it compacts the
    conversation and goes on, and the work gets done."""

    name = "compacts"

    def __init__(self, proxy_url: str):
        self.proxy_url = proxy_url

    async def run(self, ctx: RolloutContext) -> HarnessResult:
        import httpx

        async with httpx.AsyncClient(base_url=f"{self.proxy_url}/r/{ctx.rollout_id}/v1", timeout=60,
                                     headers={"authorization": f"Bearer {ctx.api_key}"}) as c:
            async def ask(content: str) -> httpx.Response:
                return await c.post("/chat/completions", json={"model": "m", "messages": [
                    {"role": "user", "content": content}]})

            assert (await ask("start")).status_code == 200
            too_long = await ask("start\n" + "tool output " * 2000)
            assert too_long.status_code == 400 and "context" in too_long.text, too_long.text
            assert (await ask("start\n[earlier output compacted]")).status_code == 200
        res = await ctx.exec([sys.executable, "-c", "open('hello.txt','w').write('hello world\\n')"])
        return HarnessResult.from_exec(res, harness=self.name)


async def test_a_recovered_overflow_does_not_zero_the_rollout(rig, env):
    class SmallContext(ScriptedBackend):
        max_context = 1024

    proxy, launcher, store = await rig({"turns": [{"text": "ok"}] * 4}, backend_cls=SmallContext)
    traj = await run_rollout(harness=Compacts(proxy.url), environment=env, task=env.task("files-create-hello"),
                             launcher=launcher, proxy=proxy, store=store)
    assert [str(c.status) for c in traj.calls] == ["ok", "context_overflow", "ok"]
    assert traj.status == S.SUCCESS and traj.reward == 1.0, (traj.status, traj.error)  # the reward decides


async def test_a_contradictory_external_verdict_is_refused_and_changes_nothing(tmp_path):
    import httpx
    from testdeps import smollm2_tokenizer

    from openforge.proxy.server import ProxyServer
    from openforge.store import TrajectoryStore

    with TrajectoryStore(tmp_path / "s.db") as store:
        async with ProxyServer(ScriptedBackend({"turns": ["hi"]}, tokenizer=smollm2_tokenizer()), store=store) as proxy:
            h = proxy.create_rollout("t")
            admin = {"authorization": f"Bearer {proxy.admin_token}"}
            url = f"{proxy.url}/admin/rollouts/{h.rollout_id}/finish"
            async with httpx.AsyncClient(timeout=30) as c:
                for body in ({"status": "success", "reward": 0.0}, {"status": "policy_failure", "reward": 1.0},
                             {"status": "timeout", "reward": 0.5},
                             {"status": "success", "reward": 0.7, "success_threshold": 0.8}):
                    r = await c.post(url, json=body, headers=admin)
                    assert r.status_code == 422 and "contradictory verdict" in r.text, (body, r.status_code, r.text)
                assert store.get_trajectory(h.rollout_id) is None and proxy.recorder.get(h.rollout_id).accepting
                r = await c.post(url, json={"status": "success", "reward": 0.7, "success_threshold": 0.5}, headers=admin)
            assert r.status_code == 200 and r.json()["status"] == "success" and r.json()["reward"] == 0.7


class ClaimsSuccess(Harness):
    """Exits 5 and calls that "success": only the verifier says success, so the verifier is asked."""

    name = "claims-success"

    def __init__(self, write: bool):
        self.write = write

    async def run(self, ctx: RolloutContext) -> HarnessResult:
        code = "open('hello.txt','w').write('hello world\\n'); " if self.write else ""
        res = await ctx.exec([sys.executable, "-c", code + "raise SystemExit(5)"])
        return HarnessResult.from_exec(res, harness=self.name)

    def classify_exit(self, exit_code: int, stderr: str):
        return S.SUCCESS if exit_code == 5 else super().classify_exit(exit_code, stderr)


@pytest.mark.parametrize("write", [True, False])
async def test_success_from_classify_exit_means_the_verifier_decides(rig, env, write):
    traj = await _rollout(rig, env, {"turns": []}, harness=ClaimsSuccess(write))
    assert (traj.status, traj.reward) == ((S.SUCCESS, 1.0) if write else (S.POLICY_FAILURE, 0.0)), traj.error
    assert traj.metadata["harness_exit_code"] == 5


class Stalls(ScriptedBackend):
    """A model that sends a few tokens at once, then nothing for a long stretch (a stuck engine)."""

    async def generate(self, prompt_ids, params, ctx=None):
        g = await super().generate(prompt_ids, params, None)  # the turn's ids, not emitted yet
        ctx.admit()
        ctx.emit(g.output_ids[:3], g.logprobs[:3])
        await asyncio.sleep(3600)


async def test_a_model_that_stalls_mid_generation_is_infra_and_stall_s_is_configurable(rig, env):
    proxy, launcher, store = await rig({"turns": [LONG_TURN]}, backend_cls=Stalls)
    traj = await run_rollout(harness=Talker(proxy.url), environment=env, task=env.task("files-create-hello"),
                             launcher=launcher, proxy=proxy, store=store, budget_s=5, stall_s=3.0)
    assert traj.status == S.INFRA_ERROR and "stalled" in traj.error, (traj.status, traj.error)
    last = traj.calls[-1]
    assert last.status == CallStatus.CANCELLED and len(last.output_ids) == 3 and last.max_token_gap_s >= 3.0, last
