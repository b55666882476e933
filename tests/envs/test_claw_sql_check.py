"""The claw ``sql`` check reads the agent's database as any other workdir file (no link, regular file,
bounded) and queries a private copy: a link, a FIFO or an oversized file fails the check instead of
being opened by the driver."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path

from openforge.envs.claw import spec
from openforge.envs.claw.spec import CheckContext, sql

QUERY, WANT = "SELECT name FROM users", [("ada",)]


def _db(path: Path, rows: int = 1, pad: int = 0) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE users(name TEXT, pad BLOB)")
    con.execute("INSERT INTO users VALUES ('ada', zeroblob(?))", (pad,))
    con.commit()
    con.close()


def _run(workdir: Path, rel: str = "app.db") -> bool:
    return asyncio.run(sql(rel, QUERY, WANT).probe(CheckContext(workdir=workdir, sandbox=None, state=None)))


def test_a_plain_database_passes(tmp_path):
    _db(tmp_path / "app.db")
    assert _run(tmp_path)


def test_a_link_to_a_good_database_fails(tmp_path):
    _db(tmp_path / "real.db")
    (tmp_path / "app.db").symlink_to("real.db")
    assert not _run(tmp_path)


def test_a_fifo_fails_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "app.db")
    assert not _run(tmp_path)


def test_an_oversized_database_fails(tmp_path, monkeypatch):
    _db(tmp_path / "app.db", pad=64 << 10)
    monkeypatch.setattr(spec, "MAX_READ_BYTES", 16 << 10)
    assert not _run(tmp_path)


def test_the_check_never_writes_the_agents_file(tmp_path):
    _db(tmp_path / "app.db")
    before = (tmp_path / "app.db").read_bytes()
    assert _run(tmp_path)
    assert (tmp_path / "app.db").read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]
