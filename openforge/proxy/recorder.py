"""Per-rollout state and recording: who may call, which calls were served, and the trajectory.

Owns: :class:`RolloutState` (secret, calls, splice heads, stored Responses conversations, retry
cache), :class:`RolloutHandle` (what a harness needs: id, secret, base URLs) and :class:`Recorder`
(create / record / finish / get, backed by the :class:`~openforge.store.TrajectoryStore` when one is
given — ``append_call`` returns only once the call is durable — and by memory otherwise).
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ProxyError
from ..trajectory import Trajectory
from ..types import CallStatus, ModelCall, RolloutStatus
from .render import Head

__all__ = ["Recorder", "RolloutHandle", "RolloutState"]

MAX_HEADS = 16
MAX_RESPONSES = 64


@dataclass(frozen=True)
class _Stub:
    """Marks a finished rollout whose trajectory lives in the store only."""

    rollout_id: str


@dataclass(frozen=True)
class RolloutHandle:
    rollout_id: str
    api_key: str
    openai_base_url: str
    anthropic_base_url: str

    def to_json(self) -> dict[str, str]:
        return dict(self.__dict__)


@dataclass
class RolloutState:
    rollout_id: str
    task_id: str
    api_key: str
    harness: str | None = None
    environment: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)
    calls: list[ModelCall] = field(default_factory=list)
    next_index: int = 0
    heads: list[Head] = field(default_factory=list)
    responses: OrderedDict[str, list[dict[str, Any]]] = field(default_factory=OrderedDict)
    replay: dict[str, tuple[float, Any]] = field(default_factory=dict)
    inflight: dict[str, Any] = field(default_factory=dict)  # body hash -> asyncio.Future
    finished: Trajectory | _Stub | None = None

    def take_index(self) -> int:
        i = self.next_index
        self.next_index += 1
        return i

    def push_head(self, head: Head) -> None:
        self.heads = [h for h in self.heads if not (len(h.ids) <= len(head.ids) and head.ids[:len(h.ids)] == h.ids)]
        self.heads.append(head)
        del self.heads[:-MAX_HEADS]

    def remember_response(self, response_id: str, conversation: list[dict[str, Any]]) -> None:
        self.responses[response_id] = conversation
        while len(self.responses) > MAX_RESPONSES:
            self.responses.popitem(last=False)


class Recorder:
    """Rollout registry + durable call log."""

    def __init__(self, store: Any = None, *, detokenize: Callable[[list[int]], str] | None = None):
        self.store = store
        self.detokenize = detokenize
        self.rollouts: dict[str, RolloutState] = {}

    def create(self, task_id: str, harness: str | None = None, metadata: dict[str, Any] | None = None,
               environment: str | None = None, rollout_id: str | None = None) -> RolloutState:
        if not isinstance(task_id, str) or not task_id:
            raise ProxyError("'task_id' must be a non-empty string", 400, param="task_id")
        rid = rollout_id or f"ro_{secrets.token_hex(8)}"
        if rid in self.rollouts:
            raise ProxyError(f"rollout {rid!r} exists", 409, param="rollout_id")
        st = RolloutState(rollout_id=rid, task_id=task_id, api_key=f"sk-of-{secrets.token_urlsafe(24)}",
                          harness=harness, environment=environment, metadata=dict(metadata or {}))
        if self.store is not None:
            self.store.open_rollout(rid, task_id, harness=harness, environment=environment, metadata=st.metadata)
        self.rollouts[rid] = st
        return st

    def get(self, rollout_id: str) -> RolloutState | None:
        return self.rollouts.get(rollout_id)

    async def record(self, st: RolloutState, call: ModelCall) -> None:
        """Append ``call``; returns once it is durable (store) or kept (memory)."""
        if self.store is not None:
            aappend = getattr(self.store, "aappend_call", None)
            if aappend is not None:
                await aappend(st.rollout_id, call)
            else:
                self.store.append_call(st.rollout_id, call)
        st.calls.append(call)

    def snapshot(self, rollout_id: str) -> Trajectory | None:
        st = self.rollouts.get(rollout_id)
        if st is None:
            if self.store is not None:
                return self.store.get_trajectory(rollout_id)
            return None
        if st.finished is not None:
            return self._finished(st)
        return Trajectory(rollout_id=st.rollout_id, task_id=st.task_id, harness=st.harness,
                          environment=st.environment, calls=sorted(st.calls, key=lambda c: c.index),
                          metadata=st.metadata)

    def finish(self, rollout_id: str, *, reward: float | None = None, status: RolloutStatus | str | None = None,
               rewards: dict[str, float] | None = None, error: str | None = None,
               environment: str | None = None) -> Trajectory:
        st = self.rollouts.get(rollout_id)
        if st is None:
            raise ProxyError(f"unknown rollout {rollout_id!r}", 404, param="rollout_id", kind="not_found_error")
        if st.finished is not None:
            done = self._finished(st)
            if done is None:
                raise ProxyError(f"rollout {rollout_id!r} is finished and no longer held", 404, kind="not_found_error")
            return done
        calls = sorted(st.calls, key=lambda c: c.index)
        errors = [c.index for c in calls if c.status == CallStatus.ERROR]
        trailing_error = bool(calls) and calls[-1].status == CallStatus.ERROR
        status = RolloutStatus(status) if status is not None else None
        if status in (RolloutStatus.POLICY_FAILURE, RolloutStatus.TIMEOUT) and trailing_error:
            # The policy never got to answer its last call: an infra failure, discarded, never scored 0.
            error = error or f"overridden from {status.value}: the policy back-end failed on the last call " \
                             f"({calls[-1].error})"
            status = None
        if status is None:
            if trailing_error:
                status = RolloutStatus.INFRA_ERROR
                error = error or f"the policy back-end failed on call {calls[-1].index}: {calls[-1].error}"
            elif reward is not None:
                status = RolloutStatus.SUCCESS if reward > 0 else RolloutStatus.POLICY_FAILURE
            else:
                status = RolloutStatus.SUCCESS
        traj = Trajectory(
            rollout_id=st.rollout_id, task_id=st.task_id, harness=st.harness,
            environment=environment or st.environment, status=RolloutStatus(status),
            reward=float(reward or 0.0), rewards=dict(rewards or {}), calls=calls, error=error,
            metadata=st.metadata,
            metrics={"num_calls": len(calls), "backend_errors": errors,
                     "cancelled_calls": [c.index for c in calls if c.status == CallStatus.CANCELLED]},
        ).build(detokenize=self.detokenize)
        st.finished = traj
        st.heads.clear()
        st.replay.clear()
        st.responses.clear()
        if self.store is not None:
            self.store.put_trajectory(traj)
            # The store has it: keep only a stub in memory, so long runs do not grow without bound.
            self.rollouts[rollout_id] = RolloutState(rollout_id=st.rollout_id, task_id=st.task_id, api_key=st.api_key,
                                                     harness=st.harness, environment=st.environment,
                                                     finished=_Stub(traj.rollout_id))
        return traj

    def _finished(self, st: RolloutState) -> Trajectory | None:
        if isinstance(st.finished, _Stub):
            return self.store.get_trajectory(st.rollout_id) if self.store is not None else None
        return st.finished
