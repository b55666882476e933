"""On veRL a call's answer comes whole, with no timing: its decode (the policy's time) is estimated from
token counts at the engine's rate measured per step (:mod:`openforge.train.verl.latency`), so a verbose
policy that talks past its budget is a trained ``timeout``, not an ``infra_error`` that fails and
refills its whole group. Unit tests of the split, then the real proxy over ``VerlServerBackend`` with a
``server_manager`` that answers like veRL's (whole ``TokenOutput``-shaped answers, after a wait and a
decode at a fixed rate). No veRL install is needed: the back-end does not import it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import httpx
import pytest

from openforge.core.outcome import OutcomeFacts
from openforge.core.types import CallStatus
from openforge.core.types import RolloutStatus as S
from openforge.proxy.server import ProxyServer
from openforge.train.verl.backend import VerlServerBackend
from openforge.train.verl.latency import DecodeRate, PrefillRate

# -- the split -----------------------------------------------------------------------------------------


def test_decode_is_token_count_at_the_steps_median_rate():
    r = DecodeRate()
    for n, lat in [(100, 1.0), (100, 2.0), (50, 0.5), (200, 2.0)]:  # 100, 50, 100, 100 tokens/s
        r.split(1, n, lat)
    assert r.rate == 100.0
    wait, decode = r.split(1, 300, 5.0)  # 3 s to say 300 tokens; 2 s waiting for the engine
    assert decode == pytest.approx(3.0) and wait == pytest.approx(2.0)
    wait, decode = r.split(1, 10, 0.01)  # faster than the rate: all of it decode, never a negative wait
    assert (wait, decode) == (0.0, 0.01)


def test_a_new_step_uses_the_last_steps_rate_until_it_has_its_own():
    r = DecodeRate()
    for _ in range(3):
        r.split(1, 100, 1.0)  # 100 tokens/s in step 1
    wait, decode = r.split(2, 100, 4.0)  # step 2's first call: measured against step 1's rate
    assert decode == pytest.approx(1.0) and wait == pytest.approx(3.0)
    for _ in range(3):
        r.split(2, 100, 0.5)  # step 2's own: 200 tokens/s (median of 25, 200, 200, 200)
    assert r.rate == 200.0


def test_before_any_rate_is_known_a_call_is_all_decode_and_short_answers_are_no_samples():
    r = DecodeRate()
    assert r.split(1, 40, 2.0) == (0.0, 2.0)  # nothing to measure against: not blamed on the back-end by a guess
    assert r.split(1, 0, 3.0) == (3.0, 0.0)  # nothing generated: all waiting
    for _ in range(5):
        r.split(1, 4, 2.0)  # 4-token answers are mostly prefill and queue: not samples
    assert r.rate is None


def test_a_call_cut_mid_answer_is_decoding_after_the_usual_wait_unless_it_overran():
    r = DecodeRate()
    for lat in (1.2, 1.1, 1.3, 1.2, 1.1):
        r.split(1, 100, lat)  # ~100 tokens/s after waits of 0..0.2 s
    assert r.decoding_since(0.1, 1000) is None  # still within the usual wait: waiting for the engine
    since = r.decoding_since(5.0, 1000)  # past the usual wait, well within 1000 tokens' decode: talking
    assert since is not None and 0.0 <= since < 0.5
    assert r.decoding_since(60.0, 100) is None  # 100 tokens take ~1 s: a call still out at 60 s stalled


def _lat(prompt: int, n: int, queue: float = 0.0) -> float:
    return queue + prompt / 4000 + n / 200  # an engine that prefills 4,000 tokens/s and decodes 200


def test_the_prefill_rate_is_fitted_over_the_least_queued_calls_of_a_step():
    r = PrefillRate()
    assert r.measure(1, 2000, 40, _lat(2000, 40)) is None  # no rate yet: no queue split out by a guess
    calls = [(30, 40, 0.0), (500, 10, 0.0), (2000, 100, 1.0), (1000, 40, 0.0), (2000, 10, 0.0), (500, 100, 2.0),
             (30, 10, 0.0), (1000, 100, 0.0)]  # two of them queued (1 s, 2 s): they do not lower the rate
    for prompt, n, queue in calls:
        r.measure(1, prompt, n, _lat(prompt, n, queue))
    assert r.rate == pytest.approx(4000.0, rel=0.02)
    for _ in range(7):
        r.measure(2, 500, 40, _lat(500, 40))  # one shape of call: p and d cannot be told apart
    assert r.rate == pytest.approx(4000.0, rel=0.02)  # step 2 still measured with step 1's fit


def test_a_known_prefill_is_not_read_as_slow_decode():
    r = DecodeRate()
    for _ in range(3):
        r.split(1, 40, _lat(2000, 40), prefill_s=0.5)  # 0.7 s: 0.5 s of prefill, 0.2 s of decode
    assert r.rate == pytest.approx(200.0)
    wait, decode = r.split(1, 40, _lat(2000, 40, 1.0), prefill_s=0.5)  # queued 1 s as well
    assert decode == pytest.approx(0.2) and wait == pytest.approx(1.5)


# -- through the proxy -----------------------------------------------------------------------------------


class FakeEngine:
    """veRL's server_manager: answers whole after ``wait_s`` (its queue), the prefill of the prompt's
    uncached tokens at ``prefill_rate`` and ``n / rate`` of decode."""

    def __init__(self, word: int, rate: float = 200.0, wait_s: float = 0.02, prefill_rate: float = 4000.0):
        self.word, self.rate, self.wait_s, self.prefill_rate = word, rate, wait_s, prefill_rate
        self.say = 40  # tokens the next answer has (bounded by max_tokens)
        self.cached = 0  # prompt tokens the next call finds in the engine's prefix cache

    async def generate(self, *, request_id, prompt_ids, sampling_params):
        n = min(self.say, sampling_params["max_tokens"])
        cached = min(self.cached, len(prompt_ids))
        await asyncio.sleep(self.wait_s + (len(prompt_ids) - cached) / self.prefill_rate + n / self.rate)
        return SimpleNamespace(token_ids=[self.word] * n, log_probs=[-0.5] * n, stop_reason="completed",
                               extra_fields={"global_steps": 3, "min_global_steps": 3, "max_global_steps": 3,
                                             "num_cached_tokens": cached})


async def _ask(h, timeout: float = 60.0, content: str = "go on") -> httpx.Response:
    async with httpx.AsyncClient(timeout=timeout) as c:
        return await c.post(f"{h.openai_base_url}/chat/completions", headers={"x-api-key": h.api_key},
                            json={"model": "x", "messages": [{"role": "user", "content": content}]})


@pytest.fixture
async def verl_proxy(tokenizer):
    engine = FakeEngine(tokenizer.encode(" word", add_special_tokens=False)[0])
    backend = VerlServerBackend(engine, tokenizer, max_model_len=8192)
    async with ProxyServer(backend, sampling={"max_tokens": 4000}, token_workers=0) as proxy:
        calib = proxy.create_rollout("calibration")  # other sessions of the step: the engine's rate
        backend.open_rollout(calib.rollout_id, {"temperature": 1.0})
        for _ in range(4):
            assert (await _ask(calib)).status_code == 200
        yield proxy, backend, engine


def _session(proxy, backend):
    h = proxy.create_rollout("t")
    backend.open_rollout(h.rollout_id, {"temperature": 1.0})
    return h


async def test_a_verbose_answer_on_verl_is_the_policys_time(verl_proxy):
    proxy, backend, engine = verl_proxy
    h = _session(proxy, backend)
    engine.say = 400  # ~2 s of decode after a 0.02 s wait
    assert (await _ask(h)).status_code == 200
    call = proxy.recorder.get(h.rollout_id).calls[0]
    assert call.first_token_s is not None and call.first_token_s < 0.3 * call.latency_s, call
    traj = await proxy.afinish_rollout(h.rollout_id, facts=OutcomeFacts(harness_status=S.TIMEOUT,
                                                                         budget_s=call.latency_s * 1.1))
    assert traj.status == S.TIMEOUT and traj.trainable, (traj.status, traj.error)


async def test_a_verl_call_cut_while_the_policy_talks_is_its_timeout(verl_proxy):
    proxy, backend, engine = verl_proxy
    h = _session(proxy, backend)
    engine.say = 4000  # ~20 s of decode: the budget ends first
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(_ask(h), 1.5)
    traj = await proxy.afinish_rollout(h.rollout_id, facts=OutcomeFacts(harness_status=S.TIMEOUT, budget_s=1.6))
    last = traj.calls[-1]
    assert last.status == CallStatus.CANCELLED and not last.output_ids
    assert last.first_token_s is not None and last.first_token_s < 0.5, last
    assert traj.status == S.TIMEOUT and traj.trainable, (traj.status, traj.error)


async def test_a_verl_call_that_overran_its_decode_is_still_the_back_ends(verl_proxy):
    """Control: 10 tokens take 0.05 s at the engine's rate; a call still out after 1.5 s never answered."""
    proxy, backend, engine = verl_proxy
    h = _session(proxy, backend)
    engine.wait_s = 60.0  # the engine is stuck
    with pytest.raises(asyncio.TimeoutError):
        async with httpx.AsyncClient(timeout=60) as c:
            await asyncio.wait_for(c.post(f"{h.openai_base_url}/chat/completions", headers={"x-api-key": h.api_key},
                                          json={"model": "x", "max_tokens": 10,
                                                "messages": [{"role": "user", "content": "go on"}]}), 1.5)
    traj = await proxy.afinish_rollout(h.rollout_id, facts=OutcomeFacts(harness_status=S.TIMEOUT, budget_s=1.6))
    assert traj.status == S.INFRA_ERROR and "never answered" in traj.error, (traj.status, traj.error)


async def test_a_verl_calls_wait_is_split_into_queue_and_prefill(verl_proxy):
    """A 2,000-token prompt prefills in 0.5 s at the engine's rate; the call also queued 0.6 s: the call
    records that queue (``queued_s``) apart from its prefill, and a cached prompt prefills almost nothing."""
    proxy, backend, engine = verl_proxy
    long = " ".join(["word"] * 2000)
    calib = _session(proxy, backend)
    for _ in range(4):  # unqueued calls of the step: the engine's prefill rate
        assert (await _ask(calib, content=long)).status_code == 200
    assert backend.prefill_rate.rate == pytest.approx(4000.0, rel=0.35)
    h = _session(proxy, backend)
    engine.wait_s = 0.6
    assert (await _ask(h, content=long)).status_code == 200
    engine.cached = 10_000
    assert (await _ask(h, content=long)).status_code == 200
    queued, cached = proxy.recorder.get(h.rollout_id).calls
    assert queued.queued_s == pytest.approx(0.6, abs=0.2), queued
    assert queued.first_token_s - queued.queued_s == pytest.approx(0.5, abs=0.2), queued  # the prefill
    assert cached.queued_s == pytest.approx(0.6, abs=0.2) and cached.first_token_s - cached.queued_s < 0.15, cached
