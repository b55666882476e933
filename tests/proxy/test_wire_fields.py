"""docs/wire-fields.md is complete and true: every request field of the four APIs — every field the
installed SDKs can send among them — is in the table, and the running proxy gives each its treatment."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from openforge.proxy.backends.scripted import ScriptedBackend
from openforge.proxy.server import ProxyServer
from openforge.proxy.wire_fields import FIELDS, HONOURED, OVERRIDDEN, REFUSED, markdown_table

from .conftest import TOOLS

DOC = Path(__file__).resolve().parents[2] / "docs" / "wire-fields.md"
ROUTES = {"chat": "v1/chat/completions", "responses": "v1/responses", "messages": "v1/messages",
          "gemini": "v1beta/models/m:generateContent"}
BASE = {"chat": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        "responses": {"model": "m", "input": "hi"},
        "messages": {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]},
        "gemini": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}}
GEN = "generationConfig."
ANT_TOOLS = [{"name": "bash", "description": "run", "input_schema": {"type": "object", "properties": {}}}]
RESP_TOOLS = [{"type": "function", "name": "bash", "parameters": {"type": "object", "properties": {}}}]
_COMMON = {"model": "other-model", "stream": True, "metadata": {"k": "v"}}
# One value per field that exercises its treatment (a refused field: a value that is refused).
EXAMPLES: dict[str, dict[str, object]] = {
    "chat": {**_COMMON, "messages": [{"role": "user", "content": "hello there"}], "tools": TOOLS,
             "tool_choice": "none", "max_completion_tokens": 7, "max_tokens": 7, "stop": ["\n\n"],
             "stream_options": {"include_usage": True}, "logprobs": True, "top_logprobs": 3, "user": "u",
             "safety_identifier": "s", "store": True, "prompt_cache_key": "k", "prompt_cache_retention": "24h",
             "prompt_cache_options": {"mode": "x"}, "temperature": 0.3, "top_p": 0.5, "seed": 7,
             "presence_penalty": 0.5, "frequency_penalty": 0.5, "reasoning_effort": "low", "verbosity": "low",
             "parallel_tool_calls": False, "response_format": {"type": "json_object"}, "service_tier": "flex",
             "moderation": {"mode": "x"}, "n": 2, "logit_bias": {"1": 5}, "modalities": ["text", "audio"],
             "audio": {"voice": "alloy", "format": "wav"}, "prediction": {"type": "content", "content": "x"},
             "functions": [{"name": "f"}], "function_call": "auto", "web_search_options": {}},
    "responses": {**_COMMON, "input": "hello there", "instructions": "be brief", "previous_response_id": None,
                  "tools": RESP_TOOLS, "tool_choice": "none", "max_output_tokens": 7, "stream_options": {"x": 1},
                  "store": False, "include": ["reasoning.encrypted_content"], "user": "u", "safety_identifier": "s",
                  "client_metadata": {"a": "b"}, "prompt_cache_key": "k", "prompt_cache_retention": "24h",
                  "prompt_cache_options": {"mode": "x"}, "max_tool_calls": 3, "temperature": 0.3, "top_p": 0.5,
                  "reasoning": {"effort": "low"}, "text": {"verbosity": "low"}, "parallel_tool_calls": False,
                  "truncation": "auto", "context_management": [{"type": "compaction"}], "service_tier": "flex",
                  "moderation": {"mode": "x"}, "top_logprobs": 2, "background": True, "background_options": {"x": 1},
                  "conversation": "conv_1", "prompt": {"id": "pmpt_1"}, "image": {"x": 1}, "access_programs": ["x"]},
    "messages": {**_COMMON, "messages": [{"role": "user", "content": "hello there"}], "system": "be brief",
                 "tools": ANT_TOOLS, "tool_choice": {"type": "none"}, "max_tokens": 7, "stop_sequences": ["\n\n"],
                 "cache_control": {"type": "ephemeral"}, "betas": ["x"], "diagnostics": {"x": 1},
                 "user_profile_id": "u", "workspace_id": "w", "billing_policy": {"x": 1},
                 "fallback_credit_token": "t", "temperature": 0.3, "top_p": 0.5, "top_k": 5,
                 "thinking": {"type": "enabled", "budget_tokens": 1024}, "output_config": {"effort": "low"},
                 "context_management": {"edits": []}, "compaction": {"x": 1}, "fallbacks": [{"model": "x"}],
                 "service_tier": "auto", "speed": "fast", "inference_geo": "us", "thread": {"type": "create"},
                 "mcp_servers": [{"type": "url", "url": "http://127.0.0.1:1", "name": "x"}], "container": "c"},
    "gemini": {"contents": [{"role": "user", "parts": [{"text": "hello there"}]}], "model": "models/other",
               "systemInstruction": {"parts": [{"text": "be brief"}]},
               "tools": [{"functionDeclarations": [{"name": "bash", "parameters": {"type": "OBJECT"}}]}],
               "toolConfig": {"functionCallingConfig": {"mode": "NONE"}}, "generationConfig": {"maxOutputTokens": 7},
               "labels": {"k": "v"}, "store": False, "serviceTier": "flex", "cachedContent": "cachedContents/c1",
               "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
               "continuationToken": "tok", GEN + "maxOutputTokens": 7, GEN + "stopSequences": ["\n\n"],
               GEN + "responseLogprobs": True, GEN + "temperature": 0.3, GEN + "topP": 0.5, GEN + "topK": 5,
               GEN + "seed": 7, GEN + "presencePenalty": 0.5, GEN + "frequencyPenalty": 0.5,
               GEN + "thinkingConfig": {"thinkingBudget": 0}, GEN + "responseMimeType": "application/json",
               GEN + "responseSchema": {"type": "OBJECT"}, GEN + "responseJsonSchema": {"type": "object"},
               GEN + "mediaResolution": "MEDIA_RESOLUTION_LOW", GEN + "enableEnhancedCivicAnswers": True,
               GEN + "routingConfig": {"autoMode": {}}, GEN + "modelSelectionConfig": {"x": "BALANCED"},
               GEN + "candidateCount": 2, GEN + "logprobs": 3, GEN + "responseModalities": ["IMAGE"],
               GEN + "speechConfig": {"voiceConfig": {}}, GEN + "audioTimestamp": True,
               GEN + "audioTranscriptionConfig": {"x": 1}, GEN + "imageConfig": {"aspectRatio": "1:1"}},
}


def _doc_tables() -> dict[str, dict[str, str]]:
    """``{api: {field: treatment}}`` read from docs/wire-fields.md."""
    out: dict[str, dict[str, str]] = {}
    api = None
    for line in DOC.read_text().splitlines():
        m = re.match(r"## .*\(`(\w+)`\)$", line)
        if m:
            api = m.group(1)
            out[api] = {}
        m = re.match(r"\| `([\w.]+)` \| (\w+) \|", line)
        if m and api:
            out[api][m.group(1)] = m.group(2)
    return out


def _sdk_fields() -> dict[str, set[str]]:
    """Every top-level field the installed SDKs' request param types have (``stream`` lives in the
    streaming/non-streaming subtypes)."""
    from anthropic.types import message_create_params as mcp
    from anthropic.types.beta import message_create_params as bmcp
    from openai.types.chat import completion_create_params as ccp
    from openai.types.responses import response_create_params as rcp

    def keys(*types: type) -> set[str]:
        return {k for t in types for k in getattr(t, "__annotations__", {})} | {"stream"}

    return {"chat": keys(ccp.CompletionCreateParamsBase),
            "responses": keys(rcp.ResponseCreateParamsBase),
            "messages": keys(mcp.MessageCreateParamsBase, bmcp.MessageCreateParamsBase),
            "gemini": _genai_fields()}


def _genai_fields() -> set[str]:
    """The body fields google-genai writes from a ``GenerateContentConfig`` (read off its request builder:
    ``parent_object`` is the body, ``to_object`` its ``generationConfig``)."""
    import inspect

    from google.genai import models

    src = inspect.getsource(models._GenerateContentConfig_to_mldev)
    top = set(re.findall(r"setv\(\s*parent_object,\s*\['(\w+)'\]", src))
    gen = set(re.findall(r"setv\(\s*to_object,\s*\['(\w+)'\]", src))
    assert "systemInstruction" in top and "maxOutputTokens" in gen, "the SDK's request builder changed: update"
    return {"contents", "generationConfig", *top} | {GEN + k for k in gen}


def test_the_docs_table_is_the_proxys_and_covers_every_sdk_field():
    pytest.importorskip("openai")
    pytest.importorskip("anthropic")
    pytest.importorskip("google.genai")
    docs = _doc_tables()
    assert set(docs) == set(FIELDS)
    text = DOC.read_text()
    for api, table in FIELDS.items():
        assert markdown_table(api) in text, (
            f"docs/wire-fields.md is out of date for {api}: paste openforge.proxy.wire_fields.markdown_table({api!r})")
        assert docs[api] == {k: f.treatment for k, f in table.items()}
        missing = _sdk_fields()[api] - set(docs[api])
        assert not missing, f"{api}: fields the SDK can send that docs/wire-fields.md does not classify: {missing}"
        assert set(EXAMPLES[api]) == set(docs[api]), f"{api}: give every table field an example value in this test"


@pytest.fixture
async def proxy(tokenizer):
    p = ProxyServer(ScriptedBackend({"turns": [], "final": "ok"}, tokenizer=tokenizer), admin_token="adm")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=p.app), base_url="http://proxy") as c:
        yield p, c


def _field_named(api: str, body: dict, name: str) -> bool:
    err = body.get("error") or {}
    if api == "messages":
        return body.get("type") == "error" and f"'{name}'" in err.get("message", "")
    if api == "gemini":
        return (err.get("status") == "INVALID_ARGUMENT" and f"'{name}'" in err.get("message", "")
                and err["details"][0]["fieldViolations"][0]["field"] == name)
    return err.get("param") == name and f"'{name}'" in err.get("message", "")


@pytest.mark.parametrize("api", list(FIELDS))
async def test_every_field_gets_its_documented_treatment(proxy, api):
    p, c = proxy
    h = p.create_rollout("t")
    url, hdr = f"/r/{h.rollout_id}/{ROUTES[api]}", {"x-api-key": h.api_key}
    for name, treatment in _doc_tables()[api].items():
        value = EXAMPLES[api][name]
        if name == "previous_response_id":  # needs a response of this rollout to continue from
            value = (await c.post(url, json=BASE[api], headers=hdr)).json()["id"]
        top, _, sub = name.partition(".")
        body = {**BASE[api], top: {sub: value} if sub else value}
        r = await c.post(url, json=body, headers=hdr)
        if treatment == REFUSED:
            assert r.status_code == 400 and _field_named(api, r.json(), name), (name, r.text)
            continue
        assert r.status_code == 200, (name, r.text)
        call = p.get_trajectory(h.rollout_id).calls[int(r.headers["x-openforge-call"])]
        assert (call.request[top][sub] if sub else call.request[name]) == value, name  # the request as sent is recorded
        assert "unrecognized" not in call.sampling, name
        if treatment == OVERRIDDEN:
            assert call.sampling["overridden"] == {name: value}, (name, call.sampling)
        else:
            assert treatment == HONOURED and call.sampling["overridden"] == {}, (name, call.sampling)


async def test_honoured_fields_change_what_is_served(proxy):
    p, c = proxy
    h = p.create_rollout("t")
    hdr = {"x-api-key": h.api_key}
    url = f"/r/{h.rollout_id}/v1/chat/completions"
    plain = (await c.post(url, json=BASE["chat"], headers=hdr)).json()
    capped = (await c.post(url, json={**BASE["chat"], "max_tokens": 1}, headers=hdr)).json()
    stopped = (await c.post(url, json={**BASE["chat"], "stop": "k"}, headers=hdr)).json()
    with_lp = (await c.post(url, json={**BASE["chat"], "logprobs": True}, headers=hdr)).json()
    assert (await c.post(url, json={**BASE["chat"], "tools": TOOLS}, headers=hdr)).status_code == 200
    calls = p.get_trajectory(h.rollout_id).calls
    assert plain["choices"][0]["message"]["content"] == "ok" and plain["choices"][0]["logprobs"] is None
    assert capped["choices"] and calls[1].sampling["enforced"]["max_tokens"] == 1  # the back-end's limit
    assert stopped["choices"][0]["message"]["content"] == "o"
    assert len(with_lp["choices"][0]["logprobs"]["content"]) == len(calls[3].output_ids)
    assert len(calls[4].prompt_ids) > len(calls[0].prompt_ids) + 20  # the tool definitions are in the prompt


async def test_unknown_fields_are_recorded_not_dropped(proxy):
    p, c = proxy
    h = p.create_rollout("t")
    url, hdr = f"/r/{h.rollout_id}/v1/responses", {"x-api-key": h.api_key}
    r = await c.post(url, json={**BASE["responses"], "brand_new_field": {"x": 1}, "temperature": 0.2}, headers=hdr)
    assert r.status_code == 200
    call = p.get_trajectory(h.rollout_id).calls[0]
    assert call.sampling["unrecognized"] == ["brand_new_field"]
    assert call.sampling["overridden"] == {"temperature": 0.2}
    assert json.loads(p.finish_rollout(h.rollout_id).to_json())["calls"][0]["sampling"]["unrecognized"]


async def test_gemini_honoured_fields_change_what_is_served(proxy):
    p, c = proxy
    h = p.create_rollout("t")
    url, hdr = f"/r/{h.rollout_id}/{ROUTES['gemini']}", {"x-goog-api-key": h.api_key}
    tools = [{"function_declarations": [{"name": "bash", "parameters": {"type": "OBJECT", "properties": {
        "command": {"type": "STRING"}}}}]}]

    async def ask(**kw):
        r = await c.post(url, json={**BASE["gemini"], **kw}, headers=hdr)
        assert r.status_code == 200, r.text
        return r.json()["candidates"][0]

    plain = await ask()
    capped = await ask(generationConfig={"maxOutputTokens": 1})
    stopped = await ask(generation_config={"stop_sequences": ["k"]})  # snake_case, as the API accepts
    with_lp = await ask(generationConfig={"responseLogprobs": True})
    await ask(tools=tools)
    await ask(tools=tools, toolConfig={"functionCallingConfig": {"mode": "NONE"}})
    calls = p.get_trajectory(h.rollout_id).calls
    assert plain["content"]["parts"] == [{"text": "ok"}] and "logprobsResult" not in plain
    assert capped["finishReason"] and calls[1].sampling["enforced"]["max_tokens"] == 1
    assert stopped["content"]["parts"] == [{"text": "o"}]
    assert len(with_lp["logprobsResult"]["chosenCandidates"]) == len(calls[3].output_ids)
    prompt = p.renderer.decode(calls[4].prompt_ids)  # the declaration, as JSON Schema, is in the prompt
    assert '"parameters": {"type": "object", "properties": {"command": {"type": "string"}}}' in prompt
    assert calls[5].prompt_ids == calls[0].prompt_ids  # mode NONE hides the tools
