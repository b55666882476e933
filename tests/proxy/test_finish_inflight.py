"""Every acknowledged call reaches the trajectory: over a real socket with the real SDKs and a slow
back-end, a call in flight when its rollout is finished is awaited and included (or, past the wait,
recorded ``cancelled``, included, and answered 409 — never a 200 the trainer does not see); a call
that arrives after finish began is refused with a 409 in the API's error shape and leaves no row; a
non-finite reward is refused."""

from __future__ import annotations

import asyncio
import time

import anthropic
import httpx
import openai
import pytest

from openforge.core.errors import ProxyError
from openforge.core.types import CallStatus
from openforge.proxy.backends.scripted import ScriptedBackend
from openforge.proxy.server import ProxyServer
from openforge.store import TrajectoryStore

LONG = ("The quick brown fox jumps over the lazy dog while the proxy streams every token as soon as it is "
        "sampled, so the harness sees the answer grow instead of waiting in silence. ")
MSG = [{"role": "user", "content": "go"}]


def _proxy(tokenizer, store, text, delay):
    return ProxyServer(ScriptedBackend({"turns": [{"text": text}]}, tokenizer=tokenizer, token_delay_s=delay),
                       store=store)


async def _call(h, stream: bool) -> str:
    """One chat call with the real SDK (no retries); the text the client received."""
    c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
    if not stream:
        r = await c.chat.completions.create(model="m", messages=MSG)
        return r.choices[0].message.content
    s = await c.chat.completions.create(model="m", messages=MSG, stream=True)
    return "".join([ch.choices[0].delta.content or "" async for ch in s if ch.choices])


async def _until(cond, timeout=10.0):
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, "condition not reached"
        await asyncio.sleep(0.005)


async def _finish(proxy, rid, **body):
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(f"{proxy.url}/admin/rollouts/{rid}/finish", json=body,
                         headers={"authorization": f"Bearer {proxy.admin_token}"})
    return r


@pytest.mark.parametrize("stream", [False, True])
async def test_a_call_in_flight_at_finish_is_awaited_and_included(tokenizer, tmp_path, stream):
    with TrajectoryStore(tmp_path / "s.db") as store:
        proxy = _proxy(tokenizer, store, LONG, 0.01)  # ~40 tokens: ~0.4 s per call
        async with proxy:
            h = proxy.create_rollout("t")
            st = proxy.recorder.get(h.rollout_id)
            call = asyncio.ensure_future(_call(h, stream))
            await _until(lambda: st.serving)  # generating now
            fin = asyncio.ensure_future(_finish(proxy, h.rollout_id, reward=1.0))
            await _until(lambda: st.closing)
            # A call that arrives after finish began: 409 in each API's own error shape, never served.
            oa = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
            with pytest.raises(openai.ConflictError, match="is finished: it takes no more calls") as e1:
                await oa.chat.completions.create(model="m", messages=MSG, stream=stream)
            assert e1.value.body["type"] == "invalid_request_error"
            an = anthropic.AsyncAnthropic(base_url=h.anthropic_base_url, api_key=h.api_key, max_retries=0)
            with pytest.raises(anthropic.ConflictError, match="is finished") as e2:
                await an.messages.create(model="m", max_tokens=50, messages=MSG)
            assert e2.value.body["type"] == "error" and e2.value.body["error"]["type"] == "invalid_request_error"
            got = await call  # the in-flight call completed normally (200) ...
            r = await fin
        assert r.status_code == 200, r.text
        traj = r.json()
        assert got == LONG.strip() or got == LONG
        # ... and it is in the finished trajectory, and nothing else is, in memory and in the store
        assert [(c["index"], c["status"]) for c in traj["calls"]] == [(0, "ok")]
        assert traj["calls"][0]["response"]["text"] == got and traj["status"] == "success"
        assert [c.index for c in store.calls(h.rollout_id)] == [0]
        assert store.get_trajectory(h.rollout_id).calls[0].output_ids == traj["calls"][0]["output_ids"]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_call_still_running_after_the_wait_is_cancelled_included_and_refused(tokenizer, tmp_path, stream):
    with TrajectoryStore(tmp_path / "s.db") as store:
        proxy = _proxy(tokenizer, store, LONG * 5, 0.02)  # ~200 tokens: ~4 s if left to finish
        async with proxy:
            h = proxy.create_rollout("t")
            st = proxy.recorder.get(h.rollout_id)
            call = asyncio.ensure_future(_call(h, stream))
            await _until(lambda: st.serving)
            t0 = time.monotonic()
            r = await _finish(proxy, h.rollout_id, reward=0.0, wait_s=0.3)
            took = time.monotonic() - t0
            with pytest.raises(openai.APIError, match="was finished while this call was being served") as e:
                await call
            if not stream:
                assert isinstance(e.value, openai.ConflictError)  # a 409, not a 200
        assert r.status_code == 200, r.text
        traj = r.json()
        assert [(c["index"], c["status"]) for c in traj["calls"]] == [(0, CallStatus.CANCELLED.value)]
        assert traj["metrics"]["cancelled_calls"] == [0]
        assert [c.status for c in store.calls(h.rollout_id)] == [CallStatus.CANCELLED]
        assert 0.3 <= took < 3.0  # bounded by wait_s, not by the generation


async def test_sync_finish_with_calls_in_flight_is_refused_and_changes_nothing(tokenizer):
    proxy = _proxy(tokenizer, None, LONG, 0.01)
    async with proxy:
        h = proxy.create_rollout("t")
        st = proxy.recorder.get(h.rollout_id)
        call = asyncio.ensure_future(_call(h, False))
        await _until(lambda: st.serving)
        with pytest.raises(ProxyError, match=r"1 call\(s\) in flight.*afinish_rollout"):
            proxy.finish_rollout(h.rollout_id, reward=1.0)
        assert st.accepting  # still open
        await call
        traj = await proxy.afinish_rollout(h.rollout_id, reward=1.0)
    assert [c.index for c in traj.calls] == [0]


@pytest.mark.parametrize("body, param", [({"reward": float("nan")}, "reward"), ({"reward": float("inf")}, "reward"),
                                         ({"reward": 1.0, "rewards": {"x": float("-inf")}}, "rewards"),
                                         ({"reward": 1.0, "rewards": {"x": "high"}}, "rewards")])
async def test_finish_refuses_non_finite_rewards(tokenizer, body, param):
    import json

    proxy = _proxy(tokenizer, None, "hi", 0.0)
    async with proxy:
        h = proxy.create_rollout("t")
        async with httpx.AsyncClient(timeout=30) as c:  # json.dumps writes NaN / Infinity, as a sloppy client would
            r = await c.post(f"{proxy.url}/admin/rollouts/{h.rollout_id}/finish", content=json.dumps(body),
                             headers={"authorization": f"Bearer {proxy.admin_token}"})
        err = r.json()["error"]  # the admin routes' error shape: {type, message, field}
        assert r.status_code == 400, r.text
        # NaN / Infinity are not JSON at all (refused as such); a finite-but-wrong value names its field
        assert err["field"] == param or err["message"].startswith("request body is not valid JSON"), err
        assert proxy.recorder.get(h.rollout_id).accepting  # nothing changed: it can still be finished properly
        assert (await proxy.afinish_rollout(h.rollout_id, reward=1.0)).reward == 1.0


def _serve(script, db, port, token):
    import os
    import subprocess
    import sys

    env = {**os.environ, "OPENFORGE_ADMIN_TOKEN": token}
    proc = subprocess.Popen([sys.executable, "-m", "openforge.cli.main", "proxy", "serve", "--backend",
                             f"scripted:{script}", "--port", str(port), "--store", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    for _ in range(40):
        line = proc.stdout.readline()
        if "openforge proxy serving" in line:
            return proc
        assert line, "the proxy did not start"
    raise AssertionError("the proxy did not print its URL")


def test_rollouts_open_when_the_proxy_died_are_finished_after_a_restart(tmp_path):
    import signal
    import socket

    script, db, token = tmp_path / "policy.yaml", tmp_path / "s.db", "adm-restart"
    script.write_text("turns:\n  - text: one\n  - text: two\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url, admin = f"http://127.0.0.1:{port}", {"authorization": f"Bearer {token}"}
    proc = _serve(script, db, port, token)
    try:
        opened = [httpx.post(f"{url}/admin/rollouts", json={"task_id": f"t{i}", "harness": "react"},
                             headers=admin).json() for i in range(2)]
        client = openai.OpenAI(base_url=opened[0]["openai_base_url"], api_key=opened[0]["api_key"], max_retries=0)
        said = [client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"turn {i}"}])
                .choices[0].message.content for i in range(2)]
        # each call was logged before its reply and confirmed delivered just after it: wait until both
        # confirmations are on disk (a call whose confirmation a crash lost reads back delivery_uncertain)
        with TrajectoryStore(db) as store:
            for _ in range(200):
                if [c.delivery_uncertain for c in store.calls(opened[0]["rollout_id"])] == [False, False]:
                    break
                time.sleep(0.05)
            assert [c.delivery_uncertain for c in store.calls(opened[0]["rollout_id"])] == [False, False]
    finally:
        proc.send_signal(signal.SIGKILL)  # no chance to finish anything
        proc.wait(20)
    assert said == ["one", "two"]
    proc = _serve(script, db, port, token)
    try:
        listed = httpx.get(f"{url}/admin/rollouts", headers=admin).json()["open"]
        assert [(r["rollout_id"], r["calls"], r["orphaned"]) for r in listed] == [
            (opened[0]["rollout_id"], 2, True), (opened[1]["rollout_id"], 0, True)]
        rid = opened[0]["rollout_id"]
        snap = httpx.get(f"{url}/admin/rollouts/{rid}", headers=admin).json()
        assert [c["index"] for c in snap["calls"]] == [0, 1]
        # the old harness's key died with the old proxy: its calls are refused, not silently lost
        late = openai.OpenAI(base_url=opened[0]["openai_base_url"], api_key=opened[0]["api_key"], max_retries=0)
        with pytest.raises(openai.PermissionDeniedError):
            late.chat.completions.create(model="m", messages=MSG)
        traj = httpx.post(f"{url}/admin/rollouts/{rid}/finish", json={"reward": 1.0}, headers=admin).json()
        assert traj["status"] == "success" and traj["task_id"] == "t0" and traj["harness"] == "react"
        assert [c["response"]["text"] for c in traj["calls"]] == said
        assert sorted(i for seg in traj["segments"] for i in seg["call_indices"]) == [0, 1]
        assert "recovered" in traj["metadata"]
        gone = httpx.post(f"{url}/admin/rollouts/{opened[1]['rollout_id']}/finish", json={"status": "cancelled"},
                          headers=admin).json()
        assert gone["status"] == "cancelled" and gone["calls"] == []
        assert httpx.get(f"{url}/admin/rollouts", headers=admin).json()["open"] == []
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(20)
    with TrajectoryStore(db) as store:
        assert store.open_rollouts() == []
        assert store.get_trajectory(rid).model_dump(mode="json") == traj
