"""Fault injection around any environment.

Owns: :class:`FaultyEnvironment` — wraps an :class:`~openforge.environment.Environment`, decides
each episode's faults (:func:`~openforge.faults.spec.plan_faults`, seeded per task group), puts a
:class:`~openforge.faults.forwarder.FaultForwarder` in front of every service the environment
exposes into the sandbox during its setup, injects file and command faults after it, and reports
what was injected and what fired (:meth:`FaultyEnvironment.rollout_metadata`, recorded on the
trajectory as ``metadata["faults"]``) — and :func:`with_faults`, which wraps only when there is
something to inject (``env.options.faults``, or a task that declares ``[[faults]]``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.task import Task
from ..environment import Environment, VerifyResult
from ..envs.serve import socket_path
from ..launchers.base import Sandbox
from .forwarder import FaultForwarder
from .inject import Injected, inject, read_evidence, service_injected, shim_dir
from .oracle import ShimOracle
from .spec import CommandFault, FaultConfig, ServiceFault, parse_fault_config, plan_faults, task_faults

__all__ = ["FaultyEnvironment", "with_faults", "without_faults"]


@dataclass
class _Episode:
    faulty: bool
    specs: list[Any]
    injected: list[Injected] = field(default_factory=list)
    forwarders: list[tuple[ServiceFault, FaultForwarder]] = field(default_factory=list)
    path: str | None = None  # the sandbox's PATH with the shim directory first
    oracle: ShimOracle | None = None  # decides and records command faults (None: shims log in HOME)


class FaultyEnvironment(Environment):
    """``inner`` with declarative faults (see the module docstring); everything else is ``inner``'s."""

    def __init__(self, inner: Environment, config: FaultConfig | None = None):
        self.inner, self.config = inner, config
        self.name = inner.name
        self._episodes: dict[int, _Episode] = {}

    def __getattr__(self, name: str) -> Any:  # environment-specific extras (e.g. claw's state_of)
        inner = self.__dict__.get("inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)

    def tasks(self, split: str | None = None) -> list[Task]:
        return self.inner.tasks(split)

    def task(self, task_id: str) -> Task:
        return self.inner.task(task_id)

    def splits(self) -> dict[str, int]:
        return self.inner.splits()

    def hidden_paths(self, task: Task) -> list[str]:
        return self.inner.hidden_paths(task)

    def source_paths(self) -> list[str]:
        return self.inner.source_paths()

    def instruction(self, task: Task, sandbox: Sandbox) -> str:
        return self.inner.instruction(task, sandbox)

    def reference_solution(self, task: Task) -> list[str] | None:
        return self.inner.reference_solution(task)

    def use_run_dir(self, run_dir: Path) -> None:
        self.inner.use_run_dir(run_dir)

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "faults": self.config.model_dump(mode="json") if self.config else "per task"}

    def harness_env(self, task: Task, sandbox: Sandbox) -> dict[str, str]:
        env = dict(self.inner.harness_env(task, sandbox))
        ep = self._episodes.get(id(sandbox))
        if ep is not None and ep.path:
            env["PATH"] = ep.path
        return env

    async def setup(self, task: Task, sandbox: Sandbox) -> None:
        faulty, specs = plan_faults(task, self.config)
        ep = self._episodes[id(sandbox)] = _Episode(faulty, specs)
        service = [s for s in specs if isinstance(s, ServiceFault)]
        if service:
            await self._setup_behind_forwarders(task, sandbox, ep, service[0])
        else:
            await self.inner.setup(task, sandbox)
        if any(isinstance(s, CommandFault) for s in specs):
            ep.oracle = await _oracle_for(sandbox)
        for s in specs:
            if isinstance(s, ServiceFault):  # one service fault per episode: a second one is not armed
                if not ep.forwarders or s is not service[0]:
                    ep.injected.append(Injected(s.kind, "", armed=False))
                continue
            ep.injected.append(await inject(s, task, sandbox, ep.oracle))
        for _, fwd in ep.forwarders:  # the agent's requests fail from now on, not the setup's
            fwd.arm()
        if any(i.kind in ("flaky_command", "missing_tool") and i.armed for i in ep.injected):
            res = await sandbox.exec(["sh", "-c", 'printf %s "$PATH"'], timeout_s=10)
            shims = ep.oracle.bin if ep.oracle is not None else shim_dir(sandbox)
            ep.path = f"{shims}:{res.stdout.strip() or '/usr/local/bin:/usr/bin:/bin'}"

    async def _setup_behind_forwarders(self, task: Task, sandbox: Sandbox, ep: _Episode, fault: ServiceFault) -> None:
        """The inner setup, with each service it exposes put behind a fault forwarder."""
        expose = sandbox.expose

        async def faulty_expose(uds: str | Path, *, port: int | None = None) -> str:
            fwd = await FaultForwarder(fault, uds, socket_path(sandbox, f"fault{len(ep.forwarders)}")).start()
            ep.forwarders.append((fault, fwd))
            return await expose(fwd.uds, port=port)

        sandbox.expose = faulty_expose  # type: ignore[method-assign]
        try:
            await self.inner.setup(task, sandbox)
        finally:
            del sandbox.expose  # back to the class's method

    async def verify(self, task: Task, sandbox: Sandbox) -> VerifyResult:
        ep = self._episodes.get(id(sandbox))
        for inj in ep.injected if ep else []:  # the verifier (on the host) must be able to read every file
            if inj.kind == "permission_denied" and inj.armed:
                with contextlib.suppress(Exception):
                    await sandbox.exec(["chmod", "u+rw", inj.target], timeout_s=10)
        return await self.inner.verify(task, sandbox)

    async def rollout_metadata(self, task: Task, sandbox: Sandbox) -> dict[str, Any]:
        ep = self._episodes.get(id(sandbox))
        if ep is None:
            return {}
        await read_evidence(sandbox, ep.injected, ep.oracle)
        injected = [service_injected(f, _service_name(self.inner, task, sandbox, i), fwd.record())
                    for i, (f, fwd) in enumerate(ep.forwarders)] + ep.injected
        faults = {"faulty": ep.faulty, "seed": str(task.metadata.get("group_seed", "")),
                  "injected": [i.as_dict() for i in injected]}
        if ep.oracle is not None:  # who recorded the command faults, and calls not made by a shim
            faults.update(evidence="driver", refused_calls=ep.oracle.refused)
        return {"faults": faults}

    async def teardown(self, task: Task, sandbox: Sandbox) -> None:
        ep = self._episodes.pop(id(sandbox), None)
        try:
            await self.inner.teardown(task, sandbox)
        finally:
            for _, fwd in ep.forwarders if ep else []:
                await fwd.stop()
            if ep is not None and ep.oracle is not None:
                await ep.oracle.stop()


async def _oracle_for(sandbox: Sandbox) -> ShimOracle | None:
    """A started :class:`ShimOracle` shared into ``sandbox``, or None where it cannot share paths."""
    oracle = await ShimOracle().start()
    if sandbox.share_path(oracle.dir) is None:
        await oracle.stop()
        return None
    sandbox.share_path(oracle.sock)
    return oracle


def _service_name(env: Environment, task: Task, sandbox: Sandbox, i: int) -> str:
    """The env var under which the agent got the i-th exposed service's URL (e.g. ``CLAW_API``)."""
    names = [k for k, v in env.harness_env(task, sandbox).items() if isinstance(v, str) and v.startswith("http")]
    return names[i] if i < len(names) else f"service{i}"


def with_faults(env: Environment, faults: Any = None) -> Environment:
    """``env`` wrapped in a :class:`FaultyEnvironment` when ``faults`` (``env.options.faults``) is given
    or one of its tasks declares ``[[faults]]``; ``env`` itself otherwise."""
    config = parse_fault_config(faults) if faults is not None and faults is not False else None
    if config is None and not any(task_faults(t) for t in env.tasks()):
        return env
    return env if isinstance(env, FaultyEnvironment) else FaultyEnvironment(env, config)


def without_faults(env: Environment) -> Environment:
    """The environment without fault injection (e.g. for a teacher's demonstrations)."""
    return env.inner if isinstance(env, FaultyEnvironment) else env
