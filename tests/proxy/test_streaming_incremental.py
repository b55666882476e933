"""Incremental streaming over a real socket with the real SDKs: the first delta arrives long before a
slow generation ends, the deltas add up to the final answer, tool-call markup never leaks as text, and
a client that disconnects mid-stream cancels generation and is recorded ``cancelled``."""

from __future__ import annotations

import asyncio
import time

import anthropic
import httpx
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openforge.core.types import CallStatus
from openforge.proxy.backends.scripted import ScriptedBackend
from openforge.proxy.render import HermesParser
from openforge.proxy.server import ProxyServer
from openforge.proxy.stream import DeltaDecoder, safe_split

from .conftest import TOOLS, assert_early

LONG = ("The quick brown fox jumps over the lazy dog while the proxy streams every token as soon as it is "
        "sampled, so the harness sees the answer grow instead of waiting in silence. ")
DELAY = 0.02  # per token: LONG is ~40 tokens, so each generation takes >= ~0.8 s


def _backend(tokenizer, turns, delay=DELAY):
    return ScriptedBackend({"turns": turns}, tokenizer=tokenizer, token_delay_s=delay)


def _early(arrivals: list[float], t0: float, t_end: float, spread: float = 0.4) -> None:
    """The first delta came well before the generation ended, and the deltas were spread out (a
    buffered answer would arrive all at once: spread 0)."""
    assert_early(arrivals, t0, t_end, min_total=0.7, first=0.5, spread=spread)


async def _content_deltas(stream) -> tuple[list[str], list[float]]:
    """The text deltas of a streamed chat completion, and when each arrived."""
    parts, arrivals = [], []
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
            arrivals.append(time.monotonic())
    return parts, arrivals


async def test_openai_chat_streams_tokens_as_generated(tokenizer):
    proxy = ProxyServer(_backend(tokenizer, [{"text": LONG}]))
    async with proxy:
        h = proxy.create_rollout("t")
        c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
        t0 = time.monotonic()
        s = await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}], stream=True)
        parts, arrivals = await _content_deltas(s)
        t_end = time.monotonic()
        traj = proxy.get_trajectory(h.rollout_id)
    _early(arrivals, t0, t_end)
    assert "".join(parts) == traj.calls[0].response["text"] == LONG.strip()
    assert traj.calls[0].status == CallStatus.OK


async def test_openai_responses_streams_tokens_as_generated(tokenizer):
    proxy = ProxyServer(_backend(tokenizer, [{"text": LONG, "reasoning": "think first, then write a long answer"}]))
    async with proxy:
        h = proxy.create_rollout("t")
        c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
        t0 = time.monotonic()
        parts, reasoning, arrivals, kinds = [], [], [], []
        async with c.responses.stream(model="m", input="go") as s:
            async for ev in s:
                kinds.append(ev.type)
                if ev.type == "response.output_text.delta":
                    parts.append(ev.delta)
                    arrivals.append(time.monotonic())
                elif ev.type == "response.reasoning_summary_text.delta":  # streamed before the text: it counts
                    reasoning.append(ev.delta)                            # as the answer arriving early
                    arrivals.append(time.monotonic())
            final = await s.get_final_response()
        t_end = time.monotonic()
    _early(arrivals, t0, t_end)
    assert "".join(parts) == final.output_text == LONG.strip()
    assert "".join(reasoning) == "think first, then write a long answer"
    assert kinds.count("response.reasoning_summary_text.delta") > 1  # reasoning streamed too
    assert [o.type for o in final.output] == ["reasoning", "message"]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"


async def test_anthropic_messages_streams_and_never_leaks_tool_markup(tokenizer):
    proxy = ProxyServer(_backend(tokenizer, [{"text": LONG, "reasoning": "plan the command", "shell": "ls -la"}]))
    async with proxy:
        h = proxy.create_rollout("t")
        c = anthropic.AsyncAnthropic(base_url=h.anthropic_base_url, api_key=h.api_key, max_retries=0)
        t0 = time.monotonic()
        parts, thinking, arrivals = [], [], []
        tools = [{"name": "Bash", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}]
        async with c.messages.stream(model="claude-x", max_tokens=500, tools=tools,
                                     messages=[{"role": "user", "content": "go"}]) as s:
            async for ev in s:
                if ev.type == "content_block_delta" and ev.delta.type == "text_delta":
                    parts.append(ev.delta.text)
                    arrivals.append(time.monotonic())
                elif ev.type == "content_block_delta" and ev.delta.type == "thinking_delta":
                    thinking.append(ev.delta.thinking)
            msg = await s.get_final_message()
        t_end = time.monotonic()
    _early(arrivals, t0, t_end, spread=0.25)  # text is ~55 % of this generation (reasoning + tool call too)
    text = "".join(parts)
    assert text == LONG.strip() and "<tool_call" not in text and "<" not in "".join(thinking)
    assert "".join(thinking) == "plan the command"
    assert [b.type for b in msg.content] == ["thinking", "text", "tool_use"]
    assert msg.content[2].input == {"command": "ls -la"} and msg.stop_reason == "tool_use"


async def test_chat_tool_call_markup_never_leaks(tokenizer):
    proxy = ProxyServer(_backend(tokenizer, [{"text": "Let me look.", "shell": "cat README.md"}], delay=0.005))
    async with proxy:
        h = proxy.create_rollout("t")
        c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
        s = await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}], tools=TOOLS,
                                            stream=True)
        content, args, finish = [], [], None
        async for chunk in s:
            d = chunk.choices[0].delta
            content += [d.content] if d.content else []
            args += [tc.function.arguments for tc in d.tool_calls or [] if tc.function and tc.function.arguments]
            finish = chunk.choices[0].finish_reason or finish
    assert "".join(content) == "Let me look." and finish == "tool_calls"
    assert all("<" not in p and "tool_call" not in p for p in content)
    assert "".join(args) == '{"command": "cat README.md"}'


async def test_disconnect_mid_stream_cancels_generation(tokenizer):
    backend = _backend(tokenizer, [{"text": LONG * 5}])  # ~200 tokens: ~4 s if left to finish
    proxy = ProxyServer(backend)
    async with proxy:
        h = proxy.create_rollout("t")
        t0 = time.monotonic()
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "go"}]}
        async with httpx.AsyncClient(timeout=30) as c, c.stream(
                "POST", f"{h.openai_base_url}/chat/completions", headers={"x-api-key": h.api_key}, json=body) as r:
            assert r.status_code == 200 and r.headers["x-openforge-call"] == "0"
            seen = b""
            async for b in r.aiter_bytes():
                seen += b
                if seen.count(b'"content"') >= 4:  # the role chunk and a few deltas
                    break
        # the connection is closed here, mid-generation
        for _ in range(100):
            calls = proxy.get_trajectory(h.rollout_id).calls
            if calls and backend.cancelled:
                break
            await asyncio.sleep(0.02)
        elapsed = time.monotonic() - t0
    assert backend.cancelled == [(h.rollout_id, 0)]  # the back-end saw the cancel
    assert calls[0].status == CallStatus.CANCELLED
    assert elapsed < 0.6 * 200 * DELAY  # stopped well before the generation would have finished


async def test_retry_replay_of_a_streamed_answer(tokenizer):
    proxy = ProxyServer(_backend(tokenizer, [{"text": "one"}, {"text": "two"}], delay=0.01))
    async with proxy:
        h = proxy.create_rollout("t")
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "go"}]}
        async with httpx.AsyncClient(timeout=30) as c:
            url, hdr = f"{h.openai_base_url}/chat/completions", {"x-api-key": h.api_key}
            first = (await c.post(url, json=body, headers=hdr)).text
            again = (await c.post(url, json=body, headers={**hdr, "x-stainless-retry-count": "1"})).text
        traj = proxy.get_trajectory(h.rollout_id)
    assert '"content":"one"' in first and '"content":"one"' in again and "[DONE]" in again
    assert len(traj.calls) == 1


FRAGMENTS = ["<think>", "</think>", "<tool_call>", "</tool_call>", '\n{"name": "f", "arguments": {"a": 1}}\n',
             " ", "\n", "a", "b c", "<", "</", "<t", "<tool", "think>", "_call>", "{", "}"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=14), st.data())
def test_safe_split_is_a_monotone_prefix_of_the_final_parse(frags, data):
    full = "".join(frags)
    final = HermesParser().parse(full)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(full)), max_size=8)))
    prev = ("", "")
    for k in [*cuts, len(full)]:
        r, t = safe_split(full[:k])
        assert (final.reasoning or "").startswith(r) and final.text.startswith(t), (full[:k], r, t, final)
        assert r.startswith(prev[0]) and t.startswith(prev[1])
        assert not t or not prev[0] or r == (final.reasoning or "")  # text only once reasoning is complete
        prev = (r, t)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([*FRAGMENTS, "héllo", "日本語", "🙂🙂", "  spaced", "x.y", "\t"]), max_size=14),
       st.data())
def test_incremental_decoding_equals_decoding_everything(renderer, frags, data):
    """DeltaDecoder decodes only the new ids each time; fed in any split (multi-byte characters cut
    between feeds included), it settles on exactly what one full decode gives, and its deltas add up
    to the final parse."""
    r = renderer
    ids = [*r.encode("".join(frags)), r.eos_id]
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(ids)), max_size=10))))
    dec = DeltaDecoder(r)
    sent_r = sent_t = ""
    for a, b in zip([0, *cuts], [*cuts, len(ids)]):
        dr, dt = dec.feed(ids[a:b])
        sent_r, sent_t = sent_r + dr, sent_t + dt
    assert dec.decoded == r.decode(ids[:-1])
    final = r.parse(ids)
    assert (final.reasoning or "").startswith(sent_r) and final.text.startswith(sent_t)


@pytest.mark.slow
async def test_real_smollm2_streams_incrementally(smollm2):
    from openforge.proxy.backends.transformers import TransformersBackend

    model, tok = smollm2
    backend = TransformersBackend(model, tok, seed=0)
    async with ProxyServer(backend, sampling={"temperature": 0.7, "max_tokens": 40}) as proxy:
        h = proxy.create_rollout("t")
        c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0, timeout=120)
        t0 = time.monotonic()
        s = await c.chat.completions.create(model="m", stream=True, messages=[
            {"role": "user", "content": "Write three sentences about the sea."}])
        parts, arrivals = await _content_deltas(s)
        t_end = time.monotonic()
        traj = proxy.get_trajectory(h.rollout_id)
    call = traj.calls[0]
    assert "".join(parts) == call.response["text"] and len(parts) > 3
    assert arrivals[0] - t0 < 0.6 * (t_end - t0)
    assert tok.decode(call.output_ids[:-1] if call.output_ids[-1] == tok.eos_token_id else call.output_ids,
                      skip_special_tokens=False).strip() == call.response["text"]


class _FailsMidway(ScriptedBackend):
    """Streams a few tokens, then the back-end breaks (an upstream crash mid-generation)."""

    async def generate(self, prompt_ids, params, ctx=None):
        for t in self._render().encode("Partial answer that never ends")[:4]:
            await asyncio.sleep(0.01)
            ctx.emit([t])
        raise RuntimeError("the model server crashed")


async def test_backend_failure_mid_stream_is_an_error_event_and_recorded(tokenizer):
    async with ProxyServer(_FailsMidway({"turns": []}, tokenizer=tokenizer)) as proxy:
        h = proxy.create_rollout("t")
        oc = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
        s = await oc.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}], stream=True)
        with pytest.raises(openai.APIError, match="crashed"):
            async for _ in s:
                pass
        ac = anthropic.AsyncAnthropic(base_url=h.anthropic_base_url, api_key=h.api_key, max_retries=0)
        with pytest.raises(anthropic.APIStatusError, match="crashed"):
            async with ac.messages.stream(model="c", max_tokens=50, messages=[{"role": "user", "content": "go"}]) as ms:
                async for _ in ms:
                    pass
        async with httpx.AsyncClient(timeout=30) as c:
            r = await c.post(f"{h.openai_base_url}/responses", headers={"x-api-key": h.api_key},
                             json={"model": "m", "stream": True, "input": "go"})
        assert r.status_code == 200 and "event: response.created" in r.text
        last = r.text.strip().split("\n\n")[-1]
        assert last.startswith("event: response.failed") and "crashed" in last
        calls = proxy.get_trajectory(h.rollout_id).calls
    assert [c.status for c in calls] == [CallStatus.ERROR] * 3


@pytest.mark.slow
async def test_real_smollm2_disconnect_stops_the_generation_loop(smollm2):
    from openforge.proxy.backends.transformers import TransformersBackend

    model, tok = smollm2
    backend = TransformersBackend(model, tok, seed=0)
    finishes: list[tuple[str, int]] = []
    finish = backend._finish

    def spy(row, g):  # what the worker-thread loop answered each row with
        finishes.append((g.finish_reason, len(g.output_ids)))
        return finish(row, g)

    backend._finish = spy
    async with ProxyServer(backend, sampling={"temperature": 0.7, "max_tokens": 400}) as proxy:
        h = proxy.create_rollout("t")
        url, hdr = f"{h.openai_base_url}/chat/completions", {"x-api-key": h.api_key}
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "Write a very long story."}]}
        async with httpx.AsyncClient(timeout=120) as c:
            async with c.stream("POST", url, headers=hdr, json=body) as r:
                seen = b""
                async for b in r.aiter_bytes():
                    seen += b
                    if seen.count(b'"content"') >= 4:
                        break
            # the worker thread notices the cancel at its next token: a new request is served at once
            # instead of queueing behind the ~400 tokens the abandoned stream would have generated
            t0 = time.monotonic()
            r2 = await c.post(url, headers=hdr, json={"model": "m", "max_tokens": 2,
                                                      "messages": [{"role": "user", "content": "Hi"}]})
            waited = time.monotonic() - t0
        calls = proxy.get_trajectory(h.rollout_id).calls
    assert r2.status_code == 200
    assert calls[0].status == CallStatus.CANCELLED and calls[1].status == CallStatus.OK
    # the abandoned call keeps what the model had sampled, with the sampler's own logprobs (trainable context)
    assert calls[0].finish_reason == "cancelled" and 1 <= len(calls[0].output_ids) == len(calls[0].output_logprobs)
    assert all(lp <= 0.0 for lp in calls[0].output_logprobs) and calls[0].trainable
    assert calls[0].first_token_s is not None and calls[0].first_token_s <= calls[0].latency_s
    assert finishes[0][0] == "cancelled" and finishes[0][1] < 100, finishes  # the loop saw the cancel Event
    assert waited < 10, waited  # not queued behind the abandoned generation


def test_assert_early_tells_a_buffered_answer_from_a_slow_start():
    """The check itself: deltas that all arrive at the end fail it, however the time splits; deltas that
    stream after a set-up longer than the generation (a loaded machine) pass it."""
    streamed = [1.2 + DELAY * i for i in range(40)]  # 1.2 s of set-up, then 0.8 s of tokens
    _early(streamed, 0.0, streamed[-1] + 0.01)
    for setup in (0.0, 1.2):
        buffered = [setup + 0.8 + 0.001 * i for i in range(40)]  # generated for 0.8 s, sent at once
        with pytest.raises(AssertionError):
            _early(buffered, 0.0, buffered[-1] + 0.01)
