"""The Kubernetes launcher's verifier side: the verifier runs in the rollout's pod, never on the
driver, and what the driver does take out of a pod (``pull_workdir``) is bounded.

Owns: :func:`pod_verifier_view` (-> a :class:`VerifierView` over :class:`PodVerifierSandbox`),
:func:`read_capped`, :func:`extract_capped`.

The view puts copies of the host paths the verifier needs (the task directory, the services' state)
into the pod under a fresh ``/tmp/openforge-verify-*`` directory (one gzip tar, unpacked by the
pod's ``python3`` with tarfile's ``data`` filter), and runs the verifier there with ``HOME`` and
``TMPDIR`` of its own, in the rollout's workdir, and a ``0700`` ``verdict/`` directory for its verdict
file (``VerifierView.verdict_dir``). A pod is one trust domain: the verifier is as
isolated from the driver as the agent was, but a process the agent left running in the pod can still
see it.
"""

from __future__ import annotations

import io
import tarfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..types import RolloutStatus
from .base import ExecResult, Sandbox, SandboxFailure, VerifierView

if TYPE_CHECKING:
    from .k8s_sandbox import KubernetesSandbox

__all__ = ["PodVerifierSandbox", "extract_capped", "pod_verifier_view", "read_capped"]

#: At most this much of host paths is copied into a pod for a verifier.
MAX_UPLOAD_BYTES = 256 << 20
_UNPACK = ("import sys, tarfile\n"
           "t = tarfile.open(fileobj=sys.stdin.buffer, mode='r|gz')\n"
           "try:\n    t.extractall(sys.argv[1], filter='data')\n"
           "except TypeError:\n    t.extractall(sys.argv[1])\n")


def _too_large(what: str, limit: int) -> SandboxFailure:
    return SandboxFailure(f"{what} is larger than {limit >> 20} MB: an env_error (the environment cannot check "
                          "it), not the policy's failure; raise the limit if the task needs that much",
                          RolloutStatus.ENV_ERROR)


def read_capped(stream: Any, limit: int, what: str) -> bytes:
    """Read a streamed response body (``urllib3``'s ``read(n)``) up to ``limit`` bytes, else fail."""
    buf = bytearray()
    while chunk := stream.read(1 << 20):
        buf += chunk
        if len(buf) > limit:
            stream.close()
            raise _too_large(what, limit)
    return bytes(buf)


def extract_capped(data: bytes, dest: Path, limit: int, what: str) -> None:
    """Unpack a gzip tar into ``dest``: no absolute paths, links out or devices (tarfile's ``data``
    filter), and at most ``limit`` bytes unpacked (a small archive of zeros cannot fill the disk)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = tar.getmembers()
        if sum(m.size for m in members if m.isreg()) > limit:
            raise _too_large(what, limit)
        try:
            tar.extractall(dest, members=members, filter="data")
        except TypeError:  # pragma: no cover - Python without extraction filters
            tar.extractall(dest, members=[m for m in members if m.isreg() or m.isdir()
                                          if not m.name.startswith("/") and ".." not in m.name])


def _pack(paths: Mapping[str, str]) -> bytes:
    """One gzip tar of host directories, each under its (relative) name in the pod's verifier directory."""
    buf = io.BytesIO()
    total = 0
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for host, name in paths.items():
            for f in [Path(host), *sorted(Path(host).rglob("*"))]:
                if f.is_symlink() or not (f.is_file() or f.is_dir()):
                    continue
                total += f.stat().st_size if f.is_file() else 0
                if total > MAX_UPLOAD_BYTES:
                    raise _too_large(f"what the verifier needs from {host}", MAX_UPLOAD_BYTES)
                tar.add(f, arcname=str(Path(name) / f.relative_to(host)), recursive=False)
    return buf.getvalue()


class PodVerifierSandbox(Sandbox):
    """The verifier's side of a rollout pod: runs in the pod's workdir with a HOME of its own; closing
    it removes its directory in the pod (the pod itself belongs to the rollout)."""

    isolation = "pod"

    def __init__(self, pod: KubernetesSandbox, base: str):
        self.pod, self.base = pod, base
        self.workdir, self.home, self.proxy_url = pod.workdir, Path(base) / "home", ""
        self._closed = False

    async def exec(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
                   timeout_s: float | None = None, stdin: bytes | None = None) -> ExecResult:
        env = {"HOME": str(self.home), "TMPDIR": str(self.home), **(env or {})}
        return await self.pod.exec(argv, env=env, cwd=cwd or self.workdir, timeout_s=timeout_s, stdin=stdin)

    async def read_file(self, path: str | Path) -> bytes:
        return await self.pod.read_file(path)

    async def write_file(self, path: str | Path, data: bytes, mode: int = 0o644) -> None:
        raise SandboxFailure("a verifier's sandbox takes no files from the driver", RolloutStatus.ENV_ERROR)

    async def expose(self, uds_path: str | Path, *, port: int | None = None) -> str:
        return await self.pod.expose(uds_path, port=port)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self.pod.exec(["rm", "-rf", self.base], timeout_s=60)


async def pod_verifier_view(pod: KubernetesSandbox, ro_paths: Sequence[str]) -> VerifierView:
    """Copy ``ro_paths`` into the pod and return the verifier's view of it (see the module docstring)."""
    base = f"/tmp/openforge-verify-{uuid.uuid4().hex[:12]}"
    names = {str(p): f"ro{i}" for i, p in enumerate(ro_paths)}
    res = await pod.exec(["python3", "-c", _UNPACK, base], stdin=_pack(names), timeout_s=120)
    if res.returncode != 0:
        raise SandboxFailure(f"cannot copy the verifier's files into pod {pod.pod}: {res.stderr[-300:]}",
                             RolloutStatus.ENV_ERROR)
    view = PodVerifierSandbox(pod, base)
    await pod.exec(["sh", "-c", 'mkdir -p "$1" && mkdir -m 0700 "$2"', "sh", str(view.home), f"{base}/verdict"],
                   timeout_s=60)
    return VerifierView(view, paths={host: f"{base}/{name}" for host, name in names.items()}, python="python3",
                        verdict_dir=f"{base}/verdict")
