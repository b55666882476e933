"""Command faults whose evidence the agent cannot forge: the driver decides and records each failure.

Owns: :class:`ShimOracle` — a driver-owned directory holding the command shims (shared into the
sandbox read-only, first on the harness's ``PATH``) and a Unix socket the shims ask "fail this
call?". The oracle answers from its own count (``fails`` for ``flaky_command``, always for
``missing_tool``) and timestamps every failure it orders on the host clock: that record is the
evidence (``fired_at``), kept in the driver's memory.

Why the agent cannot forge it: a shim's log in the agent's HOME (the old evidence) could be written
by the agent without ever running the command. Here nothing the agent can write is read back, the
shims cannot be changed (a read-only mount of a driver-owned directory), and the oracle checks each
caller through the kernel (``SO_PEERCRED``): the caller must be the driver's own Python (the shim's
client) whose parent is a shell running exactly the shim's file (``/proc/PID/exe`` compared by inode,
the parent's command line naming the shim). An agent that calls the socket itself, or runs a copy
of the shim from elsewhere, is answered "pass" and counted in :attr:`ShimOracle.refused`; running the
shim *is* running the command.

Needs a sandbox that can share a host path (:meth:`~openforge.launchers.base.Sandbox.share_path`:
the local launcher); elsewhere the shims log in HOME as before (see :mod:`.inject`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["ShimOracle"]

_SHELLS = ("/bin/sh", "/bin/bash", "/bin/dash", "/usr/bin/sh", "/usr/bin/bash", "/usr/bin/dash", "/bin/busybox")
_CLIENT = ("import socket,sys;s=socket.socket(socket.AF_UNIX);s.connect(sys.argv[1]);"
           "s.sendall(sys.argv[2].encode()+b'\\n');print(s.makefile().readline().strip())")


def _inode(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


class ShimOracle:
    """One rollout's command shims and the socket they ask (see the module docstring)."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ofs-", dir="/tmp"))  # short: AF_UNIX paths ≤ 108 bytes
        os.chmod(self.dir, 0o755)  # the sandbox's agent (another uid under a root driver) must read the shims
        self.bin = self.dir / "bin"
        self.bin.mkdir(mode=0o755)
        self.sock = self.dir / "oracle.sock"
        self.fails: dict[str, int | None] = {}  # program -> failures to order (None: every call)
        self.fired: dict[str, list[float]] = {}
        self.refused = 0  # calls that did not come from a shim being run
        self._server: asyncio.AbstractServer | None = None
        self._python = _inode(os.path.realpath(sys.executable))
        self._shells = {i for i in (_inode(os.path.realpath(s)) for s in _SHELLS) if i is not None}

    async def start(self) -> ShimOracle:
        self._server = await asyncio.start_unix_server(self._handle, str(self.sock))
        os.chmod(self.sock, 0o600)  # the driver's; Sandbox.share_path grants the agent (only it) access
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def add(self, prog: str, real: str, *, missing: bool, fails: int, exit_code: int) -> Path:
        """Write the shim of ``prog`` (``real``: the program it stands in front of) and return it."""
        self.fails[prog] = None if missing else fails
        self.fired.setdefault(prog, [])
        ask = f"{shlex.quote(sys.executable)} -I -S -c {shlex.quote(_CLIENT)} {shlex.quote(str(self.sock))} {prog}"
        if missing:
            body = f'{ask} >/dev/null 2>&1\necho "sh: 1: {prog}: not found" >&2\nexit 127\n'
        else:
            body = (f'v=$({ask} 2>/dev/null)\nif [ "$v" = fail ]; then\n'
                    f'  echo "{prog}: error: resource temporarily unavailable (try again)" >&2\n  exit {exit_code}\nfi\n'
                    f'exec {shlex.quote(real)} "$@"\n')
        path = self.bin / prog
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)
        return path

    def _ran_shim(self, pid: int, prog: str) -> bool:
        """Whether ``pid`` is the shim client started by a shell running ``prog``'s shim."""
        if prog not in self.fails or _inode(f"/proc/{pid}/exe") != self._python:
            return False
        parent = _ppid(pid)
        if parent is None or _inode(f"/proc/{parent}/exe") not in self._shells:
            return False
        try:
            with open(f"/proc/{parent}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            return False
        return len(argv) > 1 and argv[1] == str(self.bin / prog).encode()

    async def _handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            sock = w.get_extra_info("socket")
            pid, _uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
            prog = (await asyncio.wait_for(r.readline(), 10))[:64].decode(errors="replace").strip()
            verdict = "pass"
            if not self._ran_shim(pid, prog):
                self.refused += 1
            else:
                budget, fired = self.fails[prog], self.fired[prog]
                if budget is None or len(fired) < budget:
                    fired.append(time.time())
                    verdict = "fail"
            w.write(verdict.encode() + b"\n")
            await w.drain()
        except (OSError, asyncio.TimeoutError, struct.error):
            pass
        finally:
            with contextlib.suppress(Exception):
                w.close()
