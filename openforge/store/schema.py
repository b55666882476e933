"""The store file: what makes a SQLite file an openforge store, its tables, and migrations.

Owns: the format marker and schema version, the table definitions, opening (or creating) a store
race-free across processes, migrating an older store forward, and what a SQLite error while opening
means in the store's terms (:class:`~openforge.core.errors.StoreLocked` / ``StoreForeign`` / ``StoreCorrupt``).

Schema versions:

- 1: calls hold their full request body; a trajectory row holds the whole trajectory JSON.
- 2: a call's request may be a delta against an earlier call of its rollout (``req_base`` /
  ``req_delta``); a trajectory row (``layout`` 2) references the rollout's logged calls by index and
  keeps segments derivable from them as their call list only. Rows written under schema 1 stay
  readable (``layout`` 1, ``req_base`` -1). Opening a schema-1 store migrates it (adds the columns).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from ..core.errors import StoreCorrupt, StoreError, StoreForeign, StoreLocked

__all__ = ["FORMAT", "SCHEMA_VERSION", "check_file", "connect", "is_busy", "open_or_create"]

FORMAT = "openforge-store"
SCHEMA_VERSION = 2
SQLITE_MAGIC = b"SQLite format 3\x00"

_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rollouts (
    rollout_id TEXT PRIMARY KEY, task_id TEXT NOT NULL, harness TEXT, environment TEXT,
    metadata TEXT NOT NULL DEFAULT '{}', created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS calls (
    rollout_id TEXT NOT NULL, idx INTEGER NOT NULL, meta TEXT NOT NULL,
    prompt_base INTEGER NOT NULL, prompt_prefix INTEGER NOT NULL, prompt_tail BLOB NOT NULL,
    output BLOB NOT NULL, logprobs BLOB NOT NULL,
    req_base INTEGER NOT NULL DEFAULT -1, req_delta TEXT, PRIMARY KEY (rollout_id, idx));
CREATE TABLE IF NOT EXISTS trajectories (
    rollout_id TEXT PRIMARY KEY, task_id TEXT NOT NULL, status TEXT NOT NULL, reward REAL NOT NULL,
    data TEXT NOT NULL, finished_at REAL NOT NULL, layout INTEGER NOT NULL DEFAULT 1);
CREATE INDEX IF NOT EXISTS trajectories_task ON trajectories (task_id);
"""

# schema version -> the statements that bring a store of that version to the next one
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE calls ADD COLUMN req_base INTEGER NOT NULL DEFAULT -1",
        "ALTER TABLE calls ADD COLUMN req_delta TEXT",
        "ALTER TABLE trajectories ADD COLUMN layout INTEGER NOT NULL DEFAULT 1"),
}


def check_file(path: Path) -> None:
    """Refuse a path that is a directory or a file that is not SQLite (before SQLite touches it)."""
    if not path.exists():
        return
    if path.is_dir():
        raise StoreCorrupt(f"{path} is a directory, not an openforge store file")
    with path.open("rb") as f:
        head = f.read(16)
    if not SQLITE_MAGIC.startswith(head):  # empty or still being created by another process: fine
        raise StoreCorrupt(f"{path} is not an openforge store: not a SQLite database (starts with {head[:12]!r})")


def is_busy(e: sqlite3.Error) -> bool:
    msg = str(e).lower()
    return isinstance(e, sqlite3.OperationalError) and ("locked" in msg or "busy" in msg)


def _store_error(path: Path, e: sqlite3.Error, timeout_s: float) -> StoreError:
    """What a SQLite error while opening ``path`` means, in the store's terms."""
    if is_busy(e):
        return StoreLocked(f"{path} is locked: another process held it for more than {timeout_s:g}s ({e}); "
                           f"retry, or open it with a longer timeout_s")
    return StoreCorrupt(f"{path} is not a readable openforge store: the database is damaged or not a database ({e})")


def connect(path: Path, timeout_s: float) -> sqlite3.Connection:
    """A connection in WAL mode with ``synchronous=FULL`` (a commit is fsynced) and a busy timeout."""
    conn = sqlite3.connect(path, timeout=timeout_s, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(f"PRAGMA busy_timeout={int(timeout_s * 1000)}")
    return conn


def open_or_create(path: Path, timeout_s: float) -> None:
    """Check ``path`` is an openforge store, creating the schema if it is new and migrating it if old.

    Race-free across processes: the schema, the format row and any migration are written in one
    ``BEGIN IMMEDIATE`` transaction (``CREATE … IF NOT EXISTS``, ``INSERT OR IGNORE``), so whoever comes
    second finds a complete, current store. SQLite answers some steps of opening a file another process
    is creating (switching it to WAL, reading a half-initialised WAL index) with SQLITE_BUSY without
    waiting on its busy handler; those are retried until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    delay = 0.001
    while True:
        try:
            _init_once(path, timeout_s)
            return
        except sqlite3.Error as e:
            if not is_busy(e) or time.monotonic() + delay > deadline:
                raise _store_error(path, e, timeout_s) from None
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _init_once(path: Path, timeout_s: float) -> None:
    conn = connect(path, timeout_s)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if tables and "meta" not in tables:
            raise StoreForeign(f"{path} is a SQLite database but not an openforge store "
                               f"(tables: {', '.join(sorted(tables)[:5])})")
        if tables:  # never add our tables to somebody else's database
            _check_format(path, conn)
        conn.execute("BEGIN IMMEDIATE")
        try:
            for stmt in _TABLES.split(";"):
                if stmt.strip():
                    conn.execute(stmt)
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?), ('schema', ?)",
                         (FORMAT, str(SCHEMA_VERSION)))
            _migrate(conn)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        _check_format(path, conn)
    finally:
        conn.close()


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring the store to :data:`SCHEMA_VERSION` (inside the opening transaction)."""
    version = int(conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0])
    while version < SCHEMA_VERSION:
        for stmt in _MIGRATIONS[version]:
            conn.execute(stmt)
        version += 1
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(version),))


def _check_format(path: Path, conn: sqlite3.Connection) -> None:
    try:
        fmt = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.OperationalError as e:
        if is_busy(e):
            raise
        raise StoreForeign(f"{path} is a SQLite database but not an openforge store ({e})") from None
    if fmt.get("format") != FORMAT:
        raise StoreForeign(f"{path} is a SQLite database but not an openforge store "
                           f"(its meta table says format {fmt.get('format')!r})")
    if int(fmt.get("schema", "0")) > SCHEMA_VERSION:
        raise StoreError(f"{path} was written by a newer openforge (schema {fmt['schema']})")
