"""Proxy overhead: direct calls vs openforge (`openai:` pass-through) vs a bare relay vs LiteLLM's proxy.

Everything runs on loopback against a fake OpenAI-compatible upstream (a raw asyncio HTTP server in
its own process) that answers in two ways, chosen by the request's model name:

* **instant** (``fake``): the whole answer at once — isolates the proxy's own CPU cost;
* **model-like** (``sim``): a streamed answer of ``--tokens`` tokens, the first after ``--ttft-ms``,
  then one SSE chunk every ``--itl-ms`` (default 64 tokens, 50 ms + 20 ms/token: a fast GPU server
  under a 256-way load) — what a proxy in front of a real policy server sees.

One run measures, for each target:

* added latency at concurrency 1: p50 / p99 of non-streaming chat completions (instant), minus direct;
* throughput at 64 and 256 concurrent streaming requests, instant and model-like, as a ratio of
  direct, and the proxy process's CPU time per request;
* the live streaming path: a proxy with the ``scripted:`` back-end serving streamed vs non-streamed
  requests, as a ratio.

openforge runs as ``forge proxy serve --backend openai:...`` (every call parsed, tokenized locally and
recorded in memory — LiteLLM records nothing, so this row compares like with like) and, as
``openforge+store``, with ``--store DB`` as in training (every call fsynced to SQLite before its last
byte: at concurrency 1 that adds the disk's fsync time). The **relay** is the least a Python proxy can
do (uvicorn + raw ASGI + aiohttp passing bytes through, nothing parsed or recorded): its instant
column is the ceiling for any Python proxy on this machine. The targets of the proxy issue: openforge
adds <= 1 ms p50, keeps >= 90 % of direct throughput at 256 streams (judged with the model-like
upstream: with the instant one the load client and upstream cost ~0.07 ms per request in all, so even
the bare relay keeps only ~20 %), and adds at most a fifth of LiteLLM's overhead.

LiteLLM runs from its own virtualenv so it cannot disturb openforge's dependencies:
``python -m venv /tmp/litellm-venv && /tmp/litellm-venv/bin/pip install 'litellm[proxy]'``; point
``--litellm`` at its ``litellm`` executable (default: ``$LITELLM_BIN``, then ``litellm`` on PATH, then
``/tmp/litellm-venv/bin/litellm``; ``none`` skips it). Without it the LiteLLM row is skipped.

Usage: ``python benchmarks/proxy_overhead.py [--requests 400] [--seconds 5] [--model-seconds 10]
[--tokens 64] [--ttft-ms 50] [--itl-ms 20] [--litellm PATH|none]``
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None

# ---------------------------------------------------------------------------------------------
# Fake upstream: minimal HTTP/1.1 keep-alive server answering chat completions (JSON or SSE).
# ---------------------------------------------------------------------------------------------

_BASE = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": "fake"}
_MODELS = json.dumps({"object": "list", "data": [{"id": "fake", "object": "model"}]}).encode()


def _chunk(delta: dict, finish: str | None = None, **extra) -> bytes:
    return b"data: " + json.dumps({**_BASE, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                                   **extra}).encode() + b"\n\n"


class Model:
    """What the fake upstream answers: ``tokens`` tokens, the first after ``ttft_ms``, then one every
    ``itl_ms`` (0/0: everything at once, the pure proxy cost). Streamed answers are SSE chunks, one
    per token, written as the simulated model "generates" them."""

    def __init__(self, tokens: int, ttft_ms: float, itl_ms: float):
        self.tokens, self.ttft, self.itl = tokens, ttft_ms / 1000, itl_ms / 1000
        words = [f"tok{i} " for i in range(tokens)]
        usage = {"prompt_tokens": 9, "completion_tokens": tokens, "total_tokens": 9 + tokens}
        self.json = json.dumps({"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": "fake",
                                "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(words)},
                                             "finish_reason": "stop"}], "usage": usage}).encode()
        self.first = _chunk({"role": "assistant", "content": ""}) + _chunk({"content": words[0]})
        self.middle = [_chunk({"content": w}) for w in words[1:]]
        self.last = (_chunk({}, "stop") + b"data: " + json.dumps({**_BASE, "choices": [], "usage": usage}).encode()
                     + b"\n\ndata: [DONE]\n\n")

    def sse_parts(self) -> list[bytes]:
        """The SSE body in the pieces a real server writes: one per token (the last with the end)."""
        parts = [self.first, *self.middle]
        parts[-1] += self.last
        return parts


class _Upstream(asyncio.Protocol):
    """Answers ``"model": "sim"`` requests as the simulated model, anything else at once."""

    model: Model
    instant: Model

    def connection_made(self, transport):
        self.t, self.buf = transport, b""

    def data_received(self, data):
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin1")
            n = 0
            for line in head.split("\r\n")[1:]:
                k, _, v = line.partition(":")
                if k.strip().lower() == "content-length":
                    n = int(v)
            if len(self.buf) < end + 4 + n:
                return
            body, self.buf = self.buf[end + 4 : end + 4 + n], self.buf[end + 4 + n :]
            compact = body.replace(b" ", b"")
            m = self.model if b'"model":"sim"' in compact else self.instant
            if head.startswith("GET"):
                self._whole(_MODELS, 0.0)
            elif b'"stream":true' in compact:
                self._stream(m)
            else:
                self._whole(m.json, m.ttft + max(0, m.tokens - 1) * m.itl)

    def _whole(self, payload: bytes, delay: float) -> None:
        out = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
               + str(len(payload)).encode() + b"\r\n\r\n" + payload)
        if delay > 0:  # responses stay in order: one request at a time per connection
            asyncio.get_running_loop().call_later(delay, self.t.write, out)
        else:
            self.t.write(out)

    def _stream(self, m: Model) -> None:
        loop = asyncio.get_running_loop()
        parts = [b"%x\r\n%s\r\n" % (len(p), p) for p in m.sse_parts()]
        parts[-1] += b"0\r\n\r\n"
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        if m.ttft == 0 and m.itl == 0:
            self.t.write(head + b"".join(parts))
            return

        def step(i: int) -> None:
            if self.t.is_closing():
                return
            self.t.write(parts[i])
            if i + 1 < len(parts):
                loop.call_later(m.itl, step, i + 1)

        self.t.write(head)
        loop.call_later(m.ttft, step, 0)


def run_upstream(port: int, model: Model) -> None:
    _Upstream.model, _Upstream.instant = model, Model(8, 0, 0)

    async def main():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_Upstream, "127.0.0.1", port, backlog=4096)
        async with server:
            await server.serve_forever()

    (uvloop.run if uvloop else asyncio.run)(main())


# ---------------------------------------------------------------------------------------------
# Relay: the least a Python proxy can do (uvicorn + raw ASGI + aiohttp, bytes passed through
# untouched, nothing parsed or recorded) — the floor any Python ASGI proxy sits on.
# ---------------------------------------------------------------------------------------------


def run_relay(port: int, up: int) -> None:
    import aiohttp
    import uvicorn

    session = None

    async def app(scope, receive, send):
        nonlocal session
        if scope["type"] != "http":
            return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        if session is None:
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=4096))
        async with session.post(f"http://127.0.0.1:{up}/v1/chat/completions", data=body,
                                headers={"content-type": "application/json"}) as r:
            await send({"type": "http.response.start", "status": r.status,
                        "headers": [(b"content-type", r.headers["content-type"].encode())]})
            async for chunk in r.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="off",
                proxy_headers=False, backlog=4096)


# ---------------------------------------------------------------------------------------------
# Load client: one keep-alive HTTP/1.1 connection per worker (identical for every target).
# ---------------------------------------------------------------------------------------------


class Conn:
    def __init__(self, host: str, port: int, headers: dict[str, str]):
        self.host, self.port, self.headers = host, port, headers
        self.r = self.w = None

    async def request(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self.w is None:
            self.r, self.w = await asyncio.open_connection(self.host, self.port)
        hdr = "".join(f"{k}: {v}\r\n" for k, v in self.headers.items())
        self.w.write(f"POST {path} HTTP/1.1\r\nhost: {self.host}\r\ncontent-type: application/json\r\n{hdr}"
                     f"content-length: {len(body)}\r\n\r\n".encode() + body)
        head = await self.r.readuntil(b"\r\n\r\n")
        lines = head.decode("latin1").split("\r\n")
        status = int(lines[0].split()[1])
        h = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
        if "content-length" in h:
            data = await self.r.readexactly(int(h["content-length"]))
        else:  # chunked
            data = b""
            while True:
                size = int((await self.r.readuntil(b"\r\n"))[:-2].split(b";")[0], 16)
                chunk = await self.r.readexactly(size + 2)
                if size == 0:
                    break
                data += chunk[:-2]
        if h.get("connection", "").lower() == "close":
            self.w.close()
            self.r = self.w = None
        return status, data

    def close(self):
        if self.w is not None:
            self.w.close()


class Target:
    def __init__(self, name: str, base: str, path_prefix: str, headers: dict[str, str]):
        self.name, self.headers = name, headers
        hostport = base.split("://", 1)[1].split("/", 1)[0]
        self.host, port = hostport.rsplit(":", 1)
        self.port = int(port)
        self.path = path_prefix + "/chat/completions"
        self.pid: int | None = None  # the proxy process, for its CPU time


def _body(i: int, stream: bool, model: str = "fake") -> bytes:
    return json.dumps({"model": model, "stream": stream, "max_tokens": 256,
                       "messages": [{"role": "user", "content": f"Say hello ({i})."}]}).encode()


_counter = 0


def _next() -> int:
    global _counter
    _counter += 1
    return _counter


async def latency(t: Target, n: int, warmup: int = 50) -> list[float]:
    c = Conn(t.host, t.port, t.headers)
    out = []
    for i in range(n + warmup):
        t0 = time.perf_counter()
        status, data = await c.request(t.path, _body(_next(), False))
        dt = time.perf_counter() - t0
        if status != 200:
            raise RuntimeError(f"{t.name}: HTTP {status}: {data[:300]!r}")
        if i >= warmup:
            out.append(dt * 1000)
    c.close()
    return out


async def throughput(t: Target, conc: int, seconds: float, stream: bool = True, model: str = "fake",
                     warmup: float = 1.0, stagger: float = 0.0) -> float:
    """Completed requests per second over ``seconds``, after ``warmup`` seconds of the same load.
    Workers start spread over ``stagger`` seconds (about one request's duration), so that long
    requests do not finish in waves of ``conc`` that make the count depend on where the window falls."""
    stop = time.perf_counter() + seconds + warmup
    start_count = time.perf_counter() + warmup
    done = 0
    errors = 0
    rng = random.Random(conc)

    async def worker():
        nonlocal done, errors
        await asyncio.sleep(rng.uniform(0, stagger))
        c = Conn(t.host, t.port, t.headers)
        while time.perf_counter() < stop:
            try:
                status, data = await c.request(t.path, _body(_next(), stream, model))
            except (OSError, asyncio.IncompleteReadError):
                errors += 1
                c = Conn(t.host, t.port, t.headers)
                continue
            if status == 200 and (data.rstrip().endswith(b"[DONE]") or not stream):
                if start_count <= time.perf_counter() <= stop:
                    done += 1
            else:
                errors += 1
        c.close()

    await asyncio.gather(*(worker() for _ in range(conc)))
    if errors:
        print(f"  ({t.name} @ {conc}: {errors} failed requests)", file=sys.stderr)
    return done / seconds


# ---------------------------------------------------------------------------------------------
# Process management
# ---------------------------------------------------------------------------------------------


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 90.0) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"port {port} did not open within {timeout}s")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def find_litellm(arg: str | None) -> str | None:
    if arg == "none":
        return None
    for cand in (arg, os.environ.get("LITELLM_BIN"), shutil.which("litellm"), "/tmp/litellm-venv/bin/litellm"):
        if cand and Path(cand).is_file():
            return cand
    return None


def start_openforge(up: int, log: Path, backend: str | None = None, store: bool = False) -> tuple[subprocess.Popen, Target]:
    """``forge proxy serve`` in pass-through mode; with ``store`` every call is also fsynced to SQLite
    before its last byte, as in training."""
    import httpx

    port = free_port()
    env = {**os.environ, "OPENFORGE_ADMIN_TOKEN": "bench-admin"}
    spec = backend or f"openai:http://127.0.0.1:{up}/v1"  # the request's model name goes upstream
    extra = ["--store", str(log.with_suffix(".db"))] if store else []
    proc = subprocess.Popen([sys.executable, "-m", "openforge.cli.main", "proxy", "serve", "--backend", spec,
                             "--port", str(port), *extra], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    wait_port(port, proc)
    h = httpx.post(f"http://127.0.0.1:{port}/admin/rollouts", json={"task_id": "bench"},
                   headers={"authorization": "Bearer bench-admin"}).json()
    t = Target("openforge" + ("+store" if store else ""), h["openai_base_url"], f"/r/{h['rollout_id']}/v1",
               {"authorization": f"Bearer {h['api_key']}"})
    t.pid = proc.pid
    return proc, t


def start_relay(up: int, log: Path) -> tuple[subprocess.Popen, Target]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--relay", str(port), "--upstream", str(up)],
                            stdout=log.open("w"), stderr=subprocess.STDOUT)
    wait_port(port, proc)
    t = Target("relay", f"http://127.0.0.1:{port}", "/v1", {})
    t.pid = proc.pid
    return proc, t


def start_litellm(binary: str, up: int, tmp: Path, log: Path) -> tuple[subprocess.Popen, Target]:
    port = free_port()
    cfg = tmp / "litellm.yaml"
    models = "".join(f"  - model_name: {m}\n    litellm_params:\n      model: openai/{m}\n"
                     f"      api_base: http://127.0.0.1:{up}/v1\n      api_key: sk-fake\n" for m in ("fake", "sim"))
    cfg.write_text("model_list:\n" + models + "litellm_settings:\n  telemetry: false\n  drop_params: true\n")
    key = "sk-" + os.urandom(32).hex()
    env = {**os.environ, "LITELLM_MASTER_KEY": key, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
           "LITELLM_LOG": "ERROR", "NO_DOCS": "True"}
    proc = subprocess.Popen([binary, "--config", str(cfg), "--host", "127.0.0.1", "--port", str(port),
                             "--num_workers", "1"], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    wait_port(port, proc, timeout=180)
    t = Target("litellm", f"http://127.0.0.1:{port}", "/v1", {"authorization": f"Bearer {key}"})
    t.pid = proc.pid
    return proc, t


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of a process so far (0 when there is none: direct calls)."""
    if not pid:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q / 100 * (len(xs) - 1)))]


async def measure(t: Target, args) -> dict[str, float]:
    lat = await latency(t, args.requests)
    res = {"p50": statistics.median(lat), "p99": pct(lat, 99)}
    model_s = (args.ttft_ms + args.itl_ms * (args.tokens - 1)) / 1000
    for kind, model, seconds, warmup, stagger in (("instant", "fake", args.seconds, 1.0, 0.0),
                                                  ("model", "sim", args.model_seconds, 2 * model_s, model_s)):
        for conc in (64, 256):
            c0 = cpu_seconds(t.pid)
            rps = await throughput(t, conc, seconds, model=model, warmup=warmup, stagger=stagger)
            res[f"{kind}{conc}"] = rps
            if conc == 256 and rps > 0:  # measured over warm-up + window (+ stragglers): an estimate
                res[f"{kind}_cpu_ms"] = 1000 * (cpu_seconds(t.pid) - c0) / (rps * (seconds + warmup))
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=400, help="sequential requests for the latency figures")
    ap.add_argument("--seconds", type=float, default=5.0, help="measuring time per instant-upstream throughput point")
    ap.add_argument("--model-seconds", type=float, default=10.0, help="measuring time per model-like throughput point")
    ap.add_argument("--tokens", type=int, default=64, help="tokens per answer of the model-like upstream")
    ap.add_argument("--ttft-ms", type=float, default=50.0, help="model-like upstream: time to the first token")
    ap.add_argument("--itl-ms", type=float, default=20.0, help="model-like upstream: time between tokens")
    ap.add_argument("--litellm", default=None, help="path of the litellm executable (own venv); 'none' skips it")
    ap.add_argument("--upstream", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--relay", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.relay:
        run_relay(args.relay, args.upstream)
        return
    if args.upstream:
        run_upstream(args.upstream, Model(args.tokens, args.ttft_ms, args.itl_ms))
        return
    tmp = Path(tempfile.mkdtemp(prefix="openforge-bench-"))
    up = free_port()
    upstream = subprocess.Popen([sys.executable, __file__, "--upstream", str(up), "--tokens", str(args.tokens),
                                 "--ttft-ms", str(args.ttft_ms), "--itl-ms", str(args.itl_ms)])
    procs = [upstream]
    results: dict[str, dict[str, float]] = {}
    run = uvloop.run if uvloop else asyncio.run
    results_live = None
    try:
        wait_port(up, upstream)
        print(f"fake upstream on 127.0.0.1:{up}: instant answers, and a model-like one streaming {args.tokens} tokens "
              f"(first after {args.ttft_ms:g} ms, then one every {args.itl_ms:g} ms); {os.cpu_count()} CPUs shared by "
              f"the load client, the upstream and the proxy")
        results["direct"] = run(measure(Target("direct", f"http://127.0.0.1:{up}", "/v1", {}), args))
        starts = {"openforge": start_openforge, "openforge+store": functools.partial(start_openforge, store=True),
                  "relay": start_relay}
        for name, start in starts.items():
            proc, t = start(up, tmp / f"{name}.log")
            procs.append(proc)
            try:
                results[t.name] = run(measure(t, args))
            finally:
                stop(proc)
        results_live = live_streaming(up, tmp, args, run)
        binary = find_litellm(args.litellm)
        if binary is None:
            print("LiteLLM: not installed (pip install 'litellm[proxy]' into its own venv, pass --litellm); skipped")
        else:
            try:
                proc, t = start_litellm(binary, up, tmp, tmp / "litellm.log")
                procs.append(proc)
                results["litellm"] = run(measure(t, args))
            except Exception as e:
                print(f"LiteLLM: could not run ({e}); log: {tmp / 'litellm.log'}")
    finally:
        for p in procs:
            stop(p)
    report(results, args)
    if results_live:
        js, ss = results_live
        print(f"live streaming (scripted back-end, tokens pushed in 4 chunks) at 64 concurrent: {ss:.0f} rps "
              f"streamed vs {js:.0f} rps non-streaming = {ss / js:.2f}x (same proxy, same run)")


_SCRIPT = 'turns: []\nfinal: "Hello from the scripted policy: this answer is streamed to the client in a few chunks."\n'


def live_streaming(up: int, tmp: Path, args, run) -> tuple[float, float] | None:
    """The live (incremental) SSE path's cost: one proxy with the scripted back-end serves the same
    answers streamed and not; the ratio is streamed / non-streaming requests per second."""
    try:
        from openforge.proxy.backends.transformers import load_tokenizer

        load_tokenizer("smollm2-135m")
    except Exception as e:
        print(f"live streaming: skipped (the scripted back-end needs the SmolLM2 tokenizer: {e})")
        return None
    script = tmp / "script.yaml"
    script.write_text(_SCRIPT)
    proc, t = start_openforge(up, tmp / "openforge-scripted.log", backend=f"scripted:{script}")
    try:
        js = run(throughput(t, 64, args.seconds, stream=False))
        ss = run(throughput(t, 64, args.seconds, stream=True))
    finally:
        stop(proc)
    return js, ss


def report(r: dict[str, dict[str, float]], args) -> None:
    d = r["direct"]
    print()
    print(f"{'':<15} {'latency at concurrency 1':^35} | {'throughput, instant upstream':^40} | "
          f"{'throughput, model-like upstream':^40}")
    print(f"{'target':<15} {'p50 ms':>8} {'p99 ms':>8} {'+p50 ms':>8} {'+p99 ms':>8} | {'rps@64':>8} {'rps@256':>8} "
          f"{'%direct':>8} {'cpu ms':>8}  | {'rps@64':>8} {'rps@256':>8} {'%direct':>8} {'cpu ms':>8}")
    for name, x in r.items():
        cpu = {k: (f"{x[k + '_cpu_ms']:8.3f}" if k + "_cpu_ms" in x else f"{'-':>8}") for k in ("instant", "model")}
        print(f"{name:<15} {x['p50']:8.3f} {x['p99']:8.3f} {x['p50'] - d['p50']:8.3f} {x['p99'] - d['p99']:8.3f} | "
              f"{x['instant64']:8.0f} {x['instant256']:8.0f} {100 * x['instant256'] / d['instant256']:7.1f}% {cpu['instant']}  | "
              f"{x['model64']:8.0f} {x['model256']:8.0f} {100 * x['model256'] / d['model256']:7.1f}% {cpu['model']}")
    print("(%direct at 256 streams; cpu ms: the proxy process's CPU time per request at 256 streams; "
          "openforge+store: every call fsynced to SQLite before its last byte, as in training)")
    o = r["openforge"]
    added = o["p50"] - d["p50"]
    print()
    print(f"openforge added p50 latency: {added:.3f} ms (target <= 1 ms: {'met' if added <= 1.0 else 'NOT met'})")
    keep = o["model256"] / d["model256"]
    print(f"openforge throughput at 256 streams, model-like upstream ({args.tokens} tokens, {args.ttft_ms:g} ms + "
          f"{args.itl_ms:g} ms/token): {100 * keep:.1f}% of direct (target >= 90%: {'met' if keep >= 0.9 else 'NOT met'})")
    rel = r.get("relay", {}).get("instant256", 0) / d["instant256"]
    print(f"instant upstream (CPU-bound: every request costs the proxy far more than the upstream and client "
          f"together): openforge {100 * o['instant256'] / d['instant256']:.1f}% of direct, the bare relay "
          f"{100 * rel:.1f}% (no Python proxy can keep 90% here)")
    if "litellm" in r:
        lit = r["litellm"]["p50"] - d["p50"]
        ratio = added / lit if lit > 0 else float("inf")
        print(f"overhead ratio openforge/litellm (p50 added latency): {ratio:.3f} (target <= 0.2: "
              f"{'met' if ratio <= 0.2 else 'NOT met'})")
        lit_rps = r["litellm"]

        def times(k: str) -> str:
            return f"{o[k] / lit_rps[k]:.2f}x" if lit_rps[k] > 0 else f"{o[k]:.0f} vs 0 rps"

        print(f"throughput openforge/litellm at 256 streams: instant {times('instant256')}, "
              f"model-like {times('model256')}")
    else:
        print("overhead ratio vs LiteLLM: not measured (LiteLLM not installed)")


if __name__ == "__main__":
    main()
