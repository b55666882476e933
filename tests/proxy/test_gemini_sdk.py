"""The Gemini wire over a real socket, driven by the real ``google-genai`` SDK pointed at a rollout's
``gemini_base_url`` (scripted policy): plain, streaming (``alt=sse``), a function-call round trip spliced
into one segment, ``countTokens``, models, auth by header and by ``?key=``, and bad input as 4xx."""

from __future__ import annotations

import httpx
import pytest

from openforge.analysis.view import request_entries
from openforge.core.types import BreakReason
from openforge.proxy.backends.scripted import ScriptedBackend
from openforge.proxy.server import ProxyServer
from openforge.readings.steps import extract_steps

genai = pytest.importorskip("google.genai")
from google.genai import errors, types  # noqa: E402

SCRIPT = {"turns": [{"shell": "echo hi > out.txt"}, {"text": "All done.", "reasoning": "It worked."}]}
SHELL = {"name": "run_shell_command", "description": "Run a shell command.",
         "parameters_json_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                                    "required": ["command"]}}


@pytest.fixture
async def proxy(tokenizer):
    async with ProxyServer(ScriptedBackend(SCRIPT, tokenizer=tokenizer)) as p:
        yield p


@pytest.fixture
async def plain(tokenizer):
    async with ProxyServer(ScriptedBackend({"turns": [], "final": "All done."}, tokenizer=tokenizer)) as p:
        yield p


def _client(h, key=None) -> genai.Client:
    return genai.Client(api_key=key or h.api_key, http_options={"base_url": h.gemini_base_url})


def _config(**kw) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(
        system_instruction="You are gemini-cli.", tools=[types.Tool(function_declarations=[SHELL])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True), **kw)


def _one_segment(traj, n_calls):
    traj.validate_segments()
    assert len(traj.calls) == n_calls and all(c.exact and c.api == "gemini" for c in traj.calls)
    assert len(traj.segments) == 1, [(s.break_reason, s.call_indices) for s in traj.segments]
    assert traj.segments[0].break_reason == BreakReason.FIRST
    assert traj.segments[0].call_indices == list(range(n_calls))


async def test_function_call_round_trip_is_one_exact_segment(proxy):
    h = proxy.create_rollout("t", harness="gemini-test")
    client = _client(h)
    c = client.aio
    contents: list = [types.Content(role="user", parts=[types.Part(text="make out.txt")])]
    r = await c.models.generate_content(model="gemini-2.5-flash", contents=contents, config=_config())
    call = r.function_calls[0]
    assert call.name == "run_shell_command" and call.args == {"command": "echo hi > out.txt"}
    assert r.candidates[0].finish_reason == types.FinishReason.STOP and r.usage_metadata.prompt_token_count > 0
    contents += [r.candidates[0].content,  # the SDK's own function response part: no id, matched by name
                 types.Content(role="user", parts=[types.Part.from_function_response(
                     name="run_shell_command", response={"output": "(no output)"})])]
    r = await c.models.generate_content(model="gemini-2.5-flash", contents=contents, config=_config())
    assert r.text == "All done." and [p.thought for p in r.candidates[0].content.parts] == [True, None]
    assert r.candidates[0].content.parts[0].text == "It worked."
    traj = proxy.finish_rollout(h.rollout_id, reward=1.0)
    _one_segment(traj, 2)
    assert traj.calls[1].has_reasoning and traj.status == "success"
    # token-exact: the first prompt is the template's rendering, the outputs are what the back-end sampled
    first = proxy.renderer.decode(traj.calls[0].prompt_ids)
    assert first.startswith("<|im_start|>system\nYou are gemini-cli.") and "run_shell_command" in first
    assert proxy.renderer.parse(traj.calls[0].output_ids).tool_calls[0].name == "run_shell_command"
    assert traj.calls[1].prompt_ids[:len(traj.calls[0].prompt_ids) + len(traj.calls[0].output_ids)] == \
        traj.calls[0].prompt_ids + traj.calls[0].output_ids
    assert "<tool_response>\n(no output)\n</tool_response>" in proxy.renderer.decode(traj.calls[1].prompt_ids)
    # the readers of recorded calls pair the result without an id with its call, as the proxy did
    steps = extract_steps(traj.calls)
    assert [(s.name, s.command, s.result) for s in steps] == [("run_shell_command", "echo hi > out.txt", "(no output)")]
    assert [(e.role, e.kind) for e in request_entries(traj.calls[1])] == [
        ("system", "text"), ("user", "text"), ("assistant", "tool_call"), ("tool", "tool_result")]


async def test_streaming_chat_session_round_trip_is_one_segment(tokenizer):
    """The SDK's chat session keeps a streamed turn as one content per chunk: it still splices."""
    turns = [{"shell": "ls"}, {"text": "The listing is empty, as expected for a fresh directory.",
                               "reasoning": "Nothing there."}]
    async with ProxyServer(ScriptedBackend({"turns": turns}, tokenizer=tokenizer, token_delay_s=0.005)) as proxy:
        h = proxy.create_rollout("t")
        client = _client(h)  # held: a collected Client closes its HTTP session under the chat
        chat = client.aio.chats.create(model="gemini-x", config=_config())
        chunks = [ch async for ch in await chat.send_message_stream("list the files")]
        calls = [fc for ch in chunks for fc in ch.function_calls or []]
        assert [(fc.name, fc.args) for fc in calls] == [("run_shell_command", {"command": "ls"})]
        reply = types.Part.from_function_response(name="run_shell_command", response={"output": ""})
        chunks = [ch async for ch in await chat.send_message_stream(reply)]
        assert len(chunks) > 3  # streamed as generated, not in one piece
        text = "".join(p.text for ch in chunks for p in ch.candidates[0].content.parts if p.text and not p.thought)
        thought = "".join(p.text for ch in chunks for p in ch.candidates[0].content.parts if p.thought)
        assert text == turns[1]["text"] and thought == "Nothing there."
        assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
        roles = [c.role for c in chat.get_history(curated=True)]  # one content per chunk, all kept
        assert [r for i, r in enumerate(roles) if i == 0 or roles[i - 1] != r] == ["user", "model", "user", "model"]
        assert len(roles) > 4
        traj = proxy.finish_rollout(h.rollout_id, reward=1.0)
    _one_segment(traj, 2)


async def test_plain_stream_and_count_tokens(plain):
    proxy = plain
    h = proxy.create_rollout("t")
    client = _client(h)
    c = client.aio
    n = (await c.models.count_tokens(model="gemini-x", contents="hello there")).total_tokens
    r = await c.models.generate_content(model="gemini-x", contents="hello there")
    assert r.function_calls is None and r.text and r.model_version == "gemini-x"
    calls = proxy.get_trajectory(h.rollout_id).calls
    assert n == len(calls[0].prompt_ids) == r.usage_metadata.prompt_token_count
    chunks = [ch async for ch in await c.models.generate_content_stream(model="gemini-x", contents="and again")]
    assert chunks and chunks[-1].usage_metadata.candidates_token_count == len(
        proxy.get_trajectory(h.rollout_id).calls[1].output_ids)
    m = await c.models.get(model="gemini-x")
    assert m.name == "models/gemini-x" and "generateContent" in m.supported_actions
    # the body says nothing of streaming on this wire (the path does): the record says it
    calls = proxy.get_trajectory(h.rollout_id).calls
    assert [c.streamed for c in calls] == [False, True] and "stream" not in calls[1].request
    assert [c.was_streamed() for c in calls] == [False, True]
    from openforge.harnesses.conformance import _rows  # what `forge harness check` reports
    rows = {r.check: r for r in _rows(proxy.get_trajectory(h.rollout_id), "gemini")}
    assert rows["streaming"].detail == "1/2 calls streamed"


async def test_bad_input_is_a_4xx_in_the_gemini_shape(proxy):
    h = proxy.create_rollout("t")
    client = _client(h)
    c = client.aio
    with pytest.raises(errors.ClientError) as e:  # a field the proxy cannot serve
        await c.models.generate_content(model="m", contents="hi", config=types.GenerateContentConfig(candidate_count=3))
    assert e.value.code == 400 and e.value.status == "INVALID_ARGUMENT" and "candidateCount" in e.value.message
    with pytest.raises(errors.ClientError) as e:  # a function call in a user turn
        await c.models.generate_content(model="m", contents=[types.Content(role="user", parts=[
            types.Part(function_call=types.FunctionCall(name="f", args={}))])])
    assert e.value.code == 400 and "contents[0].parts[0].functionCall" in e.value.message
    with pytest.raises(errors.ClientError) as e:  # a built-in tool
        await c.models.generate_content(model="m", contents="hi", config=types.GenerateContentConfig(
            tools=[types.Tool(google_search=types.GoogleSearch())]))
    assert e.value.code == 400 and "googleSearch" in e.value.message
    other = _client(h, key=proxy.create_rollout("u").api_key)
    with pytest.raises(errors.ClientError) as e:  # another rollout's key
        await other.aio.models.generate_content(model="m", contents="hi")
    assert e.value.code == 403 and e.value.status == "PERMISSION_DENIED"
    assert proxy.get_trajectory(h.rollout_id).calls == []


async def test_key_in_the_query_and_the_json_array_stream(plain):
    """``?key=`` authenticates; ``:streamGenerateContent`` without ``alt=sse`` is one JSON array."""
    proxy = plain
    h = proxy.create_rollout("t")
    url = f"{h.gemini_base_url}/v1beta/models/gemini-x:streamGenerateContent"
    body = {"contents": [{"parts": [{"text": "hi"}]}]}
    async with httpx.AsyncClient() as c:
        assert (await c.post(url, json=body)).json()["error"]["status"] == "UNAUTHENTICATED"
        r = await c.post(url, params={"key": h.api_key}, json=body)
        bad = await c.post(url, params={"key": h.api_key, "alt": "proto"}, json=body)
        model = await c.post(f"{h.gemini_base_url}/v1beta/models/gemini-x:embedContent", params={"key": h.api_key},
                             json=body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    chunks = r.json()
    assert isinstance(chunks, list) and chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert "".join(p["text"] for ch in chunks for p in ch["candidates"][0]["content"]["parts"]) == "All done."
    assert bad.status_code == 400 and bad.json()["error"]["details"][0]["fieldViolations"][0]["field"] == "alt"
    assert model.status_code == 404 and "generateContent" in model.json()["error"]["message"]
