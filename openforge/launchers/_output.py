"""Reading a sandboxed command's output into the driver without trusting its size.

Owns: :class:`BoundedOutput` (keeps the first and the last bytes of a stream, counts what it drops
in between) and :func:`drain` (reads a pipe into one to EOF). An agent can print gigabytes, or write
into its parent's stdout (``/proc/$PPID/fd/1``); the driver keeps at most ``head + tail`` bytes of
each stream, and the result says how much it dropped.
"""

from __future__ import annotations

import asyncio

__all__ = ["DEFAULT_HEAD", "DEFAULT_TAIL", "BoundedOutput", "drain"]

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
