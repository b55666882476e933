"""Task directories: package a task without writing Python, and load a folder of them.

Owns: :class:`TaskDirEnvironment` and :func:`load_task_dir`. The format::

    my-task/
      task.toml        id, split, category, timeout_s, required_tools, subgoals, image, [resources], [metadata],
                       [[faults]] (injected faults: openforge.faults, README "Fault injection")
      instruction.md   what the agent is told
      setup/           optional: copied into the rollout's workdir before the agent starts
      setup.sh         optional: run inside the sandbox (cwd = workdir) after the copy
      verify.py | verify.sh    the verifier (required)
      solution.sh      optional: reference solution, one shell command per line

The verifier runs on the host after the agent stopped, never inside the sandbox, with the task
directory hidden from the agent. It gets the workdir as ``$OPENFORGE_WORKDIR`` and as its first
argument, and runs in a fresh empty directory. Exit 0 → reward 1, otherwise 0; if its last stdout
line is a JSON object ``{"reward": x, "rewards": {...}, "detail": "..."}``, that is used instead.
Any other exit code, or a Python traceback, means the verifier itself failed (→ ``env_error``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

from pydantic import ValidationError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from ..environment import Environment, VerifyResult
from ..errors import ConfigError, EnvironmentError_
from ..launchers.base import Sandbox
from ..task import Task

__all__ = ["TaskDirEnvironment", "load_task_dir"]


def load_task_dir(path: Path, environment: str = "taskdir") -> Task:
    """Read one task directory into a :class:`Task`; every problem reported at once."""
    problems = []
    meta: dict = {}
    toml = path / "task.toml"
    if not toml.is_file():
        problems.append(f"{toml}: missing (every task directory needs a task.toml)")
    else:
        try:
            meta = tomllib.loads(toml.read_text())
        except tomllib.TOMLDecodeError as e:
            problems.append(f"{toml}: not valid TOML: {e}")
    instr = path / "instruction.md"
    if not instr.is_file():
        problems.append(f"{instr}: missing (the instruction the agent is given)")
    if not (path / "verify.py").is_file() and not (path / "verify.sh").is_file():
        problems.append(f"{path}: needs a verify.py or verify.sh")
    if problems:
        raise ConfigError(problems)
    meta.setdefault("id", path.name)
    meta.setdefault("environment", environment)
    metadata = dict(meta.pop("metadata", {}))
    metadata["task_dir"] = str(path.resolve())
    if "faults" in meta:  # [[faults]]: checked here, injected by openforge.faults
        from ..faults.spec import parse_faults

        metadata["faults"] = [f.model_dump() for f in parse_faults(meta.pop("faults"), f"{toml}: faults")]
    sol = path / "solution.sh"
    if sol.is_file():
        metadata["solution"] = [ln for ln in sol.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    try:
        return Task(instruction=instr.read_text().strip(), metadata=metadata, **meta)
    except ValidationError as e:
        raise ConfigError([f"{toml}: {'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors()]) from e


class TaskDirEnvironment(Environment):
    """Tasks read from a task directory or a folder of them (see the module docstring)."""

    name = "taskdir"

    def __init__(self, path: str | Path, *, name: str | None = None):
        self.path = Path(path).resolve()
        if not self.path.is_dir():
            raise ConfigError(f"task directory {path} does not exist")
        self.name = name or self.path.name
        dirs = [self.path] if (self.path / "task.toml").exists() else sorted(
            d for d in self.path.iterdir() if d.is_dir() and (d / "task.toml").exists())
        if not dirs:
            raise ConfigError(f"{path}: no task directories (folders with a task.toml) found")
        problems: list[str] = []
        self._tasks: list[Task] = []
        for d in dirs:
            try:
                self._tasks.append(load_task_dir(d, self.name))
            except ConfigError as e:
                problems += e.problems
        ids = [t.id for t in self._tasks]
        problems += [f"duplicate task id {i!r}" for i in sorted({i for i in ids if ids.count(i) > 1})]
        if problems:
            raise ConfigError(problems)

    def tasks(self, split: str | None = None) -> list[Task]:
        return [t for t in self._tasks if split is None or t.split == split]

    def hidden_paths(self, task: Task) -> list[str]:
        return [task.metadata["task_dir"]]

    async def setup(self, task: Task, sandbox: Sandbox) -> None:
        tdir = Path(task.metadata["task_dir"])
        setup = tdir / "setup"
        if setup.is_dir():
            for f in sorted(setup.rglob("*")):
                if f.is_file():
                    await sandbox.write_file(sandbox.workdir / f.relative_to(setup), f.read_bytes(),
                                             f.stat().st_mode & 0o777)
        script = tdir / "setup.sh"
        if script.is_file():
            res = await sandbox.exec(["bash", "-s"], stdin=script.read_bytes(), timeout_s=task.setup_timeout_s)
            if res.returncode != 0:
                raise EnvironmentError_(f"setup.sh of {task.id} failed ({'timed out' if res.timed_out else res.returncode}): "
                                        f"{(res.stderr or res.stdout)[-800:]}")

    async def verify(self, task: Task, sandbox: Sandbox) -> VerifyResult:
        tdir = Path(task.metadata["task_dir"])
        workdir = await sandbox.pull_workdir()
        script = tdir / "verify.py"
        argv = [sys.executable, str(script)] if script.is_file() else ["bash", str(tdir / "verify.sh")]
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "HOME", "PYTHONPATH")}
        env["OPENFORGE_WORKDIR"] = str(workdir)
        with tempfile.TemporaryDirectory(prefix="openforge-verify-") as cwd:
            proc = await asyncio.create_subprocess_exec(*argv, str(workdir), cwd=cwd, env=env,
                                                        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            try:
                out, err = await asyncio.wait_for(proc.communicate(), task.verify_timeout_s)
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()
                raise EnvironmentError_(f"verifier of {task.id} ran over {task.verify_timeout_s:.0f}s") from None
        text = out.decode(errors="replace").strip()
        last = text.splitlines()[-1] if text else ""
        if last.startswith("{"):
            try:  # NaN / Infinity parse as floats here and are refused by VerifyResult (→ env_error)
                return VerifyResult.model_validate(json.loads(last))
            except ValidationError as e:
                why = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
                raise EnvironmentError_(f"verifier of {task.id} printed an invalid result line {last[:200]!r}: "
                                        f"{why}") from None
            except ValueError as e:
                raise EnvironmentError_(f"verifier of {task.id} printed an invalid result line {last[:200]!r}: {e}") from e
        errtext = err.decode(errors="replace")
        if proc.returncode not in (0, 1) or "Traceback (most recent call last)" in errtext:
            raise EnvironmentError_(f"verifier of {task.id} crashed (exit {proc.returncode}): "
                                    f"{errtext[-800:]}")
        return VerifyResult(reward=1.0 if proc.returncode == 0 else 0.0, detail=(text or err.decode(errors="replace"))[-500:])
