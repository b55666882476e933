"""How the local launcher bounds a rollout's disk (``Resources.disk_mb``), by the driver's user.

Owns: :class:`PrivateArea`, :func:`start_private_area`, :func:`disk_kind`, :func:`open_scratch`.

* **driver is root**: the rollout's directory is a tmpfs of ``disk_mb`` mounted on the host
  (``_reaper.mount_quota``): ``disk == "tmpfs"``.
* **driver is a normal user** (bubblewrap in a user namespace, able to size a tmpfs, ``nsenter``
  on ``PATH``): a normal user cannot mount on the host, but may inside a user namespace of its own.
  A *keeper* process (``bwrap --dev-bind / /`` in a new user and mount namespace, sleeping) holds a
  tmpfs of ``disk_mb`` over the rollout's directory; every command of the rollout runs inside the
  keeper's namespaces (``nsenter --user --mount``, then the usual ``bwrap``), so it sees that tmpfs
  at the rollout directory's own path, and nothing it writes there reaches the host's disk: one
  rollout filling its area cannot fail another's writes (``disk == "private-tmpfs"``). The driver
  reaches the area through ``/proc/KEEPER/root`` (:meth:`PrivateArea.host`); what a verifier on the
  host reads is a copy made as data (``LocalSandbox.pull_workdir``). The keeper dies with the driver
  (``--die-with-parent``), and the area with it.
* otherwise: ``RLIMIT_FSIZE`` only, no single file beyond ``disk_mb`` (``disk == "file-size"``).

Scratch (``/tmp``, ``/var/tmp``, ``/run``, ``/dev/shm``) counts in the same budget wherever the rollout's
directory is a tmpfs of its own: each command gets fresh directories in it (:func:`open_scratch`),
bound at those paths by descriptor and removed when the command ends, so everything the agent keeps,
its workdir, home and scratch together, is at most ``disk_mb``. Elsewhere (``file-size``, a verifier's
sandbox) the scratch mounts are tmpfs of their own, each ``disk_mb``/4 (``_bwrap.scratch_bytes``).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from ._below import open_dir_below

__all__ = ["PrivateArea", "disk_kind", "open_scratch", "start_private_area"]

DiskKind = str  # "tmpfs" | "private-tmpfs" | "file-size"


def disk_kind(*, mounted: bool, area: PrivateArea | None) -> DiskKind:
    """What bounds the rollout's disk, in the words ``LocalSandbox.disk`` uses."""
    return "tmpfs" if mounted else ("private-tmpfs" if area is not None else "file-size")


def open_scratch(top: Path, name: str, mounts: Sequence[str], owner: int | None) -> dict[str, int]:
    """One command's scratch directories in the rollout's own tmpfs, whose root the driver reaches at
    ``top``: ``top/name/<mount point, dashed>`` for each of ``mounts`` (``/var/tmp`` -> ``var-tmp``),
    fresh, world-writable and sticky, ``owner``'s (a uid; ``None``: the driver's own, which is then the
    agent's). ``name`` itself is the driver's, mode 0700. Returns an ``O_PATH`` descriptor of each by
    mount point, for ``bwrap --bind-fd``: no link is followed making or opening them, so a link the
    agent plants or swaps in cannot turn the bind into one of a host directory."""
    fds: dict[str, int] = {}
    try:
        os.close(open_dir_below(top, name, make=0o700))
        for mount in mounts:
            fds[mount] = open_dir_below(top, f"{name}/{mount.strip('/').replace('/', '-')}", make=0o1777, owner=owner)
    except BaseException:
        for fd in fds.values():
            os.close(fd)
        raise
    return fds


class PrivateArea:
    """A keeper process holding a sized tmpfs over ``root`` in its own user and mount namespaces."""

    def __init__(self, proc: subprocess.Popen, root: Path, nsenter: str):
        self.proc, self.root, self._nsenter = proc, root, nsenter
        #: The keeper itself (bwrap's child, inside the namespaces); ``proc`` is bwrap, outside them
        self.pid = 0

    def enter(self) -> list[str]:
        """The argv prefix that runs a command inside the keeper's namespaces, as the same user."""
        return [self._nsenter, f"--target={self.pid}", "--user", "--mount", "--preserve-credentials", "--"]

    def host(self, path: str | os.PathLike[str]) -> Path:
        """Where the driver reaches ``path`` (a path inside the area, as the sandbox sees it): through the
        keeper's root; any other path is the host's own."""
        p = Path(os.path.abspath(path))
        if p == self.root or p.is_relative_to(self.root):
            return Path(f"/proc/{self.pid}/root") / p.relative_to("/")
        return p

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """Kill the keeper: its namespaces, and the tmpfs with them, are gone once nothing is inside."""
        for pid in (self.pid, self.proc.pid):
            if pid and self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)


def start_private_area(binary: str, root: Path, disk_mb: int, *, timeout_s: float = 10.0) -> PrivateArea | None:
    """Start a keeper holding a ``disk_mb`` tmpfs over ``root`` (an existing, empty directory of the
    driver's); ``None`` where that cannot be done here (no ``nsenter``, no user namespaces)."""
    nsenter = shutil.which("nsenter")
    if nsenter is None or not root.is_dir():
        return None
    uid, gid = os.getuid(), os.getgid()
    r, w = os.pipe()
    argv = [binary, "--dev-bind", "/", "/", "--unshare-user", "--uid", str(uid), "--gid", str(gid),
            "--size", str(int(disk_mb) << 20), "--perms", "0700", "--tmpfs", str(root),
            "--die-with-parent", "--info-fd", str(w), "--", "sleep", "infinity"]
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, pass_fds=(w,), start_new_session=True)
    except OSError:
        os.close(r)
        return None
    finally:
        os.close(w)
    area = PrivateArea(proc, root, nsenter)
    try:
        area.pid = _child_pid(r, timeout_s)
    finally:
        os.close(r)
    deadline = time.monotonic() + timeout_s
    while area.pid and time.monotonic() < deadline:  # ready once the keeper's root shows the tmpfs
        if proc.poll() is not None:
            break
        if _is_area(area):
            return area
        time.sleep(0.01)
    area.stop()
    return None


def _child_pid(fd: int, timeout_s: float) -> int:
    """The sandboxed child's pid from bwrap's ``--info-fd`` JSON (0: none came in time)."""
    data, deadline = b"", time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
        with contextlib.suppress(ValueError):
            pid = json.loads(data).get("child-pid")
            return int(pid) if isinstance(pid, int) else 0
    return 0


def _is_area(area: PrivateArea) -> bool:
    """The keeper's view of ``root`` is a mount of its own (another device than the host's directory)."""
    try:
        return os.stat(area.host(area.root)).st_dev != os.stat(area.root).st_dev
    except OSError:
        return False
