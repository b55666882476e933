"""TrajectoryStore: durability under kill -9, concurrent writers, export/load, bad files."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading

import pytest

from openforge.errors import StoreError
from openforge.store import TrajectoryStore, export_trajectories, load_trajectories
from openforge.trajectory import Trajectory
from openforge.types import ModelCall, RolloutStatus


def mk_call(i, prompt, out):
    return ModelCall(index=i, prompt_ids=prompt, output_ids=out, output_logprobs=[-0.5] * len(out), api="chat",
                     request={"messages": [{"role": "user", "content": f"turn {i}"}]}, system_prefix_len=1)


def conversation(n, start=0):
    calls, ctx = [], [1, 2, 3]
    for i in range(n):
        out = [start + 100 + i, start + 200 + i]
        calls.append(mk_call(i, list(ctx), out))
        ctx = ctx + out + [start + 300 + i]
    return calls


def test_calls_round_trip_exactly_with_prompt_deltas(tmp_path):
    calls = conversation(20)
    # a compaction in the middle: prompt no longer extends the previous call
    calls.append(mk_call(20, [1, 2, 999], [5]))
    calls.append(mk_call(21, [1, 2, 999, 5, 6], [7]))
    with TrajectoryStore(tmp_path / "s.db") as store:
        store.open_rollout("r", "task")
        for c in calls:
            store.append_call("r", c)
        assert store.calls("r") == calls
        # the log stays linear: stored tails are much smaller than the prompts
        conn = sqlite3.connect(tmp_path / "s.db")
        tail_bytes = sum(len(r[0]) for r in conn.execute("SELECT prompt_tail FROM calls"))
        assert tail_bytes < sum(len(c.prompt_ids) for c in calls) * 4 / 5


def test_duplicate_call_index_is_refused(tmp_path):
    with TrajectoryStore(tmp_path / "s.db") as store:
        store.append_call("r", mk_call(0, [1], [2]))
        with pytest.raises(StoreError, match="UNIQUE"):
            store.append_call("r", mk_call(0, [1], [3]))
        assert store.calls("r")[0].output_ids == [2]  # nothing lost, nothing overwritten


def test_trajectories_put_get_filter(tmp_path):
    with TrajectoryStore(tmp_path / "s.db") as store:
        for k, status in enumerate(["success", "policy_failure", "infra_error"]):
            t = Trajectory(rollout_id=f"r{k}", task_id="t" if k < 2 else "u", status=status, reward=float(k == 0),
                           calls=conversation(3)).build()
            store.put_trajectory(t)
        assert store.get_trajectory("r0").reward == 1.0
        assert store.get_trajectory("nope") is None
        assert [t.rollout_id for t in store.trajectories(task_id="t")] == ["r0", "r1"]
        assert [t.rollout_id for t in store.trajectories(status="infra_error")] == ["r2"]
        assert {r["rollout_id"] for r in store.rollouts()} == {"r0", "r1", "r2"}


def test_concurrent_writers_threads_and_async(tmp_path):
    store = TrajectoryStore(tmp_path / "s.db")

    def writer(r):
        for c in conversation(25, start=r * 1000):
            store.append_call(f"t{r}", c)

    threads = [threading.Thread(target=writer, args=(r,)) for r in range(8)]
    for th in threads:
        th.start()

    async def awriter(r):
        for c in conversation(25, start=r * 1000):
            await store.aappend_call(f"a{r}", c)

    async def main():
        await asyncio.gather(*(awriter(r) for r in range(8)))

    asyncio.run(main())
    for th in threads:
        th.join()
    for r in range(8):
        assert store.calls(f"t{r}") == conversation(25, start=r * 1000)
        assert store.calls(f"a{r}") == conversation(25, start=r * 1000)
    store.close()


def test_two_processes_write_one_store(tmp_path):
    db = tmp_path / "s.db"
    script = textwrap.dedent(f"""
        import sys
        from openforge.store import TrajectoryStore
        from openforge.types import ModelCall
        s = TrajectoryStore({str(db)!r})
        for i in range(40):
            s.append_call(sys.argv[1], ModelCall(index=i, prompt_ids=[i], output_ids=[i + 1], output_logprobs=[-1.0]))
        s.close()
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, f"p{k}"]) for k in range(3)]
    assert all(p.wait(60) == 0 for p in procs)
    with TrajectoryStore(db) as store:
        for k in range(3):
            assert len(store.calls(f"p{k}")) == 40


def test_acknowledged_calls_survive_kill_9(tmp_path):
    db = tmp_path / "s.db"
    script = textwrap.dedent(f"""
        import sys
        from openforge.store import TrajectoryStore
        from openforge.types import ModelCall
        s = TrajectoryStore({str(db)!r})
        i = 0
        while True:
            s.append_call("r", ModelCall(index=i, prompt_ids=list(range(i + 1)), output_ids=[i], output_logprobs=[-0.25]))
            print(i, flush=True)  # acknowledged
            i += 1
    """)
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    acked = -1
    for line in p.stdout:
        acked = int(line)
        if acked >= 30:
            break
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    with TrajectoryStore(db) as store:
        calls = store.calls("r")
    assert len(calls) >= acked + 1
    assert [c.index for c in calls] == list(range(len(calls)))
    assert calls[acked].prompt_ids == list(range(acked + 1))


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_and_load_round_trip(tmp_path, fmt):
    trajs = [
        Trajectory(rollout_id=f"r{k}", task_id="t", harness="react", environment="claw", reward=0.5 * k,
                   status=RolloutStatus.SUCCESS, rewards={"x": 1.0}, calls=conversation(4),
                   metadata={"seed": k}).build()
        for k in range(3)
    ]
    out = tmp_path / f"out.{fmt}"
    assert export_trajectories(trajs, out) == 3
    assert load_trajectories(out) == trajs


def test_load_store_and_single_json(tmp_path):
    t = Trajectory(rollout_id="r", task_id="t", calls=conversation(2)).build()
    with TrajectoryStore(tmp_path / "s.db") as store:
        store.put_trajectory(t)
    assert load_trajectories(tmp_path / "s.db") == [t]
    (tmp_path / "t.json").write_text(t.model_dump_json(indent=2))
    assert load_trajectories(tmp_path / "t.json") == [t]


def test_bad_files_give_clear_errors(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite at all, just text\n" * 10)
    with pytest.raises(StoreError, match="not an openforge store"):
        TrajectoryStore(junk)
    foreign = tmp_path / "foreign.db"
    c = sqlite3.connect(foreign)
    c.execute("CREATE TABLE people (name TEXT)")
    c.commit()
    c.close()
    with pytest.raises(StoreError, match="not an openforge store"):
        TrajectoryStore(foreign)
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"SQLite format 3\x00" + os.urandom(4096))
    with pytest.raises(StoreError):
        TrajectoryStore(corrupt)
    bad_jsonl = tmp_path / "x.jsonl"
    bad_jsonl.write_text('{"rollout_id": "a", "task_id": "b"}\n{broken\n')
    with pytest.raises(StoreError, match=r"x.jsonl:2: not JSON"):
        load_trajectories(bad_jsonl)
    wrong = tmp_path / "w.jsonl"
    wrong.write_text('{"hello": 1}\n')
    with pytest.raises(StoreError, match="not a valid trajectory"):
        load_trajectories(wrong)
    with pytest.raises(StoreError, match="no such file"):
        load_trajectories(tmp_path / "missing.jsonl")
    with pytest.raises(StoreError, match="unknown export format"):
        export_trajectories([], tmp_path / "x.csv")
