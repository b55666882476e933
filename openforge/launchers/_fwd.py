"""In-sandbox init: TCP→Unix-socket forwarders, then run one command and pass its exit status on.

Run as a plain script (``python -I -S _fwd.py [--lo-up] --map HOST:PORT=SOCK ... -- ARGV...``) inside
the sandbox's network namespace, where only ``lo`` exists. Each ``--map`` listens on ``HOST:PORT`` and
pipes every connection to the Unix socket ``SOCK`` (bind-mounted from the host: the proxy and the
environment's mock services), so unmodified harnesses that only speak TCP reach exactly those
endpoints and nothing else. SIGTERM/SIGINT/SIGHUP are forwarded to the command's process group.

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


def _lo_up() -> None:
    """Bring the loopback interface up (a fresh ``unshare -n`` namespace has it down)."""
    import fcntl
    import struct

    siocgifflags, siocsifflags = 0x8913, 0x8914
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(s, siocgifflags, ifr))[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sH14s", b"lo", flags | 0x1 | 0x40, b""))


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


def _handler(sock_path: str):
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            ur, uw = await asyncio.open_unix_connection(sock_path)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, uw), _pipe(ur, writer))

    return handle


def _serve(maps: list[tuple[str, int, str]], ready: threading.Event, errors: list[str]) -> None:
    async def main() -> None:
        servers = []
        for host, port, path in maps:
            try:
                servers.append(await asyncio.start_server(_handler(path), host, port))
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
        if argv[i] == "--lo-up":
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
