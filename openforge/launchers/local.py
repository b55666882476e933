"""The local launcher: each rollout in its own temp dir, process group and (where the kernel allows)
namespaces, with a wall-clock budget, resource limits and a scrubbed environment.

Owns: :class:`LocalLauncher`, :class:`LocalSandbox`.

Isolation (``isolation=``):

* ``auto`` / ``bwrap`` — bubblewrap (see ``_bwrap.py``): new mount, pid, net, ipc and uts namespaces;
  an allow-listed, read-only view of the system and the rollout's tools, empty ``/tmp``, the
  rollout's own dir read-write at the same path (so host and sandbox paths agree), hidden paths
  masked; the agent runs unprivileged (host uid ``nobody`` when the driver is root, the driver's
  own uid in a user namespace otherwise), with no capabilities and ``no_new_privs``. The network
  namespace has only ``lo``: the proxy's agent socket (model routes only) and the environment's
  services arrive as bind-mounted Unix sockets, forwarded to ``127.0.0.1:PORT`` by a tiny in-sandbox
  init (``_fwd.py``), so unmodified TCP-only harnesses work and nothing else is reachable. ``auto``
  never falls back: where bubblewrap cannot run it refuses, saying why and how to fix it.
* ``unshare`` — a network namespace only (``unshare -n --map-root-user``), same forwarding. Asked
  for by name only; a warning says what an agent can then do (:data:`WEAK_MODE_RISKS`).
* ``none`` — a plain process group. Asked for by name only, with the same kind of warning.

Every sandbox process runs in cgroups (memory, cpu, pids; v1 or v2, where writable) and under
lowered rlimits. Nothing outlives the driver: ``close`` kills process trees and removes the temp
dir and cgroups; a watchdog process (``_reaper.py``) does the same if the driver is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import SandboxError
from ._bwrap import BwrapMode, bwrap_argv, probe_bwrap, ro_bind_list
from ._fwd import _pipe
from ._isolation import CgroupSet, detect_isolation, limits_prefix, scrub_env
from ._reaper import kill_tree
from .base import ExecResult, Launcher, Sandbox, SandboxSpec

__all__ = ["WEAK_MODE_RISKS", "LocalLauncher", "LocalSandbox"]

log = logging.getLogger(__name__)
_HERE = Path(__file__).resolve().parent
_FWD = str(_HERE / "_fwd.py")
_REAPER = str(_HERE / "_reaper.py")
FIRST_PORT = 18000

#: What an agent can do in each weaker mode, in plain words (logged when such a mode is asked for).
WEAK_MODE_RISKS = {
    "unshare": "only the network is isolated. The agent runs as your user (as root if the driver is root) on "
               "the host's file system: it can read the driver's environment through /proc (API keys, "
               "OPENFORGE_ADMIN_TOKEN) and so forge its reward, read and write other rollouts' directories, "
               "read the task's verifier and reference solution, and leave files anywhere your user can write",
    "none": "nothing is isolated. The agent runs as your user with the network open: it can read the driver's "
            "environment through /proc (API keys, OPENFORGE_ADMIN_TOKEN), call the proxy's admin API and forge "
            "its reward, read and write other rollouts' directories, read the task's verifier and reference "
            "solution, and reach any port on this machine",
}


class LocalLauncher(Launcher):
    """Provision :class:`LocalSandbox` es. ``isolation`` is ``auto`` (strongest available),
    ``bwrap``, ``unshare`` or ``none``; asking for one that is not available is an error."""

    name = "local"

    def __init__(
        self,
        *,
        base_dir: str | Path | None = None,
        isolation: str = "auto",
        grace_s: float = 2.0,
        cgroups: bool = True,
        ro_binds: str | Sequence[str] = (),
    ):
        self.bwrap: BwrapMode | None = None
        self.ro_binds = ro_bind_list(ro_binds)  # a string is one path (or a comma list), never its characters
        if isolation in ("auto", "bwrap"):
            bw = probe_bwrap()
            if not bw.ok:
                raise SandboxError(
                    f"cannot create the rollout sandbox (isolation={isolation!r} needs bubblewrap): {bw.error}. "
                    "Weaker modes run only when named (isolation='unshare' or 'none'), and in them an agent "
                    "can forge its own reward")
            self.isolation, self.bwrap = "bwrap", bw
        elif isolation in ("unshare", "none"):
            mode, why = detect_isolation()
            if isolation == "unshare" and mode == "none":
                raise SandboxError(f"isolation 'unshare' is not available here ({why})")
            self.isolation = isolation
            log.warning("local launcher: isolation=%r: %s. Use it only with a policy you trust.",
                        isolation, WEAK_MODE_RISKS[isolation])
        else:
            raise SandboxError(f"unknown isolation {isolation!r}: use auto, bwrap, unshare or none")
        self.base_dir = Path(base_dir or Path(tempfile.gettempdir()) / "openforge-sandboxes")
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.grace_s = grace_s
        self.use_cgroups = cgroups
        self._reaper: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._sandboxes: set[LocalSandbox] = set()
        self.sweep_stale()

    # -- the watchdog --------------------------------------------------------------------------

    def _watch(self, line: str) -> None:
        with self._lock:
            if self._reaper is None or self._reaper.poll() is not None:
                self._reaper = subprocess.Popen(
                    [sys.executable, "-I", "-S", _REAPER], stdin=subprocess.PIPE, start_new_session=True,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True,
                )
            try:
                assert self._reaper.stdin is not None
                self._reaper.stdin.write((line + "\n").encode())
                self._reaper.stdin.flush()
            except (BrokenPipeError, OSError):
                pass

    def sweep_stale(self) -> list[Path]:
        """Remove sandbox dirs left by drivers that are gone (belt and braces for the watchdog)."""
        removed = []
        for d in self.base_dir.iterdir():
            try:
                owner = int((d / ".owner").read_text())
            except (OSError, ValueError):
                continue
            if owner != os.getpid() and not Path(f"/proc/{owner}").exists():
                shutil.rmtree(d, ignore_errors=True)
                removed.append(d)
        return removed

    # -- Launcher API --------------------------------------------------------------------------

    async def start(self, spec: SandboxSpec) -> LocalSandbox:
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in spec.rollout_id)[:48]
        root = Path(tempfile.mkdtemp(prefix=f"{safe}-", dir=self.base_dir))
        self._watch(f"+dir {root}")
        (root / ".owner").write_text(str(os.getpid()))
        sbx = LocalSandbox(self, spec, root)
        self._sandboxes.add(sbx)
        try:
            await sbx._init()
        except BaseException:
            await sbx.close()
            raise
        return sbx

    async def aclose(self) -> None:
        for sbx in list(self._sandboxes):
            await sbx.close()
        with self._lock:
            if self._reaper is not None:
                with contextlib.suppress(OSError):
                    assert self._reaper.stdin is not None
                    self._reaper.stdin.close()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._reaper.wait(5)
                self._reaper = None


class LocalSandbox(Sandbox):
    """One rollout's sandbox on this machine; see the module docstring."""

    def __init__(self, launcher: LocalLauncher, spec: SandboxSpec, root: Path):
        self.launcher, self.spec, self.root = launcher, spec, root
        self.workdir, self.home = root / "work", root / "home"
        self.tmpdir = root / "tmp"
        self.isolation = launcher.isolation
        self._maps: list[tuple[int, str]] = []  # (in-sandbox port, host unix socket)
        self._host_fwd: list[asyncio.base_events.Server] = []
        self._procs: set[int] = set()
        self._closed = False
        self.proxy_url = spec.proxy_url.rstrip("/")
        res = spec.task.resources
        self.cgroups: CgroupSet | None = None
        if launcher.use_cgroups:
            self.cgroups = CgroupSet(f"openforge-{root.name}", memory_mb=res.memory_mb, cpu=res.cpu,
                                     max_procs=res.max_processes)
            for p in self.cgroups.paths:
                launcher._watch(f"+cg {p}")

    async def _init(self) -> None:
        for d in (self.workdir, self.home, self.tmpdir):
            d.mkdir(mode=0o755)
            self._own(d)
        self._own(self.root)
        isolated_net = self.isolation != "none" and not self.spec.network
        if self.spec.proxy_uds and isolated_net:
            self.proxy_url = await self.expose(self.spec.proxy_uds)
        elif self.spec.proxy_url and isolated_net:
            # A proxy reachable only over TCP: bridge a Unix socket in the rollout dir to it.
            self.proxy_url = await self.expose(await self._tcp_bridge(self.spec.proxy_url))

    async def _tcp_bridge(self, url: str) -> str:
        from urllib.parse import urlparse

        u = urlparse(url)
        host, port = u.hostname or "127.0.0.1", u.port or (443 if u.scheme == "https" else 80)
        path = self.root / "proxy.sock"
        if len(str(path)) > 100:
            raise SandboxError(f"sandbox dir {self.root} is too deep for a Unix socket; use a shorter base_dir "
                               "or give the proxy a uds path")

        async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                ur, uw = await asyncio.open_connection(host, port)
            except OSError:
                w.close()
                return
            await asyncio.gather(_pipe(r, uw), _pipe(ur, w))

        self._host_fwd.append(await asyncio.start_unix_server(handle, str(path)))
        return str(path)

    @property
    def limits(self) -> dict[str, str]:
        """Which limit is enforced how (``cgroup`` or ``rlimit``), for logs and tests."""
        cg = self.cgroups.limited if self.cgroups else set()
        return {k: ("cgroup" if k in cg else "rlimit") for k in ("memory", "cpu", "pids")}

    async def expose(self, uds_path: str | Path, *, port: int | None = None) -> str:
        uds_path = str(uds_path)
        if self.isolation == "none" or self.spec.network:
            # No namespace: a forwarder on the host's loopback, on a free port.
            async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
                try:
                    ur, uw = await asyncio.open_unix_connection(uds_path)
                except OSError:
                    w.close()
                    return
                await asyncio.gather(_pipe(r, uw), _pipe(ur, w))

            server = await asyncio.start_server(handle, "127.0.0.1", port or 0)
            self._host_fwd.append(server)
            return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        port = port or FIRST_PORT + len(self._maps)
        bw = self.launcher.bwrap
        if bw is not None and bw.privileged:  # the agent (another uid) must be able to connect to it
            with contextlib.suppress(OSError):
                os.chmod(uds_path, os.stat(uds_path).st_mode & 0o777 | 0o666)
        self._maps.append((port, uds_path))
        return f"http://127.0.0.1:{port}"

    def _resolve(self, path: str | Path) -> Path:
        p = Path(path)
        p = (self.workdir / p) if not p.is_absolute() else p
        real = p.resolve()
        if not real.is_relative_to(self.root.resolve()):
            raise SandboxError(f"path {path} is outside the sandbox {self.root}")
        return real

    async def read_file(self, path: str | Path) -> bytes:
        p = self._resolve(path)
        try:
            return await asyncio.to_thread(p.read_bytes)
        except OSError as e:
            raise SandboxError(f"cannot read {path} in the sandbox: {e.strerror or e}") from e

    async def write_file(self, path: str | Path, data: bytes, mode: int = 0o644) -> None:
        p = self._resolve(path)
        missing = [d for d in [p.parent, *p.parent.parents] if not d.exists() and d.is_relative_to(self.root)]
        p.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(p.write_bytes, data)
        p.chmod(mode)
        for d in [p, *missing]:
            self._own(d)

    def _command(self, argv: Sequence[str], cwd: Path) -> list[str]:
        maps: list[str] = []
        for port, sock in self._maps:
            maps += ["--map", f"127.0.0.1:{port}={sock}"]
        if self.isolation == "unshare":
            return ["unshare", "--net", "--map-root-user", "--", sys.executable, "-I", "-S", _FWD, "--lo-up",
                    *maps, "--", *argv] if not self.spec.network else list(argv)
        if self.isolation != "bwrap" or self.launcher.bwrap is None:
            return list(argv)
        return bwrap_argv(
            self.launcher.bwrap, binds=[*self.launcher.ro_binds, *self.spec.ro_paths],
            hidden=[*_ALWAYS_HIDDEN, *self.launcher.hidden_paths, *self.spec.hidden_paths],
            rw=[str(self.root), *(s for _, s in self._maps)],
            cwd=cwd, maps=maps, network=self.spec.network, argv=argv,
        )

    def _own(self, path: Path) -> None:
        """Hand a path the driver created to the agent's uid (a root driver's agent is ``nobody``)."""
        bw = self.launcher.bwrap
        if bw is not None and bw.privileged:
            os.chown(path, bw.agent_uid, bw.agent_uid, follow_symlinks=False)

    async def exec(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        timeout_s: float | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        if self._closed:
            raise SandboxError("the sandbox is closed")
        if not argv:
            raise SandboxError("exec needs a command")
        cwd_p = self._resolve(cwd) if cwd is not None else self.workdir
        # Under bwrap /tmp is private to the sandbox (and short: Chromium's singleton socket path must
        # fit AF_UNIX's 108 bytes); otherwise the rollout's own tmp dir.
        tmp = Path("/tmp") if self.isolation == "bwrap" else self.tmpdir
        full_env = scrub_env(self.home, tmp, {**self.spec.env, **(env or {})})
        res = self.spec.task.resources
        budget = timeout_s if timeout_s is not None else self.spec.task.timeout_s
        prefix = limits_prefix(
            memory_mb=res.memory_mb, cpu_s=budget * max(res.cpu, 1.0) + 5, max_open_files=res.max_open_files,
            max_procs=res.max_processes, cgroups=self.cgroups,
        )
        t0 = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *prefix, *self._command(argv, cwd_p), cwd=str(cwd_p), env=full_env,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
            )
        except OSError as e:
            return ExecResult(127, "", f"cannot run {argv[0]!r}: {e.strerror or e}", time.monotonic() - t0)
        self._procs.add(proc.pid)
        self.launcher._watch(f"+pid {proc.pid}")
        timed_out = False
        try:
            try:
                out, err = await asyncio.wait_for(proc.communicate(stdin), timeout=budget)
            except asyncio.TimeoutError:
                timed_out = True
                await self._terminate(proc)
                out, err = await proc.communicate()
        except BaseException:  # cancelled (Ctrl-C, rollout budget): leave nothing running
            kill_tree(proc.pid)
            with contextlib.suppress(Exception):
                await asyncio.shield(proc.wait())
            raise
        finally:
            self._procs.discard(proc.pid)
            self.launcher._watch(f"-pid {proc.pid}")
        rc = None if timed_out else proc.returncode
        return ExecResult(rc, out.decode(errors="replace"), err.decode(errors="replace"),
                          time.monotonic() - t0, timed_out=timed_out)

    async def _terminate(self, proc: asyncio.subprocess.Process) -> None:
        """SIGTERM the whole tree, give it ``grace_s``, then SIGKILL what is left."""
        kill_tree(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), self.launcher.grace_s)
        except asyncio.TimeoutError:
            pass
        kill_tree(proc.pid, signal.SIGKILL)
        await proc.wait()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for pid in list(self._procs):
            kill_tree(pid)
            self.launcher._watch(f"-pid {pid}")
        for s in self._host_fwd:
            s.close()
        if self.cgroups is not None:
            paths = list(self.cgroups.paths)
            self.cgroups.remove()
            for p in paths:
                self.launcher._watch(f"-cg {p}")
        await asyncio.to_thread(shutil.rmtree, self.root, True)
        self.launcher._watch(f"-dir {self.root}")
        self.launcher._sandboxes.discard(self)


#: Always masked inside the sandbox: the built-in environments' checks and reference solutions.
_ALWAYS_HIDDEN = (str(Path(__file__).resolve().parent.parent / "envs"),)
