"""One rollout cannot slow the others: rollout B's small calls while rollout A sends one large prompt.

The proxy runs in its own process as ``openai:`` pass-through to a fake upstream that answers at once
(every prompt is still rendered and tokenized, to be recorded; pass-through has no context limit, so
nothing is refused): the cost measured is the proxy's own. Rollout B sends small chat completions
on one keep-alive connection; meanwhile rollout A sends one prompt of ``--sizes`` MiB
(this repository's own source, repeated), and B paces its calls (``--interval-ms``, default one per
50 ms: far more than an agent makes). Reported per size: B's p50 and worst latency over the calls
that overlapped A's, and A's own latency — for the old path (``token_workers=0``: large prompts render
in a thread of the serving process, which holds its GIL while tokenizing) and the token pool
(``token_workers=2``), measured in the same run, plus B's idle p50 both ways. The first large prompt
of the pool run starts its workers (``cold``); later ones find them running.

``--sweep`` also times rendering in process against a round trip through a pool worker, by prompt
size: what sets the engine's ``POOL_MIN_BYTES`` (smaller requests render inline).

Usage: ``python benchmarks/proxy_stall.py [--sizes 8,16] [--idle 300] [--sweep]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from proxy_overhead import Conn, free_port, stop, wait_port  # noqa: E402

ADMIN = "bench-admin"
_ANSWER = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "fake",
                      "choices": [{"index": 0, "finish_reason": "stop",
                                   "message": {"role": "assistant", "content": "Hello there."}}],
                      "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}}).encode()


class _Upstream(asyncio.Protocol):
    """Answers every POST at once, whatever its size (bodies are skipped, not parsed)."""

    def connection_made(self, transport):
        self.t, self.buf, self.need = transport, bytearray(), -1

    def data_received(self, data):
        self.buf += data
        while True:
            if self.need < 0:
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = bytes(self.buf[:end]).decode("latin1").lower()
                n = next((int(ln.split(":", 1)[1]) for ln in head.split("\r\n") if ln.startswith("content-length:")), 0)
                del self.buf[:end + 4]
                self.need = n
            if len(self.buf) < self.need:
                return
            del self.buf[:self.need]
            self.need = -1
            self.t.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                         + str(len(_ANSWER)).encode() + b"\r\n\r\n" + _ANSWER)


def run_upstream(port: int) -> None:
    async def main():
        server = await asyncio.get_running_loop().create_server(_Upstream, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def run_proxy(port: int, up: int, workers: int) -> None:
    from openforge.proxy.backends import parse_backend_spec
    from openforge.proxy.server import ProxyServer

    async def main():
        backend = parse_backend_spec(f"openai:http://127.0.0.1:{up}/v1")
        async with ProxyServer(backend, port=port, admin_token=ADMIN, token_workers=workers):
            await asyncio.Event().wait()

    try:  # as `forge proxy serve` runs it
        import uvloop

        uvloop.run(main())
    except ImportError:
        asyncio.run(main())


def start(args: list[str], port: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, __file__, *args], env=env)
    wait_port(port, proc, timeout=300)
    return proc


def rollout(port: int) -> Conn:
    import httpx

    h = httpx.post(f"http://127.0.0.1:{port}/admin/rollouts", json={"task_id": "bench"},
                   headers={"authorization": f"Bearer {ADMIN}"}).json()
    c = Conn("127.0.0.1", port, {"authorization": f"Bearer {h['api_key']}"})
    c.path = f"/r/{h['rollout_id']}/v1/chat/completions"  # type: ignore[attr-defined]
    return c


_seq = iter(range(1 << 62))


def body(content: str) -> bytes:
    """A request no earlier one repeats (the proxy answers a repeated body from its retry-replay cache)."""
    content = f"[{next(_seq)}] {content}"
    return json.dumps({"model": "fake", "max_tokens": 16, "messages": [{"role": "user", "content": content}]}).encode()


def source_text(n: int) -> str:
    files = [*sorted((ROOT / "openforge").rglob("*.py")), ROOT / "README.md"]
    text = "".join(p.read_text() for p in files)
    return (text * (n // len(text) + 1))[:n]


async def call(c: Conn, payload: bytes) -> float:
    t0 = time.perf_counter()
    status, data = await c.request(c.path, payload)  # type: ignore[attr-defined]
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {data[:300]!r}")
    return time.perf_counter() - t0


async def idle(b: Conn, n: int) -> float:
    for i in range(50):
        await call(b, body(f"warm-up {i}"))
    return statistics.median([await call(b, body(f"Say hello ({i}).")) for i in range(n)])


async def during(a: Conn, b: Conn, payload: bytes, interval: float) -> tuple[float, float, float, int]:
    """A's one large call, and B's calls meanwhile, one per ``interval`` s (or back to back when a call
    takes longer): (B p50, B worst, A latency, B calls)."""
    big = asyncio.ensure_future(call(a, payload))
    lat: list[float] = []
    i = 0
    while not big.done():
        lat.append(await call(b, body(f"Meanwhile ({i}).")))
        await asyncio.sleep(max(0.0, interval - lat[-1]))
        i += 1
    return statistics.median(lat), max(lat), big.result(), len(lat)


async def measure(port: int, sizes: list[float], n_idle: int, interval: float) -> dict:
    """B's idle p50, then A's first large prompt (with the pool: its workers start during it), then one
    of each size."""
    a, b = rollout(port), rollout(port)
    res = {"idle_p50": await idle(b, n_idle)}
    for i, mib in enumerate([sizes[0], *sizes]):
        payload = body(source_text(int(mib * (1 << 20))))
        res[f"{mib:g} MiB" + (", first" if i == 0 else "")] = await during(a, b, payload, interval)
    a.close()
    b.close()
    return res


def sweep() -> None:
    from openforge.proxy.backends.transformers import load_tokenizer
    from openforge.proxy.render import Renderer
    from openforge.proxy.tokenpool import TokenPool

    r = Renderer(load_tokenizer("smollm2-135m"))

    async def main():
        pool = TokenPool(r, 1)
        await pool.render([{"role": "user", "content": "start"}], None, [])
        print(f"\n{'prompt bytes':>12} {'in process ms':>14} {'pool round trip ms':>19}")
        for n in (1_000, 4_000, 16_000, 32_000, 64_000, 256_000):
            msgs = [{"role": "user", "content": source_text(n)}]
            inline, pooled = [], []
            for _ in range(7):
                t0 = time.perf_counter()
                r.render(msgs, None)
                inline.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                await pool.render(msgs, None, [])
                pooled.append(time.perf_counter() - t0)
            print(f"{n:>12} {1000 * statistics.median(inline):>14.2f} {1000 * statistics.median(pooled):>19.2f}")
        await pool.aclose()

    asyncio.run(main())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="8,16", help="A's prompt sizes in MiB, comma-separated")
    ap.add_argument("--idle", type=int, default=300, help="B's calls for the idle p50")
    ap.add_argument("--interval-ms", type=float, default=50.0,
                    help="B's pace while A's call runs (0: back to back; the proxy then records tens of thousands "
                         "of calls in memory, and gen-2 GC pauses of that heap dominate B's worst case)")
    ap.add_argument("--sweep", action="store_true", help="also time in-process vs pool rendering by size")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--upstream", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--workers", type=int, default=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        return run_proxy(args.serve, args.upstream, args.workers)
    if args.upstream:
        return run_upstream(args.upstream)
    sizes = [float(s) for s in args.sizes.split(",")]
    up = free_port()
    procs = [start(["--upstream", str(up)], up)]
    results = {}
    try:
        for name, workers in (("old: in-process thread", 0), ("token pool (2 workers)", 2)):
            port = free_port()
            proxy = start(["--serve", str(port), "--upstream", str(up), "--workers", str(workers)], port)
            try:
                results[name] = asyncio.run(measure(port, sizes, args.idle, args.interval_ms / 1000))
            finally:
                stop(proxy)
    finally:
        for p in procs:
            stop(p)
    report(results, args)
    if args.sweep:
        sweep()


def report(results: dict, args) -> None:
    print(f"\n{os.cpu_count()} CPUs shared by the client, the fake upstream, the proxy and its workers; `openai:` "
          f"pass-through (every prompt rendered + tokenized to be recorded); B: small calls, one every "
          f"{args.interval_ms:g} ms while A's call runs (back to back for the idle p50)")
    print(f"{'path':<24} {'A sends':<16} {'B p50 ms':>9} {'B worst ms':>11} {'A ms':>9} {'B calls':>8}")
    for name, res in results.items():
        print(f"{name:<24} {'nothing (idle)':<16} {1000 * res['idle_p50']:>9.2f}")
        for label, (p50, worst, a_lat, n) in ((k, v) for k, v in res.items() if k != "idle_p50"):
            print(f"{'':<24} {label:<16} {1000 * p50:>9.2f} {1000 * worst:>11.1f} {1000 * a_lat:>9.0f} {n:>8}")
    old, new = results.values()
    print("(`first`: the first large prompt; with the pool, its workers start during it)\n")
    for k in (k for k in new if k != "idle_p50"):
        o, n = old[k][1], new[k][1]
        print(f"B worst while A sends {k}: {1000 * n:.0f} ms with the pool vs {1000 * o:.0f} ms without "
              f"({o / n:.1f}x lower; target < 500 ms: {'met' if n < 0.5 else 'NOT met'})")
    ratio = new["idle_p50"] / old["idle_p50"]
    print(f"B idle p50: {1000 * new['idle_p50']:.2f} ms with the pool vs {1000 * old['idle_p50']:.2f} ms without "
          f"(ratio {ratio:.2f})")


if __name__ == "__main__":
    main()
