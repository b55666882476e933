"""The steps of one rollout's sequence and what a rollout is given: :class:`RolloutRequest`.

Owns: :class:`RolloutRequest` (task, harness, environment, launcher, proxy, store, limits) and the
steps :mod:`openforge.runner.rollout` sequences, each mapping its failure to the status of the outcome
taxonomy there: provisioning the sandbox (``_provision_sandbox``: what the agent may see, the launcher's
failure as ``infra_error`` or the status it carries), running the harness (``_run_harness``), verifying
(``_verify``: a broken verifier is ``env_error``, a file the agent did not write or left unreadable is its
``policy_failure``; ``_not_a_verdict`` says what a ``verify`` returning a non-verdict should return),
the environment's clean-up and the sandbox's close (``_cleanup``), finishing through the proxy
(``_finish``), storing (``_store``), and the harness-drift check (``_harness_drift``). The steps are
private to the run layer: :func:`~openforge.runner.rollout.run_rollout` is the one entry.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import time
import traceback
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..core.errors import AgentOutputError, ConfigError, SandboxFileNotFound, SandboxFileRefused
from ..core.outcome import DEFAULT_MODEL_WAIT_SHARE, DEFAULT_STALL_S, OutcomeFacts
from ..core.task import Task
from ..core.trajectory import Trajectory
from ..core.types import RolloutStatus
from ..environment import Environment, VerifyResult, hidden_from_agent
from ..harness import Harness, HarnessResult, RolloutContext, tail
from ..launchers.base import Launcher, Sandbox, SandboxFailure, SandboxSpec
from .seams import RolloutProxy, TrajectorySink

__all__ = ["RolloutRequest"]

S = RolloutStatus
T = TypeVar("T")


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


@dataclass(frozen=True)
class RolloutRequest:
    """One rollout: what runs (``task`` with ``harness``), where (``environment``'s services and a
    sandbox from ``launcher``), through what (``proxy``; finished trajectories go to ``store``) and
    within which limits. ``rollout_id`` names the proxy's rollout (a veRL session's id); default: fresh."""

    task: Task
    harness: Harness
    environment: Environment
    launcher: Launcher
    proxy: RolloutProxy
    store: TrajectorySink | None = None
    budget_s: float | None = None  # default: the task's timeout_s
    model: str = "openforge-policy"
    metadata: Mapping[str, Any] = field(default_factory=dict)
    success_threshold: float = 1.0
    provision_timeout_s: float = 300.0
    rollout_id: str | None = None
    #: A timeout is the back-end's (``infra_error``) when waiting for first tokens took this share of the
    #: budget, or a call went ``stall_s`` without a new token (:mod:`openforge.core.outcome`, rule 5).
    model_wait_share: float = DEFAULT_MODEL_WAIT_SHARE
    stall_s: float = DEFAULT_STALL_S


def _harness_drift(harness: Harness, traj: Trajectory) -> dict[str, Any] | None:
    """The rollout's ``harness_drift`` against the harness's notes; a notes problem never fails it."""
    from ..harnesses.notes import check_drift

    try:
        return check_drift(harness, traj)
    except Exception as e:  # a broken notes folder is logged, not a failed rollout
        logging.getLogger(__name__).warning("harness drift check of %s failed: %s", harness.name, _err(e))
        return None


async def _provision_sandbox(req: RolloutRequest, rid: str, api_key: str,
                             timings: dict[str, float]) -> tuple[Sandbox | None, RolloutStatus | None, str | None]:
    """The rollout's sandbox, showing the agent what the harness needs and none of what the environment
    and the run hide (the environment's own code always); or the failure that stands for it."""
    task, harness, environment, launcher, proxy = req.task, req.harness, req.environment, req.launcher, req.proxy
    hidden = hidden_from_agent(environment, task)
    try:
        ro_paths = harness.sandbox_paths(hidden=[*hidden, *launcher.hidden_paths],
                                         environment_code=environment.source_paths())
    except ConfigError as e:  # agent files that name the environment's code: no sandbox for them
        return None, S.HARNESS_ERROR, f"{harness.name} is misconfigured: {e}"
    spec = SandboxSpec(rollout_id=rid, task=task, proxy_url=proxy.url, api_key=api_key,
                       proxy_uds=proxy.agent_uds, hidden_paths=hidden, ro_paths=ro_paths)
    t = time.monotonic()
    try:
        return await asyncio.wait_for(launcher.provision(spec), req.provision_timeout_s), None, None
    except asyncio.TimeoutError:
        return None, S.INFRA_ERROR, (f"{launcher.name} launcher did not provide a sandbox within "
                                     f"{req.provision_timeout_s:.0f}s")
    except Exception as e:
        return None, _launch_status(e), f"{launcher.name} launcher could not provision a sandbox: {_err(e)}"
    finally:
        timings["provision_s"] = time.monotonic() - t


def _launch_status(e: BaseException, default: RolloutStatus = S.INFRA_ERROR) -> RolloutStatus:
    """A :class:`SandboxFailure` carries the status it implies (a pod's ImagePullBackOff → env_error)."""
    return e.status if isinstance(e, SandboxFailure) else default


def _no_space(e: BaseException) -> bool:
    """Whether ``e`` (or what caused it) is "no space left on device" (``ENOSPC``, or a message
    carrying it from a command's output)."""
    seen: BaseException | None = e
    for _ in range(5):
        if seen is None:
            return False
        if (isinstance(seen, OSError) and seen.errno == errno.ENOSPC) or "No space left on device" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


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
        await sandbox.end_agent()  # nothing the agent left running may change what the verifier reads
        verdict = await asyncio.wait_for(environment.verify(task, sandbox), task.verify_timeout_s)
        if not isinstance(verdict, VerifyResult):  # a bare number, a bool, None: say so, not an AttributeError
            return None, S.ENV_ERROR, _not_a_verdict(environment, task, verdict)
        verdict.check_finite()  # NaN/Infinity is a broken verifier, never a score (nor "success")
        return verdict, None, None
    except asyncio.TimeoutError:
        return None, S.ENV_ERROR, f"verifier of {task.id} ran over {task.verify_timeout_s:.0f}s"
    except SandboxFileNotFound as e:  # the agent did not write what the verifier reads: its failure, trained
        meta["verify_missing_file"] = e.path
        return VerifyResult(reward=0.0, detail=f"a file the verifier reads is missing: {e}"), None, None
    except SandboxFileRefused as e:  # a FIFO, a link, a huge file where the verifier reads: the agent's doing
        meta["verify_refused_file"] = e.path
        return VerifyResult(reward=0.0, detail=f"a file the verifier reads was refused: {e}"), None, None
    except AgentOutputError as e:  # the verifier found the agent's output unusable: its failure, trained
        meta["verify_agent_fault"] = str(e)[:2000]
        return VerifyResult(reward=0.0, detail=f"the agent's output is unusable: {e}"[:4000]), None, None
    except ValueError as e:  # pydantic's ValidationError too: a verdict that is not a valid score
        return None, S.ENV_ERROR, f"verifier of {task.id} gave an invalid result: {_err(e)}"
    except Exception as e:
        meta["verifier_traceback"] = tail("".join(traceback.format_exception(type(e), e, e.__traceback__)), 2000)
        return None, _launch_status(e, S.ENV_ERROR), f"verifier of {task.id} raised {_err(e)}"
    finally:
        timings["verify_s"] = time.monotonic() - t


def _not_a_verdict(environment: Environment, task: Task, got: object) -> str:
    """The error of a ``verify`` that returned something other than a :class:`VerifyResult`."""
    hint = (f"VerifyResult(reward={got!r})" if isinstance(got, (int, float)) and not isinstance(got, bool)
            else 'VerifyResult.from_checks({"name": passed, ...})')
    return (f"verifier of {task.id} returned {type(got).__name__} {repr(got)[:80]}, not a VerifyResult: "
            f"{type(environment).__name__}.verify must return one, e.g. {hint}")


async def _finish(proxy: RolloutProxy, rid: str, facts: OutcomeFacts, rewards: dict[str, float],
                  env_name: str, metadata: dict[str, Any], metrics: dict[str, Any]) -> Trajectory | None:
    """Finish through the proxy, which applies the outcome rule to ``facts`` and the calls it recorded,
    after waiting for calls still in flight (a 200 is never missing from the trajectory), adds
    ``metadata`` / ``metrics`` and stores the trajectory once in its own store. None: the proxy failed."""
    try:
        return await proxy.afinish_rollout(rid, facts=facts, rewards=rewards, environment=env_name,
                                           metadata=metadata, metrics=metrics)
    except Exception:
        return None


async def _shielded(coro: Awaitable[T]) -> T:
    """Run cleanup to completion even if the surrounding task is being cancelled."""
    task = asyncio.ensure_future(coro)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        return await task


async def _store(store: TrajectorySink | None, traj: Trajectory) -> None:
    """Keep ``traj`` in ``store`` (if any) without blocking the event loop; a store error never fails
    the rollout."""
    if store is not None:
        with contextlib.suppress(Exception):
            await store.aput_trajectory(traj)
