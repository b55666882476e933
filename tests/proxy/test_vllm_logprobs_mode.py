"""vllm: behaviour logprobs are those of the distribution sampled from. vLLM V1 returns raw
(pre-temperature) logprobs unless its server runs with --logprobs-mode processed_logprobs, so a
tempered call is refused unless the spec declares that mode; at temperature 1 both modes agree."""

from __future__ import annotations

import httpx
import pytest

from openforge.core.errors import ConfigError
from openforge.proxy.backends import parse_backend_spec
from openforge.proxy.backends.base import GenContext, SamplingParams
from openforge.proxy.server import ProxyServer

from .conftest import serve_app
from .test_backends import vllm_stub


async def test_tempered_call_refused_on_raw_logprobs_server(tokenizer):
    seen: list = []
    async with serve_app(vllm_stub(tokenizer, seen)) as url:
        backend = parse_backend_spec(f"vllm:{url}/v1", tokenizer=tokenizer)
        assert backend.logprobs_mode == "raw_logprobs"  # vLLM V1's default
        with pytest.raises(ConfigError, match="--logprobs-mode processed_logprobs"):
            await backend.generate([1, 2], SamplingParams(temperature=0.7, max_tokens=8), GenContext())
        assert seen == []  # refused before anything was sampled
        # through the proxy: the harness gets an error, the call is recorded as failed (never trained)
        async with ProxyServer(backend, sampling={"temperature": 0.7, "max_tokens": 8}) as proxy:
            h = proxy.create_rollout("t")
            async with httpx.AsyncClient() as c:
                r = await c.post(f"{h.openai_base_url}/chat/completions", headers={"x-api-key": h.api_key},
                                 json={"model": "x", "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code >= 500 and "raw (pre-temperature) logprobs" in r.text
            traj = proxy.finish_rollout(h.rollout_id, reward=1.0)
        assert traj.status == "infra_error" and not traj.trainable
        # temperature 1: raw and processed logprobs are the same distribution
        g = await backend.generate([1, 2], SamplingParams(temperature=1.0, max_tokens=8), GenContext())
        assert len(g.output_ids) == len(g.logprobs) == 8 and seen[-1]["temperature"] == 1.0
        await backend.aclose()


async def test_declared_processed_logprobs_server_serves_tempered_calls(tokenizer):
    seen: list = []
    async with serve_app(vllm_stub(tokenizer, seen)) as url:
        backend = parse_backend_spec(f"vllm:{url}/v1?logprobs_mode=processed_logprobs", tokenizer=tokenizer)
        assert backend.logprobs_mode == "processed_logprobs" and backend.url == url  # the query is not sent on
        g = await backend.generate([1, 2], SamplingParams(temperature=0.6, max_tokens=8), GenContext())
        assert len(g.output_ids) == 8 and seen[-1]["temperature"] == 0.6
        await backend.aclose()
    with pytest.raises(ConfigError, match="logits modes are not logprobs"):
        parse_backend_spec("vllm:http://127.0.0.1:9?logprobs_mode=raw_logits", tokenizer=tokenizer)
