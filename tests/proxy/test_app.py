"""In-process (httpx ASGITransport) tests of routes, control plane, faults, retries and wire details."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from openforge.core.errors import BackendError
from openforge.core.types import CallStatus, RolloutStatus
from openforge.proxy.backends.scripted import ScriptedBackend
from openforge.proxy.server import ProxyServer

from .conftest import TOOLS


class SlowScripted(ScriptedBackend):
    """The scripted policy, but each generation takes ``delay`` seconds (to test pause / disconnect)."""

    def __init__(self, *a, delay: float = 0.3, **kw):
        super().__init__(*a, **kw)
        self.delay = delay

    async def generate(self, prompt_ids, params, ctx=None):
        await asyncio.sleep(self.delay)
        return await super().generate(prompt_ids, params, ctx)


class FailingScripted(ScriptedBackend):
    """Fails the first ``fail`` generations (a back-end outage), then serves the script."""

    def __init__(self, *a, fail: int = 1, **kw):
        super().__init__(*a, **kw)
        self.fail = fail

    async def generate(self, prompt_ids, params, ctx=None):
        if self.fail > 0:
            self.fail -= 1
            raise BackendError("GPU fell over")
        return await super().generate(prompt_ids, params, ctx)


def make(tokenizer, backend_cls=ScriptedBackend, turns=None, **kw):
    script = {"turns": turns or [{"text": "one"}, {"text": "two"}, {"text": "three"}]}
    extra = {k: kw.pop(k) for k in ("delay", "fail") if k in kw}
    proxy = ProxyServer(backend_cls(script, tokenizer=tokenizer, **extra), admin_token="adm", **kw)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy.app), base_url="http://proxy")
    return proxy, client


def chat(msgs=None, **kw):
    return {"model": "m", "messages": msgs or [{"role": "user", "content": "hi"}], **kw}


async def test_admin_control_plane(tokenizer):
    _, c = make(tokenizer)
    async with c:
        assert (await c.post("/admin/rollouts", json={"task_id": "t"})).status_code == 401
        r = await c.post("/admin/rollouts", json={"task_id": "t", "harness": "pi", "metadata": {"k": 1}},
                         headers={"authorization": "Bearer adm"})
        assert r.status_code == 201
        h = r.json()
        assert h["openai_base_url"].endswith(f"/r/{h['rollout_id']}/v1") and h["api_key"]
        assert (await c.post("/admin/rollouts", json={"task_id": 5}, headers={"authorization": "Bearer adm"})).status_code == 400
        auth = {"authorization": f"Bearer {h['api_key']}"}
        url = f"/r/{h['rollout_id']}/v1/chat/completions"
        assert (await c.post(url, json=chat(), headers=auth)).json()["choices"][0]["message"]["content"] == "one"
        got = (await c.get(f"/admin/rollouts/{h['rollout_id']}", headers={"x-api-key": "adm"})).json()
        assert len(got["calls"]) == 1 and got["segments"] == []
        bad = await c.post(f"/admin/rollouts/{h['rollout_id']}/finish", json={"status": "great"}, headers={"x-api-key": "adm"})
        assert bad.status_code == 400 and "status" in bad.json()["error"]["message"]
        fin = await c.post(f"/admin/rollouts/{h['rollout_id']}/finish", json={"reward": 1.0}, headers={"x-api-key": "adm"})
        traj = fin.json()
        assert traj["status"] == "success" and traj["reward"] == 1.0 and len(traj["segments"]) == 1
        assert (await c.post(url, json=chat(), headers=auth)).status_code == 409  # finished
        assert (await c.get("/admin/rollouts/nope", headers={"x-api-key": "adm"})).status_code == 404
        assert (await c.head(f"/r/{h['rollout_id']}")).status_code == 200
        models = await c.get(f"/r/{h['rollout_id']}/v1/models", headers=auth)
        assert models.json()["data"][0]["id"] == "scripted"
        one = await c.get(f"/r/{h['rollout_id']}/v1/models/gpt-5.5", headers=auth)
        assert one.json()["id"] == "gpt-5.5"
        nf = await c.post(f"/r/{h['rollout_id']}/v1/embeddings", json={}, headers=auth)
        assert nf.status_code == 404 and "no route" in nf.json()["error"]["message"]
        nf = await c.post(f"/r/{h['rollout_id']}/v1/messages/batches", json={}, headers=auth)
        assert nf.json()["type"] == "error"


async def test_store_records_every_call_durably(tokenizer, tmp_path):
    store_mod = pytest.importorskip("openforge.store")
    store = store_mod.TrajectoryStore(tmp_path / "t.db")
    try:
        proxy, c = make(tokenizer, store=store)
        h = proxy.create_rollout("t")
        async with c:
            r = await c.post(f"/r/{h.rollout_id}/v1/chat/completions", json=chat(), headers={"x-api-key": h.api_key})
            assert r.status_code == 200
            assert [x.index for x in store.calls(h.rollout_id)] == [0]  # durable once the reply is out
        traj = proxy.finish_rollout(h.rollout_id, reward=0.0)
        assert traj.status == RolloutStatus.POLICY_FAILURE
        assert store.get_trajectory(h.rollout_id).segments == traj.segments
    finally:
        store.close()


async def test_multi_turn_chat_is_one_segment_without_retokenized_assistant_tokens(tokenizer):
    turns = [{"tool": {"name": "bash", "arguments": {"command": f"echo {i}"}}} for i in range(4)] + [{"text": "fin"}]
    proxy, c = make(tokenizer, turns=turns)
    h = proxy.create_rollout("t")
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "go"}]
    async with c:
        for _ in range(5):
            r = (await c.post(f"/r/{h.rollout_id}/v1/chat/completions", json=chat(msgs, tools=TOOLS),
                              headers={"x-api-key": h.api_key})).json()
            m = r["choices"][0]["message"]
            msgs.append(m)
            for tc in m.get("tool_calls") or []:
                msgs.append({"role": "tool", "tool_call_id": tc["id"].replace("_", ""), "content": "ok\n"})
    traj = proxy.finish_rollout(h.rollout_id, reward=1.0)
    assert len(traj.segments) == 1 and traj.segments[0].call_indices == [0, 1, 2, 3, 4]
    seg = traj.segments[0]
    # every masked token is a generated one, and the whole prompt of the last call is its context
    assert sum(seg.loss_mask) == sum(len(x.output_ids) for x in traj.calls)
    assert traj.calls[4].prompt_ids == seg.input_ids[: len(traj.calls[4].prompt_ids)]


async def test_retry_replays_and_records_once(tokenizer):
    proxy, c = make(tokenizer, turns=[{"text": "one"}, {"text": "two"}, {"text": "three"}, {"text": "four"}])
    h = proxy.create_rollout("t")
    url, hdr = f"/r/{h.rollout_id}/v1/chat/completions", {"x-api-key": h.api_key}
    async with c:
        a = (await c.post(url, json=chat(), headers=hdr)).json()
        b = (await c.post(url, json=chat(), headers={**hdr, "x-stainless-retry-count": "1"})).json()
        d = (await c.post(url, json=chat(), headers=hdr)).json()  # the same body, no retry marker: a new sample
        e = (await c.post(url, json=chat(stream=True), headers=hdr))
        k = {**hdr, "idempotency-key": "req-1"}
        f = (await c.post(url, json=chat(), headers=k)).json()
        g = (await c.post(url, json=chat(), headers=k)).json()  # the same idempotency key: a retry
    assert a["choices"][0]["message"] == b["choices"][0]["message"]
    assert [x["choices"][0]["message"]["content"] for x in (a, d, f, g)] == ["one", "two", "four", "four"]
    assert "three" in e.text
    assert [x.index for x in proxy.get_trajectory(h.rollout_id).calls] == [0, 1, 2, 3]


async def test_backend_error_is_retryable_5xx_and_infra_failure(tokenizer):
    proxy, c = make(tokenizer, FailingScripted, fail=1)
    h = proxy.create_rollout("t")
    async with c:
        r = await c.post(f"/r/{h.rollout_id}/v1/messages", json={"model": "m", "max_tokens": 5,
                         "messages": [{"role": "user", "content": "hi"}]}, headers={"x-api-key": h.api_key})
    assert r.status_code == 500 and r.json()["type"] == "error" and r.json()["error"]["type"] == "api_error"
    traj = proxy.finish_rollout(h.rollout_id, reward=0.0, status="policy_failure")  # what a verifier would say
    assert traj.calls[0].status == CallStatus.ERROR and traj.status == RolloutStatus.INFRA_ERROR
    assert traj.status.is_infra_failure and "back-end failed" in traj.error


async def test_backend_timeout_is_503(tokenizer):
    proxy, c = make(tokenizer, SlowScripted, delay=2.0, sampling={"timeout_s": 0.2})
    h = proxy.create_rollout("t")
    async with c:
        r = await c.post(f"/r/{h.rollout_id}/v1/chat/completions", json=chat(), headers={"x-api-key": h.api_key})
    assert r.status_code == 503 and "timed out" in r.json()["error"]["message"]
    assert proxy.get_trajectory(h.rollout_id).calls[0].status == CallStatus.ERROR


async def test_client_disconnect_cancels_the_call(tokenizer):
    async with ProxyServer(SlowScripted({"turns": ["a"]}, tokenizer=tokenizer, delay=3.0)) as proxy:
        h = proxy.create_rollout("t")
        async with httpx.AsyncClient(timeout=0.5) as c:
            with pytest.raises(httpx.ReadTimeout):
                await c.post(f"{h.openai_base_url}/chat/completions", json=chat(), headers={"x-api-key": h.api_key})
        for _ in range(100):
            calls = proxy.get_trajectory(h.rollout_id).calls
            if calls:
                break
            await asyncio.sleep(0.05)
        assert [x.status for x in calls] == [CallStatus.CANCELLED]
        traj = proxy.finish_rollout(h.rollout_id)
        assert traj.segments == [] and traj.metrics["cancelled_calls"] == [0]


async def test_client_leaving_during_the_upload_is_dropped_quietly(tokenizer, caplog):
    """Half a body, then the client is gone: a 499, nothing recorded, no 'internal error' logged."""
    proxy, _ = make(tokenizer)
    h = proxy.create_rollout("t")
    msgs = iter([{"type": "http.request", "body": b'{"model": "m", "mess', "more_body": True},
                 {"type": "http.disconnect"}])
    sent = []

    async def receive():
        return next(msgs)

    async def send(msg):
        sent.append(msg)

    scope = {"type": "http", "method": "POST", "path": f"/r/{h.rollout_id}/v1/chat/completions",
             "headers": [(b"authorization", f"Bearer {h.api_key}".encode()), (b"content-type", b"application/json")],
             "query_string": b"", "asgi": {"version": "3.0"}, "http_version": "1.1", "scheme": "http"}
    await proxy.app(scope, receive, send)
    assert sent[0]["status"] == 499
    assert proxy.get_trajectory(h.rollout_id).calls == []
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


async def test_pause_waits_for_inflight_and_holds_new_calls(tokenizer):
    proxy, c = make(tokenizer, SlowScripted, delay=0.3)
    h = proxy.create_rollout("t")
    url, hdr = f"/r/{h.rollout_id}/v1/chat/completions", {"x-api-key": h.api_key}
    async with c:
        first = asyncio.ensure_future(c.post(url, json=chat(), headers=hdr))
        await asyncio.sleep(0.05)
        await proxy.pause()  # returns only after the in-flight call finished
        assert first.done() and (await first).status_code == 200
        second = asyncio.ensure_future(c.post(url, json=chat([{"role": "user", "content": "2"}]), headers=hdr))
        await asyncio.sleep(0.4)
        assert not second.done()
        r = await c.post("/admin/resume", headers={"x-api-key": "adm"})
        assert r.json() == {"paused": False}
        assert (await second).status_code == 200


async def test_refusals_name_the_field(tokenizer):
    proxy, c = make(tokenizer)
    h = proxy.create_rollout("t")
    base, hdr = f"/r/{h.rollout_id}/v1", {"x-api-key": h.api_key}
    async with c:
        r = await c.post(base + "/chat/completions", json=chat(n=2), headers=hdr)
        assert r.status_code == 400 and r.json()["error"]["param"] == "n"
        r = await c.post(base + "/chat/completions", json=chat(audio={"voice": "x"}), headers=hdr)
        assert r.status_code == 400 and "'audio'" in r.json()["error"]["message"]
        r = await c.post(base + "/responses", json={"model": "m", "input": "x", "background": True}, headers=hdr)
        assert r.status_code == 400 and r.json()["error"]["param"] == "background"
        r = await c.post(base + "/messages", json={"model": "m", "messages": []}, headers=hdr)
        assert r.status_code == 400 and "max_tokens" in r.json()["error"]["message"]
        r = await c.post(base + "/responses", json={"model": "m", "input": "x", "previous_response_id": "resp_x"}, headers=hdr)
        assert r.status_code == 400 and r.json()["error"]["param"] == "previous_response_id"
    assert proxy.get_trajectory(h.rollout_id).calls == []


async def test_responses_previous_response_id_custom_and_namespace_tools(tokenizer):
    turns = [{"tool": {"name": "apply_patch", "arguments": {"input": "*** Begin Patch"}}},
             {"tool": {"name": "spawn_agent", "arguments": {"task": "x"}}}, {"text": "ok"}]
    proxy, c = make(tokenizer, turns=turns)
    h = proxy.create_rollout("t")
    url, hdr = f"/r/{h.rollout_id}/v1/responses", {"authorization": f"Bearer {h.api_key}"}
    tools = [{"type": "custom", "name": "apply_patch", "description": "patch", "format": {"type": "grammar", "syntax": "lark",
                                                                                          "definition": "start: x"}},
             {"type": "namespace", "name": "multi_agent_v1", "description": "agents",
              "tools": [{"type": "function", "name": "spawn_agent", "parameters": {"type": "object", "properties": {}}}]},
             {"type": "web_search"}, {"type": "tool_search"}]
    async with c:
        r1 = (await c.post(url, json={"model": "m", "input": [{"role": "developer", "content": "dev"},
                                                              {"role": "user", "content": "u"}], "tools": tools}, headers=hdr)).json()
        item = r1["output"][0]
        assert item["type"] == "custom_tool_call" and item["input"] == "*** Begin Patch"
        r2 = (await c.post(url, json={"model": "m", "previous_response_id": r1["id"], "tools": tools, "input": [
            {"type": "custom_tool_call_output", "call_id": item["call_id"], "output": "Done!"}]}, headers=hdr)).json()
        fc = r2["output"][0]
        assert fc["type"] == "function_call" and fc["namespace"] == "multi_agent_v1"
        r3 = (await c.post(url, json={"model": "m", "previous_response_id": r2["id"], "tools": tools, "stream": True, "input": [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "hm"}]},
            {"type": "function_call_output", "call_id": fc["call_id"], "output": [{"type": "input_text", "text": "spawned"}]}]},
            headers=hdr))
        events = [ln[7:] for ln in r3.text.splitlines() if ln.startswith("event: ")]
        assert events[0] == "response.created" and events[-1] == "response.completed"
    traj = proxy.finish_rollout(h.rollout_id, reward=1.0)
    assert len(traj.segments) == 1  # previous_response_id chains splice too


async def test_messages_details(tokenizer):
    proxy, c = make(tokenizer, turns=[{"tool": {"name": "computer", "arguments": {"action": "screenshot"}}}, {"text": "ok"}])
    h = proxy.create_rollout("t")
    url, hdr = f"/r/{h.rollout_id}/v1/messages?beta=true", {"x-api-key": h.api_key}
    tools = [{"type": "computer_20250124", "name": "computer", "display_width_px": 1024, "display_height_px": 768}]
    msgs = [{"role": "user", "content": "look"}, {"role": "system", "content": "agent list: a, b"}]
    async with c:
        r = (await c.post(url, json={"model": "m", "max_tokens": 50, "messages": msgs, "tools": tools,
                                     "thinking": {"type": "adaptive"}, "context_management": {"edits": []}}, headers=hdr)).json()
        tu = r["content"][0]
        assert tu["type"] == "tool_use" and tu["input"] == {"action": "screenshot"} and r["stop_reason"] == "tool_use"
        msgs += [{"role": "assistant", "content": [{"type": "thinking", "thinking": "", "signature": "s"}, tu]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tu["id"], "content": [
                     {"type": "text", "text": "shot"}, {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                                     "data": "iVBORw0KGgo="}}]}]}]
        r = (await c.post(url, json={"model": "m", "max_tokens": 50, "messages": msgs, "tools": tools}, headers=hdr)).json()
        assert r["content"] == [{"type": "text", "text": "ok"}]
        n = (await c.post(f"/r/{h.rollout_id}/v1/messages/count_tokens", json={"model": "m", "messages": msgs},
                          headers=hdr)).json()
        assert n["input_tokens"] > 10
    traj = proxy.finish_rollout(h.rollout_id, reward=1.0)
    prompt = proxy.renderer.decode(traj.calls[1].prompt_ids)
    assert "<|im_start|>system\nagent list: a, b<|im_end|>" in prompt and "[image]" in prompt
    assert len(traj.segments) == 1


async def test_unix_socket_listener(tokenizer, tmp_path):
    sock = tmp_path / "proxy.sock"
    async with ProxyServer(ScriptedBackend({"turns": ["via uds"]}, tokenizer=tokenizer), host=None, uds=sock) as proxy:
        h = proxy.create_rollout("t")
        async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(sock))) as c:
            r = await c.post(f"{h.openai_base_url}/chat/completions", json=chat(), headers={"x-api-key": h.api_key})
        assert r.json()["choices"][0]["message"]["content"] == "via uds"
        assert json.loads(proxy.finish_rollout(h.rollout_id).to_json())["calls"][0]["exact"] is True


class FixedTokens(ScriptedBackend):
    """A token back-end that always generates the same continuation (and honours prefill)."""

    honors_prefill = True

    def __init__(self, text, tokenizer):
        super().__init__({"turns": []}, tokenizer=tokenizer)
        self.text = text
        self.prompts = []

    async def generate(self, prompt_ids, params, ctx=None):
        self.prompts.append(prompt_ids)
        ids = self.tokenizer.encode(self.text, add_special_tokens=False)
        return type(await super().generate(prompt_ids, params, ctx))(ids, [-0.5] * len(ids), "stop")


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
async def test_forced_tool_choice_is_prefilled(tokenizer, api):
    backend = FixedTokens('{"command": "ls"}}\n</tool_call><|im_end|>', tokenizer)
    proxy = ProxyServer(backend)
    h = proxy.create_rollout("t")
    hdr = {"x-api-key": h.api_key}
    fn = TOOLS[0]["function"]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy.app), base_url="http://p") as c:
        if api == "chat":
            r = (await c.post(f"/r/{h.rollout_id}/v1/chat/completions", headers=hdr, json=chat(
                tools=TOOLS, tool_choice={"type": "function", "function": {"name": "bash"}}))).json()
            args = r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
        elif api == "messages":
            r = (await c.post(f"/r/{h.rollout_id}/v1/messages", headers=hdr, json={
                "model": "m", "max_tokens": 20, "messages": [{"role": "user", "content": "x"}],
                "tools": [{"name": "bash", "input_schema": fn["parameters"]}], "tool_choice": {"type": "tool", "name": "bash"}})).json()
            args = json.dumps(r["content"][0]["input"])
        else:
            r = (await c.post(f"/r/{h.rollout_id}/v1/responses", headers=hdr, json={
                "model": "m", "input": "x", "tools": [{"type": "function", **fn}],
                "tool_choice": {"type": "function", "name": "bash"}})).json()
            args = r["output"][0]["arguments"]
        assert json.loads(args) == {"command": "ls"}
        bad = await c.post(f"/r/{h.rollout_id}/v1/chat/completions", headers=hdr, json=chat(
            [{"role": "user", "content": "y"}], tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}))
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "tool_choice"
    assert proxy.renderer.decode(backend.prompts[0]).endswith('<|im_start|>assistant\n<tool_call>\n{"name": "bash", "arguments": ')
    traj = proxy.finish_rollout(h.rollout_id)
    assert [c.index for c in traj.calls] == [0] and len(traj.segments) == 1  # the refused call left no gap


async def test_chat_logprobs_are_the_recorded_behaviour_logprobs(tokenizer):
    backend = FixedTokens("Hello there<|im_end|>", tokenizer)
    proxy = ProxyServer(backend)
    h = proxy.create_rollout("t")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy.app), base_url="http://p") as c:
        r = (await c.post(f"/r/{h.rollout_id}/v1/chat/completions", headers={"x-api-key": h.api_key},
                          json=chat(logprobs=True))).json()
    content = r["choices"][0]["logprobs"]["content"]
    call = proxy.get_trajectory(h.rollout_id).calls[0]
    assert [x["logprob"] for x in content] == call.output_logprobs
    assert "".join(x["token"] for x in content) == "Hello there<|im_end|>"


async def test_finished_rollouts_are_served_from_the_store(tokenizer, tmp_path):
    store_mod = pytest.importorskip("openforge.store")
    with store_mod.TrajectoryStore(tmp_path / "s.db") as store:
        proxy, c = make(tokenizer, store=store)
        h = proxy.create_rollout("t")
        async with c:
            await c.post(f"/r/{h.rollout_id}/v1/chat/completions", json=chat(), headers={"x-api-key": h.api_key})
            traj = proxy.finish_rollout(h.rollout_id, reward=1.0)
            assert proxy.recorder.rollouts[h.rollout_id].calls == []  # memory released
            assert proxy.get_trajectory(h.rollout_id) == traj == proxy.finish_rollout(h.rollout_id)
            late = await c.post(f"/r/{h.rollout_id}/v1/chat/completions", json=chat(), headers={"x-api-key": h.api_key})
            assert late.status_code == 409 and "finished" in late.json()["error"]["message"]


async def test_tcp_and_unix_socket_together_and_many_concurrent_rollouts(tokenizer, tmp_path):
    import random

    turns = [{"shell": "echo 1"}, {"shell": "echo 2"}, {"text": "done"}]
    sock = tmp_path / "p.sock"
    async with ProxyServer(SlowScripted({"turns": turns}, tokenizer=tokenizer, delay=0.01), uds=sock) as proxy:
        async def one(i: int) -> tuple[int, str]:
            h = proxy.create_rollout(f"task-{i % 3}")
            transport = httpx.AsyncHTTPTransport(uds=str(sock)) if i % 2 else None
            async with httpx.AsyncClient(transport=transport, timeout=30) as c:
                msgs = [{"role": "system", "content": f"agent {i}"}, {"role": "user", "content": "go"}]
                for _ in range(3):
                    await asyncio.sleep(random.random() / 50)
                    r = await c.post(f"{h.openai_base_url}/chat/completions", headers={"x-api-key": h.api_key},
                                     json=chat(msgs, tools=TOOLS))
                    m = r.json()["choices"][0]["message"]
                    msgs.append(m)
                    msgs += [{"role": "tool", "tool_call_id": t["id"], "content": f"out {i}"} for t in m.get("tool_calls") or []]
            return i, h.rollout_id

        ids = await asyncio.gather(*(one(i) for i in range(16)))
        for i, rid in ids:
            traj = proxy.finish_rollout(rid, reward=1.0)
            assert [c.index for c in traj.calls] == [0, 1, 2]
            assert len(traj.segments) == 1 and traj.segments[0].break_reason == "first"
            text = proxy.renderer.decode(traj.segments[0].input_ids)
            assert f"system\nagent {i}\n" in text and text.count(f"out {i}\n") == 2  # no cross-talk


async def test_responses_instructions_with_previous_response_id(tokenizer):
    proxy, c = make(tokenizer, turns=[{"text": "first"}, {"text": "second"}])
    h = proxy.create_rollout("t")
    url, hdr = f"/r/{h.rollout_id}/v1/responses", {"x-api-key": h.api_key}
    async with c:
        r1 = (await c.post(url, json={"model": "m", "instructions": "Be brief.", "input": "one"}, headers=hdr)).json()
        r2 = (await c.post(url, json={"model": "m", "instructions": "Be brief.", "input": "two",
                                      "previous_response_id": r1["id"]}, headers=hdr)).json()
    assert r2["output"][0]["content"][0]["text"] == "second" and r2["previous_response_id"] == r1["id"]
    traj = proxy.finish_rollout(h.rollout_id)
    assert len(traj.segments) == 1
    assert proxy.renderer.decode(traj.calls[1].prompt_ids).count("Be brief.") == 1


async def test_prompt_longer_than_the_context_is_a_400(tokenizer):
    class Small(ScriptedBackend):
        max_context = 64

    proxy = ProxyServer(Small({"turns": ["x"]}, tokenizer=tokenizer))
    h = proxy.create_rollout("t")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy.app), base_url="http://p") as c:
        r = await c.post(f"/r/{h.rollout_id}/v1/messages", headers={"x-api-key": h.api_key}, json={
            "model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "word " * 200}]})
    err = r.json()["error"]  # Anthropic's own overflow error: a 400 invalid_request_error, "prompt is too long"
    assert r.status_code == 400 and err["type"] == "invalid_request_error"
    assert err["message"].startswith("prompt is too long: ") and "tokens > 64 maximum" in err["message"]
    [call] = proxy.get_trajectory(h.rollout_id).calls  # recorded: the policy's conversation outgrew its context
    assert call.status == "context_overflow" and call.error == err["message"] and not call.output_ids
