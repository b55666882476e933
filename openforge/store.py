"""Durable trajectory store: an append-only call log and finished trajectories in SQLite (WAL).

Owns: :class:`TrajectoryStore` (the embedded default store: opening or creating it, durable writes,
reads) and :func:`load_trajectories` (a store or an export file). :func:`export_trajectories` lives in
:mod:`openforge.trajectory_io` and is importable from here too.

Durability: ``append_call`` returns only after the call's transaction is committed with
``synchronous=FULL`` (the WAL is fsynced), so an acknowledged call survives ``kill -9`` of the
writer. Writes go through one writer thread per store that *group-commits* whatever is queued
(many rollouts appending at once share one fsync); readers use their own connections, which WAL
lets run beside the writer. Several processes may write the same file (SQLite's lock +
``busy_timeout``).

Token ids are stored as int32 arrays and logprobs as float64 arrays (lossless). A call's prompt is
stored as a delta against the previous call of the same rollout (shared prefix length + tail), so
the log grows linearly with a multi-turn rollout, not quadratically.
"""

from __future__ import annotations

import asyncio
import json
import queue
import sqlite3
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .errors import StoreCorrupt, StoreError, StoreForeign, StoreLocked
from .finite import first_nonfinite, nonfinite_in_trajectory
from .trajectory import Trajectory, _common_prefix
from .trajectory_io import (
    StoreWarning,
    _parse_traj,
    export_trajectories,
    is_store_file,
    load_export,
    warn_skipped,
)
from .types import ModelCall

__all__ = ["StoreWarning", "TrajectoryStore", "export_trajectories", "load_trajectories", "warn_skipped"]

FORMAT = "openforge-store"
SCHEMA_VERSION = 1
_SQLITE_MAGIC = b"SQLite format 3\x00"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rollouts (
    rollout_id TEXT PRIMARY KEY, task_id TEXT NOT NULL, harness TEXT, environment TEXT,
    metadata TEXT NOT NULL DEFAULT '{}', created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS calls (
    rollout_id TEXT NOT NULL, idx INTEGER NOT NULL, meta TEXT NOT NULL,
    prompt_base INTEGER NOT NULL, prompt_prefix INTEGER NOT NULL, prompt_tail BLOB NOT NULL,
    output BLOB NOT NULL, logprobs BLOB NOT NULL, PRIMARY KEY (rollout_id, idx));
CREATE TABLE IF NOT EXISTS trajectories (
    rollout_id TEXT PRIMARY KEY, task_id TEXT NOT NULL, status TEXT NOT NULL, reward REAL NOT NULL,
    data TEXT NOT NULL, finished_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS trajectories_task ON trajectories (task_id);
"""

_ID_FIELDS = ("prompt_ids", "output_ids", "output_logprobs")


def _ints(b: bytes) -> list[int]:
    a = array("i")
    a.frombytes(b)
    return a.tolist()


def _floats(b: bytes) -> list[float]:
    a = array("d")
    a.frombytes(b)
    return a.tolist()


def _check_file(path: Path) -> None:
    if not path.exists():
        return
    if path.is_dir():
        raise StoreCorrupt(f"{path} is a directory, not an openforge store file")
    with path.open("rb") as f:
        head = f.read(16)
    if not _SQLITE_MAGIC.startswith(head):  # empty or still being created by another process: fine
        raise StoreCorrupt(f"{path} is not an openforge store: not a SQLite database (starts with {head[:12]!r})")


def _busy(e: sqlite3.Error) -> bool:
    msg = str(e).lower()
    return isinstance(e, sqlite3.OperationalError) and ("locked" in msg or "busy" in msg)


def _store_error(path: Path, e: sqlite3.Error, timeout_s: float) -> StoreError:
    """What a SQLite error while opening ``path`` means, in the store's terms."""
    if _busy(e):
        return StoreLocked(f"{path} is locked: another process held it for more than {timeout_s:g}s ({e}); "
                           f"retry, or open it with a longer timeout_s")
    return StoreCorrupt(f"{path} is not a readable openforge store: the database is damaged or not a database ({e})")


def _finite_call(rollout_id: str, call: ModelCall) -> ModelCall:
    bad = first_nonfinite(call.output_logprobs)
    if bad is not None:
        raise StoreError(f"rollout {rollout_id}: call {call.index}: output_logprobs[{bad[0]}] is {bad[1]}; "
                         "the store keeps finite numbers only")
    return call


class TrajectoryStore:
    """SQLite-backed store of calls and trajectories. Thread-safe; use one instance per process.

    Opening raises :class:`~openforge.errors.StoreLocked` (another process held the lock past
    ``timeout_s``), :class:`~openforge.errors.StoreForeign` (a SQLite database that is not an openforge
    store) or :class:`~openforge.errors.StoreCorrupt` (not a database, or a damaged one). Any number of
    processes may create and open the same new file at once."""

    def __init__(self, path: str | Path, *, timeout_s: float = 30.0):
        self.path = Path(path)
        _check_file(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._timeout = timeout_s
        self._local = threading.local()
        self._queue: queue.Queue[tuple[list[tuple[str, tuple[Any, ...]]], Future[None]] | None] = queue.Queue()
        self._tails: dict[str, tuple[int, list[int]]] = {}  # rollout -> (idx, prompt+output of last call)
        self._tails_lock = threading.Lock()
        self._closed = False
        self._open_or_create()
        self._writer = threading.Thread(target=self._write_loop, name="openforge-store-writer", daemon=True)
        self._writer.start()

    def _open_or_create(self) -> None:
        """Check the file is an openforge store, creating the schema if it is new.

        Race-free across processes: the schema and the format row are written in one ``BEGIN
        IMMEDIATE`` transaction (``CREATE … IF NOT EXISTS``, ``INSERT OR IGNORE``), so whoever comes
        second finds a complete store. SQLite answers some steps of opening a file another process is
        creating (switching it to WAL, reading a half-initialised WAL index) with SQLITE_BUSY without
        waiting on its busy handler; those are retried until ``timeout_s``."""
        deadline = time.monotonic() + self._timeout
        delay = 0.001
        while True:
            try:
                self._init_once()
                return
            except sqlite3.Error as e:
                if not _busy(e) or time.monotonic() + delay > deadline:
                    raise _store_error(self.path, e, self._timeout) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def _init_once(self) -> None:
        conn = self._connect()
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if tables and "meta" not in tables:
                raise StoreForeign(f"{self.path} is a SQLite database but not an openforge store "
                                   f"(tables: {', '.join(sorted(tables)[:5])})")
            if tables:  # never add our tables to somebody else's database
                self._check_format(conn)
            conn.execute("BEGIN IMMEDIATE")
            try:
                for stmt in _SCHEMA.split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
                conn.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?), ('schema', ?)",
                             (FORMAT, str(SCHEMA_VERSION)))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            self._check_format(conn)
        finally:
            conn.close()

    def _check_format(self, conn: sqlite3.Connection) -> None:
        try:
            fmt = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.OperationalError as e:
            if _busy(e):
                raise
            raise StoreForeign(f"{self.path} is a SQLite database but not an openforge store ({e})") from None
        if fmt.get("format") != FORMAT:
            raise StoreForeign(f"{self.path} is a SQLite database but not an openforge store "
                               f"(its meta table says format {fmt.get('format')!r})")
        if int(fmt.get("schema", "0")) > SCHEMA_VERSION:
            raise StoreError(f"{self.path} was written by a newer openforge (schema {fmt['schema']})")

    # ---------------------------------------------------------------- connections
    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute(f"PRAGMA busy_timeout={int(self._timeout * 1000)}")
        return conn

    def _reader(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
        return conn

    # ---------------------------------------------------------------- writer thread
    def _write_loop(self) -> None:
        conn = self._connect()
        try:
            while True:
                item = self._queue.get()
                if item is None:
                    return
                batch = [item]
                while True:  # group commit: take everything already queued
                    try:
                        nxt = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is None:
                        self._queue.put(None)
                        break
                    batch.append(nxt)
                self._commit(conn, batch)
        finally:
            conn.close()

    @staticmethod
    def _commit(conn: sqlite3.Connection, batch: list[tuple[list[tuple[str, tuple[Any, ...]]], Future[None]]]) -> None:
        try:
            conn.execute("BEGIN IMMEDIATE")
            errors: dict[int, BaseException] = {}
            for i, (ops, _) in enumerate(batch):
                conn.execute("SAVEPOINT op")
                try:
                    for sql, params in ops:
                        conn.execute(sql, params)
                    conn.execute("RELEASE op")
                except sqlite3.Error as e:
                    conn.execute("ROLLBACK TO op")
                    conn.execute("RELEASE op")
                    errors[i] = e
            conn.execute("COMMIT")
        except BaseException as e:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            for _, fut in batch:
                fut.set_exception(StoreError(f"store write failed: {e}"))
            return
        for i, (_, fut) in enumerate(batch):
            if i in errors:
                fut.set_exception(StoreError(f"store write failed: {errors[i]}"))
            else:
                fut.set_result(None)

    def _submit(self, ops: list[tuple[str, tuple[Any, ...]]]) -> Future[None]:
        if self._closed:
            raise StoreError(f"store {self.path} is closed")
        fut: Future[None] = Future()
        # Running from the start: a queued write cannot be taken back, and a waiter that gives up
        # (a cancelled asyncio task) must not cancel the future the writer thread will resolve.
        fut.set_running_or_notify_cancel()
        self._queue.put((ops, fut))
        return fut

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
        self._submit(
            [
                (
                    "INSERT OR IGNORE INTO rollouts VALUES (?, ?, ?, ?, ?, ?)",
                    (rollout_id, task_id, harness, environment, json.dumps(metadata or {}), time.time()),
                )
            ]
        ).result()

    def _call_ops(self, rollout_id: str, call: ModelCall) -> list[tuple[str, tuple[Any, ...]]]:
        prompt = call.prompt_ids
        base, prefix = -1, 0
        with self._tails_lock:
            prev = self._tails.get(rollout_id)
            if prev is not None and prev[0] < call.index:
                k = _common_prefix(prev[1], prompt)
                if k > 0:
                    base, prefix = prev[0], k
            self._tails[rollout_id] = (call.index, prompt + call.output_ids)
        return [
            (
                "INSERT INTO calls VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    rollout_id,
                    call.index,
                    call.model_dump_json(exclude=set(_ID_FIELDS)),  # pydantic-core: a third of dump + json.dumps
                    base,
                    prefix,
                    array("i", prompt[prefix:]).tobytes(),
                    array("i", call.output_ids).tobytes(),
                    array("d", call.output_logprobs).tobytes(),
                ),
            )
        ]

    def append_call(self, rollout_id: str, call: ModelCall) -> None:
        """Append one call; returns once it is durable. Appending the same index twice is an error,
        and so is a non-finite logprob (:class:`StoreError`, nothing written)."""
        self._submit(self._call_ops(rollout_id, _finite_call(rollout_id, call))).result()

    async def aappend_call(self, rollout_id: str, call: ModelCall) -> None:
        """Async :meth:`append_call`: awaits durability without blocking the event loop."""
        await asyncio.wrap_future(self._submit(self._call_ops(rollout_id, _finite_call(rollout_id, call))))

    def put_trajectory(self, traj: Trajectory) -> None:
        """Store (or replace) a finished trajectory; its segments are validated first. A non-finite
        number anywhere in it (NaN/Infinity reward, sub-score, logprob, metric) is refused with a
        :class:`StoreError` naming it: its JSON could not be read back."""
        bad = nonfinite_in_trajectory(traj)
        if bad is not None:
            raise StoreError(f"rollout {traj.rollout_id}: {bad}; the store keeps finite numbers only")
        traj.validate_segments()
        self._submit(
            [
                (
                    "INSERT OR IGNORE INTO rollouts VALUES (?, ?, ?, ?, ?, ?)",
                    (traj.rollout_id, traj.task_id, traj.harness, traj.environment, json.dumps(traj.metadata), time.time()),
                ),
                (
                    "INSERT OR REPLACE INTO trajectories VALUES (?, ?, ?, ?, ?, ?)",
                    (traj.rollout_id, traj.task_id, str(traj.status), traj.reward, traj.to_json(), time.time()),
                ),
            ]
        ).result()
        with self._tails_lock:
            self._tails.pop(traj.rollout_id, None)

    async def aput_trajectory(self, traj: Trajectory) -> None:
        await asyncio.to_thread(self.put_trajectory, traj)

    # ---------------------------------------------------------------- reads
    def calls(self, rollout_id: str) -> list[ModelCall]:
        """All recorded calls of a rollout, in index order, with their exact token ids."""
        rows = self._reader().execute(
            "SELECT idx, meta, prompt_base, prompt_prefix, prompt_tail, output, logprobs FROM calls "
            "WHERE rollout_id = ? ORDER BY idx",
            (rollout_id,),
        )
        full: dict[int, list[int]] = {}
        out: list[ModelCall] = []
        for idx, meta, base, prefix, tail, output, logprobs in rows:
            prompt = (full[base][:prefix] if base >= 0 else []) + _ints(tail)
            out_ids = _ints(output)
            try:
                call = ModelCall.model_validate(
                    {**json.loads(meta), "prompt_ids": prompt, "output_ids": out_ids, "output_logprobs": _floats(logprobs)}
                )
            except (ValidationError, KeyError, ValueError) as e:
                raise StoreError(f"{self.path}: call {idx} of rollout {rollout_id} is corrupt: {e}") from None
            full[idx] = prompt + out_ids
            out.append(call)
        return out

    def rollouts(self) -> list[dict[str, Any]]:
        rows = self._reader().execute(
            "SELECT r.rollout_id, r.task_id, r.harness, r.environment, t.status, t.reward, "
            "(SELECT COUNT(*) FROM calls c WHERE c.rollout_id = r.rollout_id) "
            "FROM rollouts r LEFT JOIN trajectories t USING (rollout_id) ORDER BY r.created_at"
        )
        keys = ("rollout_id", "task_id", "harness", "environment", "status", "reward", "num_calls")
        return [dict(zip(keys, r)) for r in rows]

    def rollout(self, rollout_id: str) -> dict[str, Any] | None:
        """A registered rollout's row: ``task_id``, ``harness``, ``environment``, ``metadata``, ``created_at``
        and ``finished`` (whether its trajectory is stored); None if the store never saw it."""
        row = self._reader().execute(
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

    def open_rollouts(self) -> list[dict[str, Any]]:
        """Rollouts registered but never finished (e.g. open when their proxy died), oldest first."""
        return [r for r in self.rollouts() if r["status"] is None]

    def get_trajectory(self, rollout_id: str) -> Trajectory | None:
        row = self._reader().execute("SELECT data FROM trajectories WHERE rollout_id = ?", (rollout_id,)).fetchone()
        return None if row is None else _parse_traj(row[0], f"{self.path}:{rollout_id}")

    def trajectories(self, *, task_id: str | None = None, status: str | None = None,
                     on_bad: Callable[[StoreError], None] | None = None) -> Iterator[Trajectory]:
        """Stored trajectories, oldest first. A row that is not a valid trajectory raises
        :class:`StoreError` naming it — or, with ``on_bad``, is handed to it and skipped."""
        sql, params = "SELECT rollout_id, data FROM trajectories WHERE 1=1", []
        if task_id is not None:
            sql += " AND task_id = ?"
            params.append(task_id)
        if status is not None:
            sql += " AND status = ?"
            params.append(status)
        for rid, data in self._reader().execute(sql + " ORDER BY finished_at", params).fetchall():
            try:
                yield _parse_traj(data, f"{self.path}: rollout {rid}")
            except StoreError as e:
                if on_bad is None:
                    raise
                on_bad(e)

    # ---------------------------------------------------------------- lifecycle
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._writer.join()
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
