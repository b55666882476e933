"""The store's one writer thread: serialises and commits every write, off the caller's thread.

Owns: :class:`Writer` (the queue, group commit, the futures callers wait on) and :class:`LogState`
(what the writer remembers per rollout to encode the next row small: the last call's tokens and
request, and which call objects it logged).

A write is a *job*: a function the writer thread calls with the :class:`LogState` to get the SQL to
run and, optionally, an ``apply`` that updates the state once that SQL succeeded (returning how to
undo it, should the transaction's commit fail). Serialising (JSON, token arrays, deltas) thus runs in
the writer thread, never on an event loop. The writer *group-commits*: it takes everything already
queued into one transaction (one fsync), each job under its own savepoint, so one job's error fails
that job alone. A caller's future resolves only after the transaction is committed with
``synchronous=FULL``: when it does, the write is durable.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import StoreError
from ..core.types import ModelCall
from .codec import Tail
from .schema import connect

__all__ = ["Job", "LogState", "Op", "Writer"]

Op = tuple[str, tuple[Any, ...]]
Undo = Callable[[], None]
Job = Callable[["LogState"], tuple[list[Op], Callable[[], Undo] | None]]

KEEP_FINISHED = 1024  # finished rollouts whose logged-call references are kept (for a later re-put)


@dataclass
class LogState:
    """Writer-thread-only memory of the log. ``logged`` holds weak references: it never keeps a call
    alive, and a call that is gone is simply stored inline if a trajectory needs it again."""

    tails: dict[str, Tail] = field(default_factory=dict)
    logged: dict[str, dict[int, weakref.ref[ModelCall]]] = field(default_factory=dict)
    finished: OrderedDict[str, None] = field(default_factory=OrderedDict)

    def note_call(self, rollout_id: str, call: ModelCall, tail: Tail) -> Undo:
        old_tail = self.tails.get(rollout_id)
        refs = self.logged.setdefault(rollout_id, {})
        self.tails[rollout_id] = tail
        refs[call.index] = weakref.ref(call)

        def undo() -> None:
            refs.pop(call.index, None)
            if old_tail is None:
                self.tails.pop(rollout_id, None)
            else:
                self.tails[rollout_id] = old_tail
        return undo

    def note_finished(self, rollout_id: str) -> Undo:
        old_tail = self.tails.pop(rollout_id, None)
        self.finished[rollout_id] = None
        self.finished.move_to_end(rollout_id)
        while len(self.finished) > KEEP_FINISHED:
            gone, _ = self.finished.popitem(last=False)
            self.logged.pop(gone, None)

        def undo() -> None:
            if old_tail is not None:
                self.tails.setdefault(rollout_id, old_tail)
        return undo


class Writer:
    """One thread, one connection, all of a store's writes (see the module docstring)."""

    def __init__(self, path: Path, timeout_s: float):
        self.path = path
        self._timeout = timeout_s
        self._queue: queue.Queue[tuple[Job, Future[None]] | None] = queue.Queue()
        self._state = LogState()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="openforge-store-writer", daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> Future[None]:
        """Queue ``job``; the future resolves once it is durable (or fails with its error)."""
        if self._closed:
            raise StoreError(f"store {self.path} is closed")
        fut: Future[None] = Future()
        # Running from the start: a queued write cannot be taken back, and a waiter that gives up
        # (a cancelled asyncio task) must not cancel the future the writer thread will resolve.
        fut.set_running_or_notify_cancel()
        self._queue.put((job, fut))
        return fut

    def close(self) -> None:
        """Commit what is queued, then stop the thread."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join()

    def _loop(self) -> None:
        conn = connect(self.path, self._timeout)
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

    def _commit(self, conn: sqlite3.Connection, batch: list[tuple[Job, Future[None]]]) -> None:
        errors: dict[int, BaseException] = {}
        undos: list[Undo] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for i, (job, _) in enumerate(batch):
                try:
                    ops, apply = job(self._state)
                except Exception as e:  # bad data: the job's own error, as the caller raised it
                    errors[i] = e
                    continue
                conn.execute("SAVEPOINT op")
                try:
                    for sql, params in ops:
                        conn.execute(sql, params)
                    conn.execute("RELEASE op")
                except sqlite3.Error as e:
                    conn.execute("ROLLBACK TO op")
                    conn.execute("RELEASE op")
                    errors[i] = StoreError(f"store write failed: {e}")
                    continue
                if apply is not None:
                    undos.append(apply())
            conn.execute("COMMIT")
        except BaseException as e:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            for undo in reversed(undos):
                undo()
            for _, fut in batch:
                fut.set_exception(StoreError(f"store write failed: {e}"))
            return
        for i, (_, fut) in enumerate(batch):
            if i in errors:
                fut.set_exception(errors[i])
            else:
                fut.set_result(None)
