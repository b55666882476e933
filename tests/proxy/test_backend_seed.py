"""A seeded transformers back-end: the rows of a GRPO group (same prompt, one rollout each) sample their own
tokens, and the same calls under the same seed sample the same tokens again (``request_seed``)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from testdeps import tiny_llama

from openforge.proxy.backends.base import GenContext, SamplingParams
from openforge.proxy.backends.transformers import TransformersBackend

pytest.importorskip("torch")

PROMPT = list(range(3, 20))
ROLLOUTS = [f"ro_{i}" for i in range(4)]


@pytest.fixture(scope="module")
def model():
    return tiny_llama()


async def _group(backend: TransformersBackend, params: SamplingParams, *, rollouts=ROLLOUTS, call_index: int = 0):
    """One call of each rollout of a group, all at once (they batch together, as a group's first turn does)."""
    ctxs = [GenContext(rollout_id=r, task_id="t", call_index=call_index) for r in rollouts]
    gens = await asyncio.gather(*(backend.generate(PROMPT, params, c) for c in ctxs))
    return [tuple(g.output_ids) for g in gens]


@pytest.mark.parametrize("where", ["backend", "params"])
async def test_a_seeded_group_samples_differently_per_row_and_reproducibly(model, where):
    params = SamplingParams(temperature=1.0, max_tokens=12, seed=7 if where == "params" else None)

    def backend() -> TransformersBackend:
        return TransformersBackend(model, SimpleNamespace(eos_token_id=None), seed=7 if where == "backend" else None,
                                   prefix_cache_bytes=0)

    first = await _group(backend(), params)
    assert len(set(first)) == len(first), first  # every row of the group drew its own tokens
    assert await _group(backend(), params) == first  # a rerun of the same calls: the same tokens
    later = await _group(backend(), params, call_index=1)  # a rollout's next call is not its first again
    assert all(a != b for a, b in zip(first, later, strict=True))


async def test_seeded_requests_without_a_rollout_differ_and_reproduce(model):
    params = SamplingParams(temperature=1.0, max_tokens=12, seed=3)

    async def calls():
        backend = TransformersBackend(model, SimpleNamespace(eos_token_id=None), prefix_cache_bytes=0)
        return [tuple((await backend.generate(PROMPT, params)).output_ids) for _ in range(4)]

    first = await calls()
    assert len(set(first)) == len(first) and await calls() == first


async def test_unseeded_sampling_leaves_torchs_global_generator_alone(model):
    import torch

    torch.manual_seed(123)
    want = torch.rand(3)
    torch.manual_seed(123)
    backend = TransformersBackend(model, SimpleNamespace(eos_token_id=None), prefix_cache_bytes=0)
    await backend.generate(PROMPT, SamplingParams(temperature=1.0, max_tokens=4))
    assert torch.equal(torch.rand(3), want)  # a trainer's torch.manual_seed still holds
