"""Launcher and Sandbox interfaces: where one rollout's processes run.

Owns: :class:`Launcher` (provisions one :class:`Sandbox` per rollout), :class:`Sandbox` (runs
processes inside the rollout's isolation, moves files in and out, is torn down without leaving
anything behind), :class:`SandboxSpec`, :class:`ExecResult`, :class:`SandboxFailure` (an error that
carries the rollout status it implies).

Implementations: ``local.py`` (process group + namespaces + rlimits) and ``kubernetes.py``
(one pod per rollout).
"""

from __future__ import annotations

import abc
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import SandboxError, SandboxFileNotFound
from ..core.task import Task
from ..core.types import RolloutStatus
from ._hostile_read import DEFAULT_MAX_BYTES

__all__ = ["ExecResult", "Launcher", "Sandbox", "SandboxFailure", "SandboxSpec", "VerifierView"]


@dataclass
class ExecResult:
    returncode: int | None  # None when killed for the budget
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    #: Output bytes the launcher dropped (kept the first and the last of each stream; the text says
    #: where): an agent cannot grow the driver's memory by printing
    output_dropped: int = 0
    #: Processes the rollout's memory cgroup OOM-killed in the last seconds before this command died (the
    #: local launcher with a memory cgroup: ``OomWatch``; 0 where not counted): with a SIGKILL, the
    #: command was killed for memory, not by the agent
    oom_kills: int = 0


@dataclass
class SandboxSpec:
    """What the launcher needs to provision one rollout's sandbox."""

    rollout_id: str
    task: Task
    proxy_url: str  # the proxy as seen from the driver, e.g. http://127.0.0.1:8765
    api_key: str  # per-rollout secret
    env: dict[str, str] = field(default_factory=dict)
    network: bool = False  # allow network beyond the proxy (off by default)
    #: Unix socket the proxy also listens on; with it the local launcher cuts the network entirely
    #: and forwards an in-sandbox TCP port to this socket (``Sandbox.proxy_url`` is then that port).
    proxy_uds: str | None = None
    #: Host paths the sandboxed processes must not see (verifier sources, answer keys).
    hidden_paths: list[str] = field(default_factory=list)
    #: Host paths the harness needs read-only (its install dir; ``Harness.ro_paths()``).
    ro_paths: list[str] = field(default_factory=list)
    #: A verifier sandbox (:meth:`Sandbox.verifier_view`): the host directory (the rollout's workdir)
    #: this sandbox sees read-only and runs in, instead of a workdir of its own.
    view_workdir: str | None = None


class Sandbox(abc.ABC):
    """One rollout's isolated place to run processes.

    What an environment and a harness get: :meth:`exec` (run a command inside, with a budget; the
    whole process group is killed at the end), :meth:`read_file` / :meth:`write_file` (relative paths
    are under :attr:`workdir`; a missing file is :class:`~openforge.core.errors.SandboxFileNotFound`, a
    hostile one :class:`~openforge.core.errors.SandboxFileRefused`),
    :meth:`exists`, :meth:`expose` (a host Unix-socket service reachable inside as
    ``http://127.0.0.1:PORT``), :meth:`share_path` (a host path shown read-only), :meth:`pull_workdir`
    (the workdir on the host, for a file-based verifier), and the attributes below. The framework
    provisions and closes it: environments and harnesses never call :meth:`close`.
    """

    #: Host path of the rollout's working directory (local) or a staging dir mirroring it (k8s).
    workdir: Path
    #: Private HOME for the harness (config files, caches); inside the sandbox.
    home: Path
    #: Base URL of the proxy as reachable from *inside* the sandbox (no trailing slash).
    proxy_url: str
    #: How the sandbox isolates the agent (``bwrap``, ``unshare``, ``none``, ``pod``); every
    #: trajectory records it (``metadata["isolation"]``).
    isolation: str = "unknown"
    #: Set when the sandbox was lost under the harness (a pod evicted, a node lost, a deadline): why,
    #: and the status that implies; ``run_rollout`` records it instead of the harness's outcome.
    lost_reason: str | None = None
    lost_status: RolloutStatus | None = None

    @abc.abstractmethod
    async def exec(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        timeout_s: float | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        """Run ``argv`` inside the sandbox in its own process group; on timeout kill the whole
        group (SIGTERM, then SIGKILL) and return ``timed_out=True``."""

    @abc.abstractmethod
    async def read_file(self, path: str | Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
        """The bytes of the file at ``path`` (relative: to :attr:`workdir`) as the agent left it, at
        most ``max_bytes`` (16 MiB by default: meant for verifiers' result files).

        The file is hostile and read as such: a symbolic link anywhere below the sandbox's own
        directory is not followed, only a regular file is opened (never blocking: a FIFO is not
        waited on), and no more than ``max_bytes + 1`` bytes are read.

        Raises :class:`~openforge.core.errors.SandboxFileNotFound` (a :class:`SandboxError` and a
        ``FileNotFoundError``) when there is no file there — the agent did not write it — and
        :class:`~openforge.core.errors.SandboxFileRefused` when the agent left something the driver will
        not read there (a symlink, FIFO, socket, device or directory, a file larger than
        ``max_bytes``, or one made unreadable); a verifier that lets either escape scores the rollout
        0 as ``policy_failure``. Any other failure (a path outside the sandbox, a lost pod) is a plain
        :class:`SandboxError`: ``env_error`` or ``infra_error``, never trained. To treat a missing file
        as something else, catch it (``except FileNotFoundError``) or ask :meth:`exists` first."""

    async def exists(self, path: str | Path) -> bool:
        """Whether :meth:`read_file` of ``path`` would find a file (reads it; meant for verifiers'
        small result files). Any error but a missing file propagates (a refused one too)."""
        try:
            await self.read_file(path)
        except SandboxFileNotFound:
            return False
        return True

    @abc.abstractmethod
    async def write_file(self, path: str | Path, data: bytes, mode: int = 0o644) -> None:
        """Write ``data`` to ``path`` (relative: to :attr:`workdir`), creating its parent directories;
        the file belongs to the agent's user (:meth:`Environment.setup` seeds a task's files this way)."""

    async def expose(self, uds_path: str | Path, *, port: int | None = None) -> str:
        """Make a host Unix-socket service (a mock mail server, a web app) reachable from inside the
        sandbox; return its base URL as seen from inside (``http://127.0.0.1:PORT``)."""
        raise NotImplementedError(f"{type(self).__name__} cannot expose host services")

    async def verifier_view(self, ro_paths: Sequence[str], places: Sequence[str] = ()) -> VerifierView:
        """A fresh sandbox of the same launcher in which this rollout's verifier runs, after the agent
        stopped: none of the agent's processes, no network but what is :meth:`expose` d to it, this
        sandbox's workdir read-only as its :attr:`workdir`, and ``ro_paths`` (host directories: the
        task directory, the services' state) read-only; ``places``: absolute paths inside where it gets
        fresh, empty, writable directories of its own (:meth:`place`; none of them ever shown to the
        agent). The caller closes ``view.sandbox``."""
        raise NotImplementedError(f"{type(self).__name__} cannot run a verifier in a sandbox")

    def place(self, inside: str, host: str | Path | None = None, *, writable: bool = True) -> Path:
        """Show a directory at the absolute path ``inside`` of the sandbox (``/app``, ``/solution``): the
        host directory ``host`` (:attr:`workdir` itself: the workdir is then also seen there, and commands
        that run in it run there), or a fresh empty one of the sandbox's own; read-only unless
        ``writable``. Placing the same ``inside`` again replaces it (a directory filled at setup, then
        made read-only for the agent). Returns the directory's host path. Where a sandbox cannot
        (a weaker local isolation mode, a pod), :class:`NotImplementedError` says why."""
        raise NotImplementedError(f"{type(self).__name__} cannot show a directory at {inside}")

    def share_path(self, host_path: str | Path) -> str | None:
        """Show a driver-owned host file or directory inside the sandbox, **read-only**, at the same
        path (a Unix socket there: the agent may connect to it); return that path, or None where this
        sandbox cannot (then the caller falls back to what it did without)."""
        return None

    async def end_agent(self) -> None:
        """End every process the agent left running, so that what a verifier then reads stays as the agent
        left it. The framework calls it once, after the harness stopped and before
        :meth:`Environment.verify <openforge.environment.Environment.verify>`. Here: nothing to do (a
        local bwrap sandbox runs each command as the child of its own pid namespace's first process, and
        the kernel ends the namespace with it, so nothing the agent started outlives its command); a
        Kubernetes pod ends them through its pod agent."""
        return None

    async def pull_workdir(self) -> Path:
        """Make :attr:`workdir` on the host reflect the sandbox's files (a no-op locally; a copy out
        of the pod for Kubernetes) and return it; called before a file-based verifier runs."""
        return self.workdir

    @abc.abstractmethod
    async def close(self) -> None:
        """Kill every process, remove every temp dir / pod. Idempotent."""

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


@dataclass
class VerifierView:
    """A verifier's sandbox (:meth:`Sandbox.verifier_view`) and where each host path given to it is
    seen inside (``paths[host path] = path inside``; the same path for the local launcher, a copy
    for a pod), the Python that runs ``verify.py`` there, and ``verdict_dir``: an empty directory
    inside, private to the verifier, for its verdict file (``$OPENFORGE_VERDICT``; ``None`` where the
    launcher has none); ``verdict_on_host``: that directory is the same path on the driver's host (the
    driver reads the file itself, without following a link or blocking on a FIFO)."""

    sandbox: Sandbox
    paths: dict[str, str] = field(default_factory=dict)
    python: str = field(default_factory=lambda: sys.executable)
    verdict_dir: str | None = None
    verdict_on_host: bool = False

    def inside(self, host_path: str | Path) -> str:
        """Where ``host_path`` (one of the paths given, or a file under one) is seen in the sandbox."""
        p = Path(host_path)
        for host, there in self.paths.items():
            if p.is_relative_to(host):
                return str(Path(there) / p.relative_to(host))
        return str(p)


class SandboxFailure(SandboxError):
    """A sandbox problem that knows the rollout status it implies (a pod's ImagePullBackOff is the
    environment's fault: ``env_error``; a node lost is ``infra_error``)."""

    def __init__(self, message: str, status: RolloutStatus):
        super().__init__(message)
        self.status = status

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.status)


class Launcher(abc.ABC):
    """Provisions sandboxes. Subclasses implement :meth:`start`."""

    name: str = "launcher"
    #: Host paths no sandbox of this launcher may show, whatever is bound around them (a run's
    #: directory, its stores, the task root, the cache); added with :meth:`hide`.
    hidden_paths: tuple[str, ...] = ()

    def hide(self, paths: Iterable[str | os.PathLike[str]]) -> None:
        """Hide ``paths`` from every sandbox this launcher provisions from now on (the session does
        this for its run directory, stores, tasks and cache). A launcher whose sandboxes never see
        the driver's file system (a pod) needs nothing more."""
        self.hidden_paths = tuple(dict.fromkeys([*self.hidden_paths, *(os.fspath(p) for p in paths)]))

    @abc.abstractmethod
    async def start(self, spec: SandboxSpec) -> Sandbox:
        """Provision and return a ready sandbox for one rollout."""

    async def provision(self, spec: SandboxSpec) -> Sandbox:
        return await self.start(spec)

    async def aclose(self) -> None:
        """Release launcher-wide resources (remove orphans). Idempotent."""
        return None
