"""The proxy over a real socket, driven by the real ``openai`` and ``anthropic`` SDKs (scripted policy)."""

from __future__ import annotations

import json

import pytest

from openforge.core.types import BreakReason
from openforge.proxy.backends.scripted import ScriptedBackend
from openforge.proxy.server import ProxyServer

from .conftest import TOOLS

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

SCRIPT = {"turns": [{"shell": "echo hi > out.txt"}, {"text": "All done.", "reasoning": "It worked."}]}
RESP_TOOLS = [{"type": "function", "name": "exec_command", "description": "run",
               "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]
ANT_TOOLS = [{"name": "Bash", "description": "run", "input_schema": {"type": "object",
                                                                      "properties": {"command": {"type": "string"}}}}]


@pytest.fixture
async def proxy(tokenizer):
    async with ProxyServer(ScriptedBackend(SCRIPT, tokenizer=tokenizer)) as p:
        yield p


def _one_segment(traj, n_calls):
    traj.validate_segments()
    assert len(traj.calls) == n_calls and all(c.exact for c in traj.calls)
    assert len(traj.segments) == 1, [(s.break_reason, s.call_indices) for s in traj.segments]
    assert traj.segments[0].break_reason == BreakReason.FIRST
    assert traj.segments[0].call_indices == list(range(n_calls))


@pytest.mark.parametrize("stream", [False, True])
async def test_openai_chat_tool_round_trip(proxy, stream):
    h = proxy.create_rollout("t", harness="test")
    c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "do it"}]

    async def ask():
        if not stream:
            r = await c.chat.completions.create(model="any-model", messages=msgs, tools=TOOLS)
            return r.choices[0].message.model_dump(exclude_none=True), r.choices[0].finish_reason
        s = await c.chat.completions.create(model="any-model", messages=msgs, tools=TOOLS, stream=True,
                                            stream_options={"include_usage": True})
        text, calls, finish, usage = "", {}, None, None
        async for ch in s:
            usage = ch.usage or usage
            for choice in ch.choices:
                d = choice.delta
                text += d.content or ""
                for tc in d.tool_calls or []:
                    cur = calls.setdefault(tc.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
                    cur["id"] = tc.id or cur["id"]
                    cur["function"]["name"] += (tc.function.name or "") if tc.function else ""
                    cur["function"]["arguments"] += (tc.function.arguments or "") if tc.function else ""
                finish = choice.finish_reason or finish
        assert usage is not None and usage.total_tokens > 0
        msg = {"role": "assistant", "content": text}
        if calls:
            msg["tool_calls"] = list(calls.values())
        return msg, finish

    msg, finish = await ask()
    assert finish == "tool_calls"
    call = msg["tool_calls"][0]
    assert call["function"]["name"] == "bash" and json.loads(call["function"]["arguments"]) == {"command": "echo hi > out.txt"}
    msgs += [msg, {"role": "tool", "tool_call_id": call["id"], "content": "(no output)"}]
    msg, finish = await ask()
    assert finish == "stop" and msg["content"] == "All done."
    traj = proxy.finish_rollout(h.rollout_id, reward=1.0)
    _one_segment(traj, 2)
    assert traj.status == "success" and traj.calls[1].has_reasoning


@pytest.mark.parametrize("stream", [False, True])
async def test_openai_responses_tool_round_trip(proxy, stream):
    h = proxy.create_rollout("t")
    c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
    items = [{"role": "developer", "content": "You are codex."}, {"role": "user", "content": "make out.txt"}]

    async def ask():
        if not stream:
            return (await c.responses.create(model="gpt-x", input=items, tools=RESP_TOOLS, store=False)).output
        events = []
        async with c.responses.stream(model="gpt-x", input=items, tools=RESP_TOOLS, store=False) as s:
            async for ev in s:
                events.append(ev.type)
            final = await s.get_final_response()
        assert events[:2] == ["response.created", "response.in_progress"] and events[-1] == "response.completed"
        assert "response.output_item.added" in events and "response.output_item.done" in events
        return final.output

    out = await ask()
    fc = next(o for o in out if o.type == "function_call")
    assert fc.name == "exec_command" and json.loads(fc.arguments) == {"cmd": "echo hi > out.txt"}
    items += [fc.model_dump(exclude_none=True), {"type": "function_call_output", "call_id": fc.call_id, "output": "ok"}]
    out = await ask()
    kinds = [o.type for o in out]
    assert kinds == ["reasoning", "message"]
    assert out[1].content[0].text == "All done."
    _one_segment(proxy.finish_rollout(h.rollout_id, reward=0.0), 2)


@pytest.mark.parametrize("stream", [False, True])
async def test_anthropic_messages_tool_round_trip(proxy, stream):
    h = proxy.create_rollout("t")
    c = anthropic.AsyncAnthropic(base_url=h.anthropic_base_url, api_key=h.api_key, max_retries=0)
    system = [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1; cch=abc;"},
              {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}]
    msgs = [{"role": "user", "content": "make out.txt"}]

    async def ask():
        kw = dict(model="claude-x", max_tokens=32000 if stream else 4096, system=system, messages=msgs, tools=ANT_TOOLS)
        if not stream:
            return await c.messages.create(**kw)
        async with c.messages.stream(**kw) as s:
            return await s.get_final_message()

    m = await ask()
    assert m.stop_reason == "tool_use"
    tu = next(b for b in m.content if b.type == "tool_use")
    assert tu.name == "Bash" and tu.input == {"command": "echo hi > out.txt"}
    msgs += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tu.id, "content": "(Bash completed with no output)",
                                           "cache_control": {"type": "ephemeral"}}]}]
    system[0]["text"] = "x-anthropic-billing-header: cc_version=2.1; cch=def;"  # changes every request
    m = await ask()
    assert m.stop_reason == "end_turn" and [b.type for b in m.content] == ["thinking", "text"]
    assert m.content[1].text == "All done."
    traj = proxy.finish_rollout(h.rollout_id, reward=1.0)
    _one_segment(traj, 2)
    assert "billing" not in proxy.renderer.decode(traj.calls[0].prompt_ids)


async def test_auth_is_per_rollout(proxy):
    a, b = proxy.create_rollout("t"), proxy.create_rollout("t")
    c = openai.AsyncOpenAI(base_url=a.openai_base_url, api_key=b.api_key, max_retries=0)
    with pytest.raises(openai.PermissionDeniedError):
        await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    c = anthropic.AsyncAnthropic(base_url=a.anthropic_base_url + "x", api_key=a.api_key, max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        await c.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert proxy.get_trajectory(a.rollout_id).calls == []
