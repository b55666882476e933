"""Queries over a store: a rollout's calls, the rollouts, stored trajectories (reassembled).

Owns the SELECTs. Each function takes a reader connection (WAL lets readers run beside the writer)
and returns the store's values (:class:`~openforge.core.types.ModelCall`, :class:`~openforge.core.trajectory.Trajectory`,
plain rows as dicts).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

from ..core.errors import StoreError
from ..core.trajectory import Trajectory
from ..core.types import ModelCall
from .codec import CallDecoder, decode_trajectory

__all__ = ["calls", "iter_trajectories", "rollout", "rollouts", "trajectory"]


def calls(conn: sqlite3.Connection, rollout_id: str, where: str) -> list[ModelCall]:
    """All logged calls of a rollout, in index order, with their exact token ids and request bodies."""
    rows = conn.execute(
        "SELECT idx, meta, prompt_base, prompt_prefix, prompt_tail, output, logprobs, req_base, req_delta "
        "FROM calls WHERE rollout_id = ? ORDER BY idx", (rollout_id,))
    dec = CallDecoder(f"{where}: rollout {rollout_id}")
    return [dec.decode(*row) for row in rows]


def rollouts(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT r.rollout_id, r.task_id, r.harness, r.environment, t.status, t.reward, "
        "(SELECT COUNT(*) FROM calls c WHERE c.rollout_id = r.rollout_id) "
        "FROM rollouts r LEFT JOIN trajectories t USING (rollout_id) ORDER BY r.created_at"
    )
    keys = ("rollout_id", "task_id", "harness", "environment", "status", "reward", "num_calls")
    return [dict(zip(keys, r)) for r in rows]


def rollout(conn: sqlite3.Connection, rollout_id: str) -> dict[str, Any] | None:
    row = conn.execute(
        "SELECT r.task_id, r.harness, r.environment, r.metadata, r.created_at, t.rollout_id IS NOT NULL "
        "FROM rollouts r LEFT JOIN trajectories t USING (rollout_id) WHERE r.rollout_id = ?", (rollout_id,),
    ).fetchone()
    if row is None:
        return None
    try:
        metadata = json.loads(row[3])
    except ValueError:
        metadata = {}
    return {"rollout_id": rollout_id, "task_id": row[0], "harness": row[1], "environment": row[2],
            "metadata": metadata if isinstance(metadata, dict) else {}, "created_at": row[4],
            "finished": bool(row[5])}


def _decode(conn: sqlite3.Connection, rid: str, data: str, layout: int, where: str) -> Trajectory:
    return decode_trajectory(data, layout, lambda: calls(conn, rid, where), f"{where}: rollout {rid}")


def trajectory(conn: sqlite3.Connection, rollout_id: str, where: str) -> Trajectory | None:
    row = conn.execute("SELECT data, layout FROM trajectories WHERE rollout_id = ?", (rollout_id,)).fetchone()
    return None if row is None else _decode(conn, rollout_id, row[0], row[1], where)


def iter_trajectories(conn: sqlite3.Connection, where: str, *, task_id: str | None = None,
                      status: str | None = None,
                      on_bad: Callable[[StoreError], None] | None = None) -> Iterator[Trajectory]:
    sql, params = "SELECT rollout_id, data, layout FROM trajectories WHERE 1=1", []
    if task_id is not None:
        sql += " AND task_id = ?"
        params.append(task_id)
    if status is not None:
        sql += " AND status = ?"
        params.append(status)
    for rid, data, layout in conn.execute(sql + " ORDER BY finished_at", params).fetchall():
        try:
            yield _decode(conn, rid, data, layout, where)
        except StoreError as e:
            if on_bad is None:
                raise
            on_bad(e)
