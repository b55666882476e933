"""vllm: a sampling seed is never sent to the server. In vLLM's CPU build a seeded request whose prefill
is chunked while others run kills the engine; the real-server check of this is in test_vllm_server.py."""

from __future__ import annotations

from openforge.proxy.backends import parse_backend_spec
from openforge.proxy.backends.base import GenContext, SamplingParams

from .conftest import serve_app
from .test_backends import vllm_stub


async def test_seed_is_not_forwarded_and_the_call_is_still_exact(tokenizer):
    seen: list = []
    async with serve_app(vllm_stub(tokenizer, seen)) as url:
        backend = parse_backend_spec(f"vllm:{url}/v1", tokenizer=tokenizer)
        g = await backend.generate([1, 2], SamplingParams(max_tokens=8, seed=1234))
        s = await backend.generate([1, 2], SamplingParams(max_tokens=8, seed=7), GenContext(on_tokens=lambda ids: None))
        await backend.aclose()
    assert [("seed" in body) for body in seen] == [False, False]  # plain and streamed
    assert len(g.output_ids) == len(g.logprobs) == 8 and s.output_ids == g.output_ids
