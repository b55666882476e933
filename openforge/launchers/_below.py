"""Directories below a rollout's own directory, reached by the driver without following a link.

Owns: :func:`open_dir_below`.

The rollout's directory is the agent's to change: between two commands (or during one, from another)
it can replace any directory in it by a link to a host path. What the driver binds into a later
command, or makes there, is therefore opened one step at a time relative to its parent, refusing a
link at every step, and bound by descriptor (``bwrap --bind-fd``), never by path.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from ..core.errors import SandboxError

__all__ = ["open_dir_below"]


def open_dir_below(top: Path, rel: str, *, make: int | None = None, owner: int | None = None) -> int:
    """An ``O_PATH`` descriptor of the directory ``top/rel`` (``top``: a directory the agent cannot
    replace, such as the rollout's own), each step opened relative to its parent without following a
    link: what a bind mount of it shows is that directory, whatever links the agent planted or swaps in
    meanwhile. ``make``: create missing steps with that mode (set exactly, umask aside), handed to
    ``owner`` (a uid) when given. A link or a non-directory on the path: :class:`SandboxError`."""
    parts = Path(rel).parts if rel != "." else ()
    if parts and parts[0] == "..":
        raise SandboxError(f"{rel} is not inside the sandbox")
    fd = os.open(top, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            if make is not None:
                _make_dir(fd, part, make, owner)
            nxt = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError as e:
        os.close(fd)
        if e.errno == errno.ENOENT:
            raise SandboxError(f"the sandbox's {rel} is gone: the agent moved or removed it") from None
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise SandboxError(f"the sandbox's {rel} is not its own directory any more: a link or a file is "
                              "on its path") from None
        raise
    return fd


def _make_dir(parent: int, name: str, mode: int, owner: int | None) -> None:
    """Create ``name`` in the directory ``parent`` (a descriptor) with exactly ``mode``, owned by
    ``owner``; one that exists is left as it is."""
    try:
        os.mkdir(name, 0o700, dir_fd=parent)
    except FileExistsError:
        return
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    try:
        if owner is not None:
            os.fchown(fd, owner, owner)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
