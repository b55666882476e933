"""Reading a sandboxed command's output into the driver without trusting its size.

Owns: :class:`BoundedOutput` (keeps the first and the last bytes of a stream, counts what it drops
in between), :func:`drain` (reads a pipe into one to EOF) and :func:`communicate` (a process's stdin
fed, both pipes drained, the process waited for). An agent can print gigabytes, or write
into its parent's stdout (``/proc/$PPID/fd/1``); the driver keeps at most ``head + tail`` bytes of
each stream, and the result says how much it dropped.
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["DEFAULT_HEAD", "DEFAULT_TAIL", "BoundedOutput", "communicate", "drain"]

#: Bytes kept from the start and from the end of each stream (stdout, stderr) of one command.
DEFAULT_HEAD = 4 * 1024 * 1024
DEFAULT_TAIL = 4 * 1024 * 1024
_CHUNK = 64 * 1024


class BoundedOutput:
    """The first ``head`` and the last ``tail`` bytes of a stream; :attr:`dropped` counts the rest."""

    def __init__(self, head: int = DEFAULT_HEAD, tail: int = DEFAULT_TAIL):
        self.head_limit, self.tail_limit = head, tail
        self._head = bytearray()
        self._tail = bytearray()
        self.dropped = 0

    def feed(self, data: bytes) -> None:
        room = self.head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data:
            return
        self._tail += data
        over = len(self._tail) - self.tail_limit
        if over > 0:
            del self._tail[:over]
            self.dropped += over

    def text(self) -> str:
        """The kept bytes, decoded; where bytes were dropped, a line that says how many."""
        if not self.dropped:
            return (bytes(self._head) + bytes(self._tail)).decode(errors="replace")
        note = f"\n[openforge: {self.dropped} bytes of output dropped here]\n"
        return bytes(self._head).decode(errors="replace") + note + bytes(self._tail).decode(errors="replace")


async def drain(stream: asyncio.StreamReader | None, out: BoundedOutput) -> None:
    """Read ``stream`` to EOF into ``out``."""
    if stream is None:
        return
    while chunk := await stream.read(_CHUNK):
        out.feed(chunk)


async def communicate(proc: asyncio.subprocess.Process, stdin: bytes | None, out: BoundedOutput,
                      err: BoundedOutput) -> None:
    """``proc.communicate`` with bounded memory: feed ``stdin``, read both pipes to EOF, wait."""

    async def feed() -> None:
        if proc.stdin is None:
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(stdin or b"")
            await proc.stdin.drain()
        proc.stdin.close()

    await asyncio.gather(feed(), drain(proc.stdout, out), drain(proc.stderr, err))
    await proc.wait()
