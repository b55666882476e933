"""Finishing a rollout never blocks the event loop and returns only once its trajectory is durable,
stored once, with what its driver added; a second finish waits for the first."""

from __future__ import annotations

import asyncio
import sqlite3
import threading

import openai

from openforge.proxy.backends.scripted import ScriptedBackend
from openforge.proxy.server import ProxyServer
from openforge.store import TrajectoryStore


async def test_finish_does_not_block_the_loop_and_returns_once_durable(tmp_path, tokenizer):
    """While another connection holds the write lock, the finish waits for it *without* blocking
    the event loop (other coroutines keep running) and does not return before the trajectory is
    committed; a second finish of the same rollout waits for the first and returns the same."""
    db = tmp_path / "s.db"
    with TrajectoryStore(db) as store:
        async with ProxyServer(ScriptedBackend({"turns": ["hi"]}, tokenizer=tokenizer), store=store) as proxy:
            h = proxy.create_rollout("t")
            client = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}])
            locked, release = threading.Event(), threading.Event()

            def hold_lock() -> None:
                c = sqlite3.connect(db, isolation_level=None)
                c.execute("BEGIN IMMEDIATE")
                locked.set()
                release.wait(30)
                c.execute("COMMIT")
                c.close()

            holder = threading.Thread(target=hold_lock)
            holder.start()
            assert locked.wait(10)
            first = asyncio.ensure_future(proxy.afinish_rollout(h.rollout_id, reward=1.0,
                                                                metadata={"launcher": "x"}))
            second = asyncio.ensure_future(proxy.afinish_rollout(h.rollout_id, reward=0.0))
            ticks = 0
            for _ in range(20):  # the loop keeps running while the write waits for the lock
                await asyncio.sleep(0.01)
                ticks += 1
            assert ticks == 20 and not first.done() and not second.done()
            peek = sqlite3.connect(db).execute("SELECT COUNT(*) FROM trajectories").fetchone()[0]
            assert peek == 0  # not durable yet: and the finish has not returned
            release.set()
            traj = await asyncio.wait_for(first, 30)
            assert await second == traj
            holder.join()
            fresh = sqlite3.connect(db).execute("SELECT COUNT(*) FROM trajectories").fetchone()[0]
            assert fresh == 1
    with TrajectoryStore(db) as again:
        assert again.get_trajectory(h.rollout_id) == traj and traj.metadata["launcher"] == "x"
