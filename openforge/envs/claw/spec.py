"""How a claw task is declared: :class:`ClawSpec` plus the check helpers its verifier is made of.

Owns: :class:`ClawSpec` (instruction, seed files, setup commands, service seed, reference solution as
shell commands, named checks, whether it earns partial credit), :class:`Check` (a probe and its
:class:`~openforge.envs.claw.credit.Kind`), :class:`CheckContext` (what a check may inspect: the
workdir's files on the host, read-only commands run in the sandbox after the agent stopped, and the
services' in-driver state) and the helpers that build checks.

Every check has a kind, fixed by the helper that builds it: progress (``VALUE``: ``file_is``,
``file_has``, ``lines_start``, ``same``, ``sql``, ``json_at``, ``sh`` with an expected output; ``EFFECT``:
``gone``, ``state``) or a guard (``FORMAT``: ``exists``, ``matches``; ``INTACT``: any check wrapped
in :func:`intact`). ``sh`` without an expected output checks only an exit code and so takes its kind
from the caller. No helper turns a guard into progress (:func:`intact` only makes guards), and
partial credit (:mod:`openforge.envs.claw.credit`) pays only for progress checks.

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
import re
import sqlite3
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...launchers._hostile_read import FileRefused, read_hostile
from ...launchers._verifier import intact_dir
from ...launchers.base import Sandbox
from ..verifier_sandbox import verifier_env
from .credit import Kind
from .services import ServiceState

Probe = Callable[["CheckContext"], Awaitable[bool]]
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

    def data(self, rel: str) -> bytes | None:
        """The bytes of the regular file ``rel`` (``None``, failing the check: absent, not a regular
        file, a link anywhere below the workdir, more than :data:`MAX_READ_BYTES`)."""
        if not intact_dir(self.workdir):
            return None
        try:
            return read_hostile(rel, root=self.workdir, max_bytes=MAX_READ_BYTES)
        except (OSError, ValueError, FileRefused):
            return None

    def text(self, rel: str) -> str | None:
        """:meth:`data` as text."""
        data = self.data(rel)
        return None if data is None else data.decode(errors="replace")

    async def sh(self, cmd: str) -> tuple[int | None, str]:
        env = verifier_env(sys.executable, {"GIT_CONFIG_NOSYSTEM": "1", **_GIT_ENV})
        r = await self.sandbox.exec(["sh", "-c", cmd], timeout_s=30, env=env)
        return r.returncode, r.stdout


@dataclass(frozen=True)
class Check:
    """One named check of a claw task: ``probe`` reads the end state; ``kind`` says whether its passing
    is progress (:data:`~openforge.envs.claw.credit.PROGRESS`) or a guard. Built by the helpers below."""

    probe: Probe
    kind: Kind

    def __post_init__(self) -> None:
        if not isinstance(self.kind, Kind):
            raise TypeError(f"a claw check's kind is a Kind ({', '.join(k.name for k in Kind)}), got {self.kind!r}")

    async def __call__(self, ctx: CheckContext) -> bool:
        return await self.probe(ctx)


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
    #: scored with partial credit (:func:`~openforge.envs.claw.credit.partial_credit`); else 1.0 or 0.0
    partial: bool = False

    def __post_init__(self) -> None:
        what = f"claw task {self.id or self.category!r}"
        if not self.checks:
            raise ValueError(f"{what} has no checks")
        bare = [n for n, c in self.checks.items() if not isinstance(c, Check)]
        if bare:
            raise TypeError(f"{what}: check(s) {bare} are not Check objects; build them with the spec helpers "
                            "(file_is, sh, state, exists, intact, ...) so each has a kind")
        if not any(c.kind.progress for c in self.checks.values()):
            raise ValueError(f"{what} has only guards ({sorted(self.checks)}): it needs a VALUE or EFFECT check")


def intact(check: Check) -> Check:
    """``check`` as an INTACT guard: nothing else broken or left behind (never progress)."""
    return Check(check.probe, Kind.INTACT)


def file_is(rel: str, expected: str, *, strip: bool = True, part: Callable[[str], str] | None = None) -> Check:
    """VALUE: the file holds ``expected`` (both stripped unless ``strip=False``); with ``part``, that
    part of the (stripped) text is ``expected`` (one field of a composite answer)."""

    async def check(c: CheckContext) -> bool:
        t = c.text(rel)
        if t is None:
            return False
        if part is not None:
            return part(t.strip()) == expected
        return t.strip() == expected.strip() if strip else t == expected

    return Check(check, Kind.VALUE)


def file_has(rel: str, *needles: str) -> Check:
    """VALUE: the file contains every needle."""

    async def check(c: CheckContext) -> bool:
        t = c.text(rel)
        return t is not None and all(n in t for n in needles)

    return Check(check, Kind.VALUE)


def lines_start(rel: str, *lines: str) -> Check:
    """VALUE: the file's first lines (of its stripped text, as :func:`file_is` reads it) are ``lines``;
    what follows them is not looked at."""

    async def check(c: CheckContext) -> bool:
        t = c.text(rel)
        return t is not None and t.strip().splitlines()[: len(lines)] == list(lines)

    return Check(check, Kind.VALUE)


def exists(rel: str) -> Check:
    """FORMAT: a regular file ``rel`` is there (whatever it holds)."""

    async def check(c: CheckContext) -> bool:
        p = c.path(rel)
        return p is not None and p.is_file()

    return Check(check, Kind.FORMAT)


def matches(rel: str, pattern: str) -> Check:
    """FORMAT: the file's stripped text matches the regular expression ``pattern`` as a whole."""
    rx = re.compile(pattern)

    async def check(c: CheckContext) -> bool:
        t = c.text(rel)
        return t is not None and rx.fullmatch(t.strip()) is not None

    return Check(check, Kind.FORMAT)


def gone(*rels: str) -> Check:
    """EFFECT: none of ``rels`` is there any more."""

    async def check(c: CheckContext) -> bool:
        return intact_dir(c.workdir) and not any(c.exists(r) for r in rels)

    return Check(check, Kind.EFFECT)


def sh(cmd: str, expected: str | None = None, *, rc: int = 0, kind: Kind | None = None) -> Check:
    """Run a read-only command in the sandbox (after the agent stopped); compare exit code / output.

    With ``expected`` the check is a VALUE unless ``kind`` says otherwise; without it only the exit
    code is compared, which says nothing by itself about progress, so ``kind`` is required."""
    if kind is None:
        if expected is None:
            raise ValueError(f"sh({cmd!r}) compares only an exit code: say what it checks with kind=Kind.VALUE "
                             "(a comparison), Kind.EFFECT (the side effect asked for) or Kind.FORMAT (a shape)")
        kind = Kind.VALUE

    async def check(c: CheckContext) -> bool:
        code, out = await c.sh(cmd)
        return code == rc and (expected is None or out.strip() == expected.strip())

    return Check(check, kind)


def same(left: str, right: str) -> Check:
    """VALUE: the read-only commands ``left`` and ``right`` both succeed and print the same non-empty
    text (``test "$(a)" = "$(b)"`` alone passes when both fail: a wiped repository "matched")."""
    cmd = f"a=$({left}) && b=$({right}) && [ -n \"$a\" ] && [ \"$a\" = \"$b\" ]"
    return sh(cmd, kind=Kind.VALUE)


def sql(db: str, query: str, expected: list[tuple]) -> Check:
    """VALUE: ``query`` on the database file ``db`` returns ``expected``. The file is read as any other
    workdir file (:meth:`CheckContext.data`: no link, regular, bounded) and queried in memory, so the
    check never opens the agent's file, its journal or its WAL."""

    async def check(c: CheckContext) -> bool:
        data = c.data(db)
        if not data:
            return False
        try:
            con = _in_memory(data)
            try:
                return [tuple(r) for r in con.execute(query).fetchall()] == expected
            finally:
                con.close()
        except sqlite3.Error:
            return False

    return Check(check, Kind.VALUE)


def _in_memory(data: bytes) -> sqlite3.Connection:
    """A connection to a private copy of the database ``data`` (in memory; a private temporary file on
    Python 3.10, which lacks ``deserialize``)."""
    con = sqlite3.connect(":memory:")
    if hasattr(con, "deserialize"):
        con.deserialize(data)
        return con
    con.close()
    fd, name = tempfile.mkstemp(suffix=".db")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    con = sqlite3.connect(name)
    os.unlink(name)  # the open connection keeps it
    return con


def json_at(rel: str, pred: Callable[[Any], bool]) -> Check:
    """VALUE: the file parses as JSON and ``pred`` holds for it."""

    async def check(c: CheckContext) -> bool:
        t = c.text(rel)
        try:
            return t is not None and bool(pred(json.loads(t)))
        except (ValueError, KeyError, TypeError, IndexError):
            return False

    return Check(check, Kind.VALUE)


def state(pred: Callable[[ServiceState], bool]) -> Check:
    """EFFECT: ``pred`` holds for the services' state."""

    async def check(c: CheckContext) -> bool:
        try:
            return c.state is not None and bool(pred(c.state))
        except (KeyError, TypeError, IndexError, ValueError):
            return False

    return Check(check, Kind.EFFECT)


def curl(method: str, path: str, body: dict | None = None) -> str:
    """A reference-solution command calling the services' HTTP API."""
    data = f" -H 'content-type: application/json' -d '{json.dumps(body)}'" if body is not None else ""
    return f"curl -sf -X {method} \"$CLAW_API{path}\"{data}"
