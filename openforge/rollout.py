"""Running rollouts: :func:`run_rollout` is the one place that sequences a rollout, and
:func:`run_groups` runs task × group-size rollouts for GRPO.

Owns the sequence ``proxy.create_rollout → launcher.provision → environment.setup → harness.execute
→ environment.verify → proxy.finish_rollout → teardown + sandbox close (always)`` and the status
taxonomy of the outcome:

=================  ===============================================================  ==========
status             real cause                                                       trained?
=================  ===============================================================  ==========
success            verifier reward ≥ ``success_threshold``                          yes
policy_failure     the agent ended normally, verifier reward below it                yes (as is)
timeout            the wall-clock budget ran out; the harness was killed             yes (0)
harness_error      the harness crashed, was not installed or misconfigured          no
env_error          environment setup or the verifier failed (or raised)             no
infra_error        sandbox could not be provisioned / was lost, a model call failed  no (retried)
cancelled          Ctrl-C / the caller cancelled                                    no
=================  ===============================================================  ==========

A failed rollout is data: :func:`run_rollout` returns a :class:`Trajectory` whose ``status`` and
``error`` say what happened, and only re-raises cancellation (after recording it).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from .environment import Environment, VerifyResult
from .harness import Harness, HarnessResult, RolloutContext, tail
from .harness_mix import PerGroupHarness
from .launchers.base import Launcher, Sandbox, SandboxSpec
from .outcome import OutcomeFacts, classify_outcome
from .task import Task
from .trajectory import Trajectory, TrajectoryGroup
from .types import RolloutStatus

__all__ = ["GroupResults", "run_groups", "run_rollout"]

S = RolloutStatus


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


async def run_rollout(
    *,
    harness: Harness,
    environment: Environment,
    task: Task,
    launcher: Launcher,
    proxy: Any,
    store: Any = None,
    budget_s: float | None = None,
    model: str = "openforge-policy",
    metadata: dict[str, Any] | None = None,
    success_threshold: float = 1.0,
    provision_timeout_s: float = 300.0,
) -> Trajectory:
    """Run one rollout of ``task`` with ``harness`` and return its trajectory (never raises for a
    failed rollout; re-raises :class:`asyncio.CancelledError` after recording ``cancelled``)."""
    budget = float(budget_s if budget_s is not None else task.timeout_s)
    # The task's analysis facts travel with the trajectory, so a run can be analysed without its environment.
    meta = {"category": task.category, "split": task.split, "required_tools": list(task.required_tools),
            "subgoals": list(task.subgoals), **(metadata or {})}
    timings: dict[str, float] = {}
    failure: RolloutStatus | None = None  # a step before the verdict failed (launcher, setup, verifier, sandbox)
    error: str | None = None
    hres: HarnessResult | None = None
    verdict: VerifyResult | None = None
    sandbox: Sandbox | None = None
    cancelled = False
    try:
        handle = await _maybe_await(proxy.create_rollout(task.id, harness=harness.name, metadata=meta))
    except Exception as e:  # the proxy itself is broken: nothing was recorded, make a record here
        traj = Trajectory(rollout_id=f"failed-{uuid.uuid4().hex[:12]}", task_id=task.id, harness=harness.name,
                          environment=environment.name, status=S.INFRA_ERROR, reward=0.0,
                          error=f"proxy could not open the rollout: {_err(e)}", metadata=meta)
        await _shielded(_store(store, traj))
        return traj
    rid = handle.rollout_id
    t_start = time.monotonic()
    try:
        spec = SandboxSpec(
            rollout_id=rid, task=task, proxy_url=str(getattr(proxy, "url", "") or ""), api_key=handle.api_key,
            proxy_uds=getattr(proxy, "agent_uds", None), hidden_paths=environment.hidden_paths(task),
            ro_paths=list(harness.ro_paths()),
        )
        t = time.monotonic()
        try:
            sandbox = await asyncio.wait_for(launcher.provision(spec), provision_timeout_s)
        except asyncio.TimeoutError:
            failure, error = S.INFRA_ERROR, f"{launcher.name} launcher did not provide a sandbox within {provision_timeout_s:.0f}s"
        except Exception as e:
            failure, error = _launch_status(e), f"{launcher.name} launcher could not provision a sandbox: {_err(e)}"
        timings["provision_s"] = time.monotonic() - t
        if sandbox is not None:
            meta["isolation"] = sandbox.isolation
            t = time.monotonic()
            try:
                await asyncio.wait_for(environment.setup(task, sandbox), task.setup_timeout_s)
            except asyncio.TimeoutError:
                failure, error = S.ENV_ERROR, f"{environment.name} setup of {task.id} ran over {task.setup_timeout_s:.0f}s"
            except Exception as e:
                failure, error = _launch_status(e, S.ENV_ERROR), f"{environment.name} setup of {task.id} failed: {_err(e)}"
            timings["setup_s"] = time.monotonic() - t
        if failure is None and sandbox is not None:
            hres = await _run_harness(harness, environment, task, sandbox, rid, handle.api_key, model, budget, meta, timings)
            lost = getattr(sandbox, "lost_reason", None)  # a pod evicted / node lost / deadline under the harness
            if lost:
                failure, error = getattr(sandbox, "lost_status", None) or S.INFRA_ERROR, lost
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
                         success_threshold=success_threshold, budget_s=budget, cancelled=cancelled)
    extra_metrics = {k: round(v, 4) for k, v in timings.items()}
    extra_meta = {**meta, "budget_s": budget, "launcher": launcher.name}
    traj, stored = await _shielded(_finish(proxy, rid, facts, rewards, environment.name, extra_meta, extra_metrics))
    if traj is None:
        traj = Trajectory(rollout_id=rid, task_id=task.id, harness=harness.name, environment=environment.name,
                          status=S.INFRA_ERROR, error=f"proxy could not finish the rollout ({error or 'no error'})")
    if not stored:
        traj = traj.model_copy(update={
            "harness": traj.harness or harness.name, "environment": environment.name,
            "metrics": {**traj.metrics, **extra_metrics}, "metadata": {**traj.metadata, **extra_meta},
        })
    if "faults" in traj.metadata:  # which injected faults the agent met, and whether it recovered
        from .faults.record import record_faults

        traj = record_faults(traj)
        stored = False  # known only from the finished trajectory: stored again with them
    sink = store if store is not None else getattr(proxy, "store", None)
    if not stored or sink is not getattr(proxy, "store", None):
        await _shielded(_store(sink, traj))
    if cancelled:
        raise asyncio.CancelledError
    return traj


def _launch_status(e: BaseException, default: RolloutStatus = S.INFRA_ERROR) -> RolloutStatus:
    """Errors may carry the status they imply (a pod's ImagePullBackOff → env_error)."""
    st = getattr(e, "status", None)
    return st if isinstance(st, RolloutStatus) else default


async def _cleanup(environment: Environment, task: Task, sandbox: Sandbox, meta: dict[str, Any]) -> None:
    try:
        meta.update(await asyncio.wait_for(environment.rollout_metadata(task, sandbox), 30))
    except Exception as e:
        meta["rollout_metadata_error"] = _err(e)
    try:
        await asyncio.wait_for(environment.teardown(task, sandbox), 30)
    except Exception as e:
        meta["teardown_error"] = _err(e)
    try:
        await sandbox.close()
    except Exception as e:
        meta["sandbox_close_error"] = _err(e)


async def _run_harness(harness: Harness, environment: Environment, task: Task, sandbox: Sandbox, rid: str,
                       api_key: str, model: str, budget: float, meta: dict[str, Any],
                       timings: dict[str, float]) -> HarnessResult:
    base = sandbox.proxy_url.rstrip("/") + f"/r/{rid}"
    shown = environment.instruction(task, sandbox)
    ctx = RolloutContext(rollout_id=rid, task=task if shown == task.instruction else
                         task.model_copy(update={"instruction": shown}), sandbox=sandbox, api_key=api_key,
                         openai_base_url=base + "/v1", anthropic_base_url=base, model=model,
                         budget_s=budget, env=environment.harness_env(task, sandbox))
    t = time.monotonic()
    hres = await harness.execute(ctx)
    timings["harness_s"] = time.monotonic() - t
    meta["harness_exit_code"] = hres.exit_code
    if hres.final_text is not None:
        meta["final_text"] = hres.final_text[:2000]
    if hres.status is not None and hres.stderr and hres.status != S.TIMEOUT:
        meta["harness_stderr"] = tail(hres.stderr, 2000)
    return hres


async def _verify(environment: Environment, task: Task, sandbox: Sandbox, meta: dict[str, Any],
                  timings: dict[str, float]) -> tuple[VerifyResult | None, RolloutStatus | None, str | None]:
    """The verdict, or the failure that stands for it (``env_error`` for a broken verifier)."""
    t = time.monotonic()
    try:
        verdict = await asyncio.wait_for(environment.verify(task, sandbox), task.verify_timeout_s)
        verdict.check_finite()  # NaN/Infinity is a broken verifier, never a score (nor "success")
        return verdict, None, None
    except asyncio.TimeoutError:
        return None, S.ENV_ERROR, f"verifier of {task.id} ran over {task.verify_timeout_s:.0f}s"
    except ValueError as e:  # pydantic's ValidationError too: a verdict that is not a valid score
        return None, S.ENV_ERROR, f"verifier of {task.id} gave an invalid result: {_err(e)}"
    except Exception as e:
        meta["verifier_traceback"] = tail("".join(traceback.format_exception(type(e), e, e.__traceback__)), 2000)
        return None, _launch_status(e, S.ENV_ERROR), f"verifier of {task.id} raised {_err(e)}"
    finally:
        timings["verify_s"] = time.monotonic() - t


async def _finish(proxy: Any, rid: str, facts: OutcomeFacts, rewards: dict[str, float], env_name: str,
                  metadata: dict[str, Any], metrics: dict[str, Any]) -> tuple[Trajectory | None, bool]:
    """Finish through the proxy, which applies the outcome rule with the calls it recorded. An
    in-process proxy's ``afinish_rollout`` waits for calls still in flight (a 200 is never missing
    from the trajectory), takes the facts and stores the trajectory with ``metadata`` / ``metrics``
    added (one write); a remote one gets the rule's answer without the calls, and applies the
    call-based rows itself. Returns the trajectory (None if the proxy failed) and whether it already
    holds ``metadata`` / ``metrics`` (and so is stored as final by the proxy's store)."""
    try:
        finish = getattr(proxy, "afinish_rollout", None) or proxy.finish_rollout
        params = inspect.signature(finish).parameters
        if "facts" in params:
            more = {"metadata": metadata, "metrics": metrics} if "metadata" in params else {}
            traj = await _maybe_await(finish(rid, facts=facts, rewards=rewards, environment=env_name, **more))
            return traj, bool(more)
        pre = classify_outcome(facts)
        return await _maybe_await(finish(rid, reward=pre.reward, status=pre.status, rewards=rewards,
                                         error=pre.error, environment=env_name)), False
    except Exception:
        return None, False


async def _maybe_await(value: Any) -> Any:
    """The proxy's control calls may be plain or coroutine functions (in-process vs. remote)."""
    return await value if inspect.isawaitable(value) else value


async def _shielded(coro: Any) -> Any:
    """Run cleanup to completion even if the surrounding task is being cancelled."""
    task = asyncio.ensure_future(coro)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        return await task


async def _store(store: Any, traj: Trajectory) -> None:
    """Keep ``traj`` in ``store`` (if any) without blocking the event loop; a store error never fails
    the rollout."""
    if store is None:
        return
    with contextlib.suppress(Exception):
        aput = getattr(store, "aput_trajectory", None)
        await (aput(traj) if aput is not None else asyncio.to_thread(store.put_trajectory, traj))


# -- groups ------------------------------------------------------------------------------------


class GroupResults(list):  # list[TrajectoryGroup] with the bookkeeping of what was discarded
    """The groups handed to the trainer, plus ``discarded`` (every non-trainable attempt, with its
    reason) and ``dropped`` (groups that ended with fewer than ``min_group`` valid members)."""

    def __init__(self, groups: Sequence[TrajectoryGroup] = ()):
        super().__init__(groups)
        self.discarded: list[Trajectory] = []
        self.dropped: list[dict[str, Any]] = []
        self.attempts = 0

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for g in self:
            for t in g.trajectories:
                out[t.status.value] = out.get(t.status.value, 0) + 1
        for t in self.discarded:
            out[t.status.value] = out.get(t.status.value, 0) + 1
        return out


async def run_groups(
    tasks: Sequence[Task],
    group_size: int,
    concurrency: int,
    *,
    harness: Harness | Callable[[], Harness] | PerGroupHarness,
    environment: Environment,
    launcher: Launcher,
    proxy: Any,
    store: Any = None,
    max_retries: int = 2,
    retry_on: Sequence[RolloutStatus] = (S.INFRA_ERROR,),
    min_group: int = 2,
    budget_s: float | None = None,
    progress: bool = True,
    seed: int | None = None,
    **rollout_kw: Any,
) -> GroupResults:
    """Run ``group_size`` rollouts of each task, at most ``concurrency`` at a time.

    A member whose status is in ``retry_on`` is re-run (a refill) up to ``max_retries`` times; each
    failed attempt is kept in ``discarded`` with its reason (and stored). Non-trainable members
    (harness/env/infra errors, cancelled) never enter a group; policy failures and timeouts do. A
    group with fewer than ``min_group`` trainable members is dropped, never handed over as a group
    of one (GRPO would see no variance), and recorded in ``dropped``.

    Every group gets a seed (``task.metadata["group_seed"]``, the same for all its members and
    retries; drawn from ``seed`` when given, else fresh), which seeds what the environment varies
    per group, such as injected faults (:mod:`openforge.faults`)."""
    if group_size < 1 or concurrency < 1:
        from .errors import ConfigError

        raise ConfigError(f"group_size and concurrency must be ≥ 1 (got {group_size}, {concurrency})")
    sem = asyncio.Semaphore(concurrency)
    results = GroupResults()
    sink = store if store is not None else getattr(proxy, "store", None)

    async def discard(traj: Trajectory, reason: str) -> None:
        """Keep a non-trainable attempt with its reason, in the results and in the store."""
        t = traj.model_copy(update={"metadata": {**traj.metadata, "discard_reason": reason}})
        results.discarded.append(t)
        await _store(sink, t)
    members: dict[int, list[Trajectory | None]] = {i: [None] * group_size for i in range(len(tasks))}
    rng = random.Random(seed)
    tasks = [t.model_copy(update={"metadata": {**t.metadata, "group_seed": rng.getrandbits(48)}}) for t in tasks]
    bar = _Progress(len(tasks) * group_size, enabled=progress)

    async def member(ti: int, slot: int) -> None:
        task = tasks[ti]
        for attempt in range(max_retries + 1):
            async with sem:
                h = (harness.for_group(ti) if isinstance(harness, PerGroupHarness) else
                     harness() if callable(harness) and not isinstance(harness, Harness) else harness)
                traj = await run_rollout(harness=h, environment=environment, task=task, launcher=launcher,
                                         proxy=proxy, store=store, budget_s=budget_s,
                                         metadata={"group": ti, "slot": slot, "attempt": attempt}, **rollout_kw)
            results.attempts += 1
            if traj.status in retry_on and attempt < max_retries:
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
    for ti, task in enumerate(tasks):
        valid = [t for t in members[ti] if t is not None]
        if len(valid) < min(min_group, group_size):
            results.dropped.append({"task_id": task.id, "valid": len(valid), "group_size": group_size,
                                    "reason": f"only {len(valid)} of {group_size} rollouts were trainable "
                                              f"(need ≥ {min(min_group, group_size)})",
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
