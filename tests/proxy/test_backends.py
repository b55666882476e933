"""Back-ends: spec parsing, vLLM token-in/token-out against a stub of vLLM's /v1/completions,
the openai: pass-through (exact: false), the scripted policy's shell mapping, and (slow) the real
SmolLM2 transformers back-end with exact logprobs."""

from __future__ import annotations

import json
import math

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route
from testservers import tool_then_answer_upstream

from openforge.core.errors import BackendError, ConfigError
from openforge.proxy.backends import parse_backend_spec
from openforge.proxy.backends.base import GenContext, SamplingParams
from openforge.proxy.backends.scripted import find_shell_tool
from openforge.proxy.server import ProxyServer

from .conftest import TOOLS, serve_app


def test_parse_backend_spec_errors(tmp_path):
    for bad in ("nonsense", "foo:bar", "scripted:", 3):
        with pytest.raises(ConfigError):
            parse_backend_spec(bad)
    with pytest.raises(ConfigError, match="no such file"):
        parse_backend_spec(f"scripted:{tmp_path}/missing.yaml")
    p = tmp_path / "s.yaml"
    p.write_text("turns:\n  - {bogus: 1}\n")
    with pytest.raises(ConfigError, match="turn 0"):
        parse_backend_spec(f"scripted:{p}")
    with pytest.raises(ConfigError, match="never downloads"):
        parse_backend_spec("transformers:some-org/some-model")


def test_scripted_shell_maps_onto_each_harness_tool():
    def tool(name, param):
        return {"type": "function", "function": {"name": name, "parameters": {"type": "object",
                                                                                 "properties": {param: {"type": "string"}}}}}
    assert find_shell_tool([tool("read", "path"), tool("exec_command", "cmd")]) == ("exec_command", "cmd")
    assert find_shell_tool([tool("Bash", "command")]) == ("Bash", "command")
    assert find_shell_tool([tool("exec", "command")]) == ("exec", "command")
    assert find_shell_tool([tool("read", "path")]) is None


READ_TOOL = {"type": "function", "function": {"name": "read", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}}}}


async def test_scripted_per_task_scripts_and_missing_shell_tool(tokenizer, tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("turns: [{text: default}]\nfinal: bye\ntasks:\n  special: [{shell: ls}]\n")
    b = parse_backend_spec(f"scripted:{p}", tokenizer=tokenizer)
    ctx = GenContext(rollout_id="r1", task_id="special", tools=TOOLS)
    g = await b.generate([1], SamplingParams(), ctx)
    assert '"command": "ls"' in tokenizer.decode(g.output_ids) and g.logprobs == [0.0] * len(g.output_ids)
    with pytest.raises(BackendError, match="no shell tool"):
        await b.generate([1], SamplingParams(), GenContext(rollout_id="r2", task_id="special",
                                                           tools=[READ_TOOL]))
    g = await b.generate([1], SamplingParams(), GenContext(rollout_id="r4", task_id="special", tools=[]))
    assert tokenizer.decode(g.output_ids).startswith("```bash\nls\n```")  # no tools offered: aider's text protocol
    g = await b.generate([1], SamplingParams(), GenContext(rollout_id="r3", task_id="other"))
    assert tokenizer.decode(g.output_ids).startswith("default")
    g = await b.generate([1], SamplingParams(), GenContext(rollout_id="r3", task_id="other"))
    assert tokenizer.decode(g.output_ids).startswith("bye")


def vllm_stub(tokenizer, seen: list, max_model_len: int | None = None):
    """A test double of vLLM's OpenAI server: /v1/models and /v1/completions with token-id prompts,
    ``return_token_ids`` and per-token logprobs (it 'generates' a fixed hermes tool call). With
    ``max_model_len`` it lists that length with its model and refuses longer prompts with a 400, as
    vLLM does."""
    answer = tokenizer.encode('<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call><|im_end|>',
                              add_special_tokens=False)

    async def models(request: Request):
        model = {"id": "served-policy", "object": "model"}
        if max_model_len is not None:
            model["max_model_len"] = max_model_len
        return JSONResponse({"object": "list", "data": [model]})

    async def completions(request: Request):
        body = await request.json()
        seen.append(body)
        if not isinstance(body.get("prompt"), list) or not all(isinstance(i, int) for i in body["prompt"]):
            return JSONResponse({"error": {"message": "prompt must be token ids"}}, status_code=400)
        if max_model_len is not None and len(body["prompt"]) >= max_model_len:
            return JSONResponse({"error": {"message": "This model's maximum context length is "
                                           f"{max_model_len} tokens"}}, status_code=400)
        ids = answer[: body["max_tokens"]]
        lps = [-0.01 * (i + 1) for i in range(len(ids))]
        if body.get("stream"):
            return StreamingResponse(_vllm_chunks(tokenizer, body, ids, lps, len(answer)), media_type="text/event-stream")
        return JSONResponse({"id": "cmpl-1", "object": "text_completion", "model": body["model"], "choices": [{
            "index": 0, "text": tokenizer.decode(ids), "token_ids": ids,
            "logprobs": {"token_logprobs": lps, "tokens": [f"token_id:{i}" for i in ids]},
            "finish_reason": "stop" if len(ids) == len(answer) else "length"}],
            "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(ids)}})

    return Starlette(routes=[Route("/v1/models", models), Route("/v1/completions", completions, methods=["POST"])])


async def _vllm_chunks(tokenizer, body, ids, lps, n_answer):
    """vLLM's streamed /v1/completions: a few ids per chunk (with their logprobs), then [DONE]."""
    import asyncio

    step = 3
    for k in range(0, len(ids), step):
        part, part_lps = ids[k:k + step], lps[k:k + step]
        if body.get("prompt") == [666] and k >= step:  # the broken server of a test: a logprob goes missing
            part_lps = part_lps[:-1]
        last = k + step >= len(ids)
        choice = {"index": 0, "text": tokenizer.decode(part), "token_ids": part,
                  "logprobs": {"token_logprobs": part_lps, "tokens": [f"token_id:{i}" for i in part]},
                  "finish_reason": ("stop" if len(ids) == n_answer else "length") if last else None}
        yield f"data: {json.dumps({'id': 'cmpl-1', 'object': 'text_completion', 'choices': [choice]})}\n\n"
        await asyncio.sleep(0.05)
    yield "data: [DONE]\n\n"


async def test_vllm_backend_records_server_ids_and_logprobs(tokenizer):
    seen: list = []
    async with serve_app(vllm_stub(tokenizer, seen)) as url:
        # temperature 0.7: the server is declared to return processed (tempered) logprobs
        backend = parse_backend_spec(f"vllm:{url}/v1?logprobs_mode=processed_logprobs", tokenizer=tokenizer)
        async with ProxyServer(backend, sampling={"temperature": 0.7, "max_tokens": 100}) as proxy:
            h = proxy.create_rollout("t")
            async with httpx.AsyncClient() as c:
                r = await c.post(f"{h.openai_base_url}/chat/completions", headers={"x-api-key": h.api_key}, json={
                    "model": "x", "messages": [{"role": "user", "content": "list"}], "tools": TOOLS, "temperature": 0.1})
            tc = r.json()["choices"][0]["message"]["tool_calls"][0]
            assert tc["function"]["name"] == "bash" and json.loads(tc["function"]["arguments"]) == {"command": "ls"}
            traj = proxy.finish_rollout(h.rollout_id, reward=1.0)
        await backend.aclose()
    body = seen[-1]
    call = traj.calls[0]
    assert body["model"] == "served-policy" and body["prompt"] == call.prompt_ids
    assert body["temperature"] == 0.7 and body["top_p"] == 1.0 and body["return_token_ids"] is True  # enforced
    assert call.sampling["requested"]["temperature"] == 0.1
    assert call.output_logprobs[:2] == [-0.01, -0.02] and call.exact
    traj.validate_segments()


async def test_vllm_backend_streams_server_ids_as_they_come(tokenizer):
    import time

    import openai

    seen: list = []
    async with serve_app(vllm_stub(tokenizer, seen)) as url:
        backend = parse_backend_spec(f"vllm:{url}/v1", tokenizer=tokenizer)
        async with ProxyServer(backend, sampling={"max_tokens": 100}) as proxy:
            h = proxy.create_rollout("t")
            c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
            t0 = time.monotonic()
            first = None
            s = await c.chat.completions.create(model="x", messages=[{"role": "user", "content": "list"}],
                                                tools=TOOLS, stream=True)
            calls = []
            async for chunk in s:
                if first is None:
                    first = time.monotonic() - t0
                if chunk.choices and chunk.choices[0].delta.tool_calls:
                    calls += chunk.choices[0].delta.tool_calls
            total = time.monotonic() - t0
            traj = proxy.finish_rollout(h.rollout_id, reward=1.0)
            with pytest.raises(BackendError, match="token ids but"):  # a chunk short of a logprob
                await backend.generate([666], SamplingParams(max_tokens=100), GenContext(on_tokens=lambda ids: None))
        await backend.aclose()
    assert seen[0]["stream"] is True and first < total / 2  # the opening events came while vLLM was streaming
    assert calls[0].function.name == "bash" and json.loads(calls[1].function.arguments) == {"command": "ls"}
    call = traj.calls[0]
    assert call.exact and call.output_logprobs[:4] == [-0.01, -0.02, -0.03, -0.04]
    assert len(call.output_ids) == len(call.output_logprobs) > 10
    traj.validate_segments()


async def test_vllm_context_length_is_the_servers_and_an_overflow_is_recorded_not_a_500(tokenizer):
    """The proxy reads ``max_model_len`` from the server's /v1/models: a prompt that does not fit is the
    API's overflow 400, recorded as a ``context_overflow`` call (the outcome rule's business), and is
    never sent to vLLM to come back as a server error (an infra failure the policy escapes)."""
    seen: list = []
    async with serve_app(vllm_stub(tokenizer, seen, max_model_len=300)) as url:
        backend = parse_backend_spec(f"vllm:{url}/v1", tokenizer=tokenizer)
        async with ProxyServer(backend, sampling={"max_tokens": 50}) as proxy:
            h = proxy.create_rollout("t")
            async with httpx.AsyncClient() as c:  # the very first call is over-long: known before it is sent
                long = await c.post(f"{h.openai_base_url}/chat/completions", headers={"x-api-key": h.api_key},
                                    json={"model": "x", "messages": [{"role": "user", "content": "word " * 400}]})
                ok = await c.post(f"{h.openai_base_url}/chat/completions", headers={"x-api-key": h.api_key},
                                  json={"model": "x", "messages": [{"role": "user", "content": "list"}]})
            traj = proxy.finish_rollout(h.rollout_id, reward=1.0)
        await backend.aclose()
    assert ok.status_code == 200 and backend.max_context == 300
    assert long.status_code == 400 and long.json()["error"]["code"] == "context_length_exceeded", long.text
    assert [str(c.status) for c in traj.calls] == ["context_overflow", "ok"]
    assert len(seen) == 1  # the over-long prompt never reached the server
    assert traj.status == "success"  # a recovered overflow: the reward decides


async def test_vllm_backend_errors_are_backend_errors(tokenizer):
    b = parse_backend_spec("vllm:http://127.0.0.1:9", tokenizer=tokenizer, model="m")
    with pytest.raises(BackendError, match="unreachable"):
        await b.generate([1, 2], SamplingParams())
    await b.aclose()


def openai_upstream(seen: list):
    return tool_then_answer_upstream(seen)


async def test_openai_passthrough_is_recorded_inexact(tokenizer):
    anthropic = pytest.importorskip("anthropic")
    seen: list = []
    async with serve_app(openai_upstream(seen)) as url:
        backend = parse_backend_spec(f"openai:{url}/v1", tokenizer=tokenizer, model="teacher")
        async with ProxyServer(backend) as proxy:
            h = proxy.create_rollout("t")
            c = anthropic.AsyncAnthropic(base_url=h.anthropic_base_url, api_key=h.api_key, max_retries=0)
            tools = [{"name": "bash", "description": "run", "input_schema": {"type": "object",
                                                                              "properties": {"command": {"type": "string"}}}}]
            msgs = [{"role": "user", "content": "where am I"}]
            m = await c.messages.create(model="claude", max_tokens=100, messages=msgs, tools=tools)
            tu = m.content[0]
            assert tu.type == "tool_use" and tu.input == {"command": "pwd"}
            msgs += [{"role": "assistant", "content": [tu.model_dump(exclude_none=True)]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tu.id, "content": "/tmp"}]}]
            async with c.messages.stream(model="claude", max_tokens=100, messages=msgs, tools=tools) as s:
                final = await s.get_final_message()
            assert final.content[0].text == "Finished."
            traj = proxy.finish_rollout(h.rollout_id, reward=1.0)
        await backend.aclose()
    assert seen[0]["model"] == "teacher" and seen[1]["messages"][-1]["role"] == "tool"
    assert json.loads(seen[1]["messages"][1]["tool_calls"][0]["function"]["arguments"]) == {"command": "pwd"}
    assert all(not c.exact for c in traj.calls) and traj.segments == []
    assert traj.metrics["skipped_calls"] == {"0": "not_exact", "1": "not_exact"}
    assert "Finished." in tokenizer.decode(traj.calls[1].output_ids)  # tokens computed locally for SFT
    c0, c1 = traj.calls  # the second prompt is spliced onto the first call's ids, as for token back-ends
    assert c1.prompt_ids[:len(c0.prompt_ids) + len(c0.output_ids)] == c0.prompt_ids + c0.output_ids
    assert len(c1.prompt_ids) > len(c0.prompt_ids) + len(c0.output_ids)


@pytest.mark.slow
async def test_transformers_backend_exact_logprobs_and_batching(smollm2):
    import asyncio

    import torch

    from openforge.proxy.backends.transformers import TransformersBackend

    model, tok = smollm2
    backend = TransformersBackend(model, tok, seed=0)
    async with ProxyServer(backend, sampling={"temperature": 0.8, "max_tokens": 12}) as proxy:
        h = proxy.create_rollout("t")
        async with httpx.AsyncClient(timeout=120) as c:
            async def ask(q):
                r = await c.post(f"{h.openai_base_url}/chat/completions", headers={"x-api-key": h.api_key},
                                 json={"model": "m", "messages": [{"role": "user", "content": q}]})
                assert r.status_code == 200, r.text
                return r.json()
            outs = await asyncio.gather(ask("What is 2+2?"), ask("Name a color."))  # batched together
        traj = proxy.finish_rollout(h.rollout_id, reward=1.0)
    assert all(o["usage"]["completion_tokens"] > 0 for o in outs)
    traj.validate_segments()
    assert backend.batches == [2]  # the two concurrent requests ran as one batch
    for call in traj.calls:
        ids = torch.tensor([call.prompt_ids + call.output_ids])
        with torch.inference_mode():
            logits = model(input_ids=ids).logits[0].float()
        n = len(call.prompt_ids)
        lp = torch.log_softmax(logits[n - 1 : -1] / 0.8, -1)
        want = lp[torch.arange(len(call.output_ids)), torch.tensor(call.output_ids)]
        assert max(abs(a - b) for a, b in zip(want.tolist(), call.output_logprobs)) < 2e-3
        assert all(math.isfinite(x) and x <= 0 for x in call.output_logprobs)
    await backend.swap_weights(model.state_dict())  # takes the generation lock; same weights back in


@pytest.mark.slow
async def test_batched_greedy_equals_serial(smollm2):
    import asyncio

    from openforge.proxy.backends.transformers import TransformersBackend
    from openforge.proxy.render import Renderer

    model, tok = smollm2
    r = Renderer(tok)
    prompts = [r.encode_rendered(r.text([{"role": "user", "content": q}], None)) for q in ("Hi", "Name three colors, please.")]
    p = SamplingParams(temperature=0, max_tokens=8, stop_token_ids=[r.eos_id])
    serial = [await TransformersBackend(model, tok, max_batch=1).generate(x, p) for x in prompts]
    b = TransformersBackend(model, tok, max_batch=8)
    batched = await asyncio.gather(*(b.generate(x, p) for x in prompts))
    assert b.batches == [2]
    for s_, b_ in zip(serial, batched):
        assert s_.output_ids == b_.output_ids and s_.finish_reason == b_.finish_reason
        assert max(abs(x - y) for x, y in zip(s_.logprobs, b_.logprobs)) < 1e-3
