"""What a local sandbox's commands see, and the command line that shows it: directories placed at
other paths (:meth:`~SandboxView.place`), driver files shared read-only, and the ``bwrap`` command of
each command, whose directories from the rollout's own are bound by descriptor (``_below.py``).

Owns: :class:`SandboxView` (a mixin of ``LocalSandbox``), :class:`ViewHost`.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from ..core.errors import SandboxError
from ._below import open_dir_below
from ._bwrap import SCRATCH_DIRS, BwrapMode, bad_place, bwrap_argv
from ._disk import PrivateArea, open_scratch
from ._local_files import lexically_under
from .base import SandboxSpec

__all__ = ["SandboxView", "ViewHost"]

_FWD = str(Path(__file__).resolve().parent / "_fwd.py")


class ViewHost(Protocol):
    """What the view uses of its launcher (``LocalLauncher``)."""

    bwrap: BwrapMode | None
    ro_binds: Sequence[str]
    hidden_paths: tuple[str, ...]


class SandboxView:
    """The view of ``LocalSandbox`` (see the module docstring)."""

    launcher: ViewHost
    spec: SandboxSpec
    root: Path
    workdir: Path
    isolation: str
    _area: PrivateArea | None
    _maps: list[tuple[int, str]]
    _shared: list[str]
    _places: dict[str, tuple[str, bool]]
    _h: Callable[[str | Path], Path]  # SandboxFiles': where the driver reaches a sandbox path

    def place(self, inside: str, host: str | Path | None = None, *, writable: bool = True) -> Path:
        """See :meth:`Sandbox.place`: a bind mount at ``inside`` (bubblewrap only). A fresh directory
        lives in the sandbox's own directory (``places/``), owned by the agent's uid."""
        if self.isolation != "bwrap":
            raise NotImplementedError(f"isolation {self.isolation!r} shows the host's own file system: it cannot "
                                      f"show a directory at {inside} (use isolation 'bwrap')")
        why = None if lexically_under(Path(inside), self.root) else bad_place(inside)
        if why:
            raise SandboxError(f"cannot show a directory at {inside!r}: {why}")
        if host is None:
            old = self._places.get(inside)
            if old is not None:
                host = old[0]
            else:
                d = self.root / "places" / str(len(self._places))
                os.close(open_dir_below(self._h(self.root), os.path.relpath(d, self.root), make=0o755,
                                        owner=self._agent_uid()))
                host = d
        host_p = Path(host).absolute()
        if not self._h(host_p).is_dir():
            raise SandboxError(f"cannot show {host} at {inside}: not a directory")
        self._places[inside] = (str(host_p), writable)
        return host_p

    def _inside_cwd(self, cwd: Path) -> Path:
        """Where a command run in ``cwd`` (a host path) runs inside: below the workdir, at the path the
        workdir is placed at (:meth:`place`), if any."""
        for inside, (host, _) in self._places.items():
            if host == str(self.workdir) and lexically_under(cwd, self.workdir):
                return Path(inside) / os.path.relpath(cwd, self.workdir)
        return cwd

    def share_path(self, host_path: str | Path) -> str | None:
        path = str(host_path)
        if stat.S_ISSOCK(os.stat(path, follow_symlinks=False).st_mode):
            self._grant_connect(path)
        self._shared.append(path)  # bwrap: a read-only bind at the same path; weaker modes see the host
        return path

    def _grant_connect(self, uds_path: str) -> None:
        """Let the agent (and, of other users, only it) connect to a socket the driver made: under a
        root driver the agent is another uid, so the socket's group becomes the agent's and gets
        ``rw``; the driver stays its owner, so the agent cannot change its mode. A non-root driver's
        agent is the driver's own uid: nothing to grant."""
        bw = self.launcher.bwrap
        if bw is not None and bw.privileged:
            with contextlib.suppress(OSError):
                os.chown(uds_path, -1, bw.agent_uid, follow_symlinks=False)
                os.chmod(uds_path, os.stat(uds_path, follow_symlinks=False).st_mode & 0o777 | 0o060)

    def _command(self, argv: Sequence[str], cwd: Path, fds: list[int], scratch: Path | None = None) -> list[str]:
        """The command line that runs ``argv`` in this sandbox. A directory bound from the rollout's own
        directory (or the private area) is opened without following a link and bound by descriptor;
        each descriptor is appended to ``fds``, for the caller to pass to the command and then close.
        ``scratch``: a fresh directory of the rollout's own to hold the scratch mounts."""
        maps: list[str] = []
        for port, sock in self._maps:
            maps += ["--map", f"127.0.0.1:{port}={sock}"]
        if self.isolation == "unshare":
            return ["unshare", "--net", "--map-root-user", "--", sys.executable, "-I", "-S", _FWD, "--lo-up",
                    *maps, "--", *argv] if not self.spec.network else list(argv)
        if self.isolation != "bwrap" or self.launcher.bwrap is None:
            return list(argv)
        binds = [*self.launcher.ro_binds, *self.spec.ro_paths, *self._shared]
        area = self._area
        # a path in the private area is not on the host, where bwrap_argv looks for what to bind: a mount
        in_area = [b for b in binds if area is not None and lexically_under(Path(b), area.root)]
        mounts = [*((b, b, False) for b in in_area), *((h, i, w) for i, (h, w) in self._places.items())]
        scratch_fds = None
        if scratch is not None:
            scratch_fds = open_scratch(self._h(self.root), scratch.name, SCRATCH_DIRS, self._agent_uid())
            fds += scratch_fds.values()
        return [*(area.enter() if area is not None else []), *bwrap_argv(
            self.launcher.bwrap, binds=[b for b in binds if b not in in_area],
            hidden=[*_ALWAYS_HIDDEN, *self._run_hidden(), *self.spec.hidden_paths],
            rw=[str(self.root), *(s for _, s in self._maps)], cwd=self._inside_cwd(cwd), maps=maps,
            network=self.spec.network, argv=argv, disk_mb=self.spec.task.resources.disk_mb,
            mounts=[(self._by_descriptor(h, fds), i, w) for h, i, w in mounts], scratch_fds=scratch_fds,
        )]

    def _by_descriptor(self, host: str, fds: list[int]) -> str | int:
        """``host`` as a bind source: inside the rollout's own directory or the private area (where the
        agent can swap a directory for a link), a descriptor opened without following one; else the path."""
        for top in (self.root, *([self._area.root] if self._area is not None else [])):
            if lexically_under(Path(host), top):
                fds.append(open_dir_below(self._h(top), os.path.relpath(host, top)))
                return fds[-1]
        return host

    def _run_hidden(self) -> list[str]:
        """What the run hides from every sandbox, less what this sandbox's spec binds by name (a
        verifier's sandbox binds its own task directory, which every rollout of the run hides)."""
        named = set(self.spec.ro_paths)
        return [h for h in self.launcher.hidden_paths if h not in named]

    def _agent_uid(self) -> int | None:
        """The agent's host uid where it is not the driver's own (a root driver's agent is ``nobody``)."""
        bw = self.launcher.bwrap
        return bw.agent_uid if bw is not None and bw.privileged else None

    def _own(self, path: Path) -> None:
        """Hand a path the driver created to the agent's uid (a root driver's agent is ``nobody``)."""
        uid = self._agent_uid()
        if uid is not None:
            os.chown(path, uid, uid, follow_symlinks=False)


#: Always masked inside the sandbox: the built-in environments' checks and reference solutions.
_ALWAYS_HIDDEN = (str(Path(__file__).resolve().parent.parent / "envs"),)
