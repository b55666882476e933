"""How the local launcher's driver reaches a sandbox's files: paths checked against the rollout's
directory, hostile reads, writes, the workdir a host-side verifier reads — directly, or through the
keeper of a normal-user driver's private area (``_disk.py``), whose files the host's own path does not show.

Owns: :class:`SandboxFiles` (a mixin of ``LocalSandbox``), :func:`lexically_under`, :func:`read_owner`.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from pathlib import Path

from ..core.errors import SandboxError, SandboxFileNotFound, SandboxFileRefused
from ._below import open_dir_below
from ._disk import PrivateArea
from ._hostile_read import DEFAULT_MAX_BYTES, FileRefused, read_hostile
from ._reaper import remove_tree
from ._verifier import copy_as_data, intact_dir
from .base import SandboxSpec

__all__ = ["SandboxFiles", "lexically_under", "read_owner"]


class SandboxFiles:
    """The file operations of ``LocalSandbox`` (see the module docstring)."""

    root: Path
    workdir: Path
    spec: SandboxSpec
    _area: PrivateArea | None

    def _own(self, path: Path) -> None:  # LocalSandbox's: hands a path to the agent's uid
        raise NotImplementedError

    def _h(self, path: str | Path) -> Path:
        """Where the driver reaches ``path`` (a path as the sandbox sees it): through the private area's
        keeper for a path inside it (``_disk.py``), else the path itself."""
        return self._area.host(path) if self._area is not None else Path(path)

    def _intact(self, path: Path) -> bool:
        """:func:`intact_dir` of ``path``; in a private area, with no link from the area's root down."""
        if self._area is None or not lexically_under(path, self._area.root):
            return intact_dir(path)
        return _no_links(self._area.host(self._area.root), os.path.relpath(path, self._area.root), want_dir=True)

    async def pull_workdir(self) -> Path:
        """See :meth:`Sandbox.pull_workdir`: the workdir itself, or in a private area a copy of it made as
        data (``_verifier.copy_as_data``, at most ``disk_mb``) in the rollout's host directory."""
        if self._area is None:
            return self.workdir
        dst = self.root / ".workdir-copy"  # the host's directory under the area: the agent never sees it
        if os.path.lexists(dst):
            await asyncio.to_thread(remove_tree, str(dst))
        limit = (self.spec.task.resources.disk_mb << 20) + (1 << 20)
        await asyncio.to_thread(copy_as_data, self._h(self.workdir), dst, max_bytes=limit)
        return dst

    def _resolve(self, path: str | Path) -> Path:
        p = Path(path)
        p = (self.workdir / p) if not p.is_absolute() else p
        if self._area is not None:  # the host's path is not the area's: checked lexically, links refused on use
            p = Path(os.path.normpath(p))
            if not lexically_under(p, self.root):
                raise SandboxError(f"path {path} is outside the sandbox {self.root}")
            return p
        real = p.resolve()
        if not real.is_relative_to(self.root.resolve()):
            raise SandboxError(f"path {path} is outside the sandbox {self.root}")
        return real

    async def read_file(self, path: str | Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
        """See :meth:`Sandbox.read_file`: read with :func:`~._hostile_read.read_hostile` from the
        sandbox's own directory (or, for a verifier's sandbox, the rollout's intact workdir)."""
        p = Path(path)
        p = p if p.is_absolute() else self.workdir / p
        root = self._read_root(p, path)
        try:
            return await asyncio.to_thread(read_hostile, self._h(p), root=self._h(root), max_bytes=max_bytes,
                                           shown=str(path))
        except FileRefused as e:
            raise SandboxFileRefused(f"refused to read {path} in the sandbox: {e.why}", str(path), e.why) from e
        except (FileNotFoundError, NotADirectoryError) as e:
            raise SandboxFileNotFound(f"no file {path} in the sandbox (the agent did not write it)", str(path)) from e
        except OSError as e:
            raise SandboxError(f"cannot read {path} in the sandbox: {e.strerror or e}") from e

    def _read_root(self, p: Path, asked: str | Path) -> Path:
        """The driver's directory a read of ``p`` walks from (nothing below it is followed)."""
        for root in (self.root, *([self.workdir] if self.spec.view_workdir else [])):
            if lexically_under(p, root):
                if root == self.workdir and not self._intact(root):
                    raise SandboxFileRefused(f"refused to read {asked}: the workdir is not the launcher's "
                                             "directory any more", str(asked), "the workdir was replaced")
                return root
        raise SandboxError(f"path {asked} is outside the sandbox {self.root}")

    async def write_file(self, path: str | Path, data: bytes, mode: int = 0o644) -> None:
        p = self._resolve(path)
        if self._area is not None:
            await asyncio.to_thread(_write_below, self._h(self.root), os.path.relpath(p, self.root), data, mode)
            return
        missing = [d for d in [p.parent, *p.parent.parents] if not d.exists() and d.is_relative_to(self.root)]
        p.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(p.write_bytes, data)
        p.chmod(mode)
        for d in [p, *missing]:
            self._own(d)


def lexically_under(p: Path, root: Path) -> bool:
    rel = os.path.relpath(os.path.normpath(p), root)
    return rel != ".." and not rel.startswith("../")


def _no_links(top: Path, rel: str, *, want_dir: bool) -> bool:
    """Every existing component of ``top/rel`` below ``top`` is no symlink (and the last a directory
    when ``want_dir``)."""
    cur = top
    for part in Path(rel).parts if rel != "." else ():
        cur = cur / part
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            return not want_dir
        except OSError:
            return False
        if stat.S_ISLNK(st.st_mode):
            return False
    return stat.S_ISDIR(os.lstat(cur).st_mode) if want_dir else True


def _write_below(top: Path, rel: str, data: bytes, mode: int) -> None:
    """Write ``top/rel`` (a private area's file, reached through its keeper), making missing parent
    directories. Each step is opened relative to its parent without following a link (a link there,
    even one the agent swaps in meanwhile: :class:`SandboxError`): through ``/proc/PID/root`` an
    absolute link would resolve on the driver's own file system."""
    parts = Path(rel).parts
    if not parts or parts[0] == "..":
        raise SandboxError(f"cannot write {rel}: not inside the sandbox")
    parent = open_dir_below(top, str(Path(*parts[:-1])) if len(parts) > 1 else ".", make=0o755)
    try:
        out = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                      dir_fd=parent)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise SandboxError(f"cannot write {rel} in the sandbox: a link or a file is on its path") from None
        raise
    finally:
        os.close(parent)
    with os.fdopen(out, "wb") as f:
        f.write(data)
        os.fchmod(f.fileno(), mode)


def read_owner(d: Path) -> int | None:
    """The driver pid recorded in a sandbox dir's ``.owner`` (inside the agent's directory: read as a
    hostile file, at most 32 bytes), or None."""
    try:
        text = read_hostile(".owner", root=d, max_bytes=32)
    except (OSError, ValueError, FileRefused):
        return None
    return int(text) if text.strip().isdigit() else None
