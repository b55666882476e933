"""Rollout machinery cost: local-launcher overhead per rollout, and sustained rollouts/s.

Two measurements, each against a baseline taken in the same run:

1. **Launcher overhead per rollout** — provision a local sandbox, run one command in it, close it —
   against a bare ``subprocess.run`` of the same command (``sh -c 'echo hi > out.txt'``), for each
   isolation mode available (``bwrap``, ``unshare``, ``none``). Prints ms per rollout and the ratio.
2. **Sustained rollouts/s at 32 concurrent trivial rollouts** — the full ``run_rollout`` sequence
   (proxy create/finish, sandbox, setup, a harness process that makes one real model call through the
   proxy with ``curl``, verify, store) against the same ``curl`` processes run bare against the proxy
   at the same concurrency (no sandbox, no verifier, no store).

Usage: ``python benchmarks/rollouts.py [--n 40] [--rollouts 128] [--concurrency 32]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from openforge.core.task import Task
from openforge.environment import Environment, VerifyResult
from openforge.harness import Harness, HarnessResult, RolloutContext
from openforge.launchers._isolation import detect_isolation
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher

CMD = ["sh", "-c", "echo hi > out.txt"]
CURL = ('curl -sf -o reply.json -H "Authorization: Bearer $OPENAI_API_KEY" -H "content-type: application/json" '
        '-d \'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":8}\' '
        '"$OPENAI_BASE_URL/chat/completions"')


async def launcher_overhead(n: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        for _ in range(n):
            subprocess.run(CMD, cwd=d, check=True)
        bare = (time.perf_counter() - t0) / n
    print(f"\n1. launcher overhead, {n} sequential rollouts of {' '.join(CMD)!r}")
    print(f"   bare subprocess.run: {bare * 1000:7.2f} ms/rollout")
    order = ["bwrap", "unshare", "none"]
    best = detect_isolation()[0]
    task = Task(id="bench", instruction="x")
    for mode in order[order.index(best):]:
        la = LocalLauncher(isolation=mode)
        parts = {"start": [], "exec": [], "close": []}
        t0 = time.perf_counter()
        for i in range(n):
            a = time.perf_counter()
            sbx = await la.start(SandboxSpec(rollout_id=f"bench-{i}", task=task, proxy_url="", api_key="k"))
            b = time.perf_counter()
            r = await sbx.exec(CMD)
            assert r.returncode == 0, r.stderr
            c = time.perf_counter()
            await sbx.close()
            parts["start"].append(b - a)
            parts["exec"].append(c - b)
            parts["close"].append(time.perf_counter() - c)
        per = (time.perf_counter() - t0) / n
        await la.aclose()
        detail = ", ".join(f"{k} {statistics.mean(v) * 1000:.1f}" for k, v in parts.items())
        print(f"   local launcher [{mode:7}]: {per * 1000:7.2f} ms/rollout ({detail} ms)  "
              f"= {per / bare:5.1f}x bare, +{(per - bare) * 1000:.1f} ms")


class CurlHarness(Harness):
    """A trivial harness: one real model call through the proxy from inside the sandbox."""

    name = "curl"

    async def run(self, ctx: RolloutContext) -> HarnessResult:
        return HarnessResult.from_exec(await ctx.exec(["sh", "-c", CURL]), harness=self.name)


class ReplyEnv(Environment):
    name = "bench"

    def tasks(self, split=None):
        return [Task(id="bench", instruction="say hi", environment="bench")]

    async def verify(self, task, sandbox):
        return VerifyResult(reward=float(b"choices" in await sandbox.read_file("reply.json")))


async def sustained(rollouts: int, concurrency: int) -> None:
    from openforge.proxy.backends.scripted import ScriptedBackend
    from openforge.proxy.backends.transformers import load_tokenizer
    from openforge.proxy.server import ProxyServer
    from openforge.runner.rollout import run_rollout
    from openforge.store import TrajectoryStore

    tok = load_tokenizer("smollm2-135m")
    env, harness = ReplyEnv(), CurlHarness()
    task = env.tasks()[0]
    with tempfile.TemporaryDirectory() as d:
        store = TrajectoryStore(Path(d) / "store.db")
        async with ProxyServer(ScriptedBackend({"turns": [{"text": "hi"}]}, tokenizer=tok), store=store,
                               uds=str(Path(d) / "p.sock")) as proxy:
            # baseline: the same curl, bare, against the proxy (one rollout id per call, no sandbox)
            sem = asyncio.Semaphore(concurrency)

            async def bare_one(i: int) -> None:
                async with sem:
                    h = proxy.create_rollout("bench")
                    p = await asyncio.create_subprocess_exec(
                        "sh", "-c", CURL, cwd=d, env={"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": h.api_key,
                                                      "OPENAI_BASE_URL": h.openai_base_url})
                    assert await p.wait() == 0

            t0 = time.perf_counter()
            await asyncio.gather(*(bare_one(i) for i in range(rollouts)))
            bare = rollouts / (time.perf_counter() - t0)

            la = LocalLauncher(base_dir=Path(d) / "sbx")

            async def full_one(i: int) -> str:
                async with sem:
                    t = await run_rollout(harness=harness, environment=env, task=task, launcher=la, proxy=proxy,
                                          store=store)
                    return t.status.value

            t0 = time.perf_counter()
            statuses = await asyncio.gather(*(full_one(i) for i in range(rollouts)))
            full = rollouts / (time.perf_counter() - t0)
            await la.aclose()
        store.close()
    ok = statuses.count("success")
    print(f"\n2. sustained throughput, {rollouts} trivial rollouts at concurrency {concurrency} "
          f"(isolation: {detect_isolation()[0]})")
    print(f"   bare curl against the proxy: {bare:7.1f} calls/s")
    print(f"   full run_rollout:            {full:7.1f} rollouts/s ({ok}/{rollouts} success) "
          f"= {full / bare:.2f}x of bare")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=40, help="sequential rollouts for the overhead measurement")
    ap.add_argument("--rollouts", type=int, default=128)
    ap.add_argument("--concurrency", type=int, default=32)
    a = ap.parse_args()
    print(f"python {sys.version.split()[0]}, isolation available: {detect_isolation()[0]}")
    asyncio.run(launcher_overhead(a.n))
    asyncio.run(sustained(a.rollouts, a.concurrency))


if __name__ == "__main__":
    main()
