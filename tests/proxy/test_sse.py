"""Exact SSE event sequences per API (what the harness notes say each client needs), and how a
harness that drops our reasoning is classified."""

from __future__ import annotations

import json

import httpx

from openforge.core.types import BreakReason
from openforge.proxy.backends.scripted import ScriptedBackend
from openforge.proxy.server import ProxyServer

from .conftest import TOOLS


def events(text: str) -> list[tuple[str | None, dict | str]]:
    out = []
    for block in text.strip().split("\n\n"):
        ev, data = None, None
        for line in block.split("\n"):
            if line.startswith("event: "):
                ev = line[7:]
            elif line.startswith("data: "):
                data = line[6:] if line[6:] == "[DONE]" else json.loads(line[6:])
        out.append((ev, data))
    return out


def collapse(evs: list) -> list:
    """Event names with runs of the same delta merged (live streaming may split one delta in several)."""
    out: list = []
    last = None
    for e, d in evs:
        key = (e, d.get("delta", {}).get("type") if isinstance(d, dict) and isinstance(d.get("delta"), dict) else None)
        if not (key == last and e.endswith("delta") and e != "message_delta"):
            out.append(e)
        last = key
    return out


async def _post(proxy, h, route, body):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy.app), base_url="http://p") as c:
        r = await c.post(f"/r/{h.rollout_id}/v1/{route}", json=body, headers={"x-api-key": h.api_key})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    return events(r.text)


async def test_chat_chunk_sequence(tokenizer):
    proxy = ProxyServer(ScriptedBackend({"turns": [{"shell": "ls", "text": "Listing."}]}, tokenizer=tokenizer))
    h = proxy.create_rollout("t")
    evs = await _post(proxy, h, "chat/completions", {"model": "m", "stream": True, "tools": TOOLS,
                      "stream_options": {"include_usage": True}, "messages": [{"role": "user", "content": "x"}]})
    assert all(e is None for e, _ in evs)  # data-only frames
    datas = [d for _, d in evs]
    assert datas[-1] == "[DONE]"
    assert datas[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = [d for d in datas[1:-1] if set(d["choices"][0]["delta"] if d["choices"] else ()) == {"content"}]
    assert "".join(d["choices"][0]["delta"]["content"] for d in text) == "Listing."  # maybe in several deltas
    datas = [datas[0], text[0], *datas[1 + len(text):]]
    assert datas[2]["choices"][0]["delta"]["tool_calls"][0]["function"] == {"name": "bash", "arguments": ""}
    assert json.loads(datas[3]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]) == {"command": "ls"}
    assert datas[4]["choices"][0]["finish_reason"] == "tool_calls"
    assert datas[5]["choices"] == [] and datas[5]["usage"]["completion_tokens"] > 0
    assert len({d["id"] for d in datas[:-1]}) == 1


async def test_messages_event_sequence(tokenizer):
    proxy = ProxyServer(ScriptedBackend({"turns": [{"shell": "ls", "text": "Listing.", "reasoning": "plan"}]},
                                        tokenizer=tokenizer))
    h = proxy.create_rollout("t")
    evs = await _post(proxy, h, "messages", {"model": "m", "max_tokens": 99, "stream": True, "messages": [
        {"role": "user", "content": "x"}], "tools": [{"name": "Bash", "input_schema": {"type": "object", "properties": {
            "command": {"type": "string"}}}}]})
    names = collapse(evs)
    assert names == ["message_start", "ping",
                     "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
                     "content_block_start", "content_block_delta", "content_block_stop",
                     "content_block_start", "content_block_delta", "content_block_stop",
                     "message_delta", "message_stop"]
    assert all(d["type"] == e for e, d in evs)
    assert [d["content_block"]["type"] for e, d in evs if e == "content_block_start"] == ["thinking", "text", "tool_use"]
    tool_delta = next(d for e, d in evs if e == "content_block_delta" and d["index"] == 2)["delta"]
    assert tool_delta["type"] == "input_json_delta" and json.loads(tool_delta["partial_json"]) == {"command": "ls"}
    assert evs[-2][1]["delta"]["stop_reason"] == "tool_use"


async def test_responses_event_sequence(tokenizer):
    proxy = ProxyServer(ScriptedBackend({"turns": [{"shell": "ls", "text": "Listing."}]}, tokenizer=tokenizer))
    h = proxy.create_rollout("t")
    evs = await _post(proxy, h, "responses", {"model": "m", "stream": True, "input": "x", "tools": [
        {"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]})
    names = collapse(evs)
    assert names == ["response.created", "response.in_progress",
                     "response.output_item.added", "response.content_part.added", "response.output_text.delta",
                     "response.output_text.done", "response.content_part.done", "response.output_item.done",
                     "response.output_item.added", "response.function_call_arguments.delta",
                     "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert [d["sequence_number"] for _, d in evs] == list(range(len(evs)))
    done = evs[-1][1]["response"]
    assert done["status"] == "completed" and [o["type"] for o in done["output"]] == ["message", "function_call"]
    assert json.loads(done["output"][1]["arguments"]) == {"cmd": "ls"}


async def test_dropped_reasoning_is_not_spliced(tokenizer):
    proxy = ProxyServer(ScriptedBackend({"turns": [{"text": "A", "reasoning": "secret plan"}, {"text": "B"}]},
                                        tokenizer=tokenizer))
    h = proxy.create_rollout("t")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy.app), base_url="http://p") as c:
        url, hdr = f"/r/{h.rollout_id}/v1/chat/completions", {"x-api-key": h.api_key}
        msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "1"}]
        m = (await c.post(url, json={"model": "m", "messages": msgs}, headers=hdr)).json()["choices"][0]["message"]
        assert m["reasoning_content"] == "secret plan"
        msgs += [{"role": "assistant", "content": m["content"]}, {"role": "user", "content": "2"}]  # reasoning dropped
        await c.post(url, json={"model": "m", "messages": msgs}, headers=hdr)
    traj = proxy.finish_rollout(h.rollout_id, reward=1.0)
    assert [s.break_reason for s in traj.segments] == [BreakReason.FIRST, BreakReason.THINKING_STRIPPED]
