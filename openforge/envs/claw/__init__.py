"""The built-in ``claw`` environment: tool-use tasks over files, the shell, git, SQLite, CSV/JSON
data and mock services (mail, calendar, notes, issue tracker served as HTTP + MCP on loopback).

Owns: :class:`ClawEnvironment` and :func:`reference_solution`. Every task ships a reference solution
(shell commands, replayable as a scripted teacher policy through the react harness's shell tool)
that passes its verifier; doing nothing fails it (both checked by the test suite). ``easy`` tasks
(``split="easy"`` in :meth:`ClawEnvironment.tasks`) are the subset a weak model can solve; the
``heldout`` split holds new variants of their skills that no recipe trains on (a before/after set).

``ClawEnvironment(generated={train: N, heldout: M, seed: S, families: [...]})`` (``env.options.generated``
in a recipe) swaps the hand-written tasks for the generated streams (:mod:`.generated`): split ``train``
is the train stream, split ``heldout`` the held-out stream (new instances of the same generators, never
trained on), and each instance is scored with partial credit (:mod:`.credit`: reward in [0, 1] for
GRPO, paid only for progress checks (right values, right side effects) and forfeited by any failed
guard; a success, what held-out tables count, only when every check passed). The hand-written tasks
score 1.0 when every check passed, else 0.0.

The verifier runs after the agent stopped: file checks read the workdir from the host, command
checks run read-only commands in the (now agent-free) sandbox, service checks read the services'
in-driver state. The agent never sees this package (it is hidden from the sandbox).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ...core.errors import EnvironmentError_
from ...core.task import Task
from ...environment import Environment, VerifyResult
from ...launchers.base import Sandbox
from ..serve import socket_path
from .credit import partial_credit
from .generated import GenOptions, streams
from .services import ServiceServer, ServiceState
from .spec import CheckContext, ClawSpec
from .tasks_heldout import TASKS as _HELDOUT
from .tasks_local import TASKS as _LOCAL
from .tasks_services import TASKS as _SERVICES

__all__ = ["ClawEnvironment", "reference_solution"]

SPECS: dict[str, ClawSpec] = {s.id: s for s in (*_LOCAL, *_SERVICES, *_HELDOUT)}
_PKG_DIR = str(Path(__file__).resolve().parent.parent)  # openforge/envs: hidden from agents


def _task(spec: ClawSpec) -> Task:
    return Task(id=spec.id, instruction=spec.instruction, environment="claw", split=spec.split,  # type: ignore[arg-type]
                category=spec.category, timeout_s=180.0, required_tools=spec.tools,
                subgoals=spec.subgoals or tuple(spec.checks),
                metadata={"easy": spec.easy, "services": spec.services is not None, "solution": list(spec.solution)})


def reference_solution(task: Task | str) -> list[str]:
    """Shell commands (run in the workdir, ``$CLAW_API`` set) that solve the task."""
    tid = task if isinstance(task, str) else task.id
    return list(SPECS[tid].solution)


class ClawEnvironment(Environment):
    """Tool/claw tasks: files, shell, git, SQLite, CSV/JSON, mail, calendar, notes, issues."""

    name = "claw"

    def __init__(self, generated: dict | bool | None = None) -> None:
        if generated:
            train, heldout = streams(GenOptions.parse(generated))
            self._specs = {g.spec.id: g.spec for g in (*train, *heldout)}
        else:
            self._specs = SPECS
        self._tasks = [_task(s) for s in self._specs.values()]
        self._servers: dict[int, tuple[ServiceServer, ServiceState]] = {}

    def tasks(self, split: str | None = None) -> list[Task]:
        if split == "easy":
            return [t for t in self._tasks if t.metadata["easy"]]
        return [t for t in self._tasks if split is None or t.split == split]

    def hidden_paths(self, task: Task) -> list[str]:
        return [_PKG_DIR]

    def reference_solution(self, task: Task) -> list[str]:
        return list(self._spec(task).solution)

    def _spec(self, task: Task) -> ClawSpec:
        if task.id not in self._specs:
            raise EnvironmentError_(f"claw has no task {task.id!r}")
        return self._specs[task.id]

    async def setup(self, task: Task, sandbox: Sandbox) -> None:
        spec = self._spec(task)
        for rel, content in spec.files.items():
            await sandbox.write_file(sandbox.workdir / rel, content.encode())
        if spec.services is not None:
            st = ServiceState(spec.services)
            uds = socket_path(sandbox, "svc")
            server = await ServiceServer(st, uds).start()
            self._servers[id(sandbox)] = (server, st)
            sandbox.claw_api = await sandbox.expose(uds)  # type: ignore[attr-defined]
        for cmd in spec.setup:
            res = await sandbox.exec(["sh", "-c", cmd], timeout_s=task.setup_timeout_s)
            if res.returncode != 0:
                raise EnvironmentError_(f"claw setup of {task.id} failed: `{cmd[:120]}` → {res.returncode}: "
                                        f"{(res.stderr or res.stdout)[-500:]}")

    def harness_env(self, task: Task, sandbox: Sandbox) -> dict[str, str]:
        url = getattr(sandbox, "claw_api", None)
        return {"CLAW_API": url} if url else {}

    async def verify(self, task: Task, sandbox: Sandbox) -> VerifyResult:
        spec = self._spec(task)
        workdir = await sandbox.pull_workdir()
        entry = self._servers.get(id(sandbox))
        ctx = CheckContext(workdir=workdir, sandbox=sandbox, state=entry[1] if entry else None)
        names = list(spec.checks)
        results = dict(zip(names, await asyncio.gather(*(spec.checks[n](ctx) for n in names))))
        if spec.partial:
            return partial_credit(results, {n: c.kind for n, c in spec.checks.items()})
        return VerifyResult.from_checks(results)

    async def teardown(self, task: Task, sandbox: Sandbox) -> None:
        entry = self._servers.pop(id(sandbox), None)
        if entry is not None:
            await entry[0].stop()

    def state_of(self, sandbox: Sandbox) -> ServiceState | None:
        """The services' state of a live rollout (for tests and debugging)."""
        entry = self._servers.get(id(sandbox))
        return entry[1] if entry else None
