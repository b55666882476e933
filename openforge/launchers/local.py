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
lowered rlimits. Its disk is bounded by ``disk_mb`` (``_disk.py``): a tmpfs of its own, mounted by a
root driver or held in a user namespace of a normal-user driver's (``private-tmpfs``). Nothing outlives the driver: ``close`` kills process trees and removes the temp
dir and cgroups; a watchdog process (``_reaper.py``) does the same if the driver is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..core.errors import SandboxError
from ._bwrap import (
    UNSIZED_SCRATCH,
    BwrapMode,
    probe_bwrap,
    ro_bind_list,
    scratch_bytes,
)
from ._disk import PrivateArea, disk_kind, start_private_area
from ._fwd import bridge, to_tcp, to_unix
from ._isolation import (
    WEAK_MODE_RISKS,
    CgroupSet,
    OomWatch,
    detect_isolation,
    limits_prefix,
    rlimit_memory_gaps,
    scrub_env,
)
from ._local_files import SandboxFiles, read_owner
from ._local_view import SandboxView
from ._output import DEFAULT_HEAD, BoundedOutput, communicate
from ._reaper import kill_tree, mount_quota, remove_tree, unmount_quota
from ._verifier import VERIFIER_WEAK_MODE_RISKS
from .base import ExecResult, Launcher, Sandbox, SandboxSpec, VerifierView

__all__ = ["WEAK_MODE_RISKS", "LocalLauncher", "LocalSandbox"]

log = logging.getLogger(__name__)
_HERE = Path(__file__).resolve().parent
_REAPER = str(_HERE / "_reaper.py")
FIRST_PORT = 18000

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
        max_output_bytes: int = 2 * DEFAULT_HEAD,
        disk_quota: bool = True,
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
            if not bw.sized:
                log.warning("local launcher: %s %s", bw.binary, UNSIZED_SCRATCH)
        elif isolation in ("unshare", "none"):
            mode, why = detect_isolation()
            if isolation == "unshare" and mode == "none":
                raise SandboxError(f"isolation 'unshare' is not available here ({why})")
            self.isolation = isolation
            log.warning("local launcher: isolation=%r: %s. Verifiers lose their sandbox too: %s. Use it only with a "
                        "policy you trust.", isolation, WEAK_MODE_RISKS[isolation], VERIFIER_WEAK_MODE_RISKS[isolation])
        else:
            raise SandboxError(f"unknown isolation {isolation!r}: use auto, bwrap, unshare or none")
        # absolute: bwrap binds and /proc/self/mounts speak absolute paths
        self.base_dir = Path(base_dir or Path(tempfile.gettempdir()) / "openforge-sandboxes").absolute()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.grace_s = grace_s
        self.use_cgroups = cgroups
        #: Bytes of each stream (stdout, stderr) of one command the driver keeps: the first and the
        #: last half; the rest is dropped and counted (``ExecResult.output_dropped``)
        self.max_output_bytes = max_output_bytes
        #: Bound each rollout's disk (``Resources.disk_mb``): a tmpfs of that size as its directory when
        #: the driver is root; a tmpfs of that size in a user namespace of its own (``_disk.py``) when it
        #: is a normal user with a bwrap that can size one; a per-file size limit otherwise (``LocalSandbox.disk``)
        self.disk_quota = disk_quota
        self._reaper: subprocess.Popen | None = None
        self._warned_rlimit_memory = False
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
        """Remove sandbox dirs left by drivers that are gone (belt and braces for the watchdog). One
        leftover that cannot be read or removed (an agent made it so) is logged and skipped: it never
        fails the launcher."""
        removed = []
        for d in self.base_dir.iterdir():
            try:
                owner = read_owner(d)
                if owner is None or owner == os.getpid() or Path(f"/proc/{owner}").exists():
                    continue
                unmount_quota(d)
                if remove_tree(str(d)):
                    removed.append(d)
                else:
                    log.warning("local launcher: could not remove the stale sandbox dir %s; left in place", d)
            except Exception as e:  # one bad leftover must not stop a new run
                log.warning("local launcher: skipped the stale sandbox dir %s: %s", d, e)
        return removed

    # -- Launcher API --------------------------------------------------------------------------

    async def start(self, spec: SandboxSpec) -> LocalSandbox:
        return await self._start(spec)

    async def _start(self, spec: SandboxSpec, *, share: PrivateArea | None = None) -> LocalSandbox:
        """:meth:`start`; ``share``: run in that rollout's private area (a verifier's sandbox)."""
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in spec.rollout_id)[:48]
        root = Path(tempfile.mkdtemp(prefix=f"{safe}-", dir=self.base_dir))
        self._watch(f"+dir {root}")
        (root / ".owner").write_text(str(os.getpid()))
        quota = self.disk_quota and share is None and mount_quota(root, spec.task.resources.disk_mb)
        if quota:
            self._watch(f"+mnt {root}")
        bw = self.bwrap
        area = share
        if self.disk_quota and share is None and not quota and bw is not None and bw.sized and not bw.privileged:
            assert bw.binary is not None
            area = start_private_area(bw.binary, root, spec.task.resources.disk_mb)
            if area is not None:
                self._watch(f"+pid {area.proc.pid}")
        sbx = LocalSandbox(self, spec, root)
        sbx._area, sbx._owns_area = area, area is not None and share is None
        sbx.disk = disk_kind(mounted=bool(quota), area=area)
        sbx._scratch_in_root = bw is not None and (bool(quota) or sbx._owns_area)
        self._warn_rlimit_memory(sbx)
        self._sandboxes.add(sbx)
        try:
            await sbx._init()
        except BaseException:
            await sbx.close()
            raise
        return sbx

    def _warn_rlimit_memory(self, sbx: LocalSandbox) -> None:
        """Once per launcher: say what ``memory_mb`` leaves open when no memory cgroup enforces it."""
        if self._warned_rlimit_memory or sbx.limits["memory"] != "rlimit":
            return
        self._warned_rlimit_memory = True
        res = sbx.spec.task.resources
        scratch = ("in the rollout directory's tmpfs" if sbx._scratch_in_root
                   else f"{scratch_bytes(res.disk_mb) >> 20} MB each" if self.bwrap is not None and self.bwrap.sized
                   else "unbounded" if self.bwrap is not None else "in the rollout directory")
        log.warning("local launcher: %s", rlimit_memory_gaps(res.memory_mb, res.max_processes, scratch,
                                                             res.disk_mb if sbx.disk != "file-size" else None))

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


class LocalSandbox(SandboxView, SandboxFiles, Sandbox):
    """One rollout's sandbox on this machine; see the module docstring."""

    def __init__(self, launcher: LocalLauncher, spec: SandboxSpec, root: Path):
        self.launcher, self.spec, self.root = launcher, spec, root
        # A verifier sandbox runs in the rollout's workdir (bound read-only), not in one of its own.
        self.workdir = Path(spec.view_workdir) if spec.view_workdir else root / "work"
        self.home = root / "home"
        self.tmpdir = root / "tmp"
        self.isolation = launcher.isolation
        self._maps: list[tuple[int, str]] = []  # (in-sandbox port, host unix socket)
        self._host_fwd: list[asyncio.base_events.Server] = []
        self._shared: list[str] = []  # driver-owned host paths shown read-only (share_path)
        self._places: dict[str, tuple[str, bool]] = {}  # path inside -> (host dir, writable) (place)
        self._procs: set[int] = set()
        self._closed = False
        #: How the rollout's disk is bounded (``_disk.py``): ``tmpfs`` (its own of ``disk_mb``, mounted by
        #: a root driver), ``private-tmpfs`` (the same inside a user namespace of a normal-user driver's:
        #: it cannot fill the host's disk or another rollout's) or ``file-size`` (RLIMIT_FSIZE only)
        self.disk = "file-size"
        self._area: PrivateArea | None = None  # the private area the sandbox runs in (normal-user driver)
        self._owns_area = False
        #: Each command's /tmp, /var/tmp, /run, /dev/shm are fresh directories in the rollout's own tmpfs
        #: (``_disk.open_scratch``), in its one disk budget; else tmpfs mounts of their own
        self._scratch_in_root = False
        self._commands = itertools.count()
        self.proxy_url = spec.proxy_url.rstrip("/")
        res = spec.task.resources
        self.cgroups: CgroupSet | None = None
        if launcher.use_cgroups:
            self.cgroups = CgroupSet(f"openforge-{root.name}", memory_mb=res.memory_mb, cpu=res.cpu,
                                     max_procs=res.max_processes)
            for p in self.cgroups.paths:
                launcher._watch(f"+cg {p}")

    async def _init(self) -> None:
        for d in (self.root / "work", self.home, self.tmpdir):
            self._h(d).mkdir(mode=0o755)
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
        if len(str(self._h(path))) > 100:
            raise SandboxError(f"sandbox dir {self.root} is too deep for a Unix socket; use a shorter base_dir "
                               "or give the proxy a uds path")

        self._host_fwd.append(await asyncio.start_unix_server(bridge(to_tcp(host, port)), str(self._h(path))))
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
            server = await asyncio.start_server(bridge(to_unix(uds_path)), "127.0.0.1", port or 0)
            self._host_fwd.append(server)
            return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        port = port or FIRST_PORT + len(self._maps)
        self._grant_connect(uds_path)
        self._maps.append((port, uds_path))
        return f"http://127.0.0.1:{port}"

    async def verifier_view(self, ro_paths: Sequence[str], places: Sequence[str] = ()) -> VerifierView:
        """A fresh sandbox of this launcher for the verifier (see :meth:`Sandbox.verifier_view`). A
        workdir the agent replaced by a symlink is not followed: the verifier then sees an empty one."""
        work = str(self.workdir) if self._intact(self.workdir) else None
        spec = SandboxSpec(rollout_id=f"{self.spec.rollout_id}-verify", task=self.spec.task, proxy_url="",
                           api_key="", ro_paths=[*([work] if work else []), *ro_paths], view_workdir=work)
        vs = await self.launcher._start(spec, share=self._area)
        try:
            for inside in places:
                vs.place(inside)
        except BaseException:
            await vs.close()
            raise
        verdict = vs.root / "verdict"  # in its own rollout dir: writable by the verifier, by no rollout
        verdict.mkdir(mode=0o700)
        vs._own(verdict)
        return VerifierView(vs, verdict_dir=str(verdict), verdict_on_host=True)

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
        if self._area is not None and not self._area.alive():
            raise SandboxError("the rollout's private area is gone: its keeper process died (killed from outside, "
                               "or out of memory)")
        cwd_p = self._resolve(cwd) if cwd is not None else self.workdir
        # Under bwrap /tmp is private to the sandbox (and short: Chromium's singleton socket path must
        # fit AF_UNIX's 108 bytes); otherwise the rollout's own tmp dir.
        tmp = Path("/tmp") if self.isolation == "bwrap" else self.tmpdir
        full_env = scrub_env(self.home, tmp, {**self.spec.env, **(env or {})})
        res = self.spec.task.resources
        budget = timeout_s if timeout_s is not None else self.spec.task.timeout_s
        prefix = limits_prefix(
            memory_mb=res.memory_mb, cpu_s=budget * max(res.cpu, 1.0) + 5, max_open_files=res.max_open_files,
            max_procs=res.max_processes, cgroups=self.cgroups, max_file_mb=res.disk_mb,
        )
        scratch = self.root / f".scratch-{next(self._commands)}" if self._scratch_in_root else None
        try:
            return await self._run(argv, cwd_p, full_env, prefix, budget, stdin, scratch)
        finally:
            if scratch is not None:
                await asyncio.to_thread(remove_tree, str(self._h(scratch)))

    async def _run(self, argv: Sequence[str], cwd: Path, env: dict[str, str], prefix: list[str], budget: float,
                   stdin: bytes | None, scratch: Path | None) -> ExecResult:
        """:meth:`exec`, once its environment, limits and scratch directory are settled."""
        ooms = OomWatch(self.cgroups)
        t0 = time.monotonic()
        fds: list[int] = []
        try:
            try:
                cmd = self._command(argv, cwd, fds, scratch)
            except (SandboxError, OSError) as e:  # a link where a bound directory was, a full disk: the agent's doing
                return ExecResult(126, "", f"openforge: cannot prepare the sandbox for {argv[0]!r}: {e}",
                                  time.monotonic() - t0)
            proc = await asyncio.create_subprocess_exec(
                *prefix, *cmd, cwd=str(self.root if self._area else cwd), env=env, pass_fds=fds,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
            )
        except OSError as e:
            return ExecResult(127, "", f"cannot run {argv[0]!r}: {e.strerror or e}", time.monotonic() - t0)
        finally:
            for fd in fds:
                os.close(fd)
        self._procs.add(proc.pid)
        self.launcher._watch(f"+pid {proc.pid}")
        ooms.start(proc)
        half = self.launcher.max_output_bytes // 2
        out, err = BoundedOutput(half, half), BoundedOutput(half, half)
        reading = asyncio.ensure_future(communicate(proc, stdin, out, err))
        timed_out = False
        try:
            try:
                await asyncio.wait_for(asyncio.shield(reading), timeout=budget)
            except asyncio.TimeoutError:
                timed_out = True
                await self._terminate(proc)
                with contextlib.suppress(asyncio.TimeoutError):  # what is left in the pipes
                    await asyncio.wait_for(asyncio.shield(reading), 5)
        except BaseException:  # cancelled (Ctrl-C, rollout budget): leave nothing running
            kill_tree(proc.pid)
            with contextlib.suppress(Exception):
                await asyncio.shield(proc.wait())
            raise
        finally:
            reading.cancel()
            oom_kills = ooms.stop()
            self._procs.discard(proc.pid)
            self.launcher._watch(f"-pid {proc.pid}")
        rc = None if timed_out else proc.returncode
        return ExecResult(rc, out.text(), err.text(), time.monotonic() - t0, timed_out=timed_out,
                          output_dropped=out.dropped + err.dropped, oom_kills=oom_kills)

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
        if self._area is not None and self._owns_area:
            await asyncio.to_thread(self._area.stop)
            self.launcher._watch(f"-pid {self._area.proc.pid}")
        await asyncio.to_thread(unmount_quota, self.root)
        self.launcher._watch(f"-mnt {self.root}")
        if not await asyncio.to_thread(remove_tree, str(self.root)):
            log.warning("local launcher: could not remove the sandbox dir %s entirely", self.root)
        self.launcher._watch(f"-dir {self.root}")
        self.launcher._sandboxes.discard(self)
