"""The Kubernetes launcher's verifier side: the verifier runs in the rollout's pod, never on the
driver, and what the driver does take out of a pod (``pull_workdir``) is bounded.

Owns: :func:`pod_verifier_view` (-> a :class:`VerifierView` over :class:`PodVerifierSandbox`),
:func:`read_capped`, :func:`extract_capped`.

The verifier runs in the agent's own pod, as the agent's uid, so each of its commands is ONE request
to the pod agent (``POST /verify``, :func:`openforge.launchers._podagent.verify`), with nothing of the
agent's able to run between its parts: the pod agent, the pod's PID 1, first ends every process the
agent left (``kill(-1, SIGKILL)`` until none is left: a ``setsid`` or double-forked process, one
forking meanwhile); on the first command it then unpacks copies of the host paths the verifier needs
(the task directory, the services' state; one gzip tar, tarfile's ``data`` filter) into a new 0711
directory ``/tmp/openforge-verify-*``; each time it checks that the tree there has the sha256 of the
files sent, and runs the verifier in the rollout's workdir with exactly the environment the driver
gives (``HOME`` and ``TMPDIR`` of its own under that directory; nothing of the pod's environment).
The verifier is then as isolated from the driver as the agent was, and the agent's only influence on
it is the workdir it left: its files, never its processes. The verifier writes its verdict file
(``$OPENFORGE_VERDICT``) in ``verdict/``, a 0700 directory the pod agent makes there with the unpacked
files (``VerifierView.verdict_dir``).
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import tarfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ..core.types import RolloutStatus
from ._hostile_read import DEFAULT_MAX_BYTES
from ._podagent import tree_digest
from ._verifier import WorkdirTooLarge
from .base import ExecResult, Sandbox, SandboxFailure, VerifierView

__all__ = ["PodVerifierSandbox", "VerifyingPod", "extract_capped", "pod_verifier_view", "read_capped"]

#: At most this much of host paths is copied into a pod for a verifier.
MAX_UPLOAD_BYTES = 256 << 20


def _too_large(what: str, limit: int, *, agents: bool = False) -> Exception:
    """More than ``limit`` of ``what``: the agent's failure when it is what the agent left (``agents``:
    its workdir, :class:`WorkdirTooLarge`, ``policy_failure``), else the environment's (``env_error``)."""
    if agents:
        return WorkdirTooLarge(f"{what} is larger than {limit >> 20} MB, more than a verifier may copy out of "
                               "the pod (the launcher's max_workdir_mb): the agent's failure")
    return SandboxFailure(f"{what} is larger than {limit >> 20} MB: an env_error (the environment cannot check "
                          "it), not the policy's failure; raise the limit if the task needs that much",
                          RolloutStatus.ENV_ERROR)


def read_capped(stream: Any, limit: int, what: str, *, agents: bool = False) -> bytes:
    """Read a streamed response body (``urllib3``'s ``read(n)``) up to ``limit`` bytes, else fail
    (``agents``: the body is what the agent left, see :func:`_too_large`)."""
    buf = bytearray()
    while chunk := stream.read(1 << 20):
        buf += chunk
        if len(buf) > limit:
            stream.close()
            raise _too_large(what, limit, agents=agents)
    return bytes(buf)


def extract_capped(data: bytes, dest: Path, limit: int, what: str, *, agents: bool = False) -> None:
    """Unpack a gzip tar into ``dest``: no absolute paths, links out or devices (tarfile's ``data``
    filter), and at most ``limit`` bytes unpacked (a small archive of zeros cannot fill the disk)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = tar.getmembers()
        if sum(m.size for m in members if m.isreg()) > limit:
            raise _too_large(what, limit, agents=agents)
        try:
            tar.extractall(dest, members=members, filter="data")
        except TypeError:  # pragma: no cover - Python without extraction filters
            tar.extractall(dest, members=[m for m in members if m.isreg() or m.isdir()
                                          if not m.name.startswith("/") and ".." not in m.name])


def _pack(paths: Mapping[str, str]) -> tuple[bytes, str]:
    """One gzip tar of host directories, each under its (relative) name in the pod's verifier directory
    (regular files and directories; links and the rest left out), and its tree's sha256
    (:func:`~openforge.launchers._podagent.tree_digest`, of exactly the bytes packed)."""
    buf, entries, total = io.BytesIO(), [], 0
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for host, name in paths.items():
            for f in [Path(host), *sorted(Path(host).rglob("*"))]:
                if f.is_symlink() or not (f.is_file() or f.is_dir()):
                    continue
                arc = str(Path(name) / f.relative_to(host))
                info = tar.gettarinfo(f, arcname=arc)
                if f.is_dir():
                    tar.addfile(info)
                    entries.append(("d", arc, "-"))
                    continue
                data = f.read_bytes()
                total += len(data)
                if total > MAX_UPLOAD_BYTES:
                    raise _too_large(f"what the verifier needs from {host}", MAX_UPLOAD_BYTES)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                entries.append(("f", arc, hashlib.sha256(data).hexdigest()))
    return buf.getvalue(), tree_digest(entries)


class VerifyingPod(Protocol):
    """What a verifier's sandbox uses of the rollout pod it runs in (the typed seam:
    :class:`~openforge.launchers.k8s_sandbox.KubernetesSandbox` satisfies it; this module does not import
    it, so the sandbox → verifier dependency stays one way)."""

    workdir: Path

    async def exec(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
                   timeout_s: float | None = None, stdin: bytes | None = None) -> ExecResult: ...

    async def verify_exec(self, argv: Sequence[str], *, base: str, packed: bytes | None, digest: str,
                          env: Mapping[str, str], cwd: str | Path, timeout_s: float | None,
                          stdin: bytes | None = None) -> ExecResult: ...

    async def read_file(self, path: str | Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes: ...

    async def expose(self, uds_path: str | Path, *, port: int | None = None) -> str: ...


class PodVerifierSandbox(Sandbox):
    """The verifier's side of a rollout pod: each command is the pod agent's verifier step (see the
    module docstring), in the pod's workdir with a HOME of its own; closing it removes its directory in
    the pod (the pod itself belongs to the rollout)."""

    isolation = "pod"

    def __init__(self, pod: VerifyingPod, base: str, packed: bytes, digest: str):
        self.pod, self.base, self.digest = pod, base, digest
        self.workdir, self.home, self.proxy_url = pod.workdir, Path(base) / "home", ""
        self._packed: bytes | None = packed  # sent with the first command, which unpacks it
        self._closed = False

    async def exec(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
                   timeout_s: float | None = None, stdin: bytes | None = None) -> ExecResult:
        env = {"HOME": str(self.home), "TMPDIR": str(self.home), **(env or {})}
        res = await self.pod.verify_exec(argv, base=self.base, packed=self._packed, digest=self.digest, env=env,
                                         cwd=cwd or self.workdir, timeout_s=timeout_s, stdin=stdin)
        self._packed = None
        return res

    async def read_file(self, path: str | Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
        return await self.pod.read_file(path, max_bytes=max_bytes)

    async def write_file(self, path: str | Path, data: bytes, mode: int = 0o644) -> None:
        raise SandboxFailure("a verifier's sandbox takes no files from the driver", RolloutStatus.ENV_ERROR)

    async def expose(self, uds_path: str | Path, *, port: int | None = None) -> str:
        return await self.pod.expose(uds_path, port=port)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self.pod.exec(["rm", "-rf", self.base], timeout_s=60)


async def pod_verifier_view(pod: VerifyingPod, ro_paths: Sequence[str]) -> VerifierView:
    """The verifier's view of ``pod`` with copies of ``ro_paths`` (see the module docstring); nothing
    reaches the pod before the verifier's first command."""
    base = f"/tmp/openforge-verify-{uuid.uuid4().hex}"
    names = {str(p): f"ro{i}" for i, p in enumerate(ro_paths)}
    packed, digest = await asyncio.to_thread(_pack, names)  # up to MAX_UPLOAD_BYTES read: off the loop
    view = PodVerifierSandbox(pod, base, packed, digest)
    return VerifierView(view, paths={host: f"{base}/{name}" for host, name in names.items()}, python="python3",
                        verdict_dir=f"{base}/verdict")
