"""Harbor task directories as an environment: a folder of them (or one) runs like openforge's own.

Owns: :class:`HarborEnvironment`. Reading a task is ``harbor_format`` (``task.toml``) and
``harbor_dockerfile`` (``environment/Dockerfile``); the verifier's side is ``harbor_verify`` (run
inside the verifier's sandbox). docs/harbor.md is the user's guide.

One rollout, locally (bubblewrap):

1. setup: the rollout's workdir is also shown at the task's workdir (``/app`` or the Dockerfile's
   ``WORKDIR``; commands run there), ``/solution`` is an empty directory (filled only by the oracle's
   own script), and the Dockerfile's ``COPY``/``ADD`` (from ``environment/``) and ``RUN`` steps run in
   order, in the sandbox, with its ``ENV``; ``pip install`` there goes to a directory of the rollout
   (``PIP_TARGET``) that is on ``PYTHONPATH`` and, once setup is done, read-only for the agent;
2. the agent runs; it never sees the task directory (``tests/``, ``solution/``, ``environment/``);
3. after every process of the agent ended, the verifier runs in a fresh sandbox of its own with fresh
   ``/tests`` (a copy of ``tests/``), ``/logs/verifier`` and the workdir path (a copy of what the agent
   left), runs ``bash /tests/test.sh`` there and reads the reward file (``harbor_verify``). No reward
   file is an ``env_error``, never a 0.

On Kubernetes the task's environment is an image (``images`` / ``registry`` options; ``forge env images``
prints the build and push commands): setup then only makes the image's workdir the pod's, and the
verifier runs in the pod the same way (as for a task directory: after the pod agent ended the agent's
processes). Tasks the local launcher cannot honour (a base image the host lacks, compose, ``apt-get``)
are left out of :meth:`tasks` with a warning, and asking for one by id is refused with the reason.
"""

from __future__ import annotations

import base64
import io
import logging
import os
import shlex
import sys
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError, EnvironmentError_
from ..core.task import Task
from ..environment import Environment, VerifyResult
from ..launchers.base import Sandbox, VerifierView
from . import harbor_dockerfile
from .harbor_format import HarborSpec, harbor_spec, is_harbor_task_dir, load_harbor_task
from .taskdir import parse_result
from .verifier_sandbox import SYSTEM_PATH, run_in_view

__all__ = ["HarborEnvironment", "is_harbor_task_dir"]

log = logging.getLogger(__name__)
_VERIFY = Path(__file__).resolve().parent / "harbor_verify.py"
#: The most of ``solution/`` the oracle's script carries (base64 in the one shell-tool call).
MAX_SOLUTION_BYTES = 1 << 20
_SITE = "harbor-site"


def _image_map(images: Any) -> dict[str, str]:
    if images is None:
        return {}
    if isinstance(images, Mapping):
        return {str(k): str(v) for k, v in images.items()}
    p = Path(str(images)).expanduser()
    if not p.is_file():
        raise ConfigError(f"environment option images: {images!r} is not a file (TOML or JSON: task id = image)")
    if p.suffix == ".json":
        import json

        data = json.loads(p.read_text())
    else:
        from .harbor_format import tomllib

        data = tomllib.loads(p.read_text())
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise ConfigError(f"environment option images: {p} must map task ids to image names")
    return dict(data)


class HarborEnvironment(Environment):
    """A folder of Harbor task directories (``task.toml`` + ``instruction.md`` + ``environment/`` +
    ``tests/test.sh`` + ``solution/solve.sh``), or one; see the module docstring and docs/harbor.md.

    Options: ``images`` (a dict or a TOML/JSON file: task id → image) or ``registry`` (a prefix: the
    image is ``REGISTRY/<task id>:latest``) for Kubernetes, where the tasks' environments are images;
    ``host_bases`` (images to treat as this host locally, e.g. ``"myorg/base:1"``, a list or a comma
    list)."""

    name = "harbor"

    def __init__(self, path: str | Path, *, name: str | None = None, images: Any = None,
                 registry: str | None = None, host_bases: Any = ()):
        self.path = Path(path).resolve()
        if not self.path.is_dir():
            raise ConfigError(f"Harbor task folder {path} does not exist")
        self.name = name or self.path.name
        extra = tuple(x.strip() for x in (host_bases.split(",") if isinstance(host_bases, str) else host_bases)
                      if x.strip())
        dirs = [self.path] if is_harbor_task_dir(self.path) else sorted(
            d for d in self.path.iterdir() if d.is_dir() and is_harbor_task_dir(d))
        if not dirs:
            raise ConfigError(f"{path}: no Harbor task directories (task.toml + instruction.md + tests/) found")
        self.images = _image_map(images)
        self.registry = registry.rstrip("/") if registry else None
        problems: list[str] = []
        tasks: list[Task] = []
        bases = harbor_dockerfile.host_bases(extra)
        for d in dirs:
            try:
                tasks.append(self._with_image(load_harbor_task(d, self.name, bases)))
            except ConfigError as e:
                problems += e.problems
        if problems:
            raise ConfigError(problems)
        self._all = tasks
        self._refused = {t.id: harbor_spec(t).local_refusal for t in tasks
                         if t.image is None and harbor_spec(t).local_refusal}
        for tid, why in self._refused.items():
            log.warning("Harbor task %s left out (the local launcher cannot run it): %s", tid, why)
        self._runnable = [t for t in tasks if t.id not in self._refused]

    @property
    def on_images(self) -> bool:
        return bool(self.images or self.registry)

    def _with_image(self, task: Task) -> Task:
        image = self.images.get(task.id) or (f"{self.registry}/{task.id}:latest" if self.registry else None)
        return task.model_copy(update={"image": image}) if image else task

    def tasks(self, split: str | None = None) -> list[Task]:
        return [t for t in self._runnable if split is None or t.split == split]

    def refused(self) -> dict[str, str]:
        """Tasks left out: task id → why the local launcher cannot run it (the Dockerfile line)."""
        return dict(self._refused)

    def task(self, task_id: str) -> Task:
        if task_id in self._refused:
            raise ConfigError(f"Harbor task {task_id} cannot run on the local launcher: {self._refused[task_id]}")
        return super().task(task_id)

    def hidden_paths(self, task: Task) -> list[str]:
        return [task.metadata["task_dir"]]

    def harness_env(self, task: Task, sandbox: Sandbox) -> dict[str, str]:
        return _run_env(harbor_spec(task), sandbox)

    async def setup(self, task: Task, sandbox: Sandbox) -> None:
        spec = harbor_spec(task)
        if sandbox.isolation == "pod":
            await _pod_setup(task, spec, sandbox)
            return
        if spec.local_refusal:  # kept for its image (Kubernetes), but this is not a pod
            raise EnvironmentError_(f"Harbor task {task.id} cannot run here: {spec.local_refusal}")
        try:
            sandbox.place(spec.workdir, sandbox.workdir)
            sandbox.place("/solution")
        except NotImplementedError as e:
            raise EnvironmentError_(f"Harbor task {task.id} needs the local launcher's bwrap isolation: {e}") from None
        site = sandbox.workdir.parent / _SITE
        await sandbox.write_file(site / ".openforge", b"what the Dockerfile's RUN steps installed\n")
        await self._steps(task, spec, sandbox)
        sandbox.place(str(site), site, writable=False)  # what RUN installed: read-only for the agent

    async def _steps(self, task: Task, spec: HarborSpec, sandbox: Sandbox) -> None:
        ctx = Path(spec.task_dir) / "environment"
        env = _run_env(spec, sandbox)
        for step in spec.steps:
            if step["kind"] == "copy":
                await _copy(ctx, step, spec.workdir, sandbox)
                continue
            cwd = sandbox.workdir / os.path.relpath(step["cwd"], spec.workdir)
            res = await sandbox.exec(list(step["argv"]), env={**env, **dict(step["env"])}, cwd=cwd,
                                     timeout_s=task.setup_timeout_s)
            if res.returncode != 0:
                why = "timed out" if res.timed_out else f"exit {res.returncode}"
                raise EnvironmentError_(f"Harbor task {task.id}: environment/Dockerfile RUN {' '.join(step['argv'])[:200]} "
                                        f"failed ({why}): {(res.stderr or res.stdout)[-800:]}")

    async def verify(self, task: Task, sandbox: Sandbox) -> VerifyResult:
        spec = harbor_spec(task)
        pod = sandbox.isolation == "pod"
        site = None if pod else f"{sandbox.workdir.parent}/{_SITE}"
        env = {**_run_env(spec, sandbox, verifier=True), **spec.verifier_env}

        def command(view: VerifierView) -> list[str]:
            workdir = spec.workdir if pod else str(view.sandbox.workdir)
            return [view.python, "-I", "-S", view.inside(_VERIFY), "--task-dir", view.inside(spec.task_dir),
                    "--workdir", workdir, "--app", spec.workdir, "--timeout", str(spec.verify_timeout_s)]

        # setup made the site directory (outside a pod it always does); it is not looked up on the host: under
        # a non-root driver it lives in the rollout's private area, which only the sandboxes see
        ro = [spec.task_dir, str(_VERIFY), *([site] if site else [])]
        places = () if pod else (spec.workdir, "/tests", "/logs/verifier")
        run = await run_in_view(task, sandbox, ro_paths=ro, places=places, command=command, env=env)
        if run.returncode == 2:  # harbor_verify's own refusal: no usable reward file (never a 0)
            why = [ln[12:] for ln in run.stderr.splitlines() if ln.startswith("[openforge] ")]
            raise EnvironmentError_(f"Harbor verifier of {task.id}: {'; '.join(why) or 'failed'} (test.sh output: "
                                    f"{(run.stdout.strip() or '(none)')[-500:]})")
        return parse_result(task.id, run.stdout, run.stderr, run.returncode, verdict=run.verdict)

    def reference_solution(self, task: Task) -> list[str] | None:
        """The oracle: one script that unpacks ``solution/`` into ``/solution`` and runs ``solve.sh`` in the
        workdir with ``[solution].env`` (the agent's own rollouts see ``/solution`` empty)."""
        spec = harbor_spec(task)
        if not spec.has_solution:
            return None
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(Path(spec.task_dir) / "solution", arcname=".")
        if buf.tell() > MAX_SOLUTION_BYTES:
            log.warning("Harbor task %s: solution/ is over %d bytes packed; no reference solution", task.id,
                        MAX_SOLUTION_BYTES)
            return None
        blob = base64.b64encode(buf.getvalue()).decode()
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in spec.solution_env.items())
        return [f"mkdir -p /solution && base64 -d > /tmp/.solution.tgz <<'OPENFORGE_SOLUTION'\n{blob}\n"
                f"OPENFORGE_SOLUTION\ntar -xzf /tmp/.solution.tgz -C /solution && rm -f /tmp/.solution.tgz\n"
                f"cd {shlex.quote(spec.workdir)}\n{exports}bash /solution/solve.sh"]

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "path": str(self.path), "refused": self.refused()}

    def build_commands(self, registry: str) -> list[str]:
        """The ``docker build`` and ``docker push`` commands that make every task's image under ``registry``."""
        out = []
        for t in self._all:
            env_dir = Path(t.metadata["task_dir"]) / "environment"
            if (env_dir / "Dockerfile").is_file():
                image = f"{registry.rstrip('/')}/{t.id}:latest"
                out += [f"docker build -t {shlex.quote(image)} {shlex.quote(str(env_dir))}",
                        f"docker push {shlex.quote(image)}"]
        return out


def _run_env(spec: HarborSpec, sandbox: Sandbox, *, verifier: bool = False) -> dict[str, str]:
    """The task's ENV, with the interpreter's directory (locally: the driver's Python stands for
    ``python:X.Y``) and what RUN's ``pip install`` put in the rollout's site directory."""
    env = dict(spec.env)
    if sandbox.isolation == "pod":
        return env
    site = f"{sandbox.workdir.parent}/{_SITE}"
    base_path = env.get("PATH") or f"{os.path.dirname(sys.executable)}:{SYSTEM_PATH if verifier else os.environ.get('PATH', SYSTEM_PATH)}"
    env["PATH"] = f"{site}/bin:{os.path.dirname(sys.executable)}:{base_path}"
    env["PYTHONPATH"] = ":".join(x for x in (site, env.get("PYTHONPATH")) if x)
    env.update(PIP_TARGET=site, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_WARN_SCRIPT_LOCATION="1")
    return env


async def _copy(ctx: Path, step: dict[str, Any], workdir: str, sandbox: Sandbox) -> None:
    """One ``COPY``/``ADD`` of the build context into the workdir (Docker's rules: a directory's contents
    are copied, a file into a destination ending in ``/`` keeps its name)."""
    dest = Path(os.path.relpath(step["dest"], workdir))
    for src in step["sources"]:
        matches = sorted(ctx.glob(src)) if any(c in src for c in "*?[") else [ctx / src]
        if not matches or not all(m.exists() for m in matches):
            raise EnvironmentError_(f"environment/Dockerfile COPY {src}: no such file in environment/")
        for m in matches:
            if m.resolve() != ctx.resolve() and not m.resolve().is_relative_to(ctx.resolve()):
                raise EnvironmentError_(f"environment/Dockerfile COPY {src}: outside the build context")
            if m.is_dir():
                for f in sorted(m.rglob("*")):
                    if f.is_file() and not f.is_symlink():
                        await _put(sandbox, dest / f.relative_to(m), f)
            else:
                await _put(sandbox, dest / m.name if step["dest_is_dir"] or len(matches) > 1 else dest, m)


async def _put(sandbox: Sandbox, rel: Path, src: Path) -> None:
    await sandbox.write_file(sandbox.workdir / rel, src.read_bytes(), src.stat().st_mode & 0o777 | 0o600)


async def _pod_setup(task: Task, spec: HarborSpec, sandbox: Sandbox) -> None:
    """In a pod of the task's image: the image's workdir becomes the pod's (its files copied into the
    pod's workdir volume, the path then a link to it), and ``/solution`` an empty directory."""
    app, work = shlex.quote(spec.workdir), shlex.quote(str(sandbox.workdir))
    script = (f"set -e; if [ -d {app} ] && [ ! -L {app} ]; then cp -a {app}/. {work}/; rm -rf {app}; fi; "
              f"mkdir -p \"$(dirname {app})\"; ln -sfn {work} {app}; mkdir -p /solution")
    res = await sandbox.exec(["sh", "-c", script], timeout_s=task.setup_timeout_s)
    if res.returncode != 0:
        raise EnvironmentError_(f"Harbor task {task.id}: could not make {spec.workdir} the pod's workdir (the pod "
                                f"must run as root, as Harbor images do): {(res.stderr or res.stdout)[-500:]}")
