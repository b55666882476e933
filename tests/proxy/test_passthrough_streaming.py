"""The ``openai:`` pass-through streams: with a streaming harness the upstream is asked to stream and
its reasoning/text deltas reach the harness as they arrive (real SDKs, real sockets, an upstream that
takes time per token); tool calls are assembled and sent at the end; the recorded call holds the
whole answer; upstream failures before and during the stream surface as the right errors; a client
that leaves mid-stream cancels the upstream request."""

from __future__ import annotations

import asyncio
import json
import time

import anthropic
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from openforge.core.types import CallStatus
from openforge.proxy.backends import parse_backend_spec
from openforge.proxy.server import ProxyServer

from .conftest import TOOLS, assert_early, serve_app

WORDS = [f"word{i} " for i in range(12)]
DELAY = 0.08  # per upstream chunk: the whole answer takes ~1 s


class Upstream:
    """A fake OpenAI-compatible teacher that streams slowly; ``mode`` picks the answer."""

    def __init__(self) -> None:
        self.mode = "text"
        self.seen: list[dict] = []
        self.cancelled = asyncio.Event()
        self.sent_at: list[float] = []

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])

    async def chat(self, request: Request):
        body = await request.json()
        self.seen.append(body)
        if self.mode == "http500":
            return JSONResponse({"error": {"message": "upstream overloaded", "type": "server_error"}}, status_code=500)
        if not body.get("stream"):
            return JSONResponse({"id": "c", "object": "chat.completion", "created": 0, "model": "t",
                                 "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": "".join(WORDS)}}]})
        return StreamingResponse(self.events(), media_type="text/event-stream")

    async def events(self):
        base = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "t"}

        def ev(delta, finish=None, **extra):
            return f"data: {json.dumps({**base, 'choices': [{'index': 0, 'delta': delta, 'finish_reason': finish}], **extra})}\n\n"

        try:
            yield ev({"role": "assistant", "content": ""})
            if self.mode == "reasoning":
                for part in ("Let me ", "think."):
                    await asyncio.sleep(DELAY)
                    yield ev({"reasoning_content": part})
            for i, w in enumerate(WORDS):
                await asyncio.sleep(DELAY)
                if self.mode == "break" and i == 3:
                    raise RuntimeError("upstream died mid-stream")
                if self.mode == "cut" and i == 3:
                    return  # the body ends cleanly, but without finish_reason or [DONE]
                self.sent_at.append(time.monotonic())
                yield ev({"content": w})
            if self.mode == "tool":
                yield ev({"tool_calls": [{"index": 0, "id": "call_up", "type": "function",
                                          "function": {"name": "bash", "arguments": ""}}]})
                for part in ('{"command"', ': "ls"}'):
                    await asyncio.sleep(DELAY)
                    yield ev({"tool_calls": [{"index": 0, "function": {"arguments": part}}]})
                yield ev({}, "tool_calls")
            else:
                yield ev({}, "stop")
            yield f"data: {json.dumps({**base, 'choices': [], 'usage': {'prompt_tokens': 21, 'completion_tokens': 12}})}\n\n"
            yield "data: [DONE]\n\n"
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


@pytest.fixture
async def teacher(tokenizer):
    up = Upstream()
    async with serve_app(up.app()) as url:
        backend = parse_backend_spec(f"openai:{url}/v1", tokenizer=tokenizer, model="teacher")
        async with ProxyServer(backend) as proxy:
            yield up, proxy
        await backend.aclose()


def _early(arrivals: list[float], t0: float, t_end: float) -> None:
    assert_early(arrivals, t0, t_end, min_total=0.8, first=0.4, spread=0.5, min_count=6)


async def test_chat_stream_relays_deltas_as_they_arrive(teacher):
    up, proxy = teacher
    up.mode = "reasoning"
    h = proxy.create_rollout("t")
    c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
    t0 = time.monotonic()
    s = await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}], stream=True,
                                        stream_options={"include_usage": True})
    parts, reasoning, arrivals, usage = [], [], [], None
    async for chunk in s:
        if chunk.usage:
            usage = chunk.usage
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
            arrivals.append(time.monotonic())
        if chunk.choices and getattr(chunk.choices[0].delta, "reasoning_content", None):
            reasoning.append(chunk.choices[0].delta.reasoning_content)
    _early(arrivals, t0, time.monotonic())
    assert "".join(parts) == "".join(WORDS) and "".join(reasoning) == "Let me think."
    assert usage.prompt_tokens == 21 and usage.completion_tokens == 12  # the upstream's own counts
    assert up.seen[0]["stream"] is True and up.seen[0]["stream_options"] == {"include_usage": True}
    call = proxy.get_trajectory(h.rollout_id).calls[0]
    assert call.status == CallStatus.OK and not call.exact and call.response["text"] == "".join(WORDS)
    assert call.response["reasoning"] == "Let me think." and call.prompt_ids and call.output_ids


async def test_anthropic_and_responses_streams_with_tool_call(teacher):
    up, proxy = teacher
    up.mode = "tool"
    h = proxy.create_rollout("t")
    a = anthropic.AsyncAnthropic(base_url=h.anthropic_base_url, api_key=h.api_key, max_retries=0)
    tools = [{"name": "bash", "description": "run", "input_schema": {"type": "object",
                                                                      "properties": {"command": {"type": "string"}}}}]
    t0, arrivals, texts = time.monotonic(), [], []
    async with a.messages.stream(model="claude", max_tokens=200, tools=tools,
                                 messages=[{"role": "user", "content": "list"}]) as s:
        async for ev in s:
            if ev.type == "text":
                texts.append(ev.text)
                arrivals.append(time.monotonic())
        final = await s.get_final_message()
    _early(arrivals, t0, time.monotonic())
    assert "".join(texts) == final.content[0].text
    assert final.content[-1].type == "tool_use" and final.content[-1].input == {"command": "ls"}
    assert final.stop_reason == "tool_use"

    o = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
    deltas, done = [], None
    async with o.responses.stream(model="m", input="list", tools=[
            {"type": "function", "name": "bash", "parameters": TOOLS[0]["function"]["parameters"]}]) as s:
        async for ev in s:
            if ev.type == "response.output_text.delta":
                deltas.append(ev.delta)
        done = await s.get_final_response()
    calls = [it for it in done.output if it.type == "function_call"]
    assert len(deltas) >= 6 and calls[0].name == "bash" and json.loads(calls[0].arguments) == {"command": "ls"}
    traj = proxy.finish_rollout(h.rollout_id, reward=1.0)
    assert [c.status for c in traj.calls] == [CallStatus.OK, CallStatus.OK]
    assert traj.calls[0].response["tool_calls"][0]["name"] == "bash"


async def test_upstream_http_error_before_the_stream_is_a_retryable_status(teacher):
    up, proxy = teacher
    up.mode = "http500"
    h = proxy.create_rollout("t")
    c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
    with pytest.raises(openai.InternalServerError, match="upstream overloaded"):
        await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}], stream=True)
    assert proxy.get_trajectory(h.rollout_id).calls[0].status == CallStatus.ERROR


@pytest.mark.parametrize("mode", ["break", "cut"])
async def test_upstream_dying_mid_stream_is_an_error_event_and_recorded(teacher, mode):
    """A connection that breaks, or a stream that just stops before its end, is a back-end failure
    (never a short answer recorded as complete)."""
    up, proxy = teacher
    up.mode = mode
    h = proxy.create_rollout("t")
    c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
    got = []
    with pytest.raises(openai.APIError):
        s = await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}], stream=True)
        async for chunk in s:
            if chunk.choices and chunk.choices[0].delta.content:
                got.append(chunk.choices[0].delta.content)
    assert "".join(got) == "".join(WORDS[:3])  # what came before the failure was relayed
    traj = proxy.finish_rollout(h.rollout_id)
    assert traj.calls[0].status == CallStatus.ERROR and traj.status.value == "infra_error"


async def test_client_leaving_mid_stream_cancels_the_upstream_request(teacher):
    up, proxy = teacher
    h = proxy.create_rollout("t")
    c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
    s = await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}], stream=True)
    n = 0
    async for chunk in s:
        if chunk.choices and chunk.choices[0].delta.content:
            n += 1
            if n == 2:
                break
    await s.close()
    await asyncio.wait_for(up.cancelled.wait(), 5)  # the proxy hung up on the upstream
    for _ in range(100):
        calls = proxy.get_trajectory(h.rollout_id).calls
        if calls:
            break
        await asyncio.sleep(0.05)
    assert calls[0].status == CallStatus.CANCELLED
    assert len(up.sent_at) < len(WORDS)


async def test_long_conversation_is_tokenized_off_the_event_loop(teacher):
    """A conversation above the in-thread threshold is rendered and tokenized in a worker thread; the
    recorded ids are the same as rendering it inline."""
    from openforge.proxy.engine import RENDER_IN_THREAD_CHARS

    _up, proxy = teacher
    h = proxy.create_rollout("t")
    c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
    big = "lorem ipsum " * (RENDER_IN_THREAD_CHARS // 10)
    r = await c.chat.completions.create(model="m", messages=[{"role": "user", "content": big}])
    assert r.choices[0].message.content == "".join(WORDS)
    call = proxy.get_trajectory(h.rollout_id).calls[0]
    rr = proxy.engine.renderer
    assert call.prompt_ids == rr.encode_rendered(rr.text([{"role": "user", "content": big}], []))


async def test_multi_turn_passthrough_tokenizes_only_the_new_messages(teacher):
    """History splicing for pass-through calls: the second call encodes its new messages only, and its
    prompt ids continue the first call's prompt + output ids."""
    _up, proxy = teacher
    h = proxy.create_rollout("t")
    c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
    r = proxy.engine.renderer
    encoded: list[str] = []
    real = r.encode
    r.encode = lambda text: (encoded.append(text), real(text))[1]
    try:
        msgs = [{"role": "user", "content": "long question " * 400}]
        first = await c.chat.completions.create(model="m", messages=msgs)
        msgs += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "and then?"}]
        encoded.clear()
        await c.chat.completions.create(model="m", messages=msgs)
    finally:
        del r.encode
    c0, c1 = proxy.get_trajectory(h.rollout_id).calls
    assert c1.prompt_ids[:len(c0.prompt_ids) + len(c0.output_ids)] == c0.prompt_ids + c0.output_ids
    assert c1.prompt_ids == real(r.text(msgs, []))  # the same ids a full render gives
    assert max(len(t) for t in encoded) < 200  # the 5600-character first message was not encoded again
