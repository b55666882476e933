"""A call whose reply may never have reached its client is kept but never trained (``delivery_uncertain``).

The proxy makes a call durable before any byte of its reply. The faulty components played here: a
client (the real ``openai`` / ``anthropic`` SDKs) that drops its connection while the proxy is still
making the answered call durable, mid-stream or by timing out; a client that stops reading a large reply
and then goes away; and a proxy that dies while the reply is still going out (a proxy restarted on the
same store finishes the rollout from the call log). In every case the call is recorded — status ``ok``,
its tokens and logprobs kept — with ``delivery_uncertain: true``, in memory and in the store, and it
trains no token. A reply that did go out whole (or a retry's replay of it) confirms the call.
"""

from __future__ import annotations

import asyncio
import json
import socket

import anthropic
import httpx
import openai
import pytest

from openforge.core.trajectory import Trajectory, TrajectoryGroup
from openforge.core.types import CallStatus, ModelCall
from openforge.proxy.backends.scripted import ScriptedBackend
from openforge.proxy.delivery import SENT_EXTENSION, Delivered
from openforge.proxy.recorder import Recorder
from openforge.proxy.server import ProxyServer
from openforge.store import TrajectoryStore
from openforge.train.grpo import build_samples

MSG = [{"role": "user", "content": "hi"}]
REPLY = "Here is a fairly long answer that streams in several chunks before it is complete."


class GatedStore(TrajectoryStore):
    """A store whose durable write of an answered call waits for the test (a slow disk, held open)."""

    def __init__(self, path):
        super().__init__(path)
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    async def aappend_call(self, rollout_id: str, call: ModelCall) -> None:
        if call.status == CallStatus.OK:
            self.entered.set()
            await self.gate.wait()
        await super().aappend_call(rollout_id, call)


def _other(reward: float) -> Trajectory:
    c = ModelCall(index=0, prompt_ids=[1, 2], output_ids=[3], output_logprobs=[-1.0])
    return Trajectory(rollout_id="other", task_id="t", reward=reward, calls=[c]).build()


def _assert_kept_not_trained(traj: Trajectory) -> None:
    call = traj.calls[0]
    assert call.status == CallStatus.OK and call.output_ids and len(call.output_logprobs) == len(call.output_ids)
    assert call.delivery_uncertain and not call.trainable
    assert traj.segments == [] and traj.metrics["skipped_calls"] == {"0": "delivery_uncertain"}
    samples = build_samples([TrajectoryGroup(task_id="t", trajectories=[traj, _other(0.0)])])
    assert traj.rollout_id not in {s.rollout_id for s in samples}


async def _until(cond, what: str, timeout_s: float = 20.0) -> None:
    for _ in range(int(timeout_s / 0.01)):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
async def gated(tmp_path, tokenizer):
    store = GatedStore(tmp_path / "s.db")
    async with ProxyServer(ScriptedBackend({"turns": [REPLY]}, tokenizer=tokenizer), store=store) as proxy:
        yield proxy, store
    store.close()


@pytest.mark.parametrize("sdk", ["openai-chat", "anthropic-messages"])
async def test_a_client_that_drops_mid_stream_while_the_call_is_made_durable(gated, sdk):
    proxy, store = gated
    h = proxy.create_rollout("t")
    st = proxy.recorder.get(h.rollout_id)
    got = []
    if sdk == "openai-chat":
        c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
        s = await c.chat.completions.create(model="m", messages=MSG, stream=True)
        async for chunk in s:
            if chunk.choices and chunk.choices[0].delta.content:
                got.append(chunk.choices[0].delta.content)
                await asyncio.wait_for(store.entered.wait(), 20)  # generation over, the call being made durable
                break
        await s.close()  # the connection goes: the closing events never arrive
    else:
        a = anthropic.AsyncAnthropic(base_url=h.anthropic_base_url, api_key=h.api_key, max_retries=0)
        async with a.messages.stream(model="claude", max_tokens=200, messages=MSG) as s:
            async for ev in s:
                if ev.type == "text":
                    got.append(ev.text)
                    await asyncio.wait_for(store.entered.wait(), 20)
                    break
    assert got and "".join(got) != REPLY  # the client saw part of the answer, never all of it
    await _until(lambda: 0 not in st.replying, "the proxy to see the client go")
    store.gate.set()
    traj = await proxy.afinish_rollout(h.rollout_id, reward=1.0)
    _assert_kept_not_trained(traj)
    assert traj.calls[0].response["text"] == REPLY  # the whole answer is kept for inspection
    stored = store.get_trajectory(h.rollout_id)
    assert stored.calls[0].delivery_uncertain and stored.segments == []


async def test_a_client_that_gives_up_while_the_call_is_made_durable(gated):
    """The non-streaming form: the SDK call is abandoned (a timeout, a cancelled task) while the
    answered call is being written."""
    proxy, store = gated
    h = proxy.create_rollout("t")
    c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
    call = asyncio.ensure_future(c.chat.completions.create(model="m", messages=MSG))
    await asyncio.wait_for(store.entered.wait(), 30)
    call.cancel()  # the SDK's connection is closed
    with pytest.raises(asyncio.CancelledError):
        await call
    await _until(lambda: 0 not in proxy.recorder.get(h.rollout_id).replying, "the proxy to see the client go")
    store.gate.set()
    _assert_kept_not_trained(await proxy.afinish_rollout(h.rollout_id, reward=1.0))


async def test_delivered_replies_confirm_their_calls_in_memory_and_in_the_store(tmp_path, tokenizer):
    store = TrajectoryStore(tmp_path / "s.db")
    try:
        async with ProxyServer(ScriptedBackend({"turns": [REPLY, "two", "three"]}, tokenizer=tokenizer),
                               store=store) as proxy:
            h = proxy.create_rollout("t")
            c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
            r = await c.chat.completions.create(model="m", messages=MSG)
            s = await c.chat.completions.create(model="m", stream=True, messages=[
                *MSG, {"role": "assistant", "content": r.choices[0].message.content},
                {"role": "user", "content": "more"}])
            assert "".join([ch.choices[0].delta.content or "" async for ch in s if ch.choices]) == "two"
            a = anthropic.AsyncAnthropic(base_url=h.anthropic_base_url, api_key=h.api_key, max_retries=0)
            m = await a.messages.create(model="claude", max_tokens=50, messages=MSG)
            assert m.content[0].text == "three"
            traj = proxy.finish_rollout(h.rollout_id, reward=1.0)  # at once, as drivers do
        assert [c.delivery_uncertain for c in traj.calls] == [False, False, False]
        assert sorted(i for seg in traj.segments for i in seg.call_indices) == [0, 1, 2]
        assert [c.delivery_uncertain for c in store.calls(h.rollout_id)] == [False, False, False]
        assert store.get_trajectory(h.rollout_id).model_dump() == traj.model_dump()
    finally:
        store.close()


def _raw_request(path: str, key: str, body: dict, retry: int = 0) -> bytes:
    data = json.dumps(body).encode()
    extra = f"x-stainless-retry-count: {retry}\r\n" if retry else ""
    return (f"POST {path} HTTP/1.1\r\nhost: proxy\r\nauthorization: Bearer {key}\r\ncontent-type: application/json"
            f"\r\ncontent-length: {len(data)}\r\n{extra}\r\n").encode() + data


async def test_a_reply_cut_off_while_going_out_and_a_proxy_that_died_meanwhile(tmp_path, tokenizer):
    """A large reply the client stops reading sits in the proxy's buffers: the call is durable and, in
    the store, still uncertain — what a proxy that dies now leaves behind; a proxy restarted on the store
    finishes the rollout from the call log without training it. The client then goes away: the first
    proxy records it uncertain too. A retry of the same request gets the answer replayed, read whole
    this time: that confirms the call."""
    big = "word " * 100_000  # ~500 KB of JSON: more than a Unix socket takes without a reader
    sock_path = str(tmp_path / "p.sock")
    store = TrajectoryStore(tmp_path / "s.db")
    proxy = ProxyServer(ScriptedBackend({"turns": [big]}, tokenizer=tokenizer), store=store, host=None, uds=sock_path)
    await proxy.start()
    try:
        h = proxy.create_rollout("t")
        st = proxy.recorder.get(h.rollout_id)
        body = {"model": "m", "messages": MSG}
        path = f"/r/{h.rollout_id}/v1/chat/completions"
        reader, writer = await asyncio.open_unix_connection(sock_path)
        writer.transport.set_write_buffer_limits(0)
        writer.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        writer.write(_raw_request(path, h.api_key, body))
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")  # the reply has begun; the client reads no further
        assert head.startswith(b"HTTP/1.1 200")
        await _until(lambda: len(st.calls) == 1, "the call to be durable")
        await asyncio.sleep(0.2)
        assert 0 in st.replying  # still going out

        # the proxy "dies" here: the store holds the call, uncertain; a restarted proxy finishes it so
        with TrajectoryStore(tmp_path / "s.db") as other:
            assert [c.delivery_uncertain for c in other.calls(h.rollout_id)] == [True]
            _assert_kept_not_trained(Recorder(other).finish(h.rollout_id, reward=1.0))

        writer.transport.abort()  # the client goes away without reading the rest
        await _until(lambda: 0 not in st.replying, "the proxy to give the reply up")
        assert st.calls[0].delivery_uncertain

        # the SDK's retry: the same request, marked as a retry, gets the recorded answer again
        t = httpx.AsyncHTTPTransport(uds=sock_path)
        async with httpx.AsyncClient(transport=t, base_url="http://proxy") as client:
            r = await client.post(path, content=json.dumps(body), headers={  # the same bytes: the same request
                "authorization": f"Bearer {h.api_key}", "content-type": "application/json",
                "x-stainless-retry-count": "1"})
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == big.strip()
        # confirmed once the proxy saw its last bytes leave (a large reply: a moment after the client has them)
        await _until(lambda: not st.calls[0].delivery_uncertain, "the replay to confirm the call")
        assert len(st.calls) == 1  # replayed, not recorded twice
        await _until(lambda: [c.delivery_uncertain for c in store.calls(h.rollout_id)] == [False],
                     "the confirmation to be written")
    finally:
        await proxy.stop()
        store.close()


async def _stuck_reply(tmp_path, tokenizer):
    """A proxy on a Unix socket and a client whose large reply has begun but is not being read."""
    big = "word " * 100_000
    sock_path = str(tmp_path / "p.sock")
    store = TrajectoryStore(tmp_path / "s.db")
    proxy = ProxyServer(ScriptedBackend({"turns": [big]}, tokenizer=tokenizer), store=store, host=None, uds=sock_path)
    await proxy.start()
    h = proxy.create_rollout("t")
    reader, writer = await asyncio.open_unix_connection(sock_path)
    writer.write(_raw_request(f"/r/{h.rollout_id}/v1/chat/completions", h.api_key, {"model": "m", "messages": MSG}))
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    st = proxy.recorder.get(h.rollout_id)
    await _until(lambda: len(st.calls) == 1, "the call to be durable")
    return proxy, store, h, st, reader, writer, head


async def test_finish_waits_for_a_reply_still_going_out(tmp_path, tokenizer):
    """A driver that finishes while the last reply is still being written (its client reads slowly)
    waits for it (within the finish's wait) and trains the call once it went out whole."""
    proxy, store, h, st, reader, writer, head = await _stuck_reply(tmp_path, tokenizer)
    try:
        fin = asyncio.ensure_future(proxy.afinish_rollout(h.rollout_id, reward=1.0, wait_s=30))
        await asyncio.sleep(0.3)
        assert not fin.done() and 0 in st.replying
        length = int(next(v for k, _, v in (ln.partition(b":") for ln in head.split(b"\r\n"))
                          if k.lower() == b"content-length"))
        assert json.loads(await reader.readexactly(length))["choices"][0]["finish_reason"] == "stop"
        traj = await asyncio.wait_for(fin, 30)
        assert not traj.calls[0].delivery_uncertain and [s.call_indices for s in traj.segments] == [[0]]
        writer.close()
    finally:
        await proxy.stop()
        store.close()


class _Reply:
    """A response as the model routes build them: status, headers, and an ASGI body."""

    status_code, raw_headers = 200, []

    def __init__(self, *, fail: bool = False):
        self.fail = fail

    async def __call__(self, scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"part", "more_body": True})
        if self.fail:
            raise ConnectionResetError("the connection broke")
        await send({"type": "http.response.body", "body": b"end", "more_body": False})


@pytest.mark.parametrize(("reply", "whole", "server_says", "expect"), [
    ("ok", True, None, True),       # the last body message went out (a server without the extension)
    ("ok", True, True, True),       # ... and the proxy's own server says the socket took it all
    ("ok", True, False, False),     # the server dropped it: the connection was gone
    ("ok", False, True, False),     # the body ended, but not with the answer's closing events
    ("fail", True, True, False),    # the send broke midway
])
async def test_delivered_reports_exactly_once_whether_the_reply_went_out_whole(reply, whole, server_says, expect):
    reports: list[bool] = []

    async def flushed():
        return server_says

    async def send(message):
        pass

    scope = {"type": "http", "extensions": {SENT_EXTENSION: flushed} if server_says is not None else {}}
    d = Delivered(_Reply(fail=reply == "fail"), reports.append, whole=lambda: whole)
    try:
        await d(scope, None, send)
    except ConnectionResetError:
        pass
    assert reports == [expect]
