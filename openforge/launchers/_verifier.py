"""What a verifier may take from the agent's files, on the launcher side: a workdir that is still the
directory the driver made (not a symlink the agent put in its place), and a copy of it *as data*
(regular files and directories only, read with the hostile-file reader ``_hostile_read``, bounded in
size and depth) for a verifier that runs on the host.

Owns: :func:`intact_dir`, :func:`copy_as_data` (-> :class:`CopyReport`), :class:`WorkdirTooLarge`,
:data:`VERIFIER_WEAK_MODE_RISKS`.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import AgentOutputError
from ._hostile_read import FileRefused, open_dir_at, open_regular_at

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


class WorkdirTooLarge(AgentOutputError):
    """The workdir the agent left holds more than a verifier's copy may take: the agent's failure
    (``policy_failure``, reward 0, trained), like any other output a verifier cannot use. An agent may
    fill its workdir up to its disk budget (``resources.disk_mb``), so treating this as the
    environment's (``env_error``, discarded) would let it take a failing rollout out of training. A
    task whose own files come near the limit raises the limit instead."""


@dataclass
class CopyReport:
    files: int = 0
    bytes: int = 0
    skipped: int = 0  # symlinks, fifos, sockets, devices, and entries deeper than max_depth


def copy_as_data(src: Path, dst: Path, *, max_bytes: int, max_depth: int = 64) -> CopyReport:
    """Copy ``src`` to ``dst`` as data, reading with ``_hostile_read``: directories and regular files,
    each opened relative to its parent without following a link (``src`` itself too: a workdir the
    agent replaced by a link is copied as an empty one) and never blocking on a FIFO; symlinks,
    devices, FIFOs and sockets are left out, so nothing in the copy points outside it. Raises
    :class:`WorkdirTooLarge` past ``max_bytes``."""
    rep = CopyReport()
    dst.mkdir(mode=0o700)
    src = Path(os.path.abspath(src))
    parent = os.open(src.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        top = open_dir_at(src.name, parent, str(src))
    except (OSError, FileRefused):
        rep.skipped += 1
        return rep
    finally:
        os.close(parent)
    try:
        stack: list[tuple[tuple[str, ...], Path]] = [((), dst)]  # iterative: any depth, no RecursionError
        while stack:
            parts, d_dir = stack.pop()
            try:
                dfd = _open_below(top, parts)
            except (OSError, FileRefused):
                rep.skipped += 1
                continue
            try:
                stack += _copy_dir(dfd, parts, d_dir, rep, max_bytes, max_depth)
            finally:
                os.close(dfd)
    finally:
        os.close(top)
    return rep


def _open_below(top: int, parts: tuple[str, ...]) -> int:
    """A descriptor of ``top/parts...``, each step without following a link (one open descriptor at a
    time, however wide the tree)."""
    fd = os.dup(top)
    for name in parts:
        try:
            nxt = open_dir_at(name, fd, "/".join(parts))
        finally:
            os.close(fd)
        fd = nxt
    return fd


def _copy_dir(dfd: int, parts: tuple[str, ...], d_dir: Path, rep: CopyReport, max_bytes: int,
              max_depth: int) -> list[tuple[tuple[str, ...], Path]]:
    """Copy the regular files of the directory ``dfd`` into ``d_dir``; return its subdirectories to visit."""
    sub: list[tuple[tuple[str, ...], Path]] = []
    try:
        entries = [(e.name, _kind(e)) for e in os.scandir(dfd)]
    except OSError:
        rep.skipped += 1
        return sub
    for name, kind in entries:
        if kind == "dir" and len(parts) < max_depth:
            (d_dir / name).mkdir(mode=0o700)
            sub.append(((*parts, name), d_dir / name))
        elif kind == "file" and _copy_file(dfd, name, d_dir / name, rep, max_bytes):
            rep.files += 1
        else:
            rep.skipped += 1
    return sub


def _kind(e: os.DirEntry) -> str | None:
    try:
        if e.is_symlink():
            return None
        if e.is_dir(follow_symlinks=False):
            return "dir"
        return "file" if e.is_file(follow_symlinks=False) else None
    except OSError:
        return None


def _copy_file(dfd: int, name: str, dst: Path, rep: CopyReport, limit: int) -> bool:
    """Copy the regular file ``name`` of ``dfd`` within what is left of ``limit``; False: not copied."""
    try:
        fd, _ = open_regular_at(name, dfd, name)
    except (OSError, FileRefused):
        return False
    with os.fdopen(fd, "rb") as fin, open(dst, "wb") as fout:
        while chunk := fin.read(_CHUNK):
            rep.bytes += len(chunk)
            if rep.bytes > limit:
                raise WorkdirTooLarge(f"the workdir holds more than {limit // _CHUNK} MB (at {name!r}): "
                                      "too much to copy for a verifier that runs on the host")
            fout.write(chunk)
    return True
