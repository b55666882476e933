"""Where a task directory's verifier runs, and with what: never on the host with the agent's files.

Owns: :func:`run_verifier` (the verifier's stdout, stderr and exit status), :func:`verifier_env` (its
clean environment) and :data:`VERIFY_COPY_MAX_BYTES`.

* By default the verifier runs in a **fresh sandbox of the rollout's launcher**
  (:meth:`Sandbox.verifier_view`): local bwrap as ``nobody``, no network but the task's services
  (reached the way the agent reaches them), the task directory and the services' state directory
  read-only, the agent's workdir read-only as its cwd, the task's memory / cpu / pids limits and
  ``verify_timeout_s``. On Kubernetes that sandbox is the rollout's pod.
* ``verify_on_host = true`` in task.toml (an explicit opt-in) runs it on the host as the driver,
  on a **copy of the workdir as data** (regular files and directories only, at most
  :data:`VERIFY_COPY_MAX_BYTES`) in a temp dir it is never started in: its cwd is an empty scratch
  directory, and the copy is on neither ``PATH`` nor ``PYTHONPATH``. Memory is capped by rlimit.

Either way the environment is built from nothing (:func:`verifier_env`): ``HOME`` and ``TMPDIR`` of
its own, a fixed system ``PATH`` behind the driver's interpreter directory, no ``PYTHONPATH``, git
reading neither a system nor a global config, and ``verify.py`` run as ``python -E -s -B``.

The verdict channel: ``$OPENFORGE_VERDICT`` names a file in a directory private to the verifier
(:attr:`VerifierView.verdict_dir`; on the host a temp dir of its own); what the verifier writes there
is its verdict (read without following a link or blocking on a FIFO where the driver reads it
itself), and its stdout is then a log only. ``$OPENFORGE_UNTRUSTED`` is the helper that runs the
agent's code out of the verifier's reach (``launchers/_untrusted.py``: own namespaces, the verdict,
task and service directories hidden), copied into a pod with the task.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import EnvironmentError_, SandboxFileNotFound
from ..core.task import Task
from ..launchers._isolation import limits_prefix
from ..launchers._verifier import copy_as_data
from ..launchers.base import ExecResult, Sandbox, VerifierView
from .services import ServiceGroup, expose_tcp

__all__ = ["UNTRUSTED_HELPER", "VERDICT_MAX_BYTES", "VERIFY_COPY_MAX_BYTES", "VerifierRun", "run_in_view",
           "run_verifier", "verifier_env"]

#: The only directories on a verifier's PATH (after its interpreter's own directory).
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: How much of the workdir a host verifier's copy may take (``verify_on_host``).
VERIFY_COPY_MAX_BYTES = 1 << 30
#: ``verify.py`` runs without PYTHONPATH / PYTHONHOME / user site-packages, writing no bytecode.
PY_FLAGS = ("-E", "-s", "-B")
#: The helper a verifier runs the agent's code with (``$OPENFORGE_UNTRUSTED``); stdlib only.
UNTRUSTED_HELPER = Path(__file__).resolve().parent.parent / "launchers" / "_untrusted.py"
#: The most a verdict file may hold.
VERDICT_MAX_BYTES = 1 << 16
_VERDICT_NAME = "verdict.json"


@dataclass
class VerifierRun:
    """What a verifier left: its output, exit status and the verdict file's text (``None``: it wrote none)."""

    stdout: str
    stderr: str
    returncode: int | None
    verdict: str | None = None
    timed_out: bool = False
    #: The memory cgroup's OOM killer killed it (a SIGKILL the cgroup's own counter confirms, locally or in
    #: the pod); a kill nothing counted is not taken for one
    oom_killed: bool = False


def verifier_env(python: str, extra: Mapping[str, str]) -> dict[str, str]:
    """A verifier's environment: fixed, plus ``extra`` (the OPENFORGE_* paths and service URLs)."""
    return {
        "PATH": f"{os.path.dirname(python)}:{SYSTEM_PATH}" if os.path.isabs(python) else SYSTEM_PATH,
        "LANG": "C.UTF-8",
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0",
        "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1",
        **extra,
    }


def _argv(python: str, script: str, workdir: str) -> list[str]:
    if script.endswith(".py"):
        return [python, *PY_FLAGS, script, workdir]
    return ["bash", "--noprofile", "--norc", script, workdir]


def _script(task_dir: Path) -> Path:
    py = task_dir / "verify.py"
    return py if py.is_file() else task_dir / "verify.sh"


async def run_verifier(task: Task, sandbox: Sandbox, *, group: ServiceGroup | None, on_host: bool) -> VerifierRun:
    """Run the task directory's verifier after the agent stopped: its output, exit status and verdict
    file. :class:`EnvironmentError_` when it ran over ``verify_timeout_s`` or cannot be run."""
    if on_host:
        res = await _on_host(task, sandbox, group)
    else:
        try:
            view = await sandbox.verifier_view(_ro_paths(task, group))
        except NotImplementedError as e:
            raise EnvironmentError_(f"{e}: the verifier of {task.id} cannot run here. Use a launcher that runs "
                                    "verifiers in a sandbox (local, kubernetes), or set verify_on_host = true in "
                                    "its task.toml to run it on the host on a copy of the workdir") from None
        res = await _in_view(task, view, group)
    if res.timed_out:
        raise EnvironmentError_(f"verifier of {task.id} ran over {task.verify_timeout_s:g}s")
    if res.returncode in (137, -9):
        res.stderr += (f"\n(killed: the verifier of {task.id} is limited to the task's memory, "
                       f"{task.resources.memory_mb} MB)")
    return res


def _ro_paths(task: Task, group: ServiceGroup | None) -> list[str]:
    paths = [task.metadata["task_dir"], str(UNTRUSTED_HELPER)]
    if group is not None:
        state = group.state_dir
        os.chmod(state, 0o755)  # the verifier (uid nobody under a root driver) reads the services' state
        paths.append(str(state))
    return paths


async def run_in_view(task: Task, sandbox: Sandbox, *, ro_paths: Sequence[str], places: Sequence[str] = (),
                      command: Callable[[VerifierView], list[str]], env: Mapping[str, str] | None = None
                      ) -> VerifierRun:
    """Run ``command(view)`` (an argv) as the verifier of ``task`` in a fresh verifier sandbox
    (:meth:`Sandbox.verifier_view` with ``ro_paths`` and ``places``), with the clean verifier environment
    plus ``env``, ``$OPENFORGE_VERDICT`` and the rest as for a task directory's verifier. For formats
    whose verifier is not ``verify.py`` / ``verify.sh`` (Harbor's ``tests/test.sh``)."""
    try:
        view = await (sandbox.verifier_view(ro_paths, places) if places else sandbox.verifier_view(ro_paths))
    except NotImplementedError as e:
        raise EnvironmentError_(f"{e}: the verifier of {task.id} cannot run here") from None
    res = await _in_view(task, view, None, command=command, env=env)
    if res.timed_out:
        raise EnvironmentError_(f"verifier of {task.id} ran over {task.verify_timeout_s:g}s")
    return res


async def _in_view(task: Task, view: VerifierView, group: ServiceGroup | None, *,
                   command: Callable[[VerifierView], list[str]] | None = None,
                   env: Mapping[str, str] | None = None) -> VerifierRun:
    vs, tdir = view.sandbox, task.metadata["task_dir"]
    bridges: list[asyncio.AbstractServer] = []
    sock_dir = Path(tempfile.mkdtemp(prefix="ofvf-", dir="/tmp"))  # short: AF_UNIX paths ≤ 108 bytes
    os.chmod(sock_dir, 0o755)
    try:
        extra = {"OPENFORGE_WORKDIR": str(vs.workdir), "OPENFORGE_TASK_DIR": view.inside(tdir),
                 "OPENFORGE_UNTRUSTED": view.inside(UNTRUSTED_HELPER)}
        verdict = f"{view.verdict_dir}/{_VERDICT_NAME}" if view.verdict_dir else None
        if verdict:
            extra["OPENFORGE_VERDICT"] = verdict
        if vs.isolation == "pod":  # one trust domain (launchers/_k8s_verify): the helper may run without a userns
            extra["OPENFORGE_UNTRUSTED_WEAK_OK"] = "1"
        if group is not None:
            extra["OPENFORGE_SERVICE_DIR"] = view.inside(group.state_dir)
            for svc in group.running:  # the real service, not a fault wrapper in front of it
                url, bridge = await expose_tcp(vs, f"v-{svc.spec.name}", svc.host_port, sock_dir)
                bridges.append(bridge)
                extra[svc.spec.url_var] = url
        if command is None:
            _check_readable(task, Path(tdir), vs)
            argv = _argv(view.python, view.inside(_script(Path(tdir))), str(vs.workdir))
        else:
            argv = command(view)
        full = verifier_env(view.python, {**(env or {}), **extra})
        res = await vs.exec(argv, env=full, timeout_s=task.verify_timeout_s)
        text = None
        if verdict and not res.timed_out:
            text = await _read_view_verdict(task, view, verdict)
        return _run(res, text)
    finally:
        for b in bridges:
            b.close()
        await vs.close()
        shutil.rmtree(sock_dir, ignore_errors=True)


def _check_readable(task: Task, tdir: Path, vs: Sandbox) -> None:
    """A root driver's verifier sandbox runs as ``nobody``: the task directory must be readable by all."""
    if os.geteuid() != 0 or vs.isolation != "bwrap":
        return
    script = _script(tdir)
    if not (tdir.stat().st_mode & 0o005 == 0o005 and script.stat().st_mode & 0o004):
        raise EnvironmentError_(f"the verifier of {task.id} runs as uid nobody in its sandbox, and {script} is not "
                                f"readable by all users: chmod -R a+rX {tdir}")


def _run(res: ExecResult, verdict: str | None) -> VerifierRun:
    oom = not res.timed_out and res.returncode in (137, -9) and res.oom_kills > 0
    return VerifierRun(res.stdout, res.stderr, res.returncode, verdict, res.timed_out, oom)


def _verdict_text(task: Task, data: bytes) -> str:
    if len(data) > VERDICT_MAX_BYTES:
        raise EnvironmentError_(f"verifier of {task.id} wrote a verdict of {len(data)} bytes (at most "
                                f"{VERDICT_MAX_BYTES}): write one JSON object to $OPENFORGE_VERDICT")
    return data.decode(errors="replace")


async def _read_view_verdict(task: Task, view: VerifierView, path: str) -> str | None:
    if view.verdict_on_host:
        return await asyncio.to_thread(_read_host_verdict, task, Path(path))
    try:
        return _verdict_text(task, await view.sandbox.read_file(path))
    except SandboxFileNotFound:
        return None


def _read_host_verdict(task: Task, path: Path) -> str | None:
    """The host verifier's verdict file: not following a link, not blocking on a FIFO, bounded."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise EnvironmentError_(f"verifier of {task.id}: cannot read its verdict file: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise EnvironmentError_(f"verifier of {task.id}: its verdict file is not a regular file")
        return _verdict_text(task, f.read(VERDICT_MAX_BYTES + 1))


async def _on_host(task: Task, sandbox: Sandbox, group: ServiceGroup | None) -> VerifierRun:
    """``verify_on_host``: the driver runs it, on a copy of the workdir as data, from a scratch cwd."""
    src = await sandbox.pull_workdir()
    with tempfile.TemporaryDirectory(prefix="openforge-verify-") as tmp:
        data, home, vdir = Path(tmp) / "work", Path(tmp) / "home", Path(tmp) / "verdict"
        await asyncio.to_thread(copy_as_data, src, data, max_bytes=VERIFY_COPY_MAX_BYTES)
        home.mkdir()
        vdir.mkdir(mode=0o700)
        if os.geteuid() == 0:  # $OPENFORGE_UNTRUSTED runs the agent's code as nobody: let it reach the scratch
            os.chmod(tmp, 0o711)
            home.chmod(0o755)
        extra = {"HOME": str(home), "TMPDIR": str(home), "OPENFORGE_WORKDIR": str(data),
                 "OPENFORGE_TASK_DIR": task.metadata["task_dir"], "OPENFORGE_UNTRUSTED": str(UNTRUSTED_HELPER),
                 "OPENFORGE_VERDICT": str(vdir / _VERDICT_NAME), **(group.host_env if group else {})}
        res = task.resources
        prefix = limits_prefix(memory_mb=res.memory_mb, cpu_s=task.verify_timeout_s * max(res.cpu, 1.0) + 5,
                               max_open_files=res.max_open_files, max_procs=None)
        argv = _argv(sys.executable, str(_script(Path(task.metadata["task_dir"]))), str(data))
        res = await _host_exec([*prefix, *argv], cwd=home, env=verifier_env(sys.executable, extra),
                               timeout_s=task.verify_timeout_s)
        return _run(res, None if res.timed_out else _read_host_verdict(task, vdir / _VERDICT_NAME))


async def _host_exec(argv: list[str], *, cwd: Path, env: dict[str, str], timeout_s: float) -> ExecResult:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    proc = await asyncio.create_subprocess_exec(*argv, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                start_new_session=True)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except (asyncio.TimeoutError, asyncio.CancelledError) as e:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        await proc.wait()
        if isinstance(e, asyncio.CancelledError):
            raise
        return ExecResult(None, "", "", loop.time() - t0, timed_out=True)
    return ExecResult(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"), loop.time() - t0)
