"""Per-rollout state and recording: who may call, which calls were served, and the trajectory.

Owns: :class:`RolloutState` (secret, calls, splice heads, stored Responses conversations, retry
cache, the calls in flight), :class:`RolloutHandle` (what a harness needs: id, secret, base URLs) and
:class:`Recorder` (create / record / finish / get, backed by the :class:`~openforge.store.TrajectoryStore`
when one is given — ``append_call`` returns only once the call is durable — and by memory otherwise).

Every acknowledged call reaches the trajectory. Finishing a rollout (:meth:`Recorder.afinish`) first
closes it — a call that arrives from then on is refused with a 409 before it is served — then waits
up to ``wait_s`` for the calls already in flight and includes them; one still running after that is
cancelled, recorded ``cancelled`` (also included) and answered with a 409 instead of a 200. Then the
segments are built and validated once (in a worker thread) and the trajectory is written once, the
finish awaiting its durability without blocking the event loop (other rollouts keep streaming). A rollout
that was open when its proxy died is finished (or cancelled) from the store's call log by a proxy
restarted on the same store (:meth:`Recorder.open_rollouts` lists them).

Delivery. A call answered ``ok`` is recorded ``delivery_uncertain`` (durably, before its reply) and
confirmed once its reply went out whole (:meth:`Recorder.reply_done`, from :mod:`.delivery`); the
confirmation is written to the store too. A call never confirmed — the client left or the connection
broke mid-reply, or the proxy died while sending it — stays uncertain and trains no token. Finishing
waits (within ``wait_s``) for replies still being written; from the moment the trajectory is built,
confirmations no longer change it.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.call_origin import TrainCalls, check_train_calls
from ..core.errors import ProxyError
from ..core.finite import is_finite_number
from ..core.outcome import OutcomeFacts, check_verdict, classify_outcome
from ..core.trajectory import Trajectory
from ..core.types import CallStatus, ModelCall, RolloutStatus
from .render import Head

__all__ = ["Recorder", "RolloutHandle", "RolloutState"]

log = logging.getLogger("openforge.proxy")
MAX_HEADS = 16
_CONFIRMING: set[asyncio.Future[None]] = set()  # delivery confirmations being written
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
    gemini_base_url: str  # google.genai.Client(http_options={"base_url": ...}); the same root as Anthropic's

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
    closing: bool = False  # finish has begun: new calls are refused (409)
    serving: set[asyncio.Future[Any]] = field(default_factory=set)  # calls being served (cancellable)
    writing: set[asyncio.Future[Any]] = field(default_factory=set)  # durable writes under way (never cancelled)
    finishing: asyncio.Future[Trajectory] | None = None  # afinish under way: later finishes wait for it
    unconfirmed: dict[int, ModelCall] = field(default_factory=dict)  # answered, reply not confirmed delivered
    replying: dict[int, asyncio.Future[None]] = field(default_factory=dict)  # replies not over yet (finish waits)
    frozen: bool = False  # the trajectory is being built: delivery confirmations no longer change the calls

    @property
    def accepting(self) -> bool:
        return self.finished is None and not self.closing

    def track(self, task: asyncio.Future[Any], *, write: bool = False) -> None:
        """Count ``task`` as in flight until it is done (finish waits for it)."""
        group = self.writing if write else self.serving
        group.add(task)
        task.add_done_callback(group.discard)

    def busy(self) -> set[asyncio.Future[Any]]:
        return {t for t in self.serving | self.writing if not t.done()}

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

    def __init__(self, store: Any = None, *, detokenize: Callable[[list[int]], str] | None = None,
                 finish_wait_s: float = 10.0, train_calls: TrainCalls = "harness"):
        self.store = store
        self.detokenize = detokenize
        #: What the built segments train (``rollout.train_calls``, :mod:`openforge.core.call_origin`)
        self.train_calls: TrainCalls = check_train_calls(train_calls)
        self.finish_wait_s = finish_wait_s
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
        """Append ``call``; returns once it is durable (store) or kept (memory). The write runs to
        its end even if the caller is cancelled meanwhile, and finish waits for it: a call in the
        store is a call in the trajectory. A finished rollout takes no more calls (409)."""
        if st.finished is not None:
            raise ProxyError(f"rollout {st.rollout_id!r} was finished before call {call.index} could be recorded",
                             409)
        if call.delivery_uncertain and not st.frozen:  # its reply is still to be sent: confirmed by reply_done
            st.unconfirmed[call.index] = call
            st.replying[call.index] = asyncio.get_running_loop().create_future()
        if self.store is None:
            st.calls.append(call)
            return
        write = asyncio.ensure_future(self._durable(st, call))
        st.track(write, write=True)
        await asyncio.shield(write)

    async def _durable(self, st: RolloutState, call: ModelCall) -> None:
        aappend = getattr(self.store, "aappend_call", None)
        if aappend is not None:
            await aappend(st.rollout_id, call)
        else:
            self.store.append_call(st.rollout_id, call)
        st.calls.append(call)

    def reply_done(self, st: RolloutState, index: int, delivered: bool) -> None:
        """The reply carrying call ``index`` is over: ``delivered`` when it went out whole. A delivered
        reply (the first, or a retry's replay of it) confirms the call — in memory and in the store —
        unless the trajectory is already being built; otherwise the call stays ``delivery_uncertain``."""
        waiting = st.replying.pop(index, None)
        if waiting is not None and not waiting.done():
            waiting.set_result(None)
        call = st.unconfirmed.get(index)
        if not delivered or call is None or st.frozen:
            return
        del st.unconfirmed[index]
        call.delivery_uncertain = False
        if self.store is not None:  # queued before any later write of the trajectory (one writer, in order)
            write = self.store.amark_delivered(st.rollout_id, index)  # queued now, before any later write
            _CONFIRMING.add(write)  # not "in flight": a finish right after the reply need not wait for it
            write.add_done_callback(_confirmed)

    def open_rollouts(self) -> list[dict[str, Any]]:
        """Rollouts not finished yet: this proxy's own (``calls``, ``in_flight``) and, with a store,
        those left open by an earlier proxy on it (``orphaned``: finish or cancel them)."""
        out = [{"rollout_id": st.rollout_id, "task_id": st.task_id, "calls": len(st.calls),
                "in_flight": len(st.busy()), "orphaned": False}
               for st in self.rollouts.values() if st.finished is None]
        if self.store is not None:
            out += [{"rollout_id": r["rollout_id"], "task_id": r["task_id"], "calls": r["num_calls"], "in_flight": 0,
                     "orphaned": True}
                    for r in self.store.open_rollouts() if r["rollout_id"] not in self.rollouts]
        return out

    def _state(self, rollout_id: str) -> RolloutState | None:
        """The rollout's state: in memory, or rebuilt from the store's call log when an earlier
        proxy on the same store left it open (its harness's key is not restored: no more calls)."""
        st = self.rollouts.get(rollout_id)
        if st is not None or self.store is None:
            return st
        info = self.store.rollout(rollout_id)
        if info is None:
            return None
        st = RolloutState(rollout_id=rollout_id, task_id=info["task_id"], api_key=f"sk-of-{secrets.token_urlsafe(24)}",
                          harness=info["harness"], environment=info["environment"], metadata=info["metadata"],
                          created_at=info["created_at"])
        if info["finished"]:
            st.finished = _Stub(rollout_id)
        else:
            st.closing = True  # takes no more calls: it can only be finished or cancelled
            st.calls = self.store.calls(rollout_id)
            st.next_index = max((c.index for c in st.calls), default=-1) + 1
            st.metadata = {**st.metadata, "recovered": "the proxy restarted while this rollout was open; "
                                                        "finished from the store's call log"}
        self.rollouts[rollout_id] = st
        return st

    def snapshot(self, rollout_id: str) -> Trajectory | None:
        st = self._state(rollout_id)
        if st is None:
            return None
        if st.finished is not None:
            return self._finished(st)
        return Trajectory(rollout_id=st.rollout_id, task_id=st.task_id, harness=st.harness,
                          environment=st.environment, calls=sorted(st.calls, key=lambda c: c.index),
                          metadata=st.metadata)

    async def afinish(self, rollout_id: str, *, wait_s: float | None = None, reward: float | None = None,
                      status: RolloutStatus | str | None = None, rewards: dict[str, float] | None = None,
                      error: str | None = None, environment: str | None = None,
                      facts: OutcomeFacts | None = None, success_threshold: float = 1.0,
                      metadata: dict[str, Any] | None = None, metrics: dict[str, Any] | None = None) -> Trajectory:
        """Close the rollout (new calls get 409), wait up to ``wait_s`` (default ``finish_wait_s``) for
        the calls in flight, cancel (and record) any still running, then build the trajectory (segments
        built and validated once, in a worker thread) and store it once; returns when it is durable.
        Nothing of this blocks the event loop. ``metadata`` / ``metrics`` are added to the trajectory's
        own (the driver's timings and facts, stored with it rather than by a second write). A second
        finish of the same rollout waits for the first and returns its trajectory."""
        _check_rewards(reward, rewards)
        if facts is None:
            _check_verdict(status, reward, success_threshold)
        st = self._open_state(rollout_id)
        if st.finished is None and st.finishing is None:
            st.closing = True
            outcome = _Outcome(reward, status, rewards, error, environment, facts, success_threshold, metadata, metrics)
            st.finishing = asyncio.ensure_future(self._afinish(st, self.finish_wait_s if wait_s is None else wait_s,
                                                               outcome))
        if st.finishing is not None:
            return await asyncio.shield(st.finishing)  # the caller may give up; the finish still completes
        return self._done(st)

    async def _afinish(self, st: RolloutState, wait_s: float, outcome: _Outcome) -> Trajectory:
        try:
            await _drain(st, wait_s)
            traj = await asyncio.to_thread(self._build, st, outcome)
            self._seal(st, traj)
            if self.store is not None:
                await self.store.aput_trajectory(traj, validated=True)
                self._stub(st, traj)
            return traj
        except BaseException:  # not stored: a later finish tries again (the rollout stays closed)
            st.finished, st.finishing = None, None
            raise

    def _open_state(self, rollout_id: str) -> RolloutState:
        st = self._state(rollout_id)
        if st is None:
            raise ProxyError(f"unknown rollout {rollout_id!r}", 404, param="rollout_id", kind="not_found_error")
        return st

    def finish(self, rollout_id: str, *, reward: float | None = None, status: RolloutStatus | str | None = None,
               rewards: dict[str, float] | None = None, error: str | None = None,
               environment: str | None = None, facts: OutcomeFacts | None = None,
               success_threshold: float = 1.0) -> Trajectory:
        """Build, store and return the trajectory now. Refused (409, nothing changes) while calls
        are in flight: :meth:`afinish` waits for them. The status comes from the one outcome rule
        (:func:`~openforge.core.outcome.classify_outcome`) applied to ``facts`` (from ``run_rollout``) or,
        for an external driver, to its ``reward`` / ``status`` / ``error``, with the recorded calls."""
        _check_rewards(reward, rewards)
        if facts is None:
            _check_verdict(status, reward, success_threshold)
        st = self._open_state(rollout_id)
        pending = st.finishing is not None and not st.finishing.done()
        if st.finished is not None and not pending:
            return self._done(st)
        busy = st.busy()
        if busy or pending:
            what = f"has {len(busy)} call(s) in flight" if busy else "is being finished"
            raise ProxyError(f"rollout {rollout_id!r} {what}; finish it with "
                             "`await afinish_rollout(...)` (or POST /admin/rollouts/{id}/finish), which waits "
                             "for them", 409)
        st.frozen = True
        traj = self._build(st, _Outcome(reward, status, rewards, error, environment, facts, success_threshold))
        self._seal(st, traj)
        if self.store is not None:
            self.store.put_trajectory(traj, validated=True)
            self._stub(st, traj)
        return traj

    def _build(self, st: RolloutState, o: _Outcome) -> Trajectory:
        """The trajectory of ``st``'s recorded calls, with segments built and validated (once)."""
        calls = sorted(st.calls, key=lambda c: c.index)
        errors = [c.index for c in calls if c.status == CallStatus.ERROR]
        facts = o.facts
        if facts is None:  # an external driver: its own words, through the same rule
            given = (RolloutStatus(o.status) if o.status is not None
                     else (RolloutStatus.SUCCESS if o.reward is None else None))
            facts = OutcomeFacts(failure=given, error=o.error, reward=o.reward, success_threshold=o.success_threshold)
        outcome = classify_outcome(facts.with_calls(calls))
        return Trajectory(
            rollout_id=st.rollout_id, task_id=st.task_id, harness=st.harness,
            environment=o.environment or st.environment, status=outcome.status,
            reward=outcome.reward, rewards=dict(o.rewards or {}), calls=calls, error=outcome.error,
            metadata={**st.metadata, **(o.metadata or {})},
            metrics={"num_calls": len(calls), "backend_errors": errors,
                     "cancelled_calls": [c.index for c in calls if c.status == CallStatus.CANCELLED],
                     **(o.metrics or {})},
        ).build(detokenize=self.detokenize, train_calls=self.train_calls)

    @staticmethod
    def _seal(st: RolloutState, traj: Trajectory) -> None:
        st.finished = traj
        st.unconfirmed.clear()
        st.replying.clear()
        st.heads.clear()
        st.replay.clear()
        st.responses.clear()

    def _stub(self, st: RolloutState, traj: Trajectory) -> None:
        """The store has it: keep only a stub in memory, so long runs do not grow without bound."""
        self.rollouts[st.rollout_id] = RolloutState(rollout_id=st.rollout_id, task_id=st.task_id, api_key=st.api_key,
                                                    harness=st.harness, environment=st.environment,
                                                    finished=_Stub(traj.rollout_id))

    def _done(self, st: RolloutState) -> Trajectory:
        done = self._finished(st)
        if done is None:
            raise ProxyError(f"rollout {st.rollout_id!r} is finished and no longer held", 404, kind="not_found_error")
        return done

    def _finished(self, st: RolloutState) -> Trajectory | None:
        if isinstance(st.finished, _Stub):
            return self.store.get_trajectory(st.rollout_id) if self.store is not None else None
        return st.finished


@dataclass(frozen=True)
class _Outcome:
    """What a finish was told: the driver's verdict and what it adds to the trajectory."""

    reward: float | None = None
    status: RolloutStatus | str | None = None
    rewards: dict[str, float] | None = None
    error: str | None = None
    environment: str | None = None
    facts: OutcomeFacts | None = None
    success_threshold: float = 1.0
    metadata: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None


def _check_rewards(reward: float | None, rewards: dict[str, float] | None) -> None:
    """A reward is a finite number: NaN/Infinity would be trained on (or break the store)."""
    if reward is not None and not is_finite_number(reward):
        raise ProxyError(f"'reward' must be a finite number, got {reward!r}", 400, param="reward")
    bad = {k: v for k, v in (rewards or {}).items() if not is_finite_number(v)}
    if bad:
        raise ProxyError(f"'rewards' must hold finite numbers, got {bad}", 400, param="rewards")


def _check_verdict(status: RolloutStatus | str | None, reward: float | None, success_threshold: float) -> None:
    """An external driver's ``status`` and ``reward`` must agree (422, nothing changes, when they do not)."""
    try:
        check_verdict(status, reward, success_threshold)
    except ValueError as e:
        raise ProxyError(f"contradictory verdict: {e}", 422, param="status") from None


def _confirmed(write: asyncio.Future[None]) -> None:
    _CONFIRMING.discard(write)
    if not write.cancelled() and write.exception() is not None:  # the call reads back uncertain: safe, but say so
        log.warning("a delivery confirmation was not written: %s", write.exception())


async def _drain(st: RolloutState, wait_s: float) -> None:
    """Wait up to ``wait_s`` for ``st``'s calls in flight, cancel those still being served (each
    records itself ``cancelled``), wait what is left of ``wait_s`` for replies still being written,
    freeze the calls' delivery state (``st.frozen``), then wait for every durable write to end."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(wait_s, 0.0)
    serving = {t for t in st.serving if not t.done()}
    if serving:
        _, late = await asyncio.wait(serving, timeout=max(wait_s, 0.0))
        for t in late:
            t.cancel("the rollout was finished")
    replying = {f for f in st.replying.values() if not f.done()}
    if replying:  # a reply still going out: its call stays uncertain if it does not end in time
        await asyncio.wait(replying, timeout=max(deadline - loop.time(), 0.0))
    st.frozen = True
    while True:
        busy = st.busy()
        if not busy:
            return
        await asyncio.wait(busy)
