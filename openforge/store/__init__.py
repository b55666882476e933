"""Durable trajectory store: an append-only call log and finished trajectories in SQLite (WAL).

Owns: :class:`TrajectoryStore` (the embedded default store: opening or creating it, durable writes,
reads). The pieces live beside it: :mod:`.schema` (the file, tables, migrations), :mod:`.codec` (the
row layouts), :mod:`.writer` (the writer thread), :mod:`.reader` (queries).
:func:`load_trajectories` reads a store or an export file; :func:`export_trajectories` lives in
:mod:`openforge.core.trajectory_io` and is importable from here too.

Delivery: a call is appended before its reply is sent, marked ``delivery_uncertain``;
``mark_delivered`` clears the mark once the reply went out whole. After a crash, a call whose mark was
never cleared reads back uncertain (and is never trained).

Durability: ``append_call`` returns only after the call's transaction is committed with
``synchronous=FULL`` (the WAL is fsynced), so an acknowledged call survives ``kill -9`` of the
writer; so does ``put_trajectory`` (and their ``a…`` forms, which await the same without blocking the
event loop). Writes go through one writer thread per store that serialises them and *group-commits*
whatever is queued (many rollouts appending at once share one fsync); readers use their own
connections, which WAL lets run beside the writer. Several processes may write the same file
(SQLite's lock + ``busy_timeout``).

Size: linear in a rollout's length. Token ids are stored as int32 arrays and logprobs as float64
arrays (lossless); a call's prompt and request body are stored as deltas against the previous call
of the same rollout, and a finished trajectory references its logged calls instead of copying them
(see :mod:`.codec`); reads reassemble the documented trajectory JSON.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..core.errors import StoreError
from ..core.finite import first_nonfinite, nonfinite_in_trajectory
from ..core.trajectory import Trajectory
from ..core.trajectory_io import StoreWarning, export_trajectories, is_store_file, load_export, warn_skipped
from ..core.types import ModelCall
from . import reader
from .codec import LAYOUT, encode_call, encode_trajectory
from .schema import check_file, connect, open_or_create
from .writer import Job, LogState, Op, Undo, Writer

__all__ = ["StoreWarning", "TrajectoryStore", "export_trajectories", "load_trajectories", "warn_skipped"]

_INSERT_ROLLOUT = "INSERT OR IGNORE INTO rollouts VALUES (?, ?, ?, ?, ?, ?)"


def _finite_call(rollout_id: str, call: ModelCall) -> ModelCall:
    bad = first_nonfinite(call.output_logprobs)
    if bad is not None:
        raise StoreError(f"rollout {rollout_id}: call {call.index}: output_logprobs[{bad[0]}] is {bad[1]}; "
                         "the store keeps finite numbers only")
    return call


def _check_trajectory(traj: Trajectory, validated: bool) -> None:
    bad = nonfinite_in_trajectory(traj)
    if bad is not None:
        raise StoreError(f"rollout {traj.rollout_id}: {bad}; the store keeps finite numbers only")
    if not validated:
        traj.validate_segments()


def _append_job(rollout_id: str, call: ModelCall) -> Job:
    def job(state: LogState) -> tuple[list[Op], Callable[[], Undo]]:
        row, tail = encode_call(call, state.tails.get(rollout_id))
        return ([("INSERT INTO calls VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", (rollout_id, call.index, *row))],
                lambda: state.note_call(rollout_id, call, tail))
    return job


_MARK_DELIVERED = ("UPDATE calls SET meta = json_set(meta, '$.delivery_uncertain', json('false')) "
                   "WHERE rollout_id = ? AND idx = ?")


def _delivered_job(rollout_id: str, index: int) -> Job:
    def job(_state: LogState) -> tuple[list[Op], None]:
        return [(_MARK_DELIVERED, (rollout_id, index))], None
    return job


def _put_job(traj: Trajectory) -> Job:
    def job(state: LogState) -> tuple[list[Op], Callable[[], Undo]]:
        data = encode_trajectory(traj, state.logged.get(traj.rollout_id, {}))
        now = time.time()
        return ([(_INSERT_ROLLOUT, (traj.rollout_id, traj.task_id, traj.harness, traj.environment,
                                    json.dumps(traj.metadata), now)),
                 ("INSERT OR REPLACE INTO trajectories VALUES (?, ?, ?, ?, ?, ?, ?)",
                  (traj.rollout_id, traj.task_id, str(traj.status), traj.reward, data, now, LAYOUT))],
                lambda: state.note_finished(traj.rollout_id))
    return job


class TrajectoryStore:
    """SQLite-backed store of calls and trajectories. Thread-safe; use one instance per process.

    Opening raises :class:`~openforge.core.errors.StoreLocked` (another process held the lock past
    ``timeout_s``), :class:`~openforge.core.errors.StoreForeign` (a SQLite database that is not an openforge
    store) or :class:`~openforge.core.errors.StoreCorrupt` (not a database, or a damaged one). Any number of
    processes may create and open the same new file at once. A store written by an older openforge is
    migrated when opened; its rows stay readable."""

    def __init__(self, path: str | Path, *, timeout_s: float = 30.0):
        self.path = Path(path)
        check_file(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._timeout = timeout_s
        self._local = threading.local()
        open_or_create(self.path, timeout_s)
        self._writer = Writer(self.path, timeout_s)

    def _reader(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = connect(self.path, self._timeout)
        return conn

    # ---------------------------------------------------------------- writes
    def open_rollout(
        self,
        rollout_id: str,
        task_id: str,
        harness: str | None = None,
        environment: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """Register a rollout (idempotent)."""
        row = (rollout_id, task_id, harness, environment, json.dumps(metadata or {}), time.time())
        self._writer.submit(lambda _state: ([(_INSERT_ROLLOUT, row)], None)).result()

    def append_call(self, rollout_id: str, call: ModelCall) -> None:
        """Append one call; returns once it is durable. Appending the same index twice is an error,
        and so is a non-finite logprob (:class:`StoreError`, nothing written)."""
        self._writer.submit(_append_job(rollout_id, _finite_call(rollout_id, call))).result()

    async def aappend_call(self, rollout_id: str, call: ModelCall) -> None:
        """Async :meth:`append_call`: awaits durability without blocking the event loop."""
        await asyncio.wrap_future(self._writer.submit(_append_job(rollout_id, _finite_call(rollout_id, call))))

    def mark_delivered(self, rollout_id: str, index: int) -> None:
        """Record that the reply of a logged call went out whole (it was appended ``delivery_uncertain``,
        before its reply); returns once durable. A call never marked reads back uncertain."""
        self._writer.submit(_delivered_job(rollout_id, index)).result()

    def amark_delivered(self, rollout_id: str, index: int) -> asyncio.Future[None]:
        """Async :meth:`mark_delivered`: queued at once (so ordered before any write queued after this
        call returns, e.g. the rollout's trajectory); await the returned future for durability."""
        return asyncio.wrap_future(self._writer.submit(_delivered_job(rollout_id, index)))

    def put_trajectory(self, traj: Trajectory, *, validated: bool = False) -> None:
        """Store (or replace) a finished trajectory; returns once it is durable. Its segments are
        validated first, unless ``validated`` says the caller has just done so (the trajectory comes
        from :meth:`Trajectory.build` and is unchanged since). A non-finite number anywhere in it (NaN/
        Infinity reward, sub-score, logprob, metric) is refused with a :class:`StoreError` naming it:
        its JSON could not be read back. Calls this store logged for the rollout (the same objects)
        are stored by reference, the rest inline."""
        _check_trajectory(traj, validated)
        self._writer.submit(_put_job(traj)).result()

    async def aput_trajectory(self, traj: Trajectory, *, validated: bool = False) -> None:
        """Async :meth:`put_trajectory`: checks and serialises off the event loop, awaits durability."""
        await asyncio.to_thread(_check_trajectory, traj, validated)
        await asyncio.wrap_future(self._writer.submit(_put_job(traj)))

    # ---------------------------------------------------------------- reads
    def calls(self, rollout_id: str) -> list[ModelCall]:
        """All recorded calls of a rollout, in index order, with their exact token ids."""
        return reader.calls(self._reader(), rollout_id, str(self.path))

    def rollouts(self) -> list[dict[str, Any]]:
        return reader.rollouts(self._reader())

    def rollout(self, rollout_id: str) -> dict[str, Any] | None:
        """A registered rollout's row: ``task_id``, ``harness``, ``environment``, ``metadata``, ``created_at``
        and ``finished`` (whether its trajectory is stored); None if the store never saw it."""
        return reader.rollout(self._reader(), rollout_id)

    def open_rollouts(self) -> list[dict[str, Any]]:
        """Rollouts registered but never finished (e.g. open when their proxy died), oldest first."""
        return [r for r in self.rollouts() if r["status"] is None]

    def get_trajectory(self, rollout_id: str) -> Trajectory | None:
        return reader.trajectory(self._reader(), rollout_id, str(self.path))

    def trajectories(self, *, task_id: str | None = None, status: str | None = None,
                     on_bad: Callable[[StoreError], None] | None = None) -> Iterator[Trajectory]:
        """Stored trajectories, oldest first. A row that is not a valid trajectory raises
        :class:`StoreError` naming it — or, with ``on_bad``, is handed to it and skipped."""
        return reader.iter_trajectories(self._reader(), str(self.path), task_id=task_id, status=status,
                                        on_bad=on_bad)

    # ---------------------------------------------------------------- lifecycle
    def close(self) -> None:
        self._writer.close()
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def __enter__(self) -> TrajectoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_trajectories(path: str | Path, *, on_bad: Callable[[StoreError], None] = warn_skipped) -> list[Trajectory]:
    """Read trajectories from a store, a ``.jsonl`` export or a ``.parquet`` export.

    A store row that is not a valid trajectory (e.g. written by an older version) is handed to
    ``on_bad`` (default: a :class:`StoreWarning` naming it) and skipped; the rest are returned. An
    export file with a bad line is an error naming the line."""
    if is_store_file(path):
        with TrajectoryStore(path) as store:
            return list(store.trajectories(on_bad=on_bad))
    return load_export(path)
