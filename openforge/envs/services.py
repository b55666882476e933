"""A task's own background services (``[[services]]`` in ``task.toml``): start, expose, watch, stop.

Owns: :class:`ServiceSpec` (one declared service), :class:`RunningService` (its process, port, log),
:func:`launch_service` / :func:`wait_ready` / :func:`start_service`, :func:`expose_tcp` and
:class:`ServiceGroup` (every service of one rollout).

The contract (docs/task-format.md): each service is a shell command run on the host, outside the
sandbox, once per rollout, with ``$PORT`` (a free loopback port), its cwd in the rollout's state
directory ``$OPENFORGE_SERVICE_DIR`` and the task directory as ``$OPENFORGE_TASK_DIR``. It is ready
when ``GET ready`` answers below 400 (or, without ``ready``, when the port accepts a connection).
The sandbox reaches it at ``${NAME}_URL`` through the launcher's forwarding (``Sandbox.expose``: a
host Unix socket bridged to the service's port). A service that does not start, does not become
ready, or exits before the verifier ran raises :class:`EnvironmentError_` (→ ``env_error``) with the
tail of its log — except one the agent crashed (:class:`ServiceCrashed`, ``policy_failure``).

Who is to blame for a dead service: the group counts the sandbox's connections to each service.
A service that was seen alive (at the end of setup), then reached by the sandbox, then found dead
(before or after the verifier) died under the agent's requests: the policy broke its own
environment, as surely as ``rm -rf`` of its workdir, and the rollout is ``policy_failure`` (reward 0,
trained), never an untrained ``env_error`` a policy could seek out to escape its failures. A service
that died without being reached since it was last seen alive died on its own: ``env_error``. (A
service that crashes on its own *after* being used is blamed on the policy: such a task is noisy,
and its log is in the error.)

Wrapping a service (fault injection): give :class:`ServiceGroup` a :class:`ServiceWrapper`. Its
``wrap(service, task, rollout_id)`` runs once the service is ready and returns the loopback port to
expose instead of the service's own (a fault proxy in front of :attr:`RunningService.host_port`);
``unwrap(service)`` runs before the service is stopped. The verifier still gets the real service.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from ..core.errors import ConfigError, EnvironmentError_
from ..core.task import Task
from ..core.types import RolloutStatus
from ..launchers._fwd import bridge, to_tcp
from ..launchers._reaper import remove_tree
from ..launchers.base import Sandbox, SandboxFailure

__all__ = ["RunningService", "ServiceCrashed", "ServiceGroup", "ServiceSpec", "ServiceWrapper", "expose_tcp", "launch_service",
           "start_service", "wait_ready"]

_REAPER = str(Path(__file__).resolve().parent.parent / "launchers" / "_reaper.py")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")
_KEYS = {"name", "command", "ready", "ready_timeout_s"}
#: Host environment a service inherits (everything else is dropped: no driver secrets).
_PASS_ENV = ("PATH", "LANG", "LC_ALL", "HOME", "PYTHONPATH", "VIRTUAL_ENV", "TMPDIR")


@dataclass(frozen=True)
class ServiceSpec:
    """One ``[[services]]`` table: ``name`` (→ ``${NAME}_URL``), ``command`` (a shell command),
    ``ready`` (an HTTP path polled until it answers; default: the port accepts) and
    ``ready_timeout_s``."""

    name: str
    command: str
    ready: str | None = None
    ready_timeout_s: float = 30.0

    @property
    def url_var(self) -> str:
        return f"{self.name.upper()}_URL"

    @classmethod
    def parse(cls, raw: object, where: str) -> ServiceSpec:
        """Validate one ``[[services]]`` table; every problem in one :class:`ConfigError`."""
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{where}: each [[services]] entry must be a table, got {raw!r}")
        problems = [f"{where}: unknown key {k!r} in [[services]] (known: {', '.join(sorted(_KEYS))})"
                    for k in raw if k not in _KEYS]
        name, command, ready = raw.get("name"), raw.get("command"), raw.get("ready")
        if not isinstance(name, str) or not _NAME.match(name):
            problems.append(f"{where}: [[services]] name must be an identifier (letters, digits, _), got {name!r}")
        if not isinstance(command, str) or not command.strip():
            problems.append(f"{where}: [[services]] {name!r} needs a command (a shell command line)")
        if ready is not None and (not isinstance(ready, str) or not ready.startswith("/")):
            problems.append(f"{where}: [[services]] {name!r}: ready must be an HTTP path starting with '/', got {ready!r}")
        timeout = raw.get("ready_timeout_s", 30.0)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            problems.append(f"{where}: [[services]] {name!r}: ready_timeout_s must be a positive number")
        if problems:
            raise ConfigError(problems)
        return cls(name=str(name), command=str(command), ready=ready, ready_timeout_s=float(timeout))


@dataclass
class RunningService:
    """A started service: its process, host port (``http://127.0.0.1:PORT`` on the host) and log."""

    spec: ServiceSpec
    proc: subprocess.Popen
    host_port: int
    log_path: Path
    _log: IO[bytes] | None = field(repr=False, default=None)

    @property
    def host_url(self) -> str:
        return f"http://127.0.0.1:{self.host_port}"

    def log_tail(self, n: int = 1500) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        return ""

    def check_alive(self) -> None:
        """Raise :class:`EnvironmentError_` if the service has exited."""
        rc = self.proc.poll()
        if rc is not None:
            raise EnvironmentError_(f"service {self.spec.name!r} exited early (exit {rc}); log {self.log_path}:\n"
                                    f"{self.log_tail()}")

    def stop(self, grace_s: float = 2.0) -> None:
        """SIGTERM the service's process group, SIGKILL what is left after ``grace_s``."""
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(OSError):  # nothing of the service outlives it
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _ready(spec: ServiceSpec, port: int) -> bool:
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 2)
    except (OSError, asyncio.TimeoutError):
        return False
    try:
        if spec.ready is None:
            return True
        w.write(f"GET {spec.ready} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        await w.drain()
        line = await asyncio.wait_for(r.readline(), 5)
        parts = line.split()
        return len(parts) >= 2 and parts[1].isdigit() and int(parts[1]) < 400
    except (OSError, asyncio.TimeoutError):
        return False
    finally:
        w.close()


def launch_service(spec: ServiceSpec, *, state_dir: Path, log_path: Path, task_dir: Path | None = None,
                   env: Mapping[str, str] | None = None) -> RunningService:
    """Start ``spec``'s process (not yet ready: see :func:`wait_ready`)."""
    port = _free_port()
    full_env = {k: v for k, v in os.environ.items() if k in _PASS_ENV}
    full_env.update(env or {})
    full_env.update({"PORT": str(port), "OPENFORGE_SERVICE_DIR": str(state_dir)})
    if task_dir is not None:
        full_env["OPENFORGE_TASK_DIR"] = str(task_dir)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")  # noqa: SIM115 - closed by RunningService.stop
    try:
        proc = subprocess.Popen(["bash", "-c", spec.command], cwd=state_dir, env=full_env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as e:
        log.close()
        raise EnvironmentError_(f"service {spec.name!r} could not start: {e}") from e
    return RunningService(spec, proc, port, log_path, log)


async def wait_ready(svc: RunningService) -> None:
    """Wait until ``svc`` answers; :class:`EnvironmentError_` (with its log) if it exits or times out."""
    spec, port = svc.spec, svc.host_port
    deadline = time.monotonic() + spec.ready_timeout_s
    while True:
        if svc.proc.poll() is not None:
            raise EnvironmentError_(f"service {spec.name!r} exited (exit {svc.proc.returncode}) before it was ready; "
                                    f"log {svc.log_path}:\n{svc.log_tail()}")
        if await _ready(spec, port):
            return
        if time.monotonic() > deadline:
            what = f"GET {spec.ready} did not answer < 400" if spec.ready else f"port {port} did not accept"
            raise EnvironmentError_(f"service {spec.name!r} was not ready within {spec.ready_timeout_s:g}s ({what}); "
                                    f"log {svc.log_path}:\n{svc.log_tail()}")
        await asyncio.sleep(0.05)


async def start_service(spec: ServiceSpec, *, state_dir: Path, log_path: Path, task_dir: Path | None = None,
                        env: Mapping[str, str] | None = None) -> RunningService:
    """Start ``spec`` and wait until it is ready; stopped again if it is not (or on cancellation)."""
    svc = launch_service(spec, state_dir=state_dir, log_path=log_path, task_dir=task_dir, env=env)
    try:
        await wait_ready(svc)
    except BaseException:
        svc.stop()
        raise
    return svc


async def expose_tcp(sandbox: Sandbox, name: str, port: int, sock_dir: Path,
                     on_connect: Callable[[], None] | None = None) -> tuple[str, asyncio.AbstractServer]:
    """Make ``127.0.0.1:port`` on the host reachable from inside ``sandbox``: a host Unix socket in
    ``sock_dir`` bridged to the port, handed to :meth:`Sandbox.expose`. Returns (in-sandbox URL, bridge).
    ``on_connect`` is called for every connection from the sandbox."""

    path = sock_dir / f"{name}.sock"
    server = await asyncio.start_unix_server(bridge(to_tcp("127.0.0.1", port), on_connect), str(path))
    os.chmod(path, 0o600)  # the driver's alone; Sandbox.expose grants the agent's uid (and only it) access
    try:
        return await sandbox.expose(path), server
    except BaseException:
        server.close()
        raise


class ServiceCrashed(SandboxFailure):
    """A task service died after the agent reached it: ``policy_failure`` (see the module docstring)."""

    def __init__(self, message: str, status: RolloutStatus = RolloutStatus.POLICY_FAILURE):
        super().__init__(message, status)


class ServiceWrapper(Protocol):
    """Puts something (a fault proxy) in front of each service of a rollout."""

    async def wrap(self, service: RunningService, task: Task, rollout_id: str) -> int:
        """Start the wrapper; return the loopback port the sandbox should reach instead."""

    async def unwrap(self, service: RunningService) -> None:
        """Stop what :meth:`wrap` started for ``service`` (called before the service stops)."""


class ServiceGroup:
    """Every service of one rollout: :meth:`start` (in order), :attr:`sandbox_env` / :attr:`host_env`,
    :meth:`check_alive`, :meth:`stop` (idempotent; removes the state directory). A watchdog process
    (the launchers' ``_reaper.py``) kills the services and removes their directories if the driver
    dies without stopping them."""

    def __init__(self, specs: Sequence[ServiceSpec], *, task_dir: Path | None, log_dir: Path, label: str):
        self.specs, self.task_dir, self.log_dir, self.label = list(specs), task_dir, log_dir, label
        self.state_dir = Path(tempfile.mkdtemp(prefix="openforge-svc-"))
        # short (AF_UNIX paths ≤ 108 bytes), the driver's own (0700): the sandbox sees only the sockets
        self._sock_dir = Path(tempfile.mkdtemp(prefix="ofsv-", dir="/tmp"))
        self._reaper: subprocess.Popen | None = subprocess.Popen(
            [sys.executable, "-I", "-S", _REAPER], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
        self._watch(f"+dir {self.state_dir}", f"+dir {self._sock_dir}")
        self.running: list[RunningService] = []
        self._contacts: dict[str, int] = {}  # service name -> connections from the sandbox
        #: the same, when a check last saw every service alive (None: never checked; the first check
        #: ends the environment's setup, whose own requests are never the agent's)
        self._seen: dict[str, int] | None = None
        self._wrapper: ServiceWrapper | None = None
        self._bridges: list[asyncio.AbstractServer] = []
        self.sandbox_env: dict[str, str] = {}  # ${NAME}_URL as seen inside the sandbox
        self.host_env: dict[str, str] = {"OPENFORGE_SERVICE_DIR": str(self.state_dir)}  # for the verifier

    async def start(self, sandbox: Sandbox, *, task: Task, wrapper: ServiceWrapper | None = None) -> None:
        for spec in self.specs:
            svc = launch_service(spec, state_dir=self.state_dir, task_dir=self.task_dir,
                                 log_path=self.log_dir / f"{self.label}-{spec.name}.log")
            self.running.append(svc)  # registered before it is ready: a cancelled setup still stops it
            self._watch(f"+pid {svc.proc.pid}")
            await wait_ready(svc)
            port = svc.host_port
            if wrapper is not None:
                self._wrapper = wrapper
                port = await wrapper.wrap(svc, task, self.label)
            try:
                url, bridge = await expose_tcp(sandbox, spec.name, port, self._sock_dir,
                                               on_connect=functools.partial(self._contact, spec.name))
            except NotImplementedError as e:
                raise EnvironmentError_(f"service {spec.name!r}: this launcher cannot expose services: {e}") from e
            self._bridges.append(bridge)
            self.sandbox_env[spec.url_var] = url
            self.host_env[spec.url_var] = svc.host_url

    def _watch(self, *lines: str) -> None:
        if self._reaper is not None and self._reaper.stdin is not None:
            with contextlib.suppress(OSError):
                self._reaper.stdin.write("".join(f"{ln}\n" for ln in lines).encode())
                self._reaper.stdin.flush()

    def _contact(self, name: str) -> None:
        self._contacts[name] = self._contacts.get(name, 0) + 1

    def check_alive(self) -> None:
        """Raise if a service has exited: :class:`ServiceCrashed` when the sandbox reached it since it
        was last seen alive (the agent's doing), :class:`EnvironmentError_` otherwise."""
        for svc in self.running:
            name = svc.spec.name
            if svc.proc.poll() is not None and self._seen is not None \
                    and self._contacts.get(name, 0) > self._seen.get(name, 0):
                raise ServiceCrashed(
                    f"service {name!r} exited (exit {svc.proc.returncode}) after the agent's requests to it: "
                    f"the policy broke its environment; log {svc.log_path}:\n{svc.log_tail()}")
            svc.check_alive()
        self._seen = dict(self._contacts)

    async def stop(self) -> None:
        for b in self._bridges:
            b.close()
        self._bridges.clear()
        for svc in reversed(self.running):
            if self._wrapper is not None:
                with contextlib.suppress(Exception):
                    await self._wrapper.unwrap(svc)
            await asyncio.to_thread(svc.stop)
            self._watch(f"-pid {svc.proc.pid}")
        self.running.clear()
        await asyncio.to_thread(remove_tree, str(self.state_dir))
        await asyncio.to_thread(remove_tree, str(self._sock_dir))
        if self._reaper is not None:  # nothing left to watch: EOF ends it
            reaper, self._reaper = self._reaper, None
            with contextlib.suppress(OSError):
                reaper.stdin.close()  # type: ignore[union-attr]
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(reaper.wait, 5)
