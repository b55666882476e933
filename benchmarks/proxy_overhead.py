"""Proxy overhead: direct calls vs openforge (`openai:` pass-through) vs LiteLLM's proxy.

Everything runs on loopback against a fast fake OpenAI-compatible upstream (a raw asyncio HTTP
server in its own process). One run measures, for each target:

* added latency at concurrency 1: p50 / p99 of non-streaming chat completions, minus direct;
* throughput at 64 and 256 concurrent streaming requests (requests/s), as a ratio of direct;
* the live streaming path: a proxy with the ``scripted:`` back-end (tokens pushed in chunks, so SSE
  deltas go out while "generating") serving streamed vs non-streamed requests, as a ratio.

and prints the ratios the proxy issue sets as targets (openforge adds <= 1 ms p50, keeps >= 90 % of
direct throughput at 256 streams, adds at most a fifth of LiteLLM's overhead).

LiteLLM runs from its own virtualenv so it cannot disturb openforge's dependencies:
``python -m venv /tmp/litellm-venv && /tmp/litellm-venv/bin/pip install 'litellm[proxy]'``; point
``--litellm`` at its ``litellm`` executable (default: ``$LITELLM_BIN``, then ``litellm`` on PATH, then
``/tmp/litellm-venv/bin/litellm``). Without it the LiteLLM column is skipped and the output says so.

Usage: ``python benchmarks/proxy_overhead.py [--requests 400] [--seconds 5] [--litellm PATH]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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

_JSON = json.dumps({
    "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": "fake",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello from the fake upstream."},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 9, "completion_tokens": 6, "total_tokens": 15}}).encode()


def _sse() -> bytes:
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": "fake"}
    out = b""
    for delta, fin in (({"role": "assistant", "content": ""}, None), ({"content": "Hello from "}, None),
                       ({"content": "the fake upstream."}, None), ({}, "stop")):
        out += b"data: " + json.dumps({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": fin}]}).encode() + b"\n\n"
    return out + b"data: [DONE]\n\n"


_SSE = _sse()
_MODELS = json.dumps({"object": "list", "data": [{"id": "fake", "object": "model"}]}).encode()


class _Upstream(asyncio.Protocol):
    delay_s = 0.0

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
            if head.startswith("GET"):
                payload, ctype = _MODELS, b"application/json"
            elif b'"stream":true' in body.replace(b" ", b""):
                payload, ctype = _SSE, b"text/event-stream"
            else:
                payload, ctype = _JSON, b"application/json"
            out = (b"HTTP/1.1 200 OK\r\ncontent-type: " + ctype + b"\r\ncontent-length: "
                   + str(len(payload)).encode() + b"\r\n\r\n" + payload)
            if self.delay_s > 0:  # a model that takes time to answer (responses stay in order per connection)
                asyncio.get_running_loop().call_later(self.delay_s, self.t.write, out)
            else:
                self.t.write(out)


def run_upstream(port: int, delay_ms: float = 0.0) -> None:
    _Upstream.delay_s = delay_ms / 1000

    async def main():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_Upstream, "127.0.0.1", port, backlog=4096)
        async with server:
            await server.serve_forever()

    (uvloop.run if uvloop else asyncio.run)(main())


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


def _body(i: int, stream: bool) -> bytes:
    return json.dumps({"model": "fake", "stream": stream, "max_tokens": 32,
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


async def throughput(t: Target, conc: int, seconds: float, stream: bool = True) -> float:
    stop = time.perf_counter() + seconds + 1.0
    start_count = time.perf_counter() + 1.0  # 1 s warm-up
    done = 0
    errors = 0

    async def worker():
        nonlocal done, errors
        c = Conn(t.host, t.port, t.headers)
        while time.perf_counter() < stop:
            try:
                status, data = await c.request(t.path, _body(_next(), stream))
            except (OSError, asyncio.IncompleteReadError):
                errors += 1
                c = Conn(t.host, t.port, t.headers)
                continue
            if status == 200 and (data.rstrip().endswith(b"[DONE]") or not stream):
                if time.perf_counter() >= start_count:
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
    for cand in (arg, os.environ.get("LITELLM_BIN"), shutil.which("litellm"), "/tmp/litellm-venv/bin/litellm"):
        if cand and Path(cand).is_file():
            return cand
    return None


def start_openforge(up: int, log: Path, backend: str | None = None) -> tuple[subprocess.Popen, Target]:
    import httpx

    port = free_port()
    env = {**os.environ, "OPENFORGE_ADMIN_TOKEN": "bench-admin"}
    spec = ["--backend", backend] if backend else ["--backend", f"openai:http://127.0.0.1:{up}/v1", "--model", "fake"]
    proc = subprocess.Popen([sys.executable, "-m", "openforge.cli.main", "proxy", "serve", *spec, "--port", str(port)],
                            env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    wait_port(port, proc)
    h = httpx.post(f"http://127.0.0.1:{port}/admin/rollouts", json={"task_id": "bench"},
                   headers={"authorization": "Bearer bench-admin"}).json()
    return proc, Target("openforge", h["openai_base_url"], f"/r/{h['rollout_id']}/v1",
                        {"authorization": f"Bearer {h['api_key']}"})


def start_litellm(binary: str, up: int, tmp: Path, log: Path) -> tuple[subprocess.Popen, Target]:
    port = free_port()
    cfg = tmp / "litellm.yaml"
    cfg.write_text(
        "model_list:\n  - model_name: fake\n    litellm_params:\n      model: openai/fake\n"
        f"      api_base: http://127.0.0.1:{up}/v1\n      api_key: sk-fake\n"
        "litellm_settings:\n  telemetry: false\n  drop_params: true\n")
    key = "sk-" + os.urandom(32).hex()
    env = {**os.environ, "LITELLM_MASTER_KEY": key, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
           "LITELLM_LOG": "ERROR", "NO_DOCS": "True"}
    proc = subprocess.Popen([binary, "--config", str(cfg), "--host", "127.0.0.1", "--port", str(port),
                             "--num_workers", "1"], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    wait_port(port, proc, timeout=180)
    return proc, Target("litellm", f"http://127.0.0.1:{port}", "/v1", {"authorization": f"Bearer {key}"})


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q / 100 * (len(xs) - 1)))]


async def measure(t: Target, args) -> dict[str, float]:
    lat = await latency(t, args.requests)
    res = {"p50": statistics.median(lat), "p99": pct(lat, 99)}
    for conc in (64, 256):
        res[f"rps{conc}"] = await throughput(t, conc, args.seconds)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=400, help="sequential requests for the latency figures")
    ap.add_argument("--seconds", type=float, default=5.0, help="measuring time per throughput point")
    ap.add_argument("--litellm", default=None, help="path of the litellm executable (own venv)")
    ap.add_argument("--upstream-ms", type=float, default=0.0,
                    help="simulated model time per upstream answer (0 = answer at once: pure proxy cost)")
    ap.add_argument("--upstream", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.upstream:
        run_upstream(args.upstream, args.upstream_ms)
        return
    tmp = Path(tempfile.mkdtemp(prefix="openforge-bench-"))
    up = free_port()
    upstream = subprocess.Popen([sys.executable, __file__, "--upstream", str(up), "--upstream-ms", str(args.upstream_ms)])
    procs = [upstream]
    results: dict[str, dict[str, float]] = {}
    run = uvloop.run if uvloop else asyncio.run
    try:
        wait_port(up, upstream)
        print(f"fake upstream on 127.0.0.1:{up} answering after {args.upstream_ms:g} ms; {args.requests} sequential requests, {args.seconds:g}s per "
              f"throughput point; {os.cpu_count()} CPUs shared with everything else on this machine")
        results["direct"] = run(measure(Target("direct", f"http://127.0.0.1:{up}", "/v1", {}), args))
        proc, t = start_openforge(up, tmp / "openforge.log")
        procs.append(proc)
        results["openforge"] = run(measure(t, args))
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
                if len(procs) > 2:
                    stop(procs[-1])
    finally:
        for p in procs:
            stop(p)
    report(results)
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


def report(r: dict[str, dict[str, float]]) -> None:
    d = r["direct"]
    print()
    print(f"{'target':<10} {'p50 ms':>8} {'p99 ms':>8} {'+p50 ms':>8} {'+p99 ms':>8} {'rps@64':>8} {'rps@256':>8}"
          f" {'%direct@64':>10} {'%direct@256':>11}")
    for name, x in r.items():
        print(f"{name:<10} {x['p50']:8.3f} {x['p99']:8.3f} {x['p50'] - d['p50']:8.3f} {x['p99'] - d['p99']:8.3f} "
              f"{x['rps64']:8.0f} {x['rps256']:8.0f} {100 * x['rps64'] / d['rps64']:9.1f}% {100 * x['rps256'] / d['rps256']:10.1f}%")
    o = r["openforge"]
    added = o["p50"] - d["p50"]
    print()
    print(f"openforge added p50 latency: {added:.3f} ms (target <= 1 ms: {'met' if added <= 1.0 else 'NOT met'})")
    keep = o["rps256"] / d["rps256"]
    print(f"openforge throughput at 256 streams: {100 * keep:.1f}% of direct (target >= 90%: "
          f"{'met' if keep >= 0.9 else 'NOT met'})")
    if "litellm" in r:
        lit = r["litellm"]["p50"] - d["p50"]
        ratio = added / lit if lit > 0 else float("inf")
        print(f"overhead ratio openforge/litellm (p50 added latency): {ratio:.3f} (target <= 0.2: "
              f"{'met' if ratio <= 0.2 else 'NOT met'})")
        print(f"throughput ratio openforge/litellm at 256 streams: {o['rps256'] / r['litellm']['rps256']:.2f}x")
    else:
        print("overhead ratio vs LiteLLM: not measured (LiteLLM not installed)")


if __name__ == "__main__":
    main()
