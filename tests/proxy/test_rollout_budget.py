"""A rollout's budget of generated tokens (``SamplingParams.rollout_max_tokens``, the held-out
``eval.heldout.max_tokens``): each call gets at most what is left of it, and a call that finds it spent is
refused as a context overflow, recorded as one, so the rollout is the policy's failure (never infra)."""

from __future__ import annotations

import openai
import pytest

from openforge.core.outcome import OutcomeFacts, classify_outcome
from openforge.core.types import CallStatus, RolloutStatus
from openforge.proxy.backends.base import GenContext, Generation, SamplingParams, TokenBackend
from openforge.proxy.server import ProxyServer


class Chatty(TokenBackend):
    """Writes ``max_tokens`` tokens of prose at every call (the untrained policy), noting what it was allowed."""

    def __init__(self, tokenizer):
        self._tok = tokenizer
        self.allowed: list[int] = []
        self.word = tokenizer.encode(" word", add_special_tokens=False)[0]

    @property
    def tokenizer(self):
        return self._tok

    async def generate(self, prompt_ids, params: SamplingParams, ctx: GenContext | None = None) -> Generation:
        self.allowed.append(params.max_tokens)
        return Generation([self.word] * params.max_tokens, [-0.5] * params.max_tokens, "length")


@pytest.fixture
async def budgeted(tokenizer):
    backend = Chatty(tokenizer)
    sampling = SamplingParams(max_tokens=8, rollout_max_tokens=12)
    async with ProxyServer(backend, sampling=sampling, token_workers=0) as proxy:
        yield proxy, backend


async def test_calls_share_the_budget_and_a_spent_one_is_the_policys_failure(budgeted):
    proxy, backend = budgeted
    h = proxy.create_rollout("t")
    c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
    msgs = [{"role": "user", "content": "hi"}]
    first = await c.chat.completions.create(model="m", messages=msgs)
    msgs.append({"role": "assistant", "content": first.choices[0].message.content})
    msgs.append({"role": "user", "content": "go on"})
    await c.chat.completions.create(model="m", messages=msgs)
    assert backend.allowed == [8, 4]  # the second call gets only what is left of 12
    with pytest.raises(openai.BadRequestError) as e:  # spent: refused before the back-end is asked
        await c.chat.completions.create(model="m", messages=[*msgs, {"role": "user", "content": "more"}])
    assert e.value.code == "context_length_exceeded" and "budget is 12 tokens" in e.value.message
    assert backend.allowed == [8, 4]
    calls = proxy.get_trajectory(h.rollout_id).calls
    assert [c.status for c in calls] == [CallStatus.OK, CallStatus.OK, CallStatus.CONTEXT_OVERFLOW]
    assert [len(c.output_ids) for c in calls] == [8, 4, 0]
    out = classify_outcome(OutcomeFacts(calls=calls, reward=0.0))
    assert out.status == RolloutStatus.POLICY_FAILURE  # trained as a failure, not discarded as infra


async def test_no_budget_leaves_every_call_its_max_tokens(tokenizer):
    backend = Chatty(tokenizer)
    async with ProxyServer(backend, sampling=SamplingParams(max_tokens=8), token_workers=0) as proxy:
        h = proxy.create_rollout("t")
        c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
        for _ in range(3):
            await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert backend.allowed == [8, 8, 8]
