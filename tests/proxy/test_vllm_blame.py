"""Blame by cause on the ``vllm:`` back-end, against a vLLM-compatible server on loopback that streams
slowly and enforces its context length with vLLM's own 400s.

- A harness that does not stream still gets its completion streamed from the server: the call's first
  token and decode are real, so a verbose policy that runs out of its budget is a trained ``timeout``,
  not an ``infra_error`` (the decode was the policy talking, not the back-end making it wait).
- ``max_tokens`` is clamped to the room the prompt leaves under ``max_model_len``: a late call of a long
  conversation is not a server 400 (an ``infra_error`` the policy escapes).
- A server that does not list its length: the length is learnt from its 400; a prompt that alone does
  not fit is recorded as the policy's ``context_overflow``, as the proxy records one it refuses itself.
"""

from __future__ import annotations

import asyncio
import json

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from openforge.core.outcome import OutcomeFacts
from openforge.core.types import CallStatus
from openforge.core.types import RolloutStatus as S
from openforge.proxy.backends import parse_backend_spec
from openforge.proxy.backends.base import SamplingParams
from openforge.proxy.server import ProxyServer

from .conftest import serve_app


def slow_vllm(tokenizer, seen: list, *, n_tokens: int = 30, per_token_s: float = 0.05,
              max_model_len: int | None = None, listed: bool = True, ignores_stream: bool = False) -> Starlette:
    """vLLM's /v1/models and /v1/completions: the first token at once, then one token every
    ``per_token_s`` (a decode that takes ``n_tokens * per_token_s``); a request that does not stream gets
    the whole body at the end, as vLLM sends it. With ``max_model_len``, prompt + ``max_tokens`` over it is
    refused with vLLM's 400s (listed in /v1/models only when ``listed``). ``ignores_stream``: a server
    that answers with one JSON body whatever the request says."""
    word = tokenizer.encode(" word", add_special_tokens=False)[0]

    async def models(request: Request):
        model = {"id": "served-policy", "object": "model"}
        if max_model_len is not None and listed:
            model["max_model_len"] = max_model_len
        return JSONResponse({"object": "list", "data": [model]})

    async def completions(request: Request):
        body = await request.json()
        seen.append(body)
        n_prompt, want = len(body["prompt"]), body["max_tokens"]
        if max_model_len is not None and n_prompt >= max_model_len:
            return JSONResponse({"error": {"message": f"This model's maximum context length is {max_model_len} "
                                           f"tokens. However, your request has {n_prompt} input tokens. Please "
                                           "reduce the length of the input messages.", "type": "BadRequestError",
                                           "code": 400}}, status_code=400)
        if max_model_len is not None and n_prompt + want > max_model_len:
            return JSONResponse({"error": {"message": f"'max_tokens' or 'max_completion_tokens' is too large: {want}. "
                                           f"This model's maximum context length is {max_model_len} tokens and your "
                                           f"request has {n_prompt} input tokens ({want} > {max_model_len} - "
                                           f"{n_prompt}).", "type": "BadRequestError", "code": 400}}, status_code=400)
        n = min(n_tokens, want)
        finish = "length" if n == want else "stop"
        ids = [word] * (n - 1) + ([word] if finish == "length" else [tokenizer.convert_tokens_to_ids("<|im_end|>")])

        def choice(part, last):
            return {"index": 0, "text": "", "token_ids": part,
                    "logprobs": {"token_logprobs": [-0.5] * len(part), "tokens": [f"token_id:{i}" for i in part]},
                    "finish_reason": finish if last else None}

        if not body.get("stream") or ignores_stream:
            await asyncio.sleep(n * per_token_s)  # vLLM decodes all of it before answering
            return JSONResponse({"id": "cmpl-1", "object": "text_completion", "choices": [choice(ids, True)]})

        async def chunks():
            for k, t in enumerate(ids):
                if k:
                    await asyncio.sleep(per_token_s)
                yield f"data: {json.dumps({'id': 'cmpl-1', 'choices': [choice([t], k == len(ids) - 1)]})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/models", models), Route("/v1/completions", completions, methods=["POST"])])


async def _ask(h, content: str, timeout: float = 60.0) -> httpx.Response:
    async with httpx.AsyncClient(timeout=timeout) as c:  # a harness that does not stream
        return await c.post(f"{h.openai_base_url}/chat/completions", headers={"x-api-key": h.api_key},
                            json={"model": "x", "messages": [{"role": "user", "content": content}]})


async def test_a_non_streaming_request_is_streamed_upstream_and_its_decode_is_the_policys(tokenizer):
    """A non-streaming harness; a policy that talks for ~1.5 s. The server was asked to stream, the
    call's first token came at once, and the rollout that then ran out of its budget (most of which went
    to that decode) is the policy's ``timeout``, trained as 0 — not an ``infra_error``."""
    seen: list = []
    async with serve_app(slow_vllm(tokenizer, seen, n_tokens=30, per_token_s=0.05)) as url:
        backend = parse_backend_spec(f"vllm:{url}/v1", tokenizer=tokenizer)
        async with ProxyServer(backend, sampling={"max_tokens": 200}, token_workers=0) as proxy:
            h = proxy.create_rollout("t")
            r = await _ask(h, "tell me everything")
            assert r.status_code == 200, r.text
            call = proxy.recorder.get(h.rollout_id).calls[0]
            budget = call.latency_s * 1.1  # the budget ran out just after this long answer
            traj = await proxy.afinish_rollout(h.rollout_id, facts=OutcomeFacts(harness_status=S.TIMEOUT,
                                                                                 budget_s=budget))
        await backend.aclose()
    assert seen[0]["stream"] is True  # the harness did not ask to stream; the server was asked all the same
    assert len(call.output_ids) == 30 and call.output_logprobs == [-0.5] * 30  # assembled whole for the harness
    assert call.first_token_s is not None and call.first_token_s < 0.5 * call.latency_s, call
    assert traj.status == S.TIMEOUT and traj.trainable and traj.reward == 0.0, (traj.status, traj.error)
    assert "generating what the policy chose to say" in traj.error


async def test_a_non_streaming_call_cut_mid_decode_keeps_what_the_policy_said(tokenizer):
    """The harness (not streaming) is killed while the policy is still talking: the call is cancelled
    with the tokens generated so far — the policy's — and the timeout is trained, not "the model never
    answered"."""
    seen: list = []
    async with serve_app(slow_vllm(tokenizer, seen, n_tokens=400, per_token_s=0.02)) as url:
        backend = parse_backend_spec(f"vllm:{url}/v1", tokenizer=tokenizer)
        async with ProxyServer(backend, sampling={"max_tokens": 400}, token_workers=0) as proxy:
            h = proxy.create_rollout("t")
            try:
                await asyncio.wait_for(_ask(h, "tell me everything"), 2.0)
            except asyncio.TimeoutError:
                pass
            traj = await proxy.afinish_rollout(h.rollout_id, facts=OutcomeFacts(harness_status=S.TIMEOUT,
                                                                                 budget_s=2.2))
        await backend.aclose()
    last = traj.calls[-1]
    assert last.status == CallStatus.CANCELLED and 0 < len(last.output_ids) == len(last.output_logprobs) < 400, last
    assert traj.status == S.TIMEOUT and traj.trainable, (traj.status, traj.error)


async def test_max_tokens_is_clamped_to_the_room_the_prompt_leaves(tokenizer):
    """A prompt near ``max_model_len`` (listed by the server): the call asks for what fits, and is answered."""
    seen: list = []
    async with serve_app(slow_vllm(tokenizer, seen, n_tokens=500, per_token_s=0.0, max_model_len=300)) as url:
        backend = parse_backend_spec(f"vllm:{url}/v1", tokenizer=tokenizer)
        async with ProxyServer(backend, sampling={"max_tokens": 200}, token_workers=0) as proxy:
            h = proxy.create_rollout("t")
            r = await _ask(h, "word " * 200)
            traj = proxy.finish_rollout(h.rollout_id, reward=0.0)
        await backend.aclose()
    assert r.status_code == 200, r.text
    call = traj.calls[0]
    n_prompt = len(call.prompt_ids)
    assert 100 < n_prompt < 290, n_prompt
    assert seen[-1]["max_tokens"] == 300 - n_prompt and call.finish_reason == "length"
    assert traj.status == S.POLICY_FAILURE  # the verifier's 0: no back-end failure anywhere


async def test_a_server_that_does_not_list_its_length_teaches_it_and_an_overflow_is_the_policys(tokenizer):
    """No ``max_model_len`` in /v1/models. A call whose prompt alone does not fit reaches the server and is
    refused with its length: recorded as a ``context_overflow`` call, so the rollout (which had generated
    before) is the policy's failure, not an ``infra_error``; later calls are clamped to the learnt length."""
    seen: list = []
    async with serve_app(slow_vllm(tokenizer, seen, n_tokens=500, per_token_s=0.0, max_model_len=300,
                                   listed=False)) as url:
        backend = parse_backend_spec(f"vllm:{url}/v1", tokenizer=tokenizer)
        async with ProxyServer(backend, sampling={"max_tokens": 100}, token_workers=0) as proxy:
            h = proxy.create_rollout("t")
            first = await _ask(h, "hi")
            over = await _ask(h, "word " * 400)
            traj = await proxy.afinish_rollout(h.rollout_id, facts=OutcomeFacts(reward=0.0))
        await backend.aclose()
    assert first.status_code == 200, first.text
    assert over.status_code == 400 and over.json()["error"]["code"] == "context_length_exceeded", over.text
    assert [str(c.status) for c in traj.calls] == ["ok", "context_overflow"]
    assert traj.status == S.POLICY_FAILURE and traj.trainable, (traj.status, traj.error)
    assert "overflowed the policy's context" in traj.error and backend.max_context == 300


async def test_a_late_call_refused_for_its_max_tokens_is_sent_again_clamped(tokenizer):
    seen: list = []
    async with serve_app(slow_vllm(tokenizer, seen, n_tokens=500, per_token_s=0.0, max_model_len=300,
                                   listed=False)) as url:
        backend = parse_backend_spec(f"vllm:{url}/v1", tokenizer=tokenizer)
        g = await backend.generate(list(range(1, 251)), SamplingParams(max_tokens=200))
        await backend.aclose()
    assert [b["max_tokens"] for b in seen] == [200, 50]  # refused with the server's length, then clamped
    assert len(g.output_ids) == 50 and g.finish_reason == "length"


async def test_a_server_that_ignores_stream_still_answers(tokenizer):
    """An OpenAI-compatible server that answers one JSON body to a streamed request: the answer is
    taken whole (its first token then counts at the end, as before)."""
    seen: list = []
    async with serve_app(slow_vllm(tokenizer, seen, n_tokens=12, per_token_s=0.0, ignores_stream=True)) as url:
        backend = parse_backend_spec(f"vllm:{url}/v1", tokenizer=tokenizer)
        g = await backend.generate([1, 2, 3], SamplingParams(max_tokens=50))
        await backend.aclose()
    assert seen[0]["stream"] is True and len(g.output_ids) == len(g.logprobs) == 12 and g.finish_reason == "stop"
