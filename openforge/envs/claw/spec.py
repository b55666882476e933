"""How a claw task is declared: :class:`ClawSpec` plus the check helpers its verifier is made of.

Owns: :class:`ClawSpec` (instruction, seed files, setup commands, service seed, reference solution as
shell commands, named checks), :class:`CheckContext` (what a check may inspect: the workdir's files
on the host, read-only commands run in the sandbox after the agent stopped, and the services'
in-driver state) and the helpers ``file_is``, ``file_has``, ``gone``, ``sh``, ``sql``, ``json_at``,
``state``.

The workdir is the agent's output, read by the driver as a hostile file (``launchers._hostile_read``,
the reader ``Sandbox.read_file`` uses): only inside a workdir that is still the directory the launcher
made (not a symlink the agent put in its place, to another rollout's workdir say), following no link
below it, opening regular files only (a FIFO never blocks the driver), and at most
:data:`MAX_READ_BYTES` (a larger file is not read: it fails its check, the agent's output, not the
environment's fault). Commands run with a fixed ``PATH`` and git
ignoring the repository's ``core.fsmonitor`` and hooks.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...launchers._hostile_read import FileRefused, read_hostile
from ...launchers._verifier import intact_dir
from ...launchers.base import Sandbox
from ..verifier_sandbox import verifier_env
from .services import ServiceState

Check = Callable[["CheckContext"], Awaitable[bool]]
#: The most of one workdir file a check reads; a larger file fails the check.
MAX_READ_BYTES = 4 << 20
#: git, as a check runs it: the repository's own config may not run anything (config from the
#: environment outranks the repository's).
_GIT_ENV = {"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "core.fsmonitor", "GIT_CONFIG_VALUE_0": "false",
            "GIT_CONFIG_KEY_1": "core.hooksPath", "GIT_CONFIG_VALUE_1": "/dev/null"}


@dataclass
class CheckContext:
    workdir: Path
    sandbox: Sandbox
    state: ServiceState | None

    def path(self, rel: str) -> Path | None:
        """``rel`` in the workdir, resolved, when it stays inside an intact workdir; else None."""
        if not intact_dir(self.workdir):
            return None
        p = (self.workdir / rel).resolve()
        return p if p.is_relative_to(self.workdir) else None

    def exists(self, rel: str) -> bool:
        """Whether ``rel`` is there at all (a dangling link counts: it was not removed)."""
        return intact_dir(self.workdir) and os.path.lexists(self.workdir / rel)

    def text(self, rel: str) -> str | None:
        """The text of the regular file ``rel`` (``None``, failing the check: absent, not a regular
        file, a link anywhere below the workdir, more than :data:`MAX_READ_BYTES`)."""
        if not intact_dir(self.workdir):
            return None
        try:
            data = read_hostile(rel, root=self.workdir, max_bytes=MAX_READ_BYTES)
        except (OSError, ValueError, FileRefused):
            return None
        return data.decode(errors="replace")

    async def sh(self, cmd: str) -> tuple[int | None, str]:
        env = verifier_env(sys.executable, {"GIT_CONFIG_NOSYSTEM": "1", **_GIT_ENV})
        r = await self.sandbox.exec(["sh", "-c", cmd], timeout_s=30, env=env)
        return r.returncode, r.stdout


@dataclass
class ClawSpec:
    id: str
    category: str
    instruction: str
    solution: list[str]
    checks: dict[str, Check]
    files: dict[str, str] = field(default_factory=dict)
    setup: list[str] = field(default_factory=list)  # shell commands run in the sandbox before the agent
    services: dict[str, Any] | None = None  # seed of the mock services (None: no services)
    split: str = "train"
    easy: bool = False
    tools: tuple[str, ...] = ("shell",)
    subgoals: tuple[str, ...] = ()


def file_is(rel: str, expected: str, *, strip: bool = True) -> Check:
    async def check(c: CheckContext) -> bool:
        t = c.text(rel)
        return t is not None and (t.strip() == expected.strip() if strip else t == expected)

    return check


def file_has(rel: str, *needles: str) -> Check:
    async def check(c: CheckContext) -> bool:
        t = c.text(rel)
        return t is not None and all(n in t for n in needles)

    return check


def gone(*rels: str) -> Check:
    async def check(c: CheckContext) -> bool:
        return intact_dir(c.workdir) and not any(c.exists(r) for r in rels)

    return check


def sh(cmd: str, expected: str | None = None, *, rc: int = 0) -> Check:
    """Run a read-only command in the sandbox (after the agent stopped); compare exit code / output."""

    async def check(c: CheckContext) -> bool:
        code, out = await c.sh(cmd)
        return code == rc and (expected is None or out.strip() == expected.strip())

    return check


def sql(db: str, query: str, expected: list[tuple]) -> Check:
    async def check(c: CheckContext) -> bool:
        path = c.path(db)
        if path is None or not path.is_file():
            return False
        try:
            con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                return [tuple(r) for r in con.execute(query).fetchall()] == expected
            finally:
                con.close()
        except sqlite3.Error:
            return False

    return check


def json_at(rel: str, pred: Callable[[Any], bool]) -> Check:
    async def check(c: CheckContext) -> bool:
        t = c.text(rel)
        try:
            return t is not None and bool(pred(json.loads(t)))
        except (ValueError, KeyError, TypeError, IndexError):
            return False

    return check


def state(pred: Callable[[ServiceState], bool]) -> Check:
    async def check(c: CheckContext) -> bool:
        try:
            return c.state is not None and bool(pred(c.state))
        except (KeyError, TypeError, IndexError, ValueError):
            return False

    return check


def curl(method: str, path: str, body: dict | None = None) -> str:
    """A reference-solution command calling the services' HTTP API."""
    data = f" -H 'content-type: application/json' -d '{json.dumps(body)}'" if body is not None else ""
    return f"curl -sf -X {method} \"$CLAW_API{path}\"{data}"
