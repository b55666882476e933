"""The store's row layout: a rollout's bytes grow linearly with its length (request deltas, a
trajectory row that references its logged calls), what is read back is exactly what was put,
and stores written by the previous schema stay readable."""

from __future__ import annotations

import json
import sqlite3

from openforge.core.trajectory import Trajectory
from openforge.core.types import ModelCall
from openforge.store import TrajectoryStore

SYSTEM = "You are a careful coding agent. " * 40  # a large field every call repeats (Anthropic `system`)
TOOLS = [{"name": f"tool{i}", "description": "does a thing " * 10, "input_schema": {"type": "object"}}
         for i in range(8)]


def agent_calls(turns: int, rid: str = "r") -> list[ModelCall]:
    """A multi-turn agent: each call's messages and prompt extend the previous call's."""
    calls, messages, ctx = [], [{"role": "user", "content": "fix the failing test " * 20}], list(range(1, 400))
    for i in range(turns):
        out = [1000 + i * 7 + k for k in range(30)]
        calls.append(ModelCall(index=i, api="messages", prompt_ids=list(ctx), output_ids=out,
                               output_logprobs=[-0.25 - k / 64 for k in range(30)],
                               request={"model": "m", "max_tokens": 512, "system": SYSTEM, "tools": TOOLS,
                                        "messages": list(messages)},
                               response={"id": f"msg_{i}", "content": [{"type": "text", "text": f"step {i}"}]},
                               system_prefix_len=399))
        observation = [5000 + i * 3 + k for k in range(120)]
        ctx = ctx + out + observation
        messages = [*messages, {"role": "assistant", "content": f"step {i}"},
                    {"role": "user", "content": f"tool output {i}: " + "x" * 400}]
    return calls


def write(db, turns: int) -> tuple[int, int, Trajectory]:
    """Log a rollout's calls and store its trajectory; (bytes of its call rows, bytes of its trajectory row)."""
    calls = agent_calls(turns)
    with TrajectoryStore(db) as store:
        store.open_rollout("r", "t")
        for c in calls:
            store.append_call("r", c)
        traj = Trajectory(rollout_id="r", task_id="t", reward=1.0, calls=calls).build()
        store.put_trajectory(traj)
        assert store.get_trajectory("r") == traj
    conn = sqlite3.connect(db)
    call_bytes = conn.execute("SELECT SUM(LENGTH(meta) + LENGTH(prompt_tail) + LENGTH(output) + LENGTH(logprobs) "
                              "+ IFNULL(LENGTH(req_delta), 0)) FROM calls").fetchone()[0]
    traj_bytes = conn.execute("SELECT LENGTH(data) FROM trajectories").fetchone()[0]
    conn.close()
    return call_bytes, traj_bytes, traj


def test_a_rollouts_bytes_grow_linearly_with_its_turns(tmp_path):
    c50, t50, _ = write(tmp_path / "a.db", 50)
    c100, t100, _ = write(tmp_path / "b.db", 100)
    # twice the turns: twice the bytes (quadratic storage would be ~4x)
    assert c100 / c50 < 2.2, (c50, c100)
    assert t100 / t50 < 2.2, (t50, t100)


def test_calls_read_back_exactly_with_request_deltas(tmp_path):
    calls = agent_calls(6)
    # a compaction: the history is rewritten, the system prompt changes, a field appears and one goes
    calls.append(ModelCall(index=6, prompt_ids=[1, 2, 3], output_ids=[4], output_logprobs=[-1.0],
                           request={"system": "short", "messages": [{"role": "user", "content": "summary"}],
                                    "tools": TOOLS, "temperature": 0.5}))
    calls.append(ModelCall(index=7, prompt_ids=[1, 2, 3, 4, 9], output_ids=[5], output_logprobs=[-1.0],
                           request={"messages": [{"role": "user", "content": "summary"}, {"role": "user",
                                                                                          "content": "more"}],
                                    "tools": TOOLS}))
    with TrajectoryStore(tmp_path / "s.db") as store:
        for c in calls:
            store.append_call("r", c)
        got = store.calls("r")
    assert got == calls
    assert [list(c.request) for c in got] == [list(c.request) for c in calls]  # key order kept too


def test_a_failed_append_does_not_become_the_next_calls_base(tmp_path):
    """A refused duplicate must not be what the next call's delta is taken against: the log has the first."""
    with TrajectoryStore(tmp_path / "s.db") as store:
        first = ModelCall(index=0, prompt_ids=[1, 2, 3], output_ids=[4], output_logprobs=[-1.0],
                          request={"messages": [{"role": "user", "content": "a"}]})
        dup = ModelCall(index=0, prompt_ids=[7, 8, 9], output_ids=[6], output_logprobs=[-1.0],
                        request={"messages": [{"role": "user", "content": "b"}]})
        nxt = ModelCall(index=1, prompt_ids=[7, 8, 9, 6, 5], output_ids=[4], output_logprobs=[-1.0],
                        request={"messages": [{"role": "user", "content": "b"}, {"role": "user", "content": "c"}]})
        store.append_call("r", first)
        try:
            store.append_call("r", dup)
        except Exception:
            pass
        store.append_call("r", nxt)
        assert store.calls("r") == [first, nxt]


def test_a_trajectory_stores_what_was_put_not_what_was_logged(tmp_path):
    """Calls are referenced only when they are the very objects the store logged; another call with
    the same index, a call never logged and a segment its calls do not imply are stored inline."""
    calls = agent_calls(4)
    with TrajectoryStore(tmp_path / "s.db") as store:
        for c in calls:
            store.append_call("r", c)
        changed = calls[2].model_copy(update={"output_ids": [1, 2], "output_logprobs": [-1.0, -2.0]})
        unlogged = ModelCall(index=9, prompt_ids=[42], output_ids=[43], output_logprobs=[-0.5])
        traj = Trajectory(rollout_id="r", task_id="t", calls=[calls[0], calls[1], changed, calls[3], unlogged]).build()
        padded = traj.segments[0].model_copy(update={  # valid, but longer than its last call: not derivable
            "input_ids": [*traj.segments[0].input_ids, 77], "loss_mask": [*traj.segments[0].loss_mask, 0],
            "logprobs": [*traj.segments[0].logprobs, 0.0]})
        traj = traj.model_copy(update={"segments": [padded, *traj.segments[1:]]})
        store.put_trajectory(traj)
        assert store.get_trajectory("r") == traj
        row = json.loads(sqlite3.connect(tmp_path / "s.db").execute("SELECT data FROM trajectories").fetchone()[0])
        assert [c if isinstance(c, int) else "inline" for c in row["calls"]] == [0, 1, "inline", 3, "inline"]
        assert "input_ids" in row["segments"][0]


V1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE rollouts (rollout_id TEXT PRIMARY KEY, task_id TEXT NOT NULL, harness TEXT, environment TEXT,
    metadata TEXT NOT NULL DEFAULT '{}', created_at REAL NOT NULL);
CREATE TABLE calls (rollout_id TEXT NOT NULL, idx INTEGER NOT NULL, meta TEXT NOT NULL,
    prompt_base INTEGER NOT NULL, prompt_prefix INTEGER NOT NULL, prompt_tail BLOB NOT NULL,
    output BLOB NOT NULL, logprobs BLOB NOT NULL, PRIMARY KEY (rollout_id, idx));
CREATE TABLE trajectories (rollout_id TEXT PRIMARY KEY, task_id TEXT NOT NULL, status TEXT NOT NULL,
    reward REAL NOT NULL, data TEXT NOT NULL, finished_at REAL NOT NULL);
CREATE INDEX trajectories_task ON trajectories (task_id);
INSERT INTO meta VALUES ('format', 'openforge-store'), ('schema', '1');
"""


def test_a_store_of_the_previous_schema_is_read_and_migrated(tmp_path):
    """Schema 1 (as openforge ≤ this change wrote it: full request bodies, whole trajectory JSON)."""
    from array import array

    db = tmp_path / "old.db"
    calls = agent_calls(3)
    old = Trajectory(rollout_id="old", task_id="t", reward=1.0, calls=calls).build()
    conn = sqlite3.connect(db)
    conn.executescript(V1)
    conn.execute("INSERT INTO rollouts VALUES ('old', 't', NULL, NULL, '{}', 1.0)")
    prev: list[int] = []
    for c in calls:  # prompts as deltas against the previous call (schema 1 did that already)
        k = len(prev) if c.prompt_ids[:len(prev)] == prev else 0
        conn.execute("INSERT INTO calls VALUES ('old', ?, ?, ?, ?, ?, ?, ?)",
                     (c.index, c.model_dump_json(exclude={"prompt_ids", "output_ids", "output_logprobs"}),
                      c.index - 1 if k else -1, k, array("i", c.prompt_ids[k:]).tobytes(),
                      array("i", c.output_ids).tobytes(), array("d", c.output_logprobs).tobytes()))
        prev = c.prompt_ids + c.output_ids
    conn.execute("INSERT INTO trajectories VALUES ('old', 't', 'success', 1.0, ?, 2.0)", (old.to_json(),))
    conn.commit()
    conn.close()
    with TrajectoryStore(db) as store:
        assert store.calls("old") == calls
        assert store.get_trajectory("old") == old
        new_calls = agent_calls(3)
        for c in new_calls:  # and it takes new rows in the new layout
            store.append_call("new", c)
        new = Trajectory(rollout_id="new", task_id="t", calls=new_calls).build()
        store.put_trajectory(new)
        assert [t.rollout_id for t in store.trajectories()] == ["old", "new"]
        assert store.get_trajectory("new") == new
    meta = dict(sqlite3.connect(db).execute("SELECT key, value FROM meta").fetchall())
    assert meta["schema"] == "2"
