"""``OpenForgeAgentLoop``: one openforge rollout per veRL agent-loop session (verl 0.9.1, V1 trainer).

Owns: :class:`OpenForgeAgentLoop`, :class:`GroupBarrier` and the per-worker-process episode
runtime. Registered through ``actor_rollout_ref.rollout.agent.agent_loop_config_path`` (see
:mod:`openforge.train.verl.launch`); veRL creates one instance per session and passes the YAML
entry's extra keys as keyword arguments.

Per session: the task comes from the dataset row's ``extra_info["task"]``; the rollout runs through
an openforge proxy living in this AgentLoopWorker process whose back-end is
:class:`~openforge.train.verl.backend.VerlServerBackend` (token-in/token-out through
``server_manager.generate``, sticky on the rollout id), with the harness in a local or Kubernetes
sandbox; the verifier scores it; the trajectory's segments become one ``AgentLoopOutput`` each,
the reward on the last. A rollout that ends in an infrastructure failure fails its *whole group*:
all sessions of the uid meet at a :class:`GroupBarrier` and raise together, so veRL marks the
group failed with no trajectory (refilled when ``trainer.v1.sampler.sync_refill_failed_groups`` is
on, which the launcher sets) instead of training on a partial group or scoring the failure 0.

The session's rollout id (``{uid}-{session_id}-{random}``) is the proxy's rollout id too, so the
back-end serves every call with this session's own sampling params. The barrier is sized by the
row's ``extra_info["group_size"]``: the launcher writes ``rollout.n`` into training rows and
``val_kwargs.n`` (also as veRL's ``__rollout_n__``) into validation rows, because ``run()`` is not
told whether it validates. Nothing of a finished session stays in the worker: the proxy forgets
the rollout, the back-end its sampling and weight versions, the barrier its group.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase

from ...core.task import Task
from ...core.trajectory import Trajectory
from ...plugins import load_ref
from .backend import VerlServerBackend
from .outputs import to_agent_loop_outputs

__all__ = ["GroupBarrier", "OpenForgeAgentLoop"]

EpisodeRunner = Callable[[Task, str], Awaitable[Trajectory]]


class GroupBarrier:
    """The sessions of one task group report ok/failed; everyone learns whether all were ok."""

    def __init__(self, n: int, timeout_s: float):
        self.n = n
        self.timeout_s = timeout_s
        self.results: list[bool] = []
        self.reasons: list[str] = []
        self.done = asyncio.Event()
        self.readers = 0
        self.timed_out = False

    async def report(self, ok: bool, reason: str = "") -> bool:
        self.results.append(ok)
        if not ok:
            self.reasons.append(reason)
            self.done.set()  # one failure decides the group: siblings need not wait for the rest
        if len(self.results) >= self.n:
            self.done.set()
        try:
            await asyncio.wait_for(self.done.wait(), self.timeout_s)
        except asyncio.TimeoutError:
            self.timed_out = True
            self.reasons.append(f"only {len(self.results)}/{self.n} sessions reported within {self.timeout_s:.0f}s")
            return False
        finally:
            self.readers += 1
        return all(self.results) and len(self.results) >= self.n


def plain(value: Any) -> Any:
    """``value`` with every nested mapping a ``dict`` and every list a ``list``: veRL builds the agent loop
    from its YAML through OmegaConf, so the options arrive as ``DictConfig`` / ``ListConfig``, which the
    harnesses, launchers and environments (checking ``dict`` and ``list``, or pickling) do not take.

    >>> from omegaconf import OmegaConf
    >>> plain(OmegaConf.create({"generated": {"train": 8, "families": ["git-tag"]}}))
    {'generated': {'train': 8, 'families': ['git-tag']}}
    """
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [plain(v) for v in value]
    return value


_GROUPS: dict[str, GroupBarrier] = {}
_RUNTIMES: dict[int, Any] = {}


class OpenForgeAgentLoop(AgentLoopBase):
    """veRL agent loop running an unmodified harness against an in-process openforge proxy."""

    def __init__(self, *args: Any, harness: str = "react", harness_options: dict | None = None,
                 launcher: str = "local", launcher_options: dict | None = None, environment: str = "claw",
                 environment_options: dict | None = None, episode_timeout_s: float = 1800.0,
                 rollout_timeout_s: float | None = None, max_tokens: int = 1024, max_model_len: int | None = None,
                 runner: str | None = None, train_calls: str = "harness", **kwargs: Any):
        kwargs.pop("name", None)
        super().__init__(*args, **kwargs)
        self.episode_timeout_s = float(episode_timeout_s)
        self.max_tokens = int(max_tokens)
        self.max_model_len = int(max_model_len or self.rollout_config.get("max_model_len") or 32768)
        self.settings = {
            "harness": harness, "harness_options": plain(harness_options or {}),
            "launcher": launcher, "launcher_options": plain(launcher_options or {}),
            "environment": environment, "environment_options": plain(environment_options or {}),
            # a rollout's wall-clock budget (rollout.timeout_s; None: each task's timeout_s)
            "rollout_timeout_s": float(rollout_timeout_s) if rollout_timeout_s is not None else None,
            "train_calls": str(train_calls),  # rollout.train_calls: harness | all
        }
        self.runner_ref = runner
        key = id(self.server_manager)
        if key not in _RUNTIMES:
            backend = VerlServerBackend(self.server_manager, self.tokenizer, max_model_len=self.max_model_len)
            _RUNTIMES[key] = {"backend": backend, "runner": None, "lock": asyncio.Lock()}
        self.runtime = _RUNTIMES[key]

    @property
    def backend(self) -> VerlServerBackend:
        return self.runtime["backend"]

    async def _runner(self) -> EpisodeRunner:
        """The per-process episode runner (proxy + launcher + harness + environment), built once."""
        async with self.runtime["lock"]:
            if self.runtime["runner"] is None:
                if self.runner_ref:
                    factory = load_ref(self.runner_ref)
                else:
                    from ...runner.worker_runtime import episode_runner as factory
                self.runtime["runner"] = await factory(backend=self.backend, max_tokens=self.max_tokens,
                                                       **self.settings)
            return self.runtime["runner"]

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[Any]:
        uid = str(kwargs.get("uid", "nouid"))
        sid = kwargs.get("session_id", 0)
        step = int(kwargs.get("global_steps", 0) or 0)
        info = kwargs.get("extra_info") or {}
        task_json = info.get("task")
        if not task_json:
            raise ValueError("openforge agent loop: dataset row has no extra_info['task'] (build it with "
                             "openforge.train.verl.launch.build_dataset)")
        task = Task.model_validate_json(task_json) if isinstance(task_json, str) else Task.model_validate(task_json)
        # the group's seed is its uid (shared by its n sessions, new every step): GRPO siblings face the
        # same injected faults, and a task drawn again later gets a fresh draw
        task = task.model_copy(update={"metadata": {**task.metadata, "group_seed": uid}})
        n = int(info.get("group_size") or self.rollout_config.get("n") or 1)
        rollout_id = f"{uid}-{sid}-{uuid.uuid4().hex[:6]}"
        self.backend.open_rollout(rollout_id, sampling_params)  # this session's sampling, train or validation
        traj: Trajectory | None = None
        reason = ""
        t0 = time.monotonic()
        try:
            runner = await self._runner()
            traj = await asyncio.wait_for(runner(task, rollout_id), self.episode_timeout_s)
        except asyncio.TimeoutError:
            reason = f"episode exceeded {self.episode_timeout_s:.0f}s"
        except Exception as e:  # infra: sandbox, proxy, harness crash
            reason = f"{type(e).__name__}: {e}"
        finally:
            steps = self.backend.close_rollout(rollout_id)
        if traj is not None and not traj.trainable:
            reason = f"rollout {rollout_id} ended in {traj.status}: {traj.error or ''}".strip()
        elif traj is not None and traj.capture != "tokens":
            reason = (f"rollout {rollout_id} was captured as text (an answer came back without token ids); "
                      "text captures never enter a trainer")
        elif traj is not None and not any(s.num_trained_tokens for s in traj.segments):
            reason = f"rollout {rollout_id} recorded no trainable model call"
        ok = traj is not None and not reason
        barrier = _GROUPS.setdefault(uid, GroupBarrier(n, timeout_s=self.episode_timeout_s + 60))
        group_ok = await barrier.report(ok, reason)
        if barrier.readers >= barrier.n or barrier.timed_out:
            _GROUPS.pop(uid, None)
        if not group_ok:
            raise RuntimeError(f"openforge: infra failure in task group {uid} ({task.id}); the whole group fails "
                               "(veRL refills it with trainer.v1.sampler.sync_refill_failed_groups=true): "
                               + "; ".join(barrier.reasons))
        assert traj is not None
        lo, hi = steps if steps else (step, step)
        outs = to_agent_loop_outputs(traj, global_steps=step, min_global_steps=lo, max_global_steps=hi)
        for o in outs:
            o.metrics.generate_sequences = time.monotonic() - t0
        return outs
