"""Continuous batching in the transformers back-end (:mod:`openforge.proxy.backends.hf_batch`): a request
that arrives while another decodes joins the running batch between two tokens, is answered as soon as it
finishes, and gets the same greedy ids and logprobs (within float rounding) as when served alone."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import pytest
from testdeps import tiny_llama

from openforge.proxy.backends.base import GenContext, SamplingParams
from openforge.proxy.backends.transformers import TransformersBackend

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama(), SimpleNamespace(eos_token_id=None)


class Gate(GenContext):
    """Holds the worker thread after ``at`` tokens until ``release`` is set (so a second request is
    sure to arrive mid-decode)."""

    def __init__(self, at: int):
        super().__init__()
        self.at, self.n = at, 0
        self.reached, self.release = threading.Event(), threading.Event()

    def emit(self, ids, logprobs=None):
        self.n += len(ids)
        if self.n == self.at:
            self.reached.set()
            self.release.wait(10)


GREEDY = SamplingParams(temperature=0, max_tokens=24)
SHORT = SamplingParams(temperature=0, max_tokens=5)
LONG_PROMPT = list(range(3, 40))
SHORT_PROMPT = [5, 9, 17, 2]  # shorter than the running batch: left-padded into it


async def _staggered(backend: TransformersBackend, first: list[int], second: list[int]):
    gate = Gate(at=4)
    order: list[str] = []
    a = asyncio.ensure_future(backend.generate(first, GREEDY, gate))
    a.add_done_callback(lambda _: order.append("a"))
    await asyncio.get_running_loop().run_in_executor(None, gate.reached.wait, 10)
    b = asyncio.ensure_future(backend.generate(second, SHORT))
    b.add_done_callback(lambda _: order.append("b"))
    await asyncio.sleep(0.05)  # b is queued
    gate.release.set()
    return await a, await b, order


@pytest.mark.parametrize("long_first", [True, False])
async def test_a_request_joins_the_running_batch_with_unchanged_ids_and_logprobs(tiny, long_first):
    model, tok = tiny
    first, second = (LONG_PROMPT, SHORT_PROMPT) if long_first else (SHORT_PROMPT, LONG_PROMPT)
    alone = TransformersBackend(model, tok, max_batch=1)
    want_a = await alone.generate(first, GREEDY)
    want_b = await alone.generate(second, SHORT)
    backend = TransformersBackend(model, tok, max_batch=8)
    got_a, got_b, order = await _staggered(backend, first, second)
    assert backend.batches == [1, 2]  # b joined a's batch instead of waiting for it to end
    assert order == ["b", "a"]  # and was answered when it finished, before a
    for want, got in ((want_a, got_a), (want_b, got_b)):
        assert got.output_ids == want.output_ids and got.finish_reason == want.finish_reason
        assert max(abs(x - y) for x, y in zip(got.logprobs, want.logprobs)) < 1e-4


async def test_serial_backend_waits_for_the_batch(tiny):
    model, tok = tiny
    backend = TransformersBackend(model, tok, max_batch=1)
    *_, order = await _staggered(backend, LONG_PROMPT, SHORT_PROMPT)
    assert backend.batches == [1, 1] and order == ["a", "b"]


async def test_a_weight_swap_drains_the_batch_first(tiny):
    model, tok = tiny
    backend = TransformersBackend(model, tok, max_batch=8)
    gate = Gate(at=3)
    a = asyncio.ensure_future(backend.generate(LONG_PROMPT, GREEDY, gate))
    await asyncio.get_running_loop().run_in_executor(None, gate.reached.wait, 10)
    swap = asyncio.ensure_future(backend.swap_weights(model.state_dict()))
    await asyncio.sleep(0.05)
    b = asyncio.ensure_future(backend.generate(SHORT_PROMPT, SHORT))  # arrives while the swap waits
    await asyncio.sleep(0.05)
    gate.release.set()
    await asyncio.gather(a, swap, b)
    assert backend.batches == [1, 1]  # b did not join the draining batch: it ran after the swap


def test_only_full_attention_caches_are_merged():
    from types import SimpleNamespace as NS

    from openforge.proxy.backends.hf_batch import mergeable

    assert mergeable(NS(config=NS(layer_types=None)))
    assert mergeable(NS(config=NS(layer_types=["full_attention"] * 2, sliding_window=None)))
    assert not mergeable(NS(config=NS(sliding_window=4096)))
    assert mergeable(NS(config=NS(sliding_window=4096, use_sliding_window=False)))  # Qwen2's default
    assert not mergeable(NS(config=NS(layer_types=["sliding_attention", "full_attention"])))


async def test_a_sliding_window_model_is_served_batch_at_a_time(tiny, monkeypatch):
    from openforge.proxy.backends import transformers as tb

    monkeypatch.setattr(tb, "mergeable", lambda model: False)
    model, tok = tiny
    backend = TransformersBackend(model, tok, max_batch=8)
    *_, order = await _staggered(backend, LONG_PROMPT, SHORT_PROMPT)
    assert backend.batches == [1, 1] and order == ["a", "b"]
