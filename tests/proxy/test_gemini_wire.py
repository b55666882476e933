"""The Gemini wire in detail: how ``contents`` become the canonical conversation, malformed bodies as
400s naming the field in Gemini's error shape, bounds, the registration's ``gemini_base_url``, the
sandbox socket, a context overflow and a back-end failure mid-stream in the API's own terms."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from openforge.core.errors import ProxyError
from openforge.core.types import CallStatus
from openforge.proxy.backends.scripted import ScriptedBackend
from openforge.proxy.server import AgentOnly, ProxyServer
from openforge.proxy.wire_gemini import GeminiAdapter

from .test_context_limit import BIG, Small
from .test_streaming_incremental import _FailsMidway

GEN = "v1beta/models/gemini-x:generateContent"
STREAM = "v1beta/models/gemini-x:streamGenerateContent"
HI = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


def _parse(body: dict) -> list[dict]:
    return GeminiAdapter("m").parse(body).messages


def test_contents_become_the_canonical_conversation():
    body = {
        "system_instruction": {"parts": [{"text": "be brief"}, {"text": "use tools"}]},
        "contents": [
            {"role": "user", "parts": [{"text": "look at"}, {"inline_data": {"mime_type": "image/png", "data": "AA"}}]},
            {"role": "model", "parts": [{"text": "Let me ", "thought": True}, {"text": "see.", "thought": True}]},
            {"role": "model", "parts": [{"text": "Two"}, {"text": " calls."}]},  # a streamed turn: one content a chunk
            {"role": "model", "parts": [{"functionCall": {"name": "sh", "args": {"cmd": "ls"}}},
                                        {"function_call": {"name": "sh", "args": {"cmd": "pwd"}, "id": "c9"},
                                         "thought_signature": "c2ln"}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "sh", "id": "c9", "response": {"output": "/w"}}},
                                       {"functionResponse": {"name": "sh", "response": {"error": "no such dir"}}}]},
            {"role": "function", "parts": [{"functionResponse": {"name": "other", "response": {"a": [1]}}}]},
            {"parts": [{"text": "go on"}, {"file_data": {"file_uri": "gs://x", "mime_type": "application/pdf"}}]},
        ]}
    msgs = _parse(body)
    call_id = msgs[2]["tool_calls"][0]["id"]
    assert msgs == [
        {"role": "system", "content": "be brief\n\nuse tools"},
        {"role": "user", "content": "look at\n[image]"},
        {"role": "assistant", "content": "Two calls.", "reasoning_content": "Let me see.", "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "sh", "arguments": {"cmd": "ls"}}},
            {"id": "c9", "type": "function", "function": {"name": "sh", "arguments": {"cmd": "pwd"}}}]},
        {"role": "tool", "content": "/w", "tool_call_id": "c9"},
        {"role": "tool", "content": "Error: no such dir", "tool_call_id": call_id},  # no id: the open call of that name
        {"role": "tool", "content": '{"a": [1]}', "tool_call_id": ""},
        {"role": "user", "content": "go on\n[file]"},
    ]
    assert call_id and call_id != "c9"


def test_declarations_and_tool_config():
    decl = {"name": "sh", "description": "run", "parameters": {
        "type": "OBJECT", "properties": {"cmd": {"type": "STRING"}, "args": {"type": "ARRAY", "items": {"type": "STRING"}},
                                         "TYPE": {"anyOf": [{"type": "INTEGER"}, {"type": "NULL"}]}},
        "required": ["cmd"]}}
    other = {"name": "ask", "parametersJsonSchema": {"type": "object", "properties": {"q": {"type": "string"}}}}
    req = GeminiAdapter("m").parse({**HI, "tools": [{"functionDeclarations": [decl, other]}]})
    assert req.tools[0]["function"] == {"name": "sh", "description": "run", "parameters": {
        "type": "object", "properties": {"cmd": {"type": "string"}, "args": {"type": "array", "items": {"type": "string"}},
                                         "TYPE": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
        "required": ["cmd"]}}
    assert req.tools[1]["function"]["parameters"] == other["parametersJsonSchema"] and req.tool_choice is None

    def choice(cfg):
        r = GeminiAdapter("m").parse({**HI, "tools": [{"functionDeclarations": [decl, other]}],
                                      "toolConfig": {"functionCallingConfig": cfg}})
        return [t["function"]["name"] for t in r.tools], r.tool_choice

    assert choice({"mode": "NONE"}) == ([], None)
    assert choice({"mode": "ANY"}) == (["sh", "ask"], {"type": "any"})
    assert choice({"mode": "ANY", "allowedFunctionNames": ["ask"]}) == (["ask"], {"type": "tool", "name": "ask"})
    assert choice({"mode": "auto"}) == (["sh", "ask"], None)


BAD = [
    ({"contents": []}, "contents"),
    ({"contents": "hi"}, "contents"),
    ({"contents": [{"role": "bot", "parts": [{"text": "x"}]}]}, "contents[0].role"),
    ({"contents": [{"parts": [{}]}]}, "contents[0].parts[0]"),
    ({"contents": [{"parts": [{"text": "a", "functionCall": {"name": "f"}}]}]}, "contents[0].parts[0]"),
    ({"contents": [{"parts": [{"text": 5}]}]}, "contents[0].parts[0].text"),
    ({"contents": [{"parts": "hi"}]}, "contents[0].parts"),
    ({"contents": [{"role": "model", "parts": [{"functionCall": {"name": ""}}]}]}, "contents[0].parts[0].functionCall.name"),
    ({"contents": [{"role": "model", "parts": [{"functionCall": {"name": "f", "args": [1]}}]}]},
     "contents[0].parts[0].functionCall.args"),
    ({"contents": [{"parts": [{"functionResponse": {"name": "f", "response": "ok"}}]}]},
     "contents[0].parts[0].functionResponse.response"),
    ({"contents": [{"parts": [{"executableCode": {"code": "1"}}]}]}, "contents[0].parts[0].executableCode"),
    ({**HI, "systemInstruction": {"parts": [{"inlineData": {}}]}}, "systemInstruction.parts[0].text"),
    ({**HI, "tools": [{"codeExecution": {}}]}, "tools[0].codeExecution"),
    ({**HI, "tools": [{"functionDeclarations": [{"description": "x"}]}]}, "tools[0].functionDeclarations[0].name"),
    ({**HI, "tools": [{"functionDeclarations": [{"name": "f", "parameters": {"type": 3}}]}]},
     "tools[0].functionDeclarations[0].parameters.type"),
    ({**HI, "toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}}}, "toolConfig.functionCallingConfig.mode"),
    ({**HI, "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f"]}}},
     "toolConfig.functionCallingConfig.allowedFunctionNames"),
    ({**HI, "generationConfig": {"maxOutputTokens": 0}}, "generationConfig.maxOutputTokens"),
    ({**HI, "generationConfig": {"temperature": "hot"}}, "generationConfig.temperature"),
    ({**HI, "generationConfig": {"stopSequences": ["a"] * 6}}, "generationConfig.stopSequences"),
    ({**HI, "generationConfig": "fast"}, "generationConfig"),
    ({**HI, "cachedContent": "cachedContents/1"}, "cachedContent"),
]


@pytest.fixture
async def proxy(tokenizer):
    p = ProxyServer(ScriptedBackend({"turns": [], "final": "ok"}, tokenizer=tokenizer), admin_token="adm",
                    max_body_bytes=64 * 1024)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=p.app), base_url="http://proxy") as c:
        yield p, c


@pytest.fixture(scope="module")
def shared(tokenizer):
    """One proxy (not listening: driven in-process) for the many small refusal cases."""
    return ProxyServer(ScriptedBackend({"turns": [], "final": "ok"}, tokenizer=tokenizer), token_workers=0)


@pytest.mark.parametrize("body,field", BAD, ids=[f for _, f in BAD])
async def test_malformed_bodies_are_400s_naming_the_field(shared, body, field):
    p = shared
    h = p.create_rollout("t")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=p.app), base_url="http://proxy") as c:
        r = await c.post(f"/r/{h.rollout_id}/{GEN}", json=body, headers={"x-goog-api-key": h.api_key})
    err = r.json()["error"]
    assert r.status_code == 400 and err["code"] == 400 and err["status"] == "INVALID_ARGUMENT", r.text
    assert err["details"][0]["fieldViolations"][0]["field"] == field, r.text
    assert p.get_trajectory(h.rollout_id).calls == []


async def test_bounds_and_errors_outside_the_body_in_gemini_shape(proxy):
    p, c = proxy
    h = p.create_rollout("t")
    key = {"x-goog-api-key": h.api_key}
    big = {"contents": [{"parts": [{"text": "x" * (70 * 1024)}]}]}
    deep: object = "x"
    for _ in range(70):
        deep = {"a": deep}
    cases = [
        (await c.post(f"/r/{h.rollout_id}/{GEN}", json=big, headers=key), 413),
        (await c.post(f"/r/{h.rollout_id}/{GEN}", json={**HI, "labels": deep}, headers=key), 400),
        (await c.post(f"/r/{h.rollout_id}/{GEN}", content=b"{", headers=key), 400),
        (await c.post(f"/r/{h.rollout_id}/{GEN}", content=b"[1]", headers=key), 400),
        (await c.post(f"/r/{h.rollout_id}/{STREAM}?" + "&".join(f"a{i}=1" for i in range(40)), json=HI, headers=key), 400),
        (await c.post(f"/r/{h.rollout_id}/{GEN}", json=HI), 401),
        (await c.post(f"/r/{h.rollout_id}/{GEN}?key=wrong", json=HI), 403),
        (await c.post(f"/r/{h.rollout_id}/v1beta/models/x:batchGenerateContent", json=HI, headers=key), 404),
        (await c.post(f"/r/{h.rollout_id}/v1beta/tunedModels/x:generateContent", json=HI, headers=key), 404),
        (await c.get(f"/r/{h.rollout_id}/v1beta/cachedContents", headers=key), 404),
        (await c.get(f"/r/{h.rollout_id}/v1beta/files", headers={"x-api-key": h.api_key}), 404),  # the path says Gemini
    ]
    for r, status in cases:
        err = r.json()["error"]
        assert r.status_code == status and err["code"] == status and isinstance(err["status"], str), r.text
        assert err["message"], r.text
    assert (await c.post(f"/r/{h.rollout_id}/{GEN}?key={h.api_key}", json=HI)).status_code == 200
    p.finish_rollout(h.rollout_id)
    done = await c.post(f"/r/{h.rollout_id}/{GEN}", json=HI, headers=key)
    assert done.status_code == 409 and done.json()["error"]["status"] == "ABORTED"


async def test_registration_and_the_sandbox_socket_serve_the_gemini_wire(proxy):
    p, c = proxy
    r = (await c.post("/admin/rollouts", json={"task_id": "t"}, headers={"authorization": "Bearer adm"})).json()
    base = f"{p.url}/r/{r['rollout_id']}"
    assert r["gemini_base_url"] == base == r["anthropic_base_url"] and r["openai_base_url"] == base + "/v1"
    h = p.create_rollout("t")
    assert h.gemini_base_url == h.anthropic_base_url and h.to_json()["gemini_base_url"] == h.gemini_base_url
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=AgentOnly(p.app)), base_url="http://agent") as a:
        ok = await a.post(f"/r/{h.rollout_id}/{GEN}", json=HI, headers={"x-goog-api-key": h.api_key})
        alpha = await a.post(f"/r/{h.rollout_id}/v1alpha/models/m:countTokens", json=HI,
                             headers={"x-goog-api-key": h.api_key})
        admin = await a.get("/admin/health")
    assert ok.status_code == 200 and ok.json()["candidates"][0]["content"]["parts"] == [{"text": "ok"}]
    assert alpha.json()["totalTokens"] > 0 and admin.status_code == 404


async def test_context_overflow_in_the_gemini_terms(tokenizer):
    async with ProxyServer(Small({"turns": ["x"]}, tokenizer=tokenizer), token_workers=0) as p:
        h = p.create_rollout("t")
        async with httpx.AsyncClient() as c:
            r = await c.post(f"{h.gemini_base_url}/{GEN}", headers={"x-goog-api-key": h.api_key},
                             json={"contents": [{"parts": [{"text": BIG}]}]})
        err = r.json()["error"]
        assert r.status_code == 400 and err["status"] == "INVALID_ARGUMENT"
        assert err["message"].startswith("The input token count (") and "maximum number of tokens allowed (256)" in err["message"]
        assert [c.status for c in p.get_trajectory(h.rollout_id).calls] == [CallStatus.CONTEXT_OVERFLOW]


async def test_live_json_array_stream_and_a_failure_mid_stream(tokenizer):
    text = "The quick brown fox jumps over the lazy dog, again and again, as the tokens stream out."
    async with ProxyServer(ScriptedBackend({"turns": [{"text": text}]}, tokenizer=tokenizer, token_delay_s=0.01)) as p:
        h = p.create_rollout("t")
        async with httpx.AsyncClient(timeout=30) as c:
            r = await c.post(f"{h.gemini_base_url}/{STREAM}", headers={"x-goog-api-key": h.api_key}, json=HI)
        chunks = json.loads(r.text)
        assert r.headers["content-type"].startswith("application/json") and len(chunks) > 3
        assert "".join(p["text"] for ch in chunks for p in ch["candidates"][0]["content"]["parts"]) == text
        assert len({ch["responseId"] for ch in chunks}) == 1
    genai = pytest.importorskip("google.genai")
    async with ProxyServer(_FailsMidway({"turns": []}, tokenizer=tokenizer)) as p:
        h = p.create_rollout("t")
        client = genai.Client(api_key=h.api_key, http_options={"base_url": h.gemini_base_url})
        with pytest.raises(genai.errors.ServerError, match="crashed"):
            async for _ in await client.aio.models.generate_content_stream(model="m", contents="go"):
                pass
        async with httpx.AsyncClient(timeout=30) as c:
            r = await c.post(f"{h.gemini_base_url}/{STREAM}", headers={"x-goog-api-key": h.api_key}, json=HI)
        last = json.loads(r.text)[-1]  # the array stays valid JSON: the error is its last element
        assert r.status_code == 200 and last["error"]["status"] == "INTERNAL" and "crashed" in last["error"]["message"]
        await asyncio.sleep(0)
        assert [c.status for c in p.get_trajectory(h.rollout_id).calls] == [CallStatus.ERROR] * 2


def test_a_recorded_body_the_proxy_would_refuse_reads_as_no_conversation():
    from openforge.core.gemini_contents import gemini_messages
    from openforge.readings.steps import _results_in_request

    with pytest.raises(ProxyError):
        gemini_messages({"contents": [{"role": "bot"}]})
    assert list(_results_in_request({"contents": [{"role": "bot"}]})) == []


async def test_openai_passthrough_gets_tool_results_paired_with_their_calls(tokenizer):
    """Through an ``openai:`` pass-through back-end the Gemini conversation goes upstream as Chat
    messages: a function response without an id carries the id of the call it answers."""
    from testservers import serve_app, tool_then_answer_upstream

    from openforge.proxy.backends import parse_backend_spec

    genai = pytest.importorskip("google.genai")
    seen: list = []
    async with serve_app(tool_then_answer_upstream(seen)) as url:
        backend = parse_backend_spec(f"openai:{url}/v1", tokenizer=tokenizer, model="teacher")
        async with ProxyServer(backend) as p:
            h = p.create_rollout("t")
            client = genai.Client(api_key=h.api_key, http_options={"base_url": h.gemini_base_url})
            tools = [genai.types.Tool(function_declarations=[{"name": "bash", "parameters_json_schema": {
                "type": "object", "properties": {"command": {"type": "string"}}}}])]
            cfg = genai.types.GenerateContentConfig(
                tools=tools, automatic_function_calling=genai.types.AutomaticFunctionCallingConfig(disable=True))
            contents: list = ["where am I"]
            r = await client.aio.models.generate_content(model="g", contents=contents, config=cfg)
            assert r.function_calls[0].args == {"command": "pwd"} and r.function_calls[0].id == "call_up1"
            contents += [r.candidates[0].content, genai.types.Content(role="user", parts=[
                genai.types.Part.from_function_response(name="bash", response={"output": "/tmp"})])]
            r = await client.aio.models.generate_content(model="g", contents=contents, config=cfg)
            assert r.text == "Finished."
        await backend.aclose()
    call, result = seen[1]["messages"][1]["tool_calls"][0], seen[1]["messages"][2]
    assert result == {"role": "tool", "content": "/tmp", "tool_call_id": call["id"]} and call["id"] == "call_up1"
