"""In-sandbox init: TCP→Unix-socket forwarders, then run one command and pass its exit status on.

Run as a plain script (``python -I -S _fwd.py [--drop UID:GID] [--chdir DIR] [--lo-up] --map HOST:PORT=SOCK ... -- ARGV...``) inside
the sandbox's network namespace, where only ``lo`` exists. Each ``--map`` listens on ``HOST:PORT`` and
pipes every connection to the Unix socket ``SOCK`` (bind-mounted from the host: the proxy and the
environment's mock services), so unmodified harnesses that only speak TCP reach exactly those
endpoints and nothing else. SIGTERM/SIGINT/SIGHUP are forwarded to the command's process group.

``--drop UID:GID`` (bwrap run privileged by a root driver) is done before anything else: the
capability bounding set is emptied, supplementary groups cleared, real/effective/saved uid and gid
set to ``UID:GID``, ``no_new_privs`` set; then the init checks that no capability is left and exits
126 if any step did not hold (fail closed: nothing runs with privileges).

Stdlib only, no openforge imports: it must start in a few milliseconds.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable


def _lo_up() -> None:
    """Bring the loopback interface up (a fresh ``unshare -n`` namespace has it down)."""
    import fcntl
    import struct

    siocgifflags, siocsifflags = 0x8913, 0x8914
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(s, siocgifflags, ifr))[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sH14s", b"lo", flags | 0x1 | 0x40, b""))


def _drop(uid: int, gid: int) -> None:
    """Become ``uid:gid`` with no capabilities and ``no_new_privs`` (see the module docstring)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop, pr_set_no_new_privs = 24, 38
    for cap in range(64):  # caps this kernel does not know fail with EINVAL: fine
        libc.prctl(pr_capbset_drop, cap, 0, 0, 0)
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    if libc.capset(header, (ctypes.c_uint32 * 6)()) != 0:  # no effective/permitted/inheritable caps
        raise OSError(ctypes.get_errno(), "capset failed")
    if libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    with open("/proc/self/status") as f:
        status = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
    caps = {k: int(status[k].strip(), 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb") if k in status}
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid) or any(caps.values()) \
            or status.get("NoNewPrivs", "").strip() != "1":
        raise OSError(f"privileges not dropped: uids {os.getresuid()}, caps {caps}")


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


def bridge(connect: Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]],
           on_connect: Callable[[], None] | None = None):
    """The accept-and-pipe bridge: a connection handler for ``asyncio.start_server`` /
    ``start_unix_server`` that opens a fresh upstream with ``connect()`` for every accepted connection
    and pipes both ways until either side closes. An upstream that cannot be reached closes the
    accepted connection. ``on_connect`` is called for every accepted connection. Every forwarder of
    openforge is one of these (this init's ``--map``, the launchers' ``expose``, environment services)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if on_connect is not None:
            on_connect()
        try:
            ur, uw = await connect()
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, uw), _pipe(ur, writer))

    return handle


def to_unix(path: str) -> Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]:
    """``connect`` for :func:`bridge`: the Unix socket ``path``."""
    return lambda: asyncio.open_unix_connection(path)


def to_tcp(host: str, port: int) -> Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]:
    """``connect`` for :func:`bridge`: ``host:port`` over TCP."""
    return lambda: asyncio.open_connection(host, port)


def _serve(maps: list[tuple[str, int, str]], ready: threading.Event, errors: list[str]) -> None:
    async def main() -> None:
        servers = []
        for host, port, path in maps:
            try:
                servers.append(await asyncio.start_server(bridge(to_unix(path)), host, port))
            except OSError as e:
                errors.append(f"cannot listen on {host}:{port}: {e}")
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(main())


def main(argv: list[str]) -> int:
    maps: list[tuple[str, int, str]] = []
    lo_up = False
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] == "--drop":
            i += 1
            uid, gid = (int(x) for x in argv[i].split(":"))
            try:
                _drop(uid, gid)
            except (OSError, ValueError) as e:
                print(f"_fwd: refusing to run: {e}", file=sys.stderr)
                return 126
        elif argv[i] == "--chdir":
            i += 1
            try:
                os.chdir(argv[i])
            except OSError as e:
                print(f"_fwd: cannot chdir to {argv[i]}: {e}", file=sys.stderr)
                return 126
        elif argv[i] == "--lo-up":
            lo_up = True
        elif argv[i] == "--map":
            i += 1
            addr, path = argv[i].split("=", 1)
            host, port = addr.rsplit(":", 1)
            maps.append((host, int(port), path))
        i += 1
    cmd = argv[i + 1 :]
    if not cmd:
        print("_fwd: no command given", file=sys.stderr)
        return 2
    if lo_up:
        try:
            _lo_up()
        except OSError as e:
            print(f"_fwd: cannot bring lo up: {e}", file=sys.stderr)
    if maps:
        ready, errors = threading.Event(), []
        threading.Thread(target=_serve, args=(maps, ready, errors), daemon=True).start()
        ready.wait(10)
        for e in errors:
            print(f"_fwd: {e}", file=sys.stderr)
    try:
        child = subprocess.Popen(cmd, start_new_session=True)
    except OSError as e:
        print(f"_fwd: cannot run {cmd[0]!r}: {e}", file=sys.stderr)
        return 127

    def forward(signum: int, _frame: object) -> None:
        try:
            os.killpg(child.pid, signum)
        except OSError:
            pass

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, forward)
    rc = child.wait()
    try:  # leave nothing behind in the command's group
        os.killpg(child.pid, signal.SIGKILL)
    except OSError:
        pass
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.stdout.flush()
    os._exit(main(sys.argv[1:]))
