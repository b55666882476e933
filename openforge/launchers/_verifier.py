"""What a verifier may take from the agent's files, on the launcher side: a workdir that is still the
directory the driver made (not a symlink the agent put in its place), and a copy of it *as data*
(regular files and directories only, bounded in size and depth) for a verifier that runs on the host.

Owns: :func:`intact_dir`, :func:`copy_as_data` (-> :class:`CopyReport`), :class:`WorkdirTooLarge`,
:data:`VERIFIER_WEAK_MODE_RISKS`.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ..errors import EnvironmentError_

__all__ = ["VERIFIER_WEAK_MODE_RISKS", "CopyReport", "WorkdirTooLarge", "copy_as_data", "intact_dir"]

#: What a verifier gives up in each weaker isolation mode (its sandbox is then as weak as the agent's).
VERIFIER_WEAK_MODE_RISKS = {
    "unshare": "the verifier runs as your user on the host's file system (network cut, clean environment, "
               "workdir as its cwd): a symlink the agent left in its workdir is followed to any file your "
               "user can read, and a process the agent left behind can still change the files being checked",
    "none": "the verifier runs as your user on the host, network open (clean environment, workdir as its "
            "cwd): a symlink the agent left is followed to any file your user can read, and anything the "
            "agent left running can change the files being checked or answer for a service",
}

_CHUNK = 1 << 20


def intact_dir(path: Path) -> bool:
    """``path`` is a real directory at its own path: neither it nor a parent is a symlink."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode) and os.path.realpath(path) == os.path.abspath(path)
    except OSError:
        return False


class WorkdirTooLarge(EnvironmentError_):
    """The workdir holds more than a verifier's copy may take (``env_error``: the environment cannot
    check it; the limit is the task's, not the policy's)."""


@dataclass
class CopyReport:
    files: int = 0
    bytes: int = 0
    skipped: int = 0  # symlinks, fifos, sockets, devices, and entries deeper than max_depth


def copy_as_data(src: Path, dst: Path, *, max_bytes: int, max_depth: int = 64) -> CopyReport:
    """Copy ``src`` to ``dst`` as data: directories and regular files (opened without following
    links, never blocking on a FIFO); symlinks, devices, FIFOs and sockets are left out, so nothing
    in the copy points outside it. Raises :class:`WorkdirTooLarge` past ``max_bytes``."""
    rep = CopyReport()
    dst.mkdir(mode=0o700)
    stack: list[tuple[Path, Path, int]] = [(src, dst, 0)]  # iterative: any depth, no RecursionError
    while stack:
        s_dir, d_dir, depth = stack.pop()
        try:
            entries = list(os.scandir(s_dir))
        except OSError:
            rep.skipped += 1
            continue
        for e in entries:
            kind = _kind(e)
            if kind == "dir" and depth < max_depth:
                (d_dir / e.name).mkdir(mode=0o700)
                stack.append((Path(e.path), d_dir / e.name, depth + 1))
            elif kind == "file":
                rep.bytes += _copy_file(Path(e.path), d_dir / e.name, max_bytes - rep.bytes, max_bytes)
                rep.files += 1
            else:
                rep.skipped += 1
    return rep


def _kind(e: os.DirEntry) -> str | None:
    try:
        if e.is_symlink():
            return None
        if e.is_dir(follow_symlinks=False):
            return "dir"
        return "file" if e.is_file(follow_symlinks=False) else None
    except OSError:
        return None


def _copy_file(src: Path, dst: Path, budget: int, limit: int) -> int:
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return 0
    n = 0
    with os.fdopen(fd, "rb") as fin:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return 0
        with open(dst, "wb") as fout:
            while chunk := fin.read(_CHUNK):
                n += len(chunk)
                if n > budget:
                    raise WorkdirTooLarge(f"the workdir holds more than {limit // _CHUNK} MB (at {src.name!r}): "
                                          "too much to copy for a verifier that runs on the host")
                fout.write(chunk)
    return n
