"""Finishing a rollout: stored bytes and finish latency versus turns, and what a finish costs the others.

Rollouts of 1, 10, 50, 100 and 200 turns run through the real in-process proxy (scripted policy,
SmolLM2's tokenizer) with an agent's growing conversation: every turn appends the model's answer and a
~1 KB tool result, so each request carries the whole history. Then, per rollout:

- **new**: this tree's ``afinish_rollout`` (drain, build + validate segments once in a worker thread,
  one durable write awaited off the event loop, the driver's timings added to it);
- **old**: the code of ``--legacy-ref`` (default: the last commit before this change), loaded from git:
  its ``Recorder`` and ``TrajectoryStore`` are fed the *same* recorded calls, and its finish path is
  timed as it ran: ``Recorder.finish`` (build, validate, validate again, serialise, fsync, on the event
  loop) followed by ``run_rollout``'s second ``put_trajectory`` of the same trajectory with its timings.

Bytes are the rollout's rows (calls + trajectory) in each store. Then ``--stall-reps`` 200-turn
rollouts finish (old path, then new) while rollout B streams small calls through the same proxy,
back to back; B's p50 / p99 / worst latency over the calls that overlapped a finish are printed
beside B's idle latency.

Usage: ``python benchmarks/finish_scaling.py [--turns 1,10,50,100,200] [--stall-reps 3] [--stall-turns 200]``
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LEGACY_REF = "45e0fe9"  # the last commit before the linear, off-loop finish path
ANSWER = "I ran the test suite; one failure remains in parser.py, so I will read that file next."


def legacy(ref: str) -> tuple[Any, Any]:
    """The old ``TrajectoryStore`` and ``Recorder`` classes, from ``ref``'s sources."""
    def load(name: str, package: str, path: str) -> Any:
        src = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:{path}"], capture_output=True, text=True,
                             check=True).stdout
        # the old store imported load_trajectories from trajectory_io, which now lives in openforge.store
        src = src.replace("export_trajectories, load_trajectories, warn_skipped", "export_trajectories, warn_skipped")
        mod = types.ModuleType(name)
        mod.__package__ = package
        sys.modules[name] = mod
        exec(compile(src, f"{ref}:{path}", "exec"), mod.__dict__)
        return mod

    store = load("openforge._legacy_store", "openforge", "openforge/store.py")
    rec = load("openforge.proxy._legacy_recorder", "openforge.proxy", "openforge/proxy/recorder.py")
    return store.TrajectoryStore, rec.Recorder


def tool_output(i: int, text: str) -> str:
    start = (i * 997) % (len(text) - 1100)
    return f"$ pytest -x (turn {i})\n" + text[start:start + 1000]


async def record(client: Any, proxy: Any, turns: int, text: str) -> str:
    """One rollout of ``turns`` calls through the proxy; its id."""
    h = proxy.create_rollout("bench", harness="bench")
    messages = [{"role": "system", "content": "You are a careful coding agent. Use the tools."},
                {"role": "user", "content": "The test suite fails. Find and fix the bug."}]
    for i in range(turns):
        r = await client.post(f"{h.openai_base_url}/chat/completions", headers={"authorization": f"Bearer {h.api_key}"},
                              json={"model": "m", "max_tokens": 64, "messages": messages})
        r.raise_for_status()
        messages = [*messages, r.json()["choices"][0]["message"], {"role": "user", "content": tool_output(i, text)}]
    return h.rollout_id


def rollout_bytes(db: Path, rid: str) -> int:
    conn = sqlite3.connect(db)
    cols = {r[1] for r in conn.execute("PRAGMA table_info(calls)")}
    delta = " + IFNULL(LENGTH(req_delta), 0)" if "req_delta" in cols else ""
    calls = conn.execute(f"SELECT IFNULL(SUM(LENGTH(meta) + LENGTH(prompt_tail) + LENGTH(output) + LENGTH(logprobs)"
                         f"{delta}), 0) FROM calls WHERE rollout_id = ?", (rid,)).fetchone()[0]
    traj = conn.execute("SELECT IFNULL(SUM(LENGTH(data)), 0) FROM trajectories WHERE rollout_id = ?",
                        (rid,)).fetchone()[0]
    conn.close()
    return calls + traj


EXTRA_META = {"launcher": "local", "budget_s": 600.0, "category": "bench"}
EXTRA_METRICS = {"provision_s": 0.1, "setup_s": 0.2, "harness_s": 30.0, "verify_s": 0.5, "total_s": 31.0}


async def finish_new(proxy: Any, rid: str) -> float:
    t0 = time.perf_counter()
    await proxy.afinish_rollout(rid, reward=1.0, metadata=EXTRA_META, metrics=EXTRA_METRICS)
    return time.perf_counter() - t0


async def feed_old(old_rec: Any, rid: str, calls: list[Any]) -> None:
    st = old_rec.create("bench", harness="bench", rollout_id=rid)
    for c in calls:
        await old_rec.record(st, c)


def finish_old(old_rec: Any, old_store: Any, rid: str) -> float:
    """The old finish path as the proxy + run_rollout ran it: all of it on the event loop."""
    t0 = time.perf_counter()
    traj = old_rec.finish(rid, reward=1.0)
    traj = traj.model_copy(update={"metrics": {**traj.metrics, **EXTRA_METRICS},
                                   "metadata": {**traj.metadata, **EXTRA_META}})
    old_store.put_trajectory(traj)
    return time.perf_counter() - t0


async def stream_call(client: Any, h: Any, i: int) -> float:
    t0 = time.perf_counter()
    body = {"model": "m", "max_tokens": 32, "stream": True,
            "messages": [{"role": "user", "content": f"[{i}] Say hello."}]}
    async with client.stream("POST", f"{h.openai_base_url}/chat/completions", json=body,
                             headers={"authorization": f"Bearer {h.api_key}"}) as r:
        async for _ in r.aiter_bytes():
            pass
    return time.perf_counter() - t0


class Streamer:
    """Rollout B: streamed calls back to back; each call's (start, end)."""

    def __init__(self, client: Any, proxy: Any):
        self.client, self.h = client, proxy.create_rollout("other", harness="bench")
        self.spans: list[tuple[float, float]] = []
        self._stop = False
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        i = 0
        while not self._stop:
            t0 = time.perf_counter()
            await stream_call(self.client, self.h, i)
            self.spans.append((t0, time.perf_counter()))
            i += 1

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        self._stop = True
        assert self._task is not None
        await self._task

    def overlapping(self, a: float, b: float) -> list[float]:
        return [e - s for s, e in self.spans if e >= a and s <= b]


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


async def main(args: argparse.Namespace) -> None:
    import httpx

    from openforge.proxy.backends.scripted import ScriptedBackend
    from openforge.proxy.server import ProxyServer
    from openforge.store import TrajectoryStore

    try:
        OldStore, OldRecorder = legacy(args.legacy_ref)
    except (OSError, subprocess.CalledProcessError) as e:  # no git, or a shallow clone without the ref
        sys.exit(f"cannot load the old finish path from git revision {args.legacy_ref!r} ({e}); "
                 "pass --legacy-ref with a commit before the linear finish path")
    text = "".join(p.read_text() for p in sorted((ROOT / "openforge").rglob("*.py")))
    tmp = Path(tempfile.mkdtemp(prefix="finish-scaling-"))
    if args.keep:
        print(f"stores in {tmp}")
    turns = [int(t) for t in args.turns.split(",")]
    with TrajectoryStore(tmp / "new.db") as store, OldStore(tmp / "old.db") as old_store:
        backend = ScriptedBackend({"turns": [], "final": ANSWER})
        async with ProxyServer(backend, store=store, token_workers=0) as proxy, \
                httpx.AsyncClient(timeout=120) as client:
            old_rec = OldRecorder(old_store, detokenize=proxy.renderer.decode)
            for _ in range(2):  # warm-up: first calls, worker threads, SQLite pages
                rid = await record(client, proxy, 2, text)
                await feed_old(old_rec, rid, list(proxy.recorder.get(rid).calls))
                finish_old(old_rec, old_store, rid)
                await finish_new(proxy, rid)
            print(f"{'turns':>5} {'old bytes':>11} {'new bytes':>10} {'old/new':>8} {'new B/turn':>10} "
                  f"{'old finish ms':>13} {'new finish ms':>13} {'old/new':>8}")
            for n in turns:
                rid = await record(client, proxy, n, text)
                calls = list(proxy.recorder.get(rid).calls)
                await feed_old(old_rec, rid, calls)
                t_old = finish_old(old_rec, old_store, rid)
                t_new = await finish_new(proxy, rid)
                b_old, b_new = rollout_bytes(tmp / "old.db", rid), rollout_bytes(tmp / "new.db", rid)
                print(f"{n:>5} {b_old:>11,} {b_new:>10,} {b_old / b_new:>7.1f}x {b_new // n:>10,} "
                      f"{1000 * t_old:>13.1f} {1000 * t_new:>13.1f} {t_old / t_new:>7.1f}x", flush=True)

            if args.stall_reps <= 0:
                return
            b = Streamer(client, proxy)
            b.start()
            await asyncio.sleep(1.0)
            t_idle = time.perf_counter()
            await asyncio.sleep(2.0)
            idle = b.overlapping(t_idle, time.perf_counter())
            during: dict[str, list[float]] = {"old": [], "new": []}
            for _ in range(args.stall_reps):
                rid = await record(client, proxy, args.stall_turns, text)
                calls = list(proxy.recorder.get(rid).calls)
                await feed_old(old_rec, rid, calls)
                await asyncio.sleep(0.2)
                t0 = time.perf_counter()
                await asyncio.sleep(0)  # as the old proxy did: drain, then finish synchronously on the loop
                finish_old(old_rec, old_store, rid)
                await asyncio.sleep(0.05)
                during["old"] += b.overlapping(t0, time.perf_counter())
                await asyncio.sleep(0.2)
                t0 = time.perf_counter()
                await finish_new(proxy, rid)
                await asyncio.sleep(0.05)
                during["new"] += b.overlapping(t0, time.perf_counter())
            await b.stop()
            print(f"\nrollout B (streamed calls, back to back) while a {args.stall_turns}-turn rollout finishes "
                  f"({args.stall_reps} finishes each):")
            print(f"{'':>22} {'calls':>6} {'p50 ms':>8} {'p99 ms':>8} {'worst ms':>9}")
            for name, xs in (("idle", idle), ("old finish path", during["old"]), ("new finish path", during["new"])):
                xs = xs or [float("nan")]
                print(f"{name:>22} {len(xs):>6} {1000 * statistics.median(xs):>8.1f} {1000 * pct(xs, 0.99):>8.1f} "
                      f"{1000 * max(xs):>9.1f}")
            print(f"p99 old/new: {pct(during['old'], 0.99) / pct(during['new'], 0.99):.1f}x")
    print("\n(bytes: the rollout's rows in its store, calls + trajectory)")
    if not args.keep:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", default="1,10,50,100,200")
    ap.add_argument("--stall-reps", type=int, default=3)
    ap.add_argument("--stall-turns", type=int, default=200, help="turns of the rollout that finishes meanwhile")
    ap.add_argument("--keep", action="store_true", help="keep the two stores (printed path)")
    ap.add_argument("--legacy-ref", default=LEGACY_REF, help="git revision whose finish path is the baseline")
    asyncio.run(main(ap.parse_args()))
