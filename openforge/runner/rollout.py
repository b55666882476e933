"""Running rollouts: :func:`run_rollout` is the one place that sequences a rollout, and
:func:`run_groups` runs task × group-size rollouts for GRPO.

Owns the sequence ``proxy.create_rollout → launcher.provision → environment.setup → harness.execute
→ environment.verify → proxy.finish_rollout → teardown + sandbox close (always)`` and the status
taxonomy of the outcome:

=================  ===============================================================  ==========
status             real cause                                                       trained?
=================  ===============================================================  ==========
success            verifier reward ≥ ``success_threshold``                          yes
policy_failure     the agent ended normally, verifier reward below it (or the         yes (as is)
                   verifier read a file the agent did not write:
                   ``SandboxFileNotFound``, or one it left that the
                   driver will not read: ``SandboxFileRefused``, or found
                   the agent's output unusable: ``AgentOutputError``;
                   reward 0)
timeout            the wall-clock budget ran out; the harness was killed             yes (0)
harness_error      the harness crashed, was not installed or misconfigured          no
env_error          environment setup or the verifier failed (or raised)             no
infra_error        sandbox could not be provisioned / was lost, a model call failed  no (retried)
cancelled          Ctrl-C / the caller cancelled                                    no
=================  ===============================================================  ==========

The steps themselves, and :class:`RolloutRequest`, are :mod:`openforge.runner.rollout_steps`'s; this
module sequences them and runs groups (:class:`GroupRequest`, :class:`GroupResults`).

A failed rollout is data: :func:`run_rollout` returns a :class:`Trajectory` whose ``status`` and
``error`` say what happened, and only re-raises cancellation (after recording it).
"""

from __future__ import annotations

import asyncio
import random
import time
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..core.outcome import OutcomeFacts
from ..core.task import Task
from ..core.trajectory import Trajectory, TrajectoryGroup
from ..core.types import RolloutStatus
from ..environment import Environment, VerifyResult
from ..harness import Harness, HarnessResult, tail
from ..launchers.base import Launcher, Sandbox
from .harness_mix import PerGroupHarness
from .rollout_steps import (
    RolloutRequest,
    _cleanup,
    _err,
    _finish,
    _harness_drift,
    _launch_status,
    _no_space,
    _provision_sandbox,
    _run_harness,
    _shielded,
    _store,
    _verify,
)
from .seams import RolloutProxy, TrajectorySink

__all__ = ["GroupRequest", "GroupResults", "RolloutRequest", "run_groups", "run_rollout"]

S = RolloutStatus
T = TypeVar("T")


async def run_rollout(request: RolloutRequest | None = None, /, **fields: Any) -> Trajectory:
    """Run one rollout and return its trajectory (never raises for a failed rollout; re-raises
    :class:`asyncio.CancelledError` after recording ``cancelled``).

    Takes a :class:`RolloutRequest`, or its fields as keywords (``run_rollout(task=..., harness=...)``)."""
    req = request if request is not None else RolloutRequest(**fields)
    if request is not None and fields:
        raise TypeError("run_rollout takes a RolloutRequest or its fields as keywords, not both")
    return await _Rollout(req).run()


class _Rollout:
    """The sequence of one rollout, step by step; :meth:`run` is the only entry."""

    def __init__(self, req: RolloutRequest):
        self.req = req
        task = req.task
        self.budget = float(req.budget_s if req.budget_s is not None else task.timeout_s)
        # The task's analysis facts travel with the trajectory, so a run can be analysed without its environment.
        self.meta: dict[str, Any] = {"category": task.category, "split": task.split,
                                     "required_tools": list(task.required_tools), "subgoals": list(task.subgoals),
                                     **req.metadata}
        self.timings: dict[str, float] = {}

    async def run(self) -> Trajectory:
        req, task, meta, timings = self.req, self.req.task, self.meta, self.timings
        harness, environment, launcher, proxy = req.harness, req.environment, req.launcher, req.proxy
        failure: RolloutStatus | None = None  # a step before the verdict failed (launcher, setup, verifier, sandbox)
        error: str | None = None
        hres: HarnessResult | None = None
        verdict: VerifyResult | None = None
        sandbox: Sandbox | None = None
        cancelled = False
        try:
            handle = proxy.create_rollout(task.id, harness.name, meta, rollout_id=req.rollout_id)
        except Exception as e:  # the proxy itself is broken: nothing was recorded, make a record here
            traj = Trajectory(rollout_id=f"failed-{uuid.uuid4().hex[:12]}", task_id=task.id, harness=harness.name,
                              environment=environment.name, status=S.INFRA_ERROR, reward=0.0,
                              error=f"proxy could not open the rollout: {_err(e)}", metadata=meta)
            await _shielded(_store(req.store, traj))
            return traj
        rid = handle.rollout_id
        t_start = time.monotonic()
        try:
            sandbox, failure, error = await _provision_sandbox(req, rid, handle.api_key, timings)
            if sandbox is not None:
                meta["isolation"] = sandbox.isolation
                t = time.monotonic()
                try:
                    await asyncio.wait_for(environment.setup(task, sandbox), task.setup_timeout_s)
                except asyncio.TimeoutError:
                    failure, error = S.ENV_ERROR, f"{environment.name} setup of {task.id} ran over {task.setup_timeout_s:.0f}s"
                except Exception as e:  # a full disk before the agent ran is the machine's, not the task's
                    status = S.INFRA_ERROR if _no_space(e) else _launch_status(e, S.ENV_ERROR)
                    if status.trainable:  # a pod evicted for its storage, or out of time, before the agent ran
                        status = S.ENV_ERROR
                    failure, error = status, f"{environment.name} setup of {task.id} failed: {_err(e)}"
                timings["setup_s"] = time.monotonic() - t
            if failure is None and sandbox is not None:
                hres = await _run_harness(harness, environment, task, sandbox, rid, handle.api_key, req.model,
                                          self.budget, meta, timings)
                if sandbox.lost_reason:  # a pod evicted / node lost / deadline under the harness
                    failure, error = sandbox.lost_status or S.INFRA_ERROR, sandbox.lost_reason
            if failure is None and sandbox is not None and hres is not None and hres.ok:
                verdict, failure, error = await _verify(environment, task, sandbox, meta, timings)
        except asyncio.CancelledError:
            cancelled = True
            error = "the rollout was cancelled (Ctrl-C or the caller)"
        except Exception as e:  # a bug in a harness/environment/launcher we did not anticipate
            failure, error = S.INFRA_ERROR, f"unexpected {_err(e)}"
            meta["traceback"] = tail(traceback.format_exc(), 3000)
        finally:
            if sandbox is not None:
                await _shielded(_cleanup(environment, task, sandbox, meta))
        timings["total_s"] = time.monotonic() - t_start
        rewards = verdict.rewards if verdict is not None else {}
        if verdict is not None and verdict.detail:
            meta["verify_detail"] = verdict.detail[:2000]
        if verdict is not None and verdict.metadata:
            meta["verify_metadata"] = verdict.metadata
        facts = OutcomeFacts(failure=failure, error=error, harness_status=hres.status if hres else None,
                             harness_error=hres.error if hres else None, reward=verdict.reward if verdict else None,
                             success_threshold=req.success_threshold, budget_s=self.budget, cancelled=cancelled,
                             model_wait_share=req.model_wait_share, stall_s=req.stall_s)
        extra_metrics = {k: round(v, 4) for k, v in timings.items()}
        extra_meta = {**meta, "budget_s": self.budget, "launcher": launcher.name}
        traj = await _shielded(_finish(proxy, rid, facts, rewards, environment.name, extra_meta, extra_metrics))
        stored = traj is not None  # the proxy stored it, with extra_meta / extra_metrics, in its own store
        if traj is None:
            traj = Trajectory(rollout_id=rid, task_id=task.id, harness=harness.name, environment=environment.name,
                              status=S.INFRA_ERROR, error=f"proxy could not finish the rollout ({error or 'no error'})",
                              metrics=extra_metrics, metadata=extra_meta)
        drift = _harness_drift(harness, traj)
        if drift is not None:  # the harness sent another system prompt / tools than its notes say
            traj = traj.model_copy(update={"harness_drift": drift})
            stored = False
        if "faults" in traj.metadata:  # which injected faults the agent met, and whether it recovered
            from ..faults.record import record_faults

            traj = record_faults(traj)
            stored = False  # known only from the finished trajectory: stored again with them
        if not stored or req.store is not proxy.store:
            await _shielded(_store(req.store, traj))
        if cancelled:
            raise asyncio.CancelledError
        return traj


# -- groups ------------------------------------------------------------------------------------


class GroupResults(list):  # list[TrajectoryGroup] with the bookkeeping of what was discarded
    """The groups handed to the trainer, plus ``discarded`` (every non-trainable attempt, with its
    reason) and ``dropped`` (groups that ended with fewer than ``min_group`` valid members)."""

    def __init__(self, groups: Sequence[TrajectoryGroup] = ()):
        super().__init__(groups)
        self.discarded: list[Trajectory] = []
        self.dropped: list[dict[str, Any]] = []
        self.attempts = 0

    def extend_with(self, more: GroupResults) -> GroupResults:
        """Append another round's groups and bookkeeping (a dynamic-sampling resample round)."""
        self.extend(more)
        self.discarded.extend(more.discarded)
        self.dropped.extend(more.dropped)
        self.attempts += more.attempts
        return self

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for g in self:
            for t in g.trajectories:
                out[t.status.value] = out.get(t.status.value, 0) + 1
        for t in self.discarded:
            out[t.status.value] = out.get(t.status.value, 0) + 1
        return out


@dataclass(frozen=True)
class GroupRequest:
    """``group_size`` rollouts of each of ``tasks``, at most ``concurrency`` at a time. ``harness`` is a
    factory (a fresh harness per rollout), one instance, or a :class:`PerGroupHarness` (group ``i``
    runs ``harness.for_group(i)``: a multi-harness step); the rest is what :class:`RolloutRequest`
    takes, plus the retry and group rules (see :func:`run_groups`)."""

    tasks: Sequence[Task]
    group_size: int
    concurrency: int
    harness: Harness | Callable[[], Harness] | PerGroupHarness
    environment: Environment
    launcher: Launcher
    proxy: RolloutProxy
    store: TrajectorySink | None = None
    max_retries: int = 2
    retry_on: Sequence[RolloutStatus] = (S.INFRA_ERROR,)
    min_group: int = 2
    budget_s: float | None = None
    progress: bool = True
    model: str = "openforge-policy"
    success_threshold: float = 1.0
    provision_timeout_s: float = 300.0
    seed: int | None = None  # seeds each group's group_seed (e.g. its injected faults); None: fresh

    def make_harness(self, group: int) -> Harness:
        if isinstance(self.harness, Harness):
            return self.harness
        if isinstance(self.harness, PerGroupHarness):
            return self.harness.for_group(group)
        return self.harness()

    def rollout(self, task: Task, group: int, metadata: Mapping[str, Any]) -> RolloutRequest:
        """The request of one member of group ``group``."""
        return RolloutRequest(task=task, harness=self.make_harness(group), environment=self.environment,
                              launcher=self.launcher, proxy=self.proxy, store=self.store, budget_s=self.budget_s,
                              model=self.model, metadata=metadata, success_threshold=self.success_threshold,
                              provision_timeout_s=self.provision_timeout_s)


async def run_groups(request: GroupRequest | Sequence[Task], group_size: int | None = None,
                     concurrency: int | None = None, /, **fields: Any) -> GroupResults:
    """Run ``group_size`` rollouts of each task, at most ``concurrency`` at a time.

    Takes a :class:`GroupRequest`, or ``(tasks, group_size, concurrency, **its other fields)``.

    A member whose status is in ``retry_on`` is re-run (a refill) up to ``max_retries`` times; each
    failed attempt is kept in ``discarded`` with its reason (and stored). Non-trainable members
    (harness/env/infra errors, cancelled) never enter a group; policy failures and timeouts do. A
    group with fewer than ``min_group`` trainable members is dropped, never handed over as a group
    of one (GRPO would see no variance), and recorded in ``dropped``.

    Every group gets a seed (``task.metadata["group_seed"]``, the same for all its members and
    retries; drawn from ``seed`` when given, else fresh), which seeds what the environment varies
    per group, such as injected faults (:mod:`openforge.faults`)."""
    if isinstance(request, GroupRequest):
        if group_size is not None or concurrency is not None or fields:
            raise TypeError("run_groups takes a GroupRequest or (tasks, group_size, concurrency, **fields), not both")
        req = request
    else:
        if group_size is None or concurrency is None:
            raise TypeError("run_groups(tasks, group_size, concurrency, ...) needs group_size and concurrency")
        req = GroupRequest(tasks=list(request), group_size=group_size, concurrency=concurrency, **fields)
    return await _run_groups(req)


async def _run_groups(req: GroupRequest) -> GroupResults:
    rng = random.Random(req.seed)
    tasks = [t.model_copy(update={"metadata": {**t.metadata, "group_seed": rng.getrandbits(48)}}) for t in req.tasks]
    group_size = req.group_size
    if group_size < 1 or req.concurrency < 1:
        from ..core.errors import ConfigError

        raise ConfigError(f"group_size and concurrency must be ≥ 1 (got {group_size}, {req.concurrency})")
    sem = asyncio.Semaphore(req.concurrency)
    results = GroupResults()

    async def discard(traj: Trajectory, reason: str) -> None:
        """Keep a non-trainable attempt with its reason, in the results and in the store."""
        t = traj.model_copy(update={"metadata": {**traj.metadata, "discard_reason": reason}})
        results.discarded.append(t)
        await _store(req.store, t)
    members: dict[int, list[Trajectory | None]] = {i: [None] * group_size for i in range(len(tasks))}
    bar = _Progress(len(tasks) * group_size, enabled=req.progress)

    async def member(ti: int, slot: int) -> None:
        task = tasks[ti]
        for attempt in range(req.max_retries + 1):
            async with sem:
                traj = await run_rollout(req.rollout(task, ti, {"group": ti, "slot": slot, "attempt": attempt}))
            results.attempts += 1
            if traj.status in req.retry_on and attempt < req.max_retries:
                await discard(traj, f"{traj.status.value}, retried: {traj.error}")
                bar.note(traj)
                continue
            if not traj.trainable:
                await discard(traj, f"{traj.status.value}: {traj.error}")
            else:
                members[ti][slot] = traj
            bar.advance(traj)
            return

    with bar:
        await asyncio.gather(*(member(ti, s) for ti in range(len(tasks)) for s in range(group_size)))
    need = min(req.min_group, group_size)
    for ti, task in enumerate(tasks):
        valid = [t for t in members[ti] if t is not None]
        if len(valid) < need:
            results.dropped.append({"task_id": task.id, "valid": len(valid), "group_size": group_size,
                                    "reason": f"only {len(valid)} of {group_size} rollouts were trainable "
                                              f"(need ≥ {need})",
                                    "rollout_ids": [t.rollout_id for t in valid]})
            for t in valid:
                await discard(t, f"group dropped: {results.dropped[-1]['reason']}")
            continue
        results.append(TrajectoryGroup(task_id=task.id, trajectories=valid))
    return results


class _Progress:
    """A rich progress bar with live status counts (silent when disabled)."""

    def __init__(self, total: int, *, enabled: bool):
        self.enabled, self.total = enabled, total
        self.counts: dict[str, int] = {}
        self._p: Any = None

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._p = Progress(TextColumn("rollouts"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                               TextColumn("{task.fields[counts]}"), transient=False)
            self._p.__enter__()
            self._id = self._p.add_task("rollouts", total=self.total, counts="")
        return self

    def note(self, traj: Trajectory) -> None:
        key = f"retried-{traj.status.value}"
        self.counts[key] = self.counts.get(key, 0) + 1
        self._refresh(0)

    def advance(self, traj: Trajectory) -> None:
        self.counts[traj.status.value] = self.counts.get(traj.status.value, 0) + 1
        self._refresh(1)

    def _refresh(self, n: int) -> None:
        if self._p is not None:
            self._p.update(self._id, advance=n, counts=" ".join(f"{k}={v}" for k, v in sorted(self.counts.items())))

    def __exit__(self, *exc: object) -> None:
        if self._p is not None:
            self._p.__exit__(None, None, None)
