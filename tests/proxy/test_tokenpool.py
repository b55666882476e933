"""Large prompts render and tokenize in worker processes: the ids are the in-process ids (full renders
and splices onto a previous call's exact tokens), a large request through the real SDK is never
tokenized in the serving process, a worker that dies costs its one call a retryable 503 and is replaced,
and no worker outlives the proxy — stopped, or killed outright."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openforge.proxy.backends.scripted import ScriptedBackend
from openforge.proxy.render import Head, Renderer
from openforge.proxy.server import ProxyServer
from openforge.proxy.tokenpool import TokenPool

from .conftest import TOOLS

ROOT = Path(__file__).resolve().parents[2]
PIECES = ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<think>", "\n", " ", "  ", "héllo", "日本語",
          "user", '{"a": 1}', "\t", "🙂", "x", "assistant"]
TEXT = st.lists(st.sampled_from(PIECES), max_size=10).map("".join) | st.text(max_size=30)


def source_text(n: int) -> str:
    """``n`` characters of this repository's own source (text a harness might send), repeated as needed."""
    parts, size = [], 0
    while size < n:
        for p in sorted((ROOT / "openforge").rglob("*.py")):
            parts.append(p.read_text())
            size += len(parts[-1])
            if size >= n:
                break
    return "".join(parts)[:n]


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture(scope="module")
def pool(tokenizer):
    p = TokenPool(Renderer(tokenizer), size=1)
    yield p
    p.close()


@st.composite
def conversations(draw):
    msgs = [{"role": "system", "content": draw(TEXT)}] if draw(st.booleans()) else []
    for i in range(draw(st.integers(1, 3))):
        if i:
            msgs.append({"role": "assistant", "content": draw(TEXT)})
        msgs.append({"role": "user", "content": draw(TEXT)})
    return msgs, (TOOLS if draw(st.booleans()) else None)


@st.composite
def turns(draw):
    """An assistant turn as the policy generated it (text, reasoning, a tool call) and what follows it."""
    reasoning = draw(st.none() | TEXT.filter(lambda t: t.strip() != ""))
    call = draw(st.none() | st.fixed_dictionaries({"command": TEXT}))
    text = draw(TEXT)
    follow = ({"role": "tool", "content": draw(TEXT), "tool_call_id": "c1"} if call is not None
              else {"role": "user", "content": draw(TEXT)})
    return text, reasoning, call, follow


def _assistant(text, reasoning, call) -> dict:
    msg = {"role": "assistant", "content": text}
    if reasoning:
        msg["reasoning_content"] = reasoning
    if call is not None:
        msg["tool_calls"] = [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": call}}]
    return msg


def _same(a, b) -> None:
    assert (a.ids, a.spliced, a.system_prefix_len) == (b.ids, b.spliced, b.system_prefix_len)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conversations())
def test_pool_ids_equal_in_process_ids(pool, conv):
    msgs, tools = conv
    _same(asyncio.run(pool.render(msgs, tools, [])), pool.renderer.render(msgs, tools))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conversations(), turns(), st.booleans())
def test_pool_splices_exactly_as_in_process(pool, conv, turn, edit):
    """A continuation is spliced onto the previous call's exact prompt + output ids in the worker as in
    process (heads travel without their ids); an edited history renders in full in both."""
    r = pool.renderer
    msgs, tools = conv
    text, reasoning, call, follow = turn
    out = r.encode(r.format_output(text, reasoning, [("bash", call)] if call is not None else []))
    assistant = _assistant(text, reasoning, call)
    head = Head(messages=[*msgs, assistant], tools_key=r.tools_key(tools), ids=r.encode_rendered(r.text(msgs, tools)) + out,
                ended_with_eos=out[-1] == r.eos_id, system_prefix_len=r.system_prefix_len(msgs, tools))
    other = Head(messages=[{"role": "user", "content": "another lineage"}], tools_key=r.tools_key(tools),
                 ids=[1, 2, 3], ended_with_eos=True, system_prefix_len=0)
    if edit:
        assistant = {**assistant, "content": text + " (edited)"}
    nxt = [*msgs, assistant, follow]
    inproc = r.render(nxt, tools, [head, other])
    _same(asyncio.run(pool.render(nxt, tools, [head, other])), inproc)
    assert not (edit and inproc.spliced)


def _proxy(tokenizer, **kw) -> ProxyServer:
    return ProxyServer(ScriptedBackend({"turns": [], "final": "ok"}, tokenizer=tokenizer), **kw)


async def test_large_prompt_is_tokenized_in_a_worker_not_in_the_server(tokenizer):
    big = source_text(200_000)
    async with _proxy(tokenizer, token_workers=1) as proxy:
        r = proxy.engine.renderer
        seen: list[int] = []
        real = r.encode
        r.encode = lambda text: (seen.append(len(text)), real(text))[1]
        try:
            h = proxy.create_rollout("t")
            c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
            msgs = [{"role": "user", "content": big}]
            first = await c.chat.completions.create(model="m", messages=msgs)
            msgs += [{"role": "assistant", "content": first.choices[0].message.content},
                     {"role": "user", "content": "and now? " + big[:50_000]}]
            await c.chat.completions.create(model="m", messages=msgs)
            assert max(seen, default=0) < 1000  # the serving process encoded the short answers only
        finally:
            del r.encode
        assert proxy.engine.pool.started == 1
        c0, c1 = proxy.get_trajectory(h.rollout_id).calls
        assert c0.prompt_ids == r.encode_rendered(r.text(msgs[:1], None))
        assert c1.prompt_ids[:len(c0.prompt_ids) + len(c0.output_ids)] == c0.prompt_ids + c0.output_ids  # spliced
        assert c1.prompt_ids == r.encode_rendered(r.text(msgs, None))


async def _kill_when_busy(pool: TokenPool) -> int:
    for _ in range(6000):
        if pool.busy_pids:
            victim = pool.busy_pids[0]
            os.kill(victim, signal.SIGKILL)
            return victim
        await asyncio.sleep(0.005)
    raise AssertionError("the worker never got the call")


async def test_a_crashed_worker_fails_one_call_with_a_retryable_503_and_is_replaced(tokenizer):
    big = source_text(1_000_000)  # seconds of tokenizing: time to kill the worker mid-call
    async with _proxy(tokenizer, token_workers=1) as proxy:
        pool = proxy.engine.pool
        h = proxy.create_rollout("t")
        c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
        msgs = [{"role": "user", "content": big}]
        call = asyncio.ensure_future(c.chat.completions.create(model="m", messages=msgs))
        victim = await _kill_when_busy(pool)
        with pytest.raises(openai.InternalServerError) as e:
            await call
        assert e.value.status_code == 503 and e.value.type == "api_error" and "retry" in e.value.message
        assert e.value.response.headers.get("retry-after") == "1"
        assert not alive(victim) and not os.path.exists(f"/proc/{victim}")  # killed and reaped
        assert proxy.get_trajectory(h.rollout_id).calls == []  # nothing recorded for the failed attempt
        # The SDK's own retry gets through: a new worker serves the retried call.
        retrying = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=2)
        call = asyncio.ensure_future(retrying.chat.completions.create(model="m", messages=msgs))
        second = await _kill_when_busy(pool)
        r = await call
        assert r.choices[0].message.content == "ok" and pool.started == 3
        assert pool.pids and victim not in pool.pids and second not in pool.pids
        calls = proxy.get_trajectory(h.rollout_id).calls
        assert len(calls) == 1 and calls[0].prompt_ids == proxy.renderer.encode_rendered(proxy.renderer.text(msgs, None))


async def test_workers_stop_with_the_proxy(tokenizer):
    async with _proxy(tokenizer, token_workers=2) as proxy:
        pool = proxy.engine.pool
        msgs = [{"role": "user", "content": "hello"}]
        await asyncio.gather(*(pool.render(msgs, None, []) for _ in range(2)))
        pids = pool.pids
        assert len(pids) == 2 and all(alive(p) for p in pids)
    assert pool.pids == [] and not any(os.path.exists(f"/proc/{p}") for p in pids)


def test_workers_exit_when_the_proxy_process_is_killed(tokenizer, tmp_path):
    script = tmp_path / "serve.py"
    script.write_text(textwrap.dedent("""
        import asyncio
        from openforge.proxy.backends.scripted import ScriptedBackend
        from openforge.proxy.server import ProxyServer

        async def main():
            async with ProxyServer(ScriptedBackend({"turns": []}), token_workers=2) as proxy:
                pool = proxy.engine.pool
                await asyncio.gather(*(pool.render([{"role": "user", "content": "hi"}], None, []) for _ in range(2)))
                print(*pool.pids, flush=True)
                await asyncio.sleep(600)

        asyncio.run(main())
    """))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 2 and all(alive(p) for p in pids)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.time() + 15
    while any(alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in pids)
