"""Task directories: package a task without writing Python, and run a folder of them.

Owns: :class:`TaskDirEnvironment` (setup / verify / teardown of task directories) and
:func:`parse_result` (a verifier's output → :class:`VerifyResult`). Loading lives in
``taskdir_format`` (:func:`load_task_dir`), services in ``services``. The format (every key:
docs/task-format.md)::

    my-task/
      task.toml        id, split, category, timeout_s, setup_timeout_s, verify_timeout_s, subgoals,
                       required_tools, image, exit_code_reward, verify_on_host, verify_oom,
                       [resources], [[services]], [metadata]
      instruction.md   what the agent is told
      setup/           optional: copied into the rollout's workdir before the agent starts
      setup.sh         optional: run as a file inside the sandbox (cwd = workdir, stdin empty)
      verify.py | verify.sh    the verifier (required)
      solution.sh      optional: the reference solution, run as one shell script
      services/ ...    optional: whatever the [[services]] commands run

Order per rollout: services start (on the host) → ``setup/`` copied → ``setup.sh`` → agent →
verifier → services stopped. The verifier never runs on the host with the agent's files: it runs
after the agent stopped, in a fresh sandbox of the same launcher (``verifier_sandbox``), with the
agent's workdir read-only as its cwd (also ``$OPENFORGE_WORKDIR`` and its first argument), the task
directory read-only as ``$OPENFORGE_TASK_DIR``, ``$OPENFORGE_SERVICE_DIR`` and each service's
``${NAME}_URL``, ``$OPENFORGE_VERDICT`` and ``$OPENFORGE_UNTRUSTED``, a clean environment, and the
task's limits; ``verify_on_host = true`` (opt-in) runs it on the host on a copy of the workdir as data
instead.

Its verdict (:func:`parse_result`) is one JSON object ``{"reward": x, "subscores" | "rewards": {...},
"detail": "...", ...}`` (other keys are kept as metadata), written to the file ``$OPENFORGE_VERDICT``
(the channel the agent's code cannot reach when run with ``$OPENFORGE_UNTRUSTED``), or else printed
as its last stdout line (forgeable by any agent code it runs unisolated). Either counts only when the
verifier exits 0, and a stdout line only with no Python traceback on stderr. With
``exit_code_reward = true`` and no verdict: exit 0 → 1.0, exit 1 → 0.0 (whatever it printed; a
traceback on stderr still means it crashed). Exit
:data:`AGENT_FAULT_EXIT` (3) says the agent's output is unusable: reward 0, ``policy_failure``. Any
other exit status, a traceback, or no verdict means the verifier failed (``env_error``), and so does
an out-of-memory death unless the task says ``verify_oom = "agent"`` (:func:`blame_oom`).
"""

from __future__ import annotations

import json
import re
import tempfile
import uuid
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..core.errors import AgentOutputError, ConfigError, EnvironmentError_
from ..core.task import Task
from ..environment import Environment, VerifyResult
from ..launchers.base import Sandbox
from .services import ServiceGroup, ServiceWrapper
from .taskdir_format import load_task_dir, taskdir_extras
from .verifier_sandbox import VerifierRun, run_verifier

__all__ = ["AGENT_FAULT_EXIT", "TaskDirEnvironment", "blame_oom", "load_task_dir", "parse_result"]

_RESULT_KEYS = ("reward", "rewards", "subscores", "detail")
#: A verifier's exit status meaning "the agent's output is unusable" (→ reward 0, ``policy_failure``).
AGENT_FAULT_EXIT = 3
_TRACEBACK = "Traceback (most recent call last)"
_MEMORY_ERROR = re.compile(r"MemoryError(:|$)")


def parse_result(task_id: str, out: str, err: str, returncode: int | None, *, exit_code_reward: bool = False,
                 verdict: str | None = None) -> VerifyResult:
    """A verifier's stdout/stderr/exit status and verdict file (``verdict``: its text, ``None`` when
    it wrote none) → its verdict (see the module docstring for the rules). :class:`AgentOutputError`
    when it said the agent's output is unusable, :class:`EnvironmentError_` when it failed."""
    text = out.strip()
    if returncode == AGENT_FAULT_EXIT:
        why = (err.strip() or text)[-800:] or "no reason given"
        raise AgentOutputError(f"the verifier of {task_id} found the agent's output unusable (exit 3): {why}")
    if returncode == 1 and exit_code_reward and _TRACEBACK not in err:
        return VerifyResult(reward=0.0, detail=(text or err)[-500:])
    if returncode == 1 and not exit_code_reward and _TRACEBACK not in err:
        raise _no_verdict(task_id, returncode, text, "; a verdict counts only with exit 0")
    if returncode != 0:
        raise EnvironmentError_(f"verifier of {task_id} crashed (exit {returncode}); a verdict counts only with "
                                f"exit 0: {(err or text)[-800:]}")
    if verdict is not None and verdict.strip():
        return _result_line(task_id, verdict.strip(), detail=text[-500:],
                            source="wrote an invalid verdict to $OPENFORGE_VERDICT:")
    if _TRACEBACK in err:
        raise EnvironmentError_(f"verifier of {task_id} crashed (a traceback on stderr): {err[-800:]}")
    last = text.splitlines()[-1].strip() if text else ""
    if last.startswith("{"):
        return _result_line(task_id, last)
    if not exit_code_reward:
        raise _no_verdict(task_id, returncode, text, "")
    return VerifyResult(reward=1.0, detail=(text or err)[-500:])


def blame_oom(task_id: str, run: VerifierRun) -> None:
    """``verify_oom = "agent"`` (the task's author says the verifier's memory grows only with what the agent
    left): a verifier that ran out of memory is the agent's failure, :class:`AgentOutputError`. Out of
    memory means killed by the memory cgroup's OOM killer, as its own counter confirms
    (:attr:`VerifierRun.oom_killed`), or, where memory is an rlimit, a Python verifier that died of
    ``MemoryError``; a SIGKILL nothing counted stays the verifier's failure."""
    lines = run.stderr.strip().splitlines()
    if run.oom_killed:
        how = "was killed by its memory limit's OOM killer"
    elif run.returncode == 1 and _TRACEBACK in run.stderr and lines and _MEMORY_ERROR.match(lines[-1]):
        how = "died of MemoryError"
    else:
        return
    raise AgentOutputError(f"the verifier of {task_id} {how} on the agent's output (verify_oom = \"agent\" in its "
                           "task.toml)")


def _no_verdict(task_id: str, returncode: int, text: str, note: str) -> EnvironmentError_:
    return EnvironmentError_(
        f"verifier of {task_id} printed no result line (exit {returncode}, stdout {text[-200:]!r}){note}: write "
        '{"reward": ..., "subscores": {...}} to the file $OPENFORGE_VERDICT (or print it as the last line of '
        "stdout), or set exit_code_reward = true in task.toml to score by exit status")


def _result_line(task_id: str, line: str, *, detail: str = "", source: str = "printed an invalid result line"
                 ) -> VerifyResult:
    def bad(why: str) -> EnvironmentError_:
        return EnvironmentError_(f"verifier of {task_id} {source} {line[:200]!r}: {why}")

    try:  # NaN / Infinity parse as floats here and are refused by VerifyResult (→ env_error)
        obj = json.loads(line)
    except ValueError as e:
        raise bad(str(e)) from e
    if not isinstance(obj, dict):
        raise bad("not a JSON object")
    if "rewards" in obj and "subscores" in obj:
        raise bad("give the sub-scores once, as 'subscores' or as 'rewards'")
    fields = {k: obj[k] for k in _RESULT_KEYS if k in obj}
    if "subscores" in fields:
        fields["rewards"] = fields.pop("subscores")
    if "detail" in fields and not isinstance(fields["detail"], str):
        fields["detail"] = json.dumps(fields["detail"])
    fields["metadata"] = {k: v for k, v in obj.items() if k not in _RESULT_KEYS}
    if detail and "detail" not in fields:
        fields["detail"] = detail
    try:
        return VerifyResult.model_validate(fields)
    except ValidationError as e:
        raise bad("; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())) from None


def _link_subgoals(res: VerifyResult, links: dict[str, str]) -> VerifyResult:
    """Add ``subgoal:<text>`` sub-scores for subgoals that name the sub-score measuring them."""
    if not links:
        return res
    rewards, missing = dict(res.rewards), []
    for text, score in links.items():
        if score in rewards:
            rewards[f"subgoal:{text}"] = rewards[score]
        else:
            missing.append(score)
    meta = {**res.metadata, **({"unreported_subscores": missing} if missing else {})}
    return res.model_copy(update={"rewards": rewards, "metadata": meta})


class TaskDirEnvironment(Environment):
    """Tasks read from a task directory or a folder of them (see the module docstring).

    ``log_dir``: where service logs go (default: ``<run dir>/services`` once :meth:`use_run_dir` is
    called, else a temp dir); ``service_wrapper``: a :class:`ServiceWrapper` putting something (a
    fault proxy) in front of each service."""

    name = "taskdir"

    def __init__(self, path: str | Path, *, name: str | None = None, log_dir: str | Path | None = None,
                 service_wrapper: ServiceWrapper | None = None):
        self.path = Path(path).resolve()
        if not self.path.is_dir():
            raise ConfigError(f"task directory {path} does not exist")
        self.name = name or self.path.name
        self.log_dir = Path(log_dir) if log_dir else None
        self.service_wrapper = service_wrapper
        self._services: dict[int, ServiceGroup] = {}
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

    def use_run_dir(self, run_dir: Path) -> None:
        if self.log_dir is None:
            self.log_dir = Path(run_dir) / "services"

    def harness_env(self, task: Task, sandbox: Sandbox) -> dict[str, str]:
        group = self._services.get(id(sandbox))
        return dict(group.sandbox_env) if group else {}

    async def setup(self, task: Task, sandbox: Sandbox) -> None:
        tdir = Path(task.metadata["task_dir"])
        services, _, _ = taskdir_extras(task)
        env: dict[str, str] = {}
        if services:
            rid = getattr(getattr(sandbox, "spec", None), "rollout_id", None) or uuid.uuid4().hex[:12]
            log_dir = self.log_dir or Path(tempfile.gettempdir()) / "openforge-service-logs"
            group = self._services[id(sandbox)] = ServiceGroup(services, task_dir=tdir, log_dir=log_dir, label=rid)
            await group.start(sandbox, task=task, wrapper=self.service_wrapper)
            env = dict(group.sandbox_env)
        setup = tdir / "setup"
        if setup.is_dir():
            for f in sorted(setup.rglob("*")):
                if f.is_file():
                    await sandbox.write_file(sandbox.workdir / f.relative_to(setup), f.read_bytes(),
                                             f.stat().st_mode & 0o777)
        script = tdir / "setup.sh"
        if script.is_file():
            await self._run_setup(task, sandbox, script, env)
        if services:
            self._services[id(sandbox)].check_alive()

    async def _run_setup(self, task: Task, sandbox: Sandbox, script: Path, env: dict[str, str]) -> None:
        """``setup.sh`` as a file (stdin empty), from a private path removed again before the agent starts."""
        path = sandbox.home / f".openforge-setup-{uuid.uuid4().hex[:8]}.sh"
        await sandbox.write_file(path, script.read_bytes(), 0o700)
        try:
            res = await sandbox.exec(["bash", str(path)], env={**env, "OPENFORGE_WORKDIR": str(sandbox.workdir)},
                                     cwd=sandbox.workdir, timeout_s=task.setup_timeout_s)
        finally:
            await sandbox.exec(["rm", "-f", str(path)], timeout_s=30)
        if res.returncode != 0:
            raise EnvironmentError_(f"setup.sh of {task.id} failed ({'timed out' if res.timed_out else res.returncode}): "
                                    f"{(res.stderr or res.stdout)[-800:]}")

    async def verify(self, task: Task, sandbox: Sandbox) -> VerifyResult:
        _, exit_code_reward, links = taskdir_extras(task)
        group = self._services.get(id(sandbox))
        if group is not None:
            group.check_alive()  # a service that died under the agent: its state is gone, no verdict
        on_host = bool((task.metadata.get("taskdir") or {}).get("verify_on_host"))
        run = await run_verifier(task, sandbox, group=group, on_host=on_host)
        if group is not None:
            group.check_alive()
        if (task.metadata.get("taskdir") or {}).get("verify_oom") == "agent":
            blame_oom(task.id, run)
        res = parse_result(task.id, run.stdout, run.stderr, run.returncode, exit_code_reward=exit_code_reward,
                           verdict=run.verdict)
        return _link_subgoals(res, links)

    async def teardown(self, task: Task, sandbox: Sandbox) -> None:
        group = self._services.pop(id(sandbox), None)
        if group is not None:
            await group.stop()

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "path": str(self.path)}
